//! The languages the chunker knows, by file extension.

use serde::{Deserialize, Serialize};

/// A file's language: the source languages parsed with tree-sitter, Markdown, and other text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Language {
    Rust,
    Python,
    TypeScript,
    Tsx,
    JavaScript,
    Go,
    Markdown,
    Text,
}

/// Extensions of text files that are chunked by size (the languages above are recognised by their own).
const TEXT_EXTENSIONS: &[&str] =
    &["txt", "rst", "toml", "yaml", "yml", "json", "ini", "cfg", "sql", "sh", "proto", "graphql", "html", "css"];

impl Language {
    pub const ALL: [Language; 8] = [
        Language::Rust,
        Language::Python,
        Language::TypeScript,
        Language::Tsx,
        Language::JavaScript,
        Language::Go,
        Language::Markdown,
        Language::Text,
    ];

    /// The language of a path, or None for a file the chunker does not read (binaries, unknown extensions).
    pub fn of_path(path: &str) -> Option<Self> {
        let name = path.rsplit('/').next().unwrap_or(path);
        let extension = name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()).unwrap_or_default();
        Some(match extension.as_str() {
            "rs" => Language::Rust,
            "py" | "pyi" => Language::Python,
            "ts" | "mts" | "cts" => Language::TypeScript,
            "tsx" => Language::Tsx,
            "js" | "mjs" | "cjs" | "jsx" => Language::JavaScript,
            "go" => Language::Go,
            "md" | "markdown" => Language::Markdown,
            e if TEXT_EXTENSIONS.contains(&e) => Language::Text,
            _ if matches!(name, "Makefile" | "Dockerfile" | "LICENSE" | "README") => Language::Text,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Language::Rust => "rust",
            Language::Python => "python",
            Language::TypeScript => "typescript",
            Language::Tsx => "tsx",
            Language::JavaScript => "javascript",
            Language::Go => "go",
            Language::Markdown => "markdown",
            Language::Text => "text",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.as_str() == text)
    }

    /// A programming language (parsed into symbols), not prose.
    pub fn is_source(self) -> bool {
        !matches!(self, Language::Markdown | Language::Text)
    }

    /// How the language writes a member's path: `config::parse`, `Server.handle`.
    pub fn separator(self) -> &'static str {
        if self == Language::Rust { "::" } else { "." }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn languages_follow_extensions_and_round_trip_their_names() {
        assert!(Language::Go.is_source() && !Language::Markdown.is_source());
        assert_eq!(Language::of_path("src/auth/login.rs"), Some(Language::Rust));
        assert_eq!(Language::of_path("web/App.TSX"), Some(Language::Tsx));
        assert_eq!(Language::of_path("docs/guide.md"), Some(Language::Markdown));
        assert_eq!(Language::of_path("Makefile"), Some(Language::Text));
        assert_eq!(Language::of_path("assets/logo.png"), None);
        for language in Language::ALL {
            assert_eq!(Language::parse(language.as_str()), Some(language));
        }
    }
}
