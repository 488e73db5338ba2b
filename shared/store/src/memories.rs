//! Reading and writing `memory` rows.

use chrono::{DateTime, Utc};
use pgvector::Vector;
use sqlx::{PgConnection, PgExecutor, QueryBuilder};
use uuid::Uuid;

use memory_model::jobs::FileCursor;

use super::{MEMORY_COLUMNS, ReadFilter};
use crate::domain::{Anchor, Memory, NewMemory, TrustLevel};

/// Inserts a memory and returns it as stored.
pub async fn insert(executor: impl PgExecutor<'_>, new: &NewMemory) -> sqlx::Result<Memory> {
    let sql = format!(
        "INSERT INTO memory AS m (organization_id, id, project_id, project_task_id, agent_id, scope, memory_type, \
             status, sensitivity, content, embedding, confidence, created_at, updated_at, file_backed, file_path, \
             content_hash, source_kind, source_ref, trust_level, tags, labels, expires_at, context, repository, \
             language, anchor, sender) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, coalesce($13, now()), coalesce($13, now()), \
             $14 IS NOT NULL, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26) \
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
        .bind(new.expires_at)
        .bind(&new.context)
        .bind(&new.repository)
        .bind(&new.language)
        .bind(new.anchor.as_ref().map(sqlx::types::Json))
        .bind(&new.sender)
        .fetch_one(executor)
        .await
}

/// A memory by id, whatever its status.
pub async fn get(executor: impl PgExecutor<'_>, organization_id: Uuid, id: Uuid) -> sqlx::Result<Option<Memory>> {
    let sql = format!("SELECT {MEMORY_COLUMNS} FROM memory m WHERE m.organization_id = $1 AND m.id = $2");
    sqlx::query_as(&sql).bind(organization_id).bind(id).fetch_optional(executor).await
}

/// Every memory of the organisation, whatever its status (the soak's checks).
pub async fn all(executor: impl PgExecutor<'_>, organization_id: Uuid) -> sqlx::Result<Vec<Memory>> {
    let sql = format!("SELECT {MEMORY_COLUMNS} FROM memory m WHERE m.organization_id = $1");
    sqlx::query_as(&sql).bind(organization_id).fetch_all(executor).await
}

/// A memory by id if the scope filter admits it (status, scope, sensitivity), else None.
pub async fn get_readable(conn: &mut PgConnection, scope: &ReadFilter, id: Uuid) -> sqlx::Result<Option<Memory>> {
    let mut qb = QueryBuilder::new(format!("SELECT {MEMORY_COLUMNS} FROM memory m WHERE "));
    scope.push_sql(&mut qb);
    qb.push(" AND m.id = ").push_bind(id);
    qb.build_query_as().fetch_optional(conn).await
}

/// The active file-backed memories of the next `files` files (of one project when given) after `after`, in
/// (project, path) order, paths by their bytes as Rust orders them: the pages of a file scan, each file whole.
pub async fn active_file_backed_page(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    project_id: Option<Uuid>,
    after: Option<&FileCursor>,
    files: i64,
) -> sqlx::Result<Vec<Memory>> {
    let sql = format!(
        "WITH files AS (\
             SELECT DISTINCT coalesce(project_id, '00000000-0000-0000-0000-000000000000') AS project, \
                    file_path COLLATE \"C\" AS file_path \
             FROM memory WHERE organization_id = $1 AND file_backed AND status = 'active' \
               AND ($2::uuid IS NULL OR project_id = $2) \
               AND ($3::text IS NULL OR (coalesce(project_id, '00000000-0000-0000-0000-000000000000'), \
                    file_path COLLATE \"C\") > (coalesce($4::uuid, '00000000-0000-0000-0000-000000000000'), $3)) \
             ORDER BY 1, 2 LIMIT $5) \
         SELECT {MEMORY_COLUMNS} FROM memory m JOIN files f \
           ON coalesce(m.project_id, '00000000-0000-0000-0000-000000000000') = f.project AND m.file_path = f.file_path \
         WHERE m.organization_id = $1 AND m.file_backed AND m.status = 'active' \
         ORDER BY f.project, f.file_path, m.id"
    );
    sqlx::query_as(&sql)
        .bind(organization_id)
        .bind(project_id)
        .bind(after.map(|a| a.path.clone()))
        .bind(after.and_then(|a| a.project_id))
        .bind(files)
        .fetch_all(executor)
        .await
}

/// How many active file-backed memories each project of an organisation has.
pub async fn file_backed_by_project(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
) -> sqlx::Result<Vec<(Option<Uuid>, i64)>> {
    sqlx::query_as(
        "SELECT project_id, count(*) FROM memory WHERE organization_id = $1 AND file_backed AND status = 'active' \
         GROUP BY project_id ORDER BY project_id",
    )
    .bind(organization_id)
    .fetch_all(executor)
    .await
}

/// Sets the hash of a file-backed memory's file as last read and, when given, its anchor's place (a baseline, or a
/// chunk that moved).
pub async fn set_file_state(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    id: Uuid,
    hash: &str,
    anchor: Option<&Anchor>,
) -> sqlx::Result<u64> {
    sqlx::query(
        "UPDATE memory SET content_hash = $3, anchor = coalesce($4, anchor) WHERE organization_id = $1 AND id = $2",
    )
    .bind(organization_id)
    .bind(id)
    .bind(hash)
    .bind(anchor.map(sqlx::types::Json))
    .execute(executor)
    .await
    .map(|r| r.rows_affected())
}

/// Lowers (or sets) a memory's trust level.
pub async fn set_trust(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    id: Uuid,
    trust: TrustLevel,
) -> sqlx::Result<u64> {
    sqlx::query("UPDATE memory SET trust_level = $3 WHERE organization_id = $1 AND id = $2")
        .bind(organization_id)
        .bind(id)
        .bind(trust)
        .execute(executor)
        .await
        .map(|r| r.rows_affected())
}

/// The files whose active memories' last scan could not read them, with the reason: (project, path, error), at most
/// `limit`.
pub async fn scan_errors(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    limit: i64,
) -> sqlx::Result<Vec<(Option<Uuid>, String, String)>> {
    sqlx::query_as(
        "SELECT DISTINCT ON (project_id, file_path) project_id, file_path, file_scan_error FROM memory \
         WHERE organization_id = $1 AND status = 'active' AND file_scan_error IS NOT NULL \
         ORDER BY project_id, file_path LIMIT $2",
    )
    .bind(organization_id)
    .bind(limit)
    .fetch_all(executor)
    .await
}

/// Whether the file at `path` of the project became memory the filter's principal may read: it has a current memory
/// read from the file itself (`file` source: an imported chunk or whole file), and the principal may read every
/// such memory of it. Memories from other sources that merely name the file neither open nor hide it.
pub async fn file_readable(
    conn: &mut PgConnection,
    scope: &ReadFilter,
    project_id: Uuid,
    path: &str,
) -> sqlx::Result<bool> {
    let mut qb = QueryBuilder::new("SELECT count(*) > 0 AND count(*) = count(*) FILTER (WHERE ");
    scope.push_sql(&mut qb);
    qb.push(") FROM memory m WHERE m.organization_id = ")
        .push_bind(scope.organization_id())
        .push(" AND m.project_id = ")
        .push_bind(project_id)
        .push(" AND m.file_path = ")
        .push_bind(path)
        .push(" AND m.source_kind = 'file' AND m.status = 'active' AND (m.expires_at IS NULL OR m.expires_at > now())");
    qb.build_query_scalar().fetch_one(conn).await
}

/// The active project-scope memory of the project's repository that is the chunk at `symbol` of `path` (anchored
/// there, its content the chunk's text), if any.
pub async fn chunk_at(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    project_id: Option<Uuid>,
    repository: Option<&str>,
    path: &str,
    symbol: &str,
) -> sqlx::Result<Option<Uuid>> {
    sqlx::query_scalar(
        "SELECT id FROM memory WHERE organization_id = $1 AND project_id = $2 AND file_path = $3 \
             AND anchor IS NOT NULL AND status = 'active' AND scope = 'project' AND repository IS NOT DISTINCT FROM $5 \
             AND anchor->>'symbol' = $4 \
             AND anchor->>'hash' = 'sha256:' || encode(sha256(convert_to(content, 'UTF8')), 'hex') LIMIT 1",
    )
    .bind(organization_id)
    .bind(project_id)
    .bind(path)
    .bind(symbol)
    .bind(repository)
    .fetch_optional(executor)
    .await
}

/// Up to `limit` active memories of the organisation whose time to live has passed, locked for the caller's
/// transaction (those another transaction holds are left for the next run).
pub async fn expired(executor: impl PgExecutor<'_>, organization_id: Uuid, limit: i64) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar(
        "SELECT id FROM memory WHERE organization_id = $1 AND status = 'active' AND expires_at <= now() \
         ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED",
    )
    .bind(organization_id)
    .bind(limit)
    .fetch_all(executor)
    .await
}

/// Holds, to the end of the transaction, the right to write the chunk copies of one file of a project (an import
/// and a scan, or two scans, then never both write the same chunk).
pub async fn lock_file(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    project_id: Option<Uuid>,
    path: &str,
) -> sqlx::Result<()> {
    sqlx::query(
        "SELECT pg_advisory_xact_lock(hashtextextended($1::text || '/' || coalesce($2::text, '') || '/' || $3, 0))",
    )
    .bind(organization_id)
    .bind(project_id)
    .bind(path)
    .execute(executor)
    .await
    .map(|_| ())
}

/// Records a scan of a file-backed memory at `at`: `verified` when its file was read and found unchanged, and
/// why the file could not be read (None clears an earlier error).
pub async fn record_scan(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    id: Uuid,
    at: DateTime<Utc>,
    verified: bool,
    error: Option<&str>,
) -> sqlx::Result<u64> {
    sqlx::query(
        "UPDATE memory SET file_last_scanned_at = $3, file_scan_error = $5, \
             last_verified_at = CASE WHEN $4 THEN $3 ELSE last_verified_at END \
         WHERE organization_id = $1 AND id = $2",
    )
    .bind(organization_id)
    .bind(id)
    .bind(at)
    .bind(verified)
    .bind(error)
    .execute(executor)
    .await
    .map(|r| r.rows_affected())
}

/// Readable memories superseded by any of `ids`, newest first.
pub async fn superseded_by_any(conn: &mut PgConnection, scope: &ReadFilter, ids: &[Uuid]) -> sqlx::Result<Vec<Memory>> {
    let mut qb = QueryBuilder::new(format!("SELECT {MEMORY_COLUMNS} FROM memory m WHERE "));
    scope.push_sql(&mut qb);
    qb.push(" AND m.superseded_by = ANY(").push_bind(ids.to_vec()).push(") ORDER BY m.created_at DESC, m.id");
    qb.build_query_as().fetch_all(conn).await
}

/// Records that the contradiction check decided the memory now.
pub async fn mark_checked(executor: impl PgExecutor<'_>, organization_id: Uuid, id: Uuid) -> sqlx::Result<()> {
    sqlx::query("UPDATE memory SET checked_at = now() WHERE organization_id = $1 AND id = $2")
        .bind(organization_id)
        .bind(id)
        .execute(executor)
        .await
        .map(|_| ())
}

/// Candidates the contradiction check has not decided, written (or last changed) longer than `older_than` ago,
/// oldest first, at most `limit`.
pub async fn undecided_candidates(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    older_than: chrono::TimeDelta,
    limit: i64,
) -> sqlx::Result<Vec<(Uuid, chrono::DateTime<chrono::Utc>)>> {
    sqlx::query_as(
        "SELECT id, updated_at FROM memory WHERE organization_id = $1 AND status = 'candidate' \
         AND checked_at IS NULL AND updated_at < now() - $2 ORDER BY updated_at, id LIMIT $3",
    )
    .bind(organization_id)
    .bind(older_than)
    .bind(limit)
    .fetch_all(executor)
    .await
}

/// Records what a scan found of a file-backed memory's file: whether it changed (since when, kept from an earlier
/// scan) and whether it is missing (likewise); None clears the mark.
pub async fn mark_file(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    id: Uuid,
    changed: bool,
    missing: bool,
    at: DateTime<Utc>,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE memory SET file_changed_at = CASE WHEN $3 THEN coalesce(file_changed_at, $5) END, \
             file_missing_since = CASE WHEN $4 THEN coalesce(file_missing_since, $5) END \
         WHERE organization_id = $1 AND id = $2",
    )
    .bind(organization_id)
    .bind(id)
    .bind(changed)
    .bind(missing)
    .bind(at)
    .execute(executor)
    .await
    .map(|_| ())
}
