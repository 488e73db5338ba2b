//! Health, the console, and the job queues for the deployment's operator.

use axum::{Json, extract::State};
use serde::Serialize;
use utoipa::ToSchema;

use crate::{
    AppState, Principal,
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

/// The console's files: a static page over this API, built into the binary (no build step, no runtime of its own).
const CONSOLE: [(&str, &str, &str); 3] = [
    ("/console", "text/html; charset=utf-8", include_str!("../../console/index.html")),
    ("/console.js", "text/javascript; charset=utf-8", include_str!("../../console/console.js")),
    ("/console.css", "text/css; charset=utf-8", include_str!("../../console/console.css")),
];

/// The paths the console is served at.
pub fn console_paths() -> impl Iterator<Item = &'static str> {
    CONSOLE.iter().map(|(path, ..)| *path)
}

/// `GET /console` and its script and style: same-origin only (the page calls this API with the token pasted into
/// it, which never leaves the tab's session storage but in the calls' `Authorization` header).
pub async fn console(uri: axum::http::Uri) -> axum::response::Response {
    use axum::{http::header, response::IntoResponse};
    let Some((_, content_type, body)) = CONSOLE.iter().find(|(path, ..)| *path == uri.path()) else {
        return ApiError::NotFound("no such route".into()).into_response();
    };
    (
        [
            (header::CONTENT_TYPE, *content_type),
            (header::CONTENT_SECURITY_POLICY, "default-src 'self'; style-src 'self'; frame-ancestors 'none'"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        *body,
    )
        .into_response()
}

/// Each job queue's depth and dead-letter count, for the deployment's operator (`memory:deployment`): the counts
/// `memory-admin jobs status` prints, mixing every organisation's messages, so an organisation's operator is refused.
#[utoipa::path(get, path = "/v1/queues",
    responses((status = 200, body = crate::queues::QueuesView), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn queues(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<crate::queues::QueuesView>, ApiError> {
    principal.check_deployment_operator()?;
    Ok(Json(state.queues.view().await?))
}
