//! The agent tools: the one list of their names, descriptions and input schemas ([`Tool`]), served by
//! `GET /v1/tools` and MCP's `tools/list`, and [`call`], which dispatches any of them by name for
//! `POST /v1/tools/{name}` and MCP's `tools/call`.

use axum::{
    Json,
    extract::{Path, State},
};
use memory_core::retrieval::Strategy;
use serde::Serialize;
use serde_json::Value;
use utoipa::{PartialSchema, ToSchema};

use super::{
    retrieve::MemoryQueryInput,
    search::SearchBody,
    tools::{CodeSearchInput, MemoryIdInput, ReadFileRangeInput, ReadSymbolInput},
};
use crate::{
    AppState,
    auth::Principal,
    error::{ApiError, ErrorBody},
    extract::ApiJson,
};

/// One tool of the catalogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    MemoryQuery,
    SearchLexical,
    SearchSemantic,
    Search,
    GetMemory,
    MemoryChain,
    ReadSymbol,
    ReadFileRange,
}

impl Tool {
    /// In the catalogue's order.
    pub const ALL: [Tool; 8] = [
        Tool::MemoryQuery,
        Tool::SearchLexical,
        Tool::SearchSemantic,
        Tool::Search,
        Tool::GetMemory,
        Tool::MemoryChain,
        Tool::ReadSymbol,
        Tool::ReadFileRange,
    ];

    /// Its name, as agents call it.
    pub fn name(self) -> &'static str {
        match self {
            Tool::MemoryQuery => "memory.query",
            Tool::SearchLexical => "search_lexical",
            Tool::SearchSemantic => "search_semantic",
            Tool::Search => "search",
            Tool::GetMemory => "get_memory",
            Tool::MemoryChain => "memory_chain",
            Tool::ReadSymbol => "read_symbol",
            Tool::ReadFileRange => "read_file_range",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|tool| tool.name() == name)
    }

    /// The route of a tool that has one of its own.
    pub fn path(self) -> String {
        format!("/v1/tools/{}", self.name())
    }

    fn description(self) -> &'static str {
        match self {
            Tool::MemoryQuery => {
                "Search the organisation's long-term memory for facts, decisions, procedures and preferences relevant \
             to a question. Returns the most relevant memories last."
            }
            Tool::SearchLexical => {
                "Keyword search over memories and the chunks of the organisation's repositories: exact words, \
             identifiers in any case style, paths and error codes. Filters: language, path_prefix, repository."
            }
            Tool::SearchSemantic => {
                "Semantic search over memories and repository chunks by meaning (what the code does). Filters: \
             language, path_prefix, repository."
            }
            Tool::Search => {
                "Search memories by strategy (vector, keyword, hybrid, graph, metadata) with metadata filters; hits \
             most relevant first."
            }
            Tool::GetMemory => "One memory by id, in any status (superseded and archived ones too).",
            Tool::MemoryChain => {
                "The supersession chain through a memory, oldest first: what it replaced and what replaced it."
            }
            Tool::ReadSymbol => {
                "Read one declaration (or Markdown section) of a project's repository as it is now, by its symbol \
             path as search hits name it (anchor.symbol)."
            }
            Tool::ReadFileRange => {
                "Read lines of a file of a project's repository as it is now (at most 400 at a time)."
            }
        }
    }

    fn input_schema(self) -> serde_json::Value {
        fn schema<T: PartialSchema>() -> serde_json::Value {
            serde_json::to_value(T::schema()).expect("a schema serialises")
        }
        match self {
            Tool::MemoryQuery => schema::<MemoryQueryInput>(),
            Tool::SearchLexical => schema::<CodeSearchInput>(),
            Tool::SearchSemantic => schema::<CodeSearchInput>(),
            Tool::Search => schema::<SearchBody>(),
            Tool::GetMemory => schema::<MemoryIdInput>(),
            Tool::MemoryChain => schema::<MemoryIdInput>(),
            Tool::ReadSymbol => schema::<ReadSymbolInput>(),
            Tool::ReadFileRange => schema::<ReadFileRangeInput>(),
        }
    }

    pub fn definition(self) -> ToolDefinition {
        ToolDefinition {
            name: self.name().into(),
            description: self.description().into(),
            input_schema: self.input_schema(),
        }
    }
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
#[utoipa::path(get, path = "/v1/tools", tag = "routes::system", responses((status = 200, body = ToolCatalogue, description = "tool definitions")))]
pub async fn tools() -> Json<ToolCatalogue> {
    Json(ToolCatalogue { tools: Tool::ALL.into_iter().map(Tool::definition).collect() })
}

/// Calls the tool `name` of the catalogue with JSON `arguments` for `principal`: a tool's answer as JSON, or the
/// error a REST call of it would answer (arguments of the wrong shape are a 422 naming the problem).
pub async fn call(state: &AppState, principal: &Principal, name: &str, arguments: Value) -> Result<Value, ApiError> {
    fn input<T: serde::de::DeserializeOwned>(arguments: Value) -> Result<T, ApiError> {
        serde_json::from_value(arguments).map_err(|e| ApiError::Unprocessable(format!("arguments: {e}")))
    }
    fn answer(value: impl serde::Serialize) -> Result<Value, ApiError> {
        serde_json::to_value(value).map_err(|e| ApiError::Internal(e.into()))
    }
    let (org, agent) = (principal.organization_id, principal.agent_id);
    let tool =
        Tool::parse(name).ok_or_else(|| ApiError::NotFound(format!("no tool {name:?}: GET /v1/tools lists them")))?;
    match tool {
        Tool::MemoryQuery => answer(super::retrieve::memory_query(state, principal, input(arguments)?).await?),
        Tool::SearchLexical => {
            answer(super::tools::search_with(state, principal, input(arguments)?, Strategy::Keyword).await?)
        }
        Tool::SearchSemantic => {
            answer(super::tools::search_with(state, principal, input(arguments)?, Strategy::Vector).await?)
        }
        Tool::Search => answer(super::search::run(state, principal, input(arguments)?).await?),
        Tool::GetMemory => answer(state.retriever.memory(org, agent, input::<MemoryIdInput>(arguments)?.id).await?),
        Tool::MemoryChain => {
            let id = input::<MemoryIdInput>(arguments)?.id;
            let chain = state.retriever.supersession_chain(org, agent, id).await?;
            answer(super::memories::SupersessionChain { memory_id: id, chain })
        }
        Tool::ReadSymbol => {
            let i: ReadSymbolInput = input(arguments)?;
            answer(state.retriever.read_symbol(org, agent, i.project_id, &i.path, &i.symbol).await?)
        }
        Tool::ReadFileRange => {
            let i: ReadFileRangeInput = input(arguments)?;
            answer(
                state.retriever.read_file_range(org, agent, i.project_id, &i.path, (i.start_line, i.end_line)).await?,
            )
        }
    }
}

/// Any tool of the catalogue by name (`search`, `get_memory`, `memory_chain`, and the tools with routes of their
/// own): the arguments as the tool's input schema says.
#[utoipa::path(
    post, path = "/v1/tools/{name}", tag = "routes::tools", params(("name" = String, Path)), request_body = Object,
    responses((status = 200, body = Object), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn call_by_name(
    State(state): State<AppState>,
    principal: Principal,
    Path(name): Path<String>,
    ApiJson(arguments): ApiJson<Value>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(call(&state, &principal, &name, arguments).await?))
}
