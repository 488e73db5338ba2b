//! The file-scan worker: the daily freshness scan of file-backed memories.
//!
//! Not built yet (see ROADMAP item 1/2 in ARCHITECTURE.md): until it is, every message is reported as a batch
//! item failure, so SQS retries it and finally moves it to the dead-letter queue. Nothing is acknowledged unread.

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use lambda_runtime::{LambdaEvent, service_fn};

async fn handle(event: LambdaEvent<SqsEvent>) -> Result<SqsBatchResponse, lambda_runtime::Error> {
    let mut response = SqsBatchResponse::default();
    for record in event.payload.records {
        let Some(id) = record.message_id.filter(|id| !id.is_empty()) else {
            // Without an id the message cannot be reported individually: fail the whole batch instead.
            return Err("SQS record without a message id".into());
        };
        tracing::warn!(message_id = %id, "file-scan worker not implemented yet; leaving the message for retry/DLQ");
        let mut failure = BatchItemFailure::default();
        failure.item_identifier = id;
        response.batch_item_failures.push(failure);
    }
    Ok(response)
}

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    memory_core::telemetry::init();
    lambda_runtime::run(service_fn(handle)).await
}
