//! What Stage 1 found: a memory with its branches' evidence, and the set fusion made of them.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::domain::Memory;

/// A memory Stage 1 found, with each branch's evidence.
#[derive(Debug, Clone)]
pub struct Found {
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
    /// Its place among the candidates by `rrf` (1 for the first).
    pub fused_rank: usize,
    /// Both branches' evidence in [0, 1] ([`super::fusion::relevance`]).
    pub relevance: f64,
    /// What else Stage 1 says about it, for the learned ranking.
    pub signals: Signals,
}

/// Stage 1's output and what went wrong on the way.
pub struct FoundSet {
    pub candidates: Vec<Found>,
    /// How the branches were blended.
    pub blend: Blend,
    pub degraded_reasons: Vec<String>,
    /// How long each branch took (they run concurrently) and their fusion, in milliseconds.
    pub vector_ms: f64,
    pub keyword_ms: f64,
    pub fusion_ms: f64,
    /// Taken from the [`found_cache`](super::found_cache), not the branches.
    pub kept: bool,
}

impl FoundSet {
    /// A set the cache kept: no branch ran.
    pub fn kept(candidates: Vec<Found>, blend: Blend) -> Self {
        let (vector_ms, keyword_ms, fusion_ms) = (0.0, 0.0, 0.0);
        Self { candidates, blend, degraded_reasons: Vec::new(), vector_ms, keyword_ms, fusion_ms, kept: true }
    }
}

/// What Stage 1 says about a candidate beside its cosine and keyword score: how it stands among each branch's rows,
/// which branch stands out for the query, and whether the query is answered from code; set by
/// [`super::fusion::fuse`] for the learned ranking ([`super::learned`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Signals {
    /// The cosine within the vector branch's rows' range, in [0, 1] (0 when not a neighbour).
    pub cosine_in_range: f64,
    /// The BM25 score within the keyword branch's rows' range, in [0, 1] (0 when not matched).
    pub keyword_in_range: f64,
    /// How far the vector branch's best stands out, of both branches' together, in [0, 1].
    pub vector_standing: f64,
    /// The cosine of the query's nearest neighbour.
    pub nearest_cosine: f64,
    /// More than half the query's candidates are source code.
    pub answered_from_code: bool,
    /// The share of the chunk's name the query says (0 for prose).
    pub name_said: f64,
}

/// How a query's candidates were blended from the two branches (what `explain` reports).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Blend {
    /// [`super::fusion::relevance`]: the keyword score relative to the query's best, the cosine weighing `vector_weight`.
    KeywordLed { vector_weight: f64 },
    /// [`super::fusion::StandingBlend::of`]: both branches scaled to their rows, weighed by how far each one's best stands out.
    Standing { vector_weight: f64 },
    /// [`super::fusion::StandingBlend::for_code`]: a question answered from source code.
    Code { vector_weight: f64 },
    /// Only the vector branch had evidence (no keyword matched).
    VectorOnly,
    /// Only the keyword branch had evidence (the query was not embedded).
    KeywordOnly,
}
