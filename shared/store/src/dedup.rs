//! `memory_dedup_pair`: one row per unordered pair; deferred pairs are leased to one reviewer at a time.

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
        "INSERT INTO memory_dedup_pair (organization_id, memory_a_id, memory_b_id, cosine_similarity) \
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

/// Leases up to `limit` deferred pairs whose memories are both still active to the caller for `lease_ms`
/// (oldest first); until the lease ends other reviewers skip them. The caller commits the lease before it calls the
/// model, so no transaction stays open during the call.
pub async fn lease_deferred(
    conn: &mut PgConnection,
    organization_id: Uuid,
    limit: i64,
    lease_ms: i64,
) -> sqlx::Result<Vec<PairRow>> {
    sqlx::query_as(
        "UPDATE memory_dedup_pair r SET claimed_until = now() + $3 * interval '1 millisecond' \
         FROM (SELECT p.organization_id, p.memory_a_id, p.memory_b_id FROM memory_dedup_pair p \
               WHERE p.organization_id = $1 AND p.decision = 'deferred' \
                 AND (p.claimed_until IS NULL OR p.claimed_until < now()) \
                 AND (SELECT count(*) FROM memory m WHERE m.organization_id = p.organization_id \
                      AND m.id IN (p.memory_a_id, p.memory_b_id) AND m.status = 'active') = 2 \
               ORDER BY p.created_at, p.memory_a_id, p.memory_b_id \
               LIMIT $2 FOR UPDATE OF p SKIP LOCKED) claimed \
         WHERE r.organization_id = claimed.organization_id AND r.memory_a_id = claimed.memory_a_id \
           AND r.memory_b_id = claimed.memory_b_id \
         RETURNING r.memory_a_id, r.memory_b_id, r.cosine_similarity",
    )
    .bind(organization_id)
    .bind(limit)
    .bind(lease_ms)
    .fetch_all(conn)
    .await
}

/// Locks a pair's row for the rest of the transaction and returns its decision (None: the pair was never seen).
pub async fn lock_decision(
    conn: &mut PgConnection,
    organization_id: Uuid,
    a: Uuid,
    b: Uuid,
) -> sqlx::Result<Option<DedupDecision>> {
    let (a, b) = if a < b { (a, b) } else { (b, a) };
    sqlx::query_scalar(
        "SELECT decision FROM memory_dedup_pair \
         WHERE organization_id = $1 AND memory_a_id = $2 AND memory_b_id = $3 FOR UPDATE",
    )
    .bind(organization_id)
    .bind(a)
    .bind(b)
    .fetch_optional(conn)
    .await
}

/// Stores the decision for a pair in canonical order (inserting the row if it was never deferred); `reason` says
/// why when the decision was not the model's. `decision` is about (a, b) as given: a supersession's direction is
/// swapped with the pair.
pub async fn record_decision(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    a: Uuid,
    b: Uuid,
    decision: DedupDecision,
    reason: Option<&str>,
) -> sqlx::Result<()> {
    let (first, second, decision) = if a < b {
        (a, b, decision)
    } else {
        let flipped = match decision {
            DedupDecision::SupersedeA => DedupDecision::SupersedeB,
            DedupDecision::SupersedeB => DedupDecision::SupersedeA,
            other => other,
        };
        (b, a, flipped)
    };
    sqlx::query(
        "INSERT INTO memory_dedup_pair (organization_id, memory_a_id, memory_b_id, decision, reason, reviewed_at) \
         VALUES ($1, $2, $3, $4, $5, now()) \
         ON CONFLICT (organization_id, memory_a_id, memory_b_id) \
         DO UPDATE SET decision = EXCLUDED.decision, reason = EXCLUDED.reason, reviewed_at = now(), \
                       claimed_until = NULL",
    )
    .bind(organization_id)
    .bind(first)
    .bind(second)
    .bind(decision)
    .bind(reason)
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
        "SELECT decision FROM memory_dedup_pair WHERE organization_id = $1 AND memory_a_id = $2 AND memory_b_id = $3",
    )
    .bind(organization_id)
    .bind(a)
    .bind(b)
    .fetch_optional(executor)
    .await
}

/// Whether the organisation has a deferred pair whose memories are both active (and so waits for a reviewer);
/// with `memory`, only pairs of that memory count.
pub async fn has_reviewable(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    memory: Option<Uuid>,
) -> sqlx::Result<bool> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM memory_dedup_pair p WHERE p.organization_id = $1 AND p.decision = 'deferred' \
             AND ($2::uuid IS NULL OR $2 IN (p.memory_a_id, p.memory_b_id)) \
             AND (SELECT count(*) FROM memory m WHERE m.organization_id = p.organization_id \
                  AND m.id IN (p.memory_a_id, p.memory_b_id) AND m.status = 'active') = 2)",
    )
    .bind(organization_id)
    .bind(memory)
    .fetch_one(executor)
    .await
}

/// Defers a pair of `merged` with every memory that a deferred pair of `sources` named (the merge replaced the
/// sources, so those pairs could never be reviewed); returns how many pairs were deferred.
pub async fn carry_deferred(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    sources: &[Uuid],
    merged: Uuid,
) -> sqlx::Result<u64> {
    sqlx::query(
        "INSERT INTO memory_dedup_pair (organization_id, memory_a_id, memory_b_id, cosine_similarity) \
         SELECT DISTINCT $1, least(other, $3), greatest(other, $3), p.cosine_similarity FROM memory_dedup_pair p \
         CROSS JOIN LATERAL (SELECT CASE WHEN p.memory_a_id = ANY($2) THEN p.memory_b_id ELSE p.memory_a_id END \
                             AS other) o \
         WHERE p.organization_id = $1 AND p.decision = 'deferred' \
           AND (p.memory_a_id = ANY($2) OR p.memory_b_id = ANY($2)) AND NOT (other = ANY($2)) AND other <> $3 \
         ON CONFLICT DO NOTHING",
    )
    .bind(organization_id)
    .bind(sources.to_vec())
    .bind(merged)
    .execute(executor)
    .await
    .map(|r| r.rows_affected())
}

/// Deletes the organisation's pairs that can never be reviewed again, one of whose memories is no longer current
/// (superseded or archived: no new pair can name it), recorded before `before`; returns how many.
pub async fn prune_settled(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    before: chrono::DateTime<chrono::Utc>,
) -> sqlx::Result<u64> {
    sqlx::query(
        "DELETE FROM memory_dedup_pair p WHERE p.organization_id = $1 AND coalesce(p.reviewed_at, p.created_at) < $2 \
         AND EXISTS (SELECT 1 FROM memory m WHERE m.organization_id = p.organization_id \
                     AND m.id IN (p.memory_a_id, p.memory_b_id) AND m.status IN ('superseded', 'archived'))",
    )
    .bind(organization_id)
    .bind(before)
    .execute(executor)
    .await
    .map(|r| r.rows_affected())
}
