//! The domain-event outbox: written in the transaction of the change it reports, relayed to the event bus later.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

/// An event waiting in (or relayed from) the outbox.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct OutboxEvent {
    pub organization_id: Uuid,
    pub id: Uuid,
    pub event_type: String,
    pub payload: serde_json::Value,
    pub created_at: DateTime<Utc>,
    /// The order the events were written in (increasing across transactions).
    pub seq: i64,
}

/// Appends an event (for example `memory.superseded`) to the outbox.
pub async fn append(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    event_type: &str,
    payload: serde_json::Value,
) -> sqlx::Result<Uuid> {
    let id = Uuid::now_v7();
    sqlx::query("INSERT INTO domain_event_outbox (organization_id, id, event_type, payload) VALUES ($1, $2, $3, $4)")
        .bind(organization_id)
        .bind(id)
        .bind(event_type)
        .bind(payload)
        .execute(executor)
        .await?;
    Ok(id)
}

/// Makes this transaction the organisation's only event publisher until it ends, waiting while another relay
/// publishes a batch of the organisation's events: up to `wait`, or the role's lock timeout. False when `wait` ran
/// out first (the transaction is then aborted: roll it back). The lock's key is the organisation's: relays of
/// different organisations never wait for each other.
pub async fn lock_publisher(
    conn: &mut PgConnection,
    organization_id: Uuid,
    wait: Option<std::time::Duration>,
) -> sqlx::Result<bool> {
    if let Some(wait) = wait {
        // SET takes no bind parameters; the value is a number formatted here.
        sqlx::query(&format!("SET LOCAL lock_timeout = '{}ms'", wait.as_millis().max(1))).execute(&mut *conn).await?;
    }
    let locked = sqlx::query("SELECT pg_advisory_xact_lock(hashtext('domain_event_outbox'), hashtext($1::text))")
        .bind(organization_id)
        .execute(conn)
        .await;
    match locked {
        Ok(_) => Ok(true),
        Err(sqlx::Error::Database(e)) if wait.is_some() && e.code().as_deref() == Some("55P03") => Ok(false),
        Err(e) => Err(e),
    }
}

/// Locks up to `limit` of the organisation's unpublished events, in the order they were written, for this
/// transaction.
pub async fn claim_unpublished(
    conn: &mut PgConnection,
    organization_id: Uuid,
    limit: i64,
) -> sqlx::Result<Vec<OutboxEvent>> {
    sqlx::query_as(
        "SELECT organization_id, id, event_type, payload, created_at, seq FROM domain_event_outbox \
         WHERE organization_id = $1 AND published_at IS NULL ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED",
    )
    .bind(organization_id)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// Marks events published, at the moment the bus had accepted them: one time for the batch (they were sent
/// together, in order), not the transaction's start (a relay that waited for another's lock publishes after it, and
/// its rows say so).
pub async fn mark_published(executor: impl PgExecutor<'_>, organization_id: Uuid, ids: &[Uuid]) -> sqlx::Result<u64> {
    sqlx::query(
        "UPDATE domain_event_outbox SET published_at = statement_timestamp() \
         WHERE organization_id = $1 AND id = ANY($2) AND published_at IS NULL",
    )
    .bind(organization_id)
    .bind(ids.to_vec())
    .execute(executor)
    .await
    .map(|r| r.rows_affected())
}

/// How many of the organisation's events wait to be published.
pub async fn unpublished_count(executor: impl PgExecutor<'_>, organization_id: Uuid) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT count(*) FROM domain_event_outbox WHERE organization_id = $1 AND published_at IS NULL")
        .bind(organization_id)
        .fetch_one(executor)
        .await
}

/// Deletes the organisation's events published before `before`; returns how many.
pub async fn prune_published(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    before: DateTime<Utc>,
) -> sqlx::Result<u64> {
    sqlx::query("DELETE FROM domain_event_outbox WHERE organization_id = $1 AND published_at < $2")
        .bind(organization_id)
        .bind(before)
        .execute(executor)
        .await
        .map(|r| r.rows_affected())
}
