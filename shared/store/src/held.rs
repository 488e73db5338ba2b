//! Lifecycle decisions held for a person: a job found them but was not allowed to apply them.

use sqlx::PgExecutor;
use uuid::Uuid;

/// Holds `action` of `job` on `memory_id` (against `other_memory_id`) for review; false when already held.
pub async fn hold(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    job: &str,
    action: &str,
    memory_id: Uuid,
    other_memory_id: Uuid,
    reason: &str,
) -> sqlx::Result<bool> {
    sqlx::query(
        "INSERT INTO memory_held_decision (organization_id, id, job, action, memory_id, other_memory_id, reason) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
    )
    .bind(organization_id)
    .bind(Uuid::now_v7())
    .bind(job)
    .bind(action)
    .bind(memory_id)
    .bind(other_memory_id)
    .bind(reason)
    .execute(executor)
    .await
    .map(|r| r.rows_affected() == 1)
}

/// Holds, for a person, the promotion of a candidate that no contradiction check compared, with why.
pub async fn hold_unchecked_promotion(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    memory_id: Uuid,
    reason: &str,
) -> sqlx::Result<bool> {
    hold(executor, organization_id, "contradiction", "promote_unchecked", memory_id, memory_id, reason).await
}

/// A held decision.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, serde::Serialize, utoipa::ToSchema)]
pub struct HeldDecision {
    pub job: String,
    pub action: String,
    pub memory_id: Uuid,
    pub other_memory_id: Uuid,
    pub reason: String,
}

/// The organisation's unresolved held decisions, oldest first.
pub async fn pending(executor: impl PgExecutor<'_>, organization_id: Uuid) -> sqlx::Result<Vec<HeldDecision>> {
    sqlx::query_as(
        "SELECT job, action, memory_id, other_memory_id, reason FROM memory_held_decision \
         WHERE organization_id = $1 AND resolved_at IS NULL ORDER BY created_at, id",
    )
    .bind(organization_id)
    .fetch_all(executor)
    .await
}
