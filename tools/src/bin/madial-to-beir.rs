//! madial-to-beir: converts MADial-Bench (English) into the BEIR layout memory-eval reads.
//!
//! Every memory (`{"<id>": {"time", "scene", "emotion", "event"}}`) becomes a document, its event the text, created
//! at its date. Every dialogue becomes a query: the conversation before its test turn (the assistant's turn that
//! draws on a memory), as passive injection sees it before that turn, judged relevant to the dialogue's memories.
//!
//!     madial-to-beir --input ../shared/data/madial-bench/en --output .local/madial-beir

use std::{fmt::Write as _, path::PathBuf};

use anyhow::Context;
use clap::Parser;
use serde_json::{Value, json};

#[derive(Parser)]
struct Args {
    #[arg(long)]
    input: PathBuf,
    #[arg(long)]
    output: PathBuf,
}

fn lines(path: &std::path::Path) -> anyhow::Result<Vec<Value>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines().filter(|l| !l.trim().is_empty()).map(|l| Ok(serde_json::from_str(l)?)).collect()
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    std::fs::create_dir_all(args.output.join("qrels"))?;
    let mut corpus = String::new();
    for record in lines(&args.input.join("MADial-Bench-en-memory.json"))? {
        for (id, memory) in record.as_object().context("a memory record is an object")? {
            let time = memory["time"].as_str().context("a memory's time")?;
            let event = memory["event"].as_str().context("a memory's event")?;
            let created_at = format!("{time}T12:00:00Z");
            writeln!(corpus, "{}", json!({"_id": id, "text": event, "metadata": {"created_at": created_at}}))?;
        }
    }
    let (mut queries, mut qrels) = (String::new(), String::from("query-id\tcorpus-id\tscore\n"));
    for (n, dialogue) in lines(&args.input.join("MADial-Bench-en-dialogue.json"))?.iter().enumerate() {
        let turns: Vec<&str> =
            dialogue["dialogue"].as_array().context("dialogue turns")?.iter().filter_map(Value::as_str).collect();
        let test = dialogue["test-turn"][0].as_u64().context("a test turn")? as usize;
        let before: Vec<&str> = turns[..test.min(turns.len())]
            .iter()
            .map(|t| t.trim())
            .filter(|t| !t.is_empty() && *t != "<BOD>")
            .collect();
        let id = format!("d{n}");
        writeln!(queries, "{}", json!({"_id": id, "text": before.join("\n")}))?;
        for relevant in dialogue["relevant-id"].as_array().context("relevant ids")? {
            writeln!(qrels, "{id}\t{relevant}\t1")?;
        }
    }
    std::fs::write(args.output.join("corpus.jsonl"), corpus)?;
    std::fs::write(args.output.join("queries.jsonl"), queries)?;
    std::fs::write(args.output.join("qrels/test.tsv"), qrels)?;
    eprintln!("MADial-Bench -> {}", args.output.display());
    Ok(())
}
