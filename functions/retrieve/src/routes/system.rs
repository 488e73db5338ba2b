//! Health, OpenAPI document and the agent tool catalogue.

use axum::{Json, extract::State};
use serde::Serialize;
use serde_json::Value;
use utoipa::{OpenApi, PartialSchema, ToSchema};

use super::{
    retrieve::MemoryQueryInput,
    search::SearchBody,
    tools::{CodeSearchInput, MemoryIdInput, ReadFileRangeInput, ReadSymbolInput},
};
use crate::{
    AppState,
    error::{ApiError, ErrorBody},
    openapi::ApiDoc,
};

#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok`.
    pub status: String,
}

/// 200 when the database answers.
#[utoipa::path(get, path = "/healthz",
    responses((status = 200, body = Health, description = "database reachable"), (status = 503, body = ErrorBody)))]
pub async fn healthz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    memory_core::store::ping(state.retriever.pool()).await.map_err(|e| {
        tracing::warn!(error = %e, "health check: database unreachable");
        ApiError::Unavailable("database unreachable".into())
    })?;
    Ok(Json(Health { status: "ok".into() }))
}

pub async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

/// The tools an agent can call.
#[derive(Debug, Serialize, ToSchema)]
pub struct ToolCatalogue {
    pub tools: Vec<ToolDefinition>,
}

/// One tool: its name, what it is for, and the JSON schema of its input.
#[derive(Debug, Serialize, ToSchema)]
pub struct ToolDefinition {
    pub name: String,
    pub description: String,
    #[schema(value_type = Object)]
    pub input_schema: Value,
}

/// The native tools an agent can call, with their JSON input schemas; each is called with POST /v1/tools/{name}.
#[utoipa::path(get, path = "/v1/tools", responses((status = 200, body = ToolCatalogue, description = "tool definitions")))]
pub async fn tools() -> Json<ToolCatalogue> {
    Json(ToolCatalogue { tools: catalogue() })
}

/// The tools, one definition each: the single source of their names, descriptions and input schemas.
pub fn catalogue() -> Vec<ToolDefinition> {
    fn tool<T: PartialSchema>(name: &str, description: &str) -> ToolDefinition {
        let input_schema = serde_json::to_value(T::schema()).expect("a schema serialises");
        ToolDefinition { name: name.into(), description: description.into(), input_schema }
    }
    vec![
        tool::<MemoryQueryInput>(
            "memory.query",
            "Search the organisation's long-term memory for facts, decisions, procedures and preferences relevant \
             to a question. Returns the most relevant memories last.",
        ),
        tool::<CodeSearchInput>(
            "search_lexical",
            "Keyword search over memories and the chunks of the organisation's repositories: exact words, \
             identifiers in any case style, paths and error codes. Filters: language, path_prefix, repository.",
        ),
        tool::<CodeSearchInput>(
            "search_semantic",
            "Semantic search over memories and repository chunks by meaning (what the code does). Filters: \
             language, path_prefix, repository.",
        ),
        tool::<SearchBody>(
            "search",
            "Search memories by strategy (vector, keyword, hybrid, graph, metadata) with metadata filters; hits \
             most relevant first.",
        ),
        tool::<MemoryIdInput>("get_memory", "One memory by id, in any status (superseded and archived ones too)."),
        tool::<MemoryIdInput>(
            "memory_chain",
            "The supersession chain through a memory, oldest first: what it replaced and what replaced it.",
        ),
        tool::<ReadSymbolInput>(
            "read_symbol",
            "Read one declaration (or Markdown section) of a project's repository as it is now, by its symbol \
             path as search hits name it (anchor.symbol).",
        ),
        tool::<ReadFileRangeInput>(
            "read_file_range",
            "Read lines of a file of a project's repository as it is now (at most 400 at a time).",
        ),
    ]
}
