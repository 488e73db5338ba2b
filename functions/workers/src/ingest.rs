//! `memory_ingest`: batches from extraction services. Each batch is checked, embedded and written in one
//! transaction; its follow-up jobs (contradiction checks, dedup review, entity synthesis) are sent after the commit
//! by the worker's outbox flush.

use memory_core::ingest::{Admission, IngestBatch, Ingestor};

use crate::Worker;

impl aws_edge::sqs::JobHandler for Worker<Ingestor> {
    type Job = IngestBatch;

    async fn handle(&self, batch: IngestBatch) -> anyhow::Result<()> {
        let receipt = self.service.ingest(&batch, Admission::Candidate).await?;
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
