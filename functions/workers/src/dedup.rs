//! `memory_dedup_review`: the named pairs (at most ten, each recorded by the screen), or none to lease the
//! organisation's next deferred pairs.

use memory_core::{
    jobs::DedupReviewJob,
    lifecycle::dedup::{DedupPair, Deduper},
};

use aws_edge::sqs::{Delivery, JobHandler};

use crate::Worker;

/// Model calls one `memory_dedup_review` message without pairs may spend on deferred pairs.
const DEFERRED_CALLS_PER_MESSAGE: usize = 5;

impl JobHandler for Worker<Deduper> {
    type Job = DedupReviewJob;

    async fn handle(&self, job: DedupReviewJob, _: &Delivery) -> anyhow::Result<()> {
        if job.pairs.is_empty() {
            // One message drains up to five model calls' worth of deferred pairs; what is left waits for the next.
            for _ in 0..DEFERRED_CALLS_PER_MESSAGE {
                if self.service.review_deferred(&self.pool, job.organization_id).await? == 0 {
                    break;
                }
            }
        } else {
            let pairs: Vec<DedupPair> = job.pairs.iter().map(|p| DedupPair { a: p.a, b: p.b }).collect();
            self.service.review_requested(&self.pool, job.organization_id, &pairs).await?;
        }
        Ok(())
    }
}
