//! The table `memory_skipped_file`: the files of a repository its last import did not make memory of, and why.

use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

/// A skipped file as stored: project, repository, path, reason, detail.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SkippedRow {
    pub project_id: Uuid,
    pub repository: String,
    pub path: String,
    pub reason: String,
    pub detail: String,
}

/// Replaces the list of a project's repository with `files` (path, reason, detail).
pub async fn replace(
    conn: &mut PgConnection,
    organization_id: Uuid,
    project_id: Uuid,
    repository: &str,
    files: &[(&str, &str, &str)],
) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM memory_skipped_file WHERE organization_id = $1 AND project_id = $2 AND repository = $3")
        .bind(organization_id)
        .bind(project_id)
        .bind(repository)
        .execute(&mut *conn)
        .await?;
    let paths: Vec<&str> = files.iter().map(|f| f.0).collect();
    let reasons: Vec<&str> = files.iter().map(|f| f.1).collect();
    let details: Vec<&str> = files.iter().map(|f| f.2).collect();
    sqlx::query(
        "INSERT INTO memory_skipped_file (organization_id, project_id, repository, path, reason, detail) \
         SELECT $1, $2, $3, path, reason, detail FROM unnest($4::text[], $5::text[], $6::text[]) AS f(path, reason, detail) \
         ON CONFLICT DO NOTHING",
    )
    .bind(organization_id)
    .bind(project_id)
    .bind(repository)
    .bind(&paths)
    .bind(&reasons)
    .bind(&details)
    .execute(conn)
    .await?;
    Ok(())
}

/// The organisation's skipped files, by project, repository and path, at most `limit`.
pub async fn list(executor: impl PgExecutor<'_>, organization_id: Uuid, limit: i64) -> sqlx::Result<Vec<SkippedRow>> {
    sqlx::query_as(
        "SELECT project_id, repository, path, reason, detail FROM memory_skipped_file WHERE organization_id = $1 \
         ORDER BY project_id, repository, path LIMIT $2",
    )
    .bind(organization_id)
    .bind(limit)
    .fetch_all(executor)
    .await
}

/// How many files of the organisation were skipped, by reason.
pub async fn counts(executor: impl PgExecutor<'_>, organization_id: Uuid) -> sqlx::Result<Vec<(String, i64)>> {
    sqlx::query_as(
        "SELECT reason, count(*) FROM memory_skipped_file WHERE organization_id = $1 GROUP BY reason ORDER BY reason",
    )
    .bind(organization_id)
    .fetch_all(executor)
    .await
}

/// Deletes the skipped files of one project of the organisation, or of all of them (forgetting a project or the
/// organisation: the paths name what the repository held).
pub async fn forget(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    project_id: Option<Uuid>,
) -> sqlx::Result<u64> {
    sqlx::query("DELETE FROM memory_skipped_file WHERE organization_id = $1 AND ($2::uuid IS NULL OR project_id = $2)")
        .bind(organization_id)
        .bind(project_id)
        .execute(executor)
        .await
        .map(|r| r.rows_affected())
}
