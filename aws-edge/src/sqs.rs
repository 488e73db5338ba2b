//! The SQS edge of the worker functions. Each message body is parsed into the worker's job type and handed to
//! its handler; every message that fails (malformed body or handler error) is reported as a batch item failure,
//! so SQS retries it and finally moves it to the dead-letter queue. Nothing is acknowledged unapplied. After the
//! batch, the domain events its messages wrote are relayed to the event bus, once per organisation; events the bus
//! does not take wait in the outbox for the scheduled sweep (no message is failed for them).

use std::{future::Future, pin::Pin, sync::Arc};

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use lambda_runtime::{LambdaEvent, service_fn};
use memory_core::{
    db::PgPool,
    jobs::Job,
    outbox::{Budget, OutboxRelay},
};
use serde::de::DeserializeOwned;
use tracing::Instrument;

/// How long and how many rows of each kind a batch's relay goes on claiming an organisation's events and jobs: what
/// the batch wrote goes out, a backlog (a large import or forget, a slow bus) is left to the next flush and the
/// scheduled sweep, and the batch is never held by it.
const FLUSH_BUDGET: std::time::Duration = std::time::Duration::from_secs(2);
const FLUSH_ROWS: usize = 1_000;
/// The end of the invocation in which no flush claims more: a call in flight finishes or gives up within it.
const AFTER_FLUSH: std::time::Duration = std::time::Duration::from_secs(crate::relay::CALL_TIMEOUT.as_secs() + 1);

/// What SQS says of a message besides its body.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Delivery {
    /// The principal that sent it (`SenderId`: an IAM user or role id).
    pub sender_id: Option<String>,
    /// When the handler should be done: the invocation's deadline less what the batch needs after its messages
    /// (None: no deadline, as locally).
    pub deadline: Option<std::time::Instant>,
}

impl Delivery {
    /// The time left before the deadline, at most `budget`.
    pub fn budget(&self, budget: std::time::Duration) -> std::time::Duration {
        self.deadline.map_or(budget, |d| d.saturating_duration_since(std::time::Instant::now()).min(budget))
    }
}

/// What an invocation keeps for the outbox flush and its response after its messages.
const AFTER_MESSAGES: std::time::Duration =
    std::time::Duration::from_secs(FLUSH_BUDGET.as_secs() + AFTER_FLUSH.as_secs());

/// A worker: what its messages look like and how one is applied.
pub trait JobHandler: Send + Sync + 'static {
    type Job: Job + DeserializeOwned + Send;

    fn handle(&self, job: Self::Job, delivery: &Delivery) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// Applies every message of a batch; the response names those that failed.
pub async fn process<H: JobHandler>(
    handler: &H,
    relay: Option<&OutboxRelay>,
    event: SqsEvent,
) -> Result<SqsBatchResponse, lambda_runtime::Error> {
    process_until(handler, relay, event, None).await
}

/// [`process`] in an invocation that ends at `ends` (handlers that work in steps stop in time for it).
pub async fn process_until<H: JobHandler>(
    handler: &H,
    relay: Option<&OutboxRelay>,
    event: SqsEvent,
    ends: Option<std::time::Instant>,
) -> Result<SqsBatchResponse, lambda_runtime::Error> {
    let deadline = ends.map(|e| e.checked_sub(AFTER_MESSAGES).unwrap_or(e));
    let mut response = SqsBatchResponse::default();
    // The organisations whose outboxes the batch wrote to: relayed once each, after the batch.
    let mut written = std::collections::BTreeSet::new();
    for record in event.records {
        // Without an id a failure cannot be reported per message: fail the whole batch instead.
        let id = record.message_id.filter(|id| !id.is_empty()).ok_or("SQS record without a message id")?;
        let span = tracing::info_span!("message", message_id = %id);
        let outcome = async {
            let body = record.body.as_deref().unwrap_or_default();
            let job: H::Job = serde_json::from_str(body).map_err(|e| anyhow::anyhow!("malformed message body: {e}"))?;
            H::Job::TYPE.expect(job.job_type())?;
            let organization_id = job.organization_id();
            let delivery = Delivery { sender_id: record.attributes.get("SenderId").cloned(), deadline };
            written.insert(organization_id);
            handler.handle(job, &delivery).await?;
            Ok::<_, anyhow::Error>(())
        }
        .instrument(span.clone())
        .await;
        if let Err(error) = outcome {
            span.in_scope(|| tracing::error!(error = format!("{error:#}"), "message failed; left for retry"));
            // Five failures of one message dead-letter it (the queue's redrive policy).
            metrics::counter!("messages_failed", "job_type" => H::Job::TYPE.as_str()).increment(1);
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = id;
            response.batch_item_failures.push(failure);
        }
    }
    for organization_id in written.into_iter() {
        let Some(relay) = relay else { break };
        // Each organisation's flush is bounded, and none claims in the invocation's last seconds.
        let left =
            ends.map(|ends| ends.saturating_duration_since(std::time::Instant::now()).saturating_sub(AFTER_FLUSH));
        let budget = Budget::new(left.map_or(FLUSH_BUDGET, |left| FLUSH_BUDGET.min(left)), FLUSH_ROWS);
        if let Err(error) = relay.flush_within(organization_id, budget).await {
            tracing::warn!(%organization_id, error = %error, "domain events left in the outbox for the scheduled sweep");
        }
    }
    memory_core::telemetry::flush_metrics();
    Ok(response)
}

/// What runs a job's handler: the Lambda runtime ([`Lambda`]) or a local poller.
pub trait Runner {
    type Output;
    fn run<H: JobHandler>(self, handler: H) -> Self::Output;
}

/// The Lambda runtime, relaying each message's events to the bus named by `MEMORY_EVENT_BUS`.
pub struct Lambda {
    pub pool: PgPool,
}

impl Runner for Lambda {
    type Output = Pin<Box<dyn Future<Output = Result<(), lambda_runtime::Error>>>>;

    fn run<H: JobHandler>(self, handler: H) -> Self::Output {
        Box::pin(run(handler, self.pool))
    }
}

/// Runs the worker under the Lambda runtime, relaying its events to the bus named by `MEMORY_EVENT_BUS`.
pub async fn run<H: JobHandler>(handler: H, pool: PgPool) -> Result<(), lambda_runtime::Error> {
    let handler = Arc::new(handler);
    let relay = Arc::new(crate::relay::relay_from_env(pool).await?);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        let (handler, relay) = (handler.clone(), relay.clone());
        // The context's deadline is in milliseconds since the epoch.
        let left = (event.context.deadline as u128).saturating_sub(
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis(),
        );
        let ends = std::time::Instant::now() + std::time::Duration::from_millis(left as u64);
        async move { process_until(handler.as_ref(), Some(relay.as_ref()), event.payload, Some(ends)).await }
    }))
    .await
}
