//! Candidate queries of the search branches, each computed inside the scope predicate and the metadata filters.

use pgvector::Vector;
use sqlx::{FromRow, PgConnection, Postgres, QueryBuilder};
use uuid::Uuid;

use super::{MEMORY_COLUMNS, ScopeFilter, SearchFilters};
use crate::domain::Memory;

/// A memory found by a branch, with what the branch knows of its relevance.
#[derive(Debug, Clone, FromRow)]
pub struct CandidateRow {
    #[sqlx(flatten)]
    pub memory: Memory,
    /// 1 - cosine distance to the query embedding (absent when there is no query embedding).
    pub cosine_sim: Option<f64>,
    /// ts_rank_cd normalised to [0, 1) (keyword branch only).
    pub keyword_score: Option<f64>,
    /// Taxonomy nodes the memory is tagged with.
    pub taxonomy_node_ids: Vec<Uuid>,
    /// Whether the memory mentions an entity that has a synthesised profile.
    pub mentions_profiled_entity: bool,
}

/// What every branch adds to a memory's columns: its taxonomy tags and whether an entity it mentions has a profile
/// (so the profile lookup runs only when it can find something).
const CANDIDATE_EXTRAS: &str = "ARRAY(SELECT t.node_id FROM memory_taxonomy_tag t \
     WHERE t.organization_id = m.organization_id AND t.memory_id = m.id ORDER BY t.node_id) AS taxonomy_node_ids, \
     EXISTS (SELECT 1 FROM memory_entity_mention mn JOIN memory_entity en \
             ON en.organization_id = mn.organization_id AND en.id = mn.entity_id \
             WHERE mn.organization_id = m.organization_id AND mn.memory_id = m.id \
               AND en.synthesis_memory_id IS NOT NULL) AS mentions_profiled_entity";

fn select_head(qb: &mut QueryBuilder<'_, Postgres>) {
    qb.push("SELECT ").push(MEMORY_COLUMNS).push(", ").push(CANDIDATE_EXTRAS).push(", ");
}

/// Nearest neighbours of `query` by cosine distance (HNSW), nearest first.
pub async fn vector_branch(
    conn: &mut PgConnection,
    scope: &ScopeFilter,
    filters: &SearchFilters,
    query: &Vector,
    limit: usize,
) -> sqlx::Result<Vec<CandidateRow>> {
    let mut qb = QueryBuilder::new("");
    select_head(&mut qb);
    qb.push("1 - (m.embedding <=> ")
        .push_bind(query.clone())
        .push(") AS cosine_sim, NULL::float8 AS keyword_score FROM memory m WHERE ");
    scope.push_sql(&mut qb);
    filters.push_sql(&mut qb);
    qb.push(" AND m.embedding IS NOT NULL ORDER BY m.embedding <=> ")
        .push_bind(query.clone())
        .push(" LIMIT ")
        .push_bind(limit as i64);
    let mut rows: Vec<CandidateRow> = qb.build_query_as().fetch_all(conn).await?;
    // Iterative scans return rows in relaxed order: restore exact order, ties by id.
    rows.sort_by(|a, b| {
        b.cosine_sim.partial_cmp(&a.cosine_sim).unwrap_or(std::cmp::Ordering::Equal).then(a.memory.id.cmp(&b.memory.id))
    });
    Ok(rows)
}

/// BM25's term-frequency saturation and length normalisation.
const BM25_K1: f64 = 1.2;
const BM25_B: f64 = 0.75;

/// Full-text matches of `text` (any of its terms; quoted phrases and -exclusions honoured), ranked by BM25 with
/// the organisation's term statistics; best first. `keyword_score` is BM25 / (1 + BM25), in [0, 1).
pub async fn keyword_branch(
    conn: &mut PgConnection,
    scope: &ScopeFilter,
    filters: &SearchFilters,
    text_search_config: &str,
    text: &str,
    query: Option<&Vector>,
    limit: usize,
) -> sqlx::Result<Vec<CandidateRow>> {
    let mut qb = QueryBuilder::new("WITH terms AS (SELECT DISTINCT u.lexeme FROM unnest(to_tsvector(");
    qb.push_bind(text_search_config.to_string())
        .push("::regconfig, ")
        .push_bind(text.to_string())
        .push(
            ")) u), \
             corpus AS (SELECT greatest(coalesce(max(doc_count), 1), 1)::float8 AS n, \
                               greatest(coalesce(max(total_length), 1), 1)::float8 \
                                 / greatest(coalesce(max(doc_count), 1), 1) AS avgdl \
                        FROM memory_corpus_stats WHERE organization_id = ",
        )
        .push_bind(scope.organization_id)
        .push(
            "), \
             weights AS (SELECT t.lexeme, coalesce(ts.doc_count, 0) AS df, \
                                ln(1 + (c.n - coalesce(ts.doc_count, 0) + 0.5) / (coalesce(ts.doc_count, 0) + 0.5)) AS idf \
                         FROM terms t CROSS JOIN corpus c LEFT JOIN memory_term_stats ts \
                           ON ts.organization_id = ",
        )
        .push_bind(scope.organization_id)
        .push(" AND ts.lexeme = t.lexeme), ")
        // websearch syntax, but terms OR-ed: a turn's text rarely contains every word of a memory.
        .push("query AS (SELECT replace(websearch_to_tsquery(")
        .push_bind(text_search_config.to_string())
        .push("::regconfig, ")
        .push_bind(text.to_string())
        .push(")::text, ' & ', ' | ')::tsquery AS q), ")
        // Candidates must contain one of the query's selective terms (the three rarest, and any in at most 5% of
        // the organisation's memories): documents matching only common words could not reach the top by BM25,
        // and scoring them all is what makes full-text search slow on large tenants.
        .push(
            "focus AS (SELECT to_tsquery('simple', string_agg(quote_literal(w.lexeme), ' | ')) AS q \
                       FROM (SELECT lexeme, df, row_number() OVER (ORDER BY idf DESC, lexeme) AS r FROM weights) w, \
                            corpus c \
                       WHERE w.r <= 3 OR w.df <= 0.05 * c.n), ",
        );
    qb.push(format!(
        "scored AS (SELECT m.id, (SELECT sum(w.idf * cardinality(u.positions) * {k1p1} \
                                     / (cardinality(u.positions) + {k1} * ({one_b} + {b} * length(m.content_tsv) / c.avgdl))) \
                                  FROM unnest(m.content_tsv) u JOIN weights w ON w.lexeme = u.lexeme) AS bm25 \
                    FROM memory m, query, focus, corpus c WHERE ",
        k1p1 = BM25_K1 + 1.0,
        k1 = BM25_K1,
        one_b = 1.0 - BM25_B,
        b = BM25_B
    ));
    scope.push_sql(&mut qb);
    filters.push_sql(&mut qb);
    qb.push(" AND m.content_tsv @@ query.q AND m.content_tsv @@ focus.q ORDER BY bm25 DESC, m.id LIMIT ")
        .push_bind(limit as i64)
        .push(") ");
    select_head(&mut qb);
    qb.push("1 - (m.embedding <=> ")
        .push_bind(query.cloned())
        .push(
            ") AS cosine_sim, (s.bm25 / (1 + s.bm25))::float8 AS keyword_score \
             FROM scored s JOIN memory m ON m.organization_id = ",
        )
        .push_bind(scope.organization_id)
        .push(" AND m.id = s.id ORDER BY s.bm25 DESC, m.id");
    qb.build_query_as().fetch_all(conn).await
}

/// Memories matching the filters, newest first, unscored (the `metadata` strategy).
pub async fn metadata_branch(
    conn: &mut PgConnection,
    scope: &ScopeFilter,
    filters: &SearchFilters,
    limit: usize,
) -> sqlx::Result<Vec<CandidateRow>> {
    let mut qb = QueryBuilder::new("");
    select_head(&mut qb);
    qb.push("NULL::float8 AS cosine_sim, NULL::float8 AS keyword_score FROM memory m WHERE ");
    scope.push_sql(&mut qb);
    filters.push_sql(&mut qb);
    qb.push(" ORDER BY m.created_at DESC, m.id LIMIT ").push_bind(limit as i64);
    qb.build_query_as().fetch_all(conn).await
}

/// A memory reached from `via` through an entity both mention.
#[derive(Debug, Clone, FromRow)]
pub struct GraphNeighbour {
    pub via: Uuid,
    #[sqlx(flatten)]
    pub candidate: CandidateRow,
}

/// One hop of graph expansion: readable memories sharing an entity mention with any of `seeds`.
pub async fn entity_neighbours(
    conn: &mut PgConnection,
    scope: &ScopeFilter,
    filters: &SearchFilters,
    seeds: &[Uuid],
    query: Option<&Vector>,
    limit: usize,
) -> sqlx::Result<Vec<GraphNeighbour>> {
    let mut qb = QueryBuilder::new("SELECT DISTINCT ON (m.id) e1.memory_id AS via, ");
    qb.push(MEMORY_COLUMNS).push(", ").push(CANDIDATE_EXTRAS).push(", 1 - (m.embedding <=> ");
    qb.push_bind(query.cloned())
        .push(
            ") AS cosine_sim, NULL::float8 AS keyword_score \
             FROM memory_entity_mention e1 \
             JOIN memory_entity_mention e2 ON e2.organization_id = e1.organization_id \
                  AND e2.entity_id = e1.entity_id AND e2.memory_id <> e1.memory_id \
             JOIN memory m ON m.organization_id = e2.organization_id AND m.id = e2.memory_id \
             WHERE e1.organization_id = ",
        )
        .push_bind(scope.organization_id)
        .push(" AND e1.memory_id = ANY(")
        .push_bind(seeds.to_vec())
        .push(") AND NOT (m.id = ANY(")
        .push_bind(seeds.to_vec())
        .push(")) AND ");
    scope.push_sql(&mut qb);
    filters.push_sql(&mut qb);
    qb.push(" ORDER BY m.id, e1.memory_id LIMIT ").push_bind(limit as i64);
    qb.build_query_as().fetch_all(conn).await
}
