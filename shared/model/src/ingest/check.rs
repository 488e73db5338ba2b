//! The write gate's checks of a batch: what a memory must be to be written, and what it is written as.

use uuid::Uuid;

use super::{IngestBatch, IngestMemory, VERSION, admitted_trust, forbids_type, max_confidence};
use crate::{
    domain::{MemoryStatus, MemoryType, NewMemory, Provenance, Scope, SourceKind},
    jobs::JobType,
    language::Language,
};

/// Memories per batch.
pub const MAX_MEMORIES: usize = 100;
/// Longest content, in bytes.
pub const MAX_CONTENT_BYTES: usize = 32 * 1024;
/// Longest context, in bytes.
pub const MAX_CONTEXT_BYTES: usize = 8 * 1024;
/// Tags, labels, taxonomy paths and entities per memory.
pub const MAX_ITEMS: usize = 32;
/// Longest entity name or kind, and taxonomy node name, in bytes.
pub const MAX_NAME_BYTES: usize = 200;
/// The longest time to live: a hundred years.
pub const MAX_TTL_SECONDS: u64 = 100 * 365 * 24 * 3600;
/// The longest anchor symbol, in bytes.
pub const MAX_ANCHOR_BYTES: usize = 1000;
/// How far ahead of this clock a producer's `created_at` may be (clock skew).
pub const MAX_CLOCK_SKEW: chrono::TimeDelta = chrono::TimeDelta::minutes(5);
/// A checked memory, ready to write.
pub struct Checked {
    pub new: NewMemory,
    /// Its taxonomy paths, as node names.
    pub taxonomy: Vec<Vec<String>>,
    /// The entities it mentions, as normalised (kind, name).
    pub entities: Vec<(String, String)>,
    /// A memory of a curated import's history (superseded or archived where it was exported): it takes no chunk's
    /// place and is screened for no duplicates, its successor being in the same import.
    pub past: bool,
}

/// Checks every memory of the batch; the first problem refuses the whole batch.
pub fn check(batch: &IngestBatch) -> Result<Vec<Checked>, String> {
    let refuse = |message: String| Err(message);
    if batch.version != VERSION {
        return refuse(format!("unsupported ingest message version {} (this service reads {VERSION})", batch.version));
    }
    JobType::MemoryIngest.expect(batch.job_type).map_err(|e| e.to_string())?;
    if batch.batch_id.is_empty() || batch.batch_id.len() > 200 {
        return refuse("batch_id must have 1 to 200 characters".into());
    }
    if batch.memories.is_empty() || batch.memories.len() > MAX_MEMORIES {
        return refuse(format!("a batch holds 1 to {MAX_MEMORIES} memories, not {}", batch.memories.len()));
    }
    batch
        .memories
        .iter()
        .enumerate()
        .map(|(i, m)| check_memory(batch.organization_id, m).map_err(|why| format!("memory {i}: {why}")))
        .collect()
}

fn check_memory(organization_id: Uuid, m: &IngestMemory) -> Result<Checked, String> {
    let content = m.content.trim();
    if content.is_empty() || m.content.len() > MAX_CONTENT_BYTES {
        return Err(format!("content must be 1 to {MAX_CONTENT_BYTES} bytes"));
    }
    if m.context.as_ref().is_some_and(|c| c.len() > MAX_CONTEXT_BYTES) {
        return Err(format!("context must be at most {MAX_CONTEXT_BYTES} bytes"));
    }
    if m.memory_type == MemoryType::EntityProfile {
        return Err("entity_profile memories are written by synthesis only".into());
    }
    if !(0.0..=1.0).contains(&m.confidence) || m.confidence.is_nan() {
        return Err(format!("confidence {} is outside 0-1", m.confidence));
    }
    let required = |value: Option<Uuid>, what: &str| value.ok_or_else(|| format!("{} scope needs {what}", m.scope));
    match m.scope {
        Scope::Org => {}
        Scope::Project => {
            required(m.project_id, "project_id")?;
        }
        Scope::Task => {
            required(m.task_id, "task_id")?;
        }
        Scope::AgentPrivate => {
            required(m.agent_id, "agent_id")?;
        }
    }
    if let Some(path) = &m.file_path {
        let plain = std::path::Path::new(path).components().all(|c| matches!(c, std::path::Component::Normal(_)));
        if path.is_empty() || path.len() > MAX_ANCHOR_BYTES || !plain {
            return Err("file_path is a plain path inside the repository (no leading /, no . or .. parts)".into());
        }
    }
    if m.file_path.is_some() && m.project_id.is_none() {
        return Err("a file-backed memory needs project_id (its repository)".into());
    }
    if m.file_path.is_some() && m.scope == Scope::Org {
        return Err(
            "a file-backed memory is read no more widely than its project: project, task or agent_private scope".into(),
        );
    }
    if m.repository.as_ref().is_some_and(|r| r.trim().is_empty() || r.len() > MAX_NAME_BYTES) {
        return Err(format!("repository must have 1 to {MAX_NAME_BYTES} bytes"));
    }
    if let Some(anchor) = &m.anchor {
        if m.file_path.is_none() {
            return Err("an anchor needs the file_path it is in".into());
        }
        if anchor.symbol.trim().is_empty() || anchor.symbol.len() > MAX_ANCHOR_BYTES {
            return Err(format!("anchor.symbol must have 1 to {MAX_ANCHOR_BYTES} bytes"));
        }
        if anchor.start_line == 0 || anchor.end_line < anchor.start_line {
            return Err("anchor lines are 1-based and end_line is not before start_line".into());
        }
    }
    if m.ttl_seconds.is_some() && m.expires_at.is_some() {
        return Err("give ttl_seconds or expires_at, not both".into());
    }
    if m.ttl_seconds.is_some_and(|ttl| ttl == 0 || ttl > MAX_TTL_SECONDS) {
        return Err(format!("ttl_seconds is 1 to {MAX_TTL_SECONDS}"));
    }
    if m.created_at.is_some_and(|created| created > chrono::Utc::now() + MAX_CLOCK_SKEW) {
        return Err("created_at lies in the future".into());
    }
    if let (Some(expires), Some(created)) = (m.expires_at, m.created_at)
        && expires <= created
    {
        return Err("expires_at must be after created_at".into());
    }
    let too_many =
        [m.tags.len(), m.labels.len(), m.taxonomy.len(), m.entities.len()].into_iter().any(|n| n > MAX_ITEMS);
    if too_many {
        return Err(format!("at most {MAX_ITEMS} tags, labels, taxonomy paths and entities each"));
    }
    if m.provenance.source_ref.trim().is_empty() {
        return Err("provenance.source_ref is required".into());
    }
    let trust = admitted_trust(&m.provenance)?;
    if let Some(why) = forbids_type(m.memory_type, trust) {
        return Err(why);
    }
    let taxonomy = m
        .taxonomy
        .iter()
        .map(|path| {
            let nodes: Vec<String> = path.split('/').map(|n| n.trim().to_string()).collect();
            if nodes.iter().any(|n| n.is_empty() || n.len() > MAX_NAME_BYTES) || nodes.len() > 8 {
                Err(format!(
                    "taxonomy path {path:?} must be 1 to 8 names of 1 to {MAX_NAME_BYTES} bytes separated by /"
                ))
            } else {
                Ok(nodes)
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let entities = m
        .entities
        .iter()
        .map(|e| {
            let name = normalise(&e.name);
            let kind = normalise(&e.kind);
            if name.is_empty() || kind.is_empty() {
                Err("an entity needs a name and a kind".to_string())
            } else if name.len() > MAX_NAME_BYTES || kind.len() > MAX_NAME_BYTES {
                Err(format!("an entity's name and kind have at most {MAX_NAME_BYTES} bytes"))
            } else {
                Ok((kind, name))
            }
        })
        .collect::<Result<Vec<_>, _>>()?;

    let source_ref = match (&m.provenance.git_blob_sha, m.provenance.source_kind) {
        (Some(sha), SourceKind::File) => format!("{}@{sha}", m.provenance.source_ref.trim()),
        _ => m.provenance.source_ref.trim().to_string(),
    };
    let mut new = NewMemory::new(organization_id, m.memory_type, content);
    new.context = m.context.as_ref().map(|c| c.trim().to_string()).filter(|c| !c.is_empty());
    new.scope = m.scope;
    new.project_id = m.project_id;
    new.project_task_id = m.task_id;
    new.agent_id = m.agent_id;
    new.sensitivity = m.sensitivity;
    new.confidence = m.confidence.min(max_confidence(trust));
    new.created_at = m.created_at;
    new.expires_at = match m.ttl_seconds {
        Some(ttl) => Some(m.created_at.unwrap_or_else(chrono::Utc::now) + chrono::TimeDelta::seconds(ttl as i64)),
        None => m.expires_at,
    };
    new.file_path = m.file_path.clone();
    new.repository = m.repository.as_ref().map(|r| r.trim().to_string());
    new.language = m.file_path.as_deref().and_then(Language::of_path).map(|l| l.as_str().to_string());
    new.anchor = m.anchor.clone();
    // A file's producer names its blob SHA: the scan's baseline, checked against the repository.
    new.content_hash = m.file_path.as_ref().and(m.provenance.git_blob_sha.clone());
    new.tags = m.tags.clone();
    new.labels = serde_json::to_value(&m.labels).expect("string map");
    new.provenance =
        Provenance { source_kind: m.provenance.source_kind, source_ref: Some(source_ref), trust_level: trust };
    let past = m.history.as_ref().is_some_and(|h| h.status != MemoryStatus::Active);
    Ok(Checked { new, taxonomy, entities, past })
}

/// Entity names and kinds are matched lowercased, trimmed, with single spaces.
pub fn normalise(name: &str) -> String {
    name.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}
