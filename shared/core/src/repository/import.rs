//! A repository's snapshot as ingest messages: one memory per chunk of every file the chunker reads, file-backed
//! and anchored, named by its blob SHA (so `verified`, and checked by the scan). A file is one batch (more if it has
//! more chunks than a batch holds), named by a hash of the project, repository, path and blob SHA: importing the same snapshot again
//! replays those batches and changes nothing, and an anchor already held by an active memory is not written twice.
//! Every file that does not become memory is listed with its reason ([`SkippedFile`]).

use std::collections::BTreeMap;

use serde::Serialize;
use uuid::Uuid;

use super::{
    Language, Snapshot, chunk_file,
    exclude::{Excluded, Exclusions},
    reader::{FileReadError, MAX_TREE_ENTRIES},
};
use crate::{
    domain::{Anchor, MemoryType, Scope, SourceKind, TrustLevel},
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

/// The most bytes of files one import reads; the files after are skipped as over the budget.
pub const MAX_IMPORT_BYTES: u64 = 512 * 1024 * 1024;

/// Why a file of the repository did not become memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// A name that holds secrets (`.env`, keys, Terraform state, the operator's patterns).
    Secret,
    /// Ignored by the repository's `.gitignore`.
    Ignored,
    /// Not a language or text format the chunker reads (images, archives, lock files, ...).
    NotText,
    /// Larger than `MEMORY_FILE_MAX_BYTES`.
    TooLarge,
    /// Not UTF-8 text (or text with NUL characters).
    Binary,
    /// The chunker could not read it within its budget.
    Unreadable,
    /// Past the import's budget of files or bytes.
    OverBudget,
    /// No text to chunk.
    Empty,
}

impl SkipReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::Secret => "secret",
            SkipReason::Ignored => "ignored",
            SkipReason::NotText => "not_text",
            SkipReason::TooLarge => "too_large",
            SkipReason::Binary => "binary",
            SkipReason::Unreadable => "unreadable",
            SkipReason::OverBudget => "over_budget",
            SkipReason::Empty => "empty",
        }
    }
}

/// A file that did not become memory, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedFile {
    pub path: String,
    pub reason: SkipReason,
    pub detail: String,
}

/// What an import read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImportPlan {
    /// The repository's name, as its memories carry it.
    pub repository: String,
    pub batches: Vec<IngestBatch>,
    pub files: usize,
    pub chunks: usize,
    /// The files that did not become memory, in path order.
    pub skipped: Vec<SkippedFile>,
}

/// A file's batch: the same for the same project, repository, path, blob and part, and within the 200 characters a
/// batch id may have however long the path.
fn batch_id(target: &ImportTarget, path: &str, blob_sha: &str, part: usize) -> String {
    use sha2::{Digest, Sha256};
    let key = format!("{}\n{}\n{path}\n{blob_sha}\n{part}", target.project_id, target.repository);
    format!("import:{:x}", Sha256::digest(key.as_bytes()))
}

/// The ingest messages that import `snapshot` into `target`, leaving out what `exclusions` names (and what the
/// snapshot's `.gitignore` files ignore).
pub fn plan(snapshot: &Snapshot, target: &ImportTarget, exclusions: Exclusions) -> Result<ImportPlan, FileReadError> {
    let mut plan = ImportPlan { repository: target.repository.clone(), ..ImportPlan::default() };
    let (files, truncated) = snapshot.files()?;
    let exclusions = exclusions.with_gitignores(snapshot, &files)?;
    let mut bytes_read = 0u64;
    for file in files {
        let mut skip = |reason: SkipReason, detail: String| {
            plan.skipped.push(SkippedFile { path: file.path.clone(), reason, detail });
        };
        match exclusions.check(&file.path) {
            Some(Excluded::Secret) => {
                skip(SkipReason::Secret, "a name that holds secrets (MEMORY_IMPORT_EXCLUDE adds names)".into());
                continue;
            }
            Some(Excluded::Ignored) => {
                skip(SkipReason::Ignored, "ignored by the repository's .gitignore".into());
                continue;
            }
            None => {}
        }
        let Some(language) = Language::of_path(&file.path) else {
            skip(SkipReason::NotText, "not a language or text format the chunker reads".into());
            continue;
        };
        if bytes_read.saturating_add(snapshot.size(&file.blob_sha)?) > MAX_IMPORT_BYTES {
            skip(SkipReason::OverBudget, format!("the import reads at most {MAX_IMPORT_BYTES} bytes of files"));
            continue;
        }
        let bytes = match snapshot.read(&file.path, target.max_file_bytes) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => continue,
            Err(FileReadError::TooLarge { limit }) => {
                skip(SkipReason::TooLarge, format!("larger than {limit} bytes (MEMORY_FILE_MAX_BYTES)"));
                continue;
            }
            Err(e) => return Err(e),
        };
        bytes_read += bytes.len() as u64;
        let text = match String::from_utf8(bytes) {
            Ok(text) if !text.contains('\0') => text,
            _ => {
                skip(SkipReason::Binary, "not UTF-8 text".into());
                continue;
            }
        };
        let chunks = match chunk_file(&file.path, language, &text) {
            Ok(chunks) if chunks.is_empty() => {
                skip(SkipReason::Empty, "no text to chunk".into());
                continue;
            }
            Ok(chunks) => chunks,
            Err(e) => {
                skip(SkipReason::Unreadable, e.to_string());
                continue;
            }
        };
        plan.files += 1;
        plan.chunks += chunks.len();
        let memories: Vec<IngestMemory> = chunks
            .into_iter()
            .map(|chunk| {
                let source_ref = format!("{}@{}:{}#{}", target.repository, target.reference, file.path, chunk.symbol);
                let provenance = IngestProvenance {
                    git_blob_sha: Some(file.blob_sha.clone()),
                    ..IngestProvenance::new(SourceKind::File, source_ref, TrustLevel::Verified)
                };
                IngestMemory {
                    anchor: Some(Anchor {
                        symbol: chunk.symbol.clone(),
                        hash: Some(chunk.hash()),
                        start_line: chunk.start_line,
                        end_line: chunk.end_line,
                    }),
                    context: Some(chunk.context),
                    scope: Scope::Project,
                    project_id: Some(target.project_id),
                    confidence: 0.9,
                    labels: BTreeMap::from([("chunk".to_string(), chunk.kind.to_string())]),
                    file_path: Some(file.path.clone()),
                    repository: Some(target.repository.clone()),
                    ..IngestMemory::new(chunk.text, MemoryType::Semantic, provenance)
                }
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
    if truncated {
        plan.skipped.push(SkippedFile {
            path: "(the rest of the tree)".into(),
            reason: SkipReason::OverBudget,
            detail: format!("the commit's tree is listed up to {MAX_TREE_ENTRIES} entries"),
        });
    }
    Ok(plan)
}
