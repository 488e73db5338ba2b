//! The SQS edge of the workers: partial batch failures, never a silent acknowledgement.

use std::sync::Arc;

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use integration_tests::{Db, memory};
use memory_core::{
    domain::MemoryStatus,
    lifecycle::dedup::Deduper,
    llm::{InvocationPurpose, ScriptedLlm},
    store,
};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use uuid::Uuid;

fn message(id: &str, body: String) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some(id.to_string());
    m.body = Some(body);
    m
}

fn worker(db: &Db) -> workers::Worker<Deduper> {
    let llm =
        Arc::new(ScriptedLlm::new().on(InvocationPurpose::MemoryDedup, |_| {
            Ok(r#"{"decisions":[{"pair":0,"decision":"supersede_a"}]}"#.into())
        }));
    workers::Worker::new(db.app.clone(), Deduper::new(llm, None))
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_mixed_batch_reports_exactly_the_messages_that_failed(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let a = memory(org, "old wording").insert(&db).await;
    let b = memory(org, "new wording").insert(&db).await;
    let c = memory(org, "other wording").insert(&db).await;
    // The screen recorded a and b as near duplicates; nothing recorded b and c.
    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    store::dedup::defer_pair(&mut *tx, org, a.id, b.id, 0.93).await.unwrap();
    tx.commit().await.unwrap();
    let pairs = |pairs: &[(Uuid, Uuid)]| {
        let listed: Vec<String> = pairs.iter().map(|(a, b)| format!(r#"{{"a":"{a}","b":"{b}"}}"#)).collect();
        format!(r#"{{"organization_id":"{org}","pairs":[{}]}}"#, listed.join(","))
    };
    let mut event = SqsEvent::default();
    event.records = vec![
        message("good", pairs(&[(a.id, b.id)])),
        message("malformed", "{not json".into()),
        message("wrong-shape", format!(r#"{{"organization_id":"{org}","pairs":"all"}}"#)),
        message("unknown-memory", pairs(&[(a.id, Uuid::now_v7())])),
        message("never-screened", pairs(&[(b.id, c.id)])),
        message("eleven", pairs(&vec![(a.id, b.id); 11])),
    ];
    let response = aws_edge::sqs::process(&worker(&db), None, event).await.unwrap();
    let failed: Vec<&str> = response.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
    assert_eq!(failed, vec!["malformed", "wrong-shape", "unknown-memory", "never-screened", "eleven"]);
    let reviewed: i64 = sqlx::query_scalar("SELECT count(*) FROM memory_dedup_pair WHERE organization_id = $1")
        .bind(org)
        .fetch_one(&db.admin)
        .await
        .unwrap();
    assert_eq!(reviewed, 1, "no pair reviewed but the screened one");

    let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
    let a_now = store::memories::get(&mut *tx, org, a.id).await.unwrap().unwrap();
    assert_eq!((a_now.status, a_now.superseded_by), (MemoryStatus::Superseded, Some(b.id)));
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_job_without_pairs_claims_the_deferred_pairs(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org: Uuid = "0a000000-0000-4000-8000-000000000001".parse().unwrap();
    let a = memory(org, "old wording").insert(&db).await;
    let b = memory(org, "new wording").insert(&db).await;
    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    assert!(store::dedup::defer_pair(&mut *tx, org, a.id, b.id, 0.93).await.unwrap());
    assert!(!store::dedup::defer_pair(&mut *tx, org, b.id, a.id, 0.93).await.unwrap(), "one row per unordered pair");
    tx.commit().await.unwrap();

    // The real-shaped sample event names this organisation and no pairs.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../events/sqs-dedup-review.json");
    let event: SqsEvent = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let response = aws_edge::sqs::process(&worker(&db), None, event).await.unwrap();
    assert!(response.batch_item_failures.is_empty());

    let (first, second) = if a.id < b.id { (a.id, b.id) } else { (b.id, a.id) };
    let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
    let decision = store::dedup::decision(&mut *tx, org, first, second).await.unwrap();
    assert_ne!(decision, Some(memory_core::domain::DedupDecision::Deferred));
    let superseded = [a.id, b.id];
    let mut statuses = Vec::new();
    for id in superseded {
        statuses.push(store::memories::get(&mut *tx, org, id).await.unwrap().unwrap().status);
    }
    assert!(statuses.contains(&MemoryStatus::Superseded) && statuses.contains(&MemoryStatus::Active));
}

#[tokio::test]
async fn a_record_without_a_message_id_fails_the_whole_batch() {
    let pool = sqlx::postgres::PgPoolOptions::new().connect_lazy("postgres://localhost/unused").unwrap();
    let worker = workers::Worker::new(pool, Deduper::new(Arc::new(ScriptedLlm::new()), None));
    let mut event = SqsEvent::default();
    let mut record = message("x", "{}".into());
    record.message_id = None;
    event.records = vec![record];
    assert!(aws_edge::sqs::process(&worker, None, event).await.is_err());
}
