//! The file-backed freshness scan: memories whose content comes from a file in a project's repository are
//! re-read. An unchanged file marks its memory verified; a memory without a file hash yet (as ingested) takes the
//! file's hash as its baseline; a changed file marks its memory changed (`file_changed_at`: it stays, returned with
//! `stale: true`, never replaced by the whole file); a missing file marks it missing (`file_missing_since`, also
//! stale) and archives it only once it has been missing for the grace period, so a file away for one scan (a sync
//! in progress) comes back unharmed; a file that matches again clears the marks. A file that cannot be read
//! (refused, too large, an I/O error) is recorded on the memory. Every scanned row records when it was scanned;
//! only a database failure fails the scan.

use std::{
    io::Read,
    path::{Component, Path, PathBuf},
    sync::Arc,
};

use async_trait::async_trait;
use chrono::{TimeDelta, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use crate::{
    domain::{Memory, MemoryStatus, content_hash},
    jobs::{FileScanJob, JobType},
    store::{self, transitions},
};

/// How long a file may be missing before its memory is archived (`MEMORY_FILE_MISSING_GRACE_HOURS`): three daily
/// scans.
pub const DEFAULT_MISSING_GRACE: TimeDelta = TimeDelta::hours(72);

/// Largest file read by default, in bytes; a larger file is recorded as refused.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 * 1024;

/// Why a file could not be read. Each is recorded on the memory; the scan goes on.
#[derive(Debug, thiserror::Error)]
pub enum FileReadError {
    #[error("refused: {0}")]
    Refused(String),
    #[error("refused: the file is larger than {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("reading {path}: {source}")]
    Io { path: String, source: std::io::Error },
}

/// Reads files of a project's repository. `Ok(None)` means the file does not exist.
#[async_trait]
pub trait FileReader: Send + Sync {
    async fn read(&self, organization_id: Uuid, project_id: Uuid, path: &str)
    -> Result<Option<Vec<u8>>, FileReadError>;
}

/// Repositories checked out under one directory, one per organisation and project:
/// `<root>/<organization_id>/<project_id>/<path>`. A path resolves only inside its own repository: absolute paths,
/// `..` and symlinks that lead out of it are refused (the repository is opened as a capability-based directory).
pub struct DirectoryReader {
    root: PathBuf,
    max_bytes: u64,
}

impl DirectoryReader {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into(), max_bytes: DEFAULT_MAX_FILE_BYTES }
    }

    pub fn with_max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// The repository of a project.
    fn repository(&self, organization_id: Uuid, project_id: Uuid) -> PathBuf {
        self.root.join(organization_id.to_string()).join(project_id.to_string())
    }
}

/// A stored path must be relative and plain (no `..`, no root); symlinks are checked when the file is opened.
fn check_relative(path: &str) -> Result<&Path, FileReadError> {
    let relative = Path::new(path);
    let plain =
        !path.is_empty() && relative.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if plain {
        Ok(relative)
    } else {
        Err(FileReadError::Refused(format!("{path:?} is not a path inside the repository")))
    }
}

#[async_trait]
impl FileReader for DirectoryReader {
    async fn read(
        &self,
        organization_id: Uuid,
        project_id: Uuid,
        path: &str,
    ) -> Result<Option<Vec<u8>>, FileReadError> {
        let relative = check_relative(path)?.to_path_buf();
        let repository = self.repository(organization_id, project_id);
        let (max, path) = (self.max_bytes, path.to_string());
        tokio::task::spawn_blocking(move || read_inside(&repository, &relative, max, &path))
            .await
            .map_err(|e| FileReadError::Refused(format!("reader task failed: {e}")))?
    }
}

fn read_inside(repository: &Path, relative: &Path, max: u64, path: &str) -> Result<Option<Vec<u8>>, FileReadError> {
    let io = |source: std::io::Error| FileReadError::Io { path: path.to_string(), source };
    let dir = match cap_std::fs::Dir::open_ambient_dir(repository, cap_std::ambient_authority()) {
        Ok(dir) => dir,
        // A missing checkout is a deployment problem, not a deleted file: nothing is archived for it.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(FileReadError::Refused("the project's repository is not checked out".into()));
        }
        Err(e) => return Err(io(e)),
    };
    let file = match dir.open(relative) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Err(FileReadError::Refused(format!("{path:?} leads outside the repository or is not readable")));
        }
        Err(e) => return Err(io(e)),
    };
    let metadata = file.metadata().map_err(io)?;
    if !metadata.is_file() {
        return Err(FileReadError::Refused(format!("{path:?} is not a regular file")));
    }
    if metadata.len() > max {
        return Err(FileReadError::TooLarge { limit: max });
    }
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    file.take(max + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > max {
        return Err(FileReadError::TooLarge { limit: max });
    }
    Ok(Some(bytes))
}

/// Organisations with more file-backed memories than this are scanned one project per message.
pub const LARGE_ORGANIZATION: i64 = 1_000;

/// The daily scan's fan-out: queues one `memory_file_scan` job per organisation that has file-backed memories
/// (per project for an organisation above [`LARGE_ORGANIZATION`]), in the job outbox; returns how many. The
/// organisations are those listed in `domain_event_outbox_org` (every organisation that ever wrote a memory).
pub async fn schedule_scans(pool: &PgPool) -> crate::Result<usize> {
    let mut queued = 0;
    for organization_id in store::outbox::organizations(pool).await? {
        let mut tx = store::begin_for_org(pool, organization_id).await?;
        let projects = store::memories::file_backed_by_project(&mut *tx, organization_id).await?;
        let total: i64 = projects.iter().map(|(_, n)| n).sum();
        let scopes: Vec<Option<Uuid>> = match total {
            0 => Vec::new(),
            n if n <= LARGE_ORGANIZATION => vec![None],
            _ => projects.into_iter().map(|(project, _)| project).collect(),
        };
        for project_id in scopes {
            let job = FileScanJob { job_type: Some(JobType::MemoryFileScan), organization_id, project_id };
            let body = serde_json::to_value(job).expect("a job serialises");
            store::jobs::enqueue(&mut *tx, organization_id, JobType::MemoryFileScan, body).await?;
            queued += 1;
        }
        tx.commit().await?;
    }
    Ok(queued)
}

/// What one scan did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanReport {
    pub scanned: usize,
    pub unchanged: usize,
    /// Memories whose file says something else now (marked, kept).
    pub changed: usize,
    /// Memories whose file is missing, within the grace period (marked, kept).
    pub missing: usize,
    /// Memories whose file was missing for longer than the grace period.
    pub archived: usize,
    /// Memories whose file could not be read (why is recorded on each; they stay as they were).
    pub failed: usize,
}

pub struct FileScanner {
    reader: Arc<dyn FileReader>,
    missing_grace: TimeDelta,
}

/// What a scan found for one memory.
enum Outcome {
    Unchanged,
    /// The first read of the file of a memory with no file hash yet.
    Baseline(String),
    Changed,
    Missing,
    Unreadable(String),
}

impl FileScanner {
    pub fn new(reader: Arc<dyn FileReader>) -> Self {
        Self { reader, missing_grace: DEFAULT_MISSING_GRACE }
    }

    /// How long a file may be missing before its memory is archived.
    pub fn with_missing_grace(mut self, grace: TimeDelta) -> Self {
        self.missing_grace = grace;
        self
    }

    /// Scans every active file-backed memory of an organisation, one transaction per memory.
    pub async fn scan(&self, pool: &PgPool, organization_id: Uuid) -> crate::Result<ScanReport> {
        self.scan_project(pool, organization_id, None).await
    }

    /// Scans the active file-backed memories of an organisation, or of one of its projects.
    pub async fn scan_project(
        &self,
        pool: &PgPool,
        organization_id: Uuid,
        project_id: Option<Uuid>,
    ) -> crate::Result<ScanReport> {
        let mut tx = store::begin_for_org(pool, organization_id).await?;
        let memories = store::memories::active_file_backed(&mut *tx, organization_id, project_id).await?;
        tx.commit().await?;
        let mut report = ScanReport::default();
        for memory in memories {
            report.scanned += 1;
            let outcome = self.examine(&memory).await;
            if let Outcome::Unreadable(why) = &outcome {
                tracing::warn!(memory_id = %memory.id, reason = %why, "file-backed memory could not be scanned");
            }
            self.apply(pool, &memory, outcome, &mut report).await?;
        }
        Ok(report)
    }

    /// Reads the memory's file and compares it with the hash the memory was written from.
    async fn examine(&self, memory: &Memory) -> Outcome {
        let path = memory.file_path.as_deref().unwrap_or_default();
        let Some(project_id) = memory.project_id else {
            return Outcome::Unreadable("refused: a file-backed memory needs a project".into());
        };
        match self.reader.read(memory.organization_id, project_id, path).await {
            Ok(None) => Outcome::Missing,
            // No file hash yet (an ingested memory, often a passage or a summary of its file): this read is the
            // baseline that later scans compare with.
            Ok(Some(bytes)) if memory.content_hash.is_none() => Outcome::Baseline(content_hash(&bytes)),
            Ok(Some(bytes)) if memory.content_hash.as_deref() == Some(content_hash(&bytes).as_str()) => {
                Outcome::Unchanged
            }
            Ok(Some(_)) => Outcome::Changed,
            Err(e) => Outcome::Unreadable(e.to_string()),
        }
    }

    /// Writes one memory's outcome in its own transaction, after checking that the memory is still the current,
    /// unchanged version that was read.
    async fn apply(
        &self,
        pool: &PgPool,
        memory: &Memory,
        outcome: Outcome,
        report: &mut ScanReport,
    ) -> crate::Result<()> {
        let org = memory.organization_id;
        let mut tx = store::begin_for_org(pool, org).await?;
        let Some(current) = transitions::lock(&mut tx, org, &[memory.id]).await?.pop() else { return Ok(()) };
        if current.status != MemoryStatus::Active || current.content_hash != memory.content_hash {
            return Ok(()); // replaced or archived meanwhile
        }
        let now = Utc::now();
        let id = memory.id;
        match outcome {
            Outcome::Unchanged | Outcome::Baseline(_) => {
                if let Outcome::Baseline(hash) = &outcome {
                    store::memories::set_file_hash(&mut *tx, org, id, hash).await?;
                }
                store::memories::mark_file(&mut *tx, org, id, false, false, now).await?;
                store::memories::record_scan(&mut *tx, org, id, now, true, None).await?;
                report.unchanged += 1;
            }
            Outcome::Changed => {
                store::memories::mark_file(&mut *tx, org, id, true, false, now).await?;
                store::memories::record_scan(&mut *tx, org, id, now, false, None).await?;
                report.changed += 1;
            }
            Outcome::Missing => {
                let since = current.file_missing_since.unwrap_or(now);
                if now - since >= self.missing_grace {
                    transitions::archive(&mut tx, org, id, "file_deleted").await?;
                    report.archived += 1;
                } else {
                    store::memories::mark_file(&mut *tx, org, id, current.file_changed_at.is_some(), true, since)
                        .await?;
                    report.missing += 1;
                }
                store::memories::record_scan(&mut *tx, org, id, now, false, None).await?;
            }
            Outcome::Unreadable(why) => {
                store::memories::record_scan(&mut *tx, org, id, now, false, Some(&why)).await?;
                report.failed += 1;
            }
        }
        tx.commit().await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_that_are_not_plain_relative_paths_are_refused() {
        for bad in ["../etc/passwd", "/etc/passwd", "src/../../x", ""] {
            assert!(check_relative(bad).is_err(), "{bad}");
        }
        assert_eq!(check_relative("src/./lib.rs").unwrap(), Path::new("src/./lib.rs"));
    }
}
