//! A BEIR-layout dataset: `corpus.jsonl`, `queries.jsonl` and `qrels/test.tsv`, and its documents as memories.

use std::{
    collections::{BTreeMap, HashMap},
    io::BufRead,
    path::Path,
};

use anyhow::Context;
use chrono::{DateTime, Utc};
use memory_core::ingest::IngestMemory;
use serde::Deserialize;
use serde_json::json;
use uuid::Uuid;

#[derive(Deserialize)]
pub struct RawDoc {
    #[serde(rename = "_id")]
    pub id: String,
    #[serde(default)]
    pub title: String,
    pub text: String,
    #[serde(default)]
    pub metadata: Metadata,
}

#[derive(Deserialize)]
pub struct RawQuery {
    #[serde(rename = "_id")]
    pub id: String,
    pub text: String,
    #[serde(default)]
    pub metadata: Metadata,
}

#[derive(Deserialize, Default)]
pub struct Metadata {
    pub group: Option<String>,
    pub created_at: Option<DateTime<Utc>>,
    pub asked_at: Option<DateTime<Utc>>,
    /// A document's context (indexed and embedded with it, never returned).
    pub context: Option<String>,
    /// Where a chunk of code is: the document becomes a file-backed memory of its group's project, anchored there.
    pub anchor: Option<DocAnchor>,
}

#[derive(Deserialize)]
pub struct DocAnchor {
    pub path: String,
    pub symbol: String,
    pub start_line: u32,
    pub end_line: u32,
}

pub fn read_jsonl<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<Vec<T>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    std::io::BufReader::new(file)
        .lines()
        .enumerate()
        .filter(|(_, l)| l.as_ref().map_or(true, |l| !l.trim().is_empty()))
        .map(|(i, l)| serde_json::from_str(&l?).with_context(|| format!("{} line {}", path.display(), i + 1)))
        .collect()
}

pub fn read_qrels(path: &Path) -> anyhow::Result<BTreeMap<String, HashMap<String, i32>>> {
    let mut qrels: BTreeMap<String, HashMap<String, i32>> = BTreeMap::new();
    for (i, line) in std::fs::read_to_string(path)?.lines().enumerate() {
        let fields: Vec<&str> = line.split('\t').collect();
        if i == 0 && fields.first() == Some(&"query-id") || line.trim().is_empty() {
            continue;
        }
        anyhow::ensure!(fields.len() == 3, "{} line {}: expected query-id, corpus-id, score", path.display(), i + 1);
        qrels.entry(fields[0].to_string()).or_default().insert(fields[1].to_string(), fields[2].trim().parse()?);
    }
    Ok(qrels)
}

pub fn organization_of(group: Option<&str>) -> Uuid {
    Uuid::new_v5(&Uuid::NAMESPACE_OID, format!("memory-eval/{}", group.unwrap_or("default")).as_bytes())
}

/// The project a group's file-backed memories belong to; every query names it.
pub fn project_of(group: Option<&str>) -> Uuid {
    Uuid::new_v5(&Uuid::NAMESPACE_OID, format!("memory-eval/{}/project", group.unwrap_or("default")).as_bytes())
}

/// One dataset document as an extraction service would hand it over: an organisation-wide semantic memory, or a
/// chunk of code anchored in its file, as `memory-admin import-repo` stores it.
pub fn as_memory(doc: &RawDoc) -> IngestMemory {
    let content = if doc.title.is_empty() { doc.text.clone() } else { format!("{} {}", doc.title, doc.text) };
    let mut memory = json!({
        "content": content,
        "memory_type": "semantic",
        "scope": "org",
        "created_at": doc.metadata.created_at,
        "context": doc.metadata.context,
        "provenance": {"source_kind": "run", "source_ref": doc.id, "trust_level": "unverified"},
    });
    if let Some(anchor) = &doc.metadata.anchor {
        memory["scope"] = json!("project");
        memory["project_id"] = json!(project_of(doc.metadata.group.as_deref()));
        memory["file_path"] = json!(anchor.path);
        memory["anchor"] =
            json!({"symbol": anchor.symbol, "start_line": anchor.start_line, "end_line": anchor.end_line});
    }
    serde_json::from_value(memory).expect("a well-formed memory")
}
