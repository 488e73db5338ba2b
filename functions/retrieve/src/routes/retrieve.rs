//! POST /v1/retrieve: the pipeline's three modes.

use axum::{Json, extract::State};
use memory_core::retrieval::cooldown_token::MAX_TOKEN_CHARS;
use memory_core::retrieval::{RetrievalMode, RetrievalRequest, RetrievalResult, SessionTurn};
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
pub struct RetrieveBody {
    pub mode: RetrievalMode,
    /// The turn text (passive, mention) or the agent's question (agent_query).
    pub query: String,
    /// Required for passive mode (cooldown is per session).
    pub session_id: Option<String>,
    pub turn: Option<u32>,
    pub project_id: Option<Uuid>,
    pub task_id: Option<Uuid>,
    /// Only for service tokens with the memory:any_agent scope, or equal to the token's agent.
    pub agent_id: Option<Uuid>,
    /// Must be the caller's own organisation when given.
    pub organization_id: Option<Uuid>,
    pub max_results: Option<usize>,
    /// Exclude restricted memories (always on in passive mode).
    pub sensitivity_gate: Option<bool>,
    /// Passive mode: the `cooldown_token` of the session's previous answer, so that whichever instance serves
    /// this turn withholds what was injected in the last turns.
    pub cooldown_token: Option<String>,
    /// agent_query and mention: also superseded and archived memories, each with its status and successor.
    #[serde(default)]
    pub include_archive: bool,
    /// The most memory and profile text the answer may carry, in characters: memories best first, then their
    /// entity profiles, each left out when it does not fit.
    pub max_chars: Option<usize>,
    /// The same budget in tokens, counted as four characters each (one of `max_chars` and `max_tokens`).
    pub max_tokens: Option<usize>,
    /// Each memory carries `explanation`: its ranking features and, with the learned ranking, each one's share of
    /// its score.
    #[serde(default)]
    pub explain: bool,
    /// agent_query and mention: the memories as they were active at this time (RFC 3339), their chains cut there,
    /// recency measured from it.
    pub as_of: Option<chrono::DateTime<chrono::Utc>>,
}

/// Characters a token is counted as in `max_tokens`.
pub const CHARS_PER_TOKEN: usize = 4;

/// Input of the agent's `memory.query` tool.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryQueryInput {
    /// What to look for, in natural language; exact identifiers (error codes, paths) are matched too.
    pub query: String,
    /// How many memories to return (1-100, default 20).
    pub max_results: Option<usize>,
    pub project_id: Option<Uuid>,
    pub task_id: Option<Uuid>,
    /// Also superseded and archived memories, each with its status and successor (`superseded_by`).
    #[serde(default)]
    pub include_archive: bool,
    /// Each memory carries `explanation`: why it ranked where it did.
    #[serde(default)]
    pub explain: bool,
    /// The memories as they were active at this time (RFC 3339), their chains cut there.
    pub as_of: Option<chrono::DateTime<chrono::Utc>>,
}

#[utoipa::path(
    post, path = "/v1/retrieve", request_body = RetrieveBody,
    responses((status = 200, body = RetrievalResult), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn retrieve(
    State(state): State<AppState>,
    principal: Principal,
    ApiJson(body): ApiJson<RetrieveBody>,
) -> Result<Json<RetrievalResult>, ApiError> {
    principal.check_organization(body.organization_id)?;
    let agent_id = principal.acting_agent(body.agent_id)?;
    let session = match (body.session_id, body.turn) {
        (Some(session_id), Some(turn)) if !session_id.is_empty() => Some(SessionTurn { session_id, turn }),
        (None, None) => None,
        _ => return Err(ApiError::Unprocessable("session_id and turn must be given together".into())),
    };
    if body.mode == RetrievalMode::Passive && session.is_none() {
        return Err(ApiError::Unprocessable("passive mode needs session_id and turn".into()));
    }
    let mut request = RetrievalRequest::new(principal.organization_id, body.mode, body.query);
    request.agent_id = agent_id;
    request.project_id = body.project_id;
    request.task_id = body.task_id;
    request.session = session;
    request.max_results = body.max_results.unwrap_or(RetrievalRequest::DEFAULT_MAX_RESULTS);
    request.sensitivity_gate = body.mode == RetrievalMode::Passive || body.sensitivity_gate.unwrap_or(false);
    if body.cooldown_token.is_some() && body.mode != RetrievalMode::Passive {
        return Err(ApiError::Unprocessable("cooldown_token is passive mode's; other modes have no cooldown".into()));
    }
    if body.cooldown_token.as_ref().is_some_and(|t| t.len() > MAX_TOKEN_CHARS) {
        return Err(ApiError::Unprocessable(format!("cooldown_token is longer than {MAX_TOKEN_CHARS} characters")));
    }
    request.cooldown_token = body.cooldown_token;
    request.include_archive = body.include_archive;
    request.explain = body.explain;
    request.as_of(body.as_of);
    request.max_chars = match (body.max_chars, body.max_tokens) {
        (Some(_), Some(_)) => return Err(ApiError::Unprocessable("give max_chars or max_tokens, not both".into())),
        (chars, tokens) => chars.or(tokens.map(|t| t.saturating_mul(CHARS_PER_TOKEN))),
    };
    if request.max_chars == Some(0) {
        return Err(ApiError::Unprocessable("max_chars and max_tokens must be at least 1".into()));
    }
    Ok(Json(state.retriever.query(request).await?))
}

/// POST /v1/tools/memory.query: the agent's tool call, run as agent_query for the token's agent.
#[utoipa::path(
    post, path = "/v1/tools/memory.query", request_body = MemoryQueryInput,
    responses((status = 200, body = RetrievalResult), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn memory_query_tool(
    State(state): State<AppState>,
    principal: Principal,
    ApiJson(input): ApiJson<MemoryQueryInput>,
) -> Result<Json<RetrievalResult>, ApiError> {
    Ok(Json(memory_query(&state, &principal, input).await?))
}

/// The `memory.query` tool: agent_query for the principal's agent.
pub(crate) async fn memory_query(
    state: &AppState,
    principal: &Principal,
    input: MemoryQueryInput,
) -> Result<RetrievalResult, ApiError> {
    let mut request = RetrievalRequest::new(principal.organization_id, RetrievalMode::AgentQuery, input.query);
    request.agent_id = principal.agent_id;
    request.project_id = input.project_id;
    request.task_id = input.task_id;
    request.max_results = input.max_results.unwrap_or(RetrievalRequest::DEFAULT_MAX_RESULTS);
    request.include_archive = input.include_archive;
    request.explain = input.explain;
    request.as_of(input.as_of);
    Ok(state.retriever.query(request).await?)
}
