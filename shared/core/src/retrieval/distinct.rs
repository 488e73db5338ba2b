//! No content twice. Of results anchored in overlapping (nested or intersecting) line ranges of the same file of the
//! same project, and of results saying nearly the same words, only the best ranked is kept. Code is told apart by
//! its span alone: two functions of one family read nearly alike and are still two functions.

use std::collections::HashSet;

use crate::domain::Memory;

/// The share of their distinct words two memories must have in common (Jaccard) to count as one.
pub const NEAR_IDENTICAL: f64 = 0.9;
/// The share of neighbouring-word pairs they must have in common too: words reordered ("moved to Berlin from
/// Paris", "moved to Paris from Berlin") say something else.
pub const IN_ORDER: f64 = 0.6;

/// Whether two memories are anchored in overlapping lines of one file.
pub fn overlapping(a: &Memory, b: &Memory) -> bool {
    let (Some(x), Some(y)) = (&a.anchor, &b.anchor) else { return false };
    a.project_id == b.project_id
        && a.file_path.is_some()
        && a.file_path == b.file_path
        && x.start_line <= y.end_line
        && y.start_line <= x.end_line
}

/// What a memory says, for telling near-identical memories apart: its distinct words, lower-cased (letters and
/// digits; punctuation and case tell nothing apart), and its distinct pairs of neighbouring words (order).
#[derive(Default)]
struct Said {
    words: HashSet<String>,
    pairs: HashSet<(String, String)>,
}

/// Words whose presence in one memory and absence in the other changes what it says.
const NEGATIONS: [&str; 7] = ["not", "no", "never", "none", "nor", "without", "t"];

impl Said {
    fn of(memory: &Memory) -> Self {
        let sequence: Vec<String> = memory
            .content
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect();
        let pairs = sequence.windows(2).map(|w| (w[0].clone(), w[1].clone())).collect();
        Self { words: sequence.into_iter().collect(), pairs }
    }

    /// One says all the other says and at most a tenth more (no word replaced by another: Berlin for Paris, on for
    /// off), mostly in the same order, and the words only one has are no number or negation.
    fn nearly_repeats(&self, other: &Self) -> bool {
        let changes_meaning = |w: &String| w.chars().any(|c| c.is_ascii_digit()) || NEGATIONS.contains(&w.as_str());
        let one_contains_the_other = self.words.is_subset(&other.words) || other.words.is_subset(&self.words);
        !self.words.is_empty()
            && one_contains_the_other
            && jaccard(&self.words, &other.words) >= NEAR_IDENTICAL
            && jaccard(&self.pairs, &other.pairs) >= IN_ORDER
            && !self.words.symmetric_difference(&other.words).any(changes_meaning)
    }
}

fn jaccard<T: Eq + std::hash::Hash>(a: &HashSet<T>, b: &HashSet<T>) -> f64 {
    let shared = a.intersection(b).count();
    let union = a.len() + b.len() - shared;
    if union == 0 { 1.0 } else { shared as f64 / union as f64 }
}

/// The first `limit` items, best first, without any whose span overlaps a better one's or whose words nearly
/// repeat a better one's.
pub fn distinct<T>(ranked: impl IntoIterator<Item = T>, memory: impl Fn(&T) -> &Memory, limit: usize) -> Vec<T> {
    distinct_counted(ranked, memory, limit).0
}

/// [`distinct`], and how many it left out as repeats before it had `limit`.
pub fn distinct_counted<T>(
    ranked: impl IntoIterator<Item = T>,
    memory: impl Fn(&T) -> &Memory,
    limit: usize,
) -> (Vec<T>, usize) {
    let mut kept: Vec<(T, Said)> = Vec::new();
    let mut repeats_left_out = 0;
    for item in ranked {
        if kept.len() == limit {
            break;
        }
        let m = memory(&item);
        // Code is compared by its span: its words are not read.
        let said = if m.anchor.is_none() { Said::of(m) } else { Said::default() };
        let repeats = |k: &Memory, s: &Said| match (&k.anchor, &m.anchor) {
            (None, None) => s.nearly_repeats(&said),
            _ => overlapping(k, m),
        };
        if kept.iter().any(|(k, s)| repeats(memory(k), s)) {
            repeats_left_out += 1;
        } else {
            kept.push((item, said));
        }
    }
    (kept.into_iter().map(|(item, _)| item).collect(), repeats_left_out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Anchor;

    fn anchored(path: &str, lines: (u32, u32)) -> Memory {
        let mut m = said(&format!("fn at {path} lines {lines:?}"));
        m.file_path = Some(path.into());
        m.anchor = Some(Anchor { symbol: format!("{lines:?}"), hash: None, start_line: lines.0, end_line: lines.1 });
        m
    }

    fn said(content: &str) -> Memory {
        Memory { content: content.into(), ..Memory::test_fixture() }
    }

    #[test]
    fn a_nested_or_intersecting_span_of_the_same_file_is_dropped_and_others_kept() {
        let ranked = vec![
            anchored("a.rs", (10, 20)),
            anchored("a.rs", (12, 14)), // nested
            anchored("a.rs", (20, 30)), // shares line 20
            anchored("a.rs", (21, 30)),
            anchored("b.rs", (10, 20)),
            said("The deploy fails when the cache is cold."),
            said("The deploy fails when the cache is cold"),
        ];
        let kept = distinct(ranked, |m| m, 10);
        let spans: Vec<_> =
            kept.iter().map(|m| (m.file_path.clone(), m.anchor.as_ref().map(|a| a.start_line))).collect();
        assert_eq!(
            spans,
            [
                (Some("a.rs".into()), Some(10)),
                (Some("a.rs".into()), Some(21)),
                (Some("b.rs".into()), Some(10)),
                (None, None),
            ]
        );
    }

    #[test]
    fn memories_saying_nearly_the_same_words_are_returned_once_and_others_kept() {
        let ranked = [
            "Error E4021 from auth-service means the refresh token expired.",
            "error E4021 from auth-service means the refresh token has expired",
            "Error E4022 from auth-service means the access token was revoked.",
            "Error E4021 from billing means the card expired.",
            "Error E4021 from auth-service means the refresh token expired!",
            "Error E4021 from auth-service does not mean the refresh token expired.",
            "Error E4021 from auth-service means the token refresh expired.",
            "Error E4021 from auth-service means the refresh token expired after 30 days.",
            "The planning meeting with the whole platform team and both product leads takes place in Berlin each spring and autumn for two long days of talks",
            "The planning meeting with the whole platform team and both product leads takes place in Paris each spring and autumn for two long days of talks",
            "The planning meeting with the whole platform team and both product leads takes place in Berlin each spring and autumn for two long days of talks again",
        ];
        let kept = distinct(ranked.map(said), |m| m, 10);
        let contents: Vec<&str> = kept.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(contents, [ranked[0], ranked[2], ranked[3], ranked[5], ranked[6], ranked[7], ranked[8], ranked[9]]);
        assert_eq!(distinct(ranked.map(said), |m| m, 2).len(), 2);
    }
}
