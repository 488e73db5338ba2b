//! The retrieve function: the HTTP API over `memory_core::retrieval`. The same axum router runs under
//! `lambda_http` behind API Gateway and as a plain server on loopback.

pub mod auth;
mod bootstrap;
pub mod error;
mod extract;
pub mod fair;
pub mod mcp;
mod openapi;
pub mod queues;
mod routes;

use std::sync::Arc;

use axum::{Router, extract::DefaultBodyLimit};
use memory_core::retrieval::Retriever;
use tower_http::{
    catch_panic::CatchPanicLayer,
    request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer},
    trace::TraceLayer,
};

pub use auth::{Authenticator, Claims, JwksVerifier, Principal};
pub use bootstrap::{authenticator_from, authenticator_from_env, check_bind, state_from_env};

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// What every handler shares: built once per process.
#[derive(Clone)]
pub struct AppState {
    pub retriever: Arc<Retriever>,
    pub auth: Arc<Authenticator>,
    pub fair: Arc<fair::FairShare>,
    pub queues: Arc<queues::Queues>,
}

impl AppState {
    /// The state with each organisation's default share of the retriever's pool ([`fair::FairShare::of_pool`]) and
    /// no job queues.
    pub fn new(retriever: Retriever, auth: Authenticator) -> Self {
        let fair = fair::FairShare::of_pool(retriever.pool());
        Self {
            retriever: Arc::new(retriever),
            auth: Arc::new(auth),
            fair: Arc::new(fair),
            queues: Arc::new(queues::Queues::default()),
        }
    }

    /// The job queues `GET /v1/queues` reports.
    pub fn with_queues(self, queues: queues::Queues) -> Self {
        Self { queues: Arc::new(queues), ..self }
    }
}

/// The HTTP API. Every request gets an id (`x-request-id`, kept when the caller sends one), which every log line
/// of the request carries and the response returns; a handler that panics answers 500 and the process serves on.
pub fn app(state: AppState) -> Router {
    let request_id = axum::http::HeaderName::from_static("x-request-id");
    let trace = TraceLayer::new_for_http().make_span_with(|request: &axum::http::Request<_>| {
        let id = request.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or_default();
        tracing::info_span!("request", request_id = %id, method = %request.method(), path = %request.uri().path())
    });
    let mcp = Router::new()
        .nest_service("/mcp", mcp::service(state.clone()))
        .layer(axum::middleware::from_fn_with_state(state.clone(), mcp::authenticated));
    routes::router()
        .route("/openapi.json", axum::routing::get(openapi::openapi))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state.clone())
        .merge(mcp)
        .layer(axum::middleware::from_fn_with_state(state, fair::share))
        // Each request's metrics leave with it (a Lambda instance may be frozen before any later flush).
        .layer(axum::middleware::map_response(|response: axum::response::Response| async {
            memory_core::telemetry::flush_metrics();
            response
        }))
        .layer(CatchPanicLayer::custom(error::panic_response))
        .layer(trace)
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
}
