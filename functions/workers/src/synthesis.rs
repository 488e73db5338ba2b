//! `memory_entity_synthesis`: (re)synthesises an entity's profiles once it has enough mentions, or on demand.

use memory_core::{jobs::EntitySynthesisJob, lifecycle::synthesis::EntitySynthesizer};

use aws_edge::sqs::{Delivery, JobHandler};

use crate::Worker;

impl JobHandler for Worker<EntitySynthesizer> {
    type Job = EntitySynthesisJob;

    async fn handle(&self, job: EntitySynthesisJob, _: &Delivery) -> anyhow::Result<()> {
        if job.force {
            self.service.synthesize_profile(&self.pool, job.organization_id, job.entity_id).await?;
        } else {
            self.service.synthesize_if_due(&self.pool, job.organization_id, job.entity_id).await?;
        }
        Ok(())
    }
}
