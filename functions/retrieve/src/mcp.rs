//! The Model Context Protocol at `POST /mcp`: Streamable HTTP, stateless, JSON responses, so it runs behind API
//! Gateway and Lambda without sessions (rmcp). Its tools are the catalogue of `GET /v1/tools`, with the same input
//! schemas, dispatched by the same [`catalogue::call`]; a call is authenticated as the REST API's are (a missing or bad
//! token is a 401 before any MCP message is read), and a tool's client error (bad arguments, a missing symbol) is a
//! tool result with `isError`, never a protocol error.

use std::sync::Arc;

use axum::{
    extract::{FromRequestParts, Request, State},
    middleware::Next,
    response::{IntoResponse, Response},
};
use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult, PaginatedRequestParams,
        ServerCapabilities, ServerConfig, Tool,
    },
    service::RequestContext,
    transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    },
};

use crate::{
    AppState,
    auth::Principal,
    error::ApiError,
    routes::catalogue::{self, Tool as CatalogueTool},
};

/// One MCP server per request (the transport is stateless), over the process's state.
#[derive(Clone)]
pub struct MemoryMcp {
    state: AppState,
}

/// The `/mcp` service. Any `Host` is accepted: every request carries a bearer token checked before the transport
/// sees it, which a DNS-rebinding page cannot forge (the transport's loopback-only default guards servers without
/// authentication). Bodies are capped like the REST API's.
pub fn service(state: AppState) -> StreamableHttpService<MemoryMcp, LocalSessionManager> {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(crate::MAX_BODY_BYTES)
        .disable_allowed_hosts();
    StreamableHttpService::new(move || Ok(MemoryMcp { state: state.clone() }), Default::default(), config)
}

/// Authenticates an `/mcp` request as every REST request is, and hands the principal to the tools.
pub async fn authenticated(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    match Principal::from_request_parts(&mut parts, &state).await {
        Ok(principal) => {
            parts.extensions.insert(principal);
            next.run(Request::from_parts(parts, body)).await
        }
        Err(error) => error.into_response(),
    }
}

impl ServerHandler for MemoryMcp {
    fn get_info(&self) -> ServerConfig {
        let mut config = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        config.instructions = Some(
            "Long-term memory of the organisation: facts, decisions, procedures, preferences, and its \
             repositories' code. Ask memory.query first; read_symbol and read_file_range read code as committed."
                .into(),
        );
        config
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = CatalogueTool::ALL
            .map(CatalogueTool::definition)
            .into_iter()
            .map(|t| {
                Tool::new(t.name, t.description, Arc::new(t.input_schema.as_object().cloned().unwrap_or_default()))
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let principal = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Principal>())
            .cloned()
            .ok_or_else(|| ErrorData::internal_error("the request was not authenticated", None))?;
        if CatalogueTool::parse(&request.name).is_none() {
            return Err(ErrorData::invalid_params(format!("no tool {:?}", request.name), None));
        }
        let arguments = serde_json::Value::Object(request.arguments.unwrap_or_default());
        let result = match catalogue::call(&self.state, &principal, &request.name, arguments).await {
            Ok(answer) => {
                let mut result = CallToolResult::success(vec![ContentBlock::text(answer.to_string())]);
                result.structured_content = Some(answer);
                result
            }
            Err(ApiError::Internal(error)) => {
                tracing::error!(error = %error, tool = %request.name, "tool call failed");
                return Err(ErrorData::internal_error("internal error", None));
            }
            Err(error) => CallToolResult::error(vec![ContentBlock::text(format!("{}: {error}", error.code()))]),
        };
        Ok(result.into())
    }
}
