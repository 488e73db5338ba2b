//! Structure-aware chunks of a repository's files. Source code is split along its declarations (tree-sitter), each
//! chunk named by its symbol path (`config::parse`, `Server.handle`) and carrying, as index-time context, the file's
//! path and language and the enclosing declarations' signatures; Markdown along its headings, named by the
//! breadcrumb (`Install > From source`); other text by size. Every chunk is at most [`MAX_CHUNK_BYTES`]: a longer
//! declaration is split into parts, each with the declaration's signature as context. Symbols are unique within a
//! file, so a symbol is an anchor that survives edits elsewhere in the file.

use tree_sitter::{Node, Parser};

use super::Language;
use crate::domain::content_hash;

/// The largest chunk, in bytes of text.
pub const MAX_CHUNK_BYTES: usize = 4096;
/// The most of a declaration's first line carried as a signature (of a split declaration or an enclosing one).
const MAX_SIGNATURE_BYTES: usize = 200;
/// The longest context (ingest takes at most 8 KiB) and symbol (at most 1,000 bytes).
const MAX_CONTEXT_BYTES: usize = 2048;
const MAX_SYMBOL_BYTES: usize = 400;

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

/// The chunks of a file of `language`.
pub fn chunk_file(path: &str, language: Language, text: &str) -> Vec<Chunk> {
    let header = format!("path: {path}\nlanguage: {}", language.as_str());
    let chunks = match language {
        Language::Markdown => markdown(text, &header),
        Language::Text => by_size(text, 0, "text", &header),
        source => declarations(source, text, &header).unwrap_or_else(|| by_size(text, 0, "text", &header)),
    };
    let bounded_chunks = chunks.into_iter().map(|mut chunk| {
        if chunk.symbol.trim().is_empty() {
            chunk.symbol = format!("lines {}-{}", chunk.start_line, chunk.end_line);
        }
        chunk.symbol = bounded(&chunk.symbol, MAX_SYMBOL_BYTES).to_string();
        chunk.context = bounded(&chunk.context, MAX_CONTEXT_BYTES).to_string();
        chunk
    });
    unique_symbols(bounded_chunks.collect())
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

fn declarations(language: Language, text: &str, header: &str) -> Option<Vec<Chunk>> {
    let mut parser = Parser::new();
    parser.set_language(&language.grammar()?).ok()?;
    let tree = parser.parse(text, None)?;
    let root = tree.root_node();
    let mut walker = Walker { language, text, lines: Lines::of(text), context: header.to_string(), chunks: Vec::new() };
    walker.walk(root, &[], &[]);
    (!walker.chunks.is_empty()).then_some(walker.chunks)
}

struct Walker<'a> {
    language: Language,
    text: &'a str,
    lines: Lines,
    /// Path and language.
    context: String,
    chunks: Vec<Chunk>,
}

impl<'a> Walker<'a> {
    fn source(&self, node: Node) -> &'a str {
        &self.text[node.byte_range()]
    }

    fn field(&self, node: Node, name: &str) -> Option<String> {
        node.child_by_field_name(name).map(|n| self.source(n).to_string())
    }

    fn walk(&mut self, node: Node<'a>, path: &[String], enclosing: &[String]) {
        let mut cursor = node.walk();
        let children: Vec<Node<'a>> = node.named_children(&mut cursor).collect();
        for (i, child) in children.iter().enumerate() {
            let Some((declaration, inner)) = self.classify(*child, path.is_empty()) else { continue };
            let start = self.leading_start(&children[..i], *child);
            match declaration {
                Declaration::Leaf { name, kind } => {
                    let symbol = self.join(path, &name);
                    self.emit(&symbol, kind, start, child.end_byte(), enclosing);
                }
                Declaration::Container { name, kind, body, header } => {
                    let symbol = self.join(path, &name);
                    let first_member = {
                        let mut c = body.walk();
                        let members: Vec<Node> = body.named_children(&mut c).collect();
                        members.iter().find(|m| self.classify(**m, false).is_some()).map(|m| {
                            let at = members.iter().position(|x| x == m).unwrap_or(0);
                            self.leading_start(&members[..at], *m)
                        })
                    };
                    if header {
                        let end = first_member.unwrap_or(child.end_byte());
                        self.emit(&symbol, kind, start, end, enclosing);
                    }
                    let first_line = self.source(inner).lines().next().unwrap_or_default().trim();
                    let signature = bounded(first_line, MAX_SIGNATURE_BYTES).to_string();
                    let mut path = path.to_vec();
                    path.push(name);
                    let mut enclosing = enclosing.to_vec();
                    enclosing.push(signature);
                    self.walk(body, &path, &enclosing);
                }
            }
        }
    }

    fn join(&self, path: &[String], name: &str) -> String {
        let mut parts = path.to_vec();
        parts.push(name.to_string());
        parts.join(self.language.separator())
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
    fn emit(&mut self, symbol: &str, kind: &'static str, start: usize, end: usize, enclosing: &[String]) {
        // Whole lines, from the start of the first, without their common indentation.
        let start = self.text[..start].rfind('\n').map_or(0, |i| i + 1);
        let dedented = dedent(&self.text[start..end]);
        let text = dedented.as_str();
        if text.is_empty() {
            return;
        }
        let first_line = self.lines.line(start);
        let mut context = self.context.clone();
        if !enclosing.is_empty() {
            context.push_str("\nin: ");
            context.push_str(&enclosing.join(" > "));
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
/// enclosing headings (`Guide > Install > From source`); text before the first heading is `(preamble)`.
fn markdown(text: &str, header: &str) -> Vec<Chunk> {
    use pulldown_cmark::{Event, HeadingLevel, Parser, Tag, TagEnd};
    let lines = Lines::of(text);
    // (start offset, level, title) of each heading.
    let mut headings: Vec<(usize, usize, String)> = Vec::new();
    let mut open: Option<(usize, usize, String)> = None;
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
            Event::Text(t) | Event::Code(t) => {
                if let Some((_, _, title)) = open.as_mut() {
                    title.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => headings.extend(open.take()),
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
        trail.push((*depth, title.trim().to_string()));
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
    }
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn symbols(chunks: &[Chunk]) -> Vec<&str> {
        chunks.iter().map(|c| c.symbol.as_str()).collect()
    }

    #[test]
    fn rust_splits_along_items_with_impl_members_under_their_type() {
        let text = "use std::fs;\n\n/// Reads the config.\npub fn parse(path: &str) -> Config {\n    Config::read(path)\n}\n\n\
                    #[derive(Debug)]\npub struct Config {\n    port: u16,\n}\n\nimpl Config {\n    \
                    /// The port.\n    pub fn port(&self) -> u16 {\n        self.port\n    }\n}\n\n\
                    mod inner {\n    fn helper() {}\n}\n";
        let chunks = chunk_file("src/config.rs", Language::Rust, text);
        assert_eq!(symbols(&chunks), ["parse", "Config", "Config::port", "inner::helper"]);
        let documented = chunk_file("lib.rs", Language::Rust, "//! The crate.\n\n/// A.\npub struct A;\n");
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
        let chunks = chunk_file("app.py", Language::Python, python);
        assert_eq!(symbols(&chunks), ["Server", "Server.handle", "main"]);
        assert!(chunks[1].text.starts_with("@staticmethod\ndef handle(r):"));

        let go = "package main\n\nimport \"fmt\"\n\ntype Server struct{}\n\nfunc (s *Server) Handle() {\n\tfmt.Println()\n}\n\nfunc main() {}\n";
        assert_eq!(symbols(&chunk_file("main.go", Language::Go, go)), ["Server", "Server.Handle", "main"]);

        let ts = "import { x } from './x';\n\nexport class Store {\n  get(id: string): string {\n    return id;\n  }\n}\n\n\
                  export function parseConfig(text: string) {\n  return text;\n}\n\nexport interface Options { a: number }\n";
        let chunks = chunk_file("store.ts", Language::TypeScript, ts);
        assert_eq!(symbols(&chunks), ["Store", "Store.get", "parseConfig", "Options"]);
        assert!(chunks[2].text.starts_with("export function parseConfig"));
    }

    #[test]
    fn markdown_sections_carry_their_breadcrumb_and_long_declarations_are_split_with_their_signature() {
        let md = "Intro text.\n\n# Guide\n\nHello.\n\n## Install\n\nRun it.\n\n### From source\n\nBuild it.\n\n## Use\n\nCall it.\n";
        let chunks = chunk_file("README.md", Language::Markdown, md);
        assert_eq!(
            symbols(&chunks),
            ["(preamble)", "Guide", "Guide > Install", "Guide > Install > From source", "Guide > Use"]
        );
        assert!(chunks[3].context.ends_with("section: Guide > Install > From source"));
        assert_eq!(chunks[3].start_line, 11);

        let body: String = (0..400).map(|i| format!("    let value_{i} = {i};\n")).collect();
        let long = format!("fn long() {{\n{body}}}\n");
        let chunks = chunk_file("long.rs", Language::Rust, &long);
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
        assert!(!chunk_file("a.rs", Language::Rust, nbsp).is_empty());
        let minified = format!("class A {{ m() {{ return {}; }} }}\n", "1+".repeat(5000) + "1");
        let untitled = "#\n\ntext\n\n## \n\nmore\n";
        for (path, language, text) in
            [("m.js", Language::JavaScript, minified.as_str()), ("u.md", Language::Markdown, untitled)]
        {
            for chunk in chunk_file(path, language, text) {
                assert!(!chunk.symbol.trim().is_empty() && chunk.symbol.len() <= MAX_SYMBOL_BYTES);
                assert!(chunk.context.len() <= MAX_CONTEXT_BYTES && chunk.text.len() <= MAX_CHUNK_BYTES);
            }
        }
    }

    #[test]
    fn repeated_symbols_are_numbered_and_text_is_chunked_by_lines() {
        let text = "impl A {\n    fn fmt() {}\n}\nimpl<T> A<T> {\n    fn fmt() {}\n}\n";
        assert_eq!(symbols(&chunk_file("a.rs", Language::Rust, text)), ["A::fmt", "A::fmt #2"]);
        let chunks = chunk_file("notes.txt", Language::Text, "one\ntwo\n");
        assert_eq!((chunks[0].symbol.as_str(), chunks[0].end_line), ("lines 1-2", 2));
        assert!(chunk_file("empty.rs", Language::Rust, "").is_empty());
    }
}
