//! What ingestion reads and writes besides memories: the record of ingested batches, exact duplicates by content
//! hash (and the locks that keep concurrent batches from writing one twice), and near-duplicate neighbours for the
//! dedup pre-screen, each within one readership.

use std::collections::BTreeSet;

use pgvector::Vector;
use sqlx::{PgConnection, QueryBuilder};
use uuid::Uuid;

use super::branches::VectorScan;
use crate::domain::Readership;

/// A batch ingested before: the ids its memories got, in message order, and the digest of what it held (None for
/// batches recorded before digests were).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct IngestedBatch {
    pub memory_ids: Vec<Uuid>,
    pub digest: Option<String>,
}

/// Reserves `batch_id` for this transaction, recording the batch's `digest`. None: the caller ingests it; Some: it
/// was ingested before (a concurrent delivery waits here until the first commits, then gets its record).
pub async fn reserve_batch(
    conn: &mut PgConnection,
    organization_id: Uuid,
    batch_id: &str,
    digest: &str,
) -> sqlx::Result<Option<IngestedBatch>> {
    let reserved = sqlx::query(
        "INSERT INTO memory_ingest_batch (organization_id, batch_id, memory_ids, digest) VALUES ($1, $2, '{}', $3) \
         ON CONFLICT DO NOTHING",
    )
    .bind(organization_id)
    .bind(batch_id)
    .bind(digest)
    .execute(&mut *conn)
    .await?
    .rows_affected()
        == 1;
    if reserved { Ok(None) } else { ingested_batch(conn, organization_id, batch_id).await }
}

/// The record of a batch ingested before, without reserving it.
pub async fn ingested_batch(
    conn: &mut PgConnection,
    organization_id: Uuid,
    batch_id: &str,
) -> sqlx::Result<Option<IngestedBatch>> {
    sqlx::query_as("SELECT memory_ids, digest FROM memory_ingest_batch WHERE organization_id = $1 AND batch_id = $2")
        .bind(organization_id)
        .bind(batch_id)
        .fetch_optional(conn)
        .await
}

/// Records the ids a reserved batch got, in message order.
pub async fn complete_batch(
    conn: &mut PgConnection,
    organization_id: Uuid,
    batch_id: &str,
    memory_ids: &[Uuid],
) -> sqlx::Result<()> {
    sqlx::query("UPDATE memory_ingest_batch SET memory_ids = $3 WHERE organization_id = $1 AND batch_id = $2")
        .bind(organization_id)
        .bind(batch_id)
        .bind(memory_ids.to_vec())
        .execute(conn)
        .await
        .map(|_| ())
}

/// Holds, until the transaction ends, the organisation's lock on each of these content hashes, taken in the
/// order of the lock keys so that batches sharing texts queue instead of deadlocking. A batch that then finds no duplicate of a
/// text knows no concurrent batch is writing it.
pub async fn lock_content_hashes(
    conn: &mut PgConnection,
    organization_id: Uuid,
    content_hashes: &BTreeSet<String>,
) -> sqlx::Result<()> {
    if content_hashes.is_empty() {
        return Ok(());
    }
    let hashes: Vec<&str> = content_hashes.iter().map(String::as_str).collect();
    sqlx::query(
        "SELECT count(pg_advisory_xact_lock(k)) \
         FROM (SELECT DISTINCT hashtextextended($1::text || '/' || h, 0) AS k FROM unnest($2::text[]) h ORDER BY k) keys",
    )
    .bind(organization_id)
    .bind(hashes)
    .execute(conn)
    .await
    .map(|_| ())
}

/// Appends "the memory `m` has exactly this readership".
fn push_readership(qb: &mut QueryBuilder<'_, sqlx::Postgres>, readership: &Readership) {
    qb.push(" AND m.scope = ").push_bind(readership.scope);
    match readership.scope {
        crate::domain::Scope::Project => {
            qb.push(" AND m.project_id = ").push_bind(readership.owner);
        }
        crate::domain::Scope::Task => {
            qb.push(" AND m.project_task_id = ").push_bind(readership.owner);
        }
        crate::domain::Scope::Org | crate::domain::Scope::AgentPrivate => {}
    }
    if readership.scope != crate::domain::Scope::Org {
        qb.push(" AND m.agent_id IS NOT DISTINCT FROM ").push_bind(readership.agent_id);
    }
    qb.push(" AND m.sensitivity = ").push_bind(readership.sensitivity);
}

/// A current (candidate or active) memory with this content hash and readership.
pub async fn find_duplicate(
    conn: &mut PgConnection,
    organization_id: Uuid,
    content_hash: &str,
    readership: &Readership,
) -> sqlx::Result<Option<Uuid>> {
    let mut qb = QueryBuilder::new("SELECT m.id FROM memory m WHERE m.organization_id = ");
    qb.push_bind(organization_id)
        .push(" AND m.content_hash = ")
        .push_bind(content_hash.to_string())
        .push(" AND m.status IN ('candidate', 'active') AND (m.expires_at IS NULL OR m.expires_at > now())");
    push_readership(&mut qb, readership);
    qb.push(" ORDER BY m.id LIMIT 1");
    qb.build_query_scalar().fetch_optional(conn).await
}

/// Current (candidate or active), unexpired memories of the same readership whose cosine similarity to
/// `embedding` is at least `min_cosine`, most similar first. A pair with a candidate waits for the reviewer until
/// both are active. Read as search reads (both arms, each gated by the partition's registration), inside the
/// caller's transaction: for an organisation whose partition is ready (`partition`,
/// [`super::ann::partition_ready`]) with the vector branch's settings; for any other on the transaction's own, the
/// exact arm being the one to run (setting the branch's and back costs two round trips, about 0.17 ms).
#[allow(clippy::too_many_arguments)]
pub async fn near_duplicates(
    conn: &mut PgConnection,
    organization_id: Uuid,
    memory_id: Uuid,
    readership: &Readership,
    embedding: &[f32],
    min_cosine: f64,
    limit: i64,
    partition: bool,
) -> sqlx::Result<Vec<(Uuid, f64)>> {
    let mut qb = near_statement("", organization_id, memory_id, readership, embedding, min_cosine, limit);
    // Planned for this organisation each time (an unnamed statement): a cached generic plan would hold every
    // tenant's partition of `memory_vector`.
    let run = async |conn: &mut PgConnection| qb.build_query_as().persistent(false).fetch_all(conn).await;
    probe(conn, limit, partition, run).await
}

/// [`near_duplicates`]'s statement run under `EXPLAIN (ANALYZE, FORMAT JSON)`, as it runs (tests).
pub async fn explain_near_duplicates(
    conn: &mut PgConnection,
    organization_id: Uuid,
    memory_id: Uuid,
    readership: &Readership,
    embedding: &[f32],
    limit: i64,
    partition: bool,
) -> sqlx::Result<serde_json::Value> {
    let mut qb =
        near_statement(super::branches::EXPLAIN_ANALYZE, organization_id, memory_id, readership, embedding, 0.0, limit);
    let run = async |conn: &mut PgConnection| qb.build_query_scalar().persistent(false).fetch_one(conn).await;
    probe(conn, limit, partition, run).await
}

async fn probe<T>(
    conn: &mut PgConnection,
    limit: i64,
    partition: bool,
    run: impl AsyncFnOnce(&mut PgConnection) -> sqlx::Result<T>,
) -> sqlx::Result<T> {
    if partition { super::as_vector_search(conn, limit as usize, run).await } else { run(conn).await }
}

fn near_statement<'a>(
    prefix: &str,
    organization_id: Uuid,
    memory_id: Uuid,
    readership: &'a Readership,
    embedding: &[f32],
    min_cosine: f64,
    limit: i64,
) -> QueryBuilder<'a, sqlx::Postgres> {
    let vector = Vector::from(embedding.to_vec());
    let mut qb = QueryBuilder::new(format!("{prefix}SELECT id, cosine_sim FROM ("));
    let predicate = |qb: &mut QueryBuilder<'a, sqlx::Postgres>| {
        qb.push("m.organization_id = ")
            .push_bind(organization_id)
            .push(" AND m.status IN ('candidate', 'active') AND (m.expires_at IS NULL OR m.expires_at > now()) AND m.id <> ")
            .push_bind(memory_id);
        push_readership(qb, readership);
    };
    let columns = |qb: &mut QueryBuilder<'a, sqlx::Postgres>| {
        qb.push("SELECT m.id, ");
    };
    super::branches::push_nearest(&mut qb, organization_id, &vector, limit, VectorScan::Either, columns, predicate);
    qb.push(") near WHERE cosine_sim >= ").push_bind(min_cosine).push(" ORDER BY cosine_sim DESC, id");
    qb
}

/// Deletes the organisation's batch records written before `before` (a redelivery can come no later than the
/// queue's retention); returns how many.
pub async fn prune_batches(
    executor: impl sqlx::PgExecutor<'_>,
    organization_id: Uuid,
    before: chrono::DateTime<chrono::Utc>,
) -> sqlx::Result<u64> {
    sqlx::query("DELETE FROM memory_ingest_batch WHERE organization_id = $1 AND created_at < $2")
        .bind(organization_id)
        .bind(before)
        .execute(executor)
        .await
        .map(|r| r.rows_affected())
}
