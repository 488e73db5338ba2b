//! The retrieval pipeline's tunables, their defaults (what the service runs) and their ranges.

use super::keyword::Bm25;
use super::ranking::{RankingFormula, RankingWeights};
use crate::config::{ConfigError, in_range, parsed_or};

/// Passive injection's default relevance floor (cosine to the conversation): on MADial-Bench's memories, 92% of
/// SciFact's questions inject nothing and MADial-Bench's own passive Recall@10 does not drop (docs/benchmarks.md).
pub const PASSIVE_FLOOR: f64 = 0.2;

/// Tunables of the retrieval pipeline. `Default` is what the service runs; [`RetrievalConfig::spec`] ranks by the
/// spec's formula instead.
#[derive(Debug, Clone)]
pub struct RetrievalConfig {
    /// The Stage 4 formula (`MEMORY_RANKING`: `relevance`, `spec` or `learned`).
    pub ranking: RankingFormula,
    /// Weights of the spec's composite (used by [`RankingFormula::Spec`] only).
    pub weights: RankingWeights,
    /// Rows each Stage 1 branch contributes (vector neighbours; keyword matches), or `max_results` if larger. 50
    /// scored as well as 100 on SciFact and REALTALK and cut the 1M benchmark's end-to-end p95 by 10-20%
    /// (docs/decisions.md).
    pub rows_per_branch: usize,
    /// Stage 1 candidates kept after fusion (or `max_results` if larger).
    pub kept_after_fusion: usize,
    /// Largest `max_results` a caller may ask for.
    pub max_results_cap: usize,
    /// Below this top score the taxonomy filter is dropped and the full candidate set re-ranked.
    pub min_top_score: f64,
    /// Sessions whose cooldown state is kept per warm instance (least recently used are dropped).
    pub cooldown_sessions: usize,
    /// Bytes of query embeddings kept in process (per organisation and text).
    pub query_cache_bytes: usize,
    /// Bytes of Stage 1 candidate sets kept in process under their organisation's generation (0: none kept).
    pub found_cache_bytes: usize,
    /// Time budgets: the query embedding, and each search branch's statement timeout. Over budget, a request goes
    /// on degraded (keyword only, or without the branch) rather than slower.
    pub embedding_budget_ms: u64,
    pub vector_budget_ms: u64,
    pub keyword_budget_ms: u64,
    /// An organisation with fewer memories than this has its keyword branch scored row by row in one statement
    /// (`store::keyword::keyword_branch_exact`, the same ranking) rather than from the packed lists in two: fewer
    /// round trips where the postings are few (docs/decisions.md). 0: always the packed lists.
    pub keyword_row_wise_below: i64,
    /// Statement and lock timeout of a request's other reads: by id, chains, metadata search, graph expansion,
    /// entity profiles (`MEMORY_READ_BUDGET_MS`).
    pub read_budget_ms: u64,
    /// The keyword branch's BM25 parameters (`MEMORY_BM25_K1`, `MEMORY_BM25_B`).
    pub bm25: Bm25,
    /// Passive injection's relevance floor (`MEMORY_PASSIVE_FLOOR`): a memory whose cosine to the conversation is
    /// below it is not injected, so a turn about nothing the organisation holds injects nothing. Calibrated with
    /// `memory-eval --passive-floors` ([`PASSIVE_FLOOR`]); 0 turns it off.
    pub passive_floor: f64,
}

impl Default for RetrievalConfig {
    fn default() -> Self {
        Self {
            ranking: RankingFormula::Relevance,
            weights: RankingWeights::default(),
            rows_per_branch: 50,
            kept_after_fusion: 500,
            max_results_cap: 100,
            min_top_score: 0.35,
            cooldown_sessions: 10_000,
            query_cache_bytes: 8 << 20,
            found_cache_bytes: 64 << 20,
            embedding_budget_ms: 2_000,
            vector_budget_ms: 2_000,
            keyword_budget_ms: 2_000,
            keyword_row_wise_below: 2_000,
            read_budget_ms: 2_000,
            bm25: Bm25::default(),
            passive_floor: PASSIVE_FLOOR,
        }
    }
}

impl RetrievalConfig {
    /// The service's settings with Stage 4 ranking by the spec's composite (cosine × 0.5 + recency × 0.3 +
    /// confidence × 0.2), as the spec's own ranking tests assume.
    pub fn spec() -> Self {
        Self { ranking: RankingFormula::Spec, ..Self::default() }
    }

    /// The defaults, each overridden by its `MEMORY_*` variable.
    pub fn from_env() -> Result<Self, ConfigError> {
        let d = Self::default();
        Ok(Self {
            ranking: parsed_or("MEMORY_RANKING", d.ranking)?,
            weights: RankingWeights {
                cosine: parsed_or("MEMORY_RANK_WEIGHT_COSINE", d.weights.cosine)?,
                recency: parsed_or("MEMORY_RANK_WEIGHT_RECENCY", d.weights.recency)?,
                confidence: parsed_or("MEMORY_RANK_WEIGHT_CONFIDENCE", d.weights.confidence)?,
            },
            rows_per_branch: parsed_or("MEMORY_BRANCH_DEPTH", d.rows_per_branch)?,
            kept_after_fusion: parsed_or("MEMORY_CANDIDATE_LIMIT", d.kept_after_fusion)?,
            max_results_cap: parsed_or("MEMORY_MAX_RESULTS_CAP", d.max_results_cap)?,
            min_top_score: parsed_or("MEMORY_MIN_TOP_SCORE", d.min_top_score)?,
            cooldown_sessions: parsed_or("MEMORY_COOLDOWN_SESSIONS", d.cooldown_sessions)?,
            query_cache_bytes: parsed_or("MEMORY_QUERY_CACHE_BYTES", d.query_cache_bytes)?,
            found_cache_bytes: parsed_or("MEMORY_FOUND_CACHE_BYTES", d.found_cache_bytes)?,
            embedding_budget_ms: parsed_or("MEMORY_EMBEDDING_BUDGET_MS", d.embedding_budget_ms)?,
            vector_budget_ms: parsed_or("MEMORY_VECTOR_BUDGET_MS", d.vector_budget_ms)?,
            keyword_budget_ms: parsed_or("MEMORY_KEYWORD_BUDGET_MS", d.keyword_budget_ms)?,
            keyword_row_wise_below: parsed_or("MEMORY_KEYWORD_ROW_WISE_BELOW", d.keyword_row_wise_below)?,
            read_budget_ms: parsed_or("MEMORY_READ_BUDGET_MS", d.read_budget_ms)?,
            bm25: Bm25 {
                k1: in_range("MEMORY_BM25_K1", d.bm25.k1, 0.0..=10.0)?,
                b: in_range("MEMORY_BM25_B", d.bm25.b, 0.0..=1.0)?,
            },
            passive_floor: in_range("MEMORY_PASSIVE_FLOOR", d.passive_floor, 0.0..=1.0)?,
        })
    }
}
