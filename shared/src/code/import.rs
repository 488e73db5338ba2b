//! A repository's snapshot as ingest messages: one memory per chunk of every file the chunker reads, file-backed
//! and anchored, named by its blob SHA (so `verified`, and checked by the scan). A file is one batch (more if it has
//! more chunks than a batch holds), named by a hash of the project, repository, path and blob SHA: importing the same snapshot again
//! replays those batches and changes nothing, and an anchor already held by an active memory is not written twice.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::{Language, Snapshot, chunk_file, reader::FileReadError};
use crate::{
    domain::{Anchor, MemoryType, Scope, Sensitivity, SourceKind, TrustLevel},
    ingest::{IngestBatch, IngestMemory, IngestProvenance, MAX_MEMORIES, VERSION},
};

/// Where an import goes.
#[derive(Debug, Clone)]
pub struct ImportTarget {
    pub organization_id: Uuid,
    pub project_id: Uuid,
    /// The repository's name, as memories and filters name it.
    pub repository: String,
    /// The ref the snapshot was taken at (recorded in provenance).
    pub reference: String,
    /// Files larger than this are skipped.
    pub max_file_bytes: u64,
}

/// What an import read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImportPlan {
    pub batches: Vec<IngestBatch>,
    pub files: usize,
    pub chunks: usize,
    /// Files skipped: not a language the chunker reads, too large, or not UTF-8.
    pub skipped: usize,
}

/// A file's batch: the same for the same project, repository, path, blob and part, and within the 200 characters a
/// batch id may have however long the path.
fn batch_id(target: &ImportTarget, path: &str, blob_sha: &str, part: usize) -> String {
    use sha2::{Digest, Sha256};
    let key = format!("{}\n{}\n{path}\n{blob_sha}\n{part}", target.project_id, target.repository);
    format!("import:{:x}", Sha256::digest(key.as_bytes()))
}

/// The ingest messages that import `snapshot` into `target`.
pub fn plan(snapshot: &Snapshot, target: &ImportTarget) -> Result<ImportPlan, FileReadError> {
    let mut plan = ImportPlan::default();
    for file in snapshot.files()? {
        let Some(language) = Language::of_path(&file.path) else {
            plan.skipped += 1;
            continue;
        };
        let text = match snapshot.read(&file.path, target.max_file_bytes) {
            Ok(Some(bytes)) => String::from_utf8(bytes).ok(),
            Ok(None) | Err(FileReadError::TooLarge { .. }) => None,
            Err(e) => return Err(e),
        };
        let Some(text) = text else {
            plan.skipped += 1;
            continue;
        };
        let chunks = chunk_file(&file.path, language, &text);
        plan.files += 1;
        plan.chunks += chunks.len();
        let memories: Vec<IngestMemory> = chunks
            .into_iter()
            .map(|chunk| IngestMemory {
                anchor: Some(Anchor {
                    symbol: chunk.symbol.clone(),
                    hash: Some(chunk.hash()),
                    start_line: chunk.start_line,
                    end_line: chunk.end_line,
                }),
                content: chunk.text,
                context: Some(chunk.context),
                memory_type: MemoryType::Semantic,
                scope: Scope::Project,
                project_id: Some(target.project_id),
                task_id: None,
                agent_id: None,
                sensitivity: Sensitivity::Normal,
                confidence: 0.9,
                expires_at: None,
                ttl_seconds: None,
                tags: Vec::new(),
                labels: BTreeMap::from([("chunk".to_string(), chunk.kind.to_string())]),
                taxonomy: Vec::new(),
                entities: Vec::new(),
                created_at: None,
                file_path: Some(file.path.clone()),
                history: None,
                repository: Some(target.repository.clone()),
                provenance: IngestProvenance {
                    source_kind: SourceKind::File,
                    source_ref: format!("{}@{}:{}#{}", target.repository, target.reference, file.path, chunk.symbol),
                    git_blob_sha: Some(file.blob_sha.clone()),
                    trust_level: TrustLevel::Verified,
                },
            })
            .collect();
        for (part, memories) in memories.chunks(MAX_MEMORIES).enumerate() {
            plan.batches.push(IngestBatch {
                job_type: None,
                version: VERSION,
                organization_id: target.organization_id,
                batch_id: batch_id(target, &file.path, &file.blob_sha, part),
                memories: memories.to_vec(),
            });
        }
    }
    Ok(plan)
}
