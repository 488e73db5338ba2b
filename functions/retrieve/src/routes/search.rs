//! POST /v1/search: strategy search with metadata filters.

use axum::{Json, extract::State};
use memory_core::{
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

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchBody {
    /// Search text (may be empty for the metadata strategy).
    #[serde(default)]
    pub query: String,
    #[serde(default)]
    pub strategy: Strategy,
    #[serde(default)]
    pub filters: SearchFilters,
    #[serde(default)]
    pub fusion: Fusion,
    /// Weight of the cosine score in weighted fusion, 0-1 (default 0.5).
    pub vector_weight: Option<f64>,
    #[serde(default)]
    pub include_graph: bool,
    pub max_results: Option<usize>,
    pub project_id: Option<Uuid>,
    pub task_id: Option<Uuid>,
    pub agent_id: Option<Uuid>,
    pub organization_id: Option<Uuid>,
    #[serde(default)]
    pub sensitivity_gate: bool,
    /// Also superseded and archived memories, each with its status and successor (as `filters.include_archive`).
    #[serde(default)]
    pub include_archive: bool,
    /// Each direct hit carries `explanation`: its rank and score in each branch, and its fused rank.
    #[serde(default)]
    pub explain: bool,
}

#[utoipa::path(
    post, path = "/v1/search", request_body = SearchBody,
    responses((status = 200, body = SearchResult), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn search(
    State(state): State<AppState>,
    principal: Principal,
    ApiJson(body): ApiJson<SearchBody>,
) -> Result<Json<SearchResult>, ApiError> {
    Ok(Json(run(&state, &principal, body).await?))
}

/// A strategy search (also the `search` tool).
pub(crate) async fn run(state: &AppState, principal: &Principal, body: SearchBody) -> Result<SearchResult, ApiError> {
    principal.check_organization(body.organization_id)?;
    let agent_id = principal.acting_agent(body.agent_id)?;
    let vector_weight = body.vector_weight.unwrap_or(0.5);
    if !(0.0..=1.0).contains(&vector_weight) {
        return Err(ApiError::Unprocessable("vector_weight must be between 0 and 1".into()));
    }
    let request = SearchRequest {
        organization_id: principal.organization_id,
        agent_id,
        project_id: body.project_id.or(body.filters.project_id),
        task_id: body.task_id,
        query: body.query,
        strategy: body.strategy,
        filters: SearchFilters {
            include_archive: body.include_archive || body.filters.include_archive,
            ..body.filters
        },
        fusion: body.fusion,
        vector_weight,
        include_graph: body.include_graph,
        max_results: body.max_results.unwrap_or(RetrievalRequest::DEFAULT_MAX_RESULTS),
        sensitivity_gate: body.sensitivity_gate,
        explain: body.explain,
    };
    Ok(state.retriever.search(request).await?)
}
