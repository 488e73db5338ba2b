//! Fusing ranked lists: Reciprocal Rank Fusion (k = 60) or a weighted blend of normalised scores.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

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

/// Weighted linear blend of a cosine similarity and a keyword score, each already in [0, 1].
pub fn weighted(cosine: Option<f64>, keyword: Option<f64>, vector_weight: f64) -> f64 {
    let w = vector_weight.clamp(0.0, 1.0);
    w * cosine.unwrap_or(0.0).max(0.0) + (1.0 - w) * keyword.unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rrf_rewards_agreement_between_lists() {
        let both = rrf(&[Some(3), Some(3)]);
        let one_top = rrf(&[Some(1), None]);
        assert!(both > one_top);
        assert!((rrf(&[Some(1), Some(2)]) - (1.0 / 61.0 + 1.0 / 62.0)).abs() < 1e-12);
    }

    #[test]
    fn weighted_blend_uses_the_vector_weight() {
        assert!((weighted(Some(0.8), Some(0.4), 0.75) - 0.7).abs() < 1e-12);
        assert_eq!(weighted(None, Some(0.5), 0.5), 0.25);
    }
}
