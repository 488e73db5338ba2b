//! Every change of a memory's lifecycle state, each with its domain event in the same transaction. The lifecycle
//! jobs change state only through these functions: each checks that it changed exactly the one row it meant to
//! (anything else is a [`Conflict`], which rolls the caller's transaction back), and writes its outbox row only
//! then, so a no-op writes no event.

use sqlx::PgConnection;
use uuid::Uuid;

use super::{MEMORY_COLUMNS, outbox};
use crate::domain::{Memory, MemoryStatus, NewMemory};

/// The state a change expected was not there (another worker got there first, or the row is gone).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Conflict(pub String);

#[derive(Debug, thiserror::Error)]
pub enum TransitionError {
    #[error(transparent)]
    Conflict(#[from] Conflict),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

pub type Result<T> = std::result::Result<T, TransitionError>;

fn exactly_one(affected: u64, what: impl FnOnce() -> String) -> Result<()> {
    if affected == 1 { Ok(()) } else { Err(Conflict(format!("{} (changed {affected} rows)", what())).into()) }
}

/// Locks the memories for the rest of the transaction, in id order (so two jobs never deadlock), and returns them
/// as they are now. Missing ids are left out.
pub async fn lock(conn: &mut PgConnection, organization_id: Uuid, ids: &[Uuid]) -> sqlx::Result<Vec<Memory>> {
    let sql = format!(
        "SELECT {MEMORY_COLUMNS} FROM memory m WHERE m.organization_id = $1 AND m.id = ANY($2) \
         ORDER BY m.id FOR UPDATE"
    );
    sqlx::query_as(&sql).bind(organization_id).bind(ids.to_vec()).fetch_all(conn).await
}

/// Inserts a memory derived from `derived_from` (which may be empty), gives it their taxonomy tags and entity
/// mentions (the union), and records `memory.created`.
pub async fn create(conn: &mut PgConnection, new: &NewMemory, derived_from: &[Uuid]) -> Result<Memory> {
    let memory = super::memories::insert(&mut *conn, new).await?;
    let org = memory.organization_id;
    for (table, column) in [("memory_taxonomy_tag", "node_id"), ("memory_entity_mention", "entity_id")] {
        if derived_from.is_empty() {
            break;
        }
        sqlx::query(&format!(
            "INSERT INTO {table} (organization_id, memory_id, {column}) \
             SELECT DISTINCT organization_id, $2, {column} FROM {table} \
             WHERE organization_id = $1 AND memory_id = ANY($3) ON CONFLICT DO NOTHING"
        ))
        .bind(org)
        .bind(memory.id)
        .bind(derived_from.to_vec())
        .execute(&mut *conn)
        .await?;
    }
    let payload = serde_json::json!({
        "memory_id": memory.id,
        "memory_type": memory.memory_type,
        "scope": memory.scope,
        "source_kind": memory.provenance.source_kind,
        "derived_from": derived_from,
    });
    outbox::append(&mut *conn, org, "memory.created", payload).await?;
    Ok(memory)
}

/// `loser` (active or candidate) is superseded by `winner`; `reason` names the job's decision.
pub async fn supersede(
    conn: &mut PgConnection,
    organization_id: Uuid,
    loser: Uuid,
    winner: Uuid,
    reason: &str,
) -> Result<()> {
    let affected = sqlx::query(
        "UPDATE memory SET status = 'superseded', superseded_by = $3, superseded_at = now(), updated_at = now() \
         WHERE organization_id = $1 AND id = $2 AND status IN ('active', 'candidate')",
    )
    .bind(organization_id)
    .bind(loser)
    .bind(winner)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    exactly_one(affected, || format!("memory {loser} was no longer current when {winner} came to supersede it"))?;
    let payload = serde_json::json!({ "memory_id": loser, "superseded_by": winner, "reason": reason });
    outbox::append(&mut *conn, organization_id, "memory.superseded", payload).await?;
    Ok(())
}

/// A superseded memory is current again (its successor is forgotten: a merge it was a source of).
pub async fn reinstate(conn: &mut PgConnection, organization_id: Uuid, id: Uuid, reason: &str) -> Result<()> {
    let affected = sqlx::query(
        "UPDATE memory SET status = 'active', superseded_by = NULL, superseded_at = NULL, updated_at = now() \
         WHERE organization_id = $1 AND id = $2 AND status = 'superseded'",
    )
    .bind(organization_id)
    .bind(id)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    exactly_one(affected, || format!("memory {id} was no longer superseded when it was to be reinstated"))?;
    let payload = serde_json::json!({ "memory_id": id, "reason": reason });
    outbox::append(&mut *conn, organization_id, "memory.reinstated", payload).await?;
    Ok(())
}

/// Records that `merged` was made from `sources` (which the caller supersedes by it).
pub async fn record_merge(
    conn: &mut PgConnection,
    organization_id: Uuid,
    merged: Uuid,
    sources: &[Uuid],
) -> Result<()> {
    let payload = serde_json::json!({ "memory_id": merged, "sources": sources });
    outbox::append(&mut *conn, organization_id, "memory.merged", payload).await?;
    Ok(())
}

/// A current memory (active or candidate) is archived.
pub async fn archive(conn: &mut PgConnection, organization_id: Uuid, id: Uuid, reason: &str) -> Result<()> {
    let affected = sqlx::query(
        "UPDATE memory SET status = 'archived', archived_at = now(), updated_at = now() \
         WHERE organization_id = $1 AND id = $2 AND status IN ('active', 'candidate')",
    )
    .bind(organization_id)
    .bind(id)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    exactly_one(affected, || format!("memory {id} was no longer current when it was to be archived"))?;
    let payload = serde_json::json!({ "memory_id": id, "reason": reason });
    outbox::append(&mut *conn, organization_id, "memory.archived", payload).await?;
    Ok(())
}

/// Sets a memory's confidence from `from` to `to`, its event naming the memories that caused it (`because_of`, a
/// contradiction's); nothing (no event) when they are equal.
pub async fn change_confidence(
    conn: &mut PgConnection,
    organization_id: Uuid,
    id: Uuid,
    from: f64,
    to: f64,
    reason: &str,
    because_of: &[Uuid],
) -> Result<()> {
    let to = to.clamp(0.0, 1.0);
    if (to - from).abs() < 1e-9 {
        return Ok(());
    }
    let affected = sqlx::query(
        "UPDATE memory SET confidence = $4, updated_at = now() \
         WHERE organization_id = $1 AND id = $2 AND confidence = $3 AND status IN ('active', 'candidate')",
    )
    .bind(organization_id)
    .bind(id)
    .bind(from)
    .bind(to)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    exactly_one(affected, || format!("memory {id} changed before its confidence could be set"))?;
    let payload =
        serde_json::json!({ "memory_id": id, "from": from, "to": to, "reason": reason, "because_of": because_of });
    outbox::append(&mut *conn, organization_id, "memory.confidence_changed", payload).await?;
    Ok(())
}

/// A candidate becomes active (retrievable).
pub async fn promote(conn: &mut PgConnection, organization_id: Uuid, id: Uuid) -> Result<()> {
    set_status(conn, organization_id, id, MemoryStatus::Candidate, MemoryStatus::Active, "memory.promoted").await
}

/// An active memory goes back to candidate (a contradiction left it below the promotion confidence).
pub async fn demote(conn: &mut PgConnection, organization_id: Uuid, id: Uuid) -> Result<()> {
    set_status(conn, organization_id, id, MemoryStatus::Active, MemoryStatus::Candidate, "memory.demoted").await
}

async fn set_status(
    conn: &mut PgConnection,
    organization_id: Uuid,
    id: Uuid,
    from: MemoryStatus,
    to: MemoryStatus,
    event: &str,
) -> Result<()> {
    let affected = sqlx::query(
        "UPDATE memory SET status = $4, updated_at = now() WHERE organization_id = $1 AND id = $2 AND status = $3",
    )
    .bind(organization_id)
    .bind(id)
    .bind(from)
    .bind(to)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    exactly_one(affected, || format!("memory {id} was not {} when it was to become {}", from.as_str(), to.as_str()))?;
    outbox::append(&mut *conn, organization_id, event, serde_json::json!({ "memory_id": id })).await?;
    Ok(())
}
