//! Latency percentiles and retrieval-quality metrics.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

/// p50 / p95 / p99 of a sample, in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
}

impl Percentiles {
    pub fn of(samples_ms: &[f64]) -> Self {
        if samples_ms.is_empty() {
            return Self::default();
        }
        let mut sorted = samples_ms.to_vec();
        sorted.sort_by(f64::total_cmp);
        let at = |q: f64| sorted[((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1];
        Self { p50: at(0.50), p95: at(0.95), p99: at(0.99) }
    }
}

/// nDCG@k with graded relevance (gain = relevance, log2 discount), as trec_eval computes it.
pub fn ndcg_at(ranked: &[String], relevant: &HashMap<String, i32>, k: usize) -> f64 {
    let dcg: f64 = ranked
        .iter()
        .take(k)
        .enumerate()
        .map(|(i, d)| *relevant.get(d).unwrap_or(&0) as f64 / (i as f64 + 2.0).log2())
        .sum();
    let mut ideal: Vec<i32> = relevant.values().copied().filter(|r| *r > 0).collect();
    ideal.sort_by(|a, b| b.cmp(a));
    let idcg: f64 = ideal.iter().take(k).enumerate().map(|(i, r)| *r as f64 / (i as f64 + 2.0).log2()).sum();
    if idcg == 0.0 { 0.0 } else { dcg / idcg }
}

/// Share of the relevant documents found in the top k.
pub fn recall_at(ranked: &[String], relevant: &HashMap<String, i32>, k: usize) -> f64 {
    let wanted: HashSet<&String> = relevant.iter().filter(|(_, r)| **r > 0).map(|(d, _)| d).collect();
    if wanted.is_empty() {
        return 0.0;
    }
    ranked.iter().take(k).filter(|d| wanted.contains(d)).count() as f64 / wanted.len() as f64
}

/// Reciprocal rank of the first relevant document within the top k.
pub fn mrr_at(ranked: &[String], relevant: &HashMap<String, i32>, k: usize) -> f64 {
    ranked.iter().take(k).position(|d| relevant.get(d).is_some_and(|r| *r > 0)).map_or(0.0, |i| 1.0 / (i as f64 + 1.0))
}
