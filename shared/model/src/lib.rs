//! memory-model: what the agent-memory service reasons about, without I/O. Memories and their types
//! ([`domain`]), who may read a memory and what may replace it ([`domain::readership`]), the write gate's trust
//! rules and the ingest message ([`ingest`]), every queue message ([`jobs`], [`forget`]) and the languages of
//! repositories' files ([`language`]).

pub mod domain;
pub mod forget;
pub mod ingest;
pub mod jobs;
pub mod language;
