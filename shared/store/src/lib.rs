//! memory-store: all of the service's SQL, over the model's types; it executes, the core decides. Functions take
//! `impl PgExecutor` or a transaction so callers can compose them in one transaction; every tenant transaction
//! starts with [`begin_for_org`], which RLS needs to see any row.

pub mod agents;
pub mod ann;
pub mod branches;
pub mod connections;
pub mod contradiction;
pub mod dedup;
pub mod entities;
pub mod export;
pub mod forget;
pub mod held;
pub mod ingest;
pub mod jobs;
pub mod keyword;
pub mod memories;
pub mod outbox;
mod predicates;
pub mod producers;
pub mod skipped;
pub mod taxonomy;
pub mod transitions;
pub mod turns;

use memory_model::{domain, language};
use sqlx::{Executor, PgConnection, PgExecutor, PgPool, Postgres, Transaction, migrate::Migrator};
use uuid::Uuid;

pub use predicates::{ReadFilter, SearchFilters};

/// The schema, embedded at build time from `migrations/`.
pub static MIGRATOR: Migrator = sqlx::migrate!("../../migrations");

/// Opens a transaction bound to one organisation: RLS policies compare every row against this setting.
/// The setting travels with BEGIN (one round trip); it is formatted from a `Uuid`, never from caller text.
pub async fn begin_for_org(pool: &PgPool, organization_id: Uuid) -> sqlx::Result<Transaction<'static, Postgres>> {
    begin_with_settings(pool, organization_id, &[]).await
}

/// BEGIN with the organisation and further transaction-local settings, in one round trip. Each setting's value is
/// an SQL expression built from the store's own constants, numbers and typed ids, never from caller text.
async fn begin_with_settings(
    pool: &PgPool,
    organization_id: Uuid,
    settings: &[(&str, String)],
) -> sqlx::Result<Transaction<'static, Postgres>> {
    connections::begin(pool, format!("BEGIN; {}", settings_sql(organization_id, settings))).await
}

/// The statement setting the organisation and `settings` for the rest of the transaction.
fn settings_sql(organization_id: Uuid, settings: &[(&str, String)]) -> String {
    let mut sql = format!("SELECT set_config('app.organization_id', '{organization_id}', true)");
    for (name, value) in settings {
        sql.push_str(&format!(", set_config('{name}', {value}, true)"));
    }
    sql
}

/// A setting's value as an SQL literal.
fn literal(value: impl std::fmt::Display) -> String {
    format!("'{value}'")
}

/// Like [`begin_for_org`], for a read on a request's path (by id, chain, metadata, graph expansion, profiles): its
/// statements give up after `statement_timeout_ms`, so a slow read fails the request quickly instead of holding it
/// for the role's 30 s.
pub async fn begin_read(
    pool: &PgPool,
    organization_id: Uuid,
    statement_timeout_ms: u64,
) -> sqlx::Result<Transaction<'static, Postgres>> {
    let settings =
        [("statement_timeout", literal(statement_timeout_ms)), ("lock_timeout", literal(statement_timeout_ms))];
    begin_with_settings(pool, organization_id, &settings).await
}

/// Ends a transaction that only read ([`begin_read`], a search's), without waiting: its `ROLLBACK` is queued on the
/// connection and sent with the check sqlx makes as the connection goes back to the pool, off the caller's path (an
/// awaited `COMMIT` costs the caller a round trip, on AWS a network one). The rollback undoes the transaction's
/// settings as a commit would.
pub fn end_read(tx: Transaction<'static, Postgres>) {
    drop(tx);
}

/// Like [`begin_for_org`], for the outbox relay, which holds its claimed rows while the bus or a queue answers:
/// the role's 10 s idle-in-transaction limit is raised to a minute for this transaction only (the AWS clients give
/// up on a call after 5 s).
pub async fn begin_relay(pool: &PgPool, organization_id: Uuid) -> sqlx::Result<Transaction<'static, Postgres>> {
    begin_with_settings(pool, organization_id, &[("idle_in_transaction_session_timeout", literal("60s"))]).await
}

/// Like [`begin_for_org`], for a vector search read as `scan` says: iterative HNSW scans so a selective filter still
/// yields `ef_search` rows; custom plans for a statement that may read `memory_vector`, so the planner prunes it to
/// the organisation's own partition (see [`ann`]; a cached generic plan would hold every partition), and the cached
/// generic plan for the exact scan, whose plan is the same for every organisation (planning it costs more than a
/// small tenant's scan); no parallel workers (in the statement of two arms, the gated exact arm of a tenant with a
/// partition would be planned parallel and start its workers although its one-time filter leaves it unrun: 5-6 ms
/// a query); a partition read through its HNSW index unless `filters` narrow the search; and a statement timeout so
/// one slow branch cannot hold a request.
pub async fn begin_vector_search(
    pool: &PgPool,
    organization_id: Uuid,
    ef_search: usize,
    statement_timeout_ms: u64,
    scan: branches::VectorScan,
    filters: &SearchFilters,
) -> sqlx::Result<Transaction<'static, Postgres>> {
    let mut settings = vector_search_settings(ef_search, scan, filters).to_vec();
    settings.push(("statement_timeout", literal(statement_timeout_ms)));
    begin_with_settings(pool, organization_id, &settings).await
}

/// How a vector search read as `scan` is planned and run ([`begin_vector_search`]).
fn vector_search_settings(
    ef_search: usize,
    scan: branches::VectorScan,
    filters: &SearchFilters,
) -> [(&'static str, String); 6] {
    // The generic plan reads through an index leading with the organisation whatever the tenants' sizes make a
    // sequential scan cost on average. A partition is read through its HNSW index, the one path that needs no sort:
    // the planner estimates the partition's join to `memory` from the whole table's ids, so for a tenant that is a
    // small part of it, it expects a handful of rows and would scan the tenant exactly. Under metadata filters the
    // planner chooses: a selective one makes the exact scan right, where the index's iterative scan would stop at
    // `hnsw.max_scan_tuples`.
    let (plans, seqscan) = match scan {
        branches::VectorScan::Either | branches::VectorScan::Partition => ("force_custom_plan", "on"),
        branches::VectorScan::Exact => ("force_generic_plan", "off"),
    };
    let sort = if scan != branches::VectorScan::Exact && filters.is_empty() { "off" } else { "on" };
    [
        ("hnsw.iterative_scan", literal("relaxed_order")),
        ("hnsw.ef_search", literal(ef_search.clamp(40, 1000))),
        ("plan_cache_mode", literal(plans)),
        ("enable_seqscan", literal(seqscan)),
        ("enable_sort", literal(sort)),
        ("max_parallel_workers_per_gather", literal(0)),
    ]
}

/// Runs `search` inside a transaction begun otherwise (ingest's near-duplicate probe) as a vector search of both
/// arms ([`branches::VectorScan::Either`]) would run, then gives the transaction back its settings as they were: on
/// the planner's defaults a tenant with a small partition had its probe planned as a scan of all its rows, sorted
/// (the 1M corpus's partitioned tenants of 2,000-4,600 memories: 2.3-5.0 ms p50 against 0.5-0.6). The settings are
/// made inside a savepoint and undone by rolling back to it; `search` must only read.
async fn as_vector_search<T>(
    conn: &mut PgConnection,
    ef_search: usize,
    search: impl AsyncFnOnce(&mut PgConnection) -> sqlx::Result<T>,
) -> sqlx::Result<T> {
    let settings = vector_search_settings(ef_search, branches::VectorScan::Either, &SearchFilters::default());
    let set: Vec<String> =
        settings.iter().map(|(name, value)| format!("set_config('{name}', {value}, true)")).collect();
    let begin = format!("SAVEPOINT vector_search; SELECT {}", set.join(", "));
    conn.execute(begin.as_str()).await?;
    let found = search(&mut *conn).await?;
    conn.execute("ROLLBACK TO SAVEPOINT vector_search; RELEASE SAVEPOINT vector_search").await?;
    Ok(found)
}

/// Like [`begin_for_org`], for the keyword branch: its plan is the same for every tenant (index scans on keys
/// that lead with the organisation), so the cached generic plan is used and planning, which costs more than
/// executing for this query, is skipped; and a statement timeout.
pub async fn begin_keyword_search(
    pool: &PgPool,
    organization_id: Uuid,
    statement_timeout_ms: u64,
) -> sqlx::Result<Transaction<'static, Postgres>> {
    let settings =
        [("plan_cache_mode", literal("force_generic_plan")), ("statement_timeout", literal(statement_timeout_ms))];
    begin_with_settings(pool, organization_id, &settings).await
}

/// The dimension of `memory.embedding` as declared in the schema.
pub async fn embedding_dimension(executor: impl PgExecutor<'_>) -> sqlx::Result<i32> {
    sqlx::query_scalar(
        "SELECT atttypmod FROM pg_attribute WHERE attrelid = 'memory'::regclass AND attname = 'embedding'",
    )
    .fetch_one(executor)
    .await
}

/// Sets the password of the application role `memory_app` (the schema owner's pool; after migrations).
pub async fn set_app_password(pool: &PgPool, password: &str) -> sqlx::Result<()> {
    let statement: String = sqlx::query_scalar("SELECT format('ALTER ROLE memory_app PASSWORD %L', $1::text)")
        .bind(password)
        .fetch_one(pool)
        .await?;
    sqlx::raw_sql(&statement).execute(pool).await.map(|_| ())
}

/// Applies pending migrations, then gives a new database the embedding dimension asked for (see
/// [`set_embedding_dimension`]).
pub async fn migrate(pool: &PgPool, embedding_dimensions: Option<i32>) -> anyhow::Result<()> {
    refuse_a_replaced_chain(pool).await?;
    MIGRATOR.run(pool).await?;
    if let Some(dimensions) = embedding_dimensions {
        set_embedding_dimension(pool, dimensions).await?;
    }
    Ok(())
}

/// Fails, naming what to do, on a database migrated by the chain of migrations the baseline (`0001_baseline.sql`)
/// replaced, or by a newer build: a migration it applied is not one of [`MIGRATOR`]'s.
async fn refuse_a_replaced_chain(pool: &PgPool) -> anyhow::Result<()> {
    let ledger: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL").fetch_one(pool).await?;
    if !ledger {
        return Ok(()); // a new database
    }
    let applied: Vec<(i64, String)> =
        sqlx::query_as("SELECT version, description FROM _sqlx_migrations").fetch_all(pool).await?;
    if let Some((_, description)) =
        applied.iter().find(|(version, description)| *version == 1 && description != "baseline")
    {
        anyhow::bail!(
            "this database was migrated by the migrations the schema's baseline replaced (its first is \
             {description:?}); recreate it (`make clean`, then `make run`, on the local stack)"
        );
    }
    let known = |(version, description): &(i64, String)| {
        MIGRATOR.iter().any(|m| m.version == *version && m.description == *description)
    };
    if let Some((version, description)) = applied.iter().find(|m| !known(m)) {
        anyhow::bail!(
            "this database has migration {version} {description:?}, which this build does not know: it was \
             migrated by a newer build of the service; run that build or a newer one"
        );
    }
    Ok(())
}

/// Makes `memory.embedding` a `vector(dimensions)` column: the embedding model of a database is chosen when it is
/// created (384 for MiniLM; 256, 512 or 1024 for Titan v2), and the services refuse to start with another. Fails,
/// changing nothing, once any memory has an embedding of another dimension. Returns whether it changed.
pub async fn set_embedding_dimension(pool: &PgPool, dimensions: i32) -> sqlx::Result<bool> {
    if embedding_dimension(pool).await? == dimensions {
        return Ok(false);
    }
    // The cast re-checks every stored vector, whatever RLS would show the caller; the tenants' partitions' copies
    // (`ann`) change with them.
    sqlx::raw_sql(&format!(
        "BEGIN; \
         ALTER TABLE memory ALTER COLUMN embedding TYPE vector({dimensions}) USING embedding::vector({dimensions}); \
         ALTER TABLE memory_vector ALTER COLUMN embedding TYPE vector({dimensions}) \
           USING embedding::vector({dimensions}); COMMIT;"
    ))
    .execute(pool)
    .await?;
    Ok(true)
}

/// Checks the database answers (for health checks).
pub async fn ping(executor: impl PgExecutor<'_>) -> sqlx::Result<()> {
    sqlx::query("SELECT 1").execute(executor).await.map(|_| ())
}

/// The columns of [`crate::domain::Memory`], qualified by the alias `m`.
pub(crate) const MEMORY_COLUMNS: &str = "m.id, m.organization_id, m.project_id, m.project_task_id, m.agent_id, \
    m.scope, m.memory_type, m.status, m.sensitivity, m.content, m.confidence, m.created_at, m.updated_at, \
    m.last_verified_at, m.expires_at, m.superseded_by, m.superseded_at, m.archived_at, m.file_backed, \
    m.file_path, m.content_hash, m.file_last_scanned_at, m.file_scan_error, m.file_changed_at, m.file_missing_since, \
    m.repository, m.language, m.anchor, m.source_kind, m.source_ref, m.trust_level, m.tags, \
    m.labels";
