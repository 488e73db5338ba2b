//! `memory_ingest`: batches from extraction services. Each batch is checked, embedded and written in one
//! transaction; its follow-up jobs (contradiction checks, dedup review, entity synthesis) are sent after the commit
//! by the worker's outbox flush. The sender (SQS `SenderId`) must be a registered producer of the batch's
//! organisation, claiming no more trust than its grant (`MEMORY_PRODUCERS`, `registered` unless set to `any`).
//! `memory_forget` requests come on the same queue: a sender with a `verified` grant forgets what a selector
//! matches, in passes of one transaction each; a request with more than a message's passes fails after them and its
//! redelivery goes on where it stopped.

use memory_core::{
    ingest::{IngestMessage, Ingestor},
    lifecycle::forget,
};

use aws_edge::sqs::{Delivery, JobHandler};

use crate::Worker;

/// Forget passes one delivery runs at most (100 memories each).
const FORGET_PASSES_PER_MESSAGE: usize = 50;

impl JobHandler for Worker<Ingestor> {
    type Job = IngestMessage;

    async fn handle(&self, message: IngestMessage, delivery: &Delivery) -> anyhow::Result<()> {
        match message {
            IngestMessage::Batch(batch) => {
                let receipt = self.service.ingest_delivered(&batch, delivery.sender_id.as_deref()).await?;
                tracing::info!(
                    batch_id = %batch.batch_id,
                    created = receipt.created,
                    duplicates = receipt.duplicates,
                    replayed = receipt.replayed,
                    "batch ingested"
                );
            }
            IngestMessage::Forget(request) => {
                let org = request.organization_id;
                self.service.may_forget(org, delivery.sender_id.as_deref()).await?;
                let mut forgotten = 0;
                for _ in 0..FORGET_PASSES_PER_MESSAGE {
                    let pass = forget::forget_pass(&self.pool, org, &request.selector).await?;
                    if pass == 0 {
                        tracing::info!(organization_id = %org, forgotten, "forget request done");
                        return Ok(());
                    }
                    forgotten += pass;
                }
                anyhow::bail!("{forgotten} memories forgotten, more to go: the redelivery goes on");
            }
        }
        Ok(())
    }
}
