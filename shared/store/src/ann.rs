//! Per-tenant ANN indexes. A tenant's filter is selective on an HNSW index over every row (a tenant with 5% of
//! the rows makes an iterative scan visit ~20 tuples per result, each checked against the heap), so every tenant
//! above a size threshold gets an HNSW index of its own rows, and there is no shared one. Its embeddings are copied
//! into a partition of its own of `memory_vector` (LIST by organisation, migrations/0005), which holds the index: the
//! vector branch's planner prunes to that one partition, so planning does not grow with the number of indexed
//! tenants. Tenants without one are searched exactly over their rows of `memory`, which is faster for them and
//! exact. A tenant moves in or out online, one organisation at a time ([`Mover`]): its reads go on throughout, its
//! writes wait at most for one batch of the fill, and its reads switch whole (the retrieval context and the
//! statements of `branches::push_nearest` read `memory_vector_tenant.ready`). Partition and index DDL needs
//! the schema owner (and CONCURRENTLY, no transaction), so this is an operator's job: `memory-admin ann-indexes`.

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

/// The partition holding a tenant's embeddings: derived from the organisation id alone, so it is never caller text.
pub fn partition_name(organization_id: Uuid) -> String {
    format!("memory_vector_{}", organization_id.simple())
}

/// The tenant whose partition `name` is ([`partition_name`] read back).
fn tenant_of(name: &str) -> Option<Uuid> {
    Uuid::try_parse(name.strip_prefix("memory_vector_")?).ok()
}

/// The HNSW index of a tenant's partition.
pub fn index_name(organization_id: Uuid) -> String {
    format!("{}_hnsw", partition_name(organization_id))
}

/// Organisations with a partition of their own now (being filled, indexed or ready).
pub async fn indexed_tenants(pool: &PgPool) -> sqlx::Result<Vec<Uuid>> {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
         WHERE i.inhparent = 'memory_vector'::regclass ORDER BY 1",
    )
    .fetch_all(pool)
    .await?;
    Ok(names.iter().filter_map(|n| tenant_of(n)).collect())
}

/// Whether the organisation's partition is ready (its vector searches read it), under its own setting.
pub async fn partition_ready(conn: &mut sqlx::PgConnection, organization_id: Uuid) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT coalesce((SELECT ready FROM memory_vector_tenant WHERE organization_id = $1), false)")
        .bind(organization_id)
        .fetch_one(conn)
        .await
}

/// Moves tenants with at least `min_memories` memories into a partition of their own and back out those that fell
/// below half of it (the gap keeps a tenant near the threshold from flapping); completes a move an earlier run left
/// half done, and drops the partial HNSW indexes on `memory` that tenants had before partitions. Idempotent; one run
/// at a time ([`Mover`]). Needs the schema owner's pool. An owner with BYPASSRLS reads every tenant's count at once;
/// one without (a managed database's master user) reads each known organisation's count under its own setting.
pub async fn reconcile(pool: &PgPool, min_memories: i64) -> sqlx::Result<AnnIndexChanges> {
    let mut mover = Mover::lock(pool).await?;
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
            mover.move_in(*org).await?;
            changes.created.push(*org);
        } else if has && *count < min_memories / 2 {
            mover.move_out(*org).await?;
            changes.dropped.push(*org);
        } else if has {
            mover.move_in(*org).await?;
            changes.kept += 1;
        }
    }
    for org in existing.iter().filter(|o| !counts.iter().any(|(c, _)| c == *o)) {
        mover.move_out(*org).await?;
        changes.dropped.push(*org);
    }
    let partial: Vec<String> = sqlx::query_scalar(
        "SELECT indexname::text FROM pg_indexes WHERE tablename = 'memory' AND indexname LIKE 'memory\\_ann\\_%'",
    )
    .fetch_all(pool)
    .await?;
    for index in partial {
        pool.execute(format!("DROP INDEX CONCURRENTLY IF EXISTS {index}").as_str()).await?;
    }
    Ok(changes)
}

/// Rows of the fill copied a transaction: the tenant's writers wait for one batch at most.
const FILL_BATCH: i64 = 2_000;

/// The one run that moves tenants in and out: it holds a session lock on a connection of its own (closed with it,
/// which releases the lock whatever happens), so two runs (a person's and the schedule's, or a retried invocation
/// whose statements still run) never move one tenant at once. Taking it finishes what an interrupted run left: a
/// detach left pending, a partition detached but not dropped.
pub struct Mover {
    pool: PgPool,
    _lock: sqlx::PgConnection,
}

impl Mover {
    pub async fn lock(pool: &PgPool) -> sqlx::Result<Self> {
        let mut lock = pool.acquire().await?.detach();
        sqlx::query("SELECT pg_advisory_lock(hashtext('memory_vector_mover'), 0)").execute(&mut lock).await?;
        let mover = Self { pool: pool.clone(), _lock: lock };
        let left: Vec<String> = sqlx::query_scalar(
            "SELECT c.relname::text FROM pg_class c LEFT JOIN pg_inherits i ON i.inhrelid = c.oid \
             WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' \
               AND c.relname ~ '^memory_vector_[0-9a-f]{32}$' AND (i.inhrelid IS NULL OR i.inhdetachpending)",
        )
        .fetch_all(pool)
        .await?;
        for org in left.iter().filter_map(|n| tenant_of(n)) {
            mover.unregister(org).await?;
            mover.drop_partition(org).await?;
        }
        Ok(mover)
    }

    /// Gives the tenant its partition, filled, indexed and read; each step is skipped when an earlier run did it.
    pub async fn move_in(&mut self, organization_id: Uuid) -> sqlx::Result<()> {
        let pool = &self.pool;
        let (partition, index) = (partition_name(organization_id), index_name(organization_id));
        let attached: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = to_regclass($1))")
                .bind(&partition)
                .fetch_one(pool)
                .await?;
        if !attached {
            // A registration without its partition would send the tenant's writes nowhere: it goes first. Attaching
            // takes SHARE UPDATE EXCLUSIVE on the parent: reads and writes go on. A row of up to 8 kB stays in its
            // heap page, as `memory`'s do (decisions.md).
            self.unregister(organization_id).await?;
            sqlx::raw_sql(&format!(
                "BEGIN; CREATE TABLE {partition} (LIKE memory_vector) WITH (toast_tuple_target = 8160); \
                 ALTER TABLE {partition} ENABLE ROW LEVEL SECURITY; ALTER TABLE {partition} FORCE ROW LEVEL SECURITY; \
                 CREATE POLICY tenant_isolation ON {partition} USING (organization_id = app_current_org()) \
                   WITH CHECK (organization_id = app_current_org()); \
                 ALTER TABLE memory_vector ATTACH PARTITION {partition} FOR VALUES IN ('{organization_id}'); COMMIT;"
            ))
            .execute(pool)
            .await?;
        }

        let mut tx = super::begin_for_org(pool, organization_id).await?;
        let ready: Option<bool> =
            sqlx::query_scalar("SELECT ready FROM memory_vector_tenant WHERE organization_id = $1")
                .bind(organization_id)
                .fetch_optional(&mut *tx)
                .await?;
        if ready.is_none() {
            // From this commit every write of the tenant is copied by its own trigger; what was written before is
            // the fill's.
            sqlx::query("INSERT INTO memory_vector_tenant (organization_id) VALUES ($1)")
                .bind(organization_id)
                .execute(&mut *tx)
                .await?;
            sqlx::query("DELETE FROM memory_vector WHERE organization_id = $1")
                .bind(organization_id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        if ready != Some(true) {
            self.fill(organization_id).await?;
            // Its statistics now, rather than from autovacuum later: a bulk move would leave autovacuum analysing
            // each new partition while the tenants are being served.
            pool.execute(format!("ANALYZE {partition}").as_str()).await?;
        }

        // HNSW over cosine distance with pgvector's default build parameters; a build that failed before left an
        // invalid index, rebuilt here.
        let valid: Option<bool> =
            sqlx::query_scalar("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)")
                .bind(&index)
                .fetch_optional(pool)
                .await?;
        if valid == Some(false) {
            pool.execute(format!("DROP INDEX CONCURRENTLY IF EXISTS {index}").as_str()).await?;
        }
        if valid != Some(true) {
            let sql = format!(
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS {index} ON {partition} \
                 USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"
            );
            pool.execute(sql.as_str()).await?;
        }

        if ready != Some(true) {
            let mut tx = super::begin_for_org(pool, organization_id).await?;
            sqlx::query("UPDATE memory_vector_tenant SET ready = true WHERE organization_id = $1")
                .bind(organization_id)
                .execute(&mut *tx)
                .await?;
            changed_plan(&mut tx, organization_id).await?;
            tx.commit().await?;
        }
        Ok(())
    }

    /// Copies the tenant's committed embeddings into its partition, [`FILL_BATCH`] memories a transaction, each
    /// under the writers' guard held exclusively: a write committed before a batch is copied by it (or its copy
    /// already stands), a later one's trigger copies, replaces or removes what the batch wrote.
    async fn fill(&self, organization_id: Uuid) -> sqlx::Result<()> {
        let mut after = Uuid::nil();
        loop {
            let mut tx = super::begin_for_org(&self.pool, organization_id).await?;
            sqlx::query("SELECT memory_vector_guard($1, true)").bind(organization_id).execute(&mut *tx).await?;
            let last: Option<Uuid> = sqlx::query_scalar(
                "WITH batch AS (SELECT id, embedding FROM memory WHERE organization_id = $1 AND id > $2 \
                                ORDER BY id LIMIT $3), \
                      copied AS (INSERT INTO memory_vector (organization_id, memory_id, embedding) \
                                 SELECT $1, id, embedding FROM batch WHERE embedding IS NOT NULL \
                                 ON CONFLICT DO NOTHING) \
                 SELECT id FROM batch ORDER BY id DESC LIMIT 1",
            )
            .bind(organization_id)
            .bind(after)
            .bind(FILL_BATCH)
            .fetch_optional(&mut *tx)
            .await?;
            tx.commit().await?;
            match last {
                Some(last) => after = last,
                None => return Ok(()),
            }
        }
    }

    /// Takes the tenant back to exact scans of `memory`, then drops its partition.
    pub async fn move_out(&mut self, organization_id: Uuid) -> sqlx::Result<()> {
        self.unregister(organization_id).await?;
        self.drop_partition(organization_id).await
    }

    /// Unregisters the tenant under the writers' guard: once this commits, no writer copies into its partition.
    async fn unregister(&self, organization_id: Uuid) -> sqlx::Result<()> {
        let mut tx = super::begin_for_org(&self.pool, organization_id).await?;
        sqlx::query("SELECT memory_vector_guard($1, true)").bind(organization_id).execute(&mut *tx).await?;
        let unregistered = sqlx::query("DELETE FROM memory_vector_tenant WHERE organization_id = $1")
            .bind(organization_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if unregistered > 0 {
            changed_plan(&mut tx, organization_id).await?;
        }
        tx.commit().await
    }

    /// Detaches the partition (CONCURRENTLY: reads of other tenants go on, and a read of this one that began
    /// before the move out finishes first; FINALIZE when an interrupted run left the detach pending) and drops it.
    async fn drop_partition(&self, organization_id: Uuid) -> sqlx::Result<()> {
        let (pool, partition) = (&self.pool, partition_name(organization_id));
        let pending: Option<bool> =
            sqlx::query_scalar("SELECT inhdetachpending FROM pg_inherits WHERE inhrelid = to_regclass($1)")
                .bind(&partition)
                .fetch_optional(pool)
                .await?;
        let detach = match pending {
            Some(false) => "CONCURRENTLY",
            Some(true) => "FINALIZE",
            None => "",
        };
        if !detach.is_empty() {
            pool.execute(format!("ALTER TABLE memory_vector DETACH PARTITION {partition} {detach}").as_str()).await?;
        }
        pool.execute(format!("DROP TABLE IF EXISTS {partition}").as_str()).await.map(|_| ())
    }
}

/// The organisation's vector branch now reads another way (approximate through its own index, or exact without):
/// its retrievals may answer otherwise, so its generation moves (migrations/0004).
async fn changed_plan(tx: &mut sqlx::PgConnection, organization_id: Uuid) -> sqlx::Result<()> {
    sqlx::query("SELECT memory_generation_note($1)").bind(organization_id).execute(&mut *tx).await.map(|_| ())
}
