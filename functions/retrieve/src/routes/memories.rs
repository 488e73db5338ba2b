//! GET /v1/memories/{id} and its supersession chain.

use axum::{Json, extract::State};
use memory_core::{domain::Memory, store::ScopeFilter};

use crate::{AppState, auth::Principal, error::ApiError, extract::IdPath};

async fn scope_of(state: &AppState, principal: &Principal) -> Result<ScopeFilter, ApiError> {
    // Direct reads see every project and task of the organisation that the caller's read scopes allow.
    let scope = state.retriever.scope_filter(principal.organization_id, principal.agent_id, None, None, false).await?;
    Ok(ScopeFilter { any_project_or_task: true, ..scope })
}

#[utoipa::path(get, path = "/v1/memories/{id}", params(("id" = uuid::Uuid, Path)),
    responses((status = 200, body = Memory), (status = 400), (status = 401), (status = 404)), security(("bearer" = [])))]
pub async fn get_memory(
    State(state): State<AppState>,
    principal: Principal,
    IdPath(id): IdPath,
) -> Result<Json<Memory>, ApiError> {
    let scope = scope_of(&state, &principal).await?;
    Ok(Json(state.retriever.memory(&scope, id).await?))
}

#[utoipa::path(get, path = "/v1/memories/{id}/chain", params(("id" = uuid::Uuid, Path)),
    responses((status = 200, body = Vec<Memory>), (status = 400), (status = 401), (status = 404)), security(("bearer" = [])))]
pub async fn chain(
    State(state): State<AppState>,
    principal: Principal,
    IdPath(id): IdPath,
) -> Result<Json<serde_json::Value>, ApiError> {
    let scope = scope_of(&state, &principal).await?;
    let chain = state.retriever.supersession_chain(&scope, id).await?;
    Ok(Json(serde_json::json!({ "memory_id": id, "chain": chain })))
}
