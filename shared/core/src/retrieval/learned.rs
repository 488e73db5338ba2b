//! The learned ranking: a candidate's features (what Stage 1 and the query say about it) scored by one logistic
//! model, fitted by `memory-eval --fit` on the development suite. Its weights are a reviewed file,
//! [`ranker.json`](ranker.json), with the commit and data they came from; each result's score is the sum of its
//! features' contributions, which `explain` reports ([`super::trace`]).

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{
    found::Found,
    recency::recency,
    time_anchor::{TimeAnchor, of_the_time},
};

/// The features, in the order of [`Features::values`] and of the weights. Chosen from a wider set (ranks, raw and
/// scaled scores, both branches, length) by leaving one out at a time while the mean over held-out shapes rose
/// (docs/experiments.md).
pub const NAMES: [&str; 10] = [
    "cosine_of_the_nearest",
    "cosine_in_range_by_vector_standing",
    "keyword_in_range_by_keyword_standing",
    "keyword_by_nearest_cosine",
    "cosine_in_range_if_code",
    "keyword_in_range_if_code",
    "name_said",
    "of_the_named_time",
    "recency",
    "confidence",
];

/// How many features a candidate has.
pub const COUNT: usize = NAMES.len();

/// A candidate's features, each in [0, 1].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Features(pub [f64; COUNT]);

impl Features {
    /// `c`'s features for a query naming `anchors`, recency measured at `recency_at`.
    pub fn of(c: &Found, anchors: &[TimeAnchor], recency_at: DateTime<Utc>) -> Self {
        let s = &c.signals;
        let code = if s.answered_from_code { 1.0 } else { 0.0 };
        let cosine = c.cosine_sim.unwrap_or(0.0).clamp(0.0, 1.0);
        let nearest = s.nearest_cosine.clamp(0.0, 1.0);
        let of_time = !anchors.is_empty() && of_the_time(anchors, c.memory.created_at);
        Self([
            if nearest > 0.0 { (cosine / nearest).min(1.0) } else { 0.0 },
            s.cosine_in_range * s.vector_standing,
            s.keyword_in_range * (1.0 - s.vector_standing),
            c.keyword_relative.unwrap_or(0.0) * nearest,
            s.cosine_in_range * code,
            s.keyword_in_range * code,
            s.name_said,
            if of_time { 1.0 } else { 0.0 },
            recency(c.memory.created_at, recency_at, c.memory.memory_type),
            c.memory.confidence.clamp(0.0, 1.0),
        ])
    }

    /// The features an explanation names (0 for one it lacks).
    pub fn from_named(named: &std::collections::BTreeMap<String, f64>) -> Self {
        Self(NAMES.map(|name| named.get(name).copied().unwrap_or(0.0)))
    }
}

/// The fitted model: a bias and one weight per feature, with where they came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Model {
    /// The commit the fit ran at and the data it was fitted on.
    pub fitted: String,
    pub bias: f64,
    /// Weights by feature name (every one of [`NAMES`]).
    pub weights: std::collections::BTreeMap<String, f64>,
}

/// The model the service ranks with.
pub static RANKER: LazyLock<Scorer> =
    LazyLock::new(|| Scorer::new(&serde_json::from_str(include_str!("ranker.json")).expect("ranker.json parses")));

/// A [`Model`]'s weights in feature order.
#[derive(Debug, Clone, PartialEq)]
pub struct Scorer {
    pub bias: f64,
    pub weights: [f64; COUNT],
}

impl Scorer {
    /// Panics on a model that lacks a feature's weight (a file out of step with [`NAMES`]; a test reads it).
    pub fn new(model: &Model) -> Self {
        let mut weights = [0.0; COUNT];
        for (w, name) in weights.iter_mut().zip(NAMES) {
            *w = *model.weights.get(name).unwrap_or_else(|| panic!("the model has no weight for {name}"));
        }
        Self { bias: model.bias, weights }
    }

    /// The logit: the bias plus each feature's contribution.
    pub fn logit(&self, features: &Features) -> f64 {
        self.bias + self.contributions(features).iter().sum::<f64>()
    }

    /// The probability the model gives the candidate of answering the query, in (0, 1).
    pub fn score(&self, features: &Features) -> f64 {
        1.0 / (1.0 + (-self.logit(features)).exp())
    }

    /// Each feature's share of the logit (weight × value), in [`NAMES`] order.
    pub fn contributions(&self, features: &Features) -> [f64; COUNT] {
        std::array::from_fn(|i| self.weights[i] * features.0[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{domain::Memory, retrieval::found::Signals};

    fn found(cosine: f64, vector_rank: usize, keyword_relative: Option<f64>) -> Found {
        let signals =
            Signals { cosine_in_range: cosine, vector_standing: 0.5, nearest_cosine: 0.9, ..Default::default() };
        Found {
            memory: Memory::test_fixture(),
            cosine_sim: Some(cosine),
            keyword_score: keyword_relative.map(|k| k / 2.0),
            taxonomy_node_ids: Vec::new(),
            mentions_profiled_entity: false,
            vector_rank: Some(vector_rank),
            keyword_rank: keyword_relative.map(|_| 1),
            keyword_relative,
            rrf: 0.0,
            fused_rank: 1,
            relevance: 0.0,
            signals: Signals { keyword_in_range: keyword_relative.unwrap_or(0.0), ..signals },
        }
    }

    #[test]
    fn the_shipped_model_weighs_every_feature_and_its_score_is_the_sum_of_the_contributions() {
        let scorer = &*RANKER; // panics on a file out of step with NAMES
        let features = Features::of(&found(0.7, 2, Some(0.5)), &[], Utc::now());
        assert!(features.0.iter().all(|v| (0.0..=1.0).contains(v)), "{features:?}");
        let sum: f64 = scorer.contributions(&features).iter().sum();
        assert!((scorer.score(&features) - 1.0 / (1.0 + (-(scorer.bias + sum)).exp())).abs() < 1e-12);
        let named: std::collections::BTreeMap<String, f64> =
            NAMES.iter().map(|n| n.to_string()).zip(features.0).collect();
        assert_eq!(Features::from_named(&named), features);
    }

    #[test]
    fn the_shipped_model_ranks_the_best_of_both_branches_above_what_neither_branch_ranks_high() {
        let (now, scorer) = (Utc::now(), &*RANKER);
        let best = scorer.score(&Features::of(&found(0.9, 1, Some(1.0)), &[], now));
        let weak = scorer.score(&Features::of(&found(0.3, 40, None), &[], now));
        // A probability: a few candidates of a hundred answer a query, so even the best is far from certain.
        assert!(best > 20.0 * weak && best < 0.9 && weak < 0.05, "{best} {weak}");
    }
}
