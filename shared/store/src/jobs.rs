//! The job outbox: follow-up jobs written in the transaction that calls for them, sent to their queues after it
//! commits (and by the scheduled sweep when a send failed).

use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use memory_model::jobs::{JobType, QueuedJob};

/// Queues a job; `body` is the message as its worker reads it.
pub async fn enqueue(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    job_type: JobType,
    body: serde_json::Value,
) -> sqlx::Result<Uuid> {
    let id = Uuid::now_v7();
    sqlx::query("INSERT INTO memory_job_outbox (organization_id, id, job_type, body) VALUES ($1, $2, $3, $4)")
        .bind(organization_id)
        .bind(id)
        .bind(job_type.as_str())
        .bind(body)
        .execute(executor)
        .await?;
    Ok(id)
}

/// Locks up to `limit` of the organisation's unsent jobs of `job_types`, oldest first, for this transaction,
/// leaving out `skipped` (jobs whose send failed in this flush).
pub async fn claim_unsent(
    conn: &mut PgConnection,
    organization_id: Uuid,
    job_types: &[JobType],
    skipped: &[Uuid],
    limit: i64,
) -> sqlx::Result<Vec<QueuedJob>> {
    let job_types: Vec<&str> = job_types.iter().map(|t| t.as_str()).collect();
    sqlx::query_as(
        "SELECT organization_id, id, job_type, body FROM memory_job_outbox \
         WHERE organization_id = $1 AND sent_at IS NULL AND job_type = ANY($2) AND NOT (id = ANY($3)) \
         ORDER BY created_at, id LIMIT $4 FOR UPDATE SKIP LOCKED",
    )
    .bind(organization_id)
    .bind(job_types)
    .bind(skipped.to_vec())
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// Marks jobs sent.
pub async fn mark_sent(executor: impl PgExecutor<'_>, organization_id: Uuid, ids: &[Uuid]) -> sqlx::Result<u64> {
    sqlx::query(
        "UPDATE memory_job_outbox SET sent_at = now() WHERE organization_id = $1 AND id = ANY($2) AND sent_at IS NULL",
    )
    .bind(organization_id)
    .bind(ids.to_vec())
    .execute(executor)
    .await
    .map(|r| r.rows_affected())
}

/// Unsent jobs of the organisation, per job type.
pub async fn unsent_counts(executor: impl PgExecutor<'_>, organization_id: Uuid) -> sqlx::Result<Vec<(String, i64)>> {
    sqlx::query_as(
        "SELECT job_type, count(*) FROM memory_job_outbox WHERE organization_id = $1 AND sent_at IS NULL \
         GROUP BY 1 ORDER BY 1",
    )
    .bind(organization_id)
    .fetch_all(executor)
    .await
}

/// Whether a job of this type waits unsent in the organisation's outbox.
pub async fn has_unsent(executor: impl PgExecutor<'_>, organization_id: Uuid, job_type: JobType) -> sqlx::Result<bool> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM memory_job_outbox WHERE organization_id = $1 AND sent_at IS NULL \
         AND job_type = $2)",
    )
    .bind(organization_id)
    .bind(job_type.as_str())
    .fetch_one(executor)
    .await
}

/// Whether a job of this type and body waits in the organisation's outbox, not yet sent.
pub async fn has_unsent_body(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    job_type: JobType,
    body: &serde_json::Value,
) -> sqlx::Result<bool> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM memory_job_outbox WHERE organization_id = $1 AND sent_at IS NULL \
         AND job_type = $2 AND body = $3)",
    )
    .bind(organization_id)
    .bind(job_type.as_str())
    .bind(body)
    .fetch_one(executor)
    .await
}

/// Deletes the organisation's jobs sent before `before`; returns how many.
pub async fn prune_sent(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    before: chrono::DateTime<chrono::Utc>,
) -> sqlx::Result<u64> {
    sqlx::query("DELETE FROM memory_job_outbox WHERE organization_id = $1 AND sent_at < $2")
        .bind(organization_id)
        .bind(before)
        .execute(executor)
        .await
        .map(|r| r.rows_affected())
}
