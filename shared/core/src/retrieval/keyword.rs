//! The keyword branch: exact BM25 over every posting of the query's terms (read by [`store::keyword`]), inside the
//! scope predicate and the metadata filters. The postings are scored here; the best memories are then joined to
//! `memory`, in rounds, until `rows` pass the scope, the filters and the tsquery's re-check.

use std::collections::HashMap;

use sqlx::PgConnection;
use uuid::Uuid;

use crate::store::{
    self, ReadFilter, SearchFilters,
    branches::BranchRow,
    keyword::{KeywordSearch, TermPostings},
};

/// BM25's term-frequency saturation (k1) and length normalisation (b).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bm25 {
    pub k1: f64,
    pub b: f64,
}

impl Default for Bm25 {
    /// Anserini's defaults. Over the textbook 1.2 / 0.75 the modes gain on both evaluation sets, most on short
    /// conversational memories (docs/decisions.md).
    fn default() -> Self {
        Self { k1: 0.9, b: 0.4 }
    }
}

impl Bm25 {
    /// The score one term adds to a memory holding it `tf` times in `length` lexemes.
    pub fn weight(self, idf: f64, tf: f64, length: f64, average_length: f64) -> f64 {
        idf * tf * (self.k1 + 1.0) / (tf + self.k1 * (1.0 - self.b + self.b * length / average_length))
    }
}

/// Full-text matches of `search.text` (any of its terms and phrases; -exclusions honoured) that hold one of its
/// selective terms, ranked by BM25 with the organisation's term statistics, best first (ties by id).
/// `keyword_score` is BM25 / (1 + BM25), in [0, 1).
pub async fn keyword_branch(
    conn: &mut PgConnection,
    scope: &ReadFilter,
    filters: &SearchFilters,
    search: &KeywordSearch<'_>,
    bm25: Bm25,
) -> sqlx::Result<Vec<BranchRow>> {
    let terms = store::keyword::term_postings(&mut *conn, scope.organization_id(), search).await?;
    let mut scored = score(&terms, bm25);
    // Half of a tenant is typically unreadable to one caller; filters may reject far more, so each round doubles.
    let (mut found, mut start, mut round) = (Vec::new(), 0, 4 * search.rows.max(1));
    while found.len() < search.rows && start < scored.len() {
        let batch = best_first(&mut scored[start..], round);
        let wanted = search.rows - found.len();
        found.extend(store::keyword::readable(&mut *conn, scope, filters, search, batch, wanted).await?);
        (start, round) = (start + batch.len(), 2 * round);
    }
    Ok(found)
}

/// The best `k` of `scored` (ties by id), moved to its front and ordered: a large tenant's query scores thousands of
/// memories, of which a round reads a few hundred, so only those are sorted.
fn best_first(scored: &mut [(Uuid, f64)], k: usize) -> &[(Uuid, f64)] {
    let by_score = |a: &(Uuid, f64), b: &(Uuid, f64)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    let k = k.min(scored.len());
    if k < scored.len() {
        scored.select_nth_unstable_by(k, by_score);
    }
    let best = &mut scored[..k];
    best.sort_unstable_by(by_score);
    best
}

/// The memories holding a selective term, with their BM25 over every posting of `terms`, unordered.
fn score(terms: &[TermPostings], bm25: Bm25) -> Vec<(Uuid, f64)> {
    let mut scores: HashMap<Uuid, f64, foldhash::fast::FixedState> = HashMap::default();
    // The selective terms find the memories; the others only add to their scores.
    for term in terms.iter().filter(|t| t.selective).chain(terms.iter().filter(|t| !t.selective)) {
        for (id, tf, length) in term.postings() {
            let weight = bm25.weight(term.idf, tf, length, term.average_length);
            if term.selective {
                *scores.entry(id).or_default() += weight;
            } else if let Some(score) = scores.get_mut(&id) {
                *score += weight;
            }
        }
    }
    scores.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memory_is_scored_from_its_list_and_tail_less_what_is_gone() {
        let (a, b, c) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
        let bm25 = Bm25::default();
        let terms = [
            // b's packed posting was deleted and rewritten with tf 3; c's was deleted.
            TermPostings::of(2.0, true, 10.0, &[(a, 1, 10), (b, 1, 10), (c, 1, 10)], &[(b, 3, 10)], &[b, c]),
            // A common term counts only for memories holding a selective one: c is not found through it.
            TermPostings::of(0.5, false, 10.0, &[(a, 2, 10), (c, 1, 10)], &[], &[]),
        ];
        let mut scored = score(&terms, bm25);
        let ranked = best_first(&mut scored, usize::MAX);
        let expected_b = bm25.weight(2.0, 3.0, 10.0, 10.0);
        let expected_a = bm25.weight(2.0, 1.0, 10.0, 10.0) + bm25.weight(0.5, 2.0, 10.0, 10.0);
        assert_eq!(ranked.iter().map(|r| r.0).collect::<Vec<_>>(), [b, a]);
        assert!((ranked[0].1 - expected_b).abs() < 1e-12 && (ranked[1].1 - expected_a).abs() < 1e-12);
    }

    #[test]
    fn rounds_of_the_best_first_read_the_whole_ranking_in_order() {
        // Scores with ties, so the order by id counts.
        let mut scored: Vec<(Uuid, f64)> =
            (0..1_000u128).map(|i| (Uuid::from_u128(i * 7_919 % 1_009), f64::from((i * 31 % 97) as u32))).collect();
        let mut expected = scored.clone();
        expected.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let (mut read, mut start, mut round) = (Vec::new(), 0, 7);
        while start < scored.len() {
            let batch = best_first(&mut scored[start..], round);
            read.extend_from_slice(batch);
            (start, round) = (start + batch.len(), 2 * round);
        }
        assert_eq!(read, expected);
    }
}
