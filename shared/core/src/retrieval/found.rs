//! What Stage 1 found: a memory with its branches' evidence, and the set fusion made of them.

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
    pub signals: super::learned::Signals,
}

/// Stage 1's output and what went wrong on the way.
pub struct FoundSet {
    pub candidates: Vec<Found>,
    /// How the branches were blended.
    pub blend: super::fusion::Blend,
    pub degraded_reasons: Vec<String>,
    /// How long each branch took (they run concurrently) and their fusion, in milliseconds.
    pub vector_ms: f64,
    pub keyword_ms: f64,
    pub fusion_ms: f64,
}
