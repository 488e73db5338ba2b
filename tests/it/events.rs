//! Every sample event in `events/` deserializes into its trigger's type and drives the real handler against the
//! local database: API Gateway requests through the router, SQS batches through each worker (only the records
//! whose id says `malformed` or `refused` fail), scheduled tasks through the scheduler.

use std::{path::PathBuf, sync::Arc};

use aws_edge::relay::{EventBridgeSink, SqsJobSink};
use aws_edge::sqs::JobHandler;
use aws_lambda_events::event::sqs::SqsEvent;
use axum::http::StatusCode;
use integration_tests::{Db, memory, minilm, retriever};
use memory_core::{
    embed::Embedder,
    ingest::Ingestor,
    lifecycle::{
        contradiction::ContradictionDetector, dedup::Deduper, file_scan::FileScanner, synthesis::EntitySynthesizer,
    },
    llm::OfflineLlm,
    outbox::OutboxRelay,
    store,
};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tower::ServiceExt;
use uuid::Uuid;

const ORG: Uuid = uuid::uuid!("0a000000-0000-4000-8000-000000000001");
/// The memory and entity the SQS samples name.
const MEMORY: Uuid = uuid::uuid!("3c000000-0000-4000-8000-000000000001");
const ENTITY: Uuid = uuid::uuid!("5e000000-0000-4000-8000-000000000001");

fn events_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../events"))
}

/// Applies an SQS sample with a worker; returns the ids of the records that failed.
async fn drive<H: JobHandler>(handler: &H, event: SqsEvent) -> Vec<String> {
    let response = aws_edge::sqs::process(handler, None, event).await.expect("every record has an id");
    response.batch_item_failures.into_iter().map(|f| f.item_identifier).collect()
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn every_sample_event_drives_its_handler(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let text = "Deploy billing-api with the release pipeline";
    let vector = minilm().embed_one(text).await.unwrap();
    memory(ORG, text).embedding(vector.clone()).insert(&db).await;
    let mut tx = store::begin_for_org(&db.admin, ORG).await.unwrap();
    sqlx::query(
        "INSERT INTO memory (organization_id, id, scope, memory_type, status, content, embedding, confidence) \
         VALUES ($1, $2, 'org', 'semantic', 'candidate', 'billing-api deploys on Tuesdays', $3, 0.6)",
    )
    .bind(ORG)
    .bind(MEMORY)
    .bind(pgvector::Vector::from(vector))
    .execute(&mut *tx)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO memory_entity (organization_id, id, name, entity_type) VALUES ($1, $2, 'billing-api', 'service')",
    )
    .bind(ORG)
    .bind(ENTITY)
    .execute(&mut *tx)
    .await
    .unwrap();
    store::entities::add_mention(&mut *tx, ORG, ENTITY, MEMORY).await.unwrap();
    tx.commit().await.unwrap();

    let app = integration_tests::sample_event_app(retriever(&db, minilm(), None));
    let repos = std::env::temp_dir().join(format!("events-{}", Uuid::now_v7()));
    let sdk = integration_tests::local_aws().await;
    let bus = std::env::var("MEMORY_EVENT_BUS").unwrap_or_else(|_| "agent-memory".into());
    let relay =
        OutboxRelay::new(db.app.clone(), Arc::new(EventBridgeSink::new(aws_sdk_eventbridge::Client::new(&sdk), bus)))
            .with_jobs(Arc::new(SqsJobSink::new(aws_sdk_sqs::Client::new(&sdk), Default::default())));

    let mut files: Vec<PathBuf> = std::fs::read_dir(events_dir()).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let mut driven = 0;
    for path in files {
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        if name.starts_with("apigw-v2-") {
            let request = lambda_http::request::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            let status = app.clone().oneshot(request).await.unwrap().status();
            let expected = if name.contains("forbidden") { StatusCode::FORBIDDEN } else { StatusCode::OK };
            assert_eq!(status, expected, "{name}");
        } else if name.starts_with("sqs-") {
            let event: SqsEvent = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            let expected: Vec<String> = event
                .records
                .iter()
                .filter_map(|r| r.message_id.clone())
                .filter(|id| id.contains("malformed") || id.contains("refused"))
                .collect();
            let queue = event.records[0].event_source_arn.as_deref().unwrap().rsplit(':').next().unwrap().to_string();
            let pool = db.app.clone();
            let failed = match queue.as_str() {
                "memory-ingest" => {
                    drive(&workers::Worker::new(pool.clone(), Ingestor::new(pool, minilm())), event).await
                }
                "memory-dedup" => {
                    drive(&workers::Worker::new(pool, Deduper::new(Arc::new(OfflineLlm), None)), event).await
                }
                "memory-contradiction" => {
                    let detector = ContradictionDetector::new(Arc::new(OfflineLlm));
                    drive(&workers::Worker::new(pool, detector), event).await
                }
                "memory-synthesis" => {
                    let synthesizer = EntitySynthesizer::new(Arc::new(OfflineLlm), None);
                    drive(&workers::Worker::new(pool, synthesizer), event).await
                }
                "memory-file-scan" => {
                    let scanner = FileScanner::new(Arc::new(memory_core::repository::DirectoryReader::new(&repos)));
                    drive(&workers::Worker::new(pool, scanner), event).await
                }
                other => panic!("{name}: no worker for queue {other}"),
            };
            assert_eq!(failed, expected, "{name}");
        } else if name.starts_with("scheduled-") {
            use scheduler::Task;
            let task: Task = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            // Maintenance tasks run with the deployment's owner connection; the others run here.
            if matches!(task, Task::OutboxSweep | Task::LifecycleSweep | Task::Prune | Task::FileScan) {
                scheduler::run(task, Some((&db.app, &relay))).await.unwrap_or_else(|e| panic!("{name}: {e}"));
            }
        } else {
            panic!("{name}: an event file of no known trigger");
        }
        driven += 1;
    }
    assert!(driven >= 15, "{driven} sample events");
    let mut tx = store::begin_for_org(&db.app, ORG).await.unwrap();
    let checked = store::memories::get(&mut *tx, ORG, MEMORY).await.unwrap().unwrap();
    assert_eq!(checked.status, memory_core::domain::MemoryStatus::Active, "the contradiction sample promoted it");
    assert!(store::entities::get(&mut *tx, ORG, ENTITY).await.unwrap().unwrap().synthesis_memory_id.is_some());
}
