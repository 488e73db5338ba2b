//! The retrieval pipeline (scope filter → taxonomy classification → subtree filter → ranking) and the strategy
//! searches of MEM-004, behind one [`Retriever`].

pub mod as_of;
pub mod bounded;
pub mod cooldown;
pub mod cooldown_token;
pub mod distinct;
pub mod found;
pub mod found_cache;
pub mod fusion;
pub mod keyword;
pub mod learned;
pub mod mention;
pub mod named_symbol;
mod pipeline;
pub mod query_cache;
pub mod ranking;
pub mod recency;
pub mod record;
pub mod review;
mod search;
mod settings;
pub mod stage1;
pub mod supersession;
pub mod taxonomy;
pub mod time_anchor;
pub mod trace;
mod types;

use std::{sync::Arc, time::Duration};

use sqlx::PgPool;
use uuid::Uuid;

pub use settings::RetrievalConfig;
pub use trace::StageTimings;
pub use types::*;

use crate::{
    domain::{Memory, Scope},
    embed::Embedder,
    llm::Llm,
    replica::{ReadFrom, Replica},
    repository::{
        FileReader,
        exclude::Exclusions,
        tools::{FileRange, RepositoryTools, SymbolText},
    },
    store::{self, ReadFilter, branches::BranchExtras},
};

/// Longest query accepted, in bytes.
pub const MAX_QUERY_BYTES: usize = 8 * 1024;

/// Scopes of a caller that is not an agent (a service such as the prompt builder): everything shared.
/// Longest `session_id`, in bytes (the cooldown keeps one entry per session).
pub const MAX_SESSION_ID_BYTES: usize = 128;

const SERVICE_READ_SCOPES: [Scope; 3] = [Scope::Org, Scope::Project, Scope::Task];

/// Answers retrieval and search requests. Built once per process; cheap to share behind an `Arc`.
pub struct Retriever {
    pool: PgPool,
    embedder: Arc<dyn Embedder>,
    llm: Option<Arc<dyn Llm>>,
    llm_timeout: Duration,
    config: RetrievalConfig,
    cooldown: cooldown::CooldownTracker,
    query_cache: query_cache::QueryCache,
    found_cache: found_cache::FoundCache,
    /// A read replica, when configured: requests read there while it answers and keeps up.
    replica: Option<Replica>,
    /// Signs the cooldown tokens of passive answers.
    cooldown_key: cooldown_token::TokenKey,
    /// Text search configuration used for queries; must be the one `memory.content_tsv` is built with.
    text_search_config: String,
    /// The projects' repositories, for the repository tools (None: this deployment has none).
    repositories: Option<RepositoryTools>,
    /// [`record::ranking_digest`] of `config`.
    ranking_digest: String,
}

/// The text search configuration `memory.content_tsv` is built with, which queries use unless told otherwise.
const TEXT_SEARCH_CONFIG: &str = "memory_text";

impl Retriever {
    pub fn new(pool: PgPool, embedder: Arc<dyn Embedder>, llm: Option<Arc<dyn Llm>>, config: RetrievalConfig) -> Self {
        Self {
            query_cache: query_cache::QueryCache::new(config.query_cache_bytes),
            found_cache: found_cache::FoundCache::new(config.found_cache_bytes),
            replica: None,
            pool,
            embedder,
            llm,
            llm_timeout: crate::config::DEFAULT_REQUEST_LLM_TIMEOUT,
            cooldown: cooldown::CooldownTracker::new(config.cooldown_sessions),
            cooldown_key: cooldown_token::TokenKey::random(),
            ranking_digest: record::ranking_digest(&config, TEXT_SEARCH_CONFIG),
            config,
            text_search_config: TEXT_SEARCH_CONFIG.into(),
            repositories: None,
        }
    }

    /// What this retriever's answers are made with, now.
    pub fn record(&self) -> record::AnswerRecord {
        record::AnswerRecord {
            embedding_model: self.embedder.model_id().to_string(),
            weights_digest: self.embedder.weights_digest(),
            ranking_digest: self.ranking_digest.clone(),
            service_version: record::SERVICE_VERSION.to_string(),
        }
    }

    /// Serves the repository tools from the projects' repositories `reader` reads, never a file `exclusions` names.
    pub fn with_repositories(mut self, reader: Arc<dyn FileReader>, exclusions: Exclusions) -> Self {
        self.repositories = Some(RepositoryTools::new(reader, exclusions));
        self
    }

    /// The key shared by every instance that signs and checks cooldown tokens (without one, each instance signs
    /// with a key of its own and tokens carry the cooldown within that instance only).
    pub fn with_cooldown_key(mut self, key: cooldown_token::TokenKey) -> Self {
        self.cooldown_key = key;
        self
    }

    /// Bounds every LLM classification call.
    pub fn with_llm_timeout(mut self, timeout: Duration) -> Self {
        self.llm_timeout = timeout;
        self
    }

    /// Overrides the query-side text search configuration (it must match the column's).
    pub fn with_text_search_config(mut self, config: impl Into<String>) -> Self {
        self.text_search_config = config.into();
        self.ranking_digest = record::ranking_digest(&self.config, &self.text_search_config);
        self
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Reads on `replica` while it answers and keeps up ([`Replica`]).
    pub fn with_replica(mut self, replica: Replica) -> Self {
        self.replica = Some(replica);
        self
    }

    /// Runs `read` on the replica when it is usable, else on the writer; and on the writer again when the replica
    /// fails it (the replica is then left until its next probe) or, with `by_id`, does not hold what was asked yet
    /// (a memory written an instant ago). Says where the answer was read.
    async fn on_reads<'a, T, F, Fut>(&'a self, by_id: bool, read: F) -> crate::Result<(T, ReadFrom)>
    where
        F: Fn(&'a PgPool) -> Fut,
        Fut: Future<Output = crate::Result<T>>,
    {
        let Some(replica) = self.replica.as_ref() else { return Ok((read(&self.pool).await?, ReadFrom::Writer)) };
        if !replica.usable(&self.pool).await {
            return Ok((read(&self.pool).await?, ReadFrom::Writer));
        }
        match read(replica.pool()).await {
            Err(e @ (crate::Error::Database(_) | crate::Error::Unavailable(_))) => {
                tracing::warn!(error = %e, "the read replica failed a read; reading from the writer");
                replica.failed();
                Ok((read(&self.pool).await?, ReadFrom::Writer))
            }
            Err(crate::Error::NotFound { .. }) if by_id => Ok((read(&self.pool).await?, ReadFrom::Writer)),
            answered => answered.map(|answer| (answer, ReadFrom::Replica)),
        }
    }

    pub fn config(&self) -> &RetrievalConfig {
        &self.config
    }

    /// Stage 1 as configured for a request of `max_results`: both branches, no extras.
    pub fn branch_settings(&self, max_results: usize) -> stage1::BranchSettings<'_> {
        stage1::BranchSettings {
            rows_per_branch: self.config.rows_per_branch.max(max_results),
            kept_after_fusion: self.config.kept_after_fusion.max(max_results),
            text_search_config: &self.text_search_config,
            bm25: self.config.bm25,
            vector_timeout_ms: self.config.vector_budget_ms,
            keyword_timeout_ms: self.config.keyword_budget_ms,
            run_vector: true,
            run_keyword: true,
            keyword_row_wise: false,
            vector_scan: store::branches::VectorScan::Either,
            extras: BranchExtras::NONE,
        }
    }

    /// [`Self::branch_settings`] for an organisation of `memories` memories, with or without a ready partition of its
    /// own, and the `extras` the request uses: the keyword branch row by row below `keyword_row_wise_below`, the
    /// vector branch through the partition alone or exactly.
    pub fn tenant_branch_settings(
        &self,
        max_results: usize,
        memories: i64,
        partition: bool,
        extras: BranchExtras,
    ) -> stage1::BranchSettings<'_> {
        let vector_scan = store::branches::VectorScan::for_tenant(partition);
        let keyword_row_wise = memories < self.config.keyword_row_wise_below;
        stage1::BranchSettings { extras, keyword_row_wise, vector_scan, ..self.branch_settings(max_results) }
    }

    /// The Stage 1 predicate for a principal: read scopes from the agent's stored profile (an agent without a
    /// profile reads only `org`; a non-agent caller reads all shared scopes but no agent's private memories).
    pub async fn scope_filter(
        &self,
        organization_id: Uuid,
        agent_id: Option<Uuid>,
        project_id: Option<Uuid>,
        task_id: Option<Uuid>,
        sensitivity_gate: bool,
    ) -> crate::Result<ReadFilter> {
        let read_scopes = self.read_scopes(&self.pool, organization_id, agent_id).await?;
        Ok(ReadFilter::for_retrieval(organization_id, read_scopes, agent_id, project_id, task_id, sensitivity_gate))
    }

    /// What waits on an operator in the organisation: decisions held for review, and candidates no check has
    /// decided after [`review::UNDECIDED_AFTER`] (the console's operator view; `memory-admin jobs status` adds the
    /// queues).
    pub async fn review(&self, organization_id: Uuid) -> crate::Result<review::Review> {
        let read = |pool| async move {
            let mut tx = store::begin_read(pool, organization_id, self.config.read_budget_ms).await?;
            let held = store::held::pending(&mut *tx, organization_id).await?;
            let waited = review::UNDECIDED_AFTER;
            let undecided =
                store::memories::undecided_candidates(&mut *tx, organization_id, waited, review::LISTED as i64).await?;
            store::end_read(tx);
            let undecided = undecided.into_iter().map(|(id, since)| review::Undecided { id, since }).collect();
            Ok(review::Review { held, undecided })
        };
        Ok(self.on_reads(false, read).await?.0)
    }

    /// One memory the principal may read, in any status (superseded and archived ones are kept for audit), of any
    /// project or task its read scopes admit.
    pub async fn memory(&self, organization_id: Uuid, agent_id: Option<Uuid>, id: Uuid) -> crate::Result<Memory> {
        let read = |pool| async move {
            let scope = self.audit_scope(pool, organization_id, agent_id).await?;
            let mut tx = store::begin_read(pool, organization_id, self.config.read_budget_ms).await?;
            let memory = store::memories::get_readable(&mut tx, &scope, id).await?;
            store::end_read(tx);
            memory.ok_or(crate::Error::not_found("memory", id))
        };
        Ok(self.on_reads(true, read).await?.0)
    }

    async fn audit_scope(
        &self,
        pool: &PgPool,
        organization_id: Uuid,
        agent_id: Option<Uuid>,
    ) -> crate::Result<ReadFilter> {
        Ok(ReadFilter::for_audit(organization_id, self.read_scopes(pool, organization_id, agent_id).await?, agent_id))
    }

    /// The current profiles of the entities a memory the principal may read mentions, those the principal may
    /// read (the console's memory view).
    pub async fn profiles_of(
        &self,
        organization_id: Uuid,
        agent_id: Option<Uuid>,
        id: Uuid,
    ) -> crate::Result<Vec<crate::domain::EntityProfile>> {
        let read = |pool| async move {
            let scope = self.audit_scope(pool, organization_id, agent_id).await?;
            let mut tx = store::begin_read(pool, organization_id, self.config.read_budget_ms).await?;
            if store::memories::get_readable(&mut tx, &scope, id).await?.is_none() {
                return Err(crate::Error::not_found("memory", id));
            }
            let profiles = store::entities::profiles_for(&mut tx, &scope.current_only(), &[id]).await?;
            store::end_read(tx);
            Ok(profiles)
        };
        Ok(self.on_reads(true, read).await?.0)
    }

    /// The supersession chain through a memory the principal may read, oldest first: what it replaced and what
    /// replaced it.
    pub async fn supersession_chain(
        &self,
        organization_id: Uuid,
        agent_id: Option<Uuid>,
        id: Uuid,
    ) -> crate::Result<Vec<Memory>> {
        let read = |pool| async move {
            let scope = self.audit_scope(pool, organization_id, agent_id).await?;
            let mut tx = store::begin_read(pool, organization_id, self.config.read_budget_ms).await?;
            let chain = supersession::chain(&mut tx, &scope, id).await?;
            store::end_read(tx);
            Ok(chain)
        };
        Ok(self.on_reads(true, read).await?.0)
    }

    /// The read scopes of a principal (the context read is one prepared round trip; the small taxonomy it also
    /// returns is not needed here).
    /// A declaration of a file of the project's repository, by symbol path, for a principal who may read the
    /// project's memories.
    pub async fn read_symbol(
        &self,
        organization_id: Uuid,
        agent_id: Option<Uuid>,
        project_id: Uuid,
        path: &str,
        symbol: &str,
    ) -> crate::Result<SymbolText> {
        let tools = self.repository_tools(organization_id, agent_id, project_id, path).await?;
        tools.read_symbol(organization_id, project_id, path, symbol).await
    }

    /// Lines of a file of the project's repository, for a principal who may read the project's memories.
    pub async fn read_file_range(
        &self,
        organization_id: Uuid,
        agent_id: Option<Uuid>,
        project_id: Uuid,
        path: &str,
        lines: (u32, u32),
    ) -> crate::Result<FileRange> {
        let tools = self.repository_tools(organization_id, agent_id, project_id, path).await?;
        tools.read_file_range(organization_id, project_id, path, lines.0, lines.1).await
    }

    /// The repository tools for reading `path` of a project, when the deployment has repositories and the file
    /// became memory the principal may read ([`store::memories::file_readable`]): the tools read only what was
    /// imported (never a secret's name, never a file left out), no more widely than its memories. A file the
    /// principal may not read is absent to it, as one that does not exist.
    async fn repository_tools(
        &self,
        organization_id: Uuid,
        agent_id: Option<Uuid>,
        project_id: Uuid,
        path: &str,
    ) -> crate::Result<&RepositoryTools> {
        let tools = self.repositories.as_ref().ok_or_else(|| crate::Error::NotFound {
            kind: "repository",
            message: "this deployment has no repositories (MEMORY_REPOS_DIR)".into(),
        })?;
        crate::repository::reader::check_relative(path).map_err(|e| crate::Error::validation(e.to_string()))?;
        let read_scopes = self.read_scopes(&self.pool, organization_id, agent_id).await?;
        if !read_scopes.contains(&Scope::Project) {
            return Err(crate::Error::Forbidden("reading a project's repository needs the project read scope".into()));
        }
        let scope = ReadFilter::for_retrieval(organization_id, read_scopes, agent_id, Some(project_id), None, false);
        let mut tx = store::begin_read(&self.pool, organization_id, self.config.read_budget_ms).await?;
        let readable = store::memories::file_readable(&mut tx, &scope, project_id, path).await?;
        store::end_read(tx);
        if !readable || tools.excludes(path) {
            return Err(crate::Error::NotFound {
                kind: "file",
                message: format!("project {project_id} has no file {path} imported as memory you may read"),
            });
        }
        Ok(tools)
    }

    async fn read_scopes(
        &self,
        pool: &PgPool,
        organization_id: Uuid,
        agent_id: Option<Uuid>,
    ) -> crate::Result<Vec<Scope>> {
        let stored = match agent_id {
            Some(_) => store::agents::retrieval_context(pool, organization_id, agent_id).await?.read_scopes,
            None => None,
        };
        Ok(read_scopes_of(agent_id, stored))
    }

    /// The query's embedding, from the organisation's cache or the embedder within the embedding budget; None
    /// (and a degraded reason) when the embedder fails or is too slow, so the request goes on with keywords.
    async fn embed_query(
        &self,
        organization_id: Uuid,
        text: &str,
        degraded: &mut Vec<String>,
    ) -> Option<pgvector::Vector> {
        if let Some(v) = self.query_cache.get(organization_id, text) {
            return Some(pgvector::Vector::from(v.as_ref().clone()));
        }
        let budget = Duration::from_millis(self.config.embedding_budget_ms);
        match tokio::time::timeout(budget, self.embedder.embed_one(text)).await {
            Ok(Ok(v)) => Some(pgvector::Vector::from(self.query_cache.put(organization_id, text, v).as_ref().clone())),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "query embedding failed; keyword search only");
                degraded.push("embedding_unavailable".into());
                None
            }
            Err(_) => {
                tracing::warn!(
                    budget_ms = self.config.embedding_budget_ms,
                    "query embedding over budget; keyword search only"
                );
                degraded.push("embedding_timeout".into());
                None
            }
        }
    }

    fn validate_query(&self, query: &str) -> crate::Result<()> {
        if query.trim().is_empty() {
            return Err(crate::Error::validation("query must not be empty"));
        }
        if query.len() > MAX_QUERY_BYTES {
            return Err(crate::Error::validation(format!("query is longer than {MAX_QUERY_BYTES} bytes")));
        }
        Ok(())
    }

    fn validate_max_results(&self, max_results: usize) -> crate::Result<()> {
        if max_results == 0 || max_results > self.config.max_results_cap {
            return Err(crate::Error::validation(format!(
                "max_results must be between 1 and {}",
                self.config.max_results_cap
            )));
        }
        Ok(())
    }
}

/// The read scopes of a caller whose agent profile held `stored` (None: no profile, or no agent): an agent without a
/// profile reads only `org`; a non-agent caller reads every shared scope.
fn read_scopes_of(agent_id: Option<Uuid>, stored: Option<Vec<Scope>>) -> Vec<Scope> {
    match agent_id {
        Some(_) => stored.unwrap_or_else(|| vec![Scope::Org]),
        None => SERVICE_READ_SCOPES.to_vec(),
    }
}
