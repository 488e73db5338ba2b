//! Fusing the branches: [`fuse`] merges their rows into Stage 1's candidates, scored by Reciprocal Rank Fusion
//! (k = 60) and by the relevance Stage 4 ranks by; a weighted blend of normalised scores for strategy search.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

pub use super::found::Blend;
use super::{
    found::{Found, Signals},
    named_symbol::{self, QueryWords},
};
use crate::{domain::Memory, store::branches::BranchRow};

/// RRF's smoothing constant.
pub const RRF_K: f64 = 60.0;

/// How the vector and keyword lists are combined.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Fusion {
    /// Σ 1 / (k + rank) over the lists a memory appears in.
    #[default]
    Rrf,
    /// vector_weight × cosine + (1 − vector_weight) × keyword score, both in [0, 1].
    Weighted,
}

/// RRF contribution of 1-based ranks (absent ranks contribute nothing).
pub fn rrf(ranks: &[Option<usize>]) -> f64 {
    ranks.iter().flatten().map(|rank| 1.0 / (RRF_K + *rank as f64)).sum()
}

/// Share of the cosine in [`relevance`] when the query also matched keywords. Chosen on SciFact and REALTALK both
/// (docs/decisions.md): between 0.1 and 0.2 each set is within 0.005 nDCG@10 of its best, and both beat their
/// best single branch. The cosine spread between candidates is narrow, so a small weight still reorders near ties.
pub const RELEVANCE_VECTOR_WEIGHT: f64 = 0.15;

/// What the branches found for a query.
#[derive(Debug, Clone, Copy)]
pub struct Evidence {
    /// The query was embedded (candidates carry a cosine).
    pub embedded: bool,
    /// Some candidate matched the query's keywords.
    pub keyword_matched: bool,
}

/// A candidate's relevance in [0, 1] from both branches: a convex blend of its cosine and its keyword score
/// (BM25 / (1 + BM25)) relative to the query's best keyword match, or the one branch that had evidence for this query.
pub fn relevance(evidence: Evidence, cosine: Option<f64>, keyword_relative: Option<f64>) -> f64 {
    let cosine = cosine.unwrap_or(0.0).clamp(0.0, 1.0);
    let keyword = keyword_relative.unwrap_or(0.0);
    match (evidence.embedded, evidence.keyword_matched) {
        (true, true) => weighted(Some(cosine), Some(keyword), RELEVANCE_VECTOR_WEIGHT),
        (true, false) => cosine,
        (false, _) => keyword,
    }
}

/// How many times as far as the keyword branch's best match stands above its rows the vector branch's nearest
/// neighbour must stand above its own for the query to be led by the vector branch ([`StandingBlend`]). Across the
/// four evaluation shapes at 2: MADial-Bench nDCG@10 +0.018, code +0.002 / +0.005, SciFact the same, REALTALK
/// -0.0003; at 1 or 1.5 more on the first three and REALTALK -0.021 / -0.007 (docs/experiments.md).
pub const VECTOR_LEADS: f64 = 2.0;

/// A nearest neighbour with a cosine below this is distant: nothing stored says what the query says in words like
/// its own (MiniLM's cosines), so its keyword matches are on a few shared words and do not lead ([`StandingBlend`]).
/// Across the four evaluation shapes at 0.58: MADial-Bench nDCG@10 +0.032, jinja2 +0.089, chrono +0.016, SciFact
/// -0.0001, REALTALK -0.001; the highest threshold costing SciFact and REALTALK at most 0.0015 each (at 0.6 they
/// lose 0.004 and 0.003, at 0.62 0.006 each; docs/experiments.md).
pub const DISTANT_NEIGHBOUR: f64 = 0.58;

/// Rows a branch needs before how far its best stands out is measured: one to three keyword matches are evidence
/// by their rarity, not a distribution. MADial-Bench nDCG@10 0.5326 at 4 (0.5480 at 2, 0.5149 at 10; at 2 three
/// matches of one rare word no longer lead).
pub const STANDING_ROWS: usize = 4;

/// The cosine's share in the relevance of a question answered from source code ([`answered_from_code`]): keyword
/// matches on code are on identifiers and comments a prose question shares loosely (keyword branch nDCG@10 0.13 on
/// chrono and 0.26 on jinja2, the vector branch 0.20 and 0.60), and the lexical evidence that tells is the chunk's
/// name ([`super::named_symbol`]). With both, nDCG@10 chrono 0.2648 and jinja2 0.6155 (docs/experiments.md).
pub const CODE_VECTOR_WEIGHT: f64 = 0.7;

/// Whether a question is answered from source code: more than half its candidates are chunks of a programming
/// language.
pub fn answered_from_code<'a>(candidates: impl ExactSizeIterator<Item = &'a Memory>) -> bool {
    let all = candidates.len();
    2 * candidates.filter(|m| m.is_source_code()).count() > all
}

/// The range of one branch's scores over its rows, and how far its best stands above them (the z-score of the
/// best; 0 when all are equal).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub min: f64,
    pub max: f64,
    pub standing: f64,
}

impl Spread {
    pub fn of(scores: &[f64]) -> Option<Self> {
        let n = scores.len() as f64;
        let min = scores.iter().copied().reduce(f64::min)?;
        let max = scores.iter().copied().reduce(f64::max)?;
        let mean = scores.iter().sum::<f64>() / n;
        let sd = (scores.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
        Some(Self { min, max, standing: if sd > 0.0 { (max - mean) / sd } else { 0.0 } })
    }

    /// A score scaled to the range, in [0, 1].
    pub fn scaled(&self, score: f64) -> f64 {
        if self.max > self.min { ((score - self.min) / (self.max - self.min)).clamp(0.0, 1.0) } else { 1.0 }
    }
}

/// The relevance of a query the keyword-led [`relevance`] gets wrong: its nearest neighbours stand out while its
/// keyword matches do not (a paraphrased fact), or its nearest neighbour is distant (a question in other words than
/// the memory's), or it is answered from source code. Each branch's scores are scaled to its rows' range and
/// blended by how far each branch's best stands out, or for code with the cosine's share fixed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StandingBlend {
    cosine: Spread,
    /// None when no keyword matched.
    bm25: Option<Spread>,
    /// The cosine's share: how far the vector branch's best stands out, of both branches' together (for code,
    /// [`CODE_VECTOR_WEIGHT`]).
    vector_weight: f64,
}

/// The BM25 score a keyword score (BM25 / (1 + BM25)) was made from.
fn bm25_of(keyword_score: f64) -> f64 {
    keyword_score / (1.0 - keyword_score)
}

impl StandingBlend {
    /// From the vector branch's cosines and the keyword branch's BM25 scores; `None` (the keyword-led blend) unless
    /// each branch has [`STANDING_ROWS`] rows to measure its best against and either the vector branch's best
    /// stands out at least [`VECTOR_LEADS`] times as far or it is closer than [`DISTANT_NEIGHBOUR`].
    pub fn of(cosines: &[f64], bm25: &[f64]) -> Option<Self> {
        if cosines.len() < STANDING_ROWS || bm25.len() < STANDING_ROWS {
            return None;
        }
        let (cosine, bm25) = (Spread::of(cosines)?, Spread::of(bm25)?);
        let vector_leads = cosine.standing > VECTOR_LEADS * bm25.standing;
        let distant = cosine.max < DISTANT_NEIGHBOUR;
        let both = cosine.standing + bm25.standing;
        let vector_weight = if both > 0.0 { cosine.standing / both } else { 0.5 };
        (vector_leads || distant).then_some(Self { cosine, bm25: Some(bm25), vector_weight })
    }

    /// The blend of a question answered from source code: the cosine's share fixed at [`CODE_VECTOR_WEIGHT`].
    /// `None` (the keyword-led blend) unless the vector branch has [`STANDING_ROWS`] rows to scale.
    pub fn for_code(cosines: &[f64], bm25: &[f64]) -> Option<Self> {
        if cosines.len() < STANDING_ROWS {
            return None;
        }
        Some(Self { cosine: Spread::of(cosines)?, bm25: Spread::of(bm25), vector_weight: CODE_VECTOR_WEIGHT })
    }

    /// A candidate's relevance in [0, 1] from its cosine and its keyword score (BM25 / (1 + BM25)), if matched.
    pub fn relevance(&self, cosine: Option<f64>, keyword_score: Option<f64>) -> f64 {
        let cosine = cosine.map(|c| self.cosine.scaled(c));
        let keyword = keyword_score.zip(self.bm25).map(|(s, spread)| spread.scaled(bm25_of(s)));
        weighted(cosine, keyword, self.vector_weight)
    }
}

/// Stage 1's candidates, best fused first, and how they were blended.
#[derive(Debug, Clone)]
pub struct Fused {
    /// Best fused first, ties by id.
    pub candidates: Vec<Found>,
    /// How their relevance was blended.
    pub blend: Blend,
}

/// Weighted linear blend of a cosine similarity and a keyword score, each already in [0, 1].
pub fn weighted(cosine: Option<f64>, keyword: Option<f64>, vector_weight: f64) -> f64 {
    let w = vector_weight.clamp(0.0, 1.0);
    w * cosine.unwrap_or(0.0).max(0.0) + (1.0 - w) * keyword.unwrap_or(0.0)
}

/// Merges the branch lists by memory id, scores each candidate (RRF and relevance) and keeps the best `kept` by
/// RRF score (ties by id). In a question `text` answered from code, a chunk whose name the question says is pulled
/// towards full relevance ([`QueryWords::pulled`]). `depth` is the rows each branch was asked for: a keyword list
/// that long may have left out memories that match as well as its last row, so in the keyword-led blend a candidate
/// it does not hold counts that row's keyword score rather than none: across the evaluation sets nDCG@10 the same or
/// up to 0.001 higher, Recall@50 the same or 0.013-0.089 higher (docs/experiments.md).
pub fn fuse(vector_rows: Vec<BranchRow>, keyword_rows: Vec<BranchRow>, text: &str, depth: usize, kept: usize) -> Fused {
    let keyword_list_full = keyword_rows.len() >= depth;
    let mut by_id: HashMap<Uuid, Found> = HashMap::new();
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
    let keyword_scores: Vec<f64> =
        by_id.values().filter(|c| c.keyword_rank.is_some()).filter_map(|c| c.keyword_score).collect();
    let best_keyword = keyword_scores.iter().copied().fold(0.0, f64::max);
    let embedded = by_id.values().any(|c| c.cosine_sim.is_some());
    let cosines: Vec<f64> = by_id.values().filter(|c| c.vector_rank.is_some()).filter_map(|c| c.cosine_sim).collect();
    let bm25: Vec<f64> = keyword_scores.iter().copied().map(bm25_of).collect();
    let from_code = answered_from_code(by_id.values().map(|c| &c.memory));
    let standing_blend =
        if from_code { StandingBlend::for_code(&cosines, &bm25) } else { StandingBlend::of(&cosines, &bm25) };
    let words = QueryWords::of(text);
    let relative = |keyword_score: f64| Some(keyword_score / best_keyword).filter(|_| best_keyword > 0.0);
    // The keyword-led blend's score for a candidate the keyword list does not hold: the list's last row's when the
    // list is full (it may have had no room for the candidate), none otherwise.
    let last_keyword = keyword_scores.iter().copied().reduce(f64::min).filter(|_| keyword_list_full);
    let unlisted = last_keyword.and_then(relative);
    let evidence = Evidence { embedded, keyword_matched: best_keyword > 0.0 };
    let (cosine_spread, bm25_spread) = (Spread::of(&cosines), Spread::of(&bm25));
    let vector_standing = match (cosine_spread, bm25_spread) {
        (Some(c), Some(k)) if c.standing + k.standing > 0.0 => c.standing / (c.standing + k.standing),
        (Some(_), None) => 1.0,
        (None, Some(_)) => 0.0,
        _ => 0.5,
    };
    let nearest_cosine = cosine_spread.map_or(0.0, |c| c.max);
    let mut candidates: Vec<Found> = by_id
        .into_values()
        .map(|mut c| {
            c.rrf = rrf(&[c.vector_rank, c.keyword_rank]);
            c.keyword_relative = c.keyword_rank.and(c.keyword_score).and_then(relative);
            c.relevance = match &standing_blend {
                Some(blend) => blend.relevance(c.cosine_sim, c.keyword_rank.and(c.keyword_score)),
                None => relevance(evidence, c.cosine_sim, c.keyword_relative.or(unlisted)),
            };
            let name_said = words.share_of_name(&c.memory).unwrap_or(0.0);
            if from_code {
                c.relevance = named_symbol::pulled(c.relevance, name_said);
            }
            let in_range =
                |spread: Option<Spread>, score: Option<f64>| spread.zip(score).map_or(0.0, |(s, v)| s.scaled(v));
            c.signals = Signals {
                cosine_in_range: in_range(cosine_spread, c.vector_rank.and(c.cosine_sim)),
                keyword_in_range: in_range(bm25_spread, c.keyword_rank.and(c.keyword_score).map(bm25_of)),
                vector_standing,
                nearest_cosine,
                answered_from_code: from_code,
                name_said,
            };
            c
        })
        .collect();
    candidates.sort_by(|a, b| b.rrf.total_cmp(&a.rrf).then(a.memory.id.cmp(&b.memory.id)));
    candidates.truncate(kept);
    for (rank, c) in candidates.iter_mut().enumerate() {
        c.fused_rank = rank + 1;
    }
    let blend = match (&standing_blend, evidence.embedded, evidence.keyword_matched) {
        (Some(b), ..) if from_code => Blend::Code { vector_weight: b.vector_weight },
        (Some(b), ..) => Blend::Standing { vector_weight: b.vector_weight },
        (None, true, true) => Blend::KeywordLed { vector_weight: RELEVANCE_VECTOR_WEIGHT },
        (None, true, false) => Blend::VectorOnly,
        (None, false, _) => Blend::KeywordOnly,
    };
    Fused { candidates, blend }
}

fn candidate(row: BranchRow, vector_rank: Option<usize>, keyword_rank: Option<usize>) -> Found {
    Found {
        memory: row.memory,
        cosine_sim: row.cosine_sim,
        keyword_score: row.keyword_score,
        taxonomy_node_ids: row.taxonomy_node_ids,
        mentions_profiled_entity: row.mentions_profiled_entity,
        vector_rank,
        keyword_rank,
        keyword_relative: None,
        rrf: 0.0,
        fused_rank: 0,
        relevance: 0.0,
        signals: Signals::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keyword score (BM25 / (1 + BM25)) a BM25 score makes.
    fn keyword(bm25: f64) -> Option<f64> {
        Some(bm25 / (1.0 + bm25))
    }

    #[test]
    fn rrf_rewards_agreement_between_lists() {
        let both = rrf(&[Some(3), Some(3)]);
        let one_top = rrf(&[Some(1), None]);
        assert!(both > one_top);
        assert!((rrf(&[Some(1), Some(2)]) - (1.0 / 61.0 + 1.0 / 62.0)).abs() < 1e-12);
    }

    #[test]
    fn relevance_blends_both_branches_or_uses_the_one_with_evidence() {
        let both = Evidence { embedded: true, keyword_matched: true };
        let best = relevance(both, Some(0.6), Some(1.0));
        assert!((best - (0.15 * 0.6 + 0.85)).abs() < 1e-12, "{best}");
        // A keyword match outranks a somewhat closer vector-only neighbour; cosine orders equal keyword evidence.
        assert!(relevance(both, Some(0.4), Some(0.5)) > relevance(both, Some(0.7), None));
        assert!(relevance(both, Some(0.5), Some(0.5)) > relevance(both, Some(0.4), Some(0.5)));
        // No keyword matched anywhere (a paraphrase): the cosine alone, so the taxonomy threshold keeps its meaning.
        assert_eq!(relevance(Evidence { embedded: true, keyword_matched: false }, Some(0.62), None), 0.62);
        // No embedding (the model is down): the keyword evidence alone.
        assert_eq!(relevance(Evidence { embedded: false, keyword_matched: true }, None, Some(0.7)), 0.7);
        for (c, k) in [(Some(1.0), Some(1.0)), (Some(-0.2), None), (None, None)] {
            assert!((0.0..=1.0).contains(&relevance(both, c, k)));
        }
    }

    #[test]
    fn a_query_whose_neighbours_stand_out_and_keyword_matches_do_not_is_led_by_the_vector_branch() {
        // The nearest neighbour far above the rest (50 rows); keyword matches on common words, evenly spread.
        let cosines: Vec<f64> = std::iter::once(0.82).chain((0..49).map(|i| 0.40 - 0.001 * i as f64)).collect();
        let flat_bm25: Vec<f64> = (0..50).map(|i| 2.1 - 0.02 * i as f64).collect();
        let led = StandingBlend::of(&cosines, &flat_bm25).expect("the vector branch leads");
        // The neighbour without a keyword match outranks the best keyword match far from the query.
        assert!(led.relevance(Some(0.82), None) > led.relevance(Some(0.39), keyword(2.1)));
        assert!((0.0..=1.0).contains(&led.relevance(Some(0.82), keyword(2.1))));
        // A keyword match standing out as much (a rare name) keeps the keyword-led blend.
        let peaked_bm25: Vec<f64> = std::iter::once(9.0).chain((0..49).map(|i| 2.0 - 0.01 * i as f64)).collect();
        assert_eq!(StandingBlend::of(&cosines, &peaked_bm25), None);
        // A handful of keyword matches (rare words): no lead.
        assert_eq!(StandingBlend::of(&cosines, &flat_bm25[..STANDING_ROWS - 1]), None);
    }

    #[test]
    fn a_query_whose_nearest_neighbour_is_distant_is_not_led_by_its_keyword_matches() {
        // The same standings as a keyword-led query, but nothing lies close to the query.
        let peaked_bm25: Vec<f64> = std::iter::once(9.0).chain((0..49).map(|i| 2.0 - 0.01 * i as f64)).collect();
        let near: Vec<f64> = std::iter::once(0.82).chain((0..49).map(|i| 0.70 - 0.001 * i as f64)).collect();
        assert_eq!(StandingBlend::of(&near, &peaked_bm25), None);
        let distant: Vec<f64> = near.iter().map(|c| c - 0.3).collect();
        let blend = StandingBlend::of(&distant, &peaked_bm25).expect("a distant neighbour does not let keywords lead");
        // Both branches count: the nearest neighbour without a keyword match against the best keyword match far
        // from the query, and a memory best in both above either.
        let (neighbour, matched) = (blend.relevance(Some(0.52), None), blend.relevance(Some(0.1), keyword(9.0)));
        assert!(neighbour > 0.0 && matched > 0.0);
        assert!(blend.relevance(Some(0.52), keyword(9.0)) > neighbour.max(matched));
        // Fewer keyword matches than a distribution: the keyword-led blend.
        assert_eq!(StandingBlend::of(&distant, &peaked_bm25[..STANDING_ROWS - 1]), None);
        // Neither branch's best stands out (equal rows in both): an even blend, never NaN.
        let even = StandingBlend::of(&[0.5; 6], &[2.0; 6]).expect("distant");
        assert_eq!(even.relevance(Some(0.5), keyword(2.0)), 1.0);
        assert_eq!(even.relevance(Some(0.5), None), 0.5);
    }

    #[test]
    fn weighted_blend_uses_the_vector_weight() {
        assert!((weighted(Some(0.8), Some(0.4), 0.75) - 0.7).abs() < 1e-12);
        assert_eq!(weighted(None, Some(0.5), 0.5), 0.25);
    }
}
