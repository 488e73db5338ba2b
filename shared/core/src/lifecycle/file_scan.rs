//! The file-backed freshness scan: memories whose content comes from a file in a project's repository are
//! re-read, each file once. A file's hash is its git blob SHA. A whole-file memory (no anchor) is verified while its
//! file is unchanged; when the file changes it is marked (`file_changed_at`: kept, returned with `stale: true`,
//! never replaced by the whole file). An anchored memory (a chunk of its file, [`crate::repository::chunk`]) is compared
//! by its own chunk: unchanged -> verified; moved (same text, other lines) -> its anchor's lines updated, no new
//! version; changed -> a new version with the chunk's new text superseding only that memory (a memory that was not
//! the chunk's text, a summary say, is marked stale instead); anchor gone -> `missing`. A missing file or anchor is
//! archived only once it has been missing for the grace period, so a file away for one scan (a sync in progress)
//! comes back unharmed, and one that matches again clears the marks. Chunks of a scanned file that no memory
//! anchors (a new or renamed declaration) become memories like their file's others. A `verified` memory whose
//! producer named a blob SHA the repository does not hold (a plain checkout: not the file's) is lowered to
//! `unverified` at its first scan, the reason recorded. A file that cannot be
//! read (refused, too large, an I/O error) is recorded on its memories; only a database failure fails the scan.

use std::{collections::BTreeMap, sync::Arc};

use chrono::{TimeDelta, Utc};
use sqlx::PgPool;
use uuid::Uuid;

pub use crate::repository::reader::DEFAULT_MAX_FILE_BYTES;
use crate::{
    domain::{Anchor, Memory, MemoryStatus, NewMemory, Scope, TrustLevel, content_hash},
    embed::Embedder,
    jobs::{FileCursor, FileScanJob, JobType},
    lifecycle::{
        embed_optional,
        guarded::{self, Decider},
    },
    repository::{
        Chunk, FileReader, Language, blob_sha, chunk_file,
        reader::{FileReadError, is_blob_sha},
    },
    store::{self, transitions},
};

/// How long a file may be missing before its memory is archived (`MEMORY_FILE_MISSING_GRACE_HOURS`): three daily
/// scans.
pub const DEFAULT_MISSING_GRACE: TimeDelta = TimeDelta::hours(72);

/// How long the scan waits for one embedding of a new version.
const EMBED_BUDGET: std::time::Duration = std::time::Duration::from_secs(30);

/// Organisations with more file-backed memories than this are scanned one project per message.
pub const LARGE_ORGANIZATION: i64 = 1_000;

/// The daily scan's fan-out: queues one `memory_file_scan` job per organisation that has file-backed memories
/// (per project for an organisation above [`LARGE_ORGANIZATION`]), in the job outbox; returns how many. The
/// organisations are those listed in `domain_event_outbox_org` (every organisation that ever wrote a memory).
pub async fn schedule_scans(pool: &PgPool) -> crate::Result<usize> {
    let mut queued = 0;
    for organization_id in store::turns::organizations(pool).await? {
        let mut tx = store::begin_for_org(pool, organization_id).await?;
        let projects = store::memories::file_backed_by_project(&mut *tx, organization_id).await?;
        let total: i64 = projects.iter().map(|(_, n)| n).sum();
        let scopes: Vec<Option<Uuid>> = match total {
            0 => Vec::new(),
            n if n <= LARGE_ORGANIZATION => vec![None],
            _ => projects.into_iter().map(|(project, _)| project).collect(),
        };
        for project_id in scopes {
            let job = FileScanJob::new(organization_id, project_id);
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
    /// Anchored memories whose chunk moved within its file (anchor updated, no new version).
    pub moved: usize,
    /// Anchored memories replaced by a new version of their chunk.
    pub replaced: usize,
    /// Memories created for chunks no memory anchored.
    pub added: usize,
    /// Memories whose file (or chunk) says something else now, marked stale and kept.
    pub changed: usize,
    /// Memories whose file or anchor is missing, within the grace period (marked, kept).
    pub missing: usize,
    /// Memories whose file or anchor was missing for longer than the grace period.
    pub archived: usize,
    /// Memories whose producer named a blob SHA the repository does not have (lowered to unverified).
    pub mismatched: usize,
    /// Memories whose file could not be read (why is recorded on each; they stay as they were).
    pub failed: usize,
}

pub struct FileScanner {
    reader: Arc<dyn FileReader>,
    embedder: Option<Arc<dyn Embedder>>,
    missing_grace: TimeDelta,
    files_per_run: i64,
}

/// Files one run of a scan job reads at most; a larger scan queues a job for the rest.
pub const FILES_PER_RUN: i64 = 500;

impl ScanReport {
    fn add(&mut self, other: &ScanReport) {
        self.scanned += other.scanned;
        self.unchanged += other.unchanged;
        self.moved += other.moved;
        self.replaced += other.replaced;
        self.added += other.added;
        self.changed += other.changed;
        self.missing += other.missing;
        self.archived += other.archived;
        self.mismatched += other.mismatched;
        self.failed += other.failed;
    }
}

/// What a scan found for one memory.
enum Outcome {
    /// Verified: the file (and chunk) as the memory was written from; `hash` is the file's, `anchor` the chunk's
    /// place now (the same or moved).
    Unchanged {
        hash: String,
        anchor: Option<Anchor>,
        moved: bool,
    },
    /// The memory's chunk has new text: a new version replaces the memory.
    Replaced {
        hash: String,
        chunk: Chunk,
    },
    Changed,
    Missing,
    /// A blob SHA the producer named is not the file's.
    Mismatch(String),
    Unreadable(String),
}

/// A file as read now, and its chunks when they are needed.
struct ReadFile {
    path: String,
    sha: String,
    chunks: Vec<Chunk>,
}

impl FileScanner {
    pub fn new(reader: Arc<dyn FileReader>) -> Self {
        Self { reader, embedder: None, missing_grace: DEFAULT_MISSING_GRACE, files_per_run: FILES_PER_RUN }
    }

    /// How long a file may be missing before its memory is archived.
    pub fn with_missing_grace(mut self, grace: TimeDelta) -> Self {
        self.missing_grace = grace;
        self
    }

    /// Files one run of a scan job reads at most.
    pub fn with_files_per_run(mut self, files: i64) -> Self {
        self.files_per_run = files.max(1);
        self
    }

    /// Embeds the new versions and chunks the scan writes (without one they are stored unembedded).
    pub fn with_embedder(mut self, embedder: Arc<dyn Embedder>) -> Self {
        self.embedder = Some(embedder);
        self
    }

    /// Scans every active file-backed memory of an organisation, page after page.
    pub async fn scan(&self, pool: &PgPool, organization_id: Uuid) -> crate::Result<ScanReport> {
        self.scan_project(pool, organization_id, None).await
    }

    /// Scans the active file-backed memories of an organisation, or of one of its projects, page after page.
    pub async fn scan_project(
        &self,
        pool: &PgPool,
        organization_id: Uuid,
        project_id: Option<Uuid>,
    ) -> crate::Result<ScanReport> {
        let mut total = ScanReport::default();
        let mut after = None;
        loop {
            let (report, next) = self.scan_page(pool, organization_id, project_id, after.as_ref()).await?;
            total.add(&report);
            match next {
                Some(cursor) => after = Some(cursor),
                None => return Ok(total),
            }
        }
    }

    /// One run of a scan job: at most [`FILES_PER_RUN`] files from the job's cursor on; when files remain, the
    /// job for the rest goes into the job outbox (each run fits the function's timeout however large the
    /// repository).
    pub async fn scan_from(&self, pool: &PgPool, job: &FileScanJob) -> crate::Result<ScanReport> {
        let (report, next) = self.scan_page(pool, job.organization_id, job.project_id, job.after.as_ref()).await?;
        if let Some(cursor) = next {
            let rest = FileScanJob { after: Some(cursor), ..job.clone() };
            let mut tx = store::begin_for_org(pool, job.organization_id).await?;
            let body = serde_json::to_value(rest).expect("a job serialises");
            // A scan delivered twice queues the rest once while the first is waiting to be sent.
            if !store::jobs::has_unsent_body(&mut *tx, job.organization_id, JobType::MemoryFileScan, &body).await? {
                store::jobs::enqueue(&mut *tx, job.organization_id, JobType::MemoryFileScan, body).await?;
            }
            tx.commit().await?;
        }
        Ok(report)
    }

    /// Scans the next page of files after `after`; returns what it did and, when more files may follow, the last
    /// file it scanned.
    async fn scan_page(
        &self,
        pool: &PgPool,
        organization_id: Uuid,
        project_id: Option<Uuid>,
        after: Option<&FileCursor>,
    ) -> crate::Result<(ScanReport, Option<FileCursor>)> {
        let mut tx = store::begin_for_org(pool, organization_id).await?;
        let memories =
            store::memories::active_file_backed_page(&mut *tx, organization_id, project_id, after, self.files_per_run)
                .await?;
        tx.commit().await?;
        let mut files: BTreeMap<(Option<Uuid>, String), Vec<Memory>> = BTreeMap::new();
        for memory in memories {
            files.entry((memory.project_id, memory.file_path.clone().unwrap_or_default())).or_default().push(memory);
        }
        let next = (files.len() as i64 >= self.files_per_run)
            .then(|| {
                files.keys().last().map(|(project_id, path)| FileCursor { project_id: *project_id, path: path.clone() })
            })
            .flatten();
        let mut report = ScanReport::default();
        for ((project, path), memories) in files {
            report.scanned += memories.len();
            let Some(project) = project else {
                let why = "refused: a file-backed memory needs a project";
                for memory in &memories {
                    self.apply(pool, memory, Outcome::Unreadable(why.into()), &mut report).await?;
                }
                continue;
            };
            let read = match self.reader.read(organization_id, project, &path).await {
                Ok(Some(bytes)) => read_file(&path, bytes, &memories).await.map(Some),
                Ok(None) => Ok(None),
                Err(e) => Err(e.to_string()),
            };
            let file = match read {
                Ok(file) => file,
                Err(why) => {
                    tracing::warn!(%path, reason = %why, "file-backed memories could not be scanned");
                    for memory in &memories {
                        self.apply(pool, memory, Outcome::Unreadable(why.clone()), &mut report).await?;
                    }
                    continue;
                }
            };
            for memory in &memories {
                let outcome = match &file {
                    None => Outcome::Missing,
                    Some(file) => match self.disowned(memory, project, file).await {
                        Ok(Some(claimed)) => mismatch(&claimed, &file.sha),
                        Ok(None) => examine(memory, file),
                        Err(e) => Outcome::Unreadable(e.to_string()),
                    },
                };
                self.apply(pool, memory, outcome, &mut report).await?;
            }
            if let Some(file) = &file {
                self.add_unanchored_chunks(pool, &memories, file, &mut report).await?;
            }
        }
        Ok((report, next))
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
        let replacement = match &outcome {
            Outcome::Replaced { hash, chunk } => Some(self.new_version(memory, hash, chunk).await?),
            _ => None,
        };
        let org = memory.organization_id;
        let mut tx = store::begin_for_org(pool, org).await?;
        let Some(current) = transitions::lock(&mut tx, org, &[memory.id]).await?.pop() else { return Ok(()) };
        if current.status != MemoryStatus::Active || current.content_hash != memory.content_hash {
            return Ok(()); // replaced or archived meanwhile
        }
        let now = Utc::now();
        let id = memory.id;
        match outcome {
            Outcome::Unchanged { hash, anchor, moved } => {
                store::memories::set_file_state(&mut *tx, org, id, &hash, anchor.as_ref()).await?;
                store::memories::mark_file(&mut *tx, org, id, false, false, now).await?;
                store::memories::record_scan(&mut *tx, org, id, now, true, None).await?;
                if moved {
                    report.moved += 1;
                } else {
                    report.unchanged += 1;
                }
            }
            Outcome::Replaced { .. } => {
                let new = replacement.expect("a replacement was prepared");
                match guarded::succeed(&mut tx, Decider::FileScan, &new, &[id], &current, "file_changed").await? {
                    guarded::Outcome::Applied(created) => {
                        store::memories::record_scan(&mut *tx, org, created.id, now, true, None).await?;
                        report.replaced += 1;
                    }
                    guarded::Outcome::Held(why) => {
                        store::memories::mark_file(&mut *tx, org, id, true, false, now).await?;
                        store::memories::record_scan(&mut *tx, org, id, now, false, Some(&why)).await?;
                        report.changed += 1;
                    }
                }
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
            Outcome::Mismatch(why) => {
                store::memories::set_trust(&mut *tx, org, id, TrustLevel::Unverified).await?;
                store::memories::mark_file(&mut *tx, org, id, true, false, now).await?;
                store::memories::record_scan(&mut *tx, org, id, now, false, Some(&why)).await?;
                report.mismatched += 1;
            }
            Outcome::Unreadable(why) => {
                store::memories::record_scan(&mut *tx, org, id, now, false, Some(&why)).await?;
                report.failed += 1;
            }
        }
        tx.commit().await?;
        Ok(())
    }

    /// The blob SHA a `verified` memory was ingested with, when no scan has confirmed it and the repository does
    /// not hold it (a reader that cannot tell compares it with the file as it is now). A repository that could not
    /// be read is an error: the memory keeps its trust until a scan can tell.
    async fn disowned(&self, memory: &Memory, project: Uuid, file: &ReadFile) -> Result<Option<String>, FileReadError> {
        let Some(claimed) = memory.content_hash.as_deref().filter(|h| is_blob_sha(h) && *h != file.sha) else {
            return Ok(None);
        };
        let unproven = memory.provenance.trust_level == TrustLevel::Verified && memory.last_verified_at.is_none();
        if !unproven {
            return Ok(None);
        }
        let held = self.reader.holds_blob(memory.organization_id, project, claimed).await?;
        Ok((held != Some(true)).then(|| claimed.to_string()))
    }

    /// The memory as the chunk now reads, embedded.
    async fn new_version(&self, memory: &Memory, hash: &str, chunk: &Chunk) -> crate::Result<NewMemory> {
        let mut new = NewMemory::replacing(memory, chunk.text.clone());
        new.context = Some(chunk.context.clone());
        new.content_hash = Some(hash.to_string());
        new.anchor = Some(anchor_of(chunk));
        new.provenance = memory.provenance.clone();
        // `<repository>@<ref>:<path>#<symbol>@<blob sha>`, for this chunk and this blob.
        if let Some((repository_at_ref, _)) = memory.provenance.source_ref.as_deref().and_then(|r| r.split_once(':')) {
            let path = memory.file_path.as_deref().unwrap_or_default();
            new.provenance.source_ref = Some(format!("{repository_at_ref}:{path}#{}@{hash}", chunk.symbol));
        }
        new.labels = serde_json::json!({"chunk": chunk.kind});
        new.embedding = embed_optional(self.embedder.as_deref(), &new.embedding_input(), EMBED_BUDGET).await?;
        Ok(new)
    }

    /// New memories for the chunks of a file that no active memory copies, when the file's memories are copies of
    /// its chunks (an imported repository): shaped like the first of them.
    async fn add_unanchored_chunks(
        &self,
        pool: &PgPool,
        memories: &[Memory],
        file: &ReadFile,
        report: &mut ScanReport,
    ) -> crate::Result<()> {
        let Some(template) = memories.iter().find(|m| is_chunk_copy(m) && m.scope == Scope::Project) else {
            return Ok(());
        };
        let copied: Vec<&str> = memories
            .iter()
            .filter(|m| is_chunk_copy(m) && m.scope == Scope::Project && m.repository == template.repository)
            .filter_map(|m| m.anchor.as_ref().map(|a| a.symbol.as_str()))
            .collect();
        for chunk in file.chunks.iter().filter(|c| !copied.contains(&c.symbol.as_str())) {
            let new = self.new_version(template, &file.sha, chunk).await?;
            let org = template.organization_id;
            let mut tx = store::begin_for_org(pool, org).await?;
            // An import or another scan may have added it meanwhile.
            store::memories::lock_file(&mut *tx, org, template.project_id, &file.path).await?;
            let repository = template.repository.as_deref();
            if store::memories::chunk_at(&mut *tx, org, template.project_id, repository, &file.path, &chunk.symbol)
                .await?
                .is_some()
            {
                continue;
            }
            let created = transitions::create(&mut tx, &new, &[]).await?;
            store::memories::record_scan(&mut *tx, org, created.id, Utc::now(), true, None).await?;
            tx.commit().await?;
            report.added += 1;
        }
        Ok(())
    }
}

/// A file's SHA, and its chunks when an anchored memory must look at its chunk (the file is not the one it was
/// last verified against, the memory was never verified, or its anchor has no hash yet): an unchanged file is not
/// parsed. Chunking runs off the
/// async threads; a file the chunker cannot read within its budget is an error (recorded on its memories).
async fn read_file(path: &str, bytes: Vec<u8>, memories: &[Memory]) -> Result<ReadFile, String> {
    let sha = blob_sha(&bytes);
    let needs_chunks = memories.iter().any(|m| {
        m.anchor.as_ref().is_some_and(|a| {
            a.hash.is_none() || m.last_verified_at.is_none() || m.content_hash.as_deref() != Some(sha.as_str())
        })
    });
    let language = Language::of_path(path).filter(|_| needs_chunks);
    let chunks = match (language, String::from_utf8(bytes)) {
        (Some(language), Ok(text)) => {
            let owned = path.to_string();
            tokio::task::spawn_blocking(move || chunk_file(&owned, language, &text))
                .await
                .map_err(|e| format!("the chunker's task failed: {e}"))?
                .map_err(|e| e.to_string())?
        }
        _ => Vec::new(),
    };
    Ok(ReadFile { path: path.to_string(), sha, chunks })
}

/// Whether the memory's content is its anchored chunk's text (so a new text of the chunk is a new version of it).
fn is_chunk_copy(memory: &Memory) -> bool {
    memory.anchor.as_ref().and_then(|a| a.hash.as_deref()) == Some(content_hash(memory.content.as_bytes()).as_str())
}

fn anchor_of(chunk: &Chunk) -> Anchor {
    Anchor {
        symbol: chunk.symbol.clone(),
        hash: Some(chunk.hash()),
        start_line: chunk.start_line,
        end_line: chunk.end_line,
    }
}

/// Compares one memory with its file as read now.
fn examine(memory: &Memory, file: &ReadFile) -> Outcome {
    let known = memory.content_hash.as_deref().filter(|h| is_blob_sha(h));
    let Some(anchor) = &memory.anchor else {
        return match known {
            Some(h) if h == file.sha => Outcome::Unchanged { hash: file.sha.clone(), anchor: None, moved: false },
            Some(_) => Outcome::Changed,
            // No file hash yet (or one of another kind): this read is the baseline later scans compare with.
            None => Outcome::Unchanged { hash: file.sha.clone(), anchor: None, moved: false },
        };
    };
    // A file as it was last verified: its chunks are as they were. Before a memory's first verification its text is
    // compared with the chunk whatever SHA its producer named.
    if known == Some(file.sha.as_str()) && anchor.hash.is_some() && memory.last_verified_at.is_some() {
        return Outcome::Unchanged { hash: file.sha.clone(), anchor: None, moved: false };
    }
    if file.chunks.is_empty() {
        // Not a file the chunker reads (any more): its chunk cannot be found, but the file is there.
        return Outcome::Changed;
    }
    let found = file.chunks.iter().find(|c| c.symbol == anchor.symbol);
    // A chunk renamed without a change of text (a renumbered `#2`, a section under a renamed heading) moved.
    let found = found.or_else(|| file.chunks.iter().find(|c| anchor.hash.as_deref() == Some(c.hash().as_str())));
    let Some(chunk) = found else {
        return Outcome::Missing;
    };
    let now = anchor_of(chunk);
    match anchor.hash.as_deref() {
        // No chunk hash yet: this read is the baseline.
        None => Outcome::Unchanged { hash: file.sha.clone(), anchor: Some(now), moved: false },
        Some(h) if h == chunk.hash() => {
            let moved =
                (anchor.start_line, anchor.end_line, &anchor.symbol) != (now.start_line, now.end_line, &now.symbol);
            Outcome::Unchanged { hash: file.sha.clone(), anchor: Some(now), moved }
        }
        Some(_) if is_chunk_copy(memory) => Outcome::Replaced { hash: file.sha.clone(), chunk: chunk.clone() },
        Some(_) => Outcome::Changed,
    }
}

fn mismatch(claimed: &str, actual: &str) -> Outcome {
    Outcome::Mismatch(format!(
        "the blob SHA {claimed} the producer named is not the repository's ({actual}): lowered to unverified"
    ))
}
