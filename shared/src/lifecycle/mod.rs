//! Background maintenance of memory: supersession chains, LLM dedup and merge, contradiction detection, entity
//! synthesis and the file-backed freshness scan.

pub mod contradiction;
pub mod dedup;
pub mod file_scan;
pub mod supersession;
pub mod synthesis;
