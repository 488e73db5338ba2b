//! The keyword branch's reads: each query term's weight and postings ([`term_postings`]), and the memories of a
//! ranking the caller may read ([`readable`]); `memory_core::retrieval::keyword` scores the postings (BM25) and
//! joins the best to `memory` in rounds.
//!
//! A term's postings are read whole as stored: its packed list less the packed postings deleted since, plus the
//! tail written since; scoring them in process costs far less than PostgreSQL's executor, about a microsecond a
//! row. [`pack`] folds a tail into its list.

use std::collections::HashSet;

use pgvector::Vector;
use sqlx::{FromRow, PgConnection, PgPool, Postgres, QueryBuilder};
use uuid::Uuid;

use super::{
    ReadFilter, SearchFilters,
    branches::{BranchExtras, BranchRow, EXPLAIN_ANALYZE, push_memory_by_key, select_head},
};

/// Distinct query terms the keyword branch scores; the rest of a longer query is ignored (the rarest are kept).
pub const MAX_QUERY_TERMS: usize = 32;
/// Postings one query reads at most by default (about 12 MB): its terms are taken rarest first while their postings
/// together stay within it (the rarest always), and a commoner term beyond it is not scored. Binds only on a large
/// tenant's common words, the terms that weigh least in BM25; the ranking is exact over the terms taken.
pub const POSTING_BUDGET: usize = 500_000;
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
    pub extras: BranchExtras,
    /// Postings read at most ([`POSTING_BUDGET`]).
    pub posting_budget: usize,
}

/// One query term: its weight, and its postings as stored.
#[derive(FromRow)]
pub struct TermPostings {
    pub idf: f64,
    /// A memory must hold one of the query's selective terms to be found.
    pub selective: bool,
    pub average_length: f64,
    /// The list as last packed, [`POSTING_BYTES`] a posting.
    packed: Option<Vec<u8>>,
    /// Postings written since, in the same layout.
    tail: Option<Vec<u8>>,
    /// Memories whose packed posting was deleted since, 16 bytes each.
    gone: Option<Vec<u8>>,
}

impl TermPostings {
    /// The term's postings now, as (memory, tf, length): the packed list less what is gone, then the tail.
    pub fn postings(&self) -> impl Iterator<Item = (Uuid, f64, f64)> + '_ {
        let gone: HashSet<Uuid, foldhash::fast::FixedState> =
            self.gone.as_deref().unwrap_or_default().chunks_exact(16).map(uuid).collect();
        let packed = postings(self.packed.as_deref().unwrap_or_default()).filter(move |(id, ..)| !gone.contains(id));
        packed.chain(postings(self.tail.as_deref().unwrap_or_default()))
    }

    /// A term of these postings (the store's layout), for tests of the scoring.
    pub fn of(
        idf: f64,
        selective: bool,
        average_length: f64,
        packed: &[(Uuid, u32, u32)],
        tail: &[(Uuid, u32, u32)],
        gone: &[Uuid],
    ) -> Self {
        let pack = |ps: &[(Uuid, u32, u32)]| {
            Some(
                ps.iter()
                    .flat_map(|&(id, tf, l)| [id.as_bytes().as_slice(), &tf.to_be_bytes(), &l.to_be_bytes()].concat())
                    .collect(),
            )
        };
        Self {
            idf,
            selective,
            average_length,
            packed: pack(packed),
            tail: pack(tail),
            gone: Some(gone.iter().flat_map(|id| id.as_bytes().to_vec()).collect()),
        }
    }
}

/// A packed posting: the memory id, then its tf and length (int4, big-endian).
const POSTING_BYTES: usize = 24;

fn postings(bytes: &[u8]) -> impl Iterator<Item = (Uuid, f64, f64)> + '_ {
    let int = |b: &[u8]| f64::from(u32::from_be_bytes(b.try_into().expect("4 bytes")));
    bytes.chunks_exact(POSTING_BYTES).map(move |p| (uuid(&p[..16]), int(&p[16..20]), int(&p[20..])))
}

fn uuid(bytes: &[u8]) -> Uuid {
    Uuid::from_bytes(bytes.try_into().expect("16 bytes"))
}

/// The query's terms (at most [`MAX_QUERY_TERMS`] within the posting budget, the rarest, the most telling, first)
/// with their postings.
pub async fn term_postings(
    conn: &mut PgConnection,
    organization_id: Uuid,
    search: &KeywordSearch<'_>,
) -> sqlx::Result<Vec<TermPostings>> {
    let mut qb = QueryBuilder::new("");
    push_weights(&mut qb, organization_id, search);
    qb.push(
        "SELECT w.idf, w.selective, w.avgdl AS average_length, \
                (SELECT l.postings FROM memory_posting_list l WHERE l.organization_id = ",
    )
    .push_bind(organization_id)
    .push(
        " AND l.lexeme = w.lexeme) AS packed, \
         (SELECT string_agg(uuid_send(p.memory_id) || int4send(p.tf) || int4send(p.doc_length), ''::bytea) \
          FROM memory_posting p WHERE p.organization_id = ",
    )
    .push_bind(organization_id)
    .push(
        " AND p.lexeme = w.lexeme AND NOT p.packed) AS tail, \
         (SELECT string_agg(uuid_send(g.memory_id), ''::bytea) FROM memory_posting_gone g WHERE g.organization_id = ",
    )
    .push_bind(organization_id)
    .push(" AND g.lexeme = w.lexeme) AS gone FROM weights w");
    qb.build_query_as().fetch_all(conn).await
}

/// The CTEs `corpus` (n, avgdl) and `weights` (lexeme, df, idf, avgdl, selective) of the query's terms.
fn push_weights(qb: &mut QueryBuilder<'_, Postgres>, organization_id: Uuid, search: &KeywordSearch<'_>) {
    qb.push(
        "WITH corpus AS (SELECT doc_count::float8 AS n, total_length::float8 / doc_count AS avgdl \
                         FROM memory_corpus_totals WHERE doc_count > 0 AND organization_id = ",
    )
    .push_bind(organization_id)
    .push(
        "), terms AS (SELECT lexeme, df, idf, n, avgdl FROM (\
             SELECT t.lexeme, ts.df, ln(1 + (c.n - ts.df + 0.5) / (ts.df + 0.5)) AS idf, c.n, c.avgdl, \
                    row_number() OVER w AS position, sum(ts.df) OVER w AS reads \
             FROM memory_keyword_terms(",
    )
    .push_bind(search.text_search_config.to_string())
    .push("::regconfig, ")
    .push_bind(search.text.to_string())
    .push(
        ") AS t(lexeme) CROSS JOIN corpus c \
         CROSS JOIN LATERAL (SELECT coalesce(sum(s.doc_count), 0)::float8 AS df FROM memory_term_stats s \
                             WHERE s.organization_id = ",
    )
    .push_bind(organization_id)
    .push(format!(
        " AND s.lexeme = t.lexeme) ts WINDOW w AS (ORDER BY ts.df, t.lexeme ROWS UNBOUNDED PRECEDING)) ordered \
         WHERE position <= {MAX_QUERY_TERMS} AND (position = 1 OR reads <= "
    ))
    .push_bind(search.posting_budget as f64)
    .push(")), ")
    // A memory must contain one of the query's selective terms (its three rarest, and any in at most 5% of the
    // organisation): matches on common words alone fill the list with noise that fusion then rewards.
    .push(
        "weights AS (SELECT lexeme, df, idf, avgdl, \
                            row_number() OVER (ORDER BY idf DESC, lexeme) <= 3 OR df <= 0.05 * n AS selective \
                     FROM terms) ",
    );
}

/// Of `ranked`, the first `rows` by score (ties by id) the caller may read that pass the filters and the tsquery's
/// re-check (its phrases and -exclusions), in that order.
pub async fn readable(
    conn: &mut PgConnection,
    scope: &ReadFilter,
    filters: &SearchFilters,
    search: &KeywordSearch<'_>,
    ranked: &[(Uuid, f64)],
    rows: usize,
) -> sqlx::Result<Vec<BranchRow>> {
    readable_statement("", scope, filters, search, ranked, rows).build_query_as().fetch_all(conn).await
}

/// [`readable`]'s statement run under `EXPLAIN (ANALYZE, FORMAT JSON)` (tests).
pub async fn explain_readable(
    conn: &mut PgConnection,
    scope: &ReadFilter,
    filters: &SearchFilters,
    search: &KeywordSearch<'_>,
    ranked: &[(Uuid, f64)],
    rows: usize,
) -> sqlx::Result<serde_json::Value> {
    readable_statement(EXPLAIN_ANALYZE, scope, filters, search, ranked, rows).build_query_scalar().fetch_one(conn).await
}

fn readable_statement<'a>(
    prefix: &str,
    scope: &ReadFilter,
    filters: &SearchFilters,
    search: &KeywordSearch<'_>,
    ranked: &[(Uuid, f64)],
    rows: usize,
) -> QueryBuilder<'a, Postgres> {
    let (ids, scores): (Vec<Uuid>, Vec<f64>) = ranked.iter().copied().unzip();
    let mut qb = QueryBuilder::new(format!("{prefix}WITH "));
    push_tsquery(&mut qb, search);
    push_matching_rows(&mut qb, scope, filters, search, rows, |qb| {
        qb.push("(SELECT u.memory_id, u.bm25 FROM unnest(")
            .push_bind(ids)
            .push("::uuid[], ")
            .push_bind(scores)
            .push("::float8[]) AS u(memory_id, bm25) ORDER BY u.bm25 DESC, u.memory_id) r");
    });
    qb
}

/// The CTE `query` (q): the query's tsquery, materialised so it is computed once, not for every joined row.
fn push_tsquery(qb: &mut QueryBuilder<'_, Postgres>, search: &KeywordSearch<'_>) {
    qb.push("query AS MATERIALIZED (SELECT memory_keyword_tsquery(")
        .push_bind(search.text_search_config.to_string())
        .push("::regconfig, ")
        .push_bind(search.text.to_string())
        .push(") AS q) ");
}

/// The first `rows` of a ranking `r` (memory_id, bm25), which `ranking` pushes ordered by score (ties by id), of
/// those the caller may read that pass the filters and the tsquery's re-check (its phrases and -exclusions), in that
/// order. Read in the ranking's order, the join to `memory` stops at the `rows`-th match: a match below it costs
/// nothing.
fn push_matching_rows<'a>(
    qb: &mut QueryBuilder<'a, Postgres>,
    scope: &ReadFilter,
    filters: &SearchFilters,
    search: &KeywordSearch<'_>,
    rows: usize,
    ranking: impl FnOnce(&mut QueryBuilder<'a, Postgres>),
) {
    select_head(qb, search.extras);
    qb.push("1 - (m.embedding <=> ")
        .push_bind(search.query.cloned())
        .push(") AS cosine_sim, (r.bm25 / (1 + r.bm25))::float8 AS keyword_score FROM ");
    ranking(qb);
    qb.push(" CROSS JOIN query CROSS JOIN ");
    push_memory_by_key(qb, scope.organization_id(), "r.memory_id");
    qb.push(" WHERE m.content_tsv @@ query.q AND ");
    scope.push_sql(qb);
    filters.push_sql(qb);
    qb.push(" ORDER BY r.bm25 DESC, r.memory_id LIMIT ").push_bind(rows as i64);
}

/// The keyword branch's ranking (BM25 with saturation `k1` and length normalisation `b`) computed by PostgreSQL's
/// executor from `memory_posting`, the postings' source of truth, one row per posting: the reference the benchmark
/// and the tests hold the branch to (several times slower on a large tenant's common terms).
pub async fn keyword_branch_exact(
    conn: &mut PgConnection,
    scope: &ReadFilter,
    filters: &SearchFilters,
    search: &KeywordSearch<'_>,
    bm25: (f64, f64),
) -> sqlx::Result<Vec<BranchRow>> {
    exact_statement("", scope, filters, search, bm25).build_query_as().fetch_all(conn).await
}

/// [`keyword_branch_exact`]'s statement run under `EXPLAIN (ANALYZE, FORMAT JSON)` (tests).
pub async fn explain_keyword_branch_exact(
    conn: &mut PgConnection,
    scope: &ReadFilter,
    filters: &SearchFilters,
    search: &KeywordSearch<'_>,
    bm25: (f64, f64),
) -> sqlx::Result<serde_json::Value> {
    exact_statement(EXPLAIN_ANALYZE, scope, filters, search, bm25).build_query_scalar().fetch_one(conn).await
}

fn exact_statement<'a>(
    prefix: &str,
    scope: &ReadFilter,
    filters: &SearchFilters,
    search: &KeywordSearch<'_>,
    (k1, b): (f64, f64),
) -> QueryBuilder<'a, Postgres> {
    let mut qb = QueryBuilder::new(prefix);
    push_weights(&mut qb, scope.organization_id(), search);
    qb.push(", ");
    push_tsquery(&mut qb, search);
    qb.push(", ranked AS (SELECT p.memory_id, sum(w.idf * p.tf * ")
        .push_bind(k1 + 1.0)
        .push("::float8 / (p.tf + ")
        .push_bind(k1)
        .push("::float8 * (")
        .push_bind(1.0 - b)
        .push("::float8 + ")
        .push_bind(b)
        // Each term's postings read by their own index scan (OFFSET 0 keeps the planner from turning the terms into
        // one join over the tenant's postings), as the branch read them before they were packed.
        .push(
            "::float8 * p.doc_length / w.avgdl))) AS bm25 FROM weights w CROSS JOIN LATERAL (\
                 SELECT p.memory_id, p.tf, p.doc_length FROM memory_posting p WHERE p.organization_id = ",
        )
        .push_bind(scope.organization_id())
        .push(
            " AND p.lexeme = w.lexeme OFFSET 0) p GROUP BY p.memory_id HAVING bool_or(w.selective) \
                   ORDER BY bm25 DESC, p.memory_id) ",
        );
    push_matching_rows(&mut qb, scope, filters, search, search.rows, |qb| {
        qb.push("ranked r");
    });
    qb
}

/// Postings one [`pack`] statement rewrites at most (its first lexeme whatever its size): a statement holds the
/// tail rows it marks until it commits, and a text edit of those memories waits for them.
pub const PACK_POSTINGS: i64 = 200_000;

/// A lexeme's list is packed again once the postings written since reach this fraction of it (one sixteenth): a long
/// list is rewritten once per that many new postings, not on every packing after a few writes, and the branch reads
/// at most about that share of a lexeme's postings row by row.
pub const REPACK_SHARE: i64 = 16;

/// Packs again the lists of the organisation's lexemes that are due, those with the most pending postings first,
/// until about `max_postings` postings are rewritten; returns how many lexemes it packed (0: none was due). A lexeme
/// is due when a posting of its list was deleted (a forgotten or edited memory's words leave the list and
/// `memory_posting_gone` at the next packing), or when its postings written since reach [`REPACK_SHARE`] of the list
/// (a new lexeme's always do). Retrieval is exact whether or not this runs; what it saves is reading tails row by row.
pub async fn pack(pool: &PgPool, organization_id: Uuid, max_postings: i64) -> sqlx::Result<u64> {
    let mut tx = super::begin_for_org(pool, organization_id).await?;
    // One packing of an organisation at a time: a second one's snapshot, taken before the first commits, would see
    // the postings the first marks packed neither as packed nor as its own to mark.
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('memory_posting_list'), hashtext($1::text))")
        .bind(organization_id)
        .execute(&mut *tx)
        .await?;
    // One statement, one snapshot: a list is rebuilt from the postings already packed and those this statement
    // marks. A posting written meanwhile is not visible to it and stays in the tail. A tail posting that a writer
    // holds is skipped (it stays in the tail), so packing never waits for a writer; one that a writer deletes after
    // it is marked is recorded gone by that deletion, which waited for the mark.
    let packed = sqlx::query(
        "WITH pending AS (\
             SELECT lexeme, count(*) AS n, bool_or(gone) AS gone FROM (\
                 SELECT lexeme, false AS gone FROM memory_posting WHERE organization_id = $1 AND NOT packed \
                 UNION ALL SELECT lexeme, true FROM memory_posting_gone WHERE organization_id = $1) d \
             GROUP BY lexeme), \
         due AS MATERIALIZED (\
             SELECT lexeme FROM (\
                 SELECT p.lexeme, \
                        row_number() OVER w AS position, \
                        sum(p.n + coalesce(octet_length(l.postings), 0) / 24) OVER w AS work \
                 FROM pending p LEFT JOIN memory_posting_list l ON l.organization_id = $1 AND l.lexeme = p.lexeme \
                 WHERE p.gone OR p.n * $3 >= coalesce(octet_length(l.postings), 0) / 24 \
                 WINDOW w AS (ORDER BY p.n DESC, p.lexeme ROWS UNBOUNDED PRECEDING)) ordered \
             WHERE position = 1 OR work <= $2), \
         claimed AS (\
             SELECT p.lexeme, p.memory_id FROM memory_posting p JOIN due USING (lexeme) \
             WHERE p.organization_id = $1 AND NOT p.packed FOR UPDATE OF p SKIP LOCKED), \
         marked AS (\
             UPDATE memory_posting p SET packed = true FROM claimed c \
             WHERE p.organization_id = $1 AND p.memory_id = c.memory_id AND p.lexeme = c.lexeme \
             RETURNING p.lexeme, p.memory_id, p.tf, p.doc_length), \
         cleared AS (\
             DELETE FROM memory_posting_gone g USING due WHERE g.organization_id = $1 AND g.lexeme = due.lexeme), \
         current AS (\
             SELECT p.lexeme, p.memory_id, p.tf, p.doc_length FROM memory_posting p JOIN due USING (lexeme) \
             WHERE p.organization_id = $1 AND p.packed \
             UNION ALL SELECT lexeme, memory_id, tf, doc_length FROM marked), \
         emptied AS (\
             DELETE FROM memory_posting_list l USING due WHERE l.organization_id = $1 AND l.lexeme = due.lexeme \
               AND NOT EXISTS (SELECT 1 FROM current c WHERE c.lexeme = due.lexeme) RETURNING l.lexeme), \
         written AS (\
             INSERT INTO memory_posting_list (organization_id, lexeme, postings) \
             SELECT $1, c.lexeme, string_agg(uuid_send(c.memory_id) || int4send(c.tf) || int4send(c.doc_length), \
                                             ''::bytea ORDER BY c.memory_id) \
             FROM current c GROUP BY c.lexeme \
             ON CONFLICT (organization_id, lexeme) DO UPDATE SET postings = excluded.postings RETURNING lexeme) \
         SELECT (SELECT count(*) FROM due)",
    )
    .bind(organization_id)
    .bind(max_postings)
    .bind(REPACK_SHARE)
    .fetch_one(&mut *tx)
    .await?;
    let packed: i64 = sqlx::Row::get(&packed, 0);
    let packed = packed as u64;
    tx.commit().await?;
    Ok(packed)
}

/// Deletes the keyword index's rows of those of `lexemes` no memory holds any more (a forgotten memory's own words):
/// their lists, what is recorded gone from them, and their statistics, whose shards sum to zero. A word other memories
/// hold keeps its list; the forgotten postings leave it at its next packing. The statistics rows are locked first, so
/// no writer changes one meanwhile (a writer adding the word in a shard without a row of it writes a new row, which
/// this neither sees nor deletes). Waits at most `wait` for other transactions; false when it gave up (the rows stay,
/// unused).
pub async fn drop_unheld(
    pool: &PgPool,
    organization_id: Uuid,
    lexemes: &[String],
    wait: std::time::Duration,
) -> sqlx::Result<bool> {
    if lexemes.is_empty() {
        return Ok(true);
    }
    let mut tx = super::begin_for_org(pool, organization_id).await?;
    sqlx::query(&format!("SET LOCAL lock_timeout = '{}ms'", wait.as_millis().max(1))).execute(&mut *tx).await?;
    let dropped = async {
        // As packing does: one rewriter of the organisation's lists at a time.
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext('memory_posting_list'), hashtext($1::text))")
            .bind(organization_id)
            .execute(&mut *tx)
            .await?;
        let unheld: Vec<String> = sqlx::query_scalar(
            "SELECT l FROM unnest($2::text[]) l WHERE NOT EXISTS (\
                 SELECT 1 FROM memory_posting p WHERE p.organization_id = $1 AND p.lexeme = l)",
        )
        .bind(organization_id)
        .bind(lexemes)
        .fetch_all(&mut *tx)
        .await?;
        for sql in [
            "DELETE FROM memory_posting_list WHERE organization_id = $1 AND lexeme = ANY($2)",
            "DELETE FROM memory_posting_gone WHERE organization_id = $1 AND lexeme = ANY($2)",
            "SELECT 1 FROM memory_term_stats WHERE organization_id = $1 AND lexeme = ANY($2) \
             ORDER BY lexeme, shard FOR UPDATE",
            "DELETE FROM memory_term_stats WHERE organization_id = $1 AND lexeme IN (\
                 SELECT lexeme FROM memory_term_stats WHERE organization_id = $1 AND lexeme = ANY($2) \
                 GROUP BY lexeme HAVING sum(doc_count) = 0)",
        ] {
            sqlx::query(sql).bind(organization_id).bind(&unheld).execute(&mut *tx).await?;
        }
        Ok::<_, sqlx::Error>(())
    }
    .await;
    match dropped {
        Ok(()) => {}
        // A lock not granted in time, or a deadlock with a writer: the unused rows stay.
        Err(sqlx::Error::Database(e)) if matches!(e.code().as_deref(), Some("55P03" | "40P01")) => return Ok(false),
        Err(e) => return Err(e),
    }
    tx.commit().await?;
    Ok(true)
}
