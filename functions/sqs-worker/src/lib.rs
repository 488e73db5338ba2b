//! The SQS edge of the worker functions. Each message body is parsed into the worker's job type and handed to
//! its handler; every message that fails (malformed body or handler error) is reported as a batch item failure,
//! so SQS retries it and finally moves it to the dead-letter queue. Nothing is acknowledged unapplied.

use std::{future::Future, sync::Arc};

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use lambda_runtime::{LambdaEvent, service_fn};
use serde::de::DeserializeOwned;
use tracing::Instrument;

/// A worker: what its messages look like and how one is applied.
pub trait JobHandler: Send + Sync + 'static {
    type Job: DeserializeOwned + Send;

    fn handle(&self, job: Self::Job) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// Applies every message of a batch; the response names those that failed.
pub async fn process<H: JobHandler>(handler: &H, event: SqsEvent) -> Result<SqsBatchResponse, lambda_runtime::Error> {
    let mut response = SqsBatchResponse::default();
    for record in event.records {
        // Without an id a failure cannot be reported per message: fail the whole batch instead.
        let id = record.message_id.filter(|id| !id.is_empty()).ok_or("SQS record without a message id")?;
        let span = tracing::info_span!("message", message_id = %id);
        let outcome = async {
            let body = record.body.as_deref().unwrap_or_default();
            let job: H::Job = serde_json::from_str(body).map_err(|e| anyhow::anyhow!("malformed message body: {e}"))?;
            handler.handle(job).await
        }
        .instrument(span.clone())
        .await;
        if let Err(error) = outcome {
            span.in_scope(|| tracing::error!(error = format!("{error:#}"), "message failed; left for retry"));
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = id;
            response.batch_item_failures.push(failure);
        }
    }
    Ok(response)
}

/// Runs the worker under the Lambda runtime.
pub async fn run<H: JobHandler>(handler: H) -> Result<(), lambda_runtime::Error> {
    let handler = Arc::new(handler);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        let handler = handler.clone();
        async move { process(handler.as_ref(), event.payload).await }
    }))
    .await
}
