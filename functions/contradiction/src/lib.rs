//! The contradiction worker: checks one new (or re-checked) memory against what it may contradict.

use memory_core::{db::PgPool, lifecycle::contradiction::ContradictionDetector, services::Services};
use serde::Deserialize;
use uuid::Uuid;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContradictionCheckJob {
    pub organization_id: Uuid,
    pub memory_id: Uuid,
}

pub struct Worker {
    pool: PgPool,
    detector: ContradictionDetector,
}

impl Worker {
    pub fn new(services: &Services) -> anyhow::Result<Self> {
        Ok(Self { pool: services.pool.clone(), detector: ContradictionDetector::with_models(services.job_models()?) })
    }
}

impl sqs_worker::JobHandler for Worker {
    type Job = ContradictionCheckJob;

    fn organization_id(job: &ContradictionCheckJob) -> Uuid {
        job.organization_id
    }

    async fn handle(&self, job: ContradictionCheckJob) -> anyhow::Result<()> {
        self.detector.check(&self.pool, job.organization_id, job.memory_id).await?;
        Ok(())
    }
}
