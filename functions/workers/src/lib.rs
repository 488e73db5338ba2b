//! The SQS workers, one module per job type, and the one place that maps a job type to its handler ([`serve`]):
//! the Lambda functions (`src/bin/`) and the local runner (`local-workers`) both start their handlers here.

pub mod contradiction;
pub mod dedup;
pub mod file_scan;
pub mod ingest;
pub mod synthesis;

use aws_edge::sqs::{Lambda, Runner};
use memory_core::{
    db::PgPool,
    ingest::{Ingestor, Producers},
    jobs::JobType,
    lifecycle::{contradiction::ContradictionDetector, dedup::Deduper, synthesis::EntitySynthesizer},
    services::Services,
};

/// A job's handler: the core service that applies the job, and the pool it applies it in. Each job module
/// implements `JobHandler` for the worker of its service.
pub struct Worker<S> {
    pool: PgPool,
    service: S,
}

impl<S> Worker<S> {
    pub fn new(pool: PgPool, service: S) -> Self {
        Self { pool, service }
    }
}

/// Hands the handler of `job`, built over `services`, to `runner`.
pub fn serve<R: Runner>(job: JobType, services: &Services, runner: R) -> anyhow::Result<R::Output> {
    let pool = services.pool.clone();
    Ok(match job {
        JobType::MemoryIngest => {
            let producers = memory_core::config::parsed_or("MEMORY_PRODUCERS", Producers::Registered)?;
            let ingestor = Ingestor::new(pool.clone(), services.embedder.clone())
                .with_timeout(services.worker_model_timeout)
                .with_producers(producers);
            runner.run(Worker::new(pool, ingestor))
        }
        JobType::MemoryDedupReview => runner.run(Worker::new(pool, Deduper::with_models(services.job_models()?))),
        JobType::MemoryContradictionCheck => {
            runner.run(Worker::new(pool, ContradictionDetector::with_models(services.job_models()?)))
        }
        JobType::MemoryEntitySynthesis => {
            runner.run(Worker::new(pool, EntitySynthesizer::with_models(services.job_models()?)))
        }
        JobType::MemoryFileScan => runner.run(Worker::new(pool, file_scan::scanner(services.embedder.clone())?)),
    })
}

/// A worker function's `main`: build the services once, then apply SQS batches of `job` under the Lambda runtime.
pub async fn lambda_main(job: JobType) -> Result<(), lambda_runtime::Error> {
    memory_core::telemetry::init();
    memory_core::telemetry::init_metrics(job.function());
    let services = Services::from_env().await?;
    let lambda = Lambda { pool: services.pool.clone() };
    serve(job, &services, lambda)?.await
}
