//! Memories past their expiry: never returned, and returned from the archive only when asked.

use std::sync::Arc;

use integration_tests::{Db, axis, memory, vector_with_similarity};
use memory_core::{domain::MemoryStatus, lifecycle::sweep, store};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use uuid::Uuid;

/// Organisations per scheduled run, as deployed: more than any test has.
const ALL: i64 = memory_core::outbox::DEFAULT_SWEEP_ORGANIZATIONS;

async fn reload(db: &Db, org: Uuid, id: Uuid) -> memory_core::domain::Memory {
    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    store::memories::get(&mut *tx, org, id).await.unwrap().unwrap()
}

/// Expiry and the archive through the ingest path and the schedule: a memory past its time to live is returned by
/// no mode or strategy, the lifecycle sweep archives it, and `include_archive` returns the archived and superseded
/// memories marked with their status and successor (never in passive mode).
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn expired_memories_are_never_returned_and_the_archive_is_returned_only_when_asked(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    use memory_core::{
        ingest::{Admission, IngestBatch, Ingestor},
        retrieval::{RetrievalMode, RetrievalRequest, SearchRequest, Strategy},
        store::SearchFilters,
    };
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let texts = ["deploy window for billing-api is friday", "deploy window for billing-api is monday"];
    let query = "deploy window billing-api";
    let embedder = Arc::new(
        integration_tests::FixedEmbedder::default()
            .with(texts[0], axis(0))
            .with(texts[1], vector_with_similarity(0.95, 1))
            .with(query, axis(0)),
    );
    let two_hours_ago = chrono::Utc::now() - chrono::TimeDelta::hours(2);
    let batch = |id: &str, memories: serde_json::Value| -> IngestBatch {
        serde_json::from_value(serde_json::json!({"organization_id": org, "batch_id": id, "memories": memories}))
            .unwrap()
    };
    let provenance = serde_json::json!({"source_kind": "human", "source_ref": "alice", "trust_level": "verified"});
    let ingestor = Ingestor::new(db.app.clone(), embedder.clone());
    let both = batch(
        "both",
        serde_json::json!([{"content": texts[0], "memory_type": "semantic", "scope": "org",
        "ttl_seconds": 60, "expires_at": chrono::Utc::now(), "provenance": provenance}]),
    );
    assert!(ingestor.ingest(&both, Admission::Active).await.is_err(), "ttl_seconds or expires_at, not both");
    let receipt = ingestor
        .ingest(
            &batch(
                "b",
                serde_json::json!([
                {"content": texts[0], "memory_type": "semantic", "scope": "org", "created_at": two_hours_ago,
                 "ttl_seconds": 3600, "provenance": provenance},
                {"content": texts[1], "memory_type": "semantic", "scope": "org", "provenance": provenance}]),
            ),
            Admission::Active,
        )
        .await
        .unwrap();
    let (expired, current) = (receipt.memory_ids[0], receipt.memory_ids[1]);

    let retriever = integration_tests::shipped_retriever(&db, embedder);
    let ask = |mode, archive| {
        let mut request = RetrievalRequest::new(org, mode, query);
        if mode == RetrievalMode::Passive {
            request.session = Some(memory_core::retrieval::SessionTurn { session_id: "s".into(), turn: 1 });
        }
        request.include_archive = archive;
        request
    };
    let ids = |result: Vec<memory_core::domain::Memory>| result.into_iter().map(|m| m.id).collect::<Vec<_>>();
    for mode in [RetrievalMode::AgentQuery, RetrievalMode::Passive] {
        let found = retriever.query(ask(mode, false)).await.unwrap().memories;
        assert_eq!(ids(found.into_iter().map(|m| m.memory).collect()), [current], "{mode:?}");
    }
    for strategy in [Strategy::Vector, Strategy::Keyword, Strategy::Hybrid, Strategy::Metadata] {
        let request = SearchRequest { max_results: 10, ..SearchRequest::new(org, strategy, query) };
        let hits = retriever.search(request).await.unwrap().hits;
        assert_eq!(ids(hits.into_iter().map(|h| h.memory).collect()), [current], "{strategy:?}");
    }

    // The schedule archives what expired.
    let report = sweep::run(&db.app, chrono::TimeDelta::hours(2), ALL).await.unwrap();
    assert_eq!(report.archived_expired, 1);
    assert_eq!(reload(&db, org, expired).await.status, MemoryStatus::Archived);
    assert_eq!(sweep::run(&db.app, chrono::TimeDelta::hours(2), ALL).await.unwrap().archived_expired, 0);

    // A newer memory supersedes the current one; the archive shows all three, marked.
    let newer = memory(org, "deploy window for billing-api is tuesday").embedding(axis(0)).insert(&db).await;
    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    store::transitions::supersede(&mut tx, org, current, newer.id, "test").await.unwrap();
    tx.commit().await.unwrap();
    let found = retriever.query(ask(RetrievalMode::AgentQuery, true)).await.unwrap().memories;
    let marked: std::collections::HashMap<Uuid, (MemoryStatus, Option<Uuid>)> =
        found.iter().map(|m| (m.memory.id, (m.memory.status, m.memory.superseded_by))).collect();
    assert_eq!(marked.get(&newer.id), Some(&(MemoryStatus::Active, None)));
    assert_eq!(marked.get(&current), Some(&(MemoryStatus::Superseded, Some(newer.id))));
    assert_eq!(marked.get(&expired), Some(&(MemoryStatus::Archived, None)));
    let without = retriever.query(ask(RetrievalMode::AgentQuery, false)).await.unwrap().memories;
    assert_eq!(ids(without.into_iter().map(|m| m.memory).collect()), [newer.id]);
    let mut search = SearchRequest {
        filters: SearchFilters { include_archive: true, ..SearchFilters::default() },
        max_results: 10,
        ..SearchRequest::new(org, Strategy::Hybrid, query)
    };
    assert_eq!(retriever.search(search.clone()).await.unwrap().hits.len(), 3);
    search.filters.include_archive = false;
    assert_eq!(retriever.search(search).await.unwrap().hits.len(), 1);
    let refused = retriever.query(ask(RetrievalMode::Passive, true)).await.unwrap_err();
    assert!(refused.to_string().contains("passive"), "{refused}");
}
