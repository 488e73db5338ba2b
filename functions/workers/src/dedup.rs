//! The dedup worker: `memory_dedup_review` jobs. A job names the pairs to review, or none to lease the
//! organisation's next deferred pairs.

use memory_core::{
    db::PgPool,
    jobs::{DedupReviewJob, JobType},
    lifecycle::dedup::{DedupPair, Deduper},
    services::Services,
};
use uuid::Uuid;

/// Model calls one `memory_dedup_review` message without pairs may spend on deferred pairs.
const DEFERRED_CALLS_PER_MESSAGE: usize = 5;

pub struct Worker {
    pool: PgPool,
    deduper: Deduper,
}

impl Worker {
    pub fn new(services: &Services) -> anyhow::Result<Self> {
        Ok(Self { pool: services.pool.clone(), deduper: Deduper::with_models(services.job_models()?) })
    }

    pub fn with(pool: PgPool, deduper: Deduper) -> Self {
        Self { pool, deduper }
    }
}

impl aws_edge::sqs::JobHandler for Worker {
    type Job = DedupReviewJob;

    fn organization_id(job: &DedupReviewJob) -> Uuid {
        job.organization_id
    }

    async fn handle(&self, job: DedupReviewJob) -> anyhow::Result<()> {
        JobType::MemoryDedupReview.expect(job.job_type)?;
        if job.pairs.is_empty() {
            // One message drains up to five model calls' worth of deferred pairs; what is left waits for the next.
            for _ in 0..DEFERRED_CALLS_PER_MESSAGE {
                if self.deduper.review_deferred(&self.pool, job.organization_id).await? == 0 {
                    break;
                }
            }
        } else {
            let pairs: Vec<DedupPair> = job.pairs.iter().map(|p| DedupPair { a: p.a, b: p.b }).collect();
            self.deduper.review_cluster(&self.pool, job.organization_id, &pairs).await?;
        }
        Ok(())
    }
}
