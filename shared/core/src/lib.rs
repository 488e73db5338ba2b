//! memory-core: everything the agent-memory service does, free of any transport, over the model
//! (`memory-model`, re-exported as [`domain`] and [`jobs`]) and the SQL (`memory-store`, as [`store`]).
//!
//! The Lambda functions in `functions/*` translate HTTP requests, SQS messages and scheduled events into calls on
//! this crate and its results back. Nothing here knows about Lambda, API Gateway or SQS payloads.

pub mod config;
pub mod db;
pub mod due;
pub mod embed;
pub mod error;
#[cfg(test)]
mod fuzz;
pub mod ingest;
pub mod lifecycle;
pub mod llm;
pub mod outbox;
pub mod replica;
pub mod repository;
pub mod retrieval;
pub mod secrets;
pub mod services;
pub mod telemetry;

pub use error::{Error, Result};
pub use memory_model::{domain, jobs};
pub use memory_store as store;
