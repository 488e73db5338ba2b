//! The quality measures of one strategy on one dataset.

use std::collections::HashMap;

use memory_tools::stats;
use serde_json::json;

/// What one strategy reached on one dataset, averaged over its judged queries.
#[derive(Clone, Copy, Default)]
pub struct Metrics {
    pub ndcg10: f64,
    pub recall: [f64; 5],
    pub mrr10: f64,
}

/// The depths Recall is reported at.
pub const RECALL_DEPTHS: [usize; 5] = [1, 5, 10, 25, 50];

impl Metrics {
    pub fn of(ranked: &[String], relevant: &HashMap<String, i32>) -> Self {
        Self {
            ndcg10: stats::ndcg_at(ranked, relevant, 10),
            recall: RECALL_DEPTHS.map(|k| stats::recall_at(ranked, relevant, k)),
            mrr10: stats::mrr_at(ranked, relevant, 10),
        }
    }

    pub fn add(&mut self, other: &Self) {
        self.ndcg10 += other.ndcg10;
        self.recall.iter_mut().zip(other.recall).for_each(|(s, v)| *s += v);
        self.mrr10 += other.mrr10;
    }

    pub fn divided(mut self, n: f64) -> Self {
        self.ndcg10 /= n;
        self.recall.iter_mut().for_each(|s| *s /= n);
        self.mrr10 /= n;
        self
    }

    pub fn recall10(&self) -> f64 {
        self.recall[2]
    }

    pub fn json(&self) -> serde_json::Value {
        let mut out = json!({"ndcg@10": self.ndcg10, "mrr@10": self.mrr10});
        for (k, r) in RECALL_DEPTHS.iter().zip(self.recall) {
            out[format!("recall@{k}")] = json!(r);
        }
        out
    }
}
