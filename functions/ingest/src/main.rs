//! Lambda entry point: build the services once, then apply SQS batches.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    memory_core::telemetry::init();
    let services = memory_core::services::Services::from_env().await?;
    sqs_worker::run(ingest::Worker::new(&services), services.pool.clone()).await
}
