//! The four-stage pipeline and the three modes, on the real database.

use std::{sync::Arc, time::Duration};

use chrono::Utc;
use integration_tests::{
    Db, DownEmbedder, FixedEmbedder, agent_with_scopes, axis, memory, minilm, retriever, vector_with_similarity,
};
use memory_core::{
    domain::Scope,
    llm::{InvocationPurpose, Llm, ScriptedLlm},
    retrieval::{RetrievalConfig, RetrievalMode, RetrievalRequest, Retriever, SessionTurn, cooldown_token::TokenKey},
};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use uuid::Uuid;

const PROBE: &str = "probe query";

fn probe_embedder() -> Arc<FixedEmbedder> {
    Arc::new(FixedEmbedder::default().with(PROBE, axis(0)))
}

fn request(org: Uuid, mode: RetrievalMode) -> RetrievalRequest {
    RetrievalRequest::new(org, mode, PROBE)
}

fn ids(result: &memory_core::retrieval::RetrievalResult) -> Vec<Uuid> {
    result.memories.iter().map(|m| m.memory.id).collect()
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn top_five_of_twenty_are_the_five_most_cosine_similar(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let created = Utc::now() - chrono::Duration::days(3);
    let mut by_similarity = Vec::new();
    for i in 0..20 {
        let similarity = 0.05 * (i + 1) as f32;
        let m = memory(org, &format!("memory number {i}"))
            .embedding(vector_with_similarity(similarity, 1 + i))
            .created_at(created)
            .insert(&db)
            .await;
        by_similarity.push((similarity, m.id));
    }
    by_similarity.sort_by(|a, b| b.0.total_cmp(&a.0));
    let expected: Vec<Uuid> = by_similarity.iter().take(5).map(|(_, id)| *id).collect();

    let mut req = request(org, RetrievalMode::AgentQuery);
    req.max_results = 5;
    let result = retriever(&db, probe_embedder(), None).query(req).await.unwrap();

    let mut top: Vec<Uuid> = ids(&result);
    top.reverse(); // most relevant last
    assert_eq!(top, expected);
    let cosines: Vec<f64> = result.memories.iter().map(|m| m.cosine_sim.unwrap()).collect();
    assert!((cosines[4] - 1.0).abs() < 1e-4, "{cosines:?}");
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn results_come_in_ascending_score_order_most_relevant_last(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    for i in 0..8 {
        memory(org, &format!("fact {i}"))
            .embedding(vector_with_similarity(0.1 * i as f32 + 0.1, 10 + i))
            .insert(&db)
            .await;
    }
    let result = retriever(&db, probe_embedder(), None).query(request(org, RetrievalMode::AgentQuery)).await.unwrap();
    let scores: Vec<f64> = result.memories.iter().map(|m| m.score).collect();
    assert_eq!(scores.len(), 8);
    assert!(scores.windows(2).all(|w| w[0] <= w[1]), "{scores:?}");
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn taxonomy_subtree_keeps_workflow_memories_and_drops_preferences(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let v = || vector_with_similarity(0.9, 5);
    let a = memory(org, "rebase before merging").embedding(v()).taxonomy(&["workflow", "git"]).insert(&db).await;
    memory(org, "ci runs on every push").embedding(v()).taxonomy(&["workflow", "ci"]).insert(&db).await;
    memory(org, "small pull requests").embedding(v()).taxonomy(&["workflow"]).insert(&db).await;
    let b = memory(org, "tabs over spaces").embedding(v()).taxonomy(&["preferences"]).insert(&db).await;

    let query = "how does our workflow go";
    let embedder = Arc::new(FixedEmbedder::default().with(query, axis(0)));
    let req = RetrievalRequest::new(org, RetrievalMode::Passive, query);
    let result = retriever(&db, embedder, None).query(req).await.unwrap();

    assert_eq!(result.taxonomy, vec!["workflow".to_string()]);
    assert!(!result.fallback_used);
    assert!(ids(&result).contains(&a.id));
    assert!(!ids(&result).contains(&b.id));
    assert_eq!(result.memories.len(), 3);
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn fewer_than_three_taxonomy_matches_fall_back_to_all_candidates(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let v = || vector_with_similarity(0.9, 5);
    memory(org, "rebase before merging").embedding(v()).taxonomy(&["workflow", "git"]).insert(&db).await;
    let b = memory(org, "tabs over spaces").embedding(v()).taxonomy(&["preferences"]).insert(&db).await;
    let query = "our git workflow";
    let embedder = Arc::new(FixedEmbedder::default().with(query, axis(0)));
    let result =
        retriever(&db, embedder, None).query(RetrievalRequest::new(org, RetrievalMode::Passive, query)).await.unwrap();
    assert!(result.fallback_used);
    assert!(ids(&result).contains(&b.id));
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_weak_top_score_after_taxonomy_filtering_falls_back(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let old = Utc::now() - chrono::Duration::days(3650);
    for i in 0..3 {
        memory(org, &format!("old workflow note {i}"))
            .embedding(vector_with_similarity(0.0, 20 + i))
            .confidence(0.0)
            .created_at(old)
            .memory_type(memory_core::domain::MemoryType::Episodic)
            .taxonomy(&["workflow"])
            .insert(&db)
            .await;
    }
    let strong = memory(org, "untagged but relevant").embedding(axis(0)).insert(&db).await;
    let query = "workflow question";
    let embedder = Arc::new(FixedEmbedder::default().with(query, axis(0)));
    let result =
        retriever(&db, embedder, None).query(RetrievalRequest::new(org, RetrievalMode::Passive, query)).await.unwrap();
    assert!(result.fallback_used);
    assert_eq!(result.memories.last().unwrap().memory.id, strong.id);
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn passive_never_returns_restricted_memories_but_agent_query_does(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    memory(org, "public fact").embedding(axis(0)).insert(&db).await;
    let secret = memory(org, "restricted fact").embedding(axis(0)).restricted().insert(&db).await;
    let r = retriever(&db, probe_embedder(), None);

    let mut passive = request(org, RetrievalMode::Passive);
    passive.sensitivity_gate = false; // passive ignores a request to lift the gate
    passive.session = Some(SessionTurn { session_id: "s".into(), turn: 1 });
    assert!(!ids(&r.query(passive).await.unwrap()).contains(&secret.id));

    let agent_query = request(org, RetrievalMode::AgentQuery);
    assert!(ids(&r.query(agent_query).await.unwrap()).contains(&secret.id));
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn an_agent_reading_only_org_scope_never_sees_project_or_private_memories(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let project = Uuid::now_v7();
    let agent = agent_with_scopes(&db, org, &[Scope::Org]).await;
    let shared = memory(org, "org fact").embedding(axis(0)).insert(&db).await;
    memory(org, "project fact").embedding(axis(0)).scope(Scope::Project).project(project).insert(&db).await;
    memory(org, "my private fact").embedding(axis(0)).scope(Scope::AgentPrivate).agent(agent).insert(&db).await;

    let mut req = request(org, RetrievalMode::AgentQuery);
    req.agent_id = Some(agent);
    req.project_id = Some(project);
    let result = retriever(&db, probe_embedder(), None).query(req.clone()).await.unwrap();
    assert_eq!(ids(&result), vec![shared.id]);

    // The same agent with every scope sees all three.
    let mut tx = memory_core::store::begin_for_org(&db.admin, org).await.unwrap();
    memory_core::store::agents::upsert(&mut *tx, org, agent, "a", Scope::ALL).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(retriever(&db, probe_embedder(), None).query(req).await.unwrap().memories.len(), 3);
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn another_organisations_memories_never_appear(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let (mine, theirs) = (Uuid::now_v7(), Uuid::now_v7());
    let own = memory(mine, "probe query fact").embedding(axis(0)).insert(&db).await;
    for i in 0..10 {
        memory(theirs, &format!("probe query fact {i}")).embedding(axis(0)).insert(&db).await;
    }
    let r = retriever(&db, probe_embedder(), None);
    for mode in [RetrievalMode::AgentQuery, RetrievalMode::Mention] {
        let mut req = request(mine, mode);
        if mode == RetrievalMode::Mention {
            req.query = format!("@memory:{PROBE}");
        }
        let result = r.query(req).await.unwrap();
        assert_eq!(ids(&result), vec![own.id]);
        assert!(result.memories.iter().all(|m| m.memory.organization_id == mine));
    }
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn passive_cooldown_withholds_a_memory_for_turns_two_to_five(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let m = memory(org, "the only fact").embedding(axis(0)).insert(&db).await;
    let r = retriever(&db, probe_embedder(), None);
    let at = |turn| {
        let mut req = request(org, RetrievalMode::Passive);
        req.session = Some(SessionTurn { session_id: "session-1".into(), turn });
        req
    };
    assert_eq!(ids(&r.query(at(1)).await.unwrap()), vec![m.id]);
    for turn in 2..=5 {
        assert!(r.query(at(turn)).await.unwrap().memories.is_empty(), "turn {turn}");
    }
    assert_eq!(ids(&r.query(at(6)).await.unwrap()), vec![m.id]);
    // Another session is not affected.
    let mut other = at(2);
    other.session = Some(SessionTurn { session_id: "session-2".into(), turn: 2 });
    assert_eq!(ids(&r.query(other).await.unwrap()), vec![m.id]);
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn two_agents_using_the_same_session_id_do_not_share_a_cooldown(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let (a, b) = (agent_with_scopes(&db, org, &[Scope::Org]).await, agent_with_scopes(&db, org, &[Scope::Org]).await);
    let m = memory(org, "the only fact").embedding(axis(0)).insert(&db).await;
    let r = retriever(&db, probe_embedder(), None);
    let ask = |agent, turn, cooldown_token: Option<String>| {
        let mut req = request(org, RetrievalMode::Passive);
        req.agent_id = Some(agent);
        req.session = Some(SessionTurn { session_id: "shared-id".into(), turn });
        req.cooldown_token = cooldown_token;
        req
    };
    let first = r.query(ask(a, 1, None)).await.unwrap();
    assert_eq!(ids(&first), vec![m.id]);
    let token = first.cooldown_token.clone();
    assert!(r.query(ask(a, 2, token.clone())).await.unwrap().memories.is_empty(), "agent A's cooldown holds");
    // Agent B never had the memory injected: neither the instance's state nor A's token (replayed) withholds it.
    assert_eq!(ids(&r.query(ask(b, 2, token)).await.unwrap()), vec![m.id]);
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn an_exact_identifier_is_found_by_the_keyword_branch_when_its_cosine_is_low(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    for i in 0..12 {
        memory(org, &format!("general note about deployments {i}"))
            .embedding(vector_with_similarity(0.9, 30 + i))
            .insert(&db)
            .await;
    }
    let code = memory(org, "E4021 means the refresh token expired").embedding(axis(100)).insert(&db).await;
    let path = memory(org, "SSO callbacks live in src/auth/login.rs").embedding(axis(101)).insert(&db).await;

    let config = RetrievalConfig { rows_per_branch: 5, ..RetrievalConfig::spec() };
    for (query, expected) in [("what does E4021 mean", code.id), ("who edits src/auth/login.rs", path.id)] {
        let embedder = Arc::new(FixedEmbedder::default().with(query, axis(0)));
        let r = Retriever::new(db.app.clone(), embedder, None, config.clone());
        let result = r.query(RetrievalRequest::new(org, RetrievalMode::AgentQuery, query)).await.unwrap();
        let found = result.memories.iter().find(|m| m.memory.id == expected).expect("identifier memory found");
        assert!(found.cosine_sim.unwrap() < 0.1);
    }
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn agent_query_classifies_with_the_llm(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let v = || vector_with_similarity(0.9, 5);
    for i in 0..3 {
        memory(org, &format!("git rule {i}")).embedding(v()).taxonomy(&["workflow", "git"]).insert(&db).await;
    }
    let pref = memory(org, "tabs").embedding(v()).taxonomy(&["preferences"]).insert(&db).await;
    let llm = Arc::new(ScriptedLlm::new().on(InvocationPurpose::MemoryRetrieval, |req| {
        assert!(req.prompt.contains("- workflow/git"));
        Ok(r#"Sure: {"nodes": ["workflow/git"]}"#.into())
    }));
    let r = retriever(&db, probe_embedder(), Some(llm.clone() as Arc<dyn Llm>));
    let result = r.query(request(org, RetrievalMode::AgentQuery)).await.unwrap();
    assert_eq!(result.taxonomy, vec!["workflow/git".to_string()]);
    assert!(!ids(&result).contains(&pref.id));
    assert!(!result.degraded);
    assert_eq!(result.classification, memory_core::retrieval::Classification::Model);
    assert_eq!(llm.calls()[0].purpose, InvocationPurpose::MemoryRetrieval);

    // No model configured: the rules classify, and that is configuration, not degradation.
    let rules = retriever(&db, probe_embedder(), None);
    for mode in [RetrievalMode::AgentQuery, RetrievalMode::Mention] {
        let ask = request(org, mode);
        let ask = if mode == RetrievalMode::Mention { ask.with_query("@memory:probe query") } else { ask };
        let result = rules.query(ask).await.unwrap();
        assert_eq!(result.classification, memory_core::retrieval::Classification::Rules, "{mode:?}");
        assert!(!result.degraded, "{mode:?}: {:?}", result.degraded_reasons);
    }
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_failing_or_slow_llm_degrades_to_keyword_rules(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    memory(org, "fact").embedding(axis(0)).taxonomy(&["workflow"]).insert(&db).await;
    let failing: Arc<dyn Llm> = Arc::new(ScriptedLlm::new());
    let slow: Arc<dyn Llm> = Arc::new(
        ScriptedLlm::new()
            .on(InvocationPurpose::MemoryRetrieval, |_| Ok("{\"nodes\": []}".into()))
            .with_delay(Duration::from_secs(5)),
    );
    for (llm, reason) in [(failing, "llm_classification_failed"), (slow, "llm_classification_failed")] {
        let r = retriever(&db, probe_embedder(), Some(llm)).with_llm_timeout(Duration::from_millis(100));
        let result = r.query(request(org, RetrievalMode::Mention).with_query("@memory:probe query")).await;
        let result = result.unwrap();
        assert!(result.degraded);
        assert_eq!(result.degraded_reasons, vec![reason.to_string()]);
        assert_eq!(result.classification, memory_core::retrieval::Classification::Rules);
        assert_eq!(result.memories.len(), 1);
    }
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn with_the_embedder_down_retrieval_is_keyword_only_and_says_so(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let hit = memory(org, "the deploy checklist lives in the wiki").embedding(axis(0)).insert(&db).await;
    memory(org, "unrelated").embedding(axis(0)).insert(&db).await;
    let r = retriever(&db, Arc::new(DownEmbedder), None);
    let result = r.query(RetrievalRequest::new(org, RetrievalMode::AgentQuery, "deploy checklist")).await.unwrap();
    assert!(result.degraded);
    assert_eq!(result.degraded_reasons, vec!["embedding_unavailable".to_string()]);
    assert_eq!(ids(&result), vec![hit.id]);
    assert!(result.memories[0].cosine_sim.is_none());
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn with_full_text_search_failing_retrieval_is_vector_only_and_says_so(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let m = memory(org, "probe query fact").embedding(axis(0)).insert(&db).await;
    let r = retriever(&db, probe_embedder(), None).with_text_search_config("no_such_configuration");
    let result = r.query(request(org, RetrievalMode::AgentQuery)).await.unwrap();
    assert!(result.degraded);
    assert_eq!(result.degraded_reasons, vec!["keyword_search_failed".to_string()]);
    assert_eq!(ids(&result), vec![m.id]);
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn the_same_corpus_and_request_give_the_same_order(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let texts = [
        "rebase feature branches",
        "deploy with the pipeline",
        "tabs over spaces",
        "E4021 token expiry",
        "postgres migrations",
    ];
    let embedder = minilm();
    for t in texts {
        let v = memory_core::embed::Embedder::embed_one(embedder.as_ref(), t).await.unwrap();
        // Equal confidence and timestamps make ties likely; order must still be stable.
        memory(org, t).embedding(v).created_at(Utc::now() - chrono::Duration::days(1)).insert(&db).await;
    }
    let r = retriever(&db, embedder.clone(), None);
    let first = ids(&r.query(RetrievalRequest::new(org, RetrievalMode::AgentQuery, "how do we deploy")).await.unwrap());
    let second =
        ids(&r.query(RetrievalRequest::new(org, RetrievalMode::AgentQuery, "how do we deploy")).await.unwrap());
    assert_eq!(first, second);
    assert_eq!(first.len(), 5);
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn bad_requests_are_validation_errors(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let r = retriever(&db, probe_embedder(), None);
    let org = Uuid::now_v7();
    let mut too_many = request(org, RetrievalMode::AgentQuery);
    too_many.max_results = 1000;
    let cases = [
        RetrievalRequest::new(org, RetrievalMode::AgentQuery, "   "),
        RetrievalRequest::new(org, RetrievalMode::Mention, "no mention at all"),
        too_many,
    ];
    for case in cases {
        assert!(matches!(r.query(case).await, Err(memory_core::Error::Validation(_))));
    }
}

trait WithQuery {
    fn with_query(self, q: &str) -> Self;
}

impl WithQuery for RetrievalRequest {
    fn with_query(mut self, q: &str) -> Self {
        self.query = q.into();
        self
    }
}

/// The service entity billing-api, mentioned by `memories`, with its profile synthesised as `summary`.
async fn billing_api_profile(
    db: &Db,
    org: Uuid,
    memories: &[&memory_core::domain::Memory],
    summary: &'static str,
) -> memory_core::lifecycle::synthesis::Synthesis {
    let mut tx = memory_core::store::begin_for_org(&db.admin, org).await.unwrap();
    let entity = memory_core::store::entities::upsert(&mut *tx, org, "service", "billing-api").await.unwrap();
    for m in memories {
        memory_core::store::entities::add_mention(&mut *tx, org, entity, m.id).await.unwrap();
    }
    tx.commit().await.unwrap();
    let llm = Arc::new(ScriptedLlm::new().on(InvocationPurpose::MemorySynthesis, move |_| Ok(summary.into())));
    memory_core::lifecycle::synthesis::EntitySynthesizer::new(llm, None)
        .synthesize_profile(&db.app, org, entity)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn entity_profiles_of_returned_memories_come_with_the_result(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let m = memory(org, "billing-api retries webhooks").embedding(axis(0)).insert(&db).await;
    memory(org, "lunch is at noon").embedding(axis(1)).insert(&db).await;
    let profile = billing_api_profile(&db, org, &[&m], "billing-api: payments").await;

    let mut req = request(org, RetrievalMode::AgentQuery);
    req.max_results = 1;
    let result = retriever(&db, probe_embedder(), None).query(req).await.unwrap();
    assert_eq!(ids(&result), vec![m.id]);
    assert_eq!(result.entity_profiles.len(), 1);
    assert_eq!(result.entity_profiles[0].profile.id, profile.primary().unwrap().profile.id);
    assert_eq!(result.entity_profiles[0].name, "billing-api");
}

/// Passive mode's cooldown withholds an entity profile as it does a memory: the profile injected on turn 1 is not
/// injected again on turn 2, where another memory mentioning the same entity is; carried by the token alone (another
/// instance) as well.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn passive_cooldown_withholds_an_injected_entity_profile(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let first = memory(org, "billing-api retries webhooks").embedding(axis(0)).insert(&db).await;
    let second = memory(org, "billing-api deploys on Fridays").embedding(axis(0)).insert(&db).await;
    let profile = billing_api_profile(&db, org, &[&first, &second], "billing-api: payments").await;
    let profile_id = profile.primary().unwrap().profile.id;

    let at = |turn, cooldown_token: Option<String>| {
        let mut req = request(org, RetrievalMode::Passive);
        req.max_results = 1;
        req.session = Some(SessionTurn { session_id: "session-1".into(), turn });
        req.cooldown_token = cooldown_token;
        req
    };
    let secret = b"a secret the instances share, 32+ bytes long";
    let instance = || retriever(&db, probe_embedder(), None).with_cooldown_key(TokenKey::from_secret(secret).unwrap());
    let first_instance = instance();
    let one = first_instance.query(at(1, None)).await.unwrap();
    assert_eq!(one.entity_profiles.iter().map(|p| p.profile.id).collect::<Vec<_>>(), vec![profile_id]);
    // The same instance, and a new one that knows the session only from the token.
    for (serving, token) in [(&first_instance, None), (&instance(), one.cooldown_token.clone())] {
        let two = serving.query(at(2, token)).await.unwrap();
        assert_eq!(two.memories.len(), 1, "the other memory mentioning billing-api");
        assert!(two.entity_profiles.is_empty(), "the profile injected on turn 1: {:?}", two.entity_profiles);
        assert!(!two.degraded, "{:?}", two.degraded_reasons);
    }
}

/// A cooldown token this service did not issue for the session withholds nothing, and the answer says so.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_cooldown_token_not_issued_for_the_session_is_reported(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let m = memory(org, "the only fact").embedding(axis(0)).insert(&db).await;
    let r = retriever(&db, probe_embedder(), None);
    let at = |session: &str, turn, cooldown_token: Option<String>| {
        let mut req = request(org, RetrievalMode::Passive);
        req.session = Some(SessionTurn { session_id: session.into(), turn });
        req.cooldown_token = cooldown_token;
        req
    };
    let issued = r.query(at("session-1", 1, None)).await.unwrap().cooldown_token;
    for (session, token) in [("session-2", "garbage".to_string()), ("session-3", issued.expect("a token"))] {
        let answer = r.query(at(session, 1, Some(token.clone()))).await.unwrap();
        assert_eq!(ids(&answer), vec![m.id], "{token}");
        assert!(answer.degraded, "{token}");
        assert_eq!(answer.degraded_reasons, vec!["cooldown_token_rejected"], "{token}");
    }
}

/// `max_chars` bounds the text an answer carries, profiles included: memories best first, then profiles, each left
/// out when it does not fit.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn an_answer_carries_at_most_its_budget_of_text_profiles_included(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let fact = "billing-api retries webhooks";
    let m = memory(org, fact).embedding(axis(0)).insert(&db).await;
    let summary = "billing-api: payments";
    billing_api_profile(&db, org, &[&m], summary).await;

    let r = retriever(&db, probe_embedder(), None);
    for mode in [RetrievalMode::AgentQuery, RetrievalMode::Passive] {
        for (budget, memories, profiles) in
            // A profile comes only with a memory that mentions its entity: never alone, though it would fit.
            [
                (None, 1, 1),
                (Some(fact.len() + summary.len()), 1, 1),
                (Some(fact.len()), 1, 0),
                (Some(summary.len()), 0, 0),
            ]
        {
            let mut req = request(org, mode);
            req.max_chars = budget;
            if mode == RetrievalMode::Passive {
                req.session = Some(SessionTurn { session_id: format!("budget-{budget:?}"), turn: 1 });
            }
            let answer = r.query(req).await.unwrap();
            let got = (answer.memories.len(), answer.entity_profiles.len());
            assert_eq!(got, (memories, profiles), "{mode:?}, budget {budget:?}");
        }
    }
}

/// Passive injection leaves out what is under the relevance floor: a turn about nothing the organisation holds
/// injects nothing, where an agent's query still gets the nearest memories it asked for.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn passive_injection_leaves_out_memories_under_the_relevance_floor(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let near = memory(org, "the deploy runbook").embedding(vector_with_similarity(0.6, 1)).insert(&db).await;
    let far = memory(org, "the lunch menu").embedding(vector_with_similarity(0.1, 2)).insert(&db).await;
    let r = retriever(&db, probe_embedder(), None);
    let mut passive = request(org, RetrievalMode::Passive);
    passive.session = Some(SessionTurn { session_id: "floor".into(), turn: 1 });
    assert_eq!(ids(&r.query(passive).await.unwrap()), vec![near.id]);
    let mut asked = ids(&r.query(request(org, RetrievalMode::AgentQuery)).await.unwrap());
    asked.sort();
    let mut both = vec![near.id, far.id];
    both.sort();
    assert_eq!(asked, both);
}

/// A small organisation's keyword branch is scored row by row in one statement; the answer is the one the packed
/// lists give, memory for memory and score for score.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_small_organisations_keyword_branch_row_by_row_answers_as_the_packed_lists(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let words = ["deploy", "billing", "rollback", "freeze", "canary", "staging"];
    for i in 0..40 {
        // Lengths and term counts vary, so BM25's saturation and length normalisation both count.
        let filler = "and more words ".repeat(i % 5);
        let text = format!("{} {} {} {filler}note {i}", words[i % 6], words[(i / 2) % 6], words[(i / 3) % 6]);
        memory(org, &text).embedding(vector_with_similarity(0.2 + 0.01 * i as f32, 7 + i)).insert(&db).await;
    }
    memory_core::store::keyword::pack(&db.admin, org, i64::MAX).await.unwrap();
    let query = "billing rollback canary";
    let embedder = Arc::new(FixedEmbedder::default().with(query, axis(0)));
    let answer = |below: i64| {
        let config = RetrievalConfig { keyword_row_wise_below: below, ..RetrievalConfig::default() };
        let r = Retriever::new(db.app.clone(), embedder.clone(), None, config);
        async move {
            let mut request = RetrievalRequest::new(org, RetrievalMode::AgentQuery, query);
            request.max_results = 20;
            let result = r.query(request).await.unwrap();
            result.memories.iter().map(|m| (m.memory.id, m.score)).collect::<Vec<_>>()
        }
    };
    let (row_wise, packed) = (answer(1_000).await, answer(0).await);
    assert_eq!(row_wise.len(), 20);
    assert_eq!(row_wise.iter().map(|r| r.0).collect::<Vec<_>>(), packed.iter().map(|p| p.0).collect::<Vec<_>>());
    for ((_, score), (_, packed_score)) in row_wise.iter().zip(&packed) {
        assert!((score - packed_score).abs() < 1e-9, "{row_wise:?}\n{packed:?}");
    }
}
