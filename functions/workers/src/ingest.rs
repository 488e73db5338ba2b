//! `memory_ingest`: batches from extraction services. Each batch is checked, embedded and written in one
//! transaction; its follow-up jobs (contradiction checks, dedup review, entity synthesis) are sent after the commit
//! by the worker's outbox flush. The sender (SQS `SenderId`) must be a registered producer of the batch's
//! organisation, claiming no more trust than its grant (`MEMORY_PRODUCERS`, `registered` unless set to `any`).
//! `memory_forget` requests come on the same queue: a sender with a `verified` grant forgets what a selector
//! matches among what it sent (anything, with a grant that says so), for at most the ingestor's forget budget a
//! delivery and never past the invocation's deadline; what is left continues in follow-up jobs on this queue.

use memory_core::{
    ingest::{IngestMessage, Ingestor},
    lifecycle::forget,
};

use aws_edge::sqs::{Delivery, JobHandler};

use crate::Worker;

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
                let progress = match (request.selector, request.continues) {
                    (Some(selector), None) => {
                        let what = self.service.forgetting(org, delivery.sender_id.as_deref(), selector).await?;
                        forget::forget_requested(&self.pool, org, &what, delivery.budget(self.service.forget_budget()))
                            .await?
                    }
                    // A follow-up continues a request that was authorised when it was recorded.
                    (None, Some(request_id)) => {
                        forget::forget_continued(
                            &self.pool,
                            org,
                            request_id,
                            delivery.budget(self.service.forget_budget()),
                        )
                        .await?
                    }
                    _ => anyhow::bail!(memory_core::Error::validation(
                        "a memory_forget request names either a selector or the request it continues"
                    )),
                };
                tracing::info!(organization_id = %org, forgotten = progress.forgotten, done = progress.done, "forget");
            }
        }
        Ok(())
    }
}
