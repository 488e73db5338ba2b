//! `memory_ingest`: batches from extraction services. Each batch is checked, embedded and written in one
//! transaction; its follow-up jobs (contradiction checks, dedup review, entity synthesis) are sent after the commit
//! by the worker's outbox flush. The sender (SQS `SenderId`) must be a registered producer of the batch's
//! organisation, claiming no more trust than its grant (`MEMORY_PRODUCERS`, `registered` unless set to `any`).

use memory_core::ingest::{IngestBatch, Ingestor};

use aws_edge::sqs::{Delivery, JobHandler};

use crate::Worker;

impl JobHandler for Worker<Ingestor> {
    type Job = IngestBatch;

    async fn handle(&self, batch: IngestBatch, delivery: &Delivery) -> anyhow::Result<()> {
        let receipt = self.service.ingest_delivered(&batch, delivery.sender_id.as_deref()).await?;
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
