//! A query that says a code chunk's name: code search ranks a symbol's definition by its name, and a question about
//! code often says the name in its own words ("Loads bytecode from a file" of `Bucket.load_bytecode`). A question
//! answered from code favours a chunk of source code by the share of its name's words it says.

use std::{collections::HashSet, sync::LazyLock};

use rust_stemmers::{Algorithm, Stemmer};

use crate::domain::Memory;

/// How far a code chunk whose name the query says moves towards full relevance: the whole way times this share of
/// its name's words the query says. nDCG@10 chrono 0.2440 / 0.2648 / 0.2670 and jinja2 0.6119 / 0.6155 / 0.6125 at
/// 0.3 / 0.5 / 0.7 (docs/experiments.md).
pub const NAMED_PULL: f64 = 0.5;

/// English stems, as the keyword index's `english` configuration makes them (both are Snowball's).
static STEMMER: LazyLock<Stemmer> = LazyLock::new(|| Stemmer::create(Algorithm::English));
static STOP_WORDS: LazyLock<HashSet<&'static str>> = LazyLock::new(|| stop_words::get("en").iter().copied().collect());

/// A text's words as they are compared: identifiers split where engineers join words (`parse_config`,
/// `parseConfig`, `HTMLParser`), lower-cased and stemmed, without stop words and numbers.
fn words(text: &str) -> HashSet<String> {
    let mut found = HashSet::new();
    for token in text.split(|c: char| !c.is_alphanumeric()).filter(|t| !t.is_empty()) {
        for word in split_identifier(token) {
            let word = word.to_lowercase();
            if word.chars().all(|c| c.is_numeric()) || STOP_WORDS.contains(word.as_str()) {
                continue;
            }
            found.insert(STEMMER.stem(&word).into_owned());
        }
    }
    found
}

/// `parseConfig` → `parse`, `Config`; `HTMLParser` → `HTML`, `Parser`; `utf8` stays whole.
fn split_identifier(token: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = token.char_indices().collect();
    let mut parts = Vec::new();
    let mut start = 0;
    for i in 1..chars.len() {
        let (at, c) = chars[i];
        let prev = chars[i - 1].1;
        let next_lower = chars.get(i + 1).is_some_and(|(_, n)| n.is_lowercase());
        let hump =
            c.is_uppercase() && (prev.is_lowercase() || prev.is_numeric() || (prev.is_uppercase() && next_lower));
        if hump {
            parts.push(&token[start..at]);
            start = at;
        }
    }
    parts.push(&token[start..]);
    parts
}

/// The name a chunk of code is known by: the last part of its symbol path (`Bucket.load_bytecode` →
/// `load_bytecode`, `Date::from_utc` → `from_utc`), without the numbers that tell repeats (` #2`) and parts
/// (` (part 2)`) apart. None for a chunk named by its lines.
fn name(symbol: &str) -> Option<&str> {
    let mut symbol = symbol.trim();
    if let Some((head, tail)) = symbol.rsplit_once(" #")
        && tail.chars().all(|c| c.is_ascii_digit())
    {
        symbol = head;
    }
    if let Some((head, tail)) = symbol.rsplit_once(" (part ")
        && tail.ends_with(')')
    {
        symbol = head;
    }
    if symbol.strip_prefix("lines ").is_some_and(|l| l.chars().all(|c| c.is_ascii_digit() || c == '-')) {
        return None;
    }
    let last = symbol.rsplit(['.', ':', '/']).next().unwrap_or(symbol).trim();
    Some(last).filter(|n| !n.is_empty())
}

/// A query's words, to compare chunk names with.
#[derive(Debug, Clone, Default)]
pub struct QueryWords(HashSet<String>);

impl QueryWords {
    pub fn of(text: &str) -> Self {
        Self(words(text))
    }

    /// The share of a code chunk's name words the query says, in [0, 1]; None for a memory that is not source code
    /// or a chunk named by its lines.
    pub fn share_of_name(&self, memory: &Memory) -> Option<f64> {
        if !memory.is_source_code() {
            return None;
        }
        let name_words = words(name(&memory.anchor.as_ref()?.symbol)?);
        if name_words.is_empty() {
            return None;
        }
        let said = name_words.iter().filter(|w| self.0.contains(*w)).count();
        Some(said as f64 / name_words.len() as f64)
    }
}

/// A relevance in [0, 1] moved [`NAMED_PULL`] times `name_said` (the share of a chunk's name the query says,
/// [`QueryWords::share_of_name`]; 0 for a memory without a name) of the way to 1.
pub fn pulled(relevance: f64, name_said: f64) -> f64 {
    relevance + NAMED_PULL * name_said * (1.0 - relevance)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(symbol: &str) -> Memory {
        let mut memory = Memory::test_fixture();
        memory.file_path = Some("src/lib.rs".into());
        memory.language = Some("rust".into());
        memory.anchor = Some(crate::domain::Anchor { symbol: symbol.into(), hash: None, start_line: 1, end_line: 2 });
        memory
    }

    #[test]
    fn a_name_is_the_last_part_of_its_symbol_without_repeat_or_part_numbers() {
        assert_eq!(name("Bucket.load_bytecode"), Some("load_bytecode"));
        assert_eq!(name("Date::from_utc"), Some("from_utc"));
        assert_eq!(name("A::fmt #2"), Some("fmt"));
        assert_eq!(name("A::fmt (part 2) #2"), Some("fmt"));
        assert_eq!(name("lines 1-38"), None);
    }

    #[test]
    fn words_split_identifiers_stem_and_drop_stop_words() {
        let expected: HashSet<String> = ["pars", "config"].map(String::from).into();
        assert_eq!(words("parseConfig"), expected);
        assert_eq!(words("parse_config"), expected);
        assert_eq!(words("the ParseConfig of 2024"), expected);
        let html: HashSet<String> = ["html", "parser"].map(String::from).into();
        assert_eq!(words("HTMLParser"), html);
    }

    #[test]
    fn the_share_of_a_code_chunks_name_the_query_says() {
        let query = QueryWords::of("Loads bytecode from a file");
        assert_eq!(query.share_of_name(&code("Bucket.load_bytecode")), Some(1.0));
        assert_eq!(query.share_of_name(&code("Bucket.write_bytecode")), Some(0.5));
        assert_eq!(query.share_of_name(&code("Bucket.reset")), Some(0.0));
        assert_eq!(query.share_of_name(&code("lines 1-38")), None);
        let mut prose = code("Bucket.load_bytecode");
        prose.language = Some("markdown".into());
        assert_eq!(query.share_of_name(&prose), None, "only source code has a name that counts");
        assert_eq!(query.share_of_name(&Memory::test_fixture()), None);
    }
}
