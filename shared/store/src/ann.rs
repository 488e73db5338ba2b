//! Per-tenant ANN indexes. A tenant's filter is selective on an HNSW index over every row (a tenant with 5% of
//! the rows makes an iterative scan visit ~20 tuples per result, each checked against the heap), so every tenant
//! above a size threshold gets a partial HNSW index of its own rows, and there is no shared one.
//! Tenants without one are searched exactly (`store::begin_vector_search` turns index scans off for them), which
//! is faster for them and exact. Index DDL needs the schema owner and runs outside a transaction (CONCURRENTLY),
//! so this is an operator's job: `memory-admin ann-indexes`.

use sqlx::{Executor, PgPool};
use uuid::Uuid;

/// Tenants with at least this many memories get their own index by default: below it an exact scan of the
/// tenant's rows takes a few milliseconds.
pub const DEFAULT_MIN_MEMORIES: i64 = 2_000;

/// What a reconciliation did.
#[derive(Debug, Default, PartialEq)]
pub struct AnnIndexChanges {
    pub created: Vec<Uuid>,
    pub dropped: Vec<Uuid>,
    pub kept: usize,
}

/// The name of a tenant's index: derived from the organisation id alone, so it is never caller text.
pub fn index_name(organization_id: Uuid) -> String {
    format!("memory_ann_{}", organization_id.simple())
}

/// Organisations that have a tenant index now.
pub async fn indexed_tenants(pool: &PgPool) -> sqlx::Result<Vec<Uuid>> {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT indexname::text FROM pg_indexes WHERE tablename = 'memory' AND indexname LIKE 'memory\\_ann\\_%'",
    )
    .fetch_all(pool)
    .await?;
    Ok(names.iter().filter_map(|n| Uuid::try_parse(n.trim_start_matches("memory_ann_")).ok()).collect())
}

/// Creates the missing indexes of tenants with at least `min_memories` memories and drops those of tenants that
/// fell below half of it (the gap keeps a tenant near the threshold from flapping). Idempotent. Needs the schema
/// owner's pool (it creates indexes). An owner with BYPASSRLS reads every tenant's count at once; one without
/// (a managed database's master user) reads each known organisation's count under its own setting.
pub async fn reconcile(pool: &PgPool, min_memories: i64) -> sqlx::Result<AnnIndexChanges> {
    let mut counts: Vec<(Uuid, i64)> =
        sqlx::query_as("SELECT organization_id, doc_count FROM memory_corpus_totals").fetch_all(pool).await?;
    for org in super::turns::organizations(pool).await? {
        if counts.iter().any(|(o, _)| *o == org) {
            continue;
        }
        let mut tx = super::begin_for_org(pool, org).await?;
        let count: Option<i64> =
            sqlx::query_scalar("SELECT doc_count FROM memory_corpus_totals WHERE organization_id = $1")
                .bind(org)
                .fetch_optional(&mut *tx)
                .await?;
        tx.commit().await?;
        counts.extend(count.map(|n| (org, n)));
    }
    let existing = indexed_tenants(pool).await?;
    let mut changes = AnnIndexChanges::default();
    for (org, count) in &counts {
        let has = existing.contains(org);
        if !has && *count >= min_memories {
            create_index(pool, *org).await?;
            changes.created.push(*org);
            changed_plan(pool, *org).await?;
        } else if has && *count < min_memories / 2 {
            drop_index(pool, *org).await?;
            changes.dropped.push(*org);
            changed_plan(pool, *org).await?;
        } else if has {
            changes.kept += 1;
        }
    }
    for org in existing.iter().filter(|o| !counts.iter().any(|(c, _)| c == *o)) {
        drop_index(pool, *org).await?;
        changes.dropped.push(*org);
        changed_plan(pool, *org).await?;
    }
    Ok(changes)
}

async fn create_index(pool: &PgPool, organization_id: Uuid) -> sqlx::Result<()> {
    // HNSW over cosine distance with pgvector's default build parameters.
    let sql = format!(
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS {} ON memory USING hnsw (embedding vector_cosine_ops) \
         WITH (m = 16, ef_construction = 64) WHERE organization_id = '{organization_id}'",
        index_name(organization_id)
    );
    pool.execute(sql.as_str()).await.map(|_| ())
}

/// The organisation's vector branch now reads another way (approximate through its own index, or exact without):
/// its retrievals may answer otherwise, so its generation moves (migrations/0004).
async fn changed_plan(pool: &PgPool, organization_id: Uuid) -> sqlx::Result<()> {
    let mut tx = super::begin_for_org(pool, organization_id).await?;
    sqlx::query("SELECT memory_generation_note($1)").bind(organization_id).execute(&mut *tx).await?;
    tx.commit().await
}

async fn drop_index(pool: &PgPool, organization_id: Uuid) -> sqlx::Result<()> {
    let sql = format!("DROP INDEX CONCURRENTLY IF EXISTS {}", index_name(organization_id));
    pool.execute(sql.as_str()).await.map(|_| ())
}
