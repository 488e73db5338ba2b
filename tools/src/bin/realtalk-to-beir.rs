//! realtalk-to-beir: converts the REALTALK conversations into the BEIR layout memory-eval reads.
//!
//! Every turn becomes a memory (`"<speaker>: <text>"`, created at the turn's time) of its conversation's group,
//! with the session's previous `--context-turns` turns as its context;
//! every question becomes a query of that group, asked a day after the conversation's last turn, judged
//! relevant to its evidence turns. Evidence ids are normalised: lists split on `;`, `,` and spaces, trailing `.` dropped,
//! ranges (`D12:3-D12:5`, `D12:3-5`) expanded, and ids that name no turn discarded (the count is reported).
//!
//!     realtalk-to-beir --input ../shared/data/realtalk --output .local/realtalk-beir

use std::{collections::HashSet, fmt::Write as _, path::PathBuf};

use anyhow::Context;
use chrono::{DateTime, Duration, NaiveDateTime, Utc};
use clap::Parser;
use serde_json::{Value, json};

#[derive(Parser)]
struct Args {
    #[arg(long)]
    input: PathBuf,
    #[arg(long)]
    output: PathBuf,
    /// Turns of the same session before a turn that become its context (indexed and embedded with it). 0 by
    /// default: with 2, nDCG@10 fell (docs/decisions.md), the neighbours' words matching the evidence's questions.
    #[arg(long, default_value_t = 0)]
    context_turns: usize,
}

fn parse_time(text: &str) -> anyhow::Result<DateTime<Utc>> {
    Ok(NaiveDateTime::parse_from_str(text.trim(), "%d.%m.%Y, %H:%M:%S")
        .with_context(|| format!("turn time {text:?}"))?
        .and_utc())
}

/// Expands one evidence reference into turn ids.
fn expand(reference: &str) -> Vec<String> {
    let reference = reference.trim().trim_end_matches('.').trim();
    let Some((start, end)) = reference.split_once('-') else { return vec![reference.to_string()] };
    let Some((session, first)) = start.split_once(':') else { return vec![reference.to_string()] };
    let last = end.rsplit(':').next().unwrap_or(end);
    match (first.parse::<u32>(), last.parse::<u32>()) {
        (Ok(a), Ok(b)) if a <= b && b - a < 100 => (a..=b).map(|t| format!("{session}:{t}")).collect(),
        _ => vec![reference.to_string()],
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    std::fs::create_dir_all(args.output.join("qrels"))?;
    let (mut corpus, mut queries, mut qrels) =
        (String::new(), String::new(), String::from("query-id\tcorpus-id\tscore\n"));
    let (mut turns, mut questions, mut dropped_refs, mut dropped_questions) = (0, 0, 0, 0);
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(&args.input)?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>()?;
    files.retain(|p| p.extension().is_some_and(|e| e == "json"));
    files.sort();
    for path in files {
        let chat = path.file_stem().unwrap().to_string_lossy().to_string();
        let data: Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
        let object = data.as_object().context("conversation is not an object")?;
        let mut ids = HashSet::new();
        let mut last = DateTime::<Utc>::MIN_UTC;
        let mut sessions: Vec<(u32, &Value)> = object
            .iter()
            .filter_map(|(k, v)| k.strip_prefix("session_").and_then(|n| n.parse().ok()).map(|n| (n, v)))
            .collect();
        sessions.sort_by_key(|(n, _)| *n);
        for (_, session) in sessions {
            let mut previous: Vec<String> = Vec::new();
            for turn in session.as_array().into_iter().flatten() {
                let text = turn["clean_text"].as_str().unwrap_or_default().trim();
                let dia_id = turn["dia_id"].as_str().unwrap_or_default();
                if text.is_empty() || dia_id.is_empty() {
                    continue;
                }
                let at = parse_time(turn["date_time"].as_str().unwrap_or_default())?;
                last = last.max(at);
                let speaker = turn["speaker"].as_str().unwrap_or("someone");
                ids.insert(dia_id.to_string());
                let line = format!("{speaker}: {text}");
                let context = previous[previous.len().saturating_sub(args.context_turns)..].join("\n");
                let mut metadata = json!({"group": chat, "created_at": at});
                if !context.is_empty() {
                    metadata["context"] = context.into();
                }
                let doc = json!({"_id": format!("{chat}#{dia_id}"), "title": "", "text": line, "metadata": metadata});
                previous.push(line);
                writeln!(corpus, "{doc}")?;
                turns += 1;
            }
        }
        let asked_at = last + Duration::days(1);
        for (i, qa) in object.get("qa").and_then(Value::as_array).into_iter().flatten().enumerate() {
            let evidence: Vec<String> = qa["evidence"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .flat_map(|e| {
                    e.split([';', ',', ' ']).filter(|p| !p.trim().is_empty()).map(str::to_string).collect::<Vec<_>>()
                })
                .flat_map(|e| expand(&e))
                .collect();
            let valid: HashSet<&String> = evidence.iter().filter(|e| ids.contains(*e)).collect();
            dropped_refs += evidence.len() - evidence.iter().filter(|e| ids.contains(*e)).count();
            if valid.is_empty() {
                dropped_questions += 1;
                continue;
            }
            let qid = format!("{chat}#q{i}");
            let query = json!({"_id": qid, "text": qa["question"].as_str().unwrap_or_default(),
                               "metadata": {"group": chat, "asked_at": asked_at, "category": qa["category"]}});
            writeln!(queries, "{query}")?;
            let mut valid: Vec<&String> = valid.into_iter().collect();
            valid.sort();
            for e in valid {
                writeln!(qrels, "{qid}\t{chat}#{e}\t1")?;
            }
            questions += 1;
        }
    }
    std::fs::write(args.output.join("corpus.jsonl"), corpus)?;
    std::fs::write(args.output.join("queries.jsonl"), queries)?;
    std::fs::write(args.output.join("qrels/test.tsv"), qrels)?;
    eprintln!(
        "{turns} turns, {questions} questions written to {}; {dropped_refs} evidence references named no turn, \
         {dropped_questions} questions had no usable evidence",
        args.output.display()
    );
    Ok(())
}
