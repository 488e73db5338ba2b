//! The ingest worker: `memory_ingest` batches from extraction services. Each batch is checked, embedded and
//! written in one transaction; its follow-up jobs (contradiction checks, dedup review, entity synthesis) are sent
//! after the commit by the worker's outbox flush.

use std::sync::Arc;

use memory_core::{
    db::PgPool,
    ingest::{Admission, IngestBatch, Ingestor},
    services::Services,
};
use uuid::Uuid;

pub struct Worker {
    ingestor: Ingestor,
}

impl Worker {
    pub fn new(services: &Services) -> Self {
        Self::with(
            Ingestor::new(services.pool.clone(), services.embedder.clone()).with_timeout(services.worker_model_timeout),
        )
    }

    pub fn with(ingestor: Ingestor) -> Self {
        Self { ingestor }
    }

    /// A worker over `pool` embedding with `embedder` (tests, local tools).
    pub fn over(pool: PgPool, embedder: Arc<dyn memory_core::embed::Embedder>) -> Self {
        Self::with(Ingestor::new(pool, embedder))
    }
}

impl aws_edge::sqs::JobHandler for Worker {
    type Job = IngestBatch;

    fn organization_id(batch: &IngestBatch) -> Uuid {
        batch.organization_id
    }

    async fn handle(&self, batch: IngestBatch) -> anyhow::Result<()> {
        let receipt = self.ingestor.ingest(&batch, Admission::Candidate).await?;
        tracing::info!(
            batch_id = %batch.batch_id,
            created = receipt.created,
            duplicates = receipt.duplicates,
            replayed = receipt.replayed,
            "batch ingested"
        );
        Ok(())
    }
}
