//! Shared pieces of the operator tools: scratch databases for benchmarks and evaluations, statistics, the demo
//! corpus (`demo`), and the soak's independent model of the guarantees (`oracle`).

pub mod demo;
pub mod oracle;
pub mod plot;
pub mod scratch;
pub mod stats;
pub mod synthetic;
