//! The taxonomy tree and memory tags.

use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use crate::domain::TaxonomyNode;

/// Every node of an organisation's taxonomy.
pub async fn nodes(executor: impl PgExecutor<'_>, organization_id: Uuid) -> sqlx::Result<Vec<TaxonomyNode>> {
    sqlx::query_as("SELECT id, parent_id, name FROM memory_taxonomy_node WHERE organization_id = $1 ORDER BY name, id")
        .bind(organization_id)
        .fetch_all(executor)
        .await
}

/// The node at this path (names from the root), created where missing without locking existing nodes.
pub async fn ensure_path(conn: &mut PgConnection, organization_id: Uuid, path: &[String]) -> sqlx::Result<Uuid> {
    let mut parent: Option<Uuid> = None;
    for name in path {
        let inserted: Option<Uuid> = sqlx::query_scalar(
            "INSERT INTO memory_taxonomy_node (organization_id, id, parent_id, name) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (organization_id, parent_id, name) DO NOTHING RETURNING id",
        )
        .bind(organization_id)
        .bind(Uuid::now_v7())
        .bind(parent)
        .bind(name)
        .fetch_optional(&mut *conn)
        .await?;
        parent = Some(match inserted {
            Some(id) => id,
            None => child(&mut *conn, organization_id, parent, name).await?.ok_or(sqlx::Error::RowNotFound)?,
        });
    }
    Ok(parent.expect("a path has at least one name"))
}

/// The node at this path, if every node of it exists.
pub async fn find_path(conn: &mut PgConnection, organization_id: Uuid, path: &[String]) -> sqlx::Result<Option<Uuid>> {
    let mut parent: Option<Uuid> = None;
    for name in path {
        match child(&mut *conn, organization_id, parent, name).await? {
            Some(id) => parent = Some(id),
            None => return Ok(None),
        }
    }
    Ok(parent)
}

/// The node named `name` under `parent` (None: a root), if there is one.
async fn child(
    conn: &mut PgConnection,
    organization_id: Uuid,
    parent: Option<Uuid>,
    name: &str,
) -> sqlx::Result<Option<Uuid>> {
    sqlx::query_scalar(
        "SELECT id FROM memory_taxonomy_node \
         WHERE organization_id = $1 AND parent_id IS NOT DISTINCT FROM $2 AND name = $3",
    )
    .bind(organization_id)
    .bind(parent)
    .bind(name)
    .fetch_optional(conn)
    .await
}

/// How many nodes the organisation's taxonomy has.
pub async fn count(executor: impl PgExecutor<'_>, organization_id: Uuid) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT count(*) FROM memory_taxonomy_node WHERE organization_id = $1")
        .bind(organization_id)
        .fetch_one(executor)
        .await
}

/// Adds a node as curated (an operator's: it stays when no memory uses it), or marks the existing one with that
/// parent and name so and returns it.
pub async fn upsert_node(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    parent_id: Option<Uuid>,
    name: &str,
) -> sqlx::Result<Uuid> {
    sqlx::query_scalar(
        "INSERT INTO memory_taxonomy_node (organization_id, id, parent_id, name, curated) VALUES ($1, $2, $3, $4, true) \
         ON CONFLICT (organization_id, parent_id, name) DO UPDATE SET curated = true RETURNING id",
    )
    .bind(organization_id)
    .bind(Uuid::now_v7())
    .bind(parent_id)
    .bind(name)
    .fetch_one(executor)
    .await
}

/// Tags a memory with a node.
pub async fn tag(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    memory_id: Uuid,
    node_id: Uuid,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO memory_taxonomy_tag (organization_id, memory_id, node_id) VALUES ($1, $2, $3) \
         ON CONFLICT DO NOTHING",
    )
    .bind(organization_id)
    .bind(memory_id)
    .bind(node_id)
    .execute(executor)
    .await
    .map(|_| ())
}
