//! No span of a file twice: of results anchored in overlapping (nested or intersecting) line ranges of the same
//! file of the same project, only the best ranked is kept.

use crate::domain::Memory;

/// Whether two memories are anchored in overlapping lines of one file.
pub fn overlapping(a: &Memory, b: &Memory) -> bool {
    let (Some(x), Some(y)) = (&a.anchor, &b.anchor) else { return false };
    a.project_id == b.project_id
        && a.file_path.is_some()
        && a.file_path == b.file_path
        && x.start_line <= y.end_line
        && y.start_line <= x.end_line
}

/// The items, best first, without any whose span overlaps a better one's.
pub fn distinct_spans<T>(ranked: impl IntoIterator<Item = T>, memory: impl Fn(&T) -> &Memory) -> Vec<T> {
    let mut kept: Vec<T> = Vec::new();
    for item in ranked {
        if !kept.iter().any(|k| overlapping(memory(k), memory(&item))) {
            kept.push(item);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Anchor;

    fn anchored(path: &str, lines: (u32, u32)) -> Memory {
        let mut m = Memory::test_fixture();
        m.file_path = Some(path.into());
        m.anchor = Some(Anchor { symbol: format!("{lines:?}"), hash: None, start_line: lines.0, end_line: lines.1 });
        m
    }

    #[test]
    fn a_nested_or_intersecting_span_of_the_same_file_is_dropped_and_others_kept() {
        let ranked = vec![
            anchored("a.rs", (10, 20)),
            anchored("a.rs", (12, 14)), // nested
            anchored("a.rs", (20, 30)), // shares line 20
            anchored("a.rs", (21, 30)),
            anchored("b.rs", (10, 20)),
            Memory::test_fixture(),
            Memory::test_fixture(),
        ];
        let kept = distinct_spans(ranked, |m| m);
        let spans: Vec<_> =
            kept.iter().map(|m| (m.file_path.clone(), m.anchor.as_ref().map(|a| a.start_line))).collect();
        assert_eq!(
            spans,
            [
                (Some("a.rs".into()), Some(10)),
                (Some("a.rs".into()), Some(21)),
                (Some("b.rs".into()), Some(10)),
                (None, None),
                (None, None)
            ]
        );
    }
}
