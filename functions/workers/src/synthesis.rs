//! `memory_entity_synthesis`: (re)synthesises an entity's profiles once it has enough mentions, or on demand. An
//! entity that is gone (forgetting deletes an entity no memory mentions any more) has nothing to synthesise.

use memory_core::{jobs::EntitySynthesisJob, lifecycle::synthesis::EntitySynthesizer};

use aws_edge::sqs::{Delivery, JobHandler};

use crate::Worker;

impl JobHandler for Worker<EntitySynthesizer> {
    type Job = EntitySynthesisJob;

    async fn handle(&self, job: EntitySynthesisJob, _: &Delivery) -> anyhow::Result<()> {
        let (org, entity) = (job.organization_id, job.entity_id);
        let done = if job.force {
            self.service.synthesize_profile(&self.pool, org, entity).await.map(|_| ())
        } else {
            self.service.synthesize_if_due(&self.pool, org, entity).await.map(|_| ())
        };
        match done {
            Err(memory_core::Error::NotFound { kind: "entity", .. }) => {
                tracing::info!(organization_id = %org, entity_id = %entity, "entity gone: nothing to synthesise");
                Ok(())
            }
            done => Ok(done?),
        }
    }
}
