//! The local stack's SQS queues (with dead-letter queues) and event bus, through the real AWS SDK against moto,
//! and the outbox relay publishing to that bus.

use std::{sync::Arc, time::Duration};

use aws_edge::relay::EventBridgeSink;
use integration_tests::{Db, memory};
use memory_core::{
    outbox::OutboxRelay,
    store::{self, transitions},
};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use uuid::Uuid;

fn bus() -> String {
    std::env::var("MEMORY_EVENT_BUS").unwrap_or_else(|_| "agent-memory".into())
}

async fn sdk_config() -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(std::env::var("AWS_ENDPOINT_URL").expect("AWS_ENDPOINT_URL (run through `make test`)"))
        .load()
        .await
}

#[tokio::test]
async fn every_worker_queue_exists_with_a_dead_letter_queue() {
    let sqs = aws_sdk_sqs::Client::new(&sdk_config().await);
    for name in ["memory-ingest", "memory-dedup", "memory-contradiction", "memory-synthesis", "memory-file-scan"] {
        let url = sqs.get_queue_url().queue_name(name).send().await.unwrap().queue_url.unwrap();
        let attributes = sqs
            .get_queue_attributes()
            .queue_url(&url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy)
            .send()
            .await
            .unwrap()
            .attributes
            .unwrap();
        let policy = &attributes[&aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy];
        assert!(policy.contains(&format!("{name}-dlq")), "{name}: {policy}");
    }
}

#[tokio::test]
async fn the_event_bus_accepts_domain_events() {
    let events = aws_sdk_eventbridge::Client::new(&sdk_config().await);
    let entry = aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
        .event_bus_name(bus())
        .source("agent-memory.test")
        .detail_type("memory.superseded")
        .detail(r#"{"memory_id":"00000000-0000-0000-0000-000000000000"}"#)
        .build();
    let output = events.put_events().entries(entry).send().await.unwrap();
    assert_eq!(output.failed_entry_count, 0);
}

async fn unpublished(db: &Db, org: Uuid) -> i64 {
    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    sqlx::query_scalar("SELECT count(*) FROM domain_event_outbox WHERE organization_id = $1 AND published_at IS NULL")
        .bind(org)
        .fetch_one(&mut *tx)
        .await
        .unwrap()
}

/// A queue receiving every event of `org` from the bus (through a rule), and its URL.
async fn queue_for_events_of(sdk: &aws_config::SdkConfig, org: Uuid) -> String {
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let name = format!("outbox-{}", org.simple());
    let url = sqs.create_queue().queue_name(&name).send().await.unwrap().queue_url.unwrap();
    let arn_name = aws_sdk_sqs::types::QueueAttributeName::QueueArn;
    let attributes = sqs.get_queue_attributes().queue_url(&url).attribute_names(arn_name.clone()).send().await.unwrap();
    let arn = attributes.attributes.unwrap()[&arn_name].clone();
    let events = aws_sdk_eventbridge::Client::new(sdk);
    let pattern = serde_json::json!({"source": [aws_edge::relay::SOURCE], "detail": {"organization_id": [org]}});
    events.put_rule().name(&name).event_bus_name(bus()).event_pattern(pattern.to_string()).send().await.unwrap();
    let target = aws_sdk_eventbridge::types::Target::builder().id("queue").arn(arn).build().unwrap();
    events.put_targets().rule(&name).event_bus_name(bus()).targets(target).send().await.unwrap();
    url
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn outbox_events_reach_the_bus_and_wait_in_the_outbox_while_it_is_unreachable(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let old = memory(org, "old wording").insert(&db).await;
    let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
    let new = transitions::create(&mut tx, &memory(org, "new wording").new, &[old.id]).await.unwrap();
    transitions::supersede(&mut tx, org, old.id, new.id, "test").await.unwrap();
    tx.commit().await.unwrap();
    let mut outbox_ids: Vec<String> = {
        let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
        sqlx::query_scalar("SELECT id::text FROM domain_event_outbox WHERE organization_id = $1")
            .bind(org)
            .fetch_all(&mut *tx)
            .await
            .unwrap()
    };
    outbox_ids.sort();
    assert_eq!(outbox_ids.len(), 2);

    let sdk = sdk_config().await;
    let queue = queue_for_events_of(&sdk, org).await;
    let unreachable = aws_sdk_eventbridge::config::Builder::from(&sdk).endpoint_url("http://127.0.0.1:9").build();
    let down = OutboxRelay::new(
        db.app.clone(),
        Arc::new(EventBridgeSink::new(aws_sdk_eventbridge::Client::from_conf(unreachable), bus())),
    );
    assert!(down.flush(org).await.is_err());
    assert_eq!(unpublished(&db, org).await, 2, "nothing is lost while the bus is down");

    let up =
        OutboxRelay::new(db.app.clone(), Arc::new(EventBridgeSink::new(aws_sdk_eventbridge::Client::new(&sdk), bus())));
    assert_eq!(up.flush(org).await.unwrap(), 2);
    assert_eq!(unpublished(&db, org).await, 0);
    assert_eq!(up.sweep().await.unwrap().published, 0, "a published row is not sent again");

    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let mut received = Vec::new();
    for _ in 0..20 {
        let batch = sqs.receive_message().queue_url(&queue).max_number_of_messages(10).send().await.unwrap();
        for message in batch.messages() {
            let event: serde_json::Value = serde_json::from_str(message.body().unwrap()).unwrap();
            assert_eq!(event["source"], aws_edge::relay::SOURCE);
            received.push(event["detail"]["outbox_id"].as_str().unwrap().to_string());
        }
        if received.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    received.sort();
    assert_eq!(received, outbox_ids);
}
