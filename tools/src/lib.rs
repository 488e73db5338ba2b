//! Shared pieces of the operator tools: scratch databases for benchmarks and evaluations, and statistics.

pub mod plot;
pub mod scratch;
pub mod stats;
pub mod synthetic;
