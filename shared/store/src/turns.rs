//! Whose turn it is: the registry of organisations (`domain_event_outbox_org`, filled by the outboxes' triggers)
//! and the stamps by which every scheduled sweep visits them in turn. The only statements that see more than one
//! organisation.

use sqlx::PgExecutor;
use uuid::Uuid;

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
