//! Reading a project's repository: [`FileReader`], over git repositories at a ref ([`GitReader`], the default) or
//! plain checkouts ([`DirectoryReader`]), each under `<root>/<organization_id>/<project_id>/`, with the same sandbox
//! (paths inside the repository only) and size cap. A file's hash is its git blob SHA ([`blob_sha`]), computed as
//! git does, whichever reader read it, so a SHA a producer sends can be checked against the repository.

use std::{
    io::Read,
    path::{Component, Path, PathBuf},
};

use async_trait::async_trait;
use uuid::Uuid;

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
            return Err(FileReadError::NoRepository);
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

/// The git blob SHA of a file's bytes, as `git hash-object` prints it.
pub fn blob_sha(bytes: &[u8]) -> String {
    gix::objs::compute_hash(gix::hash::Kind::Sha1, gix::objs::Kind::Blob, bytes)
        .expect("SHA-1 hashing of bytes in memory does not fail")
        .to_string()
}

/// Whether `text` is a git object id: 40 (SHA-1) or 64 (SHA-256) hexadecimal digits.
pub fn is_blob_sha(text: &str) -> bool {
    matches!(text.len(), 40 | 64) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

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
            let repository = gix::open(repository).map_err(|e| failed(&e))?;
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
    fn is_git(&self, organization_id: Uuid, project_id: Uuid) -> bool {
        let repository = project_folder(&self.root, organization_id, project_id);
        repository.join(".git").exists() || repository.join("HEAD").is_file()
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
        let repository = gix::open(dir).map_err(|e| failed("not a git repository", &e))?;
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

    /// Every regular file of the commit (no symlinks, no submodules), in path order.
    pub fn files(&self) -> Result<Vec<SnapshotFile>, FileReadError> {
        let tree = self.tree()?;
        let entries = tree.traverse().breadthfirst.files().map_err(|e| FileReadError::Repository(e.to_string()))?;
        let mut files: Vec<SnapshotFile> = entries
            .into_iter()
            .filter(|e| e.mode.is_blob())
            .map(|e| SnapshotFile { path: e.filepath.to_string(), blob_sha: e.oid.to_string() })
            .collect();
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(files)
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
        for bad in ["../etc/passwd", "/etc/passwd", "src/../../x", ""] {
            assert!(check_relative(bad).is_err(), "{bad}");
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
