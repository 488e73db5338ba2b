//! The messages of the worker queues (the spec's `job_type` values), shared by the producers (ingest, the file
//! scan's schedule, operators) and the workers that consume them. Every message may carry its `job_type`; a
//! message with another queue's `job_type` is refused.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The job types, one per queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobType {
    MemoryIngest,
    MemoryDedupReview,
    MemoryContradictionCheck,
    MemoryEntitySynthesis,
    MemoryFileScan,
}

impl JobType {
    pub const ALL: [JobType; 5] = [
        Self::MemoryIngest,
        Self::MemoryDedupReview,
        Self::MemoryContradictionCheck,
        Self::MemoryEntitySynthesis,
        Self::MemoryFileScan,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::MemoryIngest => "memory_ingest",
            Self::MemoryDedupReview => "memory_dedup_review",
            Self::MemoryContradictionCheck => "memory_contradiction_check",
            Self::MemoryEntitySynthesis => "memory_entity_synthesis",
            Self::MemoryFileScan => "memory_file_scan",
        }
    }

    /// The environment variable naming the URL of this job's queue (for its producers and the local runner).
    pub fn queue_variable(self) -> &'static str {
        match self {
            Self::MemoryIngest => "MEMORY_INGEST_QUEUE_URL",
            Self::MemoryDedupReview => "MEMORY_DEDUP_QUEUE_URL",
            Self::MemoryContradictionCheck => "MEMORY_CONTRADICTION_QUEUE_URL",
            Self::MemoryEntitySynthesis => "MEMORY_SYNTHESIS_QUEUE_URL",
            Self::MemoryFileScan => "MEMORY_FILE_SCAN_QUEUE_URL",
        }
    }

    /// The worker function consuming this job's queue: its binary, its package under `target/lambda/`, and the
    /// suffix of its queue's name (`memory-<function>`).
    pub fn function(self) -> &'static str {
        match self {
            Self::MemoryIngest => "ingest",
            Self::MemoryDedupReview => "dedup",
            Self::MemoryContradictionCheck => "contradiction",
            Self::MemoryEntitySynthesis => "synthesis",
            Self::MemoryFileScan => "file-scan",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == text)
    }

    /// Checks a message's optional `job_type` against the queue's.
    pub fn expect(self, given: Option<JobType>) -> anyhow::Result<()> {
        match given {
            Some(given) if given != self => {
                anyhow::bail!("a {} message on the {} queue", given.as_str(), self.as_str())
            }
            _ => Ok(()),
        }
    }
}

/// A message of one job type: whose organisation it works in, and the `job_type` it may carry (checked against
/// its queue's before it is applied).
pub trait Job {
    const TYPE: JobType;
    fn organization_id(&self) -> Uuid;
    fn job_type(&self) -> Option<JobType>;
}

macro_rules! job {
    ($message:ty, $job_type:ident) => {
        impl Job for $message {
            const TYPE: JobType = JobType::$job_type;
            fn organization_id(&self) -> Uuid {
                self.organization_id
            }
            fn job_type(&self) -> Option<JobType> {
                self.job_type
            }
        }
    };
}

job!(crate::ingest::IngestBatch, MemoryIngest);

/// The ingest queue's messages: a batch names its job type (or none); a forget request is told apart by its own.
impl Job for crate::ingest::IngestMessage {
    const TYPE: JobType = JobType::MemoryIngest;
    fn organization_id(&self) -> Uuid {
        match self {
            Self::Batch(batch) => batch.organization_id,
            Self::Forget(request) => request.organization_id,
        }
    }
    fn job_type(&self) -> Option<JobType> {
        match self {
            Self::Batch(batch) => batch.job_type,
            Self::Forget(_) => None,
        }
    }
}
job!(DedupReviewJob, MemoryDedupReview);
job!(ContradictionCheckJob, MemoryContradictionCheck);
job!(EntitySynthesisJob, MemoryEntitySynthesis);
job!(FileScanJob, MemoryFileScan);

/// A pair of memories to review.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PairRef {
    pub a: Uuid,
    pub b: Uuid,
}

/// `memory_dedup_review`: the named pairs, or none to lease the organisation's next deferred pairs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DedupReviewJob {
    pub job_type: Option<JobType>,
    pub organization_id: Uuid,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pairs: Vec<PairRef>,
}

/// `memory_contradiction_check`: one new (or re-checked) memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContradictionCheckJob {
    pub job_type: Option<JobType>,
    pub organization_id: Uuid,
    pub memory_id: Uuid,
}

/// `memory_entity_synthesis`: an entity's profiles, at its mention threshold or when forced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntitySynthesisJob {
    pub job_type: Option<JobType>,
    pub organization_id: Uuid,
    pub entity_id: Uuid,
    /// Synthesise regardless of the mention count (compaction runs).
    #[serde(default)]
    pub force: bool,
}

/// `memory_file_scan`: one organisation's file-backed memories (one project's when `project_id` is given), from
/// the file after `after` on (a scan that had more files than one run takes queues the rest so).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileScanJob {
    pub job_type: Option<JobType>,
    pub organization_id: Uuid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<FileCursor>,
}

impl FileScanJob {
    pub fn new(organization_id: Uuid, project_id: Option<Uuid>) -> Self {
        Self { job_type: Some(JobType::MemoryFileScan), organization_id, project_id, after: None }
    }
}

/// A file of a project: where a paged file scan goes on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileCursor {
    pub project_id: Option<Uuid>,
    pub path: String,
}

/// A job waiting in (or sent from) the job outbox.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct QueuedJob {
    pub organization_id: Uuid,
    pub id: Uuid,
    pub job_type: String,
    pub body: serde_json::Value,
}

impl DedupReviewJob {
    pub fn deferred(organization_id: Uuid) -> Self {
        Self { job_type: Some(JobType::MemoryDedupReview), organization_id, pairs: Vec::new() }
    }
}

impl ContradictionCheckJob {
    pub fn new(organization_id: Uuid, memory_id: Uuid) -> Self {
        Self { job_type: Some(JobType::MemoryContradictionCheck), organization_id, memory_id }
    }
}

impl EntitySynthesisJob {
    pub fn new(organization_id: Uuid, entity_id: Uuid) -> Self {
        Self { job_type: Some(JobType::MemoryEntitySynthesis), organization_id, entity_id, force: false }
    }
}
