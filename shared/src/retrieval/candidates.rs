//! Stage 1: the vector and keyword branches, run concurrently inside the scope predicate and fused.
//! A branch that fails degrades the result instead of failing it.

use std::collections::HashMap;

use pgvector::Vector;
use sqlx::PgPool;
use uuid::Uuid;

use super::fusion;
use crate::{
    domain::Memory,
    store::{
        self, ScopeFilter, SearchFilters,
        candidates::{Bm25, CandidateExtras, CandidateRow, KeywordSearch},
    },
};

/// A memory in the Stage 1 candidate set.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub memory: Memory,
    pub cosine_sim: Option<f64>,
    pub keyword_score: Option<f64>,
    pub taxonomy_node_ids: Vec<Uuid>,
    pub mentions_profiled_entity: bool,
    pub vector_rank: Option<usize>,
    pub keyword_rank: Option<usize>,
    /// The keyword score relative to the best keyword match of this query (1 for the best), when matched.
    pub keyword_relative: Option<f64>,
    pub rrf: f64,
    /// Both branches' evidence in [0, 1] ([`fusion::relevance`]).
    pub relevance: f64,
}

/// Stage 1's output and what went wrong on the way.
pub struct CandidateSet {
    pub candidates: Vec<Candidate>,
    pub degraded_reasons: Vec<String>,
}

/// Settings of the two branches.
pub struct BranchSettings<'a> {
    /// Rows per branch.
    pub depth: usize,
    /// Candidates kept after fusion.
    pub limit: usize,
    pub text_search_config: &'a str,
    pub bm25: Bm25,
    /// Statement timeouts of the branches: a branch over its budget fails and the request goes on without it.
    pub vector_timeout_ms: u64,
    pub keyword_timeout_ms: u64,
    pub run_vector: bool,
    pub run_keyword: bool,
    pub extras: CandidateExtras,
}

/// Runs the branches and fuses them; the candidates come back best-fused first, ties by id.
pub async fn gather(
    pool: &PgPool,
    scope: &ScopeFilter,
    filters: &SearchFilters,
    text: &str,
    query: Option<&Vector>,
    settings: &BranchSettings<'_>,
) -> crate::Result<CandidateSet> {
    let vector = async {
        let (Some(q), true) = (query, settings.run_vector) else { return None };
        Some(
            async {
                let mut tx =
                    store::begin_vector_search(pool, scope.organization_id, settings.depth, settings.vector_timeout_ms)
                        .await?;
                let rows =
                    store::candidates::vector_branch(&mut tx, scope, filters, q, settings.depth, settings.extras)
                        .await?;
                tx.commit().await?;
                Ok::<_, sqlx::Error>(rows)
            }
            .await,
        )
    };
    let keyword = async {
        if !settings.run_keyword || text.trim().is_empty() {
            return None;
        }
        Some(
            async {
                let mut tx =
                    store::begin_keyword_search(pool, scope.organization_id, settings.keyword_timeout_ms).await?;
                let search = KeywordSearch {
                    text_search_config: settings.text_search_config,
                    text,
                    query,
                    limit: settings.depth,
                    extras: settings.extras,
                    bm25: settings.bm25,
                };
                let rows = store::candidates::keyword_branch(&mut tx, scope, filters, &search).await?;
                tx.commit().await?;
                Ok::<_, sqlx::Error>(rows)
            }
            .await,
        )
    };
    let (vector, keyword) = tokio::join!(vector, keyword);

    let mut degraded_reasons = Vec::new();
    let mut failed = 0;
    let mut ok_rows = |result: Option<Result<Vec<CandidateRow>, sqlx::Error>>, reason: &str| match result {
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

    Ok(CandidateSet { candidates: fuse(vector_rows, keyword_rows, settings.limit), degraded_reasons })
}

/// Merges the branch lists by memory id, scores each candidate (RRF and relevance) and keeps the best `limit` by
/// RRF score (ties by id).
pub fn fuse(vector_rows: Vec<CandidateRow>, keyword_rows: Vec<CandidateRow>, limit: usize) -> Vec<Candidate> {
    let mut by_id: HashMap<Uuid, Candidate> = HashMap::new();
    for (rank, row) in vector_rows.into_iter().enumerate() {
        by_id.insert(row.memory.id, candidate(row, Some(rank + 1), None));
    }
    for (rank, row) in keyword_rows.into_iter().enumerate() {
        match by_id.get_mut(&row.memory.id) {
            Some(existing) => {
                existing.keyword_rank = Some(rank + 1);
                existing.keyword_score = row.keyword_score;
            }
            None => {
                by_id.insert(row.memory.id, candidate(row, None, Some(rank + 1)));
            }
        }
    }
    let best_keyword =
        by_id.values().filter(|c| c.keyword_rank.is_some()).filter_map(|c| c.keyword_score).fold(0.0, f64::max);
    let embedded = by_id.values().any(|c| c.cosine_sim.is_some());
    let mut candidates: Vec<Candidate> = by_id
        .into_values()
        .map(|mut c| {
            c.rrf = fusion::rrf(&[c.vector_rank, c.keyword_rank]);
            c.keyword_relative =
                c.keyword_rank.and(c.keyword_score).filter(|_| best_keyword > 0.0).map(|k| k / best_keyword);
            let evidence = fusion::Evidence { embedded, keyword_matched: best_keyword > 0.0 };
            c.relevance = fusion::relevance(evidence, c.cosine_sim, c.keyword_relative);
            c
        })
        .collect();
    candidates.sort_by(|a, b| b.rrf.total_cmp(&a.rrf).then(a.memory.id.cmp(&b.memory.id)));
    candidates.truncate(limit);
    candidates
}

fn candidate(row: CandidateRow, vector_rank: Option<usize>, keyword_rank: Option<usize>) -> Candidate {
    Candidate {
        memory: row.memory,
        cosine_sim: row.cosine_sim,
        keyword_score: row.keyword_score,
        taxonomy_node_ids: row.taxonomy_node_ids,
        mentions_profiled_entity: row.mentions_profiled_entity,
        vector_rank,
        keyword_rank,
        keyword_relative: None,
        rrf: 0.0,
        relevance: 0.0,
    }
}
