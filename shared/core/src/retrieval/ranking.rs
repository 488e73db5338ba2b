//! Stage 4: the composite relevance score.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{
    RankedMemory,
    found::Found,
    learned::{Features, RANKER},
    time_anchor::{TimeAnchor, of_the_time},
    trace::Explanation,
};
use crate::domain::TrustLevel;

/// Weights of the composite score; the spec's values are the default.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RankingWeights {
    pub cosine: f64,
    pub recency: f64,
    pub confidence: f64,
}

impl Default for RankingWeights {
    fn default() -> Self {
        Self { cosine: 0.5, recency: 0.3, confidence: 0.2 }
    }
}

/// Which Stage 4 formula ranks the candidates (`MEMORY_RANKING`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RankingFormula {
    /// The spec's composite: cosine × 0.5 + recency × 0.3 + confidence × 0.2 (the weights configurable).
    Spec,
    /// Relevance from both branches ([`super::fusion::relevance`], in [0, 1]), scaled down by at most [`NUDGE`]
    /// for age and low confidence, so they order memories of similar relevance but never bury the relevant one,
    /// and by [`OFF_TIME_PENALTY`] for a memory not of a date the query names.
    #[default]
    Relevance,
    /// The probability of an answer, by the logistic model fitted on the development suite over each candidate's
    /// features ([`super::learned`]).
    Learned,
}

impl std::str::FromStr for RankingFormula {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "spec" => Ok(Self::Spec),
            "relevance" => Ok(Self::Relevance),
            "learned" => Ok(Self::Learned),
            other => Err(format!("expected spec, relevance or learned, not {other:?}")),
        }
    }
}

/// The largest share of a memory's relevance that recency and confidence move, together.
pub const NUDGE: f64 = 0.1;

/// The share of its relevance a memory loses when the query names a time (`time_anchor`) it is not of. REALTALK
/// nDCG@10 was the same within 0.0001 for penalties of 0.15, 0.3, 0.6 and 0.9 (docs/decisions.md).
pub const OFF_TIME_PENALTY: f64 = 0.3;

pub use super::recency::{half_life_days, recency};

/// weights.cosine × cosine + weights.recency × recency + weights.confidence × confidence.
pub fn composite(weights: &RankingWeights, cosine: f64, recency: f64, confidence: f64) -> f64 {
    weights.cosine * cosine + weights.recency * recency + weights.confidence * confidence
}

/// How Stage 4 ranks a query's candidates: the formula and its weights, the dates the query names, the time recency
/// is measured at, and whether each result says why.
#[derive(Debug, Clone, Copy)]
pub struct Ranking<'a> {
    pub formula: RankingFormula,
    pub weights: &'a RankingWeights,
    pub anchors: &'a [TimeAnchor],
    pub recency_at: DateTime<Utc>,
    pub explain: bool,
}

/// The best `max_results` candidates by composite score, best first, ties broken by id so equal inputs give equal
/// order. Without a query embedding the keyword score stands in for the cosine.
pub fn rank(ranking: Ranking<'_>, candidates: &[&Found], max_results: usize) -> Vec<RankedMemory> {
    rank_counted(ranking, candidates, max_results).0
}

/// [`rank`], and how many candidates it left out as repeats of better ones.
pub fn rank_counted(ranking: Ranking<'_>, candidates: &[&Found], max_results: usize) -> (Vec<RankedMemory>, usize) {
    let Ranking { formula, weights, anchors, recency_at, explain } = ranking;
    let learned = (formula == RankingFormula::Learned).then(|| &*RANKER);
    let mut scored: Vec<(f64, &Found)> = candidates
        .iter()
        .map(|c| {
            let recency = recency(c.memory.created_at, recency_at, c.memory.memory_type);
            let score = match formula {
                RankingFormula::Spec => {
                    let similarity = c.cosine_sim.or(c.keyword_score).unwrap_or(0.0);
                    composite(weights, similarity, recency, c.memory.confidence)
                }
                RankingFormula::Relevance => {
                    let (r, f) = (weights.recency, weights.confidence);
                    let share = if r + f > 0.0 { (r * recency + f * c.memory.confidence) / (r + f) } else { 0.5 };
                    let time = if of_the_time(anchors, c.memory.created_at) { 1.0 } else { 1.0 - OFF_TIME_PENALTY };
                    c.relevance * time * (1.0 - NUDGE + NUDGE * share)
                }
                RankingFormula::Learned => RANKER.score(&Features::of(c, anchors, recency_at)),
            };
            (score, *c)
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.memory.id.cmp(&b.1.memory.id)));
    let (kept, repeats) = super::distinct::distinct_counted(scored, |(_, c)| &c.memory, max_results);
    let ranked = kept
        .into_iter()
        .map(|(score, c)| RankedMemory {
            untrusted: c.memory.provenance.trust_level == TrustLevel::Untrusted,
            stale: c.memory.is_stale(),
            memory: c.memory.clone(),
            score,
            cosine_sim: c.cosine_sim,
            explanation: explain.then(|| Explanation::of(c, anchors, recency_at, learned)),
        })
        .collect();
    (ranked, repeats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::MemoryType;
    use chrono::Duration;

    fn ranked_by<'a>(
        formula: RankingFormula,
        weights: &'a RankingWeights,
        anchors: &'a [TimeAnchor],
        recency_at: DateTime<Utc>,
    ) -> Ranking<'a> {
        Ranking { formula, weights, anchors, recency_at, explain: false }
    }

    #[test]
    fn composite_score_matches_the_formula_within_a_thousandth() {
        let score = composite(&RankingWeights::default(), 0.8, 0.6, 0.9);
        assert!((score - 0.76).abs() < 0.001, "{score}");
    }

    #[test]
    fn ranking_formula_combines_fixed_inputs_as_the_spec_says() {
        let now = Utc::now();
        let r = recency(now - Duration::days(60), now, MemoryType::Episodic); // two half-lives: 0.25
        let score = composite(&RankingWeights::default(), 0.9, r, 0.5);
        assert!((score - (0.45 + 0.075 + 0.1)).abs() < 0.001, "{score}");
    }

    #[test]
    fn the_relevance_formula_lets_recency_order_near_ties_but_never_bury_the_relevant_one() {
        let (now, weights) = (Utc::now(), RankingWeights::default());
        let candidate = |relevance: f64, age_days: i64| {
            let mut memory = crate::domain::Memory::test_fixture();
            memory.id = uuid::Uuid::now_v7();
            memory.created_at = now - Duration::days(age_days);
            Found {
                memory,
                cosine_sim: Some(0.5),
                keyword_score: None,
                taxonomy_node_ids: Vec::new(),
                mentions_profiled_entity: false,
                vector_rank: None,
                keyword_rank: None,
                keyword_relative: None,
                rrf: 0.0,
                fused_rank: 1,
                relevance,
                signals: Default::default(),
            }
        };
        // The best match, eight months old, against a week-old memory that matched less.
        let answer = candidate(0.9, 240);
        let recent = candidate(0.75, 7);
        let ranked = rank(ranked_by(RankingFormula::Relevance, &weights, &[], now), &[&recent, &answer], 2);
        assert_eq!(ranked[0].memory.id, answer.memory.id);
        let spec = rank(ranked_by(RankingFormula::Spec, &weights, &[], now), &[&recent, &answer], 2);
        assert_eq!(spec[0].memory.id, recent.memory.id, "the spec formula lets recency decide here");
        // A query naming a day: the memory of that day outranks a more relevant one of another day; without the
        // date the more relevant one leads.
        let day = (now - Duration::days(30)).date_naive();
        let (of_the_day, other_day) = (candidate(0.7, 30), candidate(0.8, 90));
        let anchors = [TimeAnchor::On(day)];
        let dated = rank(ranked_by(RankingFormula::Relevance, &weights, &anchors, now), &[&other_day, &of_the_day], 2);
        assert_eq!(dated[0].memory.id, of_the_day.memory.id);
        let undated = rank(ranked_by(RankingFormula::Relevance, &weights, &[], now), &[&other_day, &of_the_day], 2);
        assert_eq!(undated[0].memory.id, other_day.memory.id);
        let spec = rank(ranked_by(RankingFormula::Spec, &weights, &anchors, now), &[&other_day, &of_the_day], 2);
        let spec_undated = rank(ranked_by(RankingFormula::Spec, &weights, &[], now), &[&other_day, &of_the_day], 2);
        assert_eq!(spec[0].score, spec_undated[0].score, "the spec formula ignores dates");
        // Near ties: the newer one first.
        let (old, new) = (candidate(0.8, 240), candidate(0.79, 7));
        let ranked = rank(ranked_by(RankingFormula::Relevance, &weights, &[], now), &[&old, &new], 2);
        assert_eq!(ranked[0].memory.id, new.memory.id);
        assert!(ranked.iter().all(|r| (0.0..=1.0).contains(&r.score)));
    }
}
