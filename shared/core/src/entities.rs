//! When an entity's profiles are due: the model's mention threshold decides, the store counts and queues.

use sqlx::PgConnection;
use uuid::Uuid;

use crate::{
    domain::synthesis_due,
    jobs::{EntitySynthesisJob, JobType},
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
