//! The local stack's SQS queues (with dead-letter queues) and event bus, through the real AWS SDK against moto.

async fn sdk_config() -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(std::env::var("AWS_ENDPOINT_URL").expect("AWS_ENDPOINT_URL (run through `make test`)"))
        .load()
        .await
}

#[tokio::test]
async fn every_worker_queue_exists_with_a_dead_letter_queue() {
    let sqs = aws_sdk_sqs::Client::new(&sdk_config().await);
    for name in ["memory-dedup", "memory-contradiction", "memory-synthesis", "memory-file-scan"] {
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
        .event_bus_name(std::env::var("MEMORY_EVENT_BUS").unwrap_or_else(|_| "agent-memory".into()))
        .source("agent-memory.test")
        .detail_type("memory.superseded")
        .detail(r#"{"memory_id":"00000000-0000-0000-0000-000000000000"}"#)
        .build();
    let output = events.put_events().entries(entry).send().await.unwrap();
    assert_eq!(output.failed_entry_count, 0);
}
