//! The keyword branch: BM25 over the organisation's keyword postings, inside the scope predicate and the metadata
//! filters.

use pgvector::Vector;
use sqlx::{FromRow, PgConnection, QueryBuilder};

use super::{
    ScopeFilter, SearchFilters,
    branches::{CandidateExtras, CandidateRow, select_head},
};

/// Distinct query terms the keyword branch scores; the rest of a longer query is ignored (the rarest are kept).
pub const MAX_QUERY_TERMS: usize = 32;
/// BM25's term-frequency saturation (k1) and length normalisation (b).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bm25 {
    pub k1: f64,
    pub b: f64,
}

impl Default for Bm25 {
    /// Anserini's defaults. Over the textbook 1.2 / 0.75 the modes gain on both evaluation sets, most on short
    /// conversational memories (docs/decisions.md).
    fn default() -> Self {
        Self { k1: 0.9, b: 0.4 }
    }
}

/// Postings the keyword branch's first pass reads per query term unless configured (`MEMORY_KEYWORD_POSTINGS`).
/// At the 1M benchmark's largest tenant (100k memories) its top 10 agree with exact BM25 on 0.600; 8,000 reach 0.995
/// for about 4 ms more keyword p95 (docs/benchmarks.md#the-keyword-branch-at-1m-memories).
pub const POSTINGS_PER_TERM: usize = 2_000;

/// How much work one pass of the keyword branch may do.
#[derive(Debug, Clone, Copy, PartialEq)]
struct KeywordBounds {
    /// Postings read per query term, highest tf then shortest memory first; a term in more memories than this is
    /// read partially (its low idf keeps the lost contributions small). `None` reads every posting.
    postings_per_term: Option<i64>,
    /// Best-scoring memories kept before the scope and filters are applied; `None` keeps all.
    ranked_before_filter: Option<i64>,
}

impl KeywordBounds {
    const EXACT: Self = Self { postings_per_term: None, ranked_before_filter: None };
    /// Bounds of the first pass. 2,000 postings of a term are a few hundred microseconds of index-only scan.
    fn bounded(rows: usize, postings_per_term: usize) -> Self {
        Self { postings_per_term: Some(postings_per_term as i64), ranked_before_filter: Some(4 * rows as i64) }
    }
}

/// What the keyword branch searches for.
#[derive(Debug, Clone, Copy)]
pub struct KeywordSearch<'a> {
    /// Must be the configuration `memory.content_tsv` is built with.
    pub text_search_config: &'a str,
    pub text: &'a str,
    /// The query embedding, for the rows' `cosine_sim`.
    pub query: Option<&'a Vector>,
    /// Rows returned.
    pub rows: usize,
    pub extras: CandidateExtras,
    pub bm25: Bm25,
    /// Postings the first pass reads per query term, highest tf then shortest memory first.
    pub postings_per_term: usize,
}

#[derive(FromRow)]
struct KeywordRow {
    #[sqlx(flatten)]
    candidate: CandidateRow,
    /// Whether the pass's bounds may have hidden a match (a selective term had more postings, or more memories
    /// matched, than read).
    truncated: bool,
}

/// Full-text matches of `text` (any of its terms and phrases; -exclusions honoured), ranked by BM25 with the
/// organisation's term statistics, best first. `keyword_score` is BM25 / (1 + BM25), in [0, 1).
///
/// Scores come from `memory_posting` alone (index-only scans); only the best are joined to `memory` for the
/// scope, the filters and the tsquery re-check. A first pass bounds that work; when its bounds may have hidden a
/// match and it found fewer than `rows` rows, an exact pass reads everything. With metadata filters, which may reject
/// most of a tenant, the exact pass runs directly.
pub async fn keyword_branch(
    conn: &mut PgConnection,
    scope: &ScopeFilter,
    filters: &SearchFilters,
    search: &KeywordSearch<'_>,
) -> sqlx::Result<Vec<CandidateRow>> {
    let mut bounds = if filters.is_empty() {
        KeywordBounds::bounded(search.rows, search.postings_per_term)
    } else {
        KeywordBounds::EXACT
    };
    loop {
        let rows = keyword_pass(&mut *conn, scope, filters, search, bounds).await?;
        let complete = rows.len() >= search.rows || rows.first().is_some_and(|r| !r.truncated);
        if complete || bounds == KeywordBounds::EXACT {
            return Ok(rows.into_iter().map(|r| r.candidate).collect());
        }
        bounds = KeywordBounds::EXACT;
    }
}

/// [`keyword_branch`] without bounds: exact BM25 over every posting (what the benchmark measures the bounded pass
/// against).
pub async fn keyword_branch_exact(
    conn: &mut PgConnection,
    scope: &ScopeFilter,
    filters: &SearchFilters,
    search: &KeywordSearch<'_>,
) -> sqlx::Result<Vec<CandidateRow>> {
    let rows = keyword_pass(conn, scope, filters, search, KeywordBounds::EXACT).await?;
    Ok(rows.into_iter().map(|r| r.candidate).collect())
}

async fn keyword_pass(
    conn: &mut PgConnection,
    scope: &ScopeFilter,
    filters: &SearchFilters,
    search: &KeywordSearch<'_>,
    bounds: KeywordBounds,
) -> sqlx::Result<Vec<KeywordRow>> {
    let KeywordSearch { text_search_config, text, query, rows, extras, bm25, .. } = *search;
    let mut qb = QueryBuilder::new(
        "WITH corpus AS (SELECT doc_count::float8 AS n, total_length::float8 / doc_count AS avgdl \
                         FROM memory_corpus_totals WHERE doc_count > 0 AND organization_id = ",
    );
    qb.push_bind(scope.organization_id())
        .push(
            "), terms AS (\
                 SELECT t.lexeme, ts.df, ln(1 + (c.n - ts.df + 0.5) / (ts.df + 0.5)) AS idf, c.n \
                 FROM memory_keyword_terms(",
        )
        .push_bind(text_search_config.to_string())
        .push("::regconfig, ")
        .push_bind(text.to_string())
        .push(
            ") AS t(lexeme) CROSS JOIN corpus c \
             CROSS JOIN LATERAL (SELECT coalesce(sum(s.doc_count), 0)::float8 AS df FROM memory_term_stats s \
                                 WHERE s.organization_id = ",
        )
        .push_bind(scope.organization_id())
        // At most MAX_QUERY_TERMS terms are scored, the rarest (the most telling) first: a long query costs no
        // more than a short one.
        .push(format!(" AND s.lexeme = t.lexeme) ts ORDER BY ts.df, t.lexeme LIMIT {MAX_QUERY_TERMS}), "))
        // A memory must contain one of the query's selective terms (its three rarest, and any in at most 5% of the
        // organisation): matches on common words alone fill the list with noise that fusion then rewards.
        .push(
            "weights AS (SELECT lexeme, df, idf, \
                                row_number() OVER (ORDER BY idf DESC, lexeme) <= 3 OR df <= 0.05 * n AS selective \
                         FROM terms), ",
        )
        // Materialised: computed once, not for every joined row.
        .push("query AS MATERIALIZED (SELECT memory_keyword_tsquery(")
        .push_bind(text_search_config.to_string())
        .push("::regconfig, ")
        .push_bind(text.to_string())
        .push(") AS q), ");
    qb.push("ranked AS (SELECT p.memory_id, sum(w.idf * p.tf * ")
        .push_bind(bm25.k1 + 1.0)
        .push("::float8 / (p.tf + ")
        .push_bind(bm25.k1)
        .push("::float8 * (")
        .push_bind(1.0 - bm25.b)
        .push("::float8 + ")
        .push_bind(bm25.b)
        .push(
            "::float8 * p.doc_length / c.avgdl))) AS bm25 \
             FROM weights w CROSS JOIN corpus c CROSS JOIN LATERAL (\
                 SELECT p.memory_id, p.tf, p.doc_length FROM memory_posting p WHERE p.organization_id = ",
        )
        .push_bind(scope.organization_id())
        .push(" AND p.lexeme = w.lexeme ORDER BY p.tf DESC, p.doc_length, p.memory_id LIMIT ")
        .push_bind(bounds.postings_per_term)
        .push(") p GROUP BY p.memory_id HAVING bool_or(w.selective) ORDER BY bm25 DESC, p.memory_id LIMIT ")
        .push_bind(bounds.ranked_before_filter)
        .push(") ");
    select_head(&mut qb, extras);
    // Only a cut that can hide a memory counts: a selective term read partially, or the ranking cut. A common
    // term read partially only lowers the scores of memories already found through a selective one.
    qb.push("coalesce((SELECT max(df) FILTER (WHERE selective) FROM weights) > ")
        .push_bind(bounds.postings_per_term)
        .push(" OR (SELECT count(*) FROM ranked) >= ")
        .push_bind(bounds.ranked_before_filter)
        .push(", false) AS truncated, ");
    qb.push("1 - (m.embedding <=> ")
        .push_bind(query.cloned())
        .push(
            ") AS cosine_sim, (r.bm25 / (1 + r.bm25))::float8 AS keyword_score \
             FROM ranked r CROSS JOIN query JOIN memory m ON m.organization_id = ",
        )
        .push_bind(scope.organization_id())
        .push(" AND m.id = r.memory_id WHERE m.content_tsv @@ query.q AND ");
    scope.push_sql(&mut qb);
    filters.push_sql(&mut qb);
    qb.push(" ORDER BY r.bm25 DESC, m.id LIMIT ").push_bind(rows as i64);
    qb.build_query_as().fetch_all(conn).await
}
