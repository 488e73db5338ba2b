//! Domain types: the schema's rows and the vocabularies of their text columns.

#[macro_use]
mod text_enum;
pub mod readership;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

pub use readership::Readership;
use sha2::{Digest, Sha256};
pub use text_enum::UnknownVariant;

text_enum! {
    /// Who may read a memory (besides its organisation).
    Scope { Org => "org", Project => "project", Task => "task", AgentPrivate => "agent_private" }
}

text_enum! {
    /// What kind of knowledge a memory holds; decides its recency half-life.
    MemoryType {
        Episodic => "episodic",
        Semantic => "semantic",
        Procedural => "procedural",
        Preference => "preference",
        EntityProfile => "entity_profile",
        ExecutionSummary => "execution_summary",
    }
}

text_enum! {
    /// Lifecycle state; only `active` memories are ever retrieved.
    MemoryStatus {
        Candidate => "candidate",
        Active => "active",
        Superseded => "superseded",
        Archived => "archived",
        Forgotten => "forgotten",
    }
}

text_enum! {
    /// `restricted` memories are withheld from passive injection.
    Sensitivity { Normal => "normal", Restricted => "restricted" }
}

text_enum! {
    /// How far a memory's source is trusted (the write gate against memory poisoning).
    TrustLevel { Verified => "verified", Unverified => "unverified", Untrusted => "untrusted" }
}

text_enum! {
    /// What produced a memory. Extraction services name one of `conversation_turn`, `run`, `file`, `human`,
    /// `tool_output`, `external`; `synthesis` and `merge` are the lifecycle jobs' own; the rest are older names.
    SourceKind {
        ConversationTurn => "conversation_turn",
        Run => "run",
        File => "file",
        Human => "human",
        ToolOutput => "tool_output",
        External => "external",
        Synthesis => "synthesis",
        Merge => "merge",
        ChatMessage => "chat_message",
        Event => "event",
        Import => "import",
        Explicit => "explicit",
    }
}

text_enum! {
    /// The outcome of reviewing a pair of near-duplicate memories.
    DedupDecision {
        Deferred => "deferred",
        KeepBoth => "keep_both",
        Merge => "merge",
        SupersedeA => "supersede_a",
        SupersedeB => "supersede_b",
    }
}

/// Where a memory came from: the kind of source, a reference into it (a file path and git blob SHA, a run and
/// turn id, ...) and how far it is trusted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow, ToSchema)]
pub struct Provenance {
    pub source_kind: SourceKind,
    pub source_ref: Option<String>,
    pub trust_level: TrustLevel,
}

/// A stored memory, without its embedding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow, ToSchema)]
pub struct Memory {
    pub id: Uuid,
    pub organization_id: Uuid,
    pub project_id: Option<Uuid>,
    pub project_task_id: Option<Uuid>,
    pub agent_id: Option<Uuid>,
    pub scope: Scope,
    pub memory_type: MemoryType,
    pub status: MemoryStatus,
    pub sensitivity: Sensitivity,
    pub content: String,
    pub confidence: f64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub last_verified_at: Option<DateTime<Utc>>,
    pub expires_at: Option<DateTime<Utc>>,
    pub superseded_by: Option<Uuid>,
    pub superseded_at: Option<DateTime<Utc>>,
    pub archived_at: Option<DateTime<Utc>>,
    pub file_backed: bool,
    pub file_path: Option<String>,
    pub content_hash: Option<String>,
    pub file_last_scanned_at: Option<DateTime<Utc>>,
    /// Why the last scan could not read the file (None when it could).
    pub file_scan_error: Option<String>,
    /// Since when the file no longer says what the memory was written from (None while it does).
    pub file_changed_at: Option<DateTime<Utc>>,
    /// Since when the file is missing (None while it is there); archived after the grace period.
    pub file_missing_since: Option<DateTime<Utc>>,
    /// The repository a file-backed memory's file belongs to, by name.
    pub repository: Option<String>,
    /// The language of its file (`rust`, `python`, `markdown`, ...).
    pub language: Option<String>,
    /// The chunk of its file the memory was written from.
    #[sqlx(json(nullable))]
    pub anchor: Option<Anchor>,
    #[sqlx(flatten)]
    pub provenance: Provenance,
    pub tags: Vec<String>,
    /// Key/value labels (a JSON object of strings).
    #[schema(value_type = Object)]
    pub labels: serde_json::Value,
}

/// What it takes to write a new memory; everything else has a default.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewMemory {
    pub organization_id: Uuid,
    pub project_id: Option<Uuid>,
    pub project_task_id: Option<Uuid>,
    pub agent_id: Option<Uuid>,
    pub scope: Scope,
    pub memory_type: MemoryType,
    pub status: MemoryStatus,
    pub sensitivity: Sensitivity,
    pub content: String,
    /// Text that situates the memory (indexed and embedded with it, never returned).
    pub context: Option<String>,
    pub embedding: Option<Vec<f32>>,
    pub confidence: f64,
    pub created_at: Option<DateTime<Utc>>,
    pub expires_at: Option<DateTime<Utc>>,
    pub file_path: Option<String>,
    pub content_hash: Option<String>,
    pub repository: Option<String>,
    pub language: Option<String>,
    pub anchor: Option<Anchor>,
    pub provenance: Provenance,
    pub tags: Vec<String>,
    pub labels: serde_json::Value,
    /// The role of the producer whose batch wrote it (None: an operator's import, or the service's own rows):
    /// whose forget requests reach it. Not copied to the rows that replace it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<String>,
}

/// Where a file-backed memory's text sits in its file: the chunk it was written from (`repository::chunk`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Anchor {
    /// The chunk's symbol path (`config::parse`, `Server.handle`) or heading breadcrumb, unique in its file.
    pub symbol: String,
    /// The chunk's own hash when last read (None until the first scan, when the producer sent none).
    #[serde(default)]
    pub hash: Option<String>,
    /// First and last line at the last scan, 1-based.
    pub start_line: u32,
    pub end_line: u32,
}

impl NewMemory {
    /// What is embedded: the content, then its context.
    pub fn embedding_input(&self) -> String {
        match &self.context {
            Some(context) => format!("{}\n{context}", self.content),
            None => self.content.clone(),
        }
    }

    /// An active, normal-sensitivity, organisation-wide memory with unverified explicit provenance.
    pub fn new(organization_id: Uuid, memory_type: MemoryType, content: impl Into<String>) -> Self {
        Self {
            organization_id,
            project_id: None,
            project_task_id: None,
            agent_id: None,
            scope: Scope::Org,
            memory_type,
            status: MemoryStatus::Active,
            sensitivity: Sensitivity::Normal,
            content: content.into(),
            context: None,
            embedding: None,
            confidence: 0.5,
            created_at: None,
            expires_at: None,
            file_path: None,
            content_hash: None,
            repository: None,
            language: None,
            anchor: None,
            provenance: Provenance {
                source_kind: SourceKind::Explicit,
                source_ref: None,
                trust_level: TrustLevel::Unverified,
            },
            tags: Vec::new(),
            labels: serde_json::json!({}),
            sender: None,
        }
    }

    /// Copies scope, ownership and sensitivity from `memory` (for rows that replace it).
    pub fn replacing(memory: &Memory, content: impl Into<String>) -> Self {
        Self {
            project_id: memory.project_id,
            project_task_id: memory.project_task_id,
            agent_id: memory.agent_id,
            scope: memory.scope,
            sensitivity: memory.sensitivity,
            confidence: memory.confidence,
            expires_at: memory.expires_at,
            file_path: memory.file_path.clone(),
            repository: memory.repository.clone(),
            language: memory.language.clone(),
            anchor: memory.anchor.clone(),
            tags: memory.tags.clone(),
            labels: memory.labels.clone(),
            ..Self::new(memory.organization_id, memory.memory_type, content)
        }
    }
}

impl Memory {
    /// A file-backed memory whose file changed or is missing since it was last verified: returned, and marked so.
    pub fn is_stale(&self) -> bool {
        self.file_changed_at.is_some() || self.file_missing_since.is_some()
    }

    /// A chunk of a source file (anchored, in a programming language), not prose.
    pub fn is_source_code(&self) -> bool {
        self.anchor.is_some()
            && self.language.as_deref().and_then(crate::language::Language::parse).is_some_and(|l| l.is_source())
    }
}

#[cfg(any(test, feature = "test-fixtures"))]
impl Memory {
    /// An active org-wide semantic memory with neutral values, for unit tests.
    pub fn test_fixture() -> Self {
        let new = NewMemory::new(Uuid::nil(), MemoryType::Semantic, "a memory");
        let now = chrono::Utc::now();
        Self {
            id: Uuid::nil(),
            organization_id: Uuid::nil(),
            project_id: None,
            project_task_id: None,
            agent_id: None,
            scope: new.scope,
            memory_type: new.memory_type,
            status: new.status,
            sensitivity: new.sensitivity,
            content: new.content,
            confidence: new.confidence,
            created_at: now,
            updated_at: now,
            last_verified_at: None,
            expires_at: None,
            superseded_by: None,
            superseded_at: None,
            archived_at: None,
            file_backed: false,
            file_path: None,
            content_hash: None,
            file_last_scanned_at: None,
            file_scan_error: None,
            file_changed_at: None,
            file_missing_since: None,
            repository: None,
            language: None,
            anchor: None,
            provenance: new.provenance,
            tags: Vec::new(),
            labels: serde_json::json!({}),
        }
    }
}

/// A node of an organisation's memory taxonomy tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, sqlx::FromRow, ToSchema)]
pub struct TaxonomyNode {
    pub id: Uuid,
    pub parent_id: Option<Uuid>,
    pub name: String,
}

/// An entity (person, service, repository, ...) that memories mention.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow, ToSchema)]
pub struct Entity {
    pub id: Uuid,
    pub organization_id: Uuid,
    pub name: String,
    pub entity_type: String,
    pub synthesis_memory_id: Option<Uuid>,
}

/// An entity with its synthesised profile memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EntityProfile {
    pub entity_id: Uuid,
    pub name: String,
    pub entity_type: String,
    pub profile: Memory,
}

/// Whether `text` is a git object id: 40 (SHA-1) or 64 (SHA-256) hexadecimal digits.
pub fn is_blob_sha(text: &str) -> bool {
    matches!(text.len(), 40 | 64) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The content hash stored in `memory.content_hash`.
pub fn content_hash(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

/// The confidence from which a checked candidate becomes active (below it, it stays a candidate).
pub const PROMOTION_CONFIDENCE: f64 = 0.2;

/// Active mentions at which an entity's profiles are (re)synthesised, at every multiple.
pub const MENTION_THRESHOLD: i64 = 5;

/// Whether an entity's profiles are due once `added` more active memories mention it, `now` in all: its active
/// mentions reached a multiple of [`MENTION_THRESHOLD`].
pub fn synthesis_due(now: i64, added: i64) -> bool {
    now >= MENTION_THRESHOLD && now / MENTION_THRESHOLD > (now - added) / MENTION_THRESHOLD
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_are_due_at_each_multiple_of_the_threshold_the_mentions_cross() {
        assert!(!synthesis_due(4, 1) && synthesis_due(5, 1) && !synthesis_due(6, 1));
        assert!(synthesis_due(11, 2) && !synthesis_due(12, 2) && synthesis_due(12, 7));
    }
}
