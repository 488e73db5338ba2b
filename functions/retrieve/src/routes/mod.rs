//! Routes of the retrieve API.

pub(crate) mod catalogue;
pub(crate) mod memories;
pub(crate) mod retrieve;
pub(crate) mod search;
pub(crate) mod system;
pub(crate) mod tools;

use axum::{
    Router,
    routing::{get, post},
};

use self::catalogue::Tool;
use crate::{AppState, error::ApiError};

pub fn router() -> Router<AppState> {
    let console = system::console_paths().fold(Router::new(), |router, path| router.route(path, get(system::console)));
    console
        .route("/healthz", get(system::healthz))
        .route("/v1/tools", get(catalogue::tools))
        .route("/v1/retrieve", post(retrieve::retrieve))
        .route(&Tool::MemoryQuery.path(), post(retrieve::memory_query_tool))
        .route(&Tool::SearchLexical.path(), post(tools::search_lexical))
        .route(&Tool::SearchSemantic.path(), post(tools::search_semantic))
        .route(&Tool::ReadSymbol.path(), post(tools::read_symbol))
        .route(&Tool::ReadFileRange.path(), post(tools::read_file_range))
        .route("/v1/tools/{name}", post(catalogue::call_by_name))
        .route("/v1/search", post(search::search))
        .route("/v1/memories/{id}", get(memories::get_memory))
        .route("/v1/memories/{id}/chain", get(memories::chain))
        .route("/v1/memories/{id}/profiles", get(memories::profiles))
        .route("/v1/review", get(memories::review))
        .route("/v1/queues", get(system::queues))
        .fallback(|| async { ApiError::NotFound("no such route".into()) })
}
