//! `Retriever::search`: the strategies of MEM-004 (vector, keyword, hybrid, graph, metadata).

use std::collections::HashMap;

use uuid::Uuid;

use super::{
    MatchKind, Retriever, SearchHit, SearchRequest, SearchResult, Strategy,
    found::Found,
    fusion::{self, Fusion},
    stage1::{self, BranchSettings},
};
use crate::{
    db::PgPool,
    store::{self, ReadFilter, branches::BranchRow},
};

/// Score multiplier per entity hop of graph expansion.
pub const HOP_DECAY: f64 = 0.5;
/// Entity hops followed from the direct hits.
pub const MAX_HOPS: u32 = 2;
/// Direct hits that seed graph expansion.
const GRAPH_SEEDS: usize = 5;

impl Retriever {
    /// Runs one strategy search. Hits are ordered most relevant FIRST.
    #[tracing::instrument(skip_all, fields(org = %request.organization_id, strategy = ?request.strategy))]
    pub async fn search(&self, request: SearchRequest) -> crate::Result<SearchResult> {
        let read = |pool| {
            let request = request.clone();
            async move { self.search_on(pool, request).await }
        };
        Ok(self.on_reads(false, read).await?.0)
    }

    async fn search_on(&self, pool: &PgPool, request: SearchRequest) -> crate::Result<SearchResult> {
        // The metadata strategy is a pure filter: it needs no query text.
        if request.strategy != Strategy::Metadata {
            self.validate_query(&request.query)?;
        }
        self.validate_max_results(request.max_results)?;
        if let Some(problem) = request.filters.problem() {
            return Err(crate::Error::validation(problem));
        }
        // A repository's memories are a project's: without the project, the filter would match nothing, silently.
        if request.filters.repository.is_some() && request.project_id.is_none() {
            return Err(crate::Error::validation(
                "filters.repository names a project's repository: add the project's project_id",
            ));
        }
        let (org, agent) = (request.organization_id, request.agent_id);
        let read_scopes = self.read_scopes(pool, org, agent).await?;
        let (project, task, gate) = (request.project_id, request.task_id, request.sensitivity_gate);
        let mut scope = ReadFilter::for_retrieval(org, read_scopes, agent, project, task, gate);
        if request.filters.include_archive {
            scope = scope.with_history();
        }
        if let Some(at) = request.filters.as_of {
            super::as_of::check(at, request.filters.include_archive)?;
            scope = scope.at(at);
        }
        let mut degraded = Vec::new();

        let mut hits = if request.strategy == Strategy::Metadata {
            let mut tx = store::begin_read(pool, request.organization_id, self.config.read_budget_ms).await?;
            let rows = store::branches::metadata_branch(&mut tx, &scope, &request.filters, request.max_results).await?;
            store::end_read(tx);
            rows.into_iter().map(|row| hit(row, 0.0, MatchKind::Metadata)).collect()
        } else {
            let wants_vector = matches!(request.strategy, Strategy::Vector | Strategy::Hybrid | Strategy::Graph);
            let wants_keyword = matches!(request.strategy, Strategy::Keyword | Strategy::Hybrid | Strategy::Graph);
            let query_vector = if wants_vector || wants_keyword {
                self.embed_query(request.organization_id, &request.query, &mut degraded).await
            } else {
                None
            };
            // Degraded retrieval: without embeddings a vector search becomes a keyword search.
            let run_keyword = wants_keyword || query_vector.is_none();
            let settings =
                BranchSettings { run_vector: wants_vector, run_keyword, ..self.branch_settings(request.max_results) };
            let set = stage1::gather(pool, &scope, &request.filters, &request.query, query_vector.as_ref(), &settings)
                .await?;
            degraded.extend(set.degraded_reasons);
            let mut hits: Vec<SearchHit> = set
                .candidates
                .into_iter()
                .map(|c| scored(c, request.fusion, request.vector_weight, request.explain))
                .collect();
            sort(&mut hits);
            let mut hits = super::distinct::distinct(hits, |h| &h.memory, request.max_results);
            if request.include_graph || request.strategy == Strategy::Graph {
                self.expand_graph(pool, &scope, &request, query_vector.as_ref(), &mut hits, &mut degraded).await;
            }
            hits
        };
        if let Err(e) = self.one_profile_per_entity(pool, request.organization_id, &mut hits).await {
            tracing::warn!(error = %e, "profile lookup failed; returning every profile hit");
            degraded.push("entity_profiles_failed".into());
        }
        hits.truncate(request.max_results);
        if let Some(at) = request.filters.as_of {
            hits.iter_mut().for_each(|h| super::as_of::as_it_was(&mut h.memory, at));
        }
        Ok(SearchResult {
            hits,
            strategy: request.strategy,
            degraded: !degraded.is_empty(),
            degraded_reasons: degraded,
            record: self.record(),
        })
    }

    /// Keeps one profile of each entity among the hits: of its partitions' profiles (one per set of readers, each
    /// readable here), the one built from the most sources, as the modes attach it.
    async fn one_profile_per_entity(
        &self,
        pool: &PgPool,
        organization_id: Uuid,
        hits: &mut Vec<SearchHit>,
    ) -> crate::Result<()> {
        let profiles: Vec<Uuid> = hits
            .iter()
            .filter(|h| h.memory.memory_type == crate::domain::MemoryType::EntityProfile)
            .map(|h| h.memory.id)
            .collect();
        if profiles.len() < 2 {
            return Ok(());
        }
        let mut tx = store::begin_read(pool, organization_id, self.config.read_budget_ms).await?;
        let mut partitions = store::entities::profiles_among(&mut *tx, organization_id, &profiles).await?;
        store::end_read(tx);
        // Per entity, the most sources first (ties by id): the first is kept.
        partitions.sort_by(|a, b| a.1.cmp(&b.1).then(b.2.cmp(&a.2)).then(a.0.cmp(&b.0)));
        let mut seen = std::collections::HashSet::new();
        let dropped: Vec<Uuid> =
            partitions.into_iter().filter(|(_, entity, _)| !seen.insert(*entity)).map(|(id, ..)| id).collect();
        hits.retain(|h| !dropped.contains(&h.memory.id));
        Ok(())
    }

    /// Adds memories that share entity mentions with the top hits, scored with a decay per hop.
    async fn expand_graph(
        &self,
        pool: &PgPool,
        scope: &store::ReadFilter,
        request: &SearchRequest,
        query: Option<&pgvector::Vector>,
        hits: &mut Vec<SearchHit>,
        degraded: &mut Vec<String>,
    ) {
        let result: crate::Result<()> = async {
            let mut tx = store::begin_read(pool, scope.organization_id(), self.config.read_budget_ms).await?;
            let mut score_of: HashMap<Uuid, f64> = hits.iter().map(|h| (h.memory.id, h.score)).collect();
            let mut frontier: Vec<Uuid> = hits.iter().take(GRAPH_SEEDS).map(|h| h.memory.id).collect();
            for hop in 1..=MAX_HOPS {
                if frontier.is_empty() {
                    break;
                }
                let known: Vec<Uuid> = score_of.keys().copied().collect();
                let neighbours = store::branches::entity_neighbours(
                    &mut tx,
                    scope,
                    &request.filters,
                    &frontier,
                    query,
                    request.max_results,
                )
                .await?;
                let mut next = Vec::new();
                for n in neighbours {
                    if known.contains(&n.candidate.memory.id) {
                        continue;
                    }
                    let score = score_of.get(&n.via).copied().unwrap_or(0.0) * HOP_DECAY;
                    score_of.insert(n.candidate.memory.id, score);
                    next.push(n.candidate.memory.id);
                    let mut h = hit(n.candidate, score, MatchKind::Graph);
                    h.hops = Some(hop);
                    hits.push(h);
                }
                frontier = next;
            }
            store::end_read(tx);
            Ok(())
        }
        .await;
        if let Err(e) = result {
            tracing::warn!(error = %e, "graph expansion failed; returning direct hits only");
            degraded.push("graph_expansion_failed".into());
        }
        sort(hits);
    }
}

fn sort(hits: &mut [SearchHit]) {
    hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.memory.id.cmp(&b.memory.id)));
}

fn scored(c: Found, fusion_kind: Fusion, vector_weight: f64, explain: bool) -> SearchHit {
    let match_kind = match (c.vector_rank, c.keyword_rank) {
        (Some(_), Some(_)) => MatchKind::Hybrid,
        (None, Some(_)) => MatchKind::Keyword,
        _ => MatchKind::Vector,
    };
    let score = match fusion_kind {
        Fusion::Rrf => c.rrf,
        // The keyword score relative to the best keyword match of this query.
        Fusion::Weighted => fusion::weighted(c.vector_rank.and(c.cosine_sim), c.keyword_relative, vector_weight),
    };
    SearchHit {
        explanation: explain.then(|| super::trace::HitExplanation::of(&c)),
        memory: c.memory,
        score,
        cosine_sim: c.cosine_sim,
        keyword_score: c.keyword_score,
        match_kind,
        hops: None,
    }
}

fn hit(row: BranchRow, score: f64, match_kind: MatchKind) -> SearchHit {
    SearchHit {
        memory: row.memory,
        score,
        cosine_sim: row.cosine_sim,
        keyword_score: row.keyword_score,
        match_kind,
        hops: None,
        explanation: None,
    }
}
