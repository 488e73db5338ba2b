//! Reading and writing `memory` rows.

use chrono::{DateTime, Utc};
use pgvector::Vector;
use sqlx::{PgConnection, PgExecutor, QueryBuilder};
use uuid::Uuid;

use super::{MEMORY_COLUMNS, ScopeFilter};
use crate::domain::{Memory, MemoryStatus, NewMemory};

/// Inserts a memory and returns it as stored.
pub async fn insert(executor: impl PgExecutor<'_>, new: &NewMemory) -> sqlx::Result<Memory> {
    let sql = format!(
        "INSERT INTO memory AS m (organization_id, id, project_id, project_task_id, agent_id, scope, memory_type, \
             status, sensitivity, content, embedding, confidence, created_at, updated_at, file_backed, file_path, \
             content_hash, source_kind, source_ref, trust_level, tags, labels) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, coalesce($13, now()), coalesce($13, now()), \
             $14 IS NOT NULL, $14, $15, $16, $17, $18, $19, $20) \
         RETURNING {MEMORY_COLUMNS}"
    );
    sqlx::query_as(&sql)
        .bind(new.organization_id)
        .bind(Uuid::now_v7())
        .bind(new.project_id)
        .bind(new.project_task_id)
        .bind(new.agent_id)
        .bind(new.scope)
        .bind(new.memory_type)
        .bind(new.status)
        .bind(new.sensitivity)
        .bind(&new.content)
        .bind(new.embedding.clone().map(Vector::from))
        .bind(new.confidence)
        .bind(new.created_at)
        .bind(&new.file_path)
        .bind(&new.content_hash)
        .bind(new.provenance.source_kind)
        .bind(&new.provenance.source_ref)
        .bind(new.provenance.trust_level)
        .bind(&new.tags)
        .bind(&new.labels)
        .fetch_one(executor)
        .await
}

/// A memory by id, whatever its status.
pub async fn get(executor: impl PgExecutor<'_>, organization_id: Uuid, id: Uuid) -> sqlx::Result<Option<Memory>> {
    let sql = format!("SELECT {MEMORY_COLUMNS} FROM memory m WHERE m.organization_id = $1 AND m.id = $2");
    sqlx::query_as(&sql).bind(organization_id).bind(id).fetch_optional(executor).await
}

/// A memory by id if the scope filter admits it (status, scope, sensitivity), else None.
pub async fn get_readable(conn: &mut PgConnection, scope: &ScopeFilter, id: Uuid) -> sqlx::Result<Option<Memory>> {
    let mut qb = QueryBuilder::new(format!("SELECT {MEMORY_COLUMNS} FROM memory m WHERE "));
    scope.push_sql(&mut qb);
    qb.push(" AND m.id = ").push_bind(id);
    qb.build_query_as().fetch_optional(conn).await
}

/// Marks `loser` superseded by `winner`.
pub async fn supersede(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    loser: Uuid,
    winner: Uuid,
) -> sqlx::Result<u64> {
    sqlx::query(
        "UPDATE memory SET status = 'superseded', superseded_by = $3, superseded_at = now(), updated_at = now() \
         WHERE organization_id = $1 AND id = $2 AND status <> 'superseded'",
    )
    .bind(organization_id)
    .bind(loser)
    .bind(winner)
    .execute(executor)
    .await
    .map(|r| r.rows_affected())
}

/// Marks a memory archived.
pub async fn archive(executor: impl PgExecutor<'_>, organization_id: Uuid, id: Uuid) -> sqlx::Result<u64> {
    sqlx::query(
        "UPDATE memory SET status = 'archived', archived_at = now(), updated_at = now() \
         WHERE organization_id = $1 AND id = $2",
    )
    .bind(organization_id)
    .bind(id)
    .execute(executor)
    .await
    .map(|r| r.rows_affected())
}

/// Sets a memory's confidence and status together.
pub async fn set_confidence_and_status(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    id: Uuid,
    confidence: f64,
    status: MemoryStatus,
) -> sqlx::Result<u64> {
    sqlx::query(
        "UPDATE memory SET confidence = $3, status = $4, updated_at = now() \
         WHERE organization_id = $1 AND id = $2",
    )
    .bind(organization_id)
    .bind(id)
    .bind(confidence.clamp(0.0, 1.0))
    .bind(status)
    .execute(executor)
    .await
    .map(|r| r.rows_affected())
}

/// Active file-backed memories of an organisation, oldest scan first.
pub async fn active_file_backed(executor: impl PgExecutor<'_>, organization_id: Uuid) -> sqlx::Result<Vec<Memory>> {
    let sql = format!(
        "SELECT {MEMORY_COLUMNS} FROM memory m WHERE m.organization_id = $1 AND m.file_backed AND m.status = 'active' \
         ORDER BY m.file_last_scanned_at NULLS FIRST, m.id"
    );
    sqlx::query_as(&sql).bind(organization_id).fetch_all(executor).await
}

/// Records that a file-backed memory was scanned at `at`.
pub async fn mark_scanned(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    id: Uuid,
    at: DateTime<Utc>,
) -> sqlx::Result<u64> {
    sqlx::query("UPDATE memory SET file_last_scanned_at = $3 WHERE organization_id = $1 AND id = $2")
        .bind(organization_id)
        .bind(id)
        .bind(at)
        .execute(executor)
        .await
        .map(|r| r.rows_affected())
}

/// Readable memories superseded by any of `ids`, newest first.
pub async fn superseded_by_any(
    conn: &mut PgConnection,
    scope: &ScopeFilter,
    ids: &[Uuid],
) -> sqlx::Result<Vec<Memory>> {
    let mut qb = QueryBuilder::new(format!("SELECT {MEMORY_COLUMNS} FROM memory m WHERE "));
    scope.push_sql(&mut qb);
    qb.push(" AND m.superseded_by = ANY(").push_bind(ids.to_vec()).push(") ORDER BY m.created_at DESC, m.id");
    qb.build_query_as().fetch_all(conn).await
}
