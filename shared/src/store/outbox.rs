//! The domain-event outbox: written in the transaction of the change it reports.

use sqlx::PgExecutor;
use uuid::Uuid;

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
