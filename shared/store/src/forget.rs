//! Forgetting in SQL: which memories a selector matches, what was derived from them, and the erasure that leaves a
//! tombstone.

use sqlx::{PgConnection, PgExecutor, QueryBuilder};
use uuid::Uuid;

pub use memory_model::forget::{ForgetSelector, Forgetting};

/// Up to `limit` memories the selector matches that are not forgotten yet, locked; with `sender`, only memories that
/// sender's batches wrote.
pub async fn matching(
    conn: &mut PgConnection,
    organization_id: Uuid,
    selector: &ForgetSelector,
    sender: Option<&str>,
    limit: i64,
) -> sqlx::Result<Vec<Uuid>> {
    let mut qb = QueryBuilder::new("SELECT m.id FROM memory m WHERE m.organization_id = ");
    qb.push_bind(organization_id).push(" AND m.status <> 'forgotten' AND ");
    if let Some(sender) = sender {
        qb.push("m.sender = ").push_bind(sender.to_owned()).push(" AND ");
    }
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

/// The memories made from `ids` and not forgotten yet: the merges that replaced them, and every profile (current,
/// superseded or archived) of the entities they mention (which synthesis writes again from what remains).
pub async fn derived_from(conn: &mut PgConnection, organization_id: Uuid, ids: &[Uuid]) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar(
        "SELECT d.id FROM memory d WHERE d.organization_id = $1 AND d.status <> 'forgotten' AND d.id <> ALL($2) AND (\
             (d.source_kind = 'merge' AND d.id IN (SELECT superseded_by FROM memory \
                                                  WHERE organization_id = $1 AND id = ANY($2))) \
          OR (d.source_kind = 'synthesis' AND d.source_ref IN (\
                SELECT 'entity:' || entity_id FROM memory_entity_mention \
                WHERE organization_id = $1 AND memory_id = ANY($2)))) \
         ORDER BY d.id FOR UPDATE OF d",
    )
    .bind(organization_id)
    .bind(ids.to_vec())
    .fetch_all(conn)
    .await
}

/// What an erasure touched besides the memories.
#[derive(Debug, Default)]
pub struct Erased {
    /// The keyword lexemes the memories held (some may be held by no memory now).
    pub lexemes: Vec<String>,
    /// The entities they mentioned that other memories still mention.
    pub entities: Vec<Uuid>,
}

/// Erases the memories to tombstones: content, context, embedding, tags, labels, file and anchor gone, their
/// mentions, taxonomy tags and profile partitions removed, with what else names them (dedup pairs, contradiction
/// reviews, held decisions, their batches' digests of the texts) and the entity and taxonomy names no memory uses any
/// more; ids, times, status and chain links stay.
pub async fn erase(conn: &mut PgConnection, organization_id: Uuid, ids: &[Uuid]) -> sqlx::Result<Erased> {
    let ids = ids.to_vec();
    let lexemes: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT lexeme FROM memory_posting WHERE organization_id = $1 AND memory_id = ANY($2) ORDER BY 1",
    )
    .bind(organization_id)
    .bind(&ids)
    .fetch_all(&mut *conn)
    .await?;
    let entities = unlink(&mut *conn, "memory_entity_mention", "entity_id", organization_id, &ids).await?;
    let nodes = unlink(&mut *conn, "memory_taxonomy_tag", "node_id", organization_id, &ids).await?;
    for sql in [
        "DELETE FROM memory_entity_profile WHERE organization_id = $1 AND memory_id = ANY($2)",
        "UPDATE memory_entity SET synthesis_memory_id = NULL WHERE organization_id = $1 AND synthesis_memory_id = ANY($2)",
        "DELETE FROM memory_dedup_pair WHERE organization_id = $1 AND (memory_a_id = ANY($2) OR memory_b_id = ANY($2))",
        "DELETE FROM memory_contradiction_reviewed \
         WHERE organization_id = $1 AND (new_memory_id = ANY($2) OR existing_memory_id = ANY($2))",
        "DELETE FROM memory_held_decision WHERE organization_id = $1 AND (memory_id = ANY($2) OR other_memory_id = ANY($2))",
        "UPDATE memory_ingest_batch SET digest = NULL \
         WHERE organization_id = $1 AND memory_ids && $2 AND digest IS NOT NULL",
    ] {
        sqlx::query(sql).bind(organization_id).bind(&ids).execute(&mut *conn).await?;
    }
    sqlx::query(
        "UPDATE memory SET status = 'forgotten', content = '', context = NULL, embedding = NULL, content_hash = NULL, \
             tags = '{}', labels = '{}', file_backed = false, file_path = NULL, anchor = NULL, repository = NULL, \
             source_ref = NULL, file_scan_error = NULL, updated_at = now() \
         WHERE organization_id = $1 AND id = ANY($2)",
    )
    .bind(organization_id)
    .bind(&ids)
    .execute(&mut *conn)
    .await?;
    let entities = unused_entities(&mut *conn, organization_id, &entities).await?;
    unused_nodes(&mut *conn, organization_id, nodes).await?;
    Ok(Erased { lexemes, entities })
}

/// Deletes the memories' rows of a link table; returns the distinct ids they linked to.
async fn unlink(
    conn: &mut PgConnection,
    table: &str,
    column: &str,
    organization_id: Uuid,
    ids: &[Uuid],
) -> sqlx::Result<Vec<Uuid>> {
    let sql = format!("DELETE FROM {table} WHERE organization_id = $1 AND memory_id = ANY($2) RETURNING {column}");
    let mut linked: Vec<Uuid> = sqlx::query_scalar(&sql).bind(organization_id).bind(ids).fetch_all(conn).await?;
    linked.sort();
    linked.dedup();
    Ok(linked)
}

/// The memories that merges among `ids` superseded and that are not forgotten themselves (their merge is gone, so
/// they are current again).
pub async fn sources_of_merges(
    conn: &mut PgConnection,
    organization_id: Uuid,
    ids: &[Uuid],
) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar(
        "SELECT s.id FROM memory s JOIN memory d ON d.organization_id = s.organization_id AND d.id = s.superseded_by \
         WHERE s.organization_id = $1 AND s.superseded_by = ANY($2) AND s.status = 'superseded' \
           AND d.source_kind = 'merge' AND s.id <> ALL($2) ORDER BY s.id",
    )
    .bind(organization_id)
    .bind(ids.to_vec())
    .fetch_all(conn)
    .await
}

/// Deletes those of `entities` no memory mentions any more, and returns the others. They are locked first, so an
/// ingest naming one meanwhile either committed its mention before (the entity stays) or fails on the deleted entity
/// and is delivered again.
async fn unused_entities(conn: &mut PgConnection, organization_id: Uuid, entities: &[Uuid]) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query("SELECT 1 FROM memory_entity WHERE organization_id = $1 AND id = ANY($2) ORDER BY id FOR UPDATE")
        .bind(organization_id)
        .bind(entities.to_vec())
        .execute(&mut *conn)
        .await?;
    let deleted: Vec<Uuid> = sqlx::query_scalar(
        "DELETE FROM memory_entity e WHERE e.organization_id = $1 AND e.id = ANY($2) AND NOT EXISTS (\
             SELECT 1 FROM memory_entity_mention mn WHERE mn.organization_id = $1 AND mn.entity_id = e.id) \
         RETURNING e.id",
    )
    .bind(organization_id)
    .bind(entities.to_vec())
    .fetch_all(conn)
    .await?;
    Ok(entities.iter().filter(|e| !deleted.contains(e)).copied().collect())
}

/// Deletes those of `nodes` that ingestion created (not curated) and under which no memory is tagged any more, and
/// then their parents so left, up to the root; locked first, as entities are.
async fn unused_nodes(conn: &mut PgConnection, organization_id: Uuid, mut nodes: Vec<Uuid>) -> sqlx::Result<()> {
    while !nodes.is_empty() {
        sqlx::query(
            "SELECT 1 FROM memory_taxonomy_node WHERE organization_id = $1 AND id = ANY($2) ORDER BY id FOR UPDATE",
        )
        .bind(organization_id)
        .bind(&nodes)
        .execute(&mut *conn)
        .await?;
        nodes = sqlx::query_scalar::<_, Option<Uuid>>(
            "DELETE FROM memory_taxonomy_node n WHERE n.organization_id = $1 AND n.id = ANY($2) AND NOT n.curated \
               AND NOT EXISTS (SELECT 1 FROM memory_taxonomy_tag t WHERE t.organization_id = $1 AND t.node_id = n.id) \
               AND NOT EXISTS (SELECT 1 FROM memory_taxonomy_node c WHERE c.organization_id = $1 AND c.parent_id = n.id) \
             RETURNING n.parent_id",
        )
        .bind(organization_id)
        .bind(&nodes)
        .fetch_all(&mut *conn)
        .await?
        .into_iter()
        .flatten()
        .collect();
        nodes.sort();
        nodes.dedup();
    }
    Ok(())
}

/// Records what is left of a forget request; returns its id.
pub async fn save_request(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    what: &Forgetting,
) -> sqlx::Result<Uuid> {
    let id = Uuid::now_v7();
    sqlx::query("INSERT INTO memory_forget_request (organization_id, id, selector, sender) VALUES ($1, $2, $3, $4)")
        .bind(organization_id)
        .bind(id)
        .bind(sqlx::types::Json(&what.selector))
        .bind(&what.sender)
        .execute(executor)
        .await?;
    Ok(id)
}

/// A recorded forget request, if it is still there.
pub async fn request(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    id: Uuid,
) -> sqlx::Result<Option<Forgetting>> {
    let row: Option<(sqlx::types::Json<ForgetSelector>, Option<String>)> =
        sqlx::query_as("SELECT selector, sender FROM memory_forget_request WHERE organization_id = $1 AND id = $2")
            .bind(organization_id)
            .bind(id)
            .fetch_optional(executor)
            .await?;
    Ok(row.map(|(selector, sender)| Forgetting { selector: selector.0, sender }))
}

/// Deletes a finished request's record.
pub async fn delete_request(executor: impl PgExecutor<'_>, organization_id: Uuid, id: Uuid) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM memory_forget_request WHERE organization_id = $1 AND id = $2")
        .bind(organization_id)
        .bind(id)
        .execute(executor)
        .await
        .map(|_| ())
}
