//! Contradiction pre-screening and the record of reviewed pairs.

use sqlx::{FromRow, PgConnection, PgExecutor};
use uuid::Uuid;

use super::MEMORY_COLUMNS;
use crate::domain::Memory;

/// An existing memory and its cosine similarity to the memory being checked.
#[derive(Debug, Clone, FromRow)]
pub struct SimilarMemory {
    #[sqlx(flatten)]
    pub memory: Memory,
    pub cosine_sim: f64,
}

/// Active memories of at most `max_chars` characters sharing an entity mention with `memory_id`, with cosine
/// similarity in [low, high], not yet reviewed against it; the `limit` most similar first.
pub async fn unreviewed_candidates(
    conn: &mut PgConnection,
    organization_id: Uuid,
    memory_id: Uuid,
    (low, high): (f64, f64),
    max_chars: i64,
    limit: i64,
) -> sqlx::Result<Vec<SimilarMemory>> {
    let sql = format!(
        "SELECT {MEMORY_COLUMNS}, 1 - (m.embedding <=> n.embedding) AS cosine_sim \
         FROM memory n JOIN memory m ON m.organization_id = n.organization_id \
         WHERE n.organization_id = $1 AND n.id = $2 AND m.status = 'active' AND m.memory_type <> 'entity_profile' \
           AND (m.expires_at IS NULL OR m.expires_at > now()) \
           AND m.id IN (SELECT b.memory_id FROM memory_entity_mention a JOIN memory_entity_mention b \
                          ON b.organization_id = a.organization_id AND b.entity_id = a.entity_id \
                        WHERE a.organization_id = $1 AND a.memory_id = $2 AND b.memory_id <> $2) \
           AND NOT EXISTS (SELECT 1 FROM memory_contradiction_reviewed r WHERE r.organization_id = $1 \
                           AND r.new_memory_id = $2 AND r.existing_memory_id = m.id) \
           AND 1 - (m.embedding <=> n.embedding) BETWEEN $3 AND $4 AND char_length(m.content) <= $6 \
         ORDER BY cosine_sim DESC, m.id LIMIT $5"
    );
    sqlx::query_as(&sql)
        .bind(organization_id)
        .bind(memory_id)
        .bind(low)
        .bind(high)
        .bind(limit)
        .bind(max_chars)
        .fetch_all(conn)
        .await
}

/// Records the relation found for a pair; false when it was already recorded (a redelivered job).
pub async fn record(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    new_memory_id: Uuid,
    existing_memory_id: Uuid,
    relation: &str,
) -> sqlx::Result<bool> {
    sqlx::query(
        "INSERT INTO memory_contradiction_reviewed (organization_id, new_memory_id, existing_memory_id, relation) \
         VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
    )
    .bind(organization_id)
    .bind(new_memory_id)
    .bind(existing_memory_id)
    .bind(relation)
    .execute(executor)
    .await
    .map(|r| r.rows_affected() == 1)
}
