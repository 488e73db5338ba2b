//! Entities, their mentions, and synthesised profiles.

use std::collections::BTreeMap;

use sqlx::{PgConnection, PgExecutor, QueryBuilder};
use uuid::Uuid;

use super::{MEMORY_COLUMNS, ReadFilter};
use crate::domain::{Entity, EntityProfile, Memory};

/// Adds an entity (or returns the existing one with that type and name).
pub async fn upsert(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    entity_type: &str,
    name: &str,
) -> sqlx::Result<Uuid> {
    sqlx::query_scalar(
        "INSERT INTO memory_entity (organization_id, id, entity_type, name) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (organization_id, entity_type, name) DO UPDATE SET updated_at = now() RETURNING id",
    )
    .bind(organization_id)
    .bind(Uuid::now_v7())
    .bind(entity_type)
    .bind(name)
    .fetch_one(executor)
    .await
}

/// The entity of this kind and name, created when missing. Unlike [`upsert`] it leaves an existing row
/// unlocked, so concurrent ingests that mention the same entity do not queue on it.
pub async fn ensure(
    conn: &mut PgConnection,
    organization_id: Uuid,
    entity_type: &str,
    name: &str,
) -> sqlx::Result<Uuid> {
    let inserted: Option<Uuid> = sqlx::query_scalar(
        "INSERT INTO memory_entity (organization_id, id, entity_type, name) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (organization_id, entity_type, name) DO NOTHING RETURNING id",
    )
    .bind(organization_id)
    .bind(Uuid::now_v7())
    .bind(entity_type)
    .bind(name)
    .fetch_optional(&mut *conn)
    .await?;
    match inserted {
        Some(id) => Ok(id),
        None => {
            sqlx::query_scalar(
                "SELECT id FROM memory_entity WHERE organization_id = $1 AND entity_type = $2 AND name = $3",
            )
            .bind(organization_id)
            .bind(entity_type)
            .bind(name)
            .fetch_one(conn)
            .await
        }
    }
}

pub async fn get(executor: impl PgExecutor<'_>, organization_id: Uuid, id: Uuid) -> sqlx::Result<Option<Entity>> {
    sqlx::query_as(
        "SELECT id, organization_id, name, entity_type, synthesis_memory_id FROM memory_entity \
         WHERE organization_id = $1 AND id = $2",
    )
    .bind(organization_id)
    .bind(id)
    .fetch_optional(executor)
    .await
}

/// Records that a memory mentions an entity; returns false when it already did.
pub async fn add_mention(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    entity_id: Uuid,
    memory_id: Uuid,
) -> sqlx::Result<bool> {
    sqlx::query(
        "INSERT INTO memory_entity_mention (organization_id, entity_id, memory_id) VALUES ($1, $2, $3) \
         ON CONFLICT DO NOTHING",
    )
    .bind(organization_id)
    .bind(entity_id)
    .bind(memory_id)
    .execute(executor)
    .await
    .map(|r| r.rows_affected() == 1)
}

/// Locks the entities that `activated` (memories that just became active) mention, in id order, so two
/// transactions activating an entity's mentions count one after the other; returns each with how many of
/// `activated` mention it and how many active memories mention it now.
pub async fn lock_mentioned(
    conn: &mut PgConnection,
    organization_id: Uuid,
    activated: &[Uuid],
) -> sqlx::Result<Vec<(Uuid, i64, i64)>> {
    let mentioned: Vec<Uuid> = sqlx::query_scalar(
        "SELECT entity_id FROM memory_entity_mention WHERE organization_id = $1 AND memory_id = ANY($2)",
    )
    .bind(organization_id)
    .bind(activated)
    .fetch_all(&mut *conn)
    .await?;
    let mut added: BTreeMap<Uuid, i64> = BTreeMap::new();
    for entity in mentioned {
        *added.entry(entity).or_default() += 1;
    }
    let ids: Vec<Uuid> = added.keys().copied().collect();
    sqlx::query(
        "SELECT id FROM memory_entity WHERE organization_id = $1 AND id = ANY($2) ORDER BY id FOR NO KEY UPDATE",
    )
    .bind(organization_id)
    .bind(&ids)
    .execute(&mut *conn)
    .await?;
    let mut counted = Vec::with_capacity(added.len());
    for (entity, added) in added {
        counted.push((entity, added, active_mention_count(&mut *conn, organization_id, entity).await?));
    }
    Ok(counted)
}

/// Active memories that mention an entity, as [`active_mentioning`] reads them (profiles themselves excluded).
pub async fn active_mention_count(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    entity_id: Uuid,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "SELECT count(*) FROM memory_entity_mention e JOIN memory m \
             ON m.organization_id = e.organization_id AND m.id = e.memory_id \
         WHERE e.organization_id = $1 AND e.entity_id = $2 AND m.status = 'active' \
           AND (m.expires_at IS NULL OR m.expires_at > now()) AND m.memory_type <> 'entity_profile'",
    )
    .bind(organization_id)
    .bind(entity_id)
    .fetch_one(executor)
    .await
}

/// Active memories that mention an entity, oldest first (profiles themselves excluded).
pub async fn active_mentioning(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    entity_id: Uuid,
) -> sqlx::Result<Vec<Memory>> {
    let sql = format!(
        "SELECT {MEMORY_COLUMNS} FROM memory_entity_mention e JOIN memory m \
             ON m.organization_id = e.organization_id AND m.id = e.memory_id \
         WHERE e.organization_id = $1 AND e.entity_id = $2 AND m.status = 'active' \
           AND (m.expires_at IS NULL OR m.expires_at > now()) AND m.memory_type <> 'entity_profile' \
         ORDER BY m.created_at, m.id"
    );
    sqlx::query_as(&sql).bind(organization_id).bind(entity_id).fetch_all(executor).await
}

/// An entity, locked for the rest of the transaction (serialises syntheses of one entity).
pub async fn lock(conn: &mut PgConnection, organization_id: Uuid, id: Uuid) -> sqlx::Result<Option<Entity>> {
    sqlx::query_as(
        "SELECT id, organization_id, name, entity_type, synthesis_memory_id FROM memory_entity \
         WHERE organization_id = $1 AND id = $2 FOR UPDATE",
    )
    .bind(organization_id)
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// The current profile of one readership partition of an entity.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct PartitionProfile {
    pub readership: String,
    pub memory_id: Uuid,
    pub source_digest: String,
    pub source_count: i32,
}

/// The entity's current profiles, one per readership partition.
pub async fn partition_profiles(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    entity_id: Uuid,
) -> sqlx::Result<Vec<PartitionProfile>> {
    sqlx::query_as(
        "SELECT readership, memory_id, source_digest, source_count FROM memory_entity_profile \
         WHERE organization_id = $1 AND entity_id = $2 ORDER BY readership",
    )
    .bind(organization_id)
    .bind(entity_id)
    .fetch_all(executor)
    .await
}

/// Of `memory_ids`, the current partition profiles: each with its entity and the number of sources it was built from.
pub async fn profiles_among(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    memory_ids: &[Uuid],
) -> sqlx::Result<Vec<(Uuid, Uuid, i32)>> {
    sqlx::query_as(
        "SELECT memory_id, entity_id, source_count FROM memory_entity_profile \
         WHERE organization_id = $1 AND memory_id = ANY($2)",
    )
    .bind(organization_id)
    .bind(memory_ids)
    .fetch_all(executor)
    .await
}

/// Makes `profile.memory_id` the current profile of its partition.
pub async fn set_partition_profile(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    entity_id: Uuid,
    profile: &PartitionProfile,
) -> sqlx::Result<u64> {
    sqlx::query(
        "INSERT INTO memory_entity_profile (organization_id, entity_id, readership, memory_id, source_digest, \
             source_count) VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (organization_id, entity_id, readership) DO UPDATE SET memory_id = EXCLUDED.memory_id, \
             source_digest = EXCLUDED.source_digest, source_count = EXCLUDED.source_count, updated_at = now()",
    )
    .bind(organization_id)
    .bind(entity_id)
    .bind(&profile.readership)
    .bind(profile.memory_id)
    .bind(&profile.source_digest)
    .bind(profile.source_count)
    .execute(executor)
    .await
    .map(|r| r.rows_affected())
}

/// Forgets the profile of a partition that has no sources left.
pub async fn remove_partition_profile(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    entity_id: Uuid,
    readership: &str,
) -> sqlx::Result<u64> {
    sqlx::query("DELETE FROM memory_entity_profile WHERE organization_id = $1 AND entity_id = $2 AND readership = $3")
        .bind(organization_id)
        .bind(entity_id)
        .bind(readership)
        .execute(executor)
        .await
        .map(|r| r.rows_affected())
}

/// Points an entity at its current synthesised profile (None: it has none).
pub async fn set_synthesis(
    executor: impl PgExecutor<'_>,
    organization_id: Uuid,
    entity_id: Uuid,
    memory_id: Option<Uuid>,
) -> sqlx::Result<u64> {
    sqlx::query(
        "UPDATE memory_entity SET synthesis_memory_id = $3, updated_at = now() WHERE organization_id = $1 AND id = $2",
    )
    .bind(organization_id)
    .bind(entity_id)
    .bind(memory_id)
    .execute(executor)
    .await
    .map(|r| r.rows_affected())
}

#[derive(sqlx::FromRow)]
struct ProfileRow {
    entity_id: Uuid,
    entity_name: String,
    entity_type: String,
    #[sqlx(flatten)]
    profile: Memory,
}

/// Readable synthesised profiles of the entities that `memory_ids` mention: per entity, the readable partition
/// profile built from the most sources.
pub async fn profiles_for(
    conn: &mut PgConnection,
    scope: &ReadFilter,
    memory_ids: &[Uuid],
) -> sqlx::Result<Vec<EntityProfile>> {
    let mut qb = QueryBuilder::new(format!(
        "SELECT DISTINCT ON (en.id) en.id AS entity_id, en.name AS entity_name, en.entity_type, {MEMORY_COLUMNS} \
         FROM memory_entity_mention mn \
         JOIN memory_entity en ON en.organization_id = mn.organization_id AND en.id = mn.entity_id \
         JOIN memory_entity_profile ep ON ep.organization_id = en.organization_id AND ep.entity_id = en.id \
         JOIN memory m ON m.organization_id = ep.organization_id AND m.id = ep.memory_id \
         WHERE mn.memory_id = ANY("
    ));
    qb.push_bind(memory_ids.to_vec()).push(") AND ");
    scope.push_sql(&mut qb);
    qb.push(" ORDER BY en.id, ep.source_count DESC, m.id");
    let rows: Vec<ProfileRow> = qb.build_query_as().fetch_all(conn).await?;
    Ok(rows
        .into_iter()
        .map(|r| EntityProfile {
            entity_id: r.entity_id,
            name: r.entity_name,
            entity_type: r.entity_type,
            profile: r.profile,
        })
        .collect())
}
