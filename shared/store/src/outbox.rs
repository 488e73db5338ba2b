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

/// The organisations that have ever written an event or a job (ids only; the relay visits each under its own
/// setting).
pub async fn organizations(executor: impl PgExecutor<'_>) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar("SELECT organization_id FROM domain_event_outbox_org ORDER BY organization_id")
        .fetch_all(executor)
        .await
}

/// A scheduled task that visits the organisations in turns, each with its own stamp in `domain_event_outbox_org`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sweep {
    /// The outbox relay's sweep.
    Outbox,
    /// The lifecycle sweep (reviews due, undecided candidates).
    Lifecycle,
    /// The prune of old outbox, batch and pair rows.
    Prune,
}

impl Sweep {
    fn stamp(self) -> &'static str {
        match self {
            Sweep::Outbox => "swept_at",
            Sweep::Lifecycle => "lifecycle_swept_at",
            Sweep::Prune => "pruned_at",
        }
    }
}

/// The next `limit` organisations for `sweep`, least recently visited by it first, stamped as visited now (a
/// concurrent run takes others).
pub async fn next_to_sweep(executor: impl PgExecutor<'_>, sweep: Sweep, limit: i64) -> sqlx::Result<Vec<Uuid>> {
    let stamp = sweep.stamp();
    sqlx::query_scalar(&format!(
        "UPDATE domain_event_outbox_org o SET {stamp} = now() FROM (\
             SELECT organization_id FROM domain_event_outbox_org ORDER BY {stamp} NULLS FIRST, organization_id \
             LIMIT $1 FOR UPDATE SKIP LOCKED) next \
         WHERE o.organization_id = next.organization_id RETURNING o.organization_id",
    ))
    .bind(limit)
    .fetch_all(executor)
    .await
}

/// Makes the organisations the first `sweep` visits next (their last visit left work behind).
pub async fn sweep_first(executor: impl PgExecutor<'_>, sweep: Sweep, organizations: &[Uuid]) -> sqlx::Result<()> {
    sqlx::query(&format!("UPDATE domain_event_outbox_org SET {} = NULL WHERE organization_id = ANY($1)", sweep.stamp()))
        .bind(organizations.to_vec())
        .execute(executor)
        .await
        .map(|_| ())
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
