//! The search branches' SQL (vector, keyword, metadata, graph), each computed inside the scope predicate and the
//! metadata filters.

use pgvector::Vector;
use sqlx::{FromRow, PgConnection, Postgres, QueryBuilder};
use uuid::Uuid;

use super::{MEMORY_COLUMNS, ReadFilter, SearchFilters};
use crate::domain::Memory;

/// A memory found by a branch, with what the branch knows of its relevance.
#[derive(Debug, Clone, FromRow)]
pub struct BranchRow {
    #[sqlx(flatten)]
    pub memory: Memory,
    /// 1 - cosine distance to the query embedding (absent when there is no query embedding).
    pub cosine_sim: Option<f64>,
    /// BM25 / (1 + BM25), in [0, 1) (keyword branch only).
    pub keyword_score: Option<f64>,
    /// Taxonomy nodes the memory is tagged with.
    pub taxonomy_node_ids: Vec<Uuid>,
    /// Whether the memory mentions an entity that has a synthesised profile.
    pub mentions_profiled_entity: bool,
}

/// What a branch adds to each memory's columns, when the caller needs it: its taxonomy tags (for Stage 3) and
/// whether an entity it mentions has a profile (so the profile lookup runs only when it can find something). Each
/// costs index lookups per row, a large share of a branch's time, so the pipeline asks only for what it will use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BranchExtras {
    pub taxonomy: bool,
    pub profiled_entities: bool,
}

impl BranchExtras {
    pub const NONE: Self = Self { taxonomy: false, profiled_entities: false };

    fn push_sql(self, qb: &mut QueryBuilder<'_, Postgres>) {
        qb.push(if self.taxonomy {
            "ARRAY(SELECT t.node_id FROM memory_taxonomy_tag t \
             WHERE t.organization_id = m.organization_id AND t.memory_id = m.id ORDER BY t.node_id)"
        } else {
            "'{}'::uuid[]"
        });
        qb.push(" AS taxonomy_node_ids, ");
        qb.push(if self.profiled_entities {
            "EXISTS (SELECT 1 FROM memory_entity_mention mn JOIN memory_entity en \
                     ON en.organization_id = mn.organization_id AND en.id = mn.entity_id \
                     WHERE mn.organization_id = m.organization_id AND mn.memory_id = m.id \
                       AND en.synthesis_memory_id IS NOT NULL)"
        } else {
            "false"
        });
        qb.push(" AS mentions_profiled_entity, ");
    }
}

/// The prefix of a statement run for its plan and times (benchmarks and tests).
pub(super) const EXPLAIN_ANALYZE: &str = "EXPLAIN (ANALYZE, FORMAT JSON) ";

/// Pushes `LATERAL (...) m`: the memory of the organisation whose id is `id` (a column of the rows before it), read by
/// its key for each of those rows. The subquery is not flattened into a join, which a plan made without knowing the
/// tenant's size (a cached generic plan estimates any tenant at the average's) can make a scan of the tenant for each
/// row, or of all of it once.
pub(super) fn push_memory_by_key(qb: &mut QueryBuilder<'_, Postgres>, organization_id: Uuid, id: &str) {
    qb.push("LATERAL (SELECT * FROM memory m WHERE m.organization_id = ")
        .push_bind(organization_id)
        .push(format!(" AND m.id = {id} OFFSET 0) m"));
}

pub(super) fn select_head(qb: &mut QueryBuilder<'_, Postgres>, extras: BranchExtras) {
    qb.push("SELECT ").push(MEMORY_COLUMNS).push(", ");
    extras.push_sql(qb);
}

/// How a search by cosine distance reads an organisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VectorScan {
    /// Through its own partition's HNSW index when one is ready (`store::ann`), else exactly: the statement decides.
    Either,
    /// Exactly over its rows of `memory`: it had no partition ready when the request began, and an exact answer is
    /// right whatever happened since. One arm, planned alone.
    Exact,
    /// Through its partition's HNSW index alone: it had one ready when the request began. One arm, planned alone
    /// (planning the exact arm beside it had doubled the planner's time). It finds nothing once the partition is no
    /// longer ready: the caller then reads the organisation exactly.
    Partition,
}

impl VectorScan {
    /// How a request reads an organisation that had its partition ready, or not, when the request began.
    pub fn for_tenant(partition_ready: bool) -> Self {
        if partition_ready { Self::Partition } else { Self::Exact }
    }
}

/// Nearest neighbours of `query` by cosine distance, nearest first.
pub async fn vector_branch(
    conn: &mut PgConnection,
    scope: &ReadFilter,
    filters: &SearchFilters,
    query: &Vector,
    rows: usize,
    extras: BranchExtras,
    scan: VectorScan,
) -> sqlx::Result<Vec<BranchRow>> {
    let mut found: Vec<BranchRow> =
        vector_statement("", scope, filters, query, rows, extras, scan).build_query_as().fetch_all(conn).await?;
    // Iterative scans return rows in relaxed order: restore exact order, ties by id.
    found.sort_by(|a, b| {
        b.cosine_sim.partial_cmp(&a.cosine_sim).unwrap_or(std::cmp::Ordering::Equal).then(a.memory.id.cmp(&b.memory.id))
    });
    Ok(found)
}

/// [`vector_branch`]'s statement run under `EXPLAIN (ANALYZE, FORMAT JSON)`: its plan, the planner's and the
/// executor's times (benchmarks and tests).
pub async fn explain_vector_branch(
    conn: &mut PgConnection,
    scope: &ReadFilter,
    filters: &SearchFilters,
    query: &Vector,
    rows: usize,
    scan: VectorScan,
) -> sqlx::Result<serde_json::Value> {
    vector_statement(EXPLAIN_ANALYZE, scope, filters, query, rows, BranchExtras::NONE, scan)
        .build_query_scalar()
        .fetch_one(conn)
        .await
}

fn vector_statement<'a>(
    prefix: &str,
    scope: &'a ReadFilter,
    filters: &'a SearchFilters,
    query: &Vector,
    rows: usize,
    extras: BranchExtras,
    scan: VectorScan,
) -> QueryBuilder<'a, Postgres> {
    let mut qb = QueryBuilder::new(prefix);
    let columns = |qb: &mut QueryBuilder<'a, Postgres>| {
        select_head(qb, extras);
        qb.push("NULL::float8 AS keyword_score, ");
    };
    let predicate = |qb: &mut QueryBuilder<'a, Postgres>| {
        scope.push_sql(qb);
        filters.push_sql(qb);
    };
    push_nearest(&mut qb, scope.organization_id(), query, rows as i64, scan, columns, predicate);
    qb
}

/// Pushes a statement returning the `rows` memories of the organisation nearest `query` by cosine distance among
/// those `predicate` (conditions over alias `m`) admits, each with `columns` (pushed as `SELECT ..., `) and
/// `cosine_sim`, read as `scan` says. [`VectorScan::Either`] has two arms, each gated by the registration it reads
/// (a one-time filter: one arm runs), so a tenant moving in or out is read one way or the other, whole;
/// [`VectorScan::Partition`] has the first alone. Unordered: the HNSW arm returns rows in relaxed order.
pub(crate) fn push_nearest<'a>(
    qb: &mut QueryBuilder<'a, Postgres>,
    organization_id: Uuid,
    query: &Vector,
    rows: i64,
    scan: VectorScan,
    columns: impl Fn(&mut QueryBuilder<'a, Postgres>),
    predicate: impl Fn(&mut QueryBuilder<'a, Postgres>),
) {
    let ready = |qb: &mut QueryBuilder<'a, Postgres>| {
        qb.push("(SELECT t.ready FROM memory_vector_tenant t WHERE t.organization_id = ")
            .push_bind(organization_id)
            .push(")");
    };
    // The exact scan alone ranks ids and distances, then reads the columns of the `rows` nearest: a wide row formed for
    // each of the tenant's memories costs more than their distances (about half the statement's time at 1,500). The
    // arm gated behind the partition's registration is planned with every statement of the two arms and runs only
    // while its tenant moves: there it stays the statement quickest to plan.
    let exact = |qb: &mut QueryBuilder<'a, Postgres>, gated: bool| {
        columns(qb);
        if gated {
            qb.push("1 - (m.embedding <=> ").push_bind(query.clone()).push(") AS cosine_sim FROM memory m WHERE ");
            ready(qb);
            qb.push(" IS NOT TRUE AND ");
            predicate(qb);
            qb.push(" AND m.embedding IS NOT NULL ORDER BY m.embedding <=> ")
                .push_bind(query.clone())
                .push(" LIMIT ")
                .push_bind(rows);
            return;
        }
        qb.push("1 - n.distance AS cosine_sim FROM (SELECT m.id, m.embedding <=> ")
            .push_bind(query.clone())
            .push(" AS distance FROM memory m WHERE ");
        predicate(qb);
        qb.push(" AND m.embedding IS NOT NULL ORDER BY distance LIMIT ").push_bind(rows).push(") n CROSS JOIN ");
        push_memory_by_key(qb, organization_id, "n.id");
    };
    let partition = |qb: &mut QueryBuilder<'a, Postgres>| {
        columns(qb);
        qb.push("1 - (v.embedding <=> ")
            .push_bind(query.clone())
            .push(
                ") AS cosine_sim \
                 FROM memory_vector v JOIN memory m ON m.organization_id = v.organization_id AND m.id = v.memory_id \
                 WHERE v.organization_id = ",
            )
            .push_bind(organization_id)
            .push(" AND ");
        ready(qb);
        qb.push(" AND ");
        predicate(qb);
        qb.push(" ORDER BY v.embedding <=> ").push_bind(query.clone()).push(" LIMIT ").push_bind(rows);
    };
    match scan {
        VectorScan::Exact => exact(qb, false),
        VectorScan::Partition => partition(qb),
        VectorScan::Either => {
            qb.push("(");
            partition(qb);
            qb.push(") UNION ALL (");
            exact(qb, true);
            qb.push(")");
        }
    }
}

/// Memories matching the filters, newest first, unscored (the `metadata` strategy).
pub async fn metadata_branch(
    conn: &mut PgConnection,
    scope: &ReadFilter,
    filters: &SearchFilters,
    rows: usize,
) -> sqlx::Result<Vec<BranchRow>> {
    let mut qb = QueryBuilder::new("");
    select_head(&mut qb, BranchExtras::NONE);
    qb.push("NULL::float8 AS cosine_sim, NULL::float8 AS keyword_score FROM memory m WHERE ");
    scope.push_sql(&mut qb);
    filters.push_sql(&mut qb);
    qb.push(" ORDER BY m.created_at DESC, m.id LIMIT ").push_bind(rows as i64);
    qb.build_query_as().fetch_all(conn).await
}

/// A memory reached from `via` through an entity both mention.
#[derive(Debug, Clone, FromRow)]
pub struct GraphNeighbour {
    pub via: Uuid,
    #[sqlx(flatten)]
    pub candidate: BranchRow,
}

/// One hop of graph expansion: readable memories sharing an entity mention with any of `seeds`, the newest first.
pub async fn entity_neighbours(
    conn: &mut PgConnection,
    scope: &ReadFilter,
    filters: &SearchFilters,
    seeds: &[Uuid],
    query: Option<&Vector>,
    rows: usize,
) -> sqlx::Result<Vec<GraphNeighbour>> {
    // The inner DISTINCT ON keeps one row per memory; the outer order keeps the newest neighbours.
    let mut qb = QueryBuilder::new("SELECT * FROM (SELECT DISTINCT ON (m.id) e1.memory_id AS via, ");
    qb.push(MEMORY_COLUMNS).push(", ");
    BranchExtras::NONE.push_sql(&mut qb);
    qb.push("1 - (m.embedding <=> ");
    qb.push_bind(query.cloned())
        .push(
            ") AS cosine_sim, NULL::float8 AS keyword_score \
             FROM memory_entity_mention e1 \
             JOIN memory_entity_mention e2 ON e2.organization_id = e1.organization_id \
                  AND e2.entity_id = e1.entity_id AND e2.memory_id <> e1.memory_id \
             JOIN memory m ON m.organization_id = e2.organization_id AND m.id = e2.memory_id \
             WHERE e1.organization_id = ",
        )
        .push_bind(scope.organization_id())
        .push(" AND e1.memory_id = ANY(")
        .push_bind(seeds.to_vec())
        .push(") AND NOT (m.id = ANY(")
        .push_bind(seeds.to_vec())
        .push(")) AND ");
    scope.push_sql(&mut qb);
    filters.push_sql(&mut qb);
    qb.push(" ORDER BY m.id, e1.memory_id) n ORDER BY n.created_at DESC, n.id LIMIT ").push_bind(rows as i64);
    qb.build_query_as().fetch_all(conn).await
}
