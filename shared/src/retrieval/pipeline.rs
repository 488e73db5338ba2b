//! `Retriever::query`: the four-stage pipeline of the three retrieval modes.

use chrono::Utc;
use uuid::Uuid;

use super::{
    RankedMemory, RetrievalMode, RetrievalRequest, RetrievalResult, Retriever,
    candidates::{self, BranchSettings, Candidate},
    mention::parse_mentions,
    ranking,
    taxonomy::Taxonomy,
};
use crate::store::{self, SearchFilters};

/// Fewer candidates than this left by the taxonomy filter triggers the fallback to all candidates.
const MIN_TAXONOMY_MATCHES: usize = 3;

impl Retriever {
    /// Runs the pipeline for one request. The result is ordered most relevant LAST.
    #[tracing::instrument(skip_all, fields(org = %request.organization_id, mode = ?request.mode))]
    pub async fn query(&self, request: RetrievalRequest) -> crate::Result<RetrievalResult> {
        let text = match request.mode {
            RetrievalMode::Mention => parse_mentions(&request.query)
                .ok_or_else(|| crate::Error::validation("mention mode needs `@memory:<query>` in the query text"))?,
            _ => request.query.clone(),
        };
        self.validate_query(&text, request.max_results)?;
        let gate = request.mode == RetrievalMode::Passive || request.sensitivity_gate;
        let scope = self
            .scope_filter(request.organization_id, request.agent_id, request.project_id, request.task_id, gate)
            .await?;
        let mut degraded = Vec::new();

        // Stage 1: nearest neighbours and keyword matches inside the scope predicate, fused.
        let query_vector = self.embed_query(&text, &mut degraded).await;
        let settings = BranchSettings {
            limit: self.config.candidate_limit,
            text_search_config: &self.text_search_config,
            statement_timeout_ms: self.statement_timeout_ms,
            run_vector: true,
            run_keyword: true,
        };
        let set =
            candidates::gather(&self.pool, &scope, &SearchFilters::default(), &text, query_vector.as_ref(), &settings)
                .await?;
        degraded.extend(set.degraded_reasons);
        let mut pool_of_candidates = set.candidates;

        // Passive cooldown: memories recently injected into this session are not candidates.
        let session = request.session.as_ref().filter(|_| request.mode == RetrievalMode::Passive);
        if let Some(s) = session {
            let cooling = self.cooldown.cooling(request.organization_id, &s.session_id, s.turn);
            pool_of_candidates.retain(|c| !cooling.contains(&c.memory.id));
        }

        // Stage 2: taxonomy classification.
        let taxonomy = {
            let mut tx = store::begin_for_org(&self.pool, request.organization_id).await?;
            let nodes = store::taxonomy::nodes(&mut *tx, request.organization_id).await?;
            tx.commit().await?;
            Taxonomy::new(nodes)
        };
        let classified = self.classify(&taxonomy, request.mode, &text, &mut degraded).await;

        // Stage 3: keep candidates tagged within the classified subtrees (unless too few remain).
        let as_of = request.as_of.unwrap_or_else(Utc::now);
        let mut fallback_used = false;
        let mut ranked = if classified.is_empty() {
            self.rank(&pool_of_candidates, as_of)
        } else {
            let subtree = taxonomy.subtree(&classified);
            let in_subtree: Vec<Candidate> = pool_of_candidates
                .iter()
                .filter(|c| c.taxonomy_node_ids.iter().any(|n| subtree.contains(n)))
                .cloned()
                .collect();
            if in_subtree.len() < MIN_TAXONOMY_MATCHES {
                fallback_used = true;
                self.rank(&pool_of_candidates, as_of)
            } else {
                let ranked = self.rank(&in_subtree, as_of);
                // Stage 4 fallback: a weak best match means the taxonomy misled us.
                if ranked.first().is_none_or(|top| top.score < self.config.min_top_score) {
                    fallback_used = true;
                    self.rank(&pool_of_candidates, as_of)
                } else {
                    ranked
                }
            }
        };
        ranked.truncate(request.max_results);

        if let Some(s) = session {
            self.cooldown.record(request.organization_id, &s.session_id, s.turn, ranked.iter().map(|r| r.memory.id));
        }

        let ids: Vec<Uuid> = ranked.iter().map(|r| r.memory.id).collect();
        let entity_profiles = if ids.is_empty() {
            Vec::new()
        } else {
            let mut tx = store::begin_for_org(&self.pool, request.organization_id).await?;
            let profiles = store::entities::profiles_for(&mut tx, &scope, &ids).await?;
            tx.commit().await?;
            profiles.into_iter().filter(|p| !ids.contains(&p.profile.id)).collect()
        };

        // Injection order: most relevant closest to the turn boundary, i.e. last.
        ranked.reverse();
        Ok(RetrievalResult {
            memories: ranked,
            fallback_used,
            entity_profiles,
            taxonomy: classified.iter().map(|id| taxonomy.path(*id)).collect(),
            degraded: !degraded.is_empty(),
            degraded_reasons: degraded,
        })
    }

    async fn classify(
        &self,
        taxonomy: &Taxonomy,
        mode: RetrievalMode,
        text: &str,
        degraded: &mut Vec<String>,
    ) -> Vec<Uuid> {
        if taxonomy.is_empty() {
            return Vec::new();
        }
        if mode == RetrievalMode::Passive {
            return taxonomy.classify_by_rules(text);
        }
        let Some(llm) = &self.llm else {
            degraded.push("llm_unavailable".into());
            return taxonomy.classify_by_rules(text);
        };
        match taxonomy.classify_with_llm(llm.as_ref(), text, self.llm_timeout).await {
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!(error = %e, "LLM taxonomy classification failed; using keyword rules");
                degraded.push("llm_classification_failed".into());
                taxonomy.classify_by_rules(text)
            }
        }
    }

    /// Stage 4: composite score, best first, ties broken by id so equal inputs give equal order.
    fn rank(&self, candidates: &[Candidate], as_of: chrono::DateTime<Utc>) -> Vec<RankedMemory> {
        let mut ranked: Vec<RankedMemory> = candidates
            .iter()
            .map(|c| {
                // Without a query embedding the keyword score stands in for similarity.
                let similarity = c.cosine_sim.or(c.keyword_score).unwrap_or(0.0);
                let recency = ranking::recency(c.memory.created_at, as_of, c.memory.memory_type);
                let score = ranking::composite(&self.config.weights, similarity, recency, c.memory.confidence);
                RankedMemory { memory: c.memory.clone(), score, cosine_sim: c.cosine_sim }
            })
            .collect();
        ranked.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.memory.id.cmp(&b.memory.id)));
        ranked
    }
}
