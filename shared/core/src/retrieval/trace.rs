//! `explain`: why each memory ranked where it did ([`Explanation`]) and what the request found and left out
//! ([`Trace`]). Built only when asked; a count of what a rule left out never names a memory.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{
    found::{Blend, Found},
    learned::{Features, NAMES, Scorer},
    recency::recency,
    time_anchor::{TimeAnchor, of_the_time},
};

/// One branch's evidence for a memory.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BranchEvidence {
    /// Its place in the branch's list (1 for the first).
    pub rank: usize,
    /// The branch's score: the cosine, or the keyword score BM25 / (1 + BM25).
    pub score: f64,
    /// The score within the range of the branch's rows, in [0, 1].
    pub in_range: f64,
}

/// Why a result ranked where it did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Explanation {
    /// The vector branch's evidence (absent when it did not find the memory).
    pub vector: Option<BranchEvidence>,
    /// The keyword branch's evidence (absent when it did not match).
    pub keyword: Option<BranchEvidence>,
    /// Its place among Stage 1's candidates by Reciprocal Rank Fusion.
    pub fused_rank: usize,
    /// Both branches' evidence as the answer's `trace.blend` combined it, after the pull of a code chunk's name the
    /// question says: what the relevance formula starts from.
    pub relevance: f64,
    /// The share of a code chunk's name the question says.
    pub name_said: f64,
    /// Recency (1 new, 0.5 after a half-life) and confidence, which move the relevance formula's score by at most a
    /// tenth together.
    pub recency: f64,
    pub confidence: f64,
    /// Whether it is of a date the question names; absent when it names none (the relevance formula takes 30% off
    /// a memory that is not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub of_the_named_time: Option<bool>,
    /// The learned ranking's features, by name, in [0, 1].
    pub features: BTreeMap<String, f64>,
    /// Each feature's share of the learned model's logit (weight × value); its score is σ(bias + their sum).
    /// Absent when another formula ranked the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contributions: Option<BTreeMap<String, f64>>,
}

impl Explanation {
    /// `c`'s explanation for a query naming `anchors`, recency measured at `recency_at` (`scorer`: the learned
    /// model, when it ranked).
    pub fn of(c: &Found, anchors: &[TimeAnchor], recency_at: DateTime<Utc>, scorer: Option<&Scorer>) -> Self {
        let features = Features::of(c, anchors, recency_at);
        Self {
            vector: evidence(c.vector_rank, c.cosine_sim, c.signals.cosine_in_range),
            keyword: evidence(c.keyword_rank, c.keyword_score, c.signals.keyword_in_range),
            fused_rank: c.fused_rank,
            relevance: c.relevance,
            name_said: c.signals.name_said,
            recency: recency(c.memory.created_at, recency_at, c.memory.memory_type),
            confidence: c.memory.confidence,
            of_the_named_time: (!anchors.is_empty()).then(|| of_the_time(anchors, c.memory.created_at)),
            features: named(features.0),
            contributions: scorer.map(|s| named(s.contributions(&features))),
        }
    }
}

fn named(values: [f64; super::learned::COUNT]) -> BTreeMap<String, f64> {
    NAMES.iter().map(|n| n.to_string()).zip(values).collect()
}

/// Why a search hit ranked where it did: each branch's evidence and its place among the fused candidates (its
/// `score` is their RRF sum or weighted blend, as the request's `fusion` says).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct HitExplanation {
    pub vector: Option<BranchEvidence>,
    pub keyword: Option<BranchEvidence>,
    pub fused_rank: usize,
}

impl HitExplanation {
    /// A direct hit's explanation, from what Stage 1 found of it.
    pub fn of(c: &Found) -> Self {
        Self {
            vector: evidence(c.vector_rank, c.cosine_sim, c.signals.cosine_in_range),
            keyword: evidence(c.keyword_rank, c.keyword_score, c.signals.keyword_in_range),
            fused_rank: c.fused_rank,
        }
    }
}

fn evidence(rank: Option<usize>, score: Option<f64>, in_range: f64) -> Option<BranchEvidence> {
    rank.zip(score).map(|(rank, score)| BranchEvidence { rank, score, in_range })
}

/// What a request found and left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Trace {
    /// How the branches were blended.
    pub blend: Blend,
    pub candidates: Candidates,
    pub excluded: Excluded,
    /// How long each stage took, in milliseconds.
    pub timings_ms: StageTimings,
}

/// Stage 1's rows per branch (inside the caller's scope, sensitivity and expiry, which are never counted), and
/// the candidates they fused into.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Candidates {
    /// Rows of the vector branch among the candidates.
    pub vector: usize,
    /// Rows of the keyword branch among the candidates.
    pub keyword: usize,
    /// Candidates after fusion.
    pub fused: usize,
}

/// Candidates left out, by the rule that left them out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Excluded {
    /// Entity profiles: attached to the memories that mention their entity, not ranked.
    pub entity_profiles: usize,
    /// Passive mode: injected in the session's last turns.
    pub cooldown: usize,
    /// Passive mode: below the relevance floor.
    pub passive_floor: usize,
    /// Outside the taxonomy subtrees the question was classified into.
    pub taxonomy: usize,
    /// Nearly repeating, or overlapping the span of, a memory ranked above.
    pub near_duplicates: usize,
    /// Beyond `max_results`.
    pub beyond_max_results: usize,
    /// Over the text budget (`max_chars`, `max_tokens`).
    pub budget: usize,
}

/// How long a query's stages took, in milliseconds, and how many candidates Stage 1 found (the request's log line,
/// and what the benchmark reports).
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StageTimings {
    /// The query's embedding and the caller's context (scopes, taxonomy), fetched together.
    pub context_ms: f64,
    /// Stage 1 from start to end: both branches (run concurrently) and their fusion.
    pub branches_ms: f64,
    pub vector_ms: f64,
    pub keyword_ms: f64,
    pub fusion_ms: f64,
    /// Stage 2 (and the cooldown).
    pub classify_ms: f64,
    /// Stages 3 and 4.
    pub rank_ms: f64,
    pub candidates: usize,
    /// Stage 1's candidates were those kept under the organisation's unchanged generation; no branch ran.
    pub stage1_kept: bool,
    /// Where the request read: the writer, or the read replica.
    pub read_from: crate::replica::ReadFrom,
}
