//! The integration-test binary: everything runs against the local stack's PostgreSQL + pgvector (a fresh
//! database per test), moto, and the real MiniLM weights.

mod api;
mod aws;
mod bedrock;
mod embedder;
mod events;
mod forgetting;
mod hardening;
mod infra;
mod ingest;
mod integrity;
mod lifecycle;
mod mcp;
mod pipeline;
mod properties;
mod real_repositories;
mod repository;
mod robustness;
mod schema;
mod search;
mod shipped_ranking;
mod supersession;
mod workers;
