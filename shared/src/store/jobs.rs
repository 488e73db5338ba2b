//! The job outbox: follow-up jobs written in the transaction that calls for them, sent to their queues after it
//! commits (and by the scheduled sweep when a send failed).

use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use crate::jobs::{JobType, QueuedJob};

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

/// Locks up to `limit` of the organisation's unsent jobs, oldest first, for this transaction.
pub async fn claim_unsent(conn: &mut PgConnection, organization_id: Uuid, limit: i64) -> sqlx::Result<Vec<QueuedJob>> {
    sqlx::query_as(
        "SELECT organization_id, id, job_type, body FROM memory_job_outbox \
         WHERE organization_id = $1 AND sent_at IS NULL ORDER BY created_at, id LIMIT $2 FOR UPDATE SKIP LOCKED",
    )
    .bind(organization_id)
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
