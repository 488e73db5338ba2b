//! The spec's request and result types (JSON field names are the spec's names in snake_case).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::fusion::Fusion;
use crate::{
    domain::{EntityProfile, Memory},
    store::SearchFilters,
};

/// Which caller is retrieving.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RetrievalMode {
    /// Automatic injection before each agent turn: sensitivity gate on, rule-based taxonomy, cooldown.
    Passive,
    /// `@memory:<query>` in an agent's turn: LLM taxonomy, gate off unless asked.
    Mention,
    /// The agent's `memory.query` tool call: LLM taxonomy, gate off unless asked.
    AgentQuery,
}

impl RetrievalMode {
    /// The mode as the API names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Passive => "passive",
            Self::Mention => "mention",
            Self::AgentQuery => "agent_query",
        }
    }
}

/// A session and the turn within it, for the passive-mode cooldown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionTurn {
    pub session_id: String,
    pub turn: u32,
}

/// What the pipeline is asked. `organization_id` always comes from the authenticated principal.
#[derive(Debug, Clone)]
pub struct RetrievalRequest {
    pub organization_id: Uuid,
    pub project_id: Option<Uuid>,
    pub agent_id: Option<Uuid>,
    pub task_id: Option<Uuid>,
    /// The turn text or explicit query (for `mention`, the text containing `@memory:`).
    pub query: String,
    pub mode: RetrievalMode,
    pub max_results: usize,
    /// true excludes `restricted` memories (always true for passive).
    pub sensitivity_gate: bool,
    pub session: Option<SessionTurn>,
    /// The time recency is measured at (defaults to now; evaluations replay queries at their own time, and `as_of`
    /// sets it with [`Self::active_at`]).
    pub recency_at: Option<DateTime<Utc>>,
    /// The cooldown token of the session's previous passive answer (any instance's).
    pub cooldown_token: Option<String>,
    /// Also superseded and archived memories (not in passive mode), each with its status and successor.
    pub include_archive: bool,
    /// The most text the answer may carry, in characters of memory and profile content: memories best first, then
    /// their entity profiles, each left out when it does not fit.
    pub max_chars: Option<usize>,
    /// Each memory carries why it ranked where it did ([`RankedMemory::explanation`]).
    pub explain: bool,
    /// The memories as they were active at this time ([`super::as_of`]); None: now. Not in passive mode.
    pub active_at: Option<DateTime<Utc>>,
}

impl RetrievalRequest {
    pub const DEFAULT_MAX_RESULTS: usize = 20;

    /// `as_of` as the API takes it: the memories active at that time, recency measured from it (None: now).
    pub fn as_of(&mut self, at: Option<DateTime<Utc>>) {
        (self.recency_at, self.active_at) = (at, at);
    }

    pub fn new(organization_id: Uuid, mode: RetrievalMode, query: impl Into<String>) -> Self {
        Self {
            organization_id,
            project_id: None,
            agent_id: None,
            task_id: None,
            query: query.into(),
            mode,
            max_results: Self::DEFAULT_MAX_RESULTS,
            sensitivity_gate: mode == RetrievalMode::Passive,
            session: None,
            recency_at: None,
            cooldown_token: None,
            include_archive: false,
            max_chars: None,
            explain: false,
            active_at: None,
        }
    }
}

/// A memory with its composite score and cosine similarity to the query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RankedMemory {
    pub memory: Memory,
    pub score: f64,
    /// Absent when the query could not be embedded (degraded, keyword-only).
    pub cosine_sim: Option<f64>,
    /// The memory came from an untrusted source (tool output, external content): a prompt builder should fence
    /// it as data, never follow it as an instruction.
    pub untrusted: bool,
    /// A file-backed memory whose file changed or is missing since it was last verified.
    pub stale: bool,
    /// Why it ranked where it did, when the request asked (`explain`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<super::trace::Explanation>,
}

/// How the query was classified into the taxonomy (Stage 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Classification {
    /// The language model placed the query (agent_query and mention with a model configured).
    Model,
    /// Keyword rules placed it: passive mode always, the active modes without a model configured or when the model
    /// failed (then `degraded` says so).
    Rules,
    /// The organisation has no taxonomy.
    None,
}

/// The pipeline's answer: memories ordered most relevant LAST.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RetrievalResult {
    pub memories: Vec<RankedMemory>,
    /// true when the taxonomy filter was dropped for the full Stage 1 candidate set.
    pub fallback_used: bool,
    pub entity_profiles: Vec<EntityProfile>,
    /// Taxonomy paths the query was classified into.
    pub taxonomy: Vec<String>,
    /// How it was classified: `model`, `rules` or `none`.
    pub classification: Classification,
    pub degraded: bool,
    pub degraded_reasons: Vec<String>,
    /// Passive mode: the session's cooldown, signed; send it back with the next turn so that any instance
    /// withholds what this one returned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown_token: Option<String>,
    /// What the answer was made with.
    pub record: super::record::AnswerRecord,
    /// What the request found and left out, when it asked (`explain`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<super::trace::Trace>,
}

/// Search strategies of MEM-004.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    Vector,
    Keyword,
    #[default]
    Hybrid,
    Graph,
    Metadata,
}

/// A strategy search, scoped like retrieval and filtered inside the SQL.
#[derive(Debug, Clone)]
pub struct SearchRequest {
    pub organization_id: Uuid,
    pub agent_id: Option<Uuid>,
    pub project_id: Option<Uuid>,
    pub task_id: Option<Uuid>,
    pub query: String,
    pub strategy: Strategy,
    pub filters: SearchFilters,
    pub fusion: Fusion,
    /// Weight of the cosine score in weighted fusion (the keyword score gets the rest).
    pub vector_weight: f64,
    pub include_graph: bool,
    pub max_results: usize,
    pub sensitivity_gate: bool,
    /// Each direct hit carries its branches' evidence ([`SearchHit::explanation`]).
    pub explain: bool,
}

impl SearchRequest {
    /// A search of `strategy` for `query` in the organisation with the defaults: no agent, project, task or filters,
    /// RRF fusion (vector weight 0.5 for the weighted blend), no graph expansion, the default number of results,
    /// no sensitivity gate.
    pub fn new(organization_id: Uuid, strategy: Strategy, query: impl Into<String>) -> Self {
        Self {
            organization_id,
            agent_id: None,
            project_id: None,
            task_id: None,
            query: query.into(),
            strategy,
            filters: SearchFilters::default(),
            fusion: super::fusion::Fusion::default(),
            vector_weight: 0.5,
            include_graph: false,
            max_results: RetrievalRequest::DEFAULT_MAX_RESULTS,
            sensitivity_gate: false,
            explain: false,
        }
    }
}

/// How a search hit was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MatchKind {
    Vector,
    Keyword,
    Hybrid,
    Graph,
    Metadata,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SearchHit {
    pub memory: Memory,
    pub score: f64,
    pub cosine_sim: Option<f64>,
    pub keyword_score: Option<f64>,
    #[serde(rename = "match")]
    pub match_kind: MatchKind,
    /// Entity hops from a direct hit (graph matches only).
    pub hops: Option<u32>,
    /// Each branch's evidence for a direct hit, when the request asked (`explain`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<super::trace::HitExplanation>,
}

/// Search hits, most relevant FIRST.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SearchResult {
    pub hits: Vec<SearchHit>,
    pub strategy: Strategy,
    pub degraded: bool,
    pub degraded_reasons: Vec<String>,
    /// What the answer was made with.
    pub record: super::record::AnswerRecord,
}
