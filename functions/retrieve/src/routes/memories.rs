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

/// The current profiles of the entities a memory mentions.
#[derive(Debug, Serialize, ToSchema)]
pub struct MemoryProfiles {
    pub memory_id: Uuid,
    pub profiles: Vec<memory_core::domain::EntityProfile>,
}

#[utoipa::path(get, path = "/v1/memories/{id}/profiles", params(("id" = uuid::Uuid, Path)),
    responses((status = 200, body = MemoryProfiles), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)), security(("bearer" = [])))]
pub async fn profiles(
    State(state): State<AppState>,
    principal: Principal,
    IdPath(id): IdPath,
) -> Result<Json<MemoryProfiles>, ApiError> {
    let profiles = state.retriever.profiles_of(principal.organization_id, principal.agent_id, id).await?;
    Ok(Json(MemoryProfiles { memory_id: id, profiles }))
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

/// What waits on an operator in the caller's organisation: held decisions and undecided candidates. Dead letters
/// are the deployment's (`GET /v1/queues`).
#[utoipa::path(get, path = "/v1/review",
    responses((status = 200, body = memory_core::retrieval::review::Review), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn review(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<memory_core::retrieval::review::Review>, ApiError> {
    principal.check_operator()?;
    Ok(Json(state.retriever.review(principal.organization_id).await?))
}
