//! The synthesis worker: (re)synthesises an entity's profile once it has enough mentions, or on demand.

use memory_core::{db::PgPool, lifecycle::synthesis::EntitySynthesizer, services::Services};
use serde::Deserialize;
use uuid::Uuid;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntitySynthesisJob {
    pub organization_id: Uuid,
    pub entity_id: Uuid,
    /// Synthesise regardless of the mention count (compaction runs).
    #[serde(default)]
    pub force: bool,
}

pub struct Worker {
    pool: PgPool,
    synthesizer: EntitySynthesizer,
}

impl Worker {
    pub fn new(services: &Services) -> anyhow::Result<Self> {
        let synthesizer = EntitySynthesizer::with_models(services.job_models()?);
        Ok(Self { pool: services.pool.clone(), synthesizer })
    }
}

impl sqs_worker::JobHandler for Worker {
    type Job = EntitySynthesisJob;

    fn organization_id(job: &EntitySynthesisJob) -> Uuid {
        job.organization_id
    }

    async fn handle(&self, job: EntitySynthesisJob) -> anyhow::Result<()> {
        if job.force {
            self.synthesizer.synthesize_profile(&self.pool, job.organization_id, job.entity_id).await?;
        } else {
            self.synthesizer.synthesize_if_due(&self.pool, job.organization_id, job.entity_id).await?;
        }
        Ok(())
    }
}
