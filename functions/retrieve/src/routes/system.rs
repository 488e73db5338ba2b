//! Health.

use axum::{Json, extract::State};
use serde::Serialize;
use utoipa::ToSchema;

use crate::{
    AppState,
    error::{ApiError, ErrorBody},
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
