//! Agent profiles: the memory scopes each agent may read.

use sqlx::{PgExecutor, PgPool, types::Json};
use uuid::Uuid;

use crate::domain::{Scope, TaxonomyNode};

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
    /// How many statements have changed what the organisation's retrievals read (migrations/0004).
    pub generation: i64,
    /// The organisation's rows of `memory`, every status (its BM25 statistics' document count).
    pub memories: i64,
    /// Whether the organisation's own partition of `memory_vector` is ready (`ann`).
    pub vector_partition: bool,
}

/// The [`RetrievalContext`] of an organisation and agent, in one prepared round trip (it precedes every
/// retrieval): `memory_retrieval_context` sets the organisation for its own implicit transaction
/// and reads under RLS.
pub async fn retrieval_context(
    pool: &PgPool,
    organization_id: Uuid,
    agent_id: Option<Uuid>,
) -> sqlx::Result<RetrievalContext> {
    type Row = (Option<Vec<String>>, Json<Vec<TaxonomyNode>>, bool, i64, i64, bool);
    let (scopes, nodes, has_entity_profiles, generation, memories, vector_partition): Row =
        super::connections::again_if_lost(pool, |mut conn| async move {
            sqlx::query_as(
                "SELECT read_scopes, taxonomy, has_entity_profiles, generation, memories, vector_partition \
                 FROM memory_retrieval_context($1, $2)",
            )
            .bind(organization_id)
            .bind(agent_id)
            .fetch_one(&mut *conn)
            .await
        })
        .await?;
    let read_scopes = parse_scopes(scopes)?;
    Ok(RetrievalContext { read_scopes, taxonomy: nodes.0, has_entity_profiles, generation, memories, vector_partition })
}

/// Creates or replaces an agent's profile. Read scopes are a hierarchy rooted at `org`: every agent reads its
/// organisation's org-wide memories, so `org` is added when missing.
pub async fn upsert(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    agent_id: Uuid,
    name: &str,
    read_scopes: &[Scope],
) -> sqlx::Result<()> {
    let mut scopes: Vec<&str> = read_scopes.iter().map(|s| s.as_str()).collect();
    if !scopes.contains(&Scope::Org.as_str()) {
        scopes.insert(0, Scope::Org.as_str());
    }
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

/// An agent's stored read scopes (None without a profile).
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
