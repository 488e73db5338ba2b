//! The integration-test binary: everything runs against the local stack's PostgreSQL + pgvector (a fresh
//! database per test), moto, and the real MiniLM weights.

mod api;
mod as_of;
mod aws;
mod bedrock;
mod console;
mod embedder;
mod events;
mod expiry;
mod export;
mod forgetting;
mod found_cache;
mod hardening;
mod infra;
mod ingest;
mod integrity;
mod lifecycle;
mod maintenance;
mod mcp;
mod model_failures;
mod pipeline;
mod properties;
mod real_repositories;
mod replica;
mod repository;
mod schema;
mod search;
mod shipped_ranking;
mod supersession;
mod synthesis;
mod workers;
