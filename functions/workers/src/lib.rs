//! The SQS workers, one module per job type, and the one place that maps a job type to its handler ([`serve`]):
//! the Lambda functions (`src/bin/`) and the local runner (`local-workers`) both start their handlers here.

pub mod contradiction;
pub mod dedup;
pub mod file_scan;
pub mod ingest;
pub mod synthesis;

use aws_edge::sqs::{Lambda, Runner};
use memory_core::{jobs::JobType, services::Services};

/// Hands the handler of `job`, built over `services`, to `runner`.
pub fn serve<R: Runner>(job: JobType, services: &Services, runner: R) -> anyhow::Result<R::Output> {
    Ok(match job {
        JobType::MemoryIngest => runner.run(ingest::Worker::new(services)),
        JobType::MemoryDedupReview => runner.run(dedup::Worker::new(services)?),
        JobType::MemoryContradictionCheck => runner.run(contradiction::Worker::new(services)?),
        JobType::MemoryEntitySynthesis => runner.run(synthesis::Worker::new(services)?),
        JobType::MemoryFileScan => runner.run(file_scan::Worker::new(services)?),
    })
}

/// A worker function's `main`: build the services once, then apply SQS batches of `job` under the Lambda runtime.
pub async fn lambda_main(job: JobType) -> Result<(), lambda_runtime::Error> {
    memory_core::telemetry::init();
    let services = Services::from_env().await?;
    let lambda = Lambda { pool: services.pool.clone() };
    serve(job, &services, lambda)?.await
}
