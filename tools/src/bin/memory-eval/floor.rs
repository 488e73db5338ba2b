//! The passive relevance floor, studied: what passive injection keeps of a set's own queries and of questions about
//! something else (another set's queries, asked of this set's memories) at each cosine floor.

use std::collections::HashMap;

use memory_core::retrieval::{RetrievalMode, RetrievalRequest, Retriever};
use memory_tools::stats::Percentiles;
use serde::Serialize;
use uuid::Uuid;

use crate::{dataset::RawQuery, metrics::Metrics};

/// What passive injection returned for one query, best first, with no floor.
pub struct Injected {
    /// Document id, cosine to the query (none when it could not be embedded), characters.
    pub memories: Vec<(String, Option<f64>, usize)>,
}

/// The figures of one floor.
#[derive(Serialize)]
pub struct AtFloor {
    pub floor: f64,
    /// Of the set's own queries, with what falls under the floor left out.
    pub ndcg10: f64,
    pub recall10: f64,
    /// Characters injected per own query (passive mode's default 20 results), median and p95.
    pub injected_chars_p50: f64,
    pub injected_chars_p95: f64,
    /// The share of foreign queries that inject nothing.
    pub foreign_nothing: f64,
    pub foreign_queries: usize,
}

/// Passive injection of `query`, a new session's first turn, asked in the organisation of `group` (the query's own
/// when None), `depth` results, no floor.
pub async fn inject(
    retriever: &Retriever,
    query: &RawQuery,
    group: Option<Option<&str>>,
    depth: usize,
    doc_of: &HashMap<Uuid, String>,
) -> anyhow::Result<Injected> {
    let session = format!("floor/{}", query.id);
    let mut asking = crate::Asking::new(query, RetrievalMode::Passive, &session, depth);
    asking.group = group.unwrap_or(asking.group);
    let answer = crate::ask(retriever, query, asking).await?;
    let memories = answer
        .into_iter()
        .map(|m| (doc_of[&m.memory.id].clone(), m.cosine_sim, m.memory.content.chars().count()))
        .collect();
    Ok(Injected { memories })
}

/// Each floor's figures over the own queries (with their judgements) and the foreign ones.
pub fn study(floors: &[f64], own: &[(Injected, &HashMap<String, i32>)], foreign: &[Injected]) -> Vec<AtFloor> {
    let kept = |injected: &Injected, floor: f64| -> Vec<(String, usize)> {
        injected
            .memories
            .iter()
            .filter(|(_, cosine, _)| cosine.is_none_or(|c| c >= floor))
            .map(|(doc, _, chars)| (doc.clone(), *chars))
            .collect()
    };
    floors
        .iter()
        .map(|&floor| {
            let mut sums = Metrics::default();
            let mut chars = Vec::new();
            for (injected, relevant) in own {
                let kept = kept(injected, floor);
                let ranked: Vec<String> = kept.iter().map(|(doc, _)| doc.clone()).collect();
                sums.add(&Metrics::of(&ranked, relevant));
                let default_depth = RetrievalRequest::DEFAULT_MAX_RESULTS;
                chars.push(kept.iter().take(default_depth).map(|(_, c)| *c as f64).sum::<f64>());
            }
            let m = sums.divided(own.len().max(1) as f64);
            let chars = Percentiles::of(&chars);
            let nothing = foreign.iter().filter(|f| kept(f, floor).is_empty()).count();
            AtFloor {
                floor,
                ndcg10: m.ndcg10,
                recall10: m.recall10(),
                injected_chars_p50: chars.p50,
                injected_chars_p95: chars.p95,
                foreign_nothing: nothing as f64 / foreign.len().max(1) as f64,
                foreign_queries: foreign.len(),
            }
        })
        .collect()
}

/// The study as a table.
pub fn print(name: &str, rows: &[AtFloor]) {
    println!("{name}: passive relevance floor (cosine)");
    println!(
        "{:>6} {:>8} {:>8} {:>12} {:>12} {:>16}",
        "floor", "nDCG@10", "R@10", "chars p50", "chars p95", "foreign: none"
    );
    for r in rows {
        println!(
            "{:>6.2} {:>8.4} {:>8.4} {:>12.0} {:>12.0} {:>9.3} of {}",
            r.floor,
            r.ndcg10,
            r.recall10,
            r.injected_chars_p50,
            r.injected_chars_p95,
            r.foreign_nothing,
            r.foreign_queries
        );
    }
}
