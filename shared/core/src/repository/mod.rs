//! Repositories as memory: reading a project's files ([`reader`]: git at a ref, or a plain checkout), the
//! languages the service knows ([`Language`]), structure-aware chunks with stable anchors ([`chunk`]) and a
//! repository's snapshot as ingest messages ([`import`]).

pub mod chunk;
pub mod exclude;
pub mod import;
pub mod reader;
pub mod tools;

pub use chunk::{Chunk, ChunkError, chunk_file};
pub use memory_model::language::Language;
pub use reader::{DirectoryReader, FileReadError, FileReader, GitReader, RepositoryReader, Snapshot, blob_sha};
