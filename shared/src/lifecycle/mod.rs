//! Background maintenance of memory: supersession chains (and, next, dedup, contradiction, synthesis, file scans).

pub mod supersession;
