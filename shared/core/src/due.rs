//! When follow-up jobs are due, queued in the transaction that made them due: an entity's synthesis (the model's
//! mention threshold decides, the store counts) and a review of deferred dedup pairs.

use sqlx::PgConnection;
use uuid::Uuid;

use crate::{
    domain::synthesis_due,
    jobs::{DedupReviewJob, EntitySynthesisJob, JobType},
    store,
};

/// Queues a synthesis of each entity that `activated` (memories that just became active) mention whose active
/// mentions thereby reach a multiple of the mention threshold: a profile is written from active memories, so it is
/// due when they are, not when candidates arrive.
pub async fn queue_due_syntheses(
    conn: &mut PgConnection,
    organization_id: Uuid,
    activated: &[Uuid],
) -> sqlx::Result<()> {
    for (entity, added, now) in store::entities::lock_mentioned(&mut *conn, organization_id, activated).await? {
        if synthesis_due(now, added) {
            let body =
                serde_json::to_value(EntitySynthesisJob::new(organization_id, entity)).expect("a job serialises");
            store::jobs::enqueue(&mut *conn, organization_id, JobType::MemoryEntitySynthesis, body).await?;
        }
    }
    Ok(())
}

/// Queues a review of the organisation's deferred pairs when one of them (one of `memory`'s, if given) has both
/// memories active and no review waits to be sent; returns whether it queued one.
pub async fn queue_review_if_due(
    tx: &mut sqlx::PgConnection,
    organization_id: Uuid,
    memory: Option<Uuid>,
) -> crate::Result<bool> {
    if !store::dedup::has_reviewable(&mut *tx, organization_id, memory).await?
        || store::jobs::has_unsent(&mut *tx, organization_id, JobType::MemoryDedupReview).await?
    {
        return Ok(false);
    }
    let body = serde_json::to_value(DedupReviewJob::deferred(organization_id)).expect("a job serialises");
    store::jobs::enqueue(&mut *tx, organization_id, JobType::MemoryDedupReview, body).await?;
    Ok(true)
}
