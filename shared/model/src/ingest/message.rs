//! The ingest message: a batch of memories from an extraction service (version 1).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{
    domain::{Anchor, MemoryStatus, MemoryType, Scope, Sensitivity, SourceKind, TrustLevel},
    jobs::JobType,
};

/// The message version this service reads.
pub const VERSION: u32 = 1;

/// `memory_ingest`: up to `MAX_MEMORIES` memories of one organisation. `batch_id` names the batch for
/// idempotency: a batch delivered again changes nothing and gets the same memory ids.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestBatch {
    pub job_type: Option<JobType>,
    #[serde(default = "version_one")]
    pub version: u32,
    pub organization_id: Uuid,
    pub batch_id: String,
    pub memories: Vec<IngestMemory>,
}

fn version_one() -> u32 {
    VERSION
}

/// One memory as extraction hands it over.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestMemory {
    pub content: String,
    /// Text that situates the memory without being it (the turns before it, a heading path): indexed and embedded
    /// with the content, never returned or injected. At most 8 KiB.
    pub context: Option<String>,
    pub memory_type: MemoryType,
    pub scope: Scope,
    /// Required for `project` scope and for file-backed memories.
    pub project_id: Option<Uuid>,
    /// Required for `task` scope.
    pub task_id: Option<Uuid>,
    /// Required for `agent_private` scope; otherwise the agent it came from (who then reads it whatever its scope).
    pub agent_id: Option<Uuid>,
    #[serde(default = "normal")]
    pub sensitivity: Sensitivity,
    #[serde(default = "half")]
    pub confidence: f64,
    pub expires_at: Option<DateTime<Utc>>,
    /// Seconds the memory lives from `created_at` (or now); instead of `expires_at`.
    pub ttl_seconds: Option<u64>,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Taxonomy node paths such as `infrastructure/deploy` (created when missing).
    #[serde(default)]
    pub taxonomy: Vec<String>,
    #[serde(default)]
    pub entities: Vec<EntityRef>,
    /// When the source event happened (defaults to now).
    pub created_at: Option<DateTime<Utc>>,
    /// Makes the memory file-backed: a path in its project's repository, re-checked by the file scan.
    pub file_path: Option<String>,
    /// The repository of a file-backed memory, by name (at most 200 bytes).
    pub repository: Option<String>,
    /// The chunk of the file the memory is written from (`memory-admin import-repo` sends each chunk's); the scan
    /// then follows that chunk rather than the whole file.
    pub anchor: Option<Anchor>,
    /// Where an exported memory stood (`memory-admin export`): restored only by a curated import
    /// (`memory-admin ingest --direct --activate`); a producer's message carrying it is refused.
    pub history: Option<History>,
    pub provenance: IngestProvenance,
}

impl IngestMemory {
    /// A memory of `content` with every optional field at its default (as a message that leaves them out reads):
    /// organisation-wide, normal sensitivity, confidence 0.5, no expiry, tags, labels, taxonomy or entities, not
    /// file-backed. Set the rest with struct update syntax.
    pub fn new(content: impl Into<String>, memory_type: MemoryType, provenance: IngestProvenance) -> Self {
        Self {
            content: content.into(),
            context: None,
            memory_type,
            scope: Scope::Org,
            project_id: None,
            task_id: None,
            agent_id: None,
            sensitivity: normal(),
            confidence: half(),
            expires_at: None,
            ttl_seconds: None,
            tags: Vec::new(),
            labels: BTreeMap::new(),
            taxonomy: Vec::new(),
            entities: Vec::new(),
            created_at: None,
            file_path: None,
            repository: None,
            anchor: None,
            history: None,
            provenance,
        }
    }
}

impl IngestProvenance {
    /// A source that names no git blob.
    pub fn new(source_kind: SourceKind, source_ref: impl Into<String>, trust_level: TrustLevel) -> Self {
        Self { source_kind, source_ref: source_ref.into(), git_blob_sha: None, trust_level }
    }
}

fn normal() -> Sensitivity {
    Sensitivity::Normal
}

fn half() -> f64 {
    0.5
}

/// An entity the memory mentions; entities are found (or created) by kind and normalised name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntityRef {
    pub name: String,
    #[serde(default = "concept")]
    pub kind: String,
}

fn concept() -> String {
    "concept".into()
}

/// Where the memory came from. Required: a memory without provenance is refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestProvenance {
    /// `conversation_turn`, `run`, `file`, `human`, `tool_output` or `external`.
    pub source_kind: SourceKind,
    /// Where in the source: a run and turn id, a file path, a URL, a person.
    pub source_ref: String,
    /// The git blob SHA of the file a `file` memory came from.
    pub git_blob_sha: Option<String>,
    /// The trust extraction claims; the write gate may lower it.
    pub trust_level: TrustLevel,
}

/// An exported memory's place in its organisation's history: its id there, its status, and the memory that
/// superseded it (by that id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct History {
    pub id: Uuid,
    pub status: MemoryStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<Uuid>,
}

/// `memory_forget`, also on the ingest queue: forget what `selector` matches in the organisation, and what was
/// derived from it, as `memory-admin forget` does. The sender needs a `verified` grant, and reaches only the
/// memories of batches it sent unless its grant lets it forget any (`memory-admin producers add --forgets-any`).
/// A request larger than one delivery continues in follow-up jobs, which name its record (`continues`) instead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForgetRequest {
    pub job_type: ForgetJobType,
    pub organization_id: Uuid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<crate::forget::ForgetSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continues: Option<Uuid>,
}

impl ForgetRequest {
    /// The follow-up job of a recorded request.
    pub fn continuing(organization_id: Uuid, request_id: Uuid) -> Self {
        Self { job_type: ForgetJobType::MemoryForget, organization_id, selector: None, continues: Some(request_id) }
    }
}

/// The `job_type` of a [`ForgetRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ForgetJobType {
    MemoryForget,
}

/// What the ingest queue carries: batches of memories, and requests to forget (told apart by `job_type`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum IngestMessage {
    Batch(IngestBatch),
    Forget(ForgetRequest),
}

impl<'de> Deserialize<'de> for IngestMessage {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = serde_json::Value::deserialize(deserializer)?;
        let forget = value.get("job_type").and_then(serde_json::Value::as_str) == Some("memory_forget");
        let message = if forget {
            serde_json::from_value(value).map(IngestMessage::Forget)
        } else {
            serde_json::from_value(value).map(IngestMessage::Batch)
        };
        message.map_err(D::Error::custom)
    }
}
