//! The AWS side of the outbox relay: every domain-event row becomes one event on the EventBridge bus, with source
//! `agent-memory`, the event type as its detail type, and a detail carrying the outbox id for deduplication; every
//! job row becomes one SQS message on its job type's queue, naming its row in the attribute `outbox_id`.

use std::{collections::HashMap, sync::Arc, time::Duration};

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_sdk_eventbridge::{Client, config::timeout::TimeoutConfig, primitives::DateTime, types::PutEventsRequestEntry};
use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
use memory_core::{
    config,
    db::PgPool,
    jobs::{JobType, QueuedJob},
    outbox::{EventSink, JobSink, OutboxRelay},
    store::outbox::OutboxEvent,
};

/// The `source` of every event this service publishes.
pub const SOURCE: &str = "agent-memory";

pub struct EventBridgeSink {
    client: Client,
    bus: String,
}

impl EventBridgeSink {
    pub fn new(client: Client, bus: impl Into<String>) -> Self {
        Self { client, bus: bus.into() }
    }

    /// The sink for the bus named by `MEMORY_EVENT_BUS`.
    pub fn from_env(sdk: &SdkConfig) -> anyhow::Result<Self> {
        Ok(Self::new(Client::new(sdk), config::required("MEMORY_EVENT_BUS")?))
    }

    fn entry(&self, event: &OutboxEvent) -> PutEventsRequestEntry {
        let detail = serde_json::json!({
            "outbox_id": event.id,
            "sequence": event.seq,
            "organization_id": event.organization_id,
            "event_type": event.event_type,
            "occurred_at": event.created_at,
            "data": event.payload,
        });
        PutEventsRequestEntry::builder()
            .event_bus_name(&self.bus)
            .source(SOURCE)
            .detail_type(&event.event_type)
            .detail(detail.to_string())
            .time(DateTime::from_millis(event.created_at.timestamp_millis()))
            .build()
    }
}

#[async_trait]
impl EventSink for EventBridgeSink {
    async fn publish(&self, events: &[OutboxEvent]) -> anyhow::Result<Vec<bool>> {
        let entries: Vec<PutEventsRequestEntry> = events.iter().map(|e| self.entry(e)).collect();
        let output = self.client.put_events().set_entries(Some(entries)).send().await?;
        Ok(output.entries().iter().map(|e| e.error_code().is_none() && e.event_id().is_some()).collect())
    }
}

/// The message attribute naming the job outbox row a message was sent from (a job's body may repeat: the same
/// entity's synthesis, the same review).
pub const OUTBOX_ID: &str = "outbox_id";

fn outbox_id(id: uuid::Uuid) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(id.to_string())
        .build()
        .expect("type and value set")
}

/// Sends jobs to the queue of their job type, each message naming its outbox row ([`OUTBOX_ID`]).
pub struct SqsJobSink {
    client: aws_sdk_sqs::Client,
    queues: HashMap<JobType, String>,
}

impl SqsJobSink {
    pub fn new(client: aws_sdk_sqs::Client, queues: HashMap<JobType, String>) -> Self {
        Self { client, queues }
    }

    /// The queues named by `MEMORY_INGEST_QUEUE_URL`, `MEMORY_DEDUP_QUEUE_URL`, `MEMORY_CONTRADICTION_QUEUE_URL`,
    /// `MEMORY_SYNTHESIS_QUEUE_URL` and `MEMORY_FILE_SCAN_QUEUE_URL` (a job whose queue is not configured waits in
    /// the outbox).
    pub fn from_env(sdk: &SdkConfig) -> Self {
        let queues = JobType::ALL
            .into_iter()
            .filter_map(|job| std::env::var(job.queue_variable()).ok().map(|url| (job, url)))
            .collect();
        Self::new(aws_sdk_sqs::Client::new(sdk), queues)
    }
}

#[async_trait]
impl JobSink for SqsJobSink {
    fn job_types(&self) -> Vec<JobType> {
        self.queues.keys().copied().collect()
    }

    async fn send(&self, jobs: &[QueuedJob]) -> anyhow::Result<Vec<bool>> {
        let mut taken = vec![false; jobs.len()];
        let mut by_queue: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, job) in jobs.iter().enumerate() {
            match JobType::parse(&job.job_type).and_then(|t| self.queues.get(&t)) {
                Some(url) => by_queue.entry(url.as_str()).or_default().push(i),
                None => tracing::warn!(job_type = %job.job_type, "no queue configured; the job waits in the outbox"),
            }
        }
        for (url, indices) in by_queue {
            let entries = indices
                .iter()
                .map(|&i| {
                    SendMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .message_body(jobs[i].body.to_string())
                        .message_attributes(OUTBOX_ID, outbox_id(jobs[i].id))
                        .build()
                })
                .collect::<Result<Vec<_>, _>>()?;
            // One queue failing leaves the others' jobs sent (and marked): it only keeps its own waiting.
            match self.client.send_message_batch().queue_url(url).set_entries(Some(entries)).send().await {
                Ok(output) => {
                    for ok in output.successful() {
                        if let Ok(i) = ok.id().parse::<usize>() {
                            taken[i] = true;
                        }
                    }
                }
                Err(error) => {
                    tracing::warn!(queue = %url, error = %aws_sdk_sqs::error::DisplayErrorContext(&error), "jobs left in the outbox")
                }
            }
        }
        Ok(taken)
    }
}

/// How long one call of the relay (retries included) may take before it gives up.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The SDK configuration of the relay: default credentials and region, and calls that give up after
/// [`CALL_TIMEOUT`], so a flush never holds its claimed rows for long.
pub async fn sdk_config() -> SdkConfig {
    let timeouts = TimeoutConfig::builder().operation_timeout(CALL_TIMEOUT).build();
    aws_config::defaults(aws_config::BehaviorVersion::latest()).timeout_config(timeouts).load().await
}

/// The relay over `pool`, publishing to the configured bus and queues; a sweep visits at most
/// `MEMORY_SWEEP_ORGANIZATIONS` organisations. Jobs are sent only by a function given queues, and only to the
/// queues it is given (each function is given the queues of the jobs it queues; the others wait for a relay that
/// has theirs).
pub async fn relay_from_env(pool: PgPool) -> anyhow::Result<OutboxRelay> {
    let sdk = sdk_config().await;
    let sweep = config::parsed_or("MEMORY_SWEEP_ORGANIZATIONS", memory_core::outbox::DEFAULT_SWEEP_ORGANIZATIONS)?;
    let relay = OutboxRelay::new(pool, Arc::new(EventBridgeSink::from_env(&sdk)?)).with_sweep_organizations(sweep);
    let jobs = SqsJobSink::from_env(&sdk);
    Ok(if jobs.queues.is_empty() { relay } else { relay.with_jobs(Arc::new(jobs)) })
}
