//! The file-backed freshness scan: memories whose content comes from a file in a project's repository are
//! re-read; a changed file yields a new memory that supersedes the old one, a deleted file archives it, and
//! every scanned row records when it was scanned.

use std::{
    path::{Component, Path, PathBuf},
    sync::Arc,
};

use async_trait::async_trait;
use chrono::Utc;
use sha2::{Digest, Sha256};
use sqlx::PgPool;
use uuid::Uuid;

use crate::{
    domain::{Memory, NewMemory, SourceKind, TrustLevel},
    embed::Embedder,
    store,
};

/// Longest file content stored in a memory, in bytes (longer files are cut at a character boundary).
pub const MAX_CONTENT_BYTES: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum FileReadError {
    #[error("path {0:?} is not a relative path inside the repository")]
    OutsideRepository(String),
    #[error("reading {path}: {source}")]
    Io { path: String, source: std::io::Error },
}

/// Reads files of a project's repository. `Ok(None)` means the file does not exist.
#[async_trait]
pub trait FileReader: Send + Sync {
    async fn read(&self, project_id: Option<Uuid>, path: &str) -> Result<Option<Vec<u8>>, FileReadError>;
}

/// Repositories checked out under one directory: `<root>/<project_id>/<path>` (or `<root>/<path>` for memories
/// without a project).
pub struct DirectoryReader {
    root: PathBuf,
}

impl DirectoryReader {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// Joins a stored path under the root, refusing absolute paths and `..` so a memory cannot name files
    /// outside its repository.
    fn resolve(&self, project_id: Option<Uuid>, path: &str) -> Result<PathBuf, FileReadError> {
        let relative = Path::new(path);
        let safe =
            !path.is_empty() && relative.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if !safe {
            return Err(FileReadError::OutsideRepository(path.to_string()));
        }
        let base = match project_id {
            Some(project) => self.root.join(project.to_string()),
            None => self.root.clone(),
        };
        Ok(base.join(relative))
    }
}

#[async_trait]
impl FileReader for DirectoryReader {
    async fn read(&self, project_id: Option<Uuid>, path: &str) -> Result<Option<Vec<u8>>, FileReadError> {
        let full = self.resolve(project_id, path)?;
        match tokio::fs::read(&full).await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(FileReadError::Io { path: path.to_string(), source }),
        }
    }
}

/// What one scan did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanReport {
    pub scanned: usize,
    pub unchanged: usize,
    pub updated: usize,
    pub archived: usize,
    /// Memories whose file could not be read (left as they were, to be retried).
    pub failed: usize,
}

pub struct FileScanner {
    reader: Arc<dyn FileReader>,
    embedder: Option<Arc<dyn Embedder>>,
}

/// The content hash stored in `memory.content_hash`.
pub fn content_hash(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

impl FileScanner {
    pub fn new(reader: Arc<dyn FileReader>, embedder: Option<Arc<dyn Embedder>>) -> Self {
        Self { reader, embedder }
    }

    /// Scans every active file-backed memory of an organisation, one transaction per memory.
    pub async fn scan(&self, pool: &PgPool, organization_id: Uuid) -> crate::Result<ScanReport> {
        let mut tx = store::begin_for_org(pool, organization_id).await?;
        let memories = store::memories::active_file_backed(&mut *tx, organization_id).await?;
        tx.commit().await?;
        let mut report = ScanReport::default();
        for memory in memories {
            report.scanned += 1;
            let path = memory.file_path.clone().unwrap_or_default();
            match self.reader.read(memory.project_id, &path).await {
                Ok(None) => {
                    self.apply(pool, &memory, Outcome::Deleted).await?;
                    report.archived += 1;
                }
                Ok(Some(bytes)) if memory.content_hash.as_deref() == Some(content_hash(&bytes).as_str()) => {
                    self.apply(pool, &memory, Outcome::Unchanged).await?;
                    report.unchanged += 1;
                }
                Ok(Some(bytes)) => {
                    self.apply(pool, &memory, Outcome::Changed(bytes)).await?;
                    report.updated += 1;
                }
                Err(e) => {
                    tracing::warn!(memory_id = %memory.id, error = %e, "file-backed memory could not be scanned");
                    report.failed += 1;
                }
            }
        }
        Ok(report)
    }

    async fn apply(&self, pool: &PgPool, memory: &Memory, outcome: Outcome) -> crate::Result<()> {
        let org = memory.organization_id;
        let replacement = match &outcome {
            Outcome::Changed(bytes) => Some(self.replacement(memory, bytes).await?),
            _ => None,
        };
        let mut tx = store::begin_for_org(pool, org).await?;
        match (outcome, replacement) {
            (Outcome::Deleted, _) => {
                store::memories::archive(&mut *tx, org, memory.id).await?;
                let payload = serde_json::json!({ "memory_id": memory.id, "reason": "file_deleted" });
                store::outbox::append(&mut *tx, org, "memory.archived", payload).await?;
            }
            (Outcome::Changed(_), Some(new)) => {
                let new = store::memories::insert(&mut *tx, &new).await?;
                store::memories::supersede(&mut *tx, org, memory.id, new.id).await?;
                let payload = serde_json::json!({ "memory_id": memory.id, "superseded_by": new.id });
                store::outbox::append(&mut *tx, org, "memory.superseded", payload).await?;
            }
            _ => {}
        }
        store::memories::mark_scanned(&mut *tx, org, memory.id, Utc::now()).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn replacement(&self, memory: &Memory, bytes: &[u8]) -> crate::Result<NewMemory> {
        let mut text = String::from_utf8_lossy(bytes).into_owned();
        if text.len() > MAX_CONTENT_BYTES {
            let mut cut = MAX_CONTENT_BYTES;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        let hash = content_hash(bytes);
        let mut new = NewMemory::replacing(memory, text);
        new.content_hash = Some(hash.clone());
        new.provenance.source_kind = SourceKind::File;
        new.provenance.trust_level = TrustLevel::Verified;
        new.provenance.source_ref = Some(format!("{}@{hash}", memory.file_path.as_deref().unwrap_or_default()));
        if let Some(embedder) = &self.embedder {
            new.embedding = Some(embedder.embed_one(&new.content).await?);
        }
        Ok(new)
    }
}

enum Outcome {
    Unchanged,
    Changed(Vec<u8>),
    Deleted,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_outside_the_repository_are_refused() {
        let reader = DirectoryReader::new("/repos");
        for bad in ["../etc/passwd", "/etc/passwd", "src/../../x", ""] {
            assert!(reader.resolve(None, bad).is_err(), "{bad}");
        }
        let project = Uuid::nil();
        assert_eq!(
            reader.resolve(Some(project), "src/./lib.rs").unwrap(),
            PathBuf::from(format!("/repos/{project}/src/./lib.rs"))
        );
    }
}
