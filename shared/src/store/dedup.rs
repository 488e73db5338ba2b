//! `memory_dedup_reviewed`: one row per unordered pair, claimed by reviewers with SKIP LOCKED.

use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use crate::domain::DedupDecision;

/// A pair in canonical order (a < b).
#[derive(Debug, Clone, Copy, PartialEq, sqlx::FromRow)]
pub struct PairRow {
    pub memory_a_id: Uuid,
    pub memory_b_id: Uuid,
    pub cosine_similarity: Option<f64>,
}

/// Records a pair as deferred (awaiting review) unless it is already known; returns whether it was new.
pub async fn defer_pair(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    a: Uuid,
    b: Uuid,
    cosine_similarity: f64,
) -> sqlx::Result<bool> {
    let (a, b) = if a < b { (a, b) } else { (b, a) };
    sqlx::query(
        "INSERT INTO memory_dedup_reviewed (organization_id, memory_a_id, memory_b_id, cosine_similarity) \
         VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
    )
    .bind(organization_id)
    .bind(a)
    .bind(b)
    .bind(cosine_similarity)
    .execute(executor)
    .await
    .map(|r| r.rows_affected() == 1)
}

/// Claims up to `limit` deferred pairs whose memories are both still active, for this transaction; other
/// workers skip them.
pub async fn claim_deferred(conn: &mut PgConnection, organization_id: Uuid, limit: i64) -> sqlx::Result<Vec<PairRow>> {
    sqlx::query_as(
        "SELECT r.memory_a_id, r.memory_b_id, r.cosine_similarity FROM memory_dedup_reviewed r \
         WHERE r.organization_id = $1 AND r.decision = 'deferred' \
           AND (SELECT count(*) FROM memory m WHERE m.organization_id = r.organization_id \
                AND m.id IN (r.memory_a_id, r.memory_b_id) AND m.status = 'active') = 2 \
         ORDER BY r.created_at, r.memory_a_id, r.memory_b_id \
         LIMIT $2 FOR UPDATE OF r SKIP LOCKED",
    )
    .bind(organization_id)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// Stores the decision for a pair (inserting the row if it was never deferred).
pub async fn record_decision(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    a: Uuid,
    b: Uuid,
    decision: DedupDecision,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO memory_dedup_reviewed (organization_id, memory_a_id, memory_b_id, decision, reviewed_at) \
         VALUES ($1, $2, $3, $4, now()) \
         ON CONFLICT (organization_id, memory_a_id, memory_b_id) \
         DO UPDATE SET decision = EXCLUDED.decision, reviewed_at = now()",
    )
    .bind(organization_id)
    .bind(a)
    .bind(b)
    .bind(decision)
    .execute(executor)
    .await
    .map(|_| ())
}

pub async fn decision(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    a: Uuid,
    b: Uuid,
) -> sqlx::Result<Option<DedupDecision>> {
    sqlx::query_scalar(
        "SELECT decision FROM memory_dedup_reviewed WHERE organization_id = $1 AND memory_a_id = $2 AND memory_b_id = $3",
    )
    .bind(organization_id)
    .bind(a)
    .bind(b)
    .fetch_optional(executor)
    .await
}
