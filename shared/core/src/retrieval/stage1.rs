//! Stage 1: the vector and keyword branches, run concurrently inside the scope predicate and fused.
//! A branch that fails degrades the result instead of failing it.

use std::time::Instant;

use pgvector::Vector;
use sqlx::PgPool;

use super::found::FoundSet;
use super::fusion;
use super::keyword::Bm25;
use crate::store::{
    self, ReadFilter, SearchFilters,
    branches::{BranchExtras, BranchRow, VectorScan},
    keyword::KeywordSearch,
};

/// Settings of the two branches.
#[derive(Debug)]
pub struct BranchSettings<'a> {
    /// Rows each branch contributes.
    pub rows_per_branch: usize,
    /// Candidates kept after fusion.
    pub kept_after_fusion: usize,
    pub text_search_config: &'a str,
    pub bm25: Bm25,
    /// Statement timeouts of the branches: a branch over its budget fails and the request goes on without it.
    pub vector_timeout_ms: u64,
    pub keyword_timeout_ms: u64,
    pub run_vector: bool,
    pub run_keyword: bool,
    /// Score the keyword branch row by row in one statement (a small organisation) instead of from the packed lists.
    pub keyword_row_wise: bool,
    /// How the vector branch reads the organisation (exactly when it had no ANN partition ready).
    pub vector_scan: VectorScan,
    pub extras: BranchExtras,
}

/// Runs the branches and fuses them; the candidates come back best-fused first, ties by id.
pub async fn gather(
    pool: &PgPool,
    scope: &ReadFilter,
    filters: &SearchFilters,
    text: &str,
    query: Option<&Vector>,
    settings: &BranchSettings<'_>,
) -> crate::Result<FoundSet> {
    let vector = timed(async {
        let (Some(q), true) = (query, settings.run_vector) else { return None };
        Some(vector_branch(pool, scope, filters, q, settings).await)
    });
    let keyword = timed(async {
        if !settings.run_keyword || text.trim().is_empty() {
            return None;
        }
        Some(keyword_branch(pool, scope, filters, text, query, settings).await)
    });
    let ((vector, vector_ms), (keyword, keyword_ms)) = tokio::join!(vector, keyword);

    let mut degraded_reasons = Vec::new();
    let mut failed = 0;
    let mut ok_rows = |result: Option<Result<Vec<BranchRow>, sqlx::Error>>, reason: &str| match result {
        None => Vec::new(),
        Some(Ok(rows)) => rows,
        Some(Err(e)) => {
            tracing::warn!(error = %e, branch = reason, "search branch failed; continuing without it");
            degraded_reasons.push(reason.to_string());
            failed += 1;
            Vec::new()
        }
    };
    let ran = usize::from(vector.is_some()) + usize::from(keyword.is_some());
    let vector_rows = ok_rows(vector, "vector_search_failed");
    let keyword_rows = ok_rows(keyword, "keyword_search_failed");
    // No branch answered: every branch that ran failed, and there was something to search with (a failure, or a
    // vector branch left out for want of an embedding). An empty answer would hide an outage.
    let vector_missing = settings.run_vector && query.is_none();
    if failed == ran && (failed > 0 || vector_missing) {
        return Err(crate::Error::Unavailable(format!("no search branch answered ({})", degraded_reasons.join(", "))));
    }

    let fusion_started = Instant::now();
    let fused = fusion::fuse(vector_rows, keyword_rows, text, settings.rows_per_branch, settings.kept_after_fusion);
    Ok(FoundSet {
        candidates: fused.candidates,
        blend: fused.blend,
        degraded_reasons,
        vector_ms,
        keyword_ms,
        fusion_ms: elapsed_ms(fusion_started),
        kept: false,
    })
}

/// `work`'s output and how long it took, in milliseconds.
async fn timed<T>(work: impl Future<Output = T>) -> (T, f64) {
    let started = Instant::now();
    let output = work.await;
    (output, elapsed_ms(started))
}

fn elapsed_ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

/// The vector branch in its own organisation-bound transaction, under the branch's time budget. An organisation
/// read through its partition that finds nothing there and no longer has it ready (it moved out since its request
/// began) is read exactly, in a transaction and under a budget of its own.
pub async fn vector_branch(
    pool: &PgPool,
    scope: &ReadFilter,
    filters: &SearchFilters,
    query: &Vector,
    settings: &BranchSettings<'_>,
) -> sqlx::Result<Vec<BranchRow>> {
    let read = async |scan: VectorScan| {
        let (org, rows, budget_ms) = (scope.organization_id(), settings.rows_per_branch, settings.vector_timeout_ms);
        let mut tx = store::begin_vector_search(pool, org, rows, budget_ms, scan, filters).await?;
        let found = store::branches::vector_branch(&mut tx, scope, filters, query, rows, settings.extras, scan).await?;
        let moved_out =
            scan == VectorScan::Partition && found.is_empty() && !store::ann::partition_ready(&mut tx, org).await?;
        store::end_read(tx);
        Ok::<_, sqlx::Error>((found, moved_out))
    };
    match read(settings.vector_scan).await? {
        (_, true) => Ok(read(VectorScan::Exact).await?.0),
        (found, false) => Ok(found),
    }
}

/// The keyword branch in its own organisation-bound transaction, under the branch's time budget (its statements'
/// timeout, and a deadline over the whole branch, which runs several statements and scores in process).
pub async fn keyword_branch(
    pool: &PgPool,
    scope: &ReadFilter,
    filters: &SearchFilters,
    text: &str,
    query: Option<&Vector>,
    settings: &BranchSettings<'_>,
) -> sqlx::Result<Vec<BranchRow>> {
    let budget = std::time::Duration::from_millis(settings.keyword_timeout_ms);
    let branch = async {
        let mut tx = store::begin_keyword_search(pool, scope.organization_id(), settings.keyword_timeout_ms).await?;
        let search = settings.keyword_search(text, query);
        let bm25 = settings.bm25;
        let found = if settings.keyword_row_wise {
            store::keyword::keyword_branch_exact(&mut tx, scope, filters, &search, (bm25.k1, bm25.b)).await?
        } else {
            super::keyword::keyword_branch(&mut tx, scope, filters, &search, bm25).await?
        };
        store::end_read(tx);
        Ok(found)
    };
    tokio::time::timeout(budget, branch).await.unwrap_or_else(|_| {
        let over = std::io::Error::new(std::io::ErrorKind::TimedOut, "the keyword branch ran over its budget");
        Err(sqlx::Error::Io(over))
    })
}

impl<'a> BranchSettings<'a> {
    /// What the keyword branch searches for with these settings.
    pub fn keyword_search(&self, text: &'a str, query: Option<&'a Vector>) -> KeywordSearch<'a> {
        KeywordSearch {
            text_search_config: self.text_search_config,
            text,
            query,
            rows: self.rows_per_branch,
            extras: self.extras,
            posting_budget: crate::store::keyword::POSTING_BUDGET,
        }
    }
}
