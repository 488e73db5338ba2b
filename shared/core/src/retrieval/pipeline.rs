//! `Retriever::query`: the four-stage pipeline of the three retrieval modes.

use chrono::Utc;
use uuid::Uuid;

use super::{
    Classification, RankedMemory, RetrievalMode, RetrievalRequest, RetrievalResult, Retriever,
    cooldown::Session,
    cooldown_token,
    found::{Found, FoundSet},
    mention::parse_mentions,
    ranking::{self, Ranking},
    stage1::{self, BranchSettings},
    taxonomy::Taxonomy,
    time_anchor,
    trace::{Candidates, Excluded, StageTimings, Trace},
};
use crate::{
    db::PgPool,
    replica::ReadFrom,
    store::{self, ReadFilter, SearchFilters, branches::BranchExtras},
};

/// Fewer candidates than this left by the taxonomy filter triggers the fallback to all candidates.
const MIN_TAXONOMY_MATCHES: usize = 3;

/// The words of a passive conversation's latest turns embedded apart. MADial-Bench passive nDCG@10: 0.5329 at 40
/// words, 0.5245 at 80, 0.5145 with the conversation alone (docs/experiments.md).
pub const RECENT_TURN_WORDS: usize = 40;

/// The last lines of `text` holding at most `words` words (the last line whatever its length), a suffix of `text`.
pub fn recent_turns(text: &str, words: usize) -> &str {
    let text = text.trim_end();
    let starts: Vec<usize> = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect();
    let (mut start, mut counted) = (text.len(), 0);
    for &line_start in starts.iter().rev() {
        let line_words = text[line_start..start].split_whitespace().count();
        if counted > 0 && counted + line_words > words {
            break;
        }
        (start, counted) = (line_start, counted + line_words);
    }
    &text[start..]
}

/// What Stages 3 and 4 made of the candidates.
struct Ranked {
    memories: Vec<RankedMemory>,
    /// The taxonomy filter was dropped for every candidate.
    fallback_used: bool,
    /// Candidates outside the classified subtrees, when the filter held.
    outside_taxonomy: usize,
    /// Candidates left out as repeats of better ones.
    repeats: usize,
    /// Candidates ranked (after the taxonomy filter).
    considered: usize,
}

/// Stages 3 and 4: keeps the candidates tagged within the classified subtrees and ranks them, falling back to
/// all candidates when too few remain or the best of them is weak. No classes: all candidates, no fallback.
fn filter_and_rank(
    ranking: Ranking<'_>,
    min_top_score: f64,
    taxonomy: &Taxonomy,
    classified: &[Uuid],
    candidates: &[Found],
    max_results: usize,
) -> Ranked {
    let rank = |subset: &[&Found], fallback_used: bool| {
        let (memories, repeats) = ranking::rank_counted(ranking, subset, max_results);
        let outside_taxonomy = if classified.is_empty() || fallback_used { 0 } else { candidates.len() - subset.len() };
        Ranked { memories, fallback_used, outside_taxonomy, repeats, considered: subset.len() }
    };
    let everything: Vec<&Found> = candidates.iter().collect();
    if classified.is_empty() {
        return rank(&everything, false);
    }
    let subtree = taxonomy.subtree(classified);
    let in_subtree: Vec<&Found> =
        candidates.iter().filter(|c| c.taxonomy_node_ids.iter().any(|n| subtree.contains(n))).collect();
    if in_subtree.len() >= MIN_TAXONOMY_MATCHES {
        let ranked = rank(&in_subtree, false);
        // Whether the subtree's best is strong enough is judged without the named dates, so naming a date does not
        // by itself send the query to the fallback (only then is the subset ranked a second time; the spec's
        // formula ignores dates).
        let best = if ranking.anchors.is_empty() || ranking.formula == ranking::RankingFormula::Spec {
            ranked.memories.first().map(|top| top.score)
        } else {
            ranking::rank(Ranking { anchors: &[], ..ranking }, &in_subtree, 1).first().map(|top| top.score)
        };
        if best.is_some_and(|score| score >= min_top_score) {
            return ranked;
        }
    }
    rank(&everything, true)
}

/// What the context call gives a request ([`Retriever::load_context`]).
struct Context {
    scope: ReadFilter,
    taxonomy: Taxonomy,
    has_entity_profiles: bool,
    generation: i64,
    memories: i64,
    vector_partition: bool,
}

/// What a request asks of Stage 1: the branches' whole input but the query's embedding, which the text and whether
/// the request is passive decide.
pub(super) struct Asked<'a> {
    pub scope: &'a ReadFilter,
    pub filters: &'a SearchFilters,
    pub text: &'a str,
    pub passive: bool,
    pub settings: &'a BranchSettings<'a>,
}

impl Asked<'_> {
    /// All of it, as the found cache's key.
    fn key(&self) -> String {
        let Self { scope, filters, text, passive, settings } = self;
        format!("{passive}\u{0}{scope:?}\u{0}{filters:?}\u{0}{settings:?}\u{0}{text}")
    }
}

impl Retriever {
    /// Runs the pipeline for one request. The result is ordered most relevant LAST.
    pub async fn query(&self, request: RetrievalRequest) -> crate::Result<RetrievalResult> {
        Ok(self.query_timed(request).await?.0)
    }

    /// [`Retriever::query`], with how long each stage took.
    #[tracing::instrument(skip_all, fields(org = %request.organization_id, mode = ?request.mode))]
    pub async fn query_timed(&self, request: RetrievalRequest) -> crate::Result<(RetrievalResult, StageTimings)> {
        let started = std::time::Instant::now();
        let mode = request.mode;
        let (answer, read_from) = self
            .on_reads(false, |pool| {
                let request = request.clone();
                async move { self.run_query(pool, request).await }
            })
            .await?;
        let (result, mut timings) = answer;
        timings.read_from = read_from;
        let total_ms = started.elapsed().as_secs_f64() * 1000.0;
        metrics::histogram!("retrieval_latency_ms", "mode" => mode.as_str()).record(total_ms);
        if result.degraded {
            metrics::counter!("retrieval_degraded", "mode" => mode.as_str()).increment(1);
        }
        tracing::info!(
            target: "memory::request",
            mode = mode.as_str(),
            total_ms,
            context_and_embedding_ms = timings.context_ms,
            branches_ms = timings.branches_ms,
            vector_ms = timings.vector_ms,
            keyword_ms = timings.keyword_ms,
            fusion_ms = timings.fusion_ms,
            classify_ms = timings.classify_ms,
            rank_ms = timings.rank_ms,
            candidates = timings.candidates,
            results = result.memories.len(),
            degraded = result.degraded,
            degraded_reasons = ?result.degraded_reasons,
            read_from = ?timings.read_from,
            stage1_kept = timings.stage1_kept,
            embedding_model = result.record.embedding_model,
            weights_digest = result.record.weights_digest,
            ranking_digest = result.record.ranking_digest,
            service_version = result.record.service_version,
            "retrieval"
        );
        Ok((result, timings))
    }

    async fn run_query(
        &self,
        pool: &PgPool,
        request: RetrievalRequest,
    ) -> crate::Result<(RetrievalResult, StageTimings)> {
        let mut timings = StageTimings::default();
        let mut stage = std::time::Instant::now();
        let mut lap = |into: &mut f64| {
            *into = stage.elapsed().as_secs_f64() * 1000.0;
            stage = std::time::Instant::now();
        };
        let text = match request.mode {
            RetrievalMode::Mention => parse_mentions(&request.query)
                .ok_or_else(|| crate::Error::validation("mention mode needs `@memory:<query>` in the query text"))?,
            _ => request.query.clone(),
        };
        self.validate_query(&text)?;
        self.validate_max_results(request.max_results)?;
        if request.include_archive && request.mode == RetrievalMode::Passive {
            return Err(crate::Error::validation("passive injection never includes the archive"));
        }
        if let Some(at) = request.active_at {
            if request.mode == RetrievalMode::Passive {
                return Err(crate::Error::validation("passive injection is about now; as_of is for the other modes"));
            }
            super::as_of::check(at, request.include_archive)?;
        }
        if let Some(session) = &request.session
            && session.session_id.len() > super::MAX_SESSION_ID_BYTES
        {
            return Err(crate::Error::validation(format!(
                "session_id is longer than {} bytes",
                super::MAX_SESSION_ID_BYTES
            )));
        }
        let mut degraded = Vec::new();

        // The query embedding and the caller's scopes + taxonomy are independent: fetch them together. A passive
        // query is the conversation so far: its latest turns are embedded apart too, so they weigh as much as all
        // before them.
        let passive = request.mode == RetrievalMode::Passive;
        let embedding = async {
            if passive {
                self.embed_conversation(request.organization_id, &text, &mut degraded).await
            } else {
                (self.embed_query(request.organization_id, &text, &mut degraded).await, true)
            }
        };
        let ((query_vector, embedded_as_asked), context) = tokio::join!(embedding, self.load_context(pool, &request));
        let Context { scope, taxonomy, has_entity_profiles, generation, memories, vector_partition } = context?;
        lap(&mut timings.context_ms);

        // Stage 2 for passive mode runs first: it uses rules over the taxonomy alone, and an empty classification
        // spares the branches the candidates' taxonomy tags (Stage 3 will not run).
        let early_classes =
            if passive { Some(self.classify(&taxonomy, request.mode, &text, &mut degraded).await) } else { None };
        let extras = BranchExtras {
            taxonomy: early_classes.as_ref().map_or(!taxonomy.is_empty(), |classes| !classes.is_empty()),
            profiled_entities: has_entity_profiles,
        };

        // Stage 1: nearest neighbours and keyword matches inside the scope predicate, fused.
        let settings = self.tenant_branch_settings(request.max_results, memories, vector_partition, extras);
        let filters = SearchFilters::default();
        let asked = Asked { scope: &scope, filters: &filters, text: &text, passive, settings: &settings };
        // A set found with a vector another request of the same text would not use (a turn's embedding failed) is
        // not kept, nor one a failure degraded.
        let kept_under = (degraded.is_empty() && embedded_as_asked).then_some(generation);
        let set = self.gather(pool, asked, query_vector.as_ref(), kept_under).await?;
        timings.stage1_kept = set.kept;
        degraded.extend(set.degraded_reasons);
        (timings.vector_ms, timings.keyword_ms, timings.fusion_ms) = (set.vector_ms, set.keyword_ms, set.fusion_ms);
        let (mut candidates, blend) = (set.candidates, set.blend);
        // A profile is the summary of its entity, attached under `entity_profiles` to the memories that mention it:
        // it does not compete with them (a long profile shares every word of any question about its entity, and
        // would crowd out the fact that answers it).
        let counted = Candidates {
            vector: candidates.iter().filter(|c| c.vector_rank.is_some()).count(),
            keyword: candidates.iter().filter(|c| c.keyword_rank.is_some()).count(),
            fused: candidates.len(),
        };
        let mut excluded = Excluded::default();
        let left_out = |candidates: &mut Vec<Found>, keep: &dyn Fn(&Found) -> bool| {
            let before = candidates.len();
            candidates.retain(|c| keep(c));
            before - candidates.len()
        };
        excluded.entity_profiles =
            left_out(&mut candidates, &|c| c.memory.memory_type != crate::domain::MemoryType::EntityProfile);
        timings.candidates = candidates.len();
        lap(&mut timings.branches_ms);

        // Passive cooldown: memories recently injected into this agent's session are not candidates.
        let session = request.session.as_ref().filter(|_| passive).map(|s| {
            let session_id = s.session_id.clone();
            (Session { organization_id: request.organization_id, agent_id: request.agent_id, session_id }, s.turn)
        });
        // A token this service did not issue for this session (malformed, forged, another session's, or signed with a
        // key since rotated) withholds nothing, and the answer says so.
        let carried: Vec<(Uuid, u32)> = match (&session, &request.cooldown_token) {
            (Some((session, _)), Some(token)) => cooldown_token::decode(&self.cooldown_key, session, token)
                .unwrap_or_else(|| {
                    degraded.push("cooldown_token_rejected".into());
                    Vec::new()
                }),
            _ => Vec::new(),
        };
        let cooling = session.as_ref().map(|(session, turn)| {
            let mut cooling = self.cooldown.cooling(session, *turn);
            cooling.extend(carried.iter().filter(|(_, at)| self.cooldown.withheld(*at, *turn)).map(|(id, _)| *id));
            cooling
        });
        if let Some(cooling) = &cooling {
            excluded.cooldown = left_out(&mut candidates, &|c| !cooling.contains(&c.memory.id));
        }

        // Stage 2 for the active modes (LLM classification).
        let classified = match early_classes {
            Some(classes) => classes,
            None => self.classify(&taxonomy, request.mode, &text, &mut degraded).await,
        };

        lap(&mut timings.classify_ms);
        let model_failed = degraded.iter().any(|reason| reason == "llm_classification_failed");
        let classification = if taxonomy.is_empty() {
            Classification::None
        } else if passive || self.llm.is_none() || model_failed {
            Classification::Rules
        } else {
            Classification::Model
        };
        if passive {
            // Injection is paid for on every turn: nothing rather than the least bad of the unrelated. Before the
            // ranking, so the places and the taxonomy's fallback go to what is above the floor.
            let floor = self.config.passive_floor;
            excluded.passive_floor = left_out(&mut candidates, &|c| c.cosine_sim.is_none_or(|cosine| cosine >= floor));
        }
        let anchors = time_anchor::named(&text);
        let ranking = Ranking {
            formula: self.config.ranking,
            weights: &self.config.weights,
            anchors: &anchors,
            recency_at: request.recency_at.unwrap_or_else(Utc::now),
            explain: request.explain,
        };
        let stages = filter_and_rank(
            ranking,
            self.config.min_top_score,
            &taxonomy,
            &classified,
            &candidates,
            request.max_results,
        );
        excluded.taxonomy = stages.outside_taxonomy;
        excluded.near_duplicates = stages.repeats;
        excluded.beyond_max_results = stages.considered.saturating_sub(stages.repeats + stages.memories.len());
        let (mut ranked, fallback_used) = (stages.memories, stages.fallback_used);
        lap(&mut timings.rank_ms);

        let mut budget_left = request.max_chars;
        if let Some(left) = &mut budget_left {
            let before = ranked.len();
            ranked.retain(|r| fits(left, &r.memory.content));
            excluded.budget = before - ranked.len();
        }
        let profiled: Vec<Uuid> = ranked
            .iter()
            .filter(|r| candidates.iter().any(|c| c.memory.id == r.memory.id && c.mentions_profiled_entity))
            .map(|r| r.memory.id)
            .collect();
        let mut entity_profiles = match self.entity_profiles(pool, &scope, &profiled, &ranked).await {
            Ok(profiles) => profiles,
            Err(e) => {
                tracing::warn!(error = %e, "entity profile lookup failed; answering without profiles");
                degraded.push("entity_profiles_failed".into());
                Vec::new()
            }
        };
        // A profile cools down like a memory: injected once, withheld for the session's next turns.
        if let Some(cooling) = &cooling {
            entity_profiles.retain(|p| !cooling.contains(&p.profile.id));
        }
        if let Some(left) = &mut budget_left {
            entity_profiles.retain(|p| fits(left, &p.profile.content));
        }
        let cooldown_token = session.map(|(session, turn)| {
            let injected = ranked.iter().map(|r| r.memory.id).chain(entity_profiles.iter().map(|p| p.profile.id));
            self.cooldown.record(&session, turn, injected);
            let mut entries: std::collections::HashMap<Uuid, u32> = std::collections::HashMap::new();
            let still = carried.into_iter().filter(|(_, at)| self.cooldown.still_cooling(*at, turn));
            for (id, at) in still.chain(self.cooldown.entries(&session, turn)) {
                let newest = entries.entry(id).or_insert(at);
                *newest = (*newest).max(at);
            }
            let entries: Vec<(Uuid, u32)> = entries.into_iter().collect();
            cooldown_token::encode(&self.cooldown_key, &session, &entries)
        });

        if let Some(at) = request.active_at {
            ranked.iter_mut().for_each(|r| super::as_of::as_it_was(&mut r.memory, at));
            entity_profiles.iter_mut().for_each(|p| super::as_of::as_it_was(&mut p.profile, at));
        }
        // Injection order: most relevant closest to the turn boundary, i.e. last.
        ranked.reverse();
        let result = RetrievalResult {
            memories: ranked,
            fallback_used,
            entity_profiles,
            taxonomy: classified.iter().map(|id| taxonomy.path(*id)).collect(),
            classification,
            degraded: !degraded.is_empty(),
            degraded_reasons: degraded,
            cooldown_token,
            record: self.record(),
            trace: request.explain.then_some(Trace { blend, candidates: counted, excluded, timings_ms: timings }),
        };
        Ok((result, timings))
    }

    /// Passive mode's query vector: the conversation and its latest turns ([`recent_turns`]) embedded apart and
    /// summed, so the turn being answered counts as much as everything before it, and is not lost when the whole
    /// conversation runs past the model's input. A conversation no longer than its latest turns is embedded once.
    /// Also says whether the vector is the one asked for (false: the latest turns' embedding failed).
    async fn embed_conversation(
        &self,
        organization_id: Uuid,
        text: &str,
        degraded: &mut Vec<String>,
    ) -> (Option<pgvector::Vector>, bool) {
        let recent = recent_turns(text, RECENT_TURN_WORDS);
        if recent.len() == text.trim_end().len() {
            return (self.embed_query(organization_id, text, degraded).await, true);
        }
        // Both at once (one model session each); without the latest turns' vector the whole conversation's serves
        // alone: the vector branch still runs.
        let mut unused_reasons = Vec::new();
        let (whole, latest) = tokio::join!(
            self.embed_query(organization_id, text, degraded),
            self.embed_query(organization_id, recent, &mut unused_reasons)
        );
        let Some(whole) = whole else { return (None, true) };
        let Some(latest) = latest else { return (Some(whole), false) };
        let mut sum: Vec<f32> = whole.as_slice().iter().zip(latest.as_slice()).map(|(a, b)| a + b).collect();
        crate::embed::normalize(&mut sum);
        (Some(pgvector::Vector::from(sum)), true)
    }

    /// Stage 1 for `asked`: the candidates kept under the organisation's `generation` when there are
    /// ([`found_cache`](super::found_cache)), else the branches', kept when nothing degraded them. `None` keeps nothing.
    pub(super) async fn gather(
        &self,
        pool: &PgPool,
        asked: Asked<'_>,
        query_vector: Option<&pgvector::Vector>,
        generation: Option<i64>,
    ) -> crate::Result<FoundSet> {
        // The writer's and the replica's generations are counted apart: one number need not mean the same rows on
        // both (commits become visible in another order on a standby).
        let from = if std::ptr::eq(pool, self.pool()) { ReadFrom::Writer } else { ReadFrom::Replica };
        let key = generation
            .filter(|_| self.config.found_cache_bytes > 0)
            .map(|generation| (asked.scope.organization_id(), generation, format!("{from:?}\u{0}{}", asked.key())));
        if let Some(kept) = key.as_ref().and_then(|key| self.found_cache.get(key)) {
            return Ok(FoundSet::kept(kept.candidates.clone(), kept.blend));
        }
        let Asked { scope, filters, text, settings, .. } = asked;
        let set = stage1::gather(pool, scope, filters, text, query_vector, settings).await?;
        if let Some(key) = key
            && set.degraded_reasons.is_empty()
        {
            self.found_cache.put(key, set.candidates.clone(), set.blend);
        }
        Ok(set)
    }

    /// The caller's scope filter, the organisation's taxonomy, whether it has entity profiles and its generation, in
    /// one round trip.
    async fn load_context(&self, pool: &PgPool, request: &RetrievalRequest) -> crate::Result<Context> {
        let org = request.organization_id;
        let gate = request.mode == RetrievalMode::Passive || request.sensitivity_gate;
        let context = store::agents::retrieval_context(pool, org, request.agent_id).await?;
        let (agent, project, task) = (request.agent_id, request.project_id, request.task_id);
        let read_scopes = super::read_scopes_of(agent, context.read_scopes);
        let mut scope = ReadFilter::for_retrieval(org, read_scopes, agent, project, task, gate);
        if request.include_archive {
            scope = scope.with_history();
        }
        if let Some(at) = request.active_at {
            scope = scope.at(at);
        }
        Ok(Context {
            scope,
            taxonomy: Taxonomy::new(context.taxonomy),
            has_entity_profiles: context.has_entity_profiles,
            generation: context.generation,
            memories: context.memories,
            vector_partition: context.vector_partition,
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
        // Without a model configured the rules classify: configuration, not degradation.
        let Some(llm) = &self.llm else { return taxonomy.classify_by_rules(text) };
        match taxonomy.classify_with_llm(llm.as_ref(), text, self.llm_timeout).await {
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!(error = %e, "LLM taxonomy classification failed; using keyword rules");
                degraded.push("llm_classification_failed".into());
                taxonomy.classify_by_rules(text)
            }
        }
    }

    /// Readable synthesised profiles of the entities that the `profiled` memories mention (profiles already
    /// among the ranked memories are not repeated).
    async fn entity_profiles(
        &self,
        pool: &PgPool,
        scope: &ReadFilter,
        profiled: &[Uuid],
        ranked: &[RankedMemory],
    ) -> crate::Result<Vec<crate::domain::EntityProfile>> {
        if profiled.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = store::begin_read(pool, scope.organization_id(), self.config.read_budget_ms).await?;
        let profiles = store::entities::profiles_for(&mut tx, scope, profiled).await?;
        store::end_read(tx);
        Ok(profiles.into_iter().filter(|p| !ranked.iter().any(|r| r.memory.id == p.profile.id)).collect())
    }
}

/// Whether `content` fits in what is `left` of an answer's character budget, taking its share when it does (a
/// memory or profile that does not fit is left out; a smaller one after it may fit).
fn fits(left: &mut usize, content: &str) -> bool {
    let chars = content.chars().count();
    let fit = chars <= *left;
    if fit {
        *left -= chars;
    }
    fit
}

#[cfg(test)]
mod tests {
    use super::recent_turns;

    #[test]
    fn the_latest_turns_are_the_last_lines_within_the_words_and_at_least_the_last_line() {
        let conversation = "Ann: we moved the launch\nBot: to when?\nAnn: to the first week of March\n";
        assert_eq!(recent_turns(conversation, 10), "Bot: to when?\nAnn: to the first week of March");
        assert_eq!(recent_turns(conversation, 9), "Ann: to the first week of March");
        assert_eq!(recent_turns(conversation, 2), "Ann: to the first week of March");
        assert_eq!(recent_turns(conversation, 100), conversation.trim_end());
        assert_eq!(recent_turns("one line only", 1), "one line only");
    }
}
