//! Background maintenance of memory: supersession chains, LLM dedup and merge, entity synthesis
//! (contradiction detection and file scans land here next).

pub mod contradiction;
pub mod dedup;
pub mod supersession;
pub mod synthesis;
