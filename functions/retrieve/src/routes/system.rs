//! Health, OpenAPI document and the agent tool catalogue.

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse};
use serde_json::{Value, json};
use utoipa::{OpenApi, PartialSchema};

use super::retrieve::MemoryQueryInput;
use crate::{AppState, error::ApiError, openapi::ApiDoc};

/// 200 when the database answers.
#[utoipa::path(get, path = "/healthz", responses((status = 200, description = "database reachable"), (status = 503)))]
pub async fn healthz(State(state): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    memory_core::store::ping(state.retriever.pool()).await.map_err(|e| {
        tracing::warn!(error = %e, "health check: database unreachable");
        ApiError::Unavailable("database unreachable".into())
    })?;
    Ok((StatusCode::OK, Json(json!({ "status": "ok" }))))
}

pub async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

/// The native tools an agent can call, with their JSON input schemas.
#[utoipa::path(get, path = "/v1/tools", responses((status = 200, description = "tool definitions")))]
pub async fn tools() -> Json<Value> {
    Json(json!({
        "tools": [{
            "name": "memory.query",
            "description": "Search the organisation's long-term memory for facts, decisions, procedures and \
                            preferences relevant to a question. Returns the most relevant memories last.",
            "input_schema": MemoryQueryInput::schema(),
        }]
    }))
}
