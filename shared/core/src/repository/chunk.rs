//! Structure-aware chunks of a repository's files. Source code is split along its declarations (tree-sitter), each
//! chunk named by its symbol path (`config::parse`, `Server.handle`) and carrying, as index-time context, the file's
//! path and language and the enclosing declarations' signatures; Markdown along its headings, named by the
//! breadcrumb (`Install > From source`); other text by size. Every chunk is at most [`MAX_CHUNK_BYTES`]: a longer
//! declaration is split into parts, each with the declaration's signature as context. Symbols are unique within a
//! file, so a symbol is an anchor that survives edits elsewhere in the file.
//!
//! Chunking is bounded whatever the file holds: containers nested deeper than [`MAX_NESTING`] are chunks of their
//! own (not walked into), the parser stops after [`PARSE_BUDGET`], a file that would give more than
//! [`MAX_CHUNKS_PER_FILE`] declarations is chunked by size instead, and a panic is an error, not a crash. The
//! caller bounds the file's size (`MEMORY_FILE_MAX_BYTES`).

use std::{
    ops::ControlFlow,
    time::{Duration, Instant},
};

use tree_sitter::{Node, ParseOptions, Parser};

use super::Language;
use crate::domain::content_hash;

/// The largest chunk, in bytes of text.
pub const MAX_CHUNK_BYTES: usize = 4096;
/// The most of a declaration's first line carried as a signature (of a split declaration or an enclosing one).
const MAX_SIGNATURE_BYTES: usize = 200;
/// The longest context (ingest takes at most 8 KiB) and symbol (at most 1,000 bytes).
const MAX_CONTEXT_BYTES: usize = 2048;
const MAX_SYMBOL_BYTES: usize = 400;
/// The deepest nesting of containers (`mod`, `impl`, `trait`, `class`) whose members are chunks of their own; a
/// container deeper than this is one chunk (in parts when long).
pub const MAX_NESTING: usize = 8;
/// The most chunks one file gives: a file with more declarations (or headings) is chunked by size, which gives at
/// most about two for each [`MAX_CHUNK_BYTES`] of text.
pub const MAX_CHUNKS_PER_FILE: usize = 4096;
/// The longest the parser may take over one file.
pub const PARSE_BUDGET: Duration = Duration::from_secs(5);

/// Why a file gave no chunks: it is recorded as unreadable, and whatever read it goes on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    #[error("over budget: parsing took longer than {}s", PARSE_BUDGET.as_secs())]
    OverTime,
    #[error("the chunker failed on this file: {0}")]
    Failed(String),
}

/// One chunk of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The anchor within the file: a symbol path, a heading breadcrumb, or `lines a-b`.
    pub symbol: String,
    /// What it is: `function`, `method`, `class`, `struct`, `section`, `text`, ...
    pub kind: &'static str,
    /// First and last line, 1-based and inclusive.
    pub start_line: u32,
    pub end_line: u32,
    pub text: String,
    /// Index-time context (path, language, enclosing declarations, signature): embedded and indexed with
    /// the text, never returned as content.
    pub context: String,
}

impl Chunk {
    /// The chunk's own hash: what the file scan compares.
    pub fn hash(&self) -> String {
        content_hash(self.text.as_bytes())
    }
}

/// The chunks of a file of `language`. Runs on the caller's thread: async callers run it with `spawn_blocking`.
pub fn chunk_file(path: &str, language: Language, text: &str) -> Result<Vec<Chunk>, ChunkError> {
    std::panic::catch_unwind(|| chunks_of(path, language, text)).unwrap_or_else(|panic| {
        let why = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        Err(ChunkError::Failed(why))
    })
}

fn chunks_of(path: &str, language: Language, text: &str) -> Result<Vec<Chunk>, ChunkError> {
    let header = format!("path: {path}\nlanguage: {}", language.as_str());
    let chunks = match language {
        Language::Markdown => markdown(text, &header).unwrap_or_else(|| by_size(text, 0, "text", &header)),
        Language::Text => by_size(text, 0, "text", &header),
        source => match declarations(source, text, &header)? {
            Some(chunks) => chunks,
            None => by_size(text, 0, "text", &header),
        },
    };
    let bounded_chunks = chunks.into_iter().map(|mut chunk| {
        if chunk.symbol.trim().is_empty() {
            chunk.symbol = format!("lines {}-{}", chunk.start_line, chunk.end_line);
        }
        // Room for the ` #n` that tells a repeated symbol apart.
        chunk.symbol = bounded(&chunk.symbol, MAX_SYMBOL_BYTES - 16).to_string();
        chunk.context = bounded(&chunk.context, MAX_CONTEXT_BYTES).to_string();
        chunk
    });
    Ok(unique_symbols(bounded_chunks.collect()))
}

/// Byte offsets at which lines start, for 1-based line numbers.
struct Lines(Vec<usize>);

impl Lines {
    fn of(text: &str) -> Self {
        Self(std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect())
    }

    fn line(&self, offset: usize) -> u32 {
        self.0.partition_point(|&start| start <= offset) as u32
    }

    /// Where the line holding `offset` starts.
    fn start_of(&self, offset: usize) -> usize {
        self.0[self.line(offset) as usize - 1]
    }
}

/// Splits `text` (starting at line `first_line` + 1) into chunks of whole lines of at most [`MAX_CHUNK_BYTES`],
/// named by their line ranges.
fn by_size(text: &str, first_line: u32, kind: &'static str, context: &str) -> Vec<Chunk> {
    split_lines(text)
        .into_iter()
        .filter(|(_, _, part)| !part.trim().is_empty())
        .map(|(start, end, part)| Chunk {
            symbol: format!("lines {}-{}", first_line + start, first_line + end),
            kind,
            start_line: first_line + start,
            end_line: first_line + end,
            text: part.trim().to_string(),
            context: context.to_string(),
        })
        .collect()
}

/// Groups of whole lines of at most [`MAX_CHUNK_BYTES`] (a longer line is cut at a character boundary): (first
/// line, last line, text), lines counted from 1.
fn split_lines(text: &str) -> Vec<(u32, u32, String)> {
    let mut parts: Vec<(u32, u32, String)> = Vec::new();
    let mut current = String::new();
    let mut start = 1;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let number = i as u32 + 1;
        if !current.is_empty() && current.len() + line.len() > MAX_CHUNK_BYTES {
            parts.push((start, number - 1, std::mem::take(&mut current)));
            start = number;
        }
        let mut line = line;
        while line.len() > MAX_CHUNK_BYTES {
            let cut = (0..=MAX_CHUNK_BYTES).rev().find(|&i| line.is_char_boundary(i)).unwrap_or(0);
            parts.push((number, number, line[..cut].to_string()));
            line = &line[cut..];
            start = number;
        }
        current.push_str(line);
    }
    if !current.is_empty() {
        let end = start.max(text.split_inclusive('\n').count() as u32);
        parts.push((start, end, current));
    }
    parts
}

/// A second chunk with the same symbol in one file is named `symbol #2`, and so on.
fn unique_symbols(chunks: Vec<Chunk>) -> Vec<Chunk> {
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    chunks
        .into_iter()
        .map(|mut chunk| {
            let n = seen.entry(chunk.symbol.clone()).or_default();
            *n += 1;
            if *n > 1 {
                chunk.symbol = format!("{} #{n}", chunk.symbol);
            }
            chunk
        })
        .collect()
}

/// What a syntax node is to the chunker.
enum Declaration<'t> {
    /// A declaration that is one chunk (split if too long).
    Leaf { name: String, kind: &'static str },
    /// A declaration whose members are chunks of their own: its header is a chunk when `header` is set.
    Container { name: String, kind: &'static str, body: Node<'t>, header: bool },
}

/// The declarations of a source file; None when the grammar finds none (the file is then chunked by size), or when
/// there are more than [`MAX_CHUNKS_PER_FILE`].
fn declarations(language: Language, text: &str, header: &str) -> Result<Option<Vec<Chunk>>, ChunkError> {
    let mut parser = Parser::new();
    let Some(grammar) = grammar(language) else { return Ok(None) };
    if parser.set_language(&grammar).is_err() {
        return Ok(None);
    }
    let started = Instant::now();
    let mut within_budget = |_: &tree_sitter::ParseState| {
        if started.elapsed() > PARSE_BUDGET { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
    };
    let bytes = text.as_bytes();
    let mut input = |offset: usize, _| &bytes[offset.min(bytes.len())..];
    let options = ParseOptions::new().progress_callback(&mut within_budget);
    let Some(tree) = parser.parse_with_options(&mut input, None, Some(options)) else {
        return Err(ChunkError::OverTime);
    };
    let mut walker = Walker {
        language,
        text,
        lines: Lines::of(text),
        context: header.to_string(),
        path: Vec::new(),
        enclosing: Vec::new(),
        chunks: Vec::new(),
    };
    if walker.walk(tree.root_node()).is_break() || walker.chunks.is_empty() {
        return Ok(None);
    }
    Ok(Some(walker.chunks))
}

struct Walker<'a> {
    language: Language,
    text: &'a str,
    lines: Lines,
    /// Path and language.
    context: String,
    /// The names of the containers being walked, outermost first (one stack for the whole walk).
    path: Vec<String>,
    /// Their signatures, in the same order.
    enclosing: Vec<String>,
    chunks: Vec<Chunk>,
}

impl<'a> Walker<'a> {
    fn source(&self, node: Node) -> &'a str {
        &self.text[node.byte_range()]
    }

    fn field(&self, node: Node, name: &str) -> Option<String> {
        node.child_by_field_name(name).map(|n| self.source(n).to_string())
    }

    /// Chunks the declarations among `node`'s children; breaks when the file has more than
    /// [`MAX_CHUNKS_PER_FILE`]. Recurses only into containers, at most [`MAX_NESTING`] deep.
    fn walk(&mut self, node: Node<'a>) -> ControlFlow<()> {
        let mut cursor = node.walk();
        let children: Vec<Node<'a>> = node.named_children(&mut cursor).collect();
        for (i, child) in children.iter().enumerate() {
            if self.chunks.len() > MAX_CHUNKS_PER_FILE {
                return ControlFlow::Break(());
            }
            let Some((declaration, inner)) = self.classify(*child, self.path.is_empty()) else { continue };
            let start = self.leading_start(&children[..i], *child);
            match declaration {
                Declaration::Leaf { name, kind } => {
                    let symbol = self.join(&name);
                    self.emit(&symbol, kind, start, child.end_byte());
                }
                Declaration::Container { name, kind, .. } if self.path.len() >= MAX_NESTING => {
                    let symbol = self.join(&name);
                    self.emit(&symbol, kind, start, child.end_byte());
                }
                Declaration::Container { name, kind, body, header } => {
                    let symbol = self.join(&name);
                    if header {
                        let end = self.first_member_start(body).unwrap_or(child.end_byte());
                        self.emit(&symbol, kind, start, end);
                    }
                    let first_line = self.source(inner).lines().next().unwrap_or_default().trim();
                    self.enclosing.push(bounded(first_line, MAX_SIGNATURE_BYTES).to_string());
                    self.path.push(name);
                    let walked = self.walk(body);
                    self.path.pop();
                    self.enclosing.pop();
                    walked?;
                }
            }
        }
        ControlFlow::Continue(())
    }

    /// Where the first declaration of a container's body starts, with its leading comments.
    fn first_member_start(&self, body: Node<'a>) -> Option<usize> {
        let mut cursor = body.walk();
        let members: Vec<Node> = body.named_children(&mut cursor).collect();
        let at = members.iter().position(|m| self.classify(*m, false).is_some())?;
        Some(self.leading_start(&members[..at], members[at]))
    }

    fn join(&self, name: &str) -> String {
        let separator = self.language.separator();
        let mut symbol = String::new();
        for part in self.path.iter().map(String::as_str).chain([name]) {
            if !symbol.is_empty() {
                symbol.push_str(separator);
            }
            symbol.push_str(part);
        }
        symbol
    }

    /// Where a declaration starts with the comments and attributes right above it.
    fn leading_start(&self, before: &[Node], node: Node) -> usize {
        let mut start = node.start_byte();
        let mut row = node.start_position().row;
        for previous in before.iter().rev() {
            let kind = previous.kind();
            // A module's own documentation (`//!`, `/*!`) is not its first item's.
            let inner_doc = self.source(*previous).starts_with("//!") || self.source(*previous).starts_with("/*!");
            let attached = (kind.contains("comment") && !inner_doc) || kind == "attribute_item" || kind == "decorator";
            // A line comment's node may end at the start of the next line.
            let end = previous.end_position();
            let last_row = if end.column == 0 && end.row > 0 { end.row - 1 } else { end.row };
            if !attached || last_row + 1 < row {
                break;
            }
            start = previous.start_byte();
            row = previous.start_position().row;
        }
        start
    }

    /// One declaration's chunk, or its parts when it is too long (each with the signature as context).
    fn emit(&mut self, symbol: &str, kind: &'static str, start: usize, end: usize) {
        // Whole lines, from the start of the first (when only indentation precedes the declaration on its line: a
        // line of many declarations, minified code, gives each its own text), without their common indentation.
        let indentation = self.text[..start].bytes().rev().take_while(|b| *b == b' ' || *b == b'\t').count();
        let line_start = self.lines.start_of(start);
        let start = if start - indentation == line_start { line_start } else { start };
        let dedented = dedent(&self.text[start..end]);
        let text = dedented.as_str();
        if text.is_empty() {
            return;
        }
        let first_line = self.lines.line(start);
        let mut context = self.context.clone();
        if !self.enclosing.is_empty() {
            context.push_str("\nin: ");
            context.push_str(&self.enclosing.join(" > "));
        }
        if text.len() <= MAX_CHUNK_BYTES {
            self.chunks.push(Chunk {
                symbol: symbol.to_string(),
                kind,
                start_line: first_line,
                end_line: first_line + text.lines().count().max(1) as u32 - 1,
                text: text.to_string(),
                context,
            });
            return;
        }
        let signature = text.lines().find(|l| !l.trim_start().starts_with(['/', '#', '@'])).unwrap_or_default();
        context.push_str("\nsignature: ");
        context.push_str(bounded(signature.trim(), MAX_SIGNATURE_BYTES));
        for (part, (from, to, part_text)) in split_lines(text).into_iter().enumerate() {
            let symbol = if part == 0 { symbol.to_string() } else { format!("{symbol} (part {})", part + 1) };
            self.chunks.push(Chunk {
                symbol,
                kind,
                start_line: first_line + from - 1,
                end_line: first_line + to - 1,
                text: part_text.trim().to_string(),
                context: context.clone(),
            });
        }
    }

    /// What `node` declares, and the node the declaration's signature is read from.
    fn classify(&self, node: Node<'a>, top_level: bool) -> Option<(Declaration<'a>, Node<'a>)> {
        let name = |field: &str| self.field(node, field);
        let leaf = |name: Option<String>, kind| name.map(|name| (Declaration::Leaf { name, kind }, node));
        let container = |name: Option<String>, kind, header| {
            let body = node.child_by_field_name("body")?;
            Some((Declaration::Container { name: name?, kind, body, header }, node))
        };
        match (self.language, node.kind()) {
            (Language::Rust, "function_item" | "function_signature_item") => leaf(name("name"), "function"),
            (Language::Rust, "struct_item" | "union_item") => leaf(name("name"), "struct"),
            (Language::Rust, "enum_item") => leaf(name("name"), "enum"),
            (Language::Rust, "type_item") => leaf(name("name"), "type"),
            (Language::Rust, "const_item" | "static_item") => leaf(name("name"), "constant"),
            (Language::Rust, "macro_definition") => leaf(name("name"), "macro"),
            (Language::Rust, "trait_item") => container(name("name"), "trait", true),
            // `impl<T> Display for Wrapper<T>`: the members are `Wrapper::...`.
            (Language::Rust, "impl_item") => container(
                name("type").map(|t| t.split('<').next().unwrap_or_default().trim().to_string()),
                "impl",
                false,
            ),
            (Language::Rust, "mod_item") => container(name("name"), "module", false),
            (Language::Python, "function_definition") => leaf(name("name"), "function"),
            (Language::Python, "class_definition") => container(name("name"), "class", true),
            (Language::Python, "decorated_definition") => self.wrapped(node, "definition", top_level),
            (Language::Go, "function_declaration") => leaf(name("name"), "function"),
            (Language::Go, "method_declaration") => {
                let receiver = node.child_by_field_name("receiver").map(|r| self.receiver_type(r));
                let name = name("name").map(|n| match receiver.flatten() {
                    Some(receiver) => format!("{receiver}.{n}"),
                    None => n,
                });
                leaf(name, "method")
            }
            (Language::Go, "type_declaration") => leaf(self.first_named(node, "type_spec", "name"), "type"),
            (Language::Go, "const_declaration" | "var_declaration") if top_level => {
                let spec = if node.kind() == "const_declaration" { "const_spec" } else { "var_spec" };
                leaf(self.first_named(node, spec, "name"), "constant")
            }
            (_, "function_declaration" | "generator_function_declaration") => leaf(name("name"), "function"),
            (_, "method_definition") => leaf(name("name"), "method"),
            (_, "class_declaration" | "abstract_class_declaration" | "class") => container(name("name"), "class", true),
            (_, "interface_declaration") => leaf(name("name"), "interface"),
            (_, "type_alias_declaration") => leaf(name("name"), "type"),
            (_, "enum_declaration") => leaf(name("name"), "enum"),
            (_, "lexical_declaration" | "variable_declaration") if top_level => {
                leaf(self.first_named(node, "variable_declarator", "name"), "constant")
            }
            (_, "export_statement") => self.wrapped(node, "declaration", top_level),
            _ => None,
        }
    }

    /// A declaration wrapped in another node (`export`, a decorator): classified as the inner one, spanning both.
    fn wrapped(&self, node: Node<'a>, field: &str, top_level: bool) -> Option<(Declaration<'a>, Node<'a>)> {
        let inner = node.child_by_field_name(field)?;
        let (declaration, _) = self.classify(inner, top_level)?;
        Some((declaration, inner))
    }

    /// The `field` of the first named child of kind `kind`.
    fn first_named(&self, node: Node, kind: &str, field: &str) -> Option<String> {
        let mut cursor = node.walk();
        let found = node.named_children(&mut cursor).find(|c| c.kind() == kind);
        found.and_then(|c| self.field(c, field))
    }

    /// The type a Go method's receiver names (`*Server` and `Server[T]` are `Server`).
    fn receiver_type(&self, receiver: Node) -> Option<String> {
        let mut stack = vec![receiver];
        while let Some(node) = stack.pop() {
            if node.kind() == "type_identifier" {
                return Some(self.source(node).to_string());
            }
            let mut cursor = node.walk();
            let children: Vec<Node> = node.named_children(&mut cursor).collect();
            stack.extend(children.into_iter().rev());
        }
        None
    }
}

/// The lines without the indentation they all share, trimmed: a chunk's text as stored (ingest trims content).
fn dedent(text: &str) -> String {
    // Indentation is ASCII spaces and tabs, so every cut falls on a character boundary.
    let indentation = |l: &str| l.bytes().take_while(|b| *b == b' ' || *b == b'\t').count();
    let indent = text.lines().filter(|l| !l.trim().is_empty()).map(indentation).min().unwrap_or(0);
    let lines: Vec<&str> = text.lines().map(|l| &l[indentation(l).min(indent)..]).collect();
    lines.join("\n").trim().to_string()
}

/// `text` cut to at most `max` bytes at a character boundary.
fn bounded(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let cut = (0..=max).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    &text[..cut]
}

/// Markdown sections: each heading with what follows it up to the next heading, named by the breadcrumb of its
/// enclosing headings (`Guide > Install > From source`); text before the first heading is `(preamble)`. A title is
/// its words (images and badges left out, spaces collapsed). None when there are more than [`MAX_CHUNKS_PER_FILE`].
fn markdown(text: &str, header: &str) -> Option<Vec<Chunk>> {
    use pulldown_cmark::{Event, HeadingLevel, Parser, Tag, TagEnd};
    let lines = Lines::of(text);
    // (start offset, level, title) of each heading.
    let mut headings: Vec<(usize, usize, String)> = Vec::new();
    let mut open: Option<(usize, usize, String)> = None;
    let mut in_image = 0usize;
    for (event, range) in Parser::new(text).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { level, .. }) => {
                let depth = match level {
                    HeadingLevel::H1 => 1,
                    HeadingLevel::H2 => 2,
                    HeadingLevel::H3 => 3,
                    HeadingLevel::H4 => 4,
                    HeadingLevel::H5 => 5,
                    HeadingLevel::H6 => 6,
                };
                open = Some((range.start, depth, String::new()));
            }
            Event::Start(Tag::Image { .. }) => in_image += 1,
            Event::End(TagEnd::Image) => in_image = in_image.saturating_sub(1),
            Event::Text(t) | Event::Code(t) if in_image == 0 => {
                if let Some((_, _, title)) = open.as_mut() {
                    title.push_str(&t);
                    title.push(' ');
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                headings.extend(open.take().map(|(start, depth, title)| (start, depth, words(&title))));
                if headings.len() > MAX_CHUNKS_PER_FILE {
                    return None;
                }
            }
            _ => {}
        }
    }
    let mut sections: Vec<(usize, usize, String)> = Vec::new(); // (start, end, breadcrumb)
    let first = headings.first().map_or(text.len(), |h| h.0);
    if !text[..first].trim().is_empty() {
        sections.push((0, first, "(preamble)".into()));
    }
    let mut trail: Vec<(usize, String)> = Vec::new();
    for (i, (start, depth, title)) in headings.iter().enumerate() {
        trail.retain(|(d, _)| d < depth);
        trail.push((*depth, title.clone()));
        let end = headings.get(i + 1).map_or(text.len(), |h| h.0);
        sections.push((*start, end, trail.iter().map(|(_, t)| t.as_str()).collect::<Vec<_>>().join(" > ")));
    }
    let mut chunks = Vec::new();
    for (start, end, breadcrumb) in sections {
        let body = text[start..end].trim_end();
        if body.trim().is_empty() {
            continue;
        }
        let first_line = lines.line(start);
        let context = format!("{header}\nsection: {breadcrumb}");
        for (part, (from, to, part_text)) in split_lines(body).into_iter().enumerate() {
            let symbol = if part == 0 { breadcrumb.clone() } else { format!("{breadcrumb} (part {})", part + 1) };
            chunks.push(Chunk {
                symbol,
                kind: "section",
                start_line: first_line + from - 1,
                end_line: first_line + to - 1,
                text: part_text.trim().to_string(),
                context: context.clone(),
            });
        }
        if chunks.len() > MAX_CHUNKS_PER_FILE {
            return None;
        }
    }
    Some(chunks)
}

/// The words of `text` separated by single spaces (any run of Unicode white space is one).
fn words(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The tree-sitter grammar of a source language.
fn grammar(language: Language) -> Option<tree_sitter::Language> {
    Some(match language {
        Language::Rust => tree_sitter_rust::LANGUAGE.into(),
        Language::Python => tree_sitter_python::LANGUAGE.into(),
        Language::TypeScript => tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
        Language::Tsx => tree_sitter_typescript::LANGUAGE_TSX.into(),
        Language::JavaScript => tree_sitter_javascript::LANGUAGE.into(),
        Language::Go => tree_sitter_go::LANGUAGE.into(),
        Language::Markdown | Language::Text => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunked(path: &str, language: Language, text: &str) -> Vec<Chunk> {
        chunk_file(path, language, text).expect("chunked")
    }

    fn symbols(chunks: &[Chunk]) -> Vec<&str> {
        chunks.iter().map(|c| c.symbol.as_str()).collect()
    }

    #[test]
    fn rust_splits_along_items_with_impl_members_under_their_type() {
        let text = "use std::fs;\n\n/// Reads the config.\npub fn parse(path: &str) -> Config {\n    Config::read(path)\n}\n\n\
                    #[derive(Debug)]\npub struct Config {\n    port: u16,\n}\n\nimpl Config {\n    \
                    /// The port.\n    pub fn port(&self) -> u16 {\n        self.port\n    }\n}\n\n\
                    mod inner {\n    fn helper() {}\n}\n";
        let chunks = chunked("src/config.rs", Language::Rust, text);
        assert_eq!(symbols(&chunks), ["parse", "Config", "Config::port", "inner::helper"]);
        let documented = chunked("lib.rs", Language::Rust, "//! The crate.\n\n/// A.\npub struct A;\n");
        assert_eq!(documented[0].text, "/// A.\npub struct A;", "the module's documentation stays out");
        let parse = &chunks[0];
        assert!(parse.text.starts_with("/// Reads the config."), "the doc comment belongs to its function");
        assert_eq!((parse.start_line, parse.end_line), (3, 6));
        assert!(parse.context.contains("path: src/config.rs") && !parse.context.contains("use std::fs"));
        assert!(chunks[1].text.starts_with("#[derive(Debug)]"), "attributes belong to their item");
        let port = &chunks[2];
        assert!(port.text.starts_with("/// The port.\npub fn port"), "dedented: {:?}", port.text);
        assert!(port.text.ends_with("\n    self.port\n}"), "inner indentation kept: {:?}", port.text);
        assert!(port.context.contains("in: impl Config {"), "{}", port.context);
    }

    #[test]
    fn python_go_and_typescript_name_members_by_their_class_or_receiver() {
        let python = "import os\n\nclass Server:\n    \"\"\"Serves.\"\"\"\n\n    @staticmethod\n    def handle(r):\n        return r\n\ndef main():\n    pass\n";
        let chunks = chunked("app.py", Language::Python, python);
        assert_eq!(symbols(&chunks), ["Server", "Server.handle", "main"]);
        assert!(chunks[1].text.starts_with("@staticmethod\ndef handle(r):"));

        let go = "package main\n\nimport \"fmt\"\n\ntype Server struct{}\n\nfunc (s *Server) Handle() {\n\tfmt.Println()\n}\n\nfunc main() {}\n";
        assert_eq!(symbols(&chunked("main.go", Language::Go, go)), ["Server", "Server.Handle", "main"]);

        let ts = "import { x } from './x';\n\nexport class Store {\n  get(id: string): string {\n    return id;\n  }\n}\n\n\
                  export function parseConfig(text: string) {\n  return text;\n}\n\nexport interface Options { a: number }\n";
        let chunks = chunked("store.ts", Language::TypeScript, ts);
        assert_eq!(symbols(&chunks), ["Store", "Store.get", "parseConfig", "Options"]);
        assert!(chunks[2].text.starts_with("export function parseConfig"));
    }

    #[test]
    fn markdown_sections_carry_their_breadcrumb_and_long_declarations_are_split_with_their_signature() {
        let md = "Intro text.\n\n# Guide\n\nHello.\n\n## Install\n\nRun it.\n\n### From source\n\nBuild it.\n\n## Use\n\nCall it.\n";
        let chunks = chunked("README.md", Language::Markdown, md);
        assert_eq!(
            symbols(&chunks),
            ["(preamble)", "Guide", "Guide > Install", "Guide > Install > From source", "Guide > Use"]
        );
        assert!(chunks[3].context.ends_with("section: Guide > Install > From source"));
        assert_eq!(chunks[3].start_line, 11);

        let body: String = (0..400).map(|i| format!("    let value_{i} = {i};\n")).collect();
        let long = format!("fn long() {{\n{body}}}\n");
        let chunks = chunked("long.rs", Language::Rust, &long);
        assert!(chunks.len() > 1 && chunks.iter().all(|c| c.text.len() <= MAX_CHUNK_BYTES));
        assert_eq!(chunks[0].symbol, "long");
        assert_eq!(chunks[1].symbol, "long (part 2)");
        assert!(chunks[1].context.contains("signature: fn long() {"));
        assert_eq!(chunks.last().unwrap().end_line, 402);
    }

    #[test]
    fn odd_text_never_panics_and_every_chunk_is_bounded() {
        // Non-breaking spaces in the indentation of a member (cut by bytes, they would split a character).
        let nbsp = "impl A {\n    fn a() {\n \u{a0}\u{a0}x();\n    }\n}\n";
        assert!(!chunked("a.rs", Language::Rust, nbsp).is_empty());
        let minified = format!("class A {{ m() {{ return {}; }} }}\n", "1+".repeat(5000) + "1");
        let untitled = "#\n\ntext\n\n## \n\nmore\n";
        for (path, language, text) in
            [("m.js", Language::JavaScript, minified.as_str()), ("u.md", Language::Markdown, untitled)]
        {
            for chunk in chunked(path, language, text) {
                assert!(!chunk.symbol.trim().is_empty() && chunk.symbol.len() <= MAX_SYMBOL_BYTES);
                assert!(chunk.context.len() <= MAX_CONTEXT_BYTES && chunk.text.len() <= MAX_CHUNK_BYTES);
            }
        }
    }

    #[test]
    fn repeated_symbols_are_numbered_and_text_is_chunked_by_lines() {
        let text = "impl A {\n    fn fmt() {}\n}\nimpl<T> A<T> {\n    fn fmt() {}\n}\n";
        assert_eq!(symbols(&chunked("a.rs", Language::Rust, text)), ["A::fmt", "A::fmt #2"]);
        let chunks = chunked("notes.txt", Language::Text, "one\ntwo\n");
        assert_eq!((chunks[0].symbol.as_str(), chunks[0].end_line), ("lines 1-2", 2));
        assert!(chunked("empty.rs", Language::Rust, "").is_empty());
    }

    /// Runs `f` on a thread with a 2 MiB stack (a Tokio blocking thread's), as the services run the chunker.
    fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::Builder::new().stack_size(2 << 20).spawn(f).unwrap().join().unwrap()
    }

    #[test]
    fn nesting_deeper_than_the_limit_is_one_chunk_and_costs_no_more_than_the_file() {
        for (path, language, open, close) in [
            ("bomb.rs", Language::Rust, "mod a {\n", "}\n"),
            ("bomb.rs", Language::Rust, "impl A { fn f() { mod b {\n", "} } }\n"),
            ("bomb.ts", Language::TypeScript, "class A { m() { class B {\n", "} } }\n"),
            ("bomb.py", Language::Python, "class A:\n", ""),
        ] {
            let depth = 20_000;
            let text = if language == Language::Python {
                (0..depth).map(|i| format!("{}class A{i}:\n", " ".repeat(i % 200))).collect::<String>()
            } else {
                open.repeat(depth) + &close.repeat(depth)
            };
            let (started, size) = (Instant::now(), text.len());
            let (chunks, held) =
                on_small_stack(move || crate::fuzz::counting::peak_of(|| chunk_file(path, language, &text)));
            let chunks = chunks.unwrap_or_else(|e| panic!("{path}: {e}"));
            assert!(started.elapsed() < PARSE_BUDGET * 2, "{path}: {:?}", started.elapsed());
            assert!(held <= 32 * size + (32 << 20), "{path}: {held} bytes held for {size}");
            assert!(chunks.len() <= MAX_CHUNKS_PER_FILE + 1, "{path}: {} chunks", chunks.len());
            let separators = language.separator();
            for chunk in &chunks {
                assert!(chunk.symbol.matches(separators).count() <= MAX_NESTING + 1, "{path}: {}", chunk.symbol);
                assert!(chunk.text.len() <= MAX_CHUNK_BYTES && chunk.context.len() <= MAX_CONTEXT_BYTES);
            }
        }
        // At the limit the container is one chunk, named by its path.
        let nested = "mod a {\n".repeat(MAX_NESTING + 2) + "fn f() {}\n" + &"}\n".repeat(MAX_NESTING + 2);
        let chunks = chunked("n.rs", Language::Rust, &nested);
        assert_eq!(symbols(&chunks), [["a"; MAX_NESTING + 1].join("::")]);
    }

    #[test]
    fn a_file_of_more_declarations_than_the_budget_is_chunked_by_size() {
        let text: String = (0..MAX_CHUNKS_PER_FILE + 10).map(|i| format!("fn f{i}() {{}}\n")).collect();
        let chunks = chunked("many.rs", Language::Rust, &text);
        assert!(chunks.len() < 100 && chunks.iter().all(|c| c.symbol.starts_with("lines ")), "{}", chunks.len());
        let headings: String = (0..MAX_CHUNKS_PER_FILE + 10).map(|i| format!("# h{i}\n\ntext {i}\n\n")).collect();
        let chunks = chunked("many.md", Language::Markdown, &headings);
        assert!(chunks.len() < 200 && chunks.iter().all(|c| c.symbol.starts_with("lines ")), "{}", chunks.len());
    }

    #[test]
    fn a_heading_is_named_by_its_words_without_its_badges() {
        let md = "# Serde JSON \u{2003} [![Build Status](https://ci/badge.svg)](https://ci) [![Latest](https://b.svg)](x)\n\ntext\n\n## Use  `serde_json`\n\nmore\n";
        assert_eq!(
            symbols(&chunked("README.md", Language::Markdown, md)),
            ["Serde JSON", "Serde JSON > Use serde_json"]
        );
    }
}
