//! Health, OpenAPI document and the agent tool catalogue.

use axum::{Json, extract::State};
use serde::Serialize;
use serde_json::Value;
use utoipa::{OpenApi, ToSchema};

use super::catalogue::Tool;
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
    Json(ToolCatalogue { tools: Tool::ALL.into_iter().map(Tool::definition).collect() })
}
