//! A code-retrieval set from a repository, in the BEIR layout `memory-eval` reads: the repository's chunks
//! (`repository::chunk`) are the documents, each documented function or method a query. The query is the first paragraph
//! of the function's doc comment (Rust `///`, Go and TypeScript comments, Python docstrings); the function's
//! document is its chunk with that comment taken out, so the words of the query are not copied into the answer.
//! `--no-context` leaves the chunks' context (path, language, enclosing declarations, imports) out, to measure
//! what it adds.
//!
//! `--as-imported` takes a git repository as `memory-admin import-repo` imports it instead: the documents are the
//! ingest messages the import sends (`imported.jsonl`: every file's chunks, doc comments included, Markdown and text
//! too, secrets and ignored files left out), which `memory-eval` ingests as the ingest worker does; the queries are
//! the same doc paragraphs. What the evaluation sees is what a user who imported the repository gets.
//!
//!   code-to-beir --source DIR --out DIR [--no-context] [--min-words 4] [--as-imported]

use std::{
    io::Write,
    path::{Path, PathBuf},
};

use clap::Parser;
use memory_core::repository::{Language, Snapshot, chunk_file};
use serde_json::json;

#[derive(Parser)]
struct Args {
    /// A git repository (its HEAD) or a folder of source files.
    #[arg(long)]
    source: PathBuf,
    #[arg(long)]
    out: PathBuf,
    /// Leave the chunks' index-time context out.
    #[arg(long)]
    no_context: bool,
    /// Doc comments shorter than this many words make no query.
    #[arg(long, default_value_t = 4)]
    min_words: usize,
    /// The repository's chunks as import-repo sends them (doc comments kept), written as `imported.jsonl`.
    #[arg(long)]
    as_imported: bool,
}

/// The files of the source: (path relative to it, text).
fn files(source: &Path) -> anyhow::Result<Vec<(String, String)>> {
    if let Ok(snapshot) = Snapshot::open(source, "HEAD") {
        let mut out = Vec::new();
        for file in snapshot.files()?.0 {
            if let Some(Ok(text)) = snapshot.read(&file.path, 1 << 20)?.map(String::from_utf8) {
                out.push((file.path, text));
            }
        }
        return Ok(out);
    }
    let mut out = Vec::new();
    let mut stack = vec![source.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(text) = std::fs::read_to_string(&path) {
                out.push((path.strip_prefix(source)?.to_string_lossy().into_owned(), text));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The chunk's doc comment as a query, and the chunk without it; None for an undocumented chunk.
fn split_doc(language: Language, text: &str) -> Option<(String, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let (doc, rest): (Vec<String>, Vec<&str>) = match language {
        Language::Python => {
            // def f(...):\n    """Docstring."""
            let def = lines
                .iter()
                .position(|l| l.trim_start().starts_with("def ") || l.trim_start().starts_with("async def "))?;
            let body = lines.iter().skip(def + 1).position(|l| !l.trim().is_empty())? + def + 1;
            let first = lines[body].trim();
            let quote = ["\"\"\"", "'''"].into_iter().find(|q| first.starts_with(q))?;
            let end = (body..lines.len()).find(|&i| {
                let l = lines[i].trim();
                if i == body { l.len() >= 6 && l[3..].contains(quote) } else { l.contains(quote) }
            })?;
            let doc = lines[body..=end].iter().map(|l| l.trim().replace(quote, "")).collect();
            let rest = lines[..body].iter().chain(&lines[end + 1..]).copied().collect();
            (doc, rest)
        }
        _ => {
            let is_comment = |l: &str| {
                let t = l.trim_start();
                t.starts_with("//") || t.starts_with("/*") || t.starts_with('*')
            };
            let is_attribute = |l: &str| l.trim_start().starts_with("#[") || l.trim_start().starts_with('@');
            let mut doc = Vec::new();
            let mut rest = Vec::new();
            let mut in_header = true;
            for line in &lines {
                if in_header && is_comment(line) {
                    let t = line.trim_start().trim_start_matches(['/', '*', '!']).trim_end_matches(['*', '/']);
                    doc.push(t.trim().to_string());
                } else if in_header && is_attribute(line) {
                    rest.push(*line);
                } else {
                    in_header = false;
                    rest.push(*line);
                }
            }
            (doc, rest)
        }
    };
    // The first paragraph, without doc-test fences or markup.
    let paragraph: Vec<&str> =
        doc.iter().map(|l| l.trim()).skip_while(|l| l.is_empty()).take_while(|l| !l.is_empty()).collect();
    let query = paragraph.join(" ").replace('`', "");
    (!query.is_empty()).then(|| (query, rest.join("\n")))
}

/// The import's messages, and each documented function of them as a query of its own chunk.
fn as_imported(args: &Args) -> anyhow::Result<()> {
    use memory_core::repository::{exclude::Exclusions, import};
    let snapshot = Snapshot::open(&args.source, "HEAD")?;
    let name = args.source.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let target = import::ImportTarget {
        organization_id: uuid::Uuid::nil(),
        project_id: uuid::Uuid::nil(),
        repository: name,
        reference: "HEAD".into(),
        max_file_bytes: memory_core::repository::reader::DEFAULT_MAX_FILE_BYTES,
    };
    let plan = import::plan(&snapshot, &target, Exclusions::secrets()?)?;
    let mut imported = std::io::BufWriter::new(std::fs::File::create(args.out.join("imported.jsonl"))?);
    let mut queries = std::io::BufWriter::new(std::fs::File::create(args.out.join("queries.jsonl"))?);
    let mut qrels = std::io::BufWriter::new(std::fs::File::create(args.out.join("qrels/test.tsv"))?);
    writeln!(qrels, "query-id\tcorpus-id\tscore")?;
    let mut judged = 0;
    for batch in &plan.batches {
        writeln!(imported, "{}", serde_json::to_string(batch)?)?;
        for memory in &batch.memories {
            let (Some(path), Some(anchor)) = (&memory.file_path, &memory.anchor) else { continue };
            let Some(language) = Language::of_path(path) else { continue };
            let kind = memory.labels.get("chunk").map(String::as_str);
            if !matches!(kind, Some("function" | "method")) || matches!(language, Language::Markdown | Language::Text) {
                continue;
            }
            let Some((query, _)) = split_doc(language, &memory.content) else { continue };
            if query.split_whitespace().count() < args.min_words {
                continue;
            }
            let id = format!("{path}#{}", anchor.symbol);
            writeln!(queries, "{}", json!({"_id": id, "text": query}))?;
            writeln!(qrels, "{id}\t{id}\t1")?;
            judged += 1;
        }
    }
    eprintln!(
        "{} chunks of {} files ({} left out), {judged} documented functions as queries -> {}",
        plan.chunks,
        plan.files,
        plan.skipped.len(),
        args.out.display()
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    std::fs::create_dir_all(args.out.join("qrels"))?;
    if args.as_imported {
        return as_imported(&args);
    }
    let mut corpus = std::io::BufWriter::new(std::fs::File::create(args.out.join("corpus.jsonl"))?);
    let mut queries = std::io::BufWriter::new(std::fs::File::create(args.out.join("queries.jsonl"))?);
    let mut qrels = std::io::BufWriter::new(std::fs::File::create(args.out.join("qrels/test.tsv"))?);
    writeln!(qrels, "query-id\tcorpus-id\tscore")?;
    let (mut documents, mut judged) = (0, 0);
    for (path, text) in files(&args.source)? {
        let Some(language) = Language::of_path(&path) else { continue };
        if matches!(language, Language::Markdown | Language::Text) {
            continue;
        }
        for chunk in chunk_file(&path, language, &text)? {
            let id = format!("{path}#{}", chunk.symbol);
            let documented =
                matches!(chunk.kind, "function" | "method").then(|| split_doc(language, &chunk.text)).flatten();
            let body = match &documented {
                Some((query, rest)) if query.split_whitespace().count() >= args.min_words => {
                    writeln!(queries, "{}", json!({"_id": id, "text": query}))?;
                    writeln!(qrels, "{id}\t{id}\t1")?;
                    judged += 1;
                    rest.clone()
                }
                _ => chunk.text.clone(),
            };
            if body.trim().is_empty() {
                continue;
            }
            let context = (!args.no_context).then_some(&chunk.context);
            let anchor = json!({"path": path, "symbol": chunk.symbol, "start_line": chunk.start_line,
                                "end_line": chunk.end_line});
            writeln!(
                corpus,
                "{}",
                json!({"_id": id, "text": body, "metadata": {"context": context, "anchor": anchor}})
            )?;
            documents += 1;
        }
    }
    eprintln!("{documents} chunks, {judged} documented functions as queries -> {}", args.out.display());
    Ok(())
}
