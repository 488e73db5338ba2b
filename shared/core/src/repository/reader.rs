//! Reading a project's repository: [`FileReader`], over git repositories at a ref ([`GitReader`], the default) or
//! plain checkouts ([`DirectoryReader`]), each under `<root>/<organization_id>/<project_id>/`, with the same sandbox
//! (paths inside the repository only) and size cap. A file's hash is its git blob SHA ([`blob_sha`]), computed as
//! git does, whichever reader read it, so a SHA a producer sends can be checked against the repository.
//!
//! What a repository holds is outside input: paths are checked before any file system call (plain, relative, no
//! NUL, names within the file system's limits), only regular files are read (a FIFO or device is refused without
//! blocking), a checkout is read as git only when its `.git` is a directory of its own (a `.git` file pointing
//! elsewhere is not followed), gix opens repositories isolated from the environment's configuration, and a commit's
//! tree is listed up to [`MAX_TREE_ENTRIES`] entries (a tree that reuses subtrees cannot grow without bound).

use std::{
    io::Read,
    path::{Component, Path, PathBuf},
};

use async_trait::async_trait;
use uuid::Uuid;

/// Largest file read by default (`MEMORY_FILE_MAX_BYTES`), in bytes; a larger file is recorded as too large. The
/// chunker bounds each chunk, so this bounds only the work and memory one file may take.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;
/// The most entries (files and folders) listed from one commit's tree.
pub const MAX_TREE_ENTRIES: usize = 200_000;
/// The longest path, and the longest name in it, that a file system takes.
const MAX_PATH_BYTES: usize = 4096;
const MAX_NAME_BYTES: usize = 255;

/// Why a file could not be read. Each is recorded on the memory; the scan goes on.
#[derive(Debug, thiserror::Error)]
pub enum FileReadError {
    #[error("refused: {0}")]
    Refused(String),
    #[error("refused: the file is larger than {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("reading {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("repository: {0}")]
    Repository(String),
    /// The project has no repository checked out (a deployment matter, not a deleted file).
    #[error("refused: the project's repository is not checked out")]
    NoRepository,
}

/// Reads files of a project's repository. `Ok(None)` means the file does not exist.
#[async_trait]
pub trait FileReader: Send + Sync {
    async fn read(&self, organization_id: Uuid, project_id: Uuid, path: &str)
    -> Result<Option<Vec<u8>>, FileReadError>;

    /// Whether the repository holds a blob (file content) of this SHA, from any commit: `Ok(None)` when the reader
    /// cannot tell (not a git repository), an error when the repository could not be read.
    async fn holds_blob(
        &self,
        _organization_id: Uuid,
        _project_id: Uuid,
        _sha: &str,
    ) -> Result<Option<bool>, FileReadError> {
        Ok(None)
    }
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
        project_folder(&self.root, organization_id, project_id)
    }
}

/// Where a project's repository is under a root of repositories: `<root>/<organization_id>/<project_id>`.
fn project_folder(root: &Path, organization_id: Uuid, project_id: Uuid) -> PathBuf {
    root.join(organization_id.to_string()).join(project_id.to_string())
}

/// A stored path must be relative and plain (no `..`, no root, no NUL, names a file system takes); symlinks are
/// checked when the file is opened.
pub fn check_relative(path: &str) -> Result<&Path, FileReadError> {
    let relative = Path::new(path);
    let plain =
        !path.is_empty() && relative.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if !plain {
        return Err(FileReadError::Refused(format!("{path:?} is not a path inside the repository")));
    }
    if path.contains('\0') {
        return Err(FileReadError::Refused("a path has no NUL character".into()));
    }
    if path.len() > MAX_PATH_BYTES || path.split('/').any(|name| name.len() > MAX_NAME_BYTES) {
        return Err(FileReadError::Refused(format!(
            "a path has at most {MAX_PATH_BYTES} bytes and names of at most {MAX_NAME_BYTES}"
        )));
    }
    Ok(relative)
}

/// An I/O error of reading one file: refused when it says something of the path (it names no regular file the
/// reader may read), else an I/O error (the storage failed; worth retrying).
fn io_error(path: &str, source: std::io::Error) -> FileReadError {
    use std::io::ErrorKind::*;
    match source.kind() {
        PermissionDenied => FileReadError::Refused(format!("{path:?} leads outside the repository or is not readable")),
        InvalidInput | NotADirectory | IsADirectory | InvalidData | Unsupported => {
            FileReadError::Refused(format!("{path:?}: {source}"))
        }
        _ => FileReadError::Io { path: path.to_string(), source },
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
    use cap_std::fs::OpenOptionsExt;
    let dir = match cap_std::fs::Dir::open_ambient_dir(repository, cap_std::ambient_authority()) {
        Ok(dir) => dir,
        // A missing checkout is a deployment problem, not a deleted file: nothing is archived for it.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(FileReadError::NoRepository);
        }
        Err(e) => return Err(FileReadError::Io { path: path.to_string(), source: e }),
    };
    // Non-blocking, so a FIFO is opened (and refused below) instead of waiting for a writer for ever.
    let mut options = cap_std::fs::OpenOptions::new();
    options.read(true).custom_flags(libc::O_NONBLOCK);
    let file = match dir.open_with(relative, &options) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(path, e)),
    };
    let metadata = file.metadata().map_err(|e| io_error(path, e))?;
    if !metadata.is_file() {
        return Err(FileReadError::Refused(format!("{path:?} is not a regular file")));
    }
    if metadata.len() > max {
        return Err(FileReadError::TooLarge { limit: max });
    }
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    file.take(max + 1).read_to_end(&mut bytes).map_err(|e| io_error(path, e))?;
    if bytes.len() as u64 > max {
        return Err(FileReadError::TooLarge { limit: max });
    }
    Ok(Some(bytes))
}

/// Opens a git repository with nothing but its own configuration: no global or system configuration, no
/// environment variables.
fn open_isolated(dir: &Path) -> gix::Result<gix::Repository> {
    gix::open_opts(dir, gix::open::Options::isolated())
}

/// The git blob SHA of a file's bytes, as `git hash-object` prints it.
pub fn blob_sha(bytes: &[u8]) -> String {
    gix::objs::compute_hash(gix::hash::Kind::Sha1, gix::objs::Kind::Blob, bytes)
        .expect("SHA-1 hashing of bytes in memory does not fail")
        .to_string()
}

pub use crate::domain::is_blob_sha;

/// Git repositories under one directory, `<root>/<organization_id>/<project_id>` (a clone, bare or not), read at
/// one ref (`MEMORY_REPOSITORY_REF`, `HEAD` by default): what is committed there, not the working tree.
pub struct GitReader {
    root: PathBuf,
    reference: String,
    max_bytes: u64,
}

impl GitReader {
    pub fn new(root: impl Into<PathBuf>, reference: impl Into<String>) -> Self {
        Self { root: root.into(), reference: reference.into(), max_bytes: DEFAULT_MAX_FILE_BYTES }
    }

    pub fn with_max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }
}

#[async_trait]
impl FileReader for GitReader {
    async fn read(
        &self,
        organization_id: Uuid,
        project_id: Uuid,
        path: &str,
    ) -> Result<Option<Vec<u8>>, FileReadError> {
        check_relative(path)?;
        let repository = project_folder(&self.root, organization_id, project_id);
        let (reference, max, path) = (self.reference.clone(), self.max_bytes, path.to_string());
        tokio::task::spawn_blocking(move || {
            if !repository.exists() {
                return Err(FileReadError::NoRepository);
            }
            Snapshot::open(&repository, &reference)?.read(&path, max)
        })
        .await
        .map_err(|e| FileReadError::Refused(format!("reader task failed: {e}")))?
    }

    async fn holds_blob(
        &self,
        organization_id: Uuid,
        project_id: Uuid,
        sha: &str,
    ) -> Result<Option<bool>, FileReadError> {
        let repository = project_folder(&self.root, organization_id, project_id);
        let Ok(id) = gix::ObjectId::from_hex(sha.as_bytes()) else { return Ok(Some(false)) };
        let failed = |e: &dyn std::fmt::Display| FileReadError::Repository(e.to_string());
        let held = move || {
            let repository = open_isolated(&repository).map_err(|e| failed(&e))?;
            let header = repository.try_find_header(id).map_err(|e| failed(&e))?;
            Ok(Some(header.is_some_and(|header| header.kind() == gix::object::Kind::Blob)))
        };
        tokio::task::spawn_blocking(held)
            .await
            .map_err(|e| FileReadError::Refused(format!("reader task failed: {e}")))?
    }
}

/// Each project's repository as what it is: a git repository (a clone, bare or not) is read at the ref
/// ([`GitReader`]), any other folder as files ([`DirectoryReader`]).
pub struct RepositoryReader {
    root: PathBuf,
    git: GitReader,
    directory: DirectoryReader,
}

impl RepositoryReader {
    pub fn new(root: impl Into<PathBuf>, reference: impl Into<String>, max_bytes: u64) -> Self {
        let root = root.into();
        Self {
            git: GitReader::new(root.clone(), reference).with_max_bytes(max_bytes),
            directory: DirectoryReader::new(root.clone()).with_max_bytes(max_bytes),
            root,
        }
    }

    /// `MEMORY_REPOS_DIR` (None when unset), read at `MEMORY_REPOSITORY_REF` (`HEAD`), files up to
    /// `MEMORY_FILE_MAX_BYTES`.
    pub fn from_env() -> Result<Option<Self>, crate::config::ConfigError> {
        let Some(root) = std::env::var_os("MEMORY_REPOS_DIR").filter(|v| !v.is_empty()) else { return Ok(None) };
        let reference = crate::config::parsed_or("MEMORY_REPOSITORY_REF", "HEAD".to_string())?;
        let max_bytes = crate::config::parsed_or("MEMORY_FILE_MAX_BYTES", DEFAULT_MAX_FILE_BYTES)?;
        Ok(Some(Self::new(PathBuf::from(root), reference, max_bytes)))
    }
}

impl RepositoryReader {
    /// Whether the project's folder is a git repository of its own: a clone (`.git` a directory, not a file or
    /// symlink that could name another repository on the mount) or a bare repository (`HEAD`, `objects`, `refs`).
    fn is_git(&self, organization_id: Uuid, project_id: Uuid) -> bool {
        let repository = project_folder(&self.root, organization_id, project_id);
        let real_dir = |p: PathBuf| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
        let real_file = |p: PathBuf| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file());
        real_dir(repository.join(".git"))
            || (real_file(repository.join("HEAD"))
                && real_dir(repository.join("objects"))
                && real_dir(repository.join("refs")))
    }
}

#[async_trait]
impl FileReader for RepositoryReader {
    async fn read(
        &self,
        organization_id: Uuid,
        project_id: Uuid,
        path: &str,
    ) -> Result<Option<Vec<u8>>, FileReadError> {
        if self.is_git(organization_id, project_id) {
            self.git.read(organization_id, project_id, path).await
        } else {
            self.directory.read(organization_id, project_id, path).await
        }
    }

    async fn holds_blob(
        &self,
        organization_id: Uuid,
        project_id: Uuid,
        sha: &str,
    ) -> Result<Option<bool>, FileReadError> {
        if self.is_git(organization_id, project_id) {
            self.git.holds_blob(organization_id, project_id, sha).await
        } else {
            Ok(None)
        }
    }
}

/// One commit of a git repository: its files and their contents.
pub struct Snapshot {
    repository: gix::Repository,
    commit: gix::ObjectId,
    tree: gix::ObjectId,
}

/// A file of a snapshot: its path and blob SHA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotFile {
    pub path: String,
    pub blob_sha: String,
}

impl Snapshot {
    /// The commit `reference` names in the repository at `dir`.
    pub fn open(dir: &Path, reference: &str) -> Result<Self, FileReadError> {
        let failed = |what: &str, e: &dyn std::fmt::Display| FileReadError::Repository(format!("{what}: {e}"));
        let repository = open_isolated(dir).map_err(|e| failed("not a git repository", &e))?;
        let (commit, tree) = {
            let commit = repository
                .rev_parse_single(reference)
                .map_err(|e| failed(&format!("no commit {reference:?}"), &e))?
                .object()
                .and_then(|o| o.peel_to_commit())
                .map_err(|e| failed(&format!("{reference:?} is not a commit"), &e))?;
            let tree = commit.tree_id().map_err(|e| failed("the commit has no tree", &e))?.detach();
            (commit.id, tree)
        };
        Ok(Self { commit, tree, repository })
    }

    /// The commit's id.
    pub fn commit(&self) -> String {
        self.commit.to_string()
    }

    /// The regular files of the commit (no symlinks, no submodules), in path order, and whether the listing stopped
    /// at [`MAX_TREE_ENTRIES`] entries (the rest is not listed).
    pub fn files(&self) -> Result<(Vec<SnapshotFile>, bool), FileReadError> {
        let failed = |e: &dyn std::fmt::Display| FileReadError::Repository(e.to_string());
        let mut files = Vec::new();
        let mut entries = 0usize;
        let mut folders = std::collections::VecDeque::from([(String::new(), self.tree)]);
        'walk: while let Some((prefix, id)) = folders.pop_front() {
            let tree = self.repository.find_tree(id).map_err(|e| failed(&e))?;
            for entry in tree.iter() {
                let entry = entry.map_err(|e| failed(&e))?;
                entries += 1;
                if entries > MAX_TREE_ENTRIES {
                    break 'walk;
                }
                let path = format!("{prefix}{}", entry.filename());
                let mode = entry.mode();
                if mode.is_tree() {
                    folders.push_back((format!("{path}/"), entry.oid().to_owned()));
                } else if mode.is_blob() {
                    files.push(SnapshotFile { path, blob_sha: entry.oid().to_string() });
                }
            }
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok((files, entries > MAX_TREE_ENTRIES))
    }

    /// The size of a blob, read from its header.
    pub fn size(&self, blob_sha: &str) -> Result<u64, FileReadError> {
        let id = gix::ObjectId::from_hex(blob_sha.as_bytes()).map_err(|e| FileReadError::Repository(e.to_string()))?;
        let header = self.repository.find_header(id).map_err(|e| FileReadError::Repository(e.to_string()))?;
        Ok(header.size())
    }

    /// A file's bytes, or None when the commit has no file at `path`; a symlink or directory is refused, as is a
    /// file larger than `max` bytes.
    pub fn read(&self, path: &str, max: u64) -> Result<Option<Vec<u8>>, FileReadError> {
        let relative = check_relative(path)?;
        let tree = self.tree()?;
        let entry = tree.lookup_entry_by_path(relative).map_err(|e| FileReadError::Repository(e.to_string()))?;
        let Some(entry) = entry else { return Ok(None) };
        if !entry.mode().is_blob() {
            return Err(FileReadError::Refused(format!("{path:?} is not a regular file")));
        }
        let header = self.repository.find_header(entry.oid()).map_err(|e| FileReadError::Repository(e.to_string()))?;
        if header.size() > max {
            return Err(FileReadError::TooLarge { limit: max });
        }
        let blob = entry.object().map_err(|e| FileReadError::Repository(e.to_string()))?;
        Ok(Some(blob.detach().data))
    }

    fn tree(&self) -> Result<gix::Tree<'_>, FileReadError> {
        self.repository.find_tree(self.tree).map_err(|e| FileReadError::Repository(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_that_are_not_plain_relative_paths_are_refused() {
        let long_name = format!("src/{}.rs", "a".repeat(300));
        let long_path = "a/".repeat(2100);
        for bad in ["../etc/passwd", "/etc/passwd", "src/../../x", "", "src/a\0b.rs", &long_name, &long_path] {
            assert!(matches!(check_relative(bad), Err(FileReadError::Refused(_))), "{bad}");
        }
        assert_eq!(check_relative("src/./lib.rs").unwrap(), Path::new("src/./lib.rs"));
    }

    #[test]
    fn a_blob_sha_is_gits() {
        // `printf 'hello\n' | git hash-object --stdin`
        assert_eq!(blob_sha(b"hello\n"), "ce013625030ba8dba906f756967f9e9ca394464a");
        assert!(is_blob_sha(&blob_sha(b"")) && !is_blob_sha("sha256:00"));
    }
}
