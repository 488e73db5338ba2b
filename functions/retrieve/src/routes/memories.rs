//! GET /v1/memories/{id} and its supersession chain. Direct reads see every status, and every project and task of
//! the organisation that the caller's read scopes admit.

use axum::{Json, extract::State};
use memory_core::domain::Memory;
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::{
    AppState,
    auth::Principal,
    error::{ApiError, ErrorBody},
    extract::IdPath,
};

/// The supersession chain through a memory, oldest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct SupersessionChain {
    pub memory_id: Uuid,
    pub chain: Vec<Memory>,
}

#[utoipa::path(get, path = "/v1/memories/{id}", params(("id" = uuid::Uuid, Path)),
    responses((status = 200, body = Memory), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)), security(("bearer" = [])))]
pub async fn get_memory(
    State(state): State<AppState>,
    principal: Principal,
    IdPath(id): IdPath,
) -> Result<Json<Memory>, ApiError> {
    Ok(Json(state.retriever.memory(principal.organization_id, principal.agent_id, id).await?))
}

#[utoipa::path(get, path = "/v1/memories/{id}/chain", params(("id" = uuid::Uuid, Path)),
    responses((status = 200, body = SupersessionChain), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)), security(("bearer" = [])))]
pub async fn chain(
    State(state): State<AppState>,
    principal: Principal,
    IdPath(id): IdPath,
) -> Result<Json<SupersessionChain>, ApiError> {
    let chain = state.retriever.supersession_chain(principal.organization_id, principal.agent_id, id).await?;
    Ok(Json(SupersessionChain { memory_id: id, chain }))
}
