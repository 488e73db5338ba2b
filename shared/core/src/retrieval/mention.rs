//! `@memory:` mentions in an agent's turn.

/// The queries mentioned in `text`: `@memory:"a quoted query"` or `@memory:` followed by the rest of its line.
/// Several mentions are joined with a space; None when there is none.
pub fn parse_mentions(text: &str) -> Option<String> {
    const TAG: &str = "@memory:";
    let mut queries = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(TAG) {
        let after = &rest[at + TAG.len()..];
        let (query, remainder) = if let Some(quoted) = after.strip_prefix('"') {
            match quoted.find('"') {
                Some(end) => (&quoted[..end], &quoted[end + 1..]),
                None => (quoted, ""),
            }
        } else {
            let end = after.find('\n').unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        let query = query.trim();
        if !query.is_empty() {
            queries.push(query.to_string());
        }
        rest = remainder;
    }
    (!queries.is_empty()).then(|| queries.join(" "))
}

#[cfg(test)]
mod tests {
    use super::parse_mentions;

    #[test]
    fn parses_line_and_quoted_mentions() {
        assert_eq!(parse_mentions("fix it @memory:deploy checklist\nthanks").as_deref(), Some("deploy checklist"));
        assert_eq!(
            parse_mentions(r#"see @memory:"E4021 login" and @memory:"git rebase policy" now"#).as_deref(),
            Some("E4021 login git rebase policy")
        );
        assert_eq!(parse_mentions("no mention here"), None);
        assert_eq!(parse_mentions("empty @memory:   "), None);
    }
}
