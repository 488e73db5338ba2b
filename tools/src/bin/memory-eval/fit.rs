//! Fitting the learned ranking (`--fit`): each set's Stage 1 candidates with their features, ranked by today's
//! formula, become pairs (a judged memory above an unjudged one of the same query); a logistic model on the pairs'
//! feature differences, fitted by Newton's method, orders them, and a second fit of a scale and a bias on single
//! candidates makes its score the probability of a judged answer. Every shape weighs the same, every query of a
//! shape the same. Leave one shape out: fitted on the others, scored on it, beside today's ranking.

use std::collections::{BTreeMap, HashMap};

use memory_core::retrieval::learned::{COUNT, Features, Model, NAMES, Scorer};
use serde::Serialize;

use crate::metrics::Metrics;

/// One judged query: its candidates (document id, features, score today) in today's order, and its judgements.
pub struct Judged {
    pub candidates: Vec<(String, Features, f64)>,
    pub relevant: HashMap<String, i32>,
}

/// The queries of one set, and its shape (documents, conversation, facts, code).
pub struct Collected {
    pub set: String,
    pub shape: &'static str,
    pub queries: Vec<Judged>,
}

/// The shape of a set, by its name.
pub fn shape_of(set: &str) -> &'static str {
    match set {
        "scifact" => "documents",
        "realtalk" => "conversation",
        "madial" => "facts",
        _ => "code",
    }
}

/// The collected sets as JSON lines, one query a line.
pub fn write(sets: &[Collected], path: &std::path::Path) -> anyhow::Result<()> {
    let mut out = String::new();
    for set in sets {
        for q in &set.queries {
            let candidates: Vec<_> = q.candidates.iter().map(|(doc, f, today)| (doc, today, f.0.to_vec())).collect();
            let line = serde_json::json!({"set": set.set, "shape": set.shape, "relevant": q.relevant,
                                          "candidates": candidates, "features": NAMES});
            out.push_str(&format!("{line}\n"));
        }
    }
    Ok(std::fs::write(path, out)?)
}

/// L2 penalty on the weights (not the bias).
const L2: f64 = 1e-3;
/// Newton steps; the fits converge in fewer.
const STEPS: usize = 30;

/// A weighted logistic regression `y ~ σ(w·x)` by Newton's method with an L2 penalty on every weight but those
/// `unpenalised`; rows are (x, y, weight).
fn logistic<const N: usize>(rows: &[([f64; N], f64, f64)], unpenalised: &[usize]) -> [f64; N] {
    let mut w = [0.0; N];
    for _ in 0..STEPS {
        let mut gradient = [0.0; N];
        let mut hessian = [[0.0; N]; N];
        for (x, y, weight) in rows {
            let z: f64 = w.iter().zip(x).map(|(a, b)| a * b).sum();
            let p = 1.0 / (1.0 + (-z).exp());
            for i in 0..N {
                gradient[i] += weight * (p - y) * x[i];
                for j in 0..N {
                    hessian[i][j] += weight * p * (1.0 - p) * x[i] * x[j];
                }
            }
        }
        for i in (0..N).filter(|i| !unpenalised.contains(i)) {
            gradient[i] += L2 * w[i];
            hessian[i][i] += L2;
        }
        for (i, row) in hessian.iter_mut().enumerate() {
            row[i] += 1e-9; // a feature no row has (all zero) stays at 0
        }
        let step = solve(hessian, gradient);
        w.iter_mut().zip(step).for_each(|(w, s)| *w -= s);
        if step.iter().map(|s| s.abs()).fold(0.0, f64::max) < 1e-9 {
            break;
        }
    }
    w
}

/// `a x = b` by Gaussian elimination with partial pivoting.
fn solve<const N: usize>(mut a: [[f64; N]; N], mut b: [f64; N]) -> [f64; N] {
    for col in 0..N {
        let pivot = (col..N).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs())).expect("rows");
        a.swap(col, pivot);
        b.swap(col, pivot);
        let (pivot_row, pivot_b) = (a[col], b[col]);
        for row in col + 1..N {
            let f = a[row][col] / pivot_row[col];
            a[row].iter_mut().zip(pivot_row).skip(col).for_each(|(x, p)| *x -= f * p);
            b[row] -= f * pivot_b;
        }
    }
    let mut x = [0.0; N];
    for row in (0..N).rev() {
        let rest: f64 = (row + 1..N).map(|k| a[row][k] * x[k]).sum();
        x[row] = (b[row] - rest) / a[row][row];
    }
    x
}

/// Each query's weight: shapes weigh the same, queries of a shape the same.
fn query_weights<'a>(sets: &[&'a Collected]) -> Vec<(&'a Judged, f64)> {
    let mut per_shape: BTreeMap<&str, usize> = BTreeMap::new();
    for set in sets {
        *per_shape.entry(set.shape).or_default() += set.queries.len();
    }
    sets.iter()
        .flat_map(|set| {
            let weight = 1.0 / (per_shape[set.shape] as f64 * per_shape.len() as f64);
            set.queries.iter().map(move |q| (q, weight))
        })
        .collect()
}

/// The model fitted on `sets`.
pub fn fit(sets: &[&Collected], fitted: String) -> Model {
    let queries = query_weights(sets);
    let label = |q: &Judged, doc: &str| q.relevant.get(doc).copied().unwrap_or(0);
    // Ordering: a judged candidate above each candidate judged lower, the query's pairs sharing its weight.
    let mut pairs: Vec<([f64; COUNT], f64, f64)> = Vec::new();
    for (q, weight) in &queries {
        let mut these = Vec::new();
        for (a, fa, _) in &q.candidates {
            for (b, fb, _) in &q.candidates {
                if label(q, a) > label(q, b) {
                    these.push(std::array::from_fn(|i| fa.0[i] - fb.0[i]));
                }
            }
        }
        let share = weight / these.len().max(1) as f64;
        pairs.extend(these.into_iter().map(|d: [f64; COUNT]| (d, 1.0, share)));
    }
    let weights = logistic(&pairs, &[]);
    let order = Scorer { bias: 0.0, weights };
    // Calibration: the probability of a judged answer from the ordering's logit, on single candidates.
    let mut single: Vec<([f64; 2], f64, f64)> = Vec::new();
    for (q, weight) in &queries {
        let share = weight / q.candidates.len().max(1) as f64;
        for (doc, features, _) in &q.candidates {
            let judged = if label(q, doc) > 0 { 1.0 } else { 0.0 };
            single.push(([order.logit(features), 1.0], judged, share));
        }
    }
    let [scale, bias] = logistic(&single, &[0, 1]);
    Model { fitted, bias, weights: NAMES.iter().zip(weights).map(|(name, w)| (name.to_string(), w * scale)).collect() }
}

/// A set's metrics with its candidates in today's order, and re-ranked by `scorer`.
fn scored(set: &Collected, scorer: &Scorer) -> (Metrics, Metrics) {
    let (mut today, mut learned) = (Metrics::default(), Metrics::default());
    for q in &set.queries {
        let docs: Vec<String> = q.candidates.iter().map(|(doc, ..)| doc.clone()).collect();
        today.add(&Metrics::of(&docs, &q.relevant));
        let mut reranked: Vec<(f64, usize)> =
            q.candidates.iter().enumerate().map(|(i, (_, f, _))| (scorer.logit(f), i)).collect();
        reranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let docs: Vec<String> = reranked.iter().map(|(_, i)| q.candidates[*i].0.clone()).collect();
        learned.add(&Metrics::of(&docs, &q.relevant));
    }
    let n = set.queries.len().max(1) as f64;
    (today.divided(n), learned.divided(n))
}

/// One held-out shape's sets: today's ranking against the model fitted without the shape.
#[derive(Serialize)]
pub struct HeldOut {
    pub shape: &'static str,
    pub set: String,
    pub today: [f64; 2],
    pub learned: [f64; 2],
}

/// Leave one shape out: for each shape, the model fitted on the others, scored on each of the shape's sets
/// (nDCG@10, Recall@10).
pub fn leave_one_shape_out(sets: &[Collected]) -> Vec<HeldOut> {
    let shapes: std::collections::BTreeSet<&str> = sets.iter().map(|s| s.shape).collect();
    let mut out = Vec::new();
    for shape in shapes {
        let others: Vec<&Collected> = sets.iter().filter(|s| s.shape != shape).collect();
        if others.is_empty() {
            continue;
        }
        let scorer = Scorer::new(&fit(&others, String::new()));
        for set in sets.iter().filter(|s| s.shape == shape) {
            let (today, learned) = scored(set, &scorer);
            out.push(HeldOut {
                shape,
                set: set.set.clone(),
                today: [today.ndcg10, today.recall10()],
                learned: [learned.ndcg10, learned.recall10()],
            });
        }
    }
    out
}

/// The leave-one-shape-out table (Markdown), with the mean over shapes (a shape's sets averaged first).
pub fn table(held: &[HeldOut]) -> String {
    let mut out = String::from(
        "| held-out shape | set | today nDCG@10 | learned nDCG@10 | today R@10 | learned R@10 |\n|---|---|---|---|---|---|\n",
    );
    for h in held {
        out.push_str(&format!(
            "| {} | {} | {:.4} | {:.4} ({:+.4}) | {:.4} | {:.4} ({:+.4}) |\n",
            h.shape,
            h.set,
            h.today[0],
            h.learned[0],
            h.learned[0] - h.today[0],
            h.today[1],
            h.learned[1],
            h.learned[1] - h.today[1]
        ));
    }
    let mut by_shape: BTreeMap<&str, Vec<&HeldOut>> = BTreeMap::new();
    for h in held {
        by_shape.entry(h.shape).or_default().push(h);
    }
    let mean = |f: &dyn Fn(&HeldOut) -> f64| {
        by_shape.values().map(|hs| hs.iter().map(|h| f(h)).sum::<f64>() / hs.len() as f64).sum::<f64>()
            / by_shape.len().max(1) as f64
    };
    let (t0, l0, t1, l1) =
        (mean(&|h| h.today[0]), mean(&|h| h.learned[0]), mean(&|h| h.today[1]), mean(&|h| h.learned[1]));
    out.push_str(&format!(
        "| mean of shapes | | {t0:.4} | {l0:.4} ({:+.4}) | {t1:.4} | {l1:.4} ({:+.4}) |\n",
        l0 - t0,
        l1 - t1
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newton_recovers_a_separating_direction_and_solve_inverts() {
        let x = solve([[2.0, 1.0], [1.0, 3.0]], [3.0, 5.0]);
        assert!((x[0] - 0.8).abs() < 1e-12 && (x[1] - 1.4).abs() < 1e-12, "{x:?}");
        // y = 1 when the first feature is larger: the fit weighs the first feature positively, the second not.
        let rows: Vec<([f64; 2], f64, f64)> =
            (0..40).map(|i| ([(i % 7) as f64 / 7.0 - 0.4, (i % 3) as f64 / 3.0], f64::from(i % 7 >= 3), 1.0)).collect();
        let w = logistic(&rows, &[]);
        assert!(w[0] > 1.0 && w[0] > 10.0 * w[1].abs(), "{w:?}");
    }
}
