//! Forgetting in SQL: which memories a selector matches, what was derived from them, and the erasure that leaves a
//! tombstone.

use sqlx::{PgConnection, QueryBuilder};
use uuid::Uuid;

/// What to forget in an organisation.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ForgetSelector {
    /// These memories.
    Memories(Vec<Uuid>),
    /// The memories an ingest batch wrote.
    Batch(String),
    /// The memories whose source reference starts so (a run, a conversation, a person).
    SourceRefPrefix(String),
    /// An agent's memories (those it wrote, whatever their scope).
    Agent(Uuid),
    /// A project's memories.
    Project(Uuid),
    /// Every memory of the organisation.
    Organization,
}

/// Up to `limit` memories the selector matches that are not forgotten yet, locked.
pub async fn matching(
    conn: &mut PgConnection,
    organization_id: Uuid,
    selector: &ForgetSelector,
    limit: i64,
) -> sqlx::Result<Vec<Uuid>> {
    let mut qb = QueryBuilder::new("SELECT m.id FROM memory m WHERE m.organization_id = ");
    qb.push_bind(organization_id).push(" AND m.status <> 'forgotten' AND ");
    match selector {
        ForgetSelector::Memories(ids) => qb.push("m.id = ANY(").push_bind(ids.clone()).push(")"),
        ForgetSelector::Batch(batch) => qb
            .push("m.id = ANY(SELECT unnest(memory_ids) FROM memory_ingest_batch WHERE organization_id = m.organization_id AND batch_id = ")
            .push_bind(batch.clone())
            .push(")"),
        ForgetSelector::SourceRefPrefix(prefix) => {
            qb.push("starts_with(m.source_ref, ").push_bind(prefix.clone()).push(")")
        }
        ForgetSelector::Agent(agent) => qb.push("m.agent_id = ").push_bind(*agent),
        ForgetSelector::Project(project) => qb.push("m.project_id = ").push_bind(*project),
        ForgetSelector::Organization => qb.push("true"),
    };
    qb.push(" ORDER BY m.id LIMIT ").push_bind(limit).push(" FOR UPDATE");
    qb.build_query_scalar().fetch_all(conn).await
}

/// The memories made from `ids` and not forgotten yet: the merges that replaced them and the entity profiles of
/// the entities they mention (which synthesis writes again from what remains).
pub async fn derived_from(conn: &mut PgConnection, organization_id: Uuid, ids: &[Uuid]) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar(
        "SELECT d.id FROM memory d WHERE d.organization_id = $1 AND d.status <> 'forgotten' AND d.id <> ALL($2) AND (\
             (d.source_kind = 'merge' AND d.id IN (SELECT superseded_by FROM memory \
                                                  WHERE organization_id = $1 AND id = ANY($2))) \
          OR d.id IN (SELECT ep.memory_id FROM memory_entity_profile ep JOIN memory_entity_mention mn \
                        ON mn.organization_id = ep.organization_id AND mn.entity_id = ep.entity_id \
                      WHERE ep.organization_id = $1 AND mn.memory_id = ANY($2))) \
         ORDER BY d.id FOR UPDATE OF d",
    )
    .bind(organization_id)
    .bind(ids.to_vec())
    .fetch_all(conn)
    .await
}

/// Erases the memories to tombstones: content, context, embedding, tags, labels, file and anchor gone, their
/// mentions, taxonomy tags and profile partitions removed; ids, times, status and chain links stay.
pub async fn erase(conn: &mut PgConnection, organization_id: Uuid, ids: &[Uuid]) -> sqlx::Result<u64> {
    let ids = ids.to_vec();
    for sql in [
        "DELETE FROM memory_entity_mention WHERE organization_id = $1 AND memory_id = ANY($2)",
        "DELETE FROM memory_taxonomy_tag WHERE organization_id = $1 AND memory_id = ANY($2)",
        "DELETE FROM memory_entity_profile WHERE organization_id = $1 AND memory_id = ANY($2)",
        "UPDATE memory_entity SET synthesis_memory_id = NULL WHERE organization_id = $1 AND synthesis_memory_id = ANY($2)",
    ] {
        sqlx::query(sql).bind(organization_id).bind(&ids).execute(&mut *conn).await?;
    }
    sqlx::query(
        "UPDATE memory SET status = 'forgotten', content = '', context = NULL, embedding = NULL, content_hash = NULL, \
             tags = '{}', labels = '{}', file_backed = false, file_path = NULL, anchor = NULL, repository = NULL, \
             source_ref = NULL, updated_at = now() \
         WHERE organization_id = $1 AND id = ANY($2)",
    )
    .bind(organization_id)
    .bind(&ids)
    .execute(&mut *conn)
    .await
    .map(|r| r.rows_affected())
}
