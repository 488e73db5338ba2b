//! The retrieve function: the HTTP API over `memory_core::retrieval`. The same axum router runs under
//! `lambda_http` behind API Gateway and as a plain server on loopback.

pub mod auth;
mod bootstrap;
pub mod error;
mod extract;
mod openapi;
mod routes;

use std::sync::Arc;

use axum::{Router, extract::DefaultBodyLimit};
use memory_core::retrieval::Retriever;

pub use auth::{Authenticator, Claims, Principal};
pub use bootstrap::state_from_env;

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// What every handler shares: built once per process.
#[derive(Clone)]
pub struct AppState {
    pub retriever: Arc<Retriever>,
    pub auth: Arc<Authenticator>,
}

/// The HTTP API.
pub fn app(state: AppState) -> Router {
    routes::router().layer(DefaultBodyLimit::max(MAX_BODY_BYTES)).with_state(state)
}
