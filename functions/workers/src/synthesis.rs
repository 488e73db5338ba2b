//! The synthesis worker: `memory_entity_synthesis` jobs. (Re)synthesises an entity's profiles once it has enough
//! mentions, or on demand.

use memory_core::{
    db::PgPool,
    jobs::{EntitySynthesisJob, JobType},
    lifecycle::synthesis::EntitySynthesizer,
    services::Services,
};
use uuid::Uuid;

pub struct Worker {
    pool: PgPool,
    synthesizer: EntitySynthesizer,
}

impl Worker {
    pub fn new(services: &Services) -> anyhow::Result<Self> {
        Ok(Self::with(services.pool.clone(), EntitySynthesizer::with_models(services.job_models()?)))
    }

    pub fn with(pool: PgPool, synthesizer: EntitySynthesizer) -> Self {
        Self { pool, synthesizer }
    }
}

impl aws_edge::sqs::JobHandler for Worker {
    type Job = EntitySynthesisJob;

    fn organization_id(job: &EntitySynthesisJob) -> Uuid {
        job.organization_id
    }

    async fn handle(&self, job: EntitySynthesisJob) -> anyhow::Result<()> {
        JobType::MemoryEntitySynthesis.expect(job.job_type)?;
        if job.force {
            self.synthesizer.synthesize_profile(&self.pool, job.organization_id, job.entity_id).await?;
        } else {
            self.synthesizer.synthesize_if_due(&self.pool, job.organization_id, job.entity_id).await?;
        }
        Ok(())
    }
}
