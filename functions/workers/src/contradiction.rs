//! The contradiction worker: `memory_contradiction_check` jobs. Checks one new (or re-checked) memory against what
//! it may contradict, and promotes a candidate that stays above the promotion confidence.

use memory_core::{
    db::PgPool,
    jobs::{ContradictionCheckJob, JobType},
    lifecycle::contradiction::ContradictionDetector,
    services::Services,
};
use uuid::Uuid;

pub struct Worker {
    pool: PgPool,
    detector: ContradictionDetector,
}

impl Worker {
    pub fn new(services: &Services) -> anyhow::Result<Self> {
        Ok(Self::with(services.pool.clone(), ContradictionDetector::with_models(services.job_models()?)))
    }

    pub fn with(pool: PgPool, detector: ContradictionDetector) -> Self {
        Self { pool, detector }
    }
}

impl aws_edge::sqs::JobHandler for Worker {
    type Job = ContradictionCheckJob;

    fn organization_id(job: &ContradictionCheckJob) -> Uuid {
        job.organization_id
    }

    async fn handle(&self, job: ContradictionCheckJob) -> anyhow::Result<()> {
        JobType::MemoryContradictionCheck.expect(job.job_type)?;
        self.detector.check(&self.pool, job.organization_id, job.memory_id).await?;
        Ok(())
    }
}
