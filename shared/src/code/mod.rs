//! Repositories as memory: reading a project's files ([`reader`]: git at a ref, or a plain checkout), the
//! languages the service knows ([`Language`]) and structure-aware chunks with stable anchors ([`chunk`]).

pub mod chunk;
mod language;
pub mod reader;

pub use chunk::{Chunk, chunk_file};
pub use language::Language;
pub use reader::{DirectoryReader, FileReadError, FileReader, GitReader, Snapshot, blob_sha};
