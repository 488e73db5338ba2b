//! `memory_contradiction_check`: checks one new (or re-checked) memory against what it may contradict, and promotes
//! a candidate that stays above the promotion confidence.

use memory_core::{jobs::ContradictionCheckJob, lifecycle::contradiction::ContradictionDetector};

use aws_edge::sqs::{Delivery, JobHandler};

use crate::Worker;

impl JobHandler for Worker<ContradictionDetector> {
    type Job = ContradictionCheckJob;

    async fn handle(&self, job: ContradictionCheckJob, _: &Delivery) -> anyhow::Result<()> {
        self.service.check(&self.pool, job.organization_id, job.memory_id).await?;
        Ok(())
    }
}
