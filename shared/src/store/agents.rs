//! Agent profiles: the memory scopes each agent may read.

use sqlx::{PgExecutor, PgPool, Row, types::Json};
use uuid::Uuid;

use crate::domain::{Scope, TaxonomyNode};

/// The agent's `memory_read_scopes`, or None when the agent has no profile.
pub async fn read_scopes(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    agent_id: Uuid,
) -> sqlx::Result<Option<Vec<Scope>>> {
    let scopes: Option<Vec<String>> =
        sqlx::query_scalar("SELECT memory_read_scopes FROM agent_profile WHERE organization_id = $1 AND agent_id = $2")
            .bind(organization_id)
            .bind(agent_id)
            .fetch_optional(executor)
            .await?;
    parse_scopes(scopes)
}

fn parse_scopes(scopes: Option<Vec<String>>) -> sqlx::Result<Option<Vec<Scope>>> {
    scopes
        .map(|s| s.iter().map(|v| v.parse::<Scope>().map_err(|e| sqlx::Error::Decode(Box::new(e)))).collect())
        .transpose()
}

/// What retrieval needs before it searches.
#[derive(Debug)]
pub struct RetrievalContext {
    /// The agent's read scopes (None without an agent or profile).
    pub read_scopes: Option<Vec<Scope>>,
    pub taxonomy: Vec<TaxonomyNode>,
    /// Whether any entity of the organisation has a synthesised profile.
    pub has_entity_profiles: bool,
}

/// The [`RetrievalContext`] of an organisation and agent, in one round trip (it precedes every retrieval).
pub async fn retrieval_context(
    pool: &PgPool,
    organization_id: Uuid,
    agent_id: Option<Uuid>,
) -> sqlx::Result<RetrievalContext> {
    let agent = agent_id.map_or_else(|| "NULL".to_string(), |id| format!("'{id}'::uuid"));
    let statement = format!(
        "SELECT (SELECT memory_read_scopes FROM agent_profile \
                 WHERE organization_id = '{organization_id}' AND agent_id = {agent}) AS read_scopes, \
                coalesce((SELECT json_agg(json_build_object('id', id, 'parent_id', parent_id, 'name', name) \
                                          ORDER BY name, id) \
                          FROM memory_taxonomy_node WHERE organization_id = '{organization_id}'), '[]'::json) \
                    AS taxonomy, \
                EXISTS (SELECT 1 FROM memory_entity \
                        WHERE organization_id = '{organization_id}' AND synthesis_memory_id IS NOT NULL) \
                    AS has_entity_profiles"
    );
    let rows = super::read_for_org(pool, organization_id, &statement).await?;
    let row = rows.first().ok_or(sqlx::Error::RowNotFound)?;
    let scopes: Option<Vec<String>> = row.try_get("read_scopes")?;
    let nodes: Json<Vec<TaxonomyNode>> = row.try_get("taxonomy")?;
    Ok(RetrievalContext {
        read_scopes: parse_scopes(scopes)?,
        taxonomy: nodes.0,
        has_entity_profiles: row.try_get("has_entity_profiles")?,
    })
}

/// Creates or replaces an agent's profile.
pub async fn upsert(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    agent_id: Uuid,
    name: &str,
    read_scopes: &[Scope],
) -> sqlx::Result<()> {
    let scopes: Vec<&str> = read_scopes.iter().map(|s| s.as_str()).collect();
    sqlx::query(
        "INSERT INTO agent_profile (organization_id, agent_id, name, memory_read_scopes) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (organization_id, agent_id) DO UPDATE \
         SET name = EXCLUDED.name, memory_read_scopes = EXCLUDED.memory_read_scopes, updated_at = now()",
    )
    .bind(organization_id)
    .bind(agent_id)
    .bind(name)
    .bind(scopes)
    .execute(executor)
    .await
    .map(|_| ())
}
