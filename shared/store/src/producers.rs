//! `memory_producer`: the senders allowed to write into an organisation, and the highest trust each may claim.

use sqlx::PgExecutor;
use uuid::Uuid;

use crate::domain::TrustLevel;

/// A sender's grant in one organisation.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Producer {
    pub sender_id: String,
    pub name: String,
    pub max_trust: TrustLevel,
    /// A `verified` producer that may forget any memory of the organisation, not only what it sent.
    pub forgets_any: bool,
    /// A repository importer: it may write memories anchored to a chunk of a file.
    pub imports: bool,
}

/// What a sender's grants (its own and its role's) let it do beyond writing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct Rights {
    pub forgets_any: bool,
    pub imports: bool,
}

/// The highest trust `sender_id` may claim in the organisation; None when it may not write there. A sender of an
/// assumed role (SQS reports `<role id>:<session name>`) is covered by a grant to the role id, every session of it,
/// or to that one session; with a grant of each kind, the higher trust of the two counts.
pub async fn grant(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    sender_id: &str,
) -> sqlx::Result<Option<TrustLevel>> {
    sqlx::query_scalar(
        "SELECT max_trust FROM memory_producer WHERE organization_id = $1 AND sender_id IN ($2, $3) \
         ORDER BY CASE max_trust WHEN 'verified' THEN 0 WHEN 'unverified' THEN 1 ELSE 2 END LIMIT 1",
    )
    .bind(organization_id)
    .bind(sender_id)
    .bind(role(sender_id))
    .fetch_optional(executor)
    .await
}

/// The role of a sender (`<role id>:<session name>` for an assumed role), as batches record who sent them.
pub fn role(sender_id: &str) -> &str {
    sender_id.split(':').next().unwrap_or(sender_id)
}

/// What the grants of `sender_id` (its own and its role's) let it do: forget any memory of the organisation, not
/// only those of the batches it sent (a `verified` grant only); write anchored chunks.
pub async fn rights(executor: impl PgExecutor<'_>, organization_id: Uuid, sender_id: &str) -> sqlx::Result<Rights> {
    sqlx::query_as(
        "SELECT coalesce(bool_or(forgets_any AND max_trust = 'verified'), false) AS forgets_any, \
                coalesce(bool_or(imports), false) AS imports \
         FROM memory_producer WHERE organization_id = $1 AND sender_id IN ($2, $3)",
    )
    .bind(organization_id)
    .bind(sender_id)
    .bind(role(sender_id))
    .fetch_one(executor)
    .await
}

/// Grants (or changes the grant of) a sender in the organisation.
pub async fn upsert(executor: impl PgExecutor<'_>, organization_id: Uuid, producer: &Producer) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO memory_producer (organization_id, sender_id, name, max_trust, forgets_any, imports) \
         VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (organization_id, sender_id) DO UPDATE SET name = EXCLUDED.name, max_trust = EXCLUDED.max_trust, \
             forgets_any = EXCLUDED.forgets_any, imports = EXCLUDED.imports",
    )
    .bind(organization_id)
    .bind(&producer.sender_id)
    .bind(&producer.name)
    .bind(producer.max_trust)
    .bind(producer.forgets_any)
    .bind(producer.imports)
    .execute(executor)
    .await
    .map(|_| ())
}

/// Withdraws a sender's grant; false when it had none.
pub async fn remove(executor: impl PgExecutor<'_>, organization_id: Uuid, sender_id: &str) -> sqlx::Result<bool> {
    sqlx::query("DELETE FROM memory_producer WHERE organization_id = $1 AND sender_id = $2")
        .bind(organization_id)
        .bind(sender_id)
        .execute(executor)
        .await
        .map(|r| r.rows_affected() == 1)
}

/// The organisation's producers, by sender.
pub async fn list(executor: impl PgExecutor<'_>, organization_id: Uuid) -> sqlx::Result<Vec<Producer>> {
    sqlx::query_as(
        "SELECT sender_id, name, max_trust, forgets_any, imports FROM memory_producer WHERE organization_id = $1 ORDER BY sender_id",
    )
    .bind(organization_id)
    .fetch_all(executor)
    .await
}
