//! The scheduled maintenance: the prune deletes what is kept no longer and nothing else, and each sweep visits a
//! bounded number of organisations in turn.

use std::sync::Arc;

use integration_tests::{Db, axis};
use memory_core::lifecycle::sweep;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use uuid::Uuid;

/// Organisations per scheduled run, as deployed: more than any test has.
const ALL: i64 = memory_core::outbox::DEFAULT_SWEEP_ORGANIZATIONS;

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn prune_deletes_what_is_kept_no_longer_and_nothing_else(opts: PgPoolOptions, conn: PgConnectOptions) {
    use memory_core::ingest::{Admission, IngestBatch, Ingestor};
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let embedder =
        Arc::new(integration_tests::FixedEmbedder::default().with("a fact", axis(0)).with("b fact", axis(1)));
    let message = |id: &str, text: &str| -> IngestBatch {
        serde_json::from_value(serde_json::json!({"organization_id": org, "batch_id": id, "memories": [{
            "content": text, "memory_type": "semantic", "scope": "org",
            "provenance": {"source_kind": "human", "source_ref": "alice", "trust_level": "verified"}}]}))
        .unwrap()
    };
    let ingestor = Ingestor::new(db.app.clone(), embedder);
    ingestor.ingest(&message("old", "a fact"), Admission::Candidate).await.unwrap();
    // What happened more than the retention ago: published, sent, recorded.
    let age = |sql: &'static str| {
        let db = &db;
        async move { sqlx::query(sql).bind(org).execute(&db.admin).await.unwrap() }
    };
    age("UPDATE domain_event_outbox SET published_at = now() - interval '8 days' WHERE organization_id = $1").await;
    age("UPDATE memory_job_outbox SET sent_at = now() - interval '8 days' WHERE organization_id = $1").await;
    age("UPDATE memory_ingest_batch SET created_at = now() - interval '16 days' WHERE organization_id = $1").await;
    // What is recent or still waiting.
    ingestor.ingest(&message("new", "b fact"), Admission::Candidate).await.unwrap();

    let report = sweep::prune(&db.app, ALL).await.unwrap();

    assert_eq!((report.events, report.jobs, report.batches), (1, 1, 1), "{report:?}");
    let count = |sql: &'static str| {
        let db = &db;
        async move { sqlx::query_scalar::<_, i64>(sql).bind(org).fetch_one(&db.admin).await.unwrap() }
    };
    assert_eq!(count("SELECT count(*) FROM domain_event_outbox WHERE organization_id = $1").await, 1);
    assert_eq!(count("SELECT count(*) FROM memory_job_outbox WHERE organization_id = $1").await, 1);
    assert_eq!(count("SELECT count(*) FROM memory_ingest_batch WHERE organization_id = $1").await, 1);
    assert_eq!(count("SELECT count(*) FROM memory WHERE organization_id = $1").await, 2, "memories stay");
}

/// The lifecycle sweep and the prune visit a bounded number of organisations per run, each its own turn, least
/// recently visited first: every organisation within as many runs as there are organisations over the bound.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn scheduled_sweeps_visit_a_bounded_number_of_organisations_per_run_in_turn(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    use memory_core::ingest::{Admission, IngestBatch, Ingestor};
    let db = Db::new(opts, conn).await;
    let embedder = Arc::new(integration_tests::FixedEmbedder::default().with("a fact", axis(0)));
    let ingestor = Ingestor::new(db.app.clone(), embedder);
    let orgs: Vec<Uuid> = (0..3).map(|_| Uuid::now_v7()).collect();
    for org in &orgs {
        let message: IngestBatch = serde_json::from_value(serde_json::json!({"organization_id": org, "batch_id": "b",
            "memories": [{"content": "a fact", "memory_type": "semantic", "scope": "org", "confidence": 0.8,
            "provenance": {"source_kind": "human", "source_ref": "alice", "trust_level": "verified"}}]}))
        .unwrap();
        ingestor.ingest(&message, Admission::Candidate).await.unwrap();
    }
    let active = async || -> Vec<Uuid> {
        let sql = "SELECT DISTINCT organization_id FROM memory WHERE status = 'active' ORDER BY 1";
        sqlx::query_scalar(sql).fetch_all(&db.admin).await.unwrap()
    };
    let mut visited = Vec::new();
    for run in 1..=3 {
        let report = sweep::run(&db.app, chrono::TimeDelta::zero(), 1).await.unwrap();
        assert_eq!(report.promoted_unchecked, 1, "run {run} decides one organisation's candidate");
        let now = active().await;
        visited.extend(now.iter().filter(|o| !visited.contains(*o)).copied().collect::<Vec<_>>());
        assert_eq!(visited.len(), run, "run {run} visited an organisation not visited before");
    }
    assert_eq!(visited.iter().copied().collect::<std::collections::BTreeSet<_>>(), orgs.iter().copied().collect());

    // The prune keeps its own turns: its first run starts with the least recently pruned, not where the sweep ended.
    sqlx::query("UPDATE domain_event_outbox SET published_at = now() - interval '8 days'")
        .execute(&db.admin)
        .await
        .unwrap();
    let pruned: Vec<u64> = {
        let mut pruned = Vec::new();
        for _ in 0..3 {
            pruned.push(sweep::prune(&db.app, 2).await.unwrap().events);
        }
        pruned
    };
    let per_org = sqlx::query_scalar::<_, i64>("SELECT count(*) FROM domain_event_outbox").fetch_one(&db.admin).await;
    assert_eq!(per_org.unwrap(), 0, "three runs of two reach all three organisations: {pruned:?}");
    assert!(pruned[0] > 0 && pruned[1] > 0, "each run pruned its organisations: {pruned:?}");
}
