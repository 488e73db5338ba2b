//! local-workers: a deployment's workers on one machine, for `make run`. One long-polling loop per queue of the
//! local stack hands each batch to the same handler as the Lambda function: a message it applied is deleted, a
//! message it failed is left to come back after its visibility timeout (and the queue moves it to its DLQ after
//! five receives). The outboxes are swept every few seconds. Locally the workers' model is the offline stand-in
//! (`MEMORY_LLM=offline`, set by `make run`), or Bedrock when configured. The local bus's watch queue (what `make
//! events` prints) is emptied once it holds more than [`WATCH_CAP`] events.

use std::{sync::Arc, time::Duration};

use aws_edge::sqs::{JobHandler, Runner};
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
use memory_core::{jobs::JobType, lifecycle::sweep, outbox::OutboxRelay, services::Services};

/// How long a received message stays hidden before a failed one comes back.
const VISIBILITY_SECONDS: i32 = 10;
/// The most events the local watch queue holds before it is emptied (nothing else drains it).
const WATCH_CAP: i32 = 1_000;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    memory_core::telemetry::init();
    memory_core::telemetry::init_metrics("local-workers");
    let services = Services::from_env().await?;
    let relay = Arc::new(aws_edge::relay::relay_from_env(services.pool.clone()).await?);
    // Long polls wait up to 5 s, longer than the relay's operation timeout: the pollers use the SDK's defaults.
    let sqs = aws_sdk_sqs::Client::new(&aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await);

    let mut tasks = tokio::task::JoinSet::new();
    for job in JobType::ALL {
        let url = memory_core::config::required(job.queue_variable())?;
        let poller = Poller { url, sqs: sqs.clone(), relay: relay.clone(), tasks: &mut tasks };
        workers::serve(job, &services, poller)?;
    }
    // The schedules of a deployment, closer together: the outbox sweep every 5 s, the lifecycle sweep every minute.
    let bound = chrono::TimeDelta::minutes(memory_core::config::in_range(
        "MEMORY_CANDIDATE_BOUND_MINUTES",
        sweep::DEFAULT_CANDIDATE_BOUND.num_minutes(),
        0..=525_600,
    )?);
    let (pool, organizations) = (services.pool.clone(), relay.sweep_organizations());
    let watch = std::env::var("MEMORY_EVENTS_WATCH_QUEUE_URL").ok().filter(|u| !u.is_empty());
    let watch_sqs = sqs.clone();
    tasks.spawn(async move {
        for tick in 1u64.. {
            tokio::time::sleep(Duration::from_secs(5)).await;
            if tick % 12 == 0
                && let Err(error) = sweep::run(&pool, bound, organizations).await
            {
                tracing::warn!(%error, "lifecycle sweep failed");
            }
            if let Err(error) = relay.sweep().await {
                tracing::warn!(%error, "outbox sweep failed");
            }
            if let Some(url) = &watch
                && let Err(error) = cap_watch_queue(&watch_sqs, url).await
            {
                tracing::warn!(%error, "trimming the event watch queue failed");
            }
        }
    });
    let queues: Vec<&str> = JobType::ALL.iter().map(|job| job.function()).collect();
    tracing::info!(?queues, "local workers polling every job queue");
    while let Some(done) = tasks.join_next().await {
        done?;
    }
    Ok(())
}

/// Runs a handler as a task polling its queue.
struct Poller<'a> {
    url: String,
    sqs: aws_sdk_sqs::Client,
    relay: Arc<OutboxRelay>,
    tasks: &'a mut tokio::task::JoinSet<()>,
}

impl Runner for Poller<'_> {
    type Output = ();

    fn run<H: JobHandler>(self, handler: H) {
        self.tasks.spawn(poll(self.url, handler, self.sqs, self.relay));
    }
}

/// Receives batches from the queue forever and applies each with the handler.
async fn poll<H: JobHandler>(url: String, handler: H, sqs: aws_sdk_sqs::Client, relay: Arc<OutboxRelay>) {
    loop {
        let received = sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .wait_time_seconds(5)
            .visibility_timeout(VISIBILITY_SECONDS)
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::SenderId)
            .send()
            .await;
        let messages = match received {
            Ok(output) => output.messages.unwrap_or_default(),
            Err(error) => {
                tracing::warn!(queue = %url, error = %aws_sdk_sqs::error::DisplayErrorContext(&error), "receive failed");
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
        };
        if messages.is_empty() {
            continue;
        }
        let mut event = SqsEvent::default();
        event.records = messages
            .iter()
            .map(|m| {
                let mut record = SqsMessage::default();
                record.message_id = m.message_id.clone();
                record.receipt_handle = m.receipt_handle.clone();
                record.body = m.body.clone();
                // As Lambda's event carries it: who sent the message.
                for (name, value) in m.attributes().into_iter().flatten() {
                    record.attributes.insert(name.as_str().to_string(), value.clone());
                }
                record
            })
            .collect();
        let failed: Vec<String> = match aws_edge::sqs::process(&handler, Some(&relay), event).await {
            Ok(response) => response.batch_item_failures.into_iter().map(|f| f.item_identifier).collect(),
            Err(error) => {
                tracing::error!(%error, "batch failed as a whole; left for redelivery");
                continue;
            }
        };
        let entries: Vec<DeleteMessageBatchRequestEntry> = messages
            .iter()
            .filter(|m| m.message_id.as_ref().is_some_and(|id| !failed.contains(id)))
            .filter_map(|m| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(m.message_id.clone()?)
                    .receipt_handle(m.receipt_handle.clone()?)
                    .build()
                    .ok()
            })
            .collect();
        if !entries.is_empty()
            && let Err(error) = sqs.delete_message_batch().queue_url(&url).set_entries(Some(entries)).send().await
        {
            tracing::warn!(queue = %url, error = %aws_sdk_sqs::error::DisplayErrorContext(&error), "delete failed");
        }
    }
}

/// Empties the watch queue once it holds more than [`WATCH_CAP`] events (moto's queues slow down with every
/// message they hold, and nothing else drains this one).
async fn cap_watch_queue(sqs: &aws_sdk_sqs::Client, url: &str) -> anyhow::Result<()> {
    use aws_sdk_sqs::types::QueueAttributeName;
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await?;
    let waiting: i32 = attributes
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::ApproximateNumberOfMessages))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    if waiting > WATCH_CAP {
        sqs.purge_queue().queue_url(url).send().await?;
        tracing::info!(dropped = waiting, "the event watch queue held more than {WATCH_CAP} events: emptied");
    }
    Ok(())
}
