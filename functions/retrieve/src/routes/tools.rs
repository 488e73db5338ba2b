//! The agent tools (POST /v1/tools/{name}, and MCP's `tools/call`): `memory.query`, the keyword and vector
//! strategies with the code filters (`search_lexical`, `search_semantic`), every strategy (`search`), a memory and
//! its supersession chain (`get_memory`, `memory_chain`), and reads of a project's repository (`read_symbol`,
//! `read_file_range`). `catalogue::call` dispatches them all; each tool's input type is its JSON schema in
//! `GET /v1/tools`.

use axum::{Json, extract::State};
use memory_core::{
    repository::tools::{FileRange, SymbolText},
    retrieval::{RetrievalRequest, SearchRequest, SearchResult, Strategy, fusion::Fusion},
    store::SearchFilters,
};
use serde::Deserialize;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::{
    AppState,
    auth::Principal,
    error::{ApiError, ErrorBody},
    extract::ApiJson,
};

/// Input of `search_lexical` and `search_semantic`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CodeSearchInput {
    /// Words, identifiers in any case style (`parseConfig`, `parse_config`), paths or error codes (lexical); a
    /// description of what the code does (semantic).
    pub query: String,
    /// The project whose memories (and repository chunks) are searched besides the organisation's.
    pub project_id: Option<Uuid>,
    /// Only chunks of files in this language (`rust`, `python`, `typescript`, `tsx`, `javascript`, `go`,
    /// `markdown`, `text`).
    pub language: Option<String>,
    /// Only chunks of files under this path (`src/auth/`).
    pub path_prefix: Option<String>,
    /// Only memories of this repository.
    pub repository: Option<String>,
    /// How many hits (1-100, default 20).
    pub max_results: Option<usize>,
    /// Each hit carries `explanation`: its rank and score in each branch, and its fused rank.
    #[serde(default)]
    pub explain: bool,
    /// The memories as they were active at this time (RFC 3339), their chains cut there.
    pub as_of: Option<chrono::DateTime<chrono::Utc>>,
}

/// Input of `get_memory` and `memory_chain`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryIdInput {
    pub id: Uuid,
}

/// Input of `read_symbol`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadSymbolInput {
    pub project_id: Uuid,
    /// The file, relative to the repository's root (`src/errors.rs`).
    pub path: String,
    /// The declaration's symbol path (`AuthError::code`, `Server.handle`) or a Markdown heading breadcrumb
    /// (`auth-service > Deploy`), as search hits' `anchor.symbol` name it.
    pub symbol: String,
}

/// Input of `read_file_range`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileRangeInput {
    pub project_id: Uuid,
    pub path: String,
    /// First line, 1-based.
    pub start_line: u32,
    /// Last line, inclusive; at most 400 lines from the first.
    pub end_line: u32,
}

pub(crate) async fn search_with(
    state: &AppState,
    principal: &Principal,
    input: CodeSearchInput,
    strategy: Strategy,
) -> Result<SearchResult, ApiError> {
    let filters = SearchFilters {
        language: input.language,
        path_prefix: input.path_prefix,
        repository: input.repository,
        as_of: input.as_of,
        ..SearchFilters::default()
    };
    let request = SearchRequest {
        organization_id: principal.organization_id,
        agent_id: principal.agent_id,
        project_id: input.project_id,
        task_id: None,
        query: input.query,
        strategy,
        filters,
        fusion: Fusion::default(),
        vector_weight: 0.5,
        include_graph: false,
        max_results: input.max_results.unwrap_or(RetrievalRequest::DEFAULT_MAX_RESULTS),
        sensitivity_gate: false,
        explain: input.explain,
    };
    Ok(state.retriever.search(request).await?)
}

/// `search_lexical`: the keyword strategy (BM25 over words and code tokens), most relevant first.
#[utoipa::path(
    post, path = "/v1/tools/search_lexical", request_body = CodeSearchInput,
    responses((status = 200, body = SearchResult), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn search_lexical(
    State(state): State<AppState>,
    principal: Principal,
    ApiJson(input): ApiJson<CodeSearchInput>,
) -> Result<Json<SearchResult>, ApiError> {
    Ok(Json(search_with(&state, &principal, input, Strategy::Keyword).await?))
}

/// `search_semantic`: the vector strategy (cosine over the embeddings of text and context), most relevant first.
#[utoipa::path(
    post, path = "/v1/tools/search_semantic", request_body = CodeSearchInput,
    responses((status = 200, body = SearchResult), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn search_semantic(
    State(state): State<AppState>,
    principal: Principal,
    ApiJson(input): ApiJson<CodeSearchInput>,
) -> Result<Json<SearchResult>, ApiError> {
    Ok(Json(search_with(&state, &principal, input, Strategy::Vector).await?))
}

/// `read_symbol`: a declaration (or Markdown section) of the project's repository as it is now.
#[utoipa::path(
    post, path = "/v1/tools/read_symbol", request_body = ReadSymbolInput,
    responses((status = 200, body = SymbolText), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn read_symbol(
    State(state): State<AppState>,
    principal: Principal,
    ApiJson(input): ApiJson<ReadSymbolInput>,
) -> Result<Json<SymbolText>, ApiError> {
    let (org, agent) = (principal.organization_id, principal.agent_id);
    Ok(Json(state.retriever.read_symbol(org, agent, input.project_id, &input.path, &input.symbol).await?))
}

/// `read_file_range`: lines of a file of the project's repository as it is now (at most 400).
#[utoipa::path(
    post, path = "/v1/tools/read_file_range", request_body = ReadFileRangeInput,
    responses((status = 200, body = FileRange), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn read_file_range(
    State(state): State<AppState>,
    principal: Principal,
    ApiJson(input): ApiJson<ReadFileRangeInput>,
) -> Result<Json<FileRange>, ApiError> {
    let (org, agent, lines) = (principal.organization_id, principal.agent_id, (input.start_line, input.end_line));
    Ok(Json(state.retriever.read_file_range(org, agent, input.project_id, &input.path, lines).await?))
}
