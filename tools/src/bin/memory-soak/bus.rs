//! What reached the bus: a queue of the run's own, subscribed to every event the service publishes before the
//! services start, read back by `check`.

use std::collections::HashMap;

use aws_sdk_sqs::types::QueueAttributeName;
use uuid::Uuid;

fn queue_name(run: &str) -> String {
    format!("memory-soak-events-{run}")
}

/// Subscribes the run's queue to the bus named by `MEMORY_EVENT_BUS`.
pub async fn subscribe(sdk: &aws_config::SdkConfig, run: &str) -> anyhow::Result<()> {
    let (sqs, events) = (aws_sdk_sqs::Client::new(sdk), aws_sdk_eventbridge::Client::new(sdk));
    let bus = memory_core::config::required("MEMORY_EVENT_BUS")?;
    let url = sqs.create_queue().queue_name(queue_name(run)).send().await?.queue_url.unwrap_or_default();
    let attributes =
        sqs.get_queue_attributes().queue_url(&url).attribute_names(QueueAttributeName::QueueArn).send().await?;
    let arn = attributes.attributes().and_then(|a| a.get(&QueueAttributeName::QueueArn)).cloned().unwrap_or_default();
    let rule = format!("memory-soak-{run}");
    let pattern = serde_json::json!({"source": [aws_edge::relay::SOURCE]});
    events.put_rule().name(&rule).event_bus_name(&bus).event_pattern(pattern.to_string()).send().await?;
    let target = aws_sdk_eventbridge::types::Target::builder().id("soak").arn(arn).build()?;
    events.put_targets().rule(&rule).event_bus_name(&bus).targets(target).send().await?;
    Ok(())
}

/// Every event the run's queue received, by outbox id: how many times each arrived. The subscription and its queue
/// are removed.
pub async fn delivered(sdk: &aws_config::SdkConfig, run: &str) -> anyhow::Result<HashMap<Uuid, usize>> {
    let (sqs, events) = (aws_sdk_sqs::Client::new(sdk), aws_sdk_eventbridge::Client::new(sdk));
    let bus = memory_core::config::required("MEMORY_EVENT_BUS")?;
    let rule = format!("memory-soak-{run}");
    events.remove_targets().rule(&rule).event_bus_name(&bus).ids("soak").send().await?;
    events.delete_rule().name(&rule).event_bus_name(&bus).send().await?;
    let url = sqs.get_queue_url().queue_name(queue_name(run)).send().await?.queue_url.unwrap_or_default();
    let mut delivered = HashMap::new();
    loop {
        let received = sqs.receive_message().queue_url(&url).max_number_of_messages(10).send().await?;
        let messages = received.messages.unwrap_or_default();
        if messages.is_empty() {
            sqs.delete_queue().queue_url(&url).send().await?;
            return Ok(delivered);
        }
        for message in &messages {
            let event: serde_json::Value = serde_json::from_str(message.body().unwrap_or_default())?;
            let id = event["detail"]["outbox_id"].as_str().and_then(|id| id.parse().ok());
            let id = id.ok_or_else(|| anyhow::anyhow!("an event without its outbox id: {event}"))?;
            *delivered.entry(id).or_default() += 1;
            sqs.delete_message()
                .queue_url(&url)
                .receipt_handle(message.receipt_handle().unwrap_or_default())
                .send()
                .await?;
        }
    }
}
