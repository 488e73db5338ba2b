//! What an agent reads from a project's repository: a declaration by its symbol path ([`RepositoryTools::read_symbol`])
//! and a bounded range of a file's lines ([`RepositoryTools::read_file_range`]), through the same reader, sandbox
//! and size cap as the file scan, off the async threads. The caller's right to read the file (it became memory the
//! caller may read) is checked by the retriever; a name that holds secrets is never read.

use std::sync::Arc;

use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use super::{FileReadError, FileReader, Language, chunk_file, exclude::Exclusions};

/// The most lines one `read_file_range` returns.
pub const MAX_RANGE_LINES: u32 = 400;

/// A declaration or section read from the repository as it is now.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct SymbolText {
    pub path: String,
    pub symbol: String,
    pub kind: String,
    pub language: String,
    pub start_line: u32,
    pub end_line: u32,
    pub text: String,
}

/// Lines of a file as it is now.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct FileRange {
    pub path: String,
    pub start_line: u32,
    pub end_line: u32,
    /// How many lines the file has.
    pub total_lines: u32,
    pub text: String,
}

pub struct RepositoryTools {
    reader: Arc<dyn FileReader>,
    exclusions: Exclusions,
}

impl RepositoryTools {
    pub fn new(reader: Arc<dyn FileReader>, exclusions: Exclusions) -> Self {
        Self { reader, exclusions }
    }

    /// Whether `path` has a name that is never read (a secret's).
    pub fn excludes(&self, path: &str) -> bool {
        self.exclusions.check(path).is_some()
    }

    /// The chunk of `path` named `symbol` (a symbol path such as `AuthError::code`, or a heading breadcrumb).
    pub async fn read_symbol(
        &self,
        organization_id: Uuid,
        project_id: Uuid,
        path: &str,
        symbol: &str,
    ) -> crate::Result<SymbolText> {
        let language = Language::of_path(path)
            .ok_or_else(|| crate::Error::validation(format!("{path:?} is not a file the chunker reads")))?;
        let text = self.text(organization_id, project_id, path).await?;
        let owned = path.to_string();
        let chunks = tokio::task::spawn_blocking(move || chunk_file(&owned, language, &text))
            .await
            .map_err(|e| crate::Error::Unexpected(anyhow::anyhow!("the chunker's task failed: {e}")))?
            .map_err(|e| crate::Error::validation(format!("{path}: {e}")))?;
        let chunk = chunks.into_iter().find(|c| c.symbol == symbol).ok_or_else(|| crate::Error::NotFound {
            kind: "symbol",
            message: format!("{path} has no declaration or section {symbol:?}"),
        })?;
        Ok(SymbolText {
            path: path.to_string(),
            symbol: chunk.symbol,
            kind: chunk.kind.to_string(),
            language: language.as_str().to_string(),
            start_line: chunk.start_line,
            end_line: chunk.end_line,
            text: chunk.text,
        })
    }

    /// Lines `start_line..=end_line` (1-based) of `path`, at most [`MAX_RANGE_LINES`], clipped to the file.
    pub async fn read_file_range(
        &self,
        organization_id: Uuid,
        project_id: Uuid,
        path: &str,
        start_line: u32,
        end_line: u32,
    ) -> crate::Result<FileRange> {
        if start_line == 0 || end_line < start_line {
            return Err(crate::Error::validation("lines are 1-based and end_line is not before start_line"));
        }
        if end_line - start_line >= MAX_RANGE_LINES {
            return Err(crate::Error::validation(format!("at most {MAX_RANGE_LINES} lines at a time")));
        }
        let text = self.text(organization_id, project_id, path).await?;
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        let total_lines = lines.len() as u32;
        if start_line > total_lines.max(1) {
            return Err(crate::Error::validation(format!("{path} has {total_lines} lines")));
        }
        let end = end_line.min(total_lines);
        let text = lines[(start_line - 1) as usize..end as usize].concat();
        Ok(FileRange { path: path.to_string(), start_line, end_line: end, total_lines, text })
    }

    async fn text(&self, organization_id: Uuid, project_id: Uuid, path: &str) -> crate::Result<String> {
        match self.reader.read(organization_id, project_id, path).await {
            Ok(Some(bytes)) => {
                String::from_utf8(bytes).map_err(|_| crate::Error::validation(format!("{path} is not text")))
            }
            Ok(None) => Err(crate::Error::NotFound {
                kind: "file",
                message: format!("the project's repository has no file {path}"),
            }),
            Err(FileReadError::NoRepository) => Err(crate::Error::NotFound {
                kind: "repository",
                message: format!("project {project_id} has no repository"),
            }),
            Err(FileReadError::Io { source, .. }) => {
                Err(crate::Error::Unavailable(format!("reading {path}: {source}")))
            }
            Err(FileReadError::Repository(e)) => Err(crate::Error::Unavailable(format!("the repository: {e}"))),
            Err(refused) => Err(crate::Error::validation(refused.to_string())),
        }
    }
}
