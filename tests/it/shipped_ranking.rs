//! The ranking the service ships (`RetrievalConfig::default()`: Stage 4 by relevance from both branches), through
//! `Retriever::query` in every mode: most relevant last, keyword evidence, the taxonomy threshold and its fallback,
//! and dates named in the question.

use std::sync::Arc;

use chrono::{DateTime, TimeZone, Utc};
use integration_tests::{Db, FixedEmbedder, Fixture, axis, memory, shipped_retriever, vector_with_similarity};
use memory_core::retrieval::{
    RetrievalConfig, RetrievalMode, RetrievalRequest, RetrievalResult, Retriever, SessionTurn,
};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use uuid::Uuid;

fn ids(result: &RetrievalResult) -> Vec<Uuid> {
    result.memories.iter().map(|m| m.memory.id).collect()
}

/// A request of `mode` for `query` (mention mode mentions it; passive mode is a session's first turn).
fn request(org: Uuid, mode: RetrievalMode, query: &str) -> RetrievalRequest {
    let text = match mode {
        RetrievalMode::Mention => format!("before we start, @memory:{query}"),
        _ => query.to_string(),
    };
    let mut request = RetrievalRequest::new(org, mode, text);
    if mode == RetrievalMode::Passive {
        request.session = Some(SessionTurn { session_id: "s".into(), turn: 1 });
    }
    request
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn in_every_mode_a_memory_matching_the_words_outranks_a_closer_neighbour_and_comes_last(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let query = "zephyr rollout";
    let answer = memory(org, "the zephyr rollout needs a canary first")
        .embedding(vector_with_similarity(0.4, 3))
        .insert(&db)
        .await;
    let closer = memory(org, "lunch is at noon").embedding(vector_with_similarity(0.7, 4)).insert(&db).await;
    let far = memory(org, "the office is closed on friday").embedding(vector_with_similarity(0.2, 5)).insert(&db).await;
    let embedder = Arc::new(FixedEmbedder::default().with(query, axis(0)));
    let retriever = shipped_retriever(&db, embedder);

    for mode in [RetrievalMode::Passive, RetrievalMode::Mention, RetrievalMode::AgentQuery] {
        let result = retriever.query(request(org, mode, query)).await.unwrap();
        assert_eq!(ids(&result), vec![far.id, closer.id, answer.id], "{mode:?}: most relevant last");
        let scores: Vec<f64> = result.memories.iter().map(|m| m.score).collect();
        assert!(scores.windows(2).all(|w| w[0] <= w[1]), "{mode:?}: {scores:?}");
        assert!(scores.iter().all(|s| (0.0..=1.0).contains(s)), "{mode:?}: relevance lies in [0, 1]: {scores:?}");
        assert!(!result.fallback_used && result.taxonomy.is_empty(), "{mode:?}");
    }
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_relevant_subtree_is_kept_and_the_rest_dropped(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let v = |other| vector_with_similarity(0.9, other);
    memory(org, "rebase before merging").embedding(v(5)).taxonomy(&["workflow", "git"]).insert(&db).await;
    memory(org, "ci runs on every push").embedding(v(6)).taxonomy(&["workflow", "ci"]).insert(&db).await;
    memory(org, "small pull requests").embedding(v(7)).taxonomy(&["workflow"]).insert(&db).await;
    let preference = memory(org, "tabs over spaces").embedding(v(8)).taxonomy(&["preferences"]).insert(&db).await;
    let query = "how does our workflow go";
    let retriever = shipped_retriever(&db, Arc::new(FixedEmbedder::default().with(query, axis(0))));

    let result = retriever.query(request(org, RetrievalMode::Passive, query)).await.unwrap();

    assert_eq!(result.taxonomy, vec!["workflow".to_string()]);
    assert!(!result.fallback_used);
    assert_eq!(result.memories.len(), 3);
    assert!(!ids(&result).contains(&preference.id));
}

/// The shipped ranking with passive injection's relevance floor off: Stages 3 and 4 over memories of any cosine
/// (the floor, which leaves the far ones out of a passive answer, has its own test).
fn without_passive_floor(db: &Db, embedder: Arc<FixedEmbedder>) -> Retriever {
    Retriever::new(db.app.clone(), embedder, None, RetrievalConfig { passive_floor: 0.0, ..RetrievalConfig::default() })
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_subtree_matched_by_its_words_is_kept_though_its_vectors_are_far(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let mut tagged = Vec::new();
    for i in 0..3 {
        let m = memory(org, &format!("workflow note {i}"))
            .embedding(vector_with_similarity(0.0, 20 + i))
            .taxonomy(&["workflow"])
            .insert(&db)
            .await;
        tagged.push(m.id);
    }
    memory(org, "untagged and close").embedding(axis(0)).insert(&db).await;
    let query = "workflow question";
    let retriever = without_passive_floor(&db, Arc::new(FixedEmbedder::default().with(query, axis(0))));

    let result = retriever.query(request(org, RetrievalMode::Passive, query)).await.unwrap();

    assert!(!result.fallback_used, "keyword evidence makes the subtree relevant");
    let mut found = ids(&result);
    found.sort();
    tagged.sort();
    assert_eq!(found, tagged);
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_subtree_without_evidence_falls_back_to_every_candidate(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    for i in 0..3 {
        memory(org, &format!("old note {i}"))
            .embedding(vector_with_similarity(0.0, 20 + i))
            .taxonomy(&["workflow"])
            .insert(&db)
            .await;
    }
    let strong = memory(org, "untagged but close").embedding(axis(0)).insert(&db).await;
    let query = "workflow question";
    let retriever = without_passive_floor(&db, Arc::new(FixedEmbedder::default().with(query, axis(0))));

    for mode in [RetrievalMode::Passive, RetrievalMode::AgentQuery] {
        let result = retriever.query(request(org, mode, query)).await.unwrap();
        assert!(result.fallback_used, "{mode:?}");
        assert_eq!(result.memories.len(), 4, "{mode:?}");
        assert_eq!(result.memories.last().unwrap().memory.id, strong.id, "{mode:?}");
    }
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_memory_of_the_date_the_question_names_outranks_a_newer_one(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let at = |month, day| -> DateTime<Utc> { Utc.with_ymd_and_hms(2024, month, day, 10, 0, 0).unwrap() };
    // Two decisions of the same length and words but one (one would be returned once if they said the same), so
    // only the dates tell them apart.
    let of_the_day = memory(org, "we decided to adopt zephyr for billing")
        .embedding(vector_with_similarity(0.8, 3))
        .created_at(at(5, 3))
        .insert(&db)
        .await;
    let newer = memory(org, "we decided to adopt zephyr for search")
        .embedding(vector_with_similarity(0.8, 4))
        .created_at(at(8, 1))
        .insert(&db)
        .await;
    let query = "what did we decide on 3 May 2024";
    let retriever = shipped_retriever(&db, Arc::new(FixedEmbedder::default().with(query, axis(0))));

    for mode in [RetrievalMode::Passive, RetrievalMode::AgentQuery] {
        let mut request = request(org, mode, query);
        request.recency_at = Some(at(9, 1));
        let result = retriever.query(request).await.unwrap();
        assert_eq!(ids(&result), vec![newer.id, of_the_day.id], "{mode:?}: the memory of 3 May comes last");
    }
    // Without the date the newer memory ranks first: the date decided it.
    let mut undated = request(org, RetrievalMode::AgentQuery, "what did we decide");
    undated.recency_at = Some(at(9, 1));
    let retriever = shipped_retriever(&db, Arc::new(FixedEmbedder::default().with("what did we decide", axis(0))));
    let result = retriever.query(undated).await.unwrap();
    assert_eq!(ids(&result), vec![of_the_day.id, newer.id]);
}

/// README's mention example: a question about one fact of an entity gets that fact, not the entity's profiles
/// (one per readership partition the agent reads, each sharing every word of the question); the profile comes once,
/// attached under `entity_profiles`.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_question_about_one_fact_gets_the_fact_and_the_profile_once_beside_it(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    use memory_core::{
        domain::{MemoryType, Scope},
        embed::Embedder,
        store::{self, entities::PartitionProfile},
    };
    let db = Db::new(opts, conn).await;
    let (org, project) = (Uuid::now_v7(), Uuid::now_v7());
    let agent = integration_tests::agent_with_scopes(&db, org, Scope::ALL).await;
    let embedder = integration_tests::minilm();
    let embed = async |text: &str| embedder.embed_one(text).await.unwrap();
    let fact_text = "Error E4021 from auth-service means the refresh token expired";
    let fact = memory(org, fact_text).embedding(embed(fact_text).await).insert(&db).await;
    let profile_text = "auth-service issues and refreshes tokens; errors E4011, E4021 and E4290 mean bad credentials, \
                        an expired refresh token and rate limiting; auth-service deploys with make release";
    let mut profiles = Vec::new();
    for (i, scope) in [Scope::Org, Scope::Project, Scope::AgentPrivate].into_iter().enumerate() {
        let mut p = memory(org, &format!("{profile_text} ({i})"))
            .embedding(embed(profile_text).await)
            .memory_type(MemoryType::EntityProfile)
            .scope(scope);
        if scope == Scope::Project {
            p = p.project(project);
        }
        if scope == Scope::AgentPrivate {
            p = p.agent(agent);
        }
        profiles.push(p.insert(&db).await);
    }
    let all: Vec<&memory_core::domain::Memory> = std::iter::once(&fact).chain(profiles.iter()).collect();
    let entity = integration_tests::mention_all(&db, org, "auth-service", &all).await;
    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    for (i, profile) in profiles.iter().enumerate() {
        let row = PartitionProfile {
            readership: format!("partition-{i}"),
            memory_id: profile.id,
            source_digest: String::new(),
            source_count: 1 + i as i32,
        };
        store::entities::set_partition_profile(&mut *tx, org, entity, &row).await.unwrap();
    }
    store::entities::set_synthesis(&mut *tx, org, entity, Some(profiles[0].id)).await.unwrap();
    tx.commit().await.unwrap();

    let mut ask = request(org, RetrievalMode::AgentQuery, "what does E4021 mean for auth-service");
    ask.agent_id = Some(agent);
    ask.project_id = Some(project);
    let result = shipped_retriever(&db, embedder.clone()).query(ask).await.unwrap();
    assert!(!result.memories.iter().any(|m| m.memory.memory_type == MemoryType::EntityProfile), "{result:?}");
    assert_eq!(result.memories.last().map(|m| m.memory.id), Some(fact.id), "the fact, most relevant (last)");
    assert_eq!(result.entity_profiles.len(), 1, "the entity's profile once");
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn near_identical_memories_are_returned_once_in_every_mode_and_search(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    use memory_core::{
        embed::Embedder,
        retrieval::{SearchRequest, Strategy},
    };
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let embedder = integration_tests::minilm();
    let texts = [
        "The staging database is restored from the nightly snapshot every Monday morning",
        "the staging database is restored from the nightly snapshot every Monday morning.",
        "The staging database is restored from the nightly snapshot on every Monday morning",
        "The staging database is not restored from the nightly snapshot every Monday morning",
        "The production database is restored from the hourly snapshot when a deploy fails",
    ];
    let mut stored = Vec::new();
    for text in texts {
        stored.push(memory(org, text).embedding(embedder.embed_one(text).await.unwrap()).insert(&db).await);
    }
    let retriever = shipped_retriever(&db, embedder.clone());
    let query = "when is the staging database restored from the snapshot";
    // Of the three saying the same, one; the negation and the other database are other facts.
    let expect_distinct = |found: Vec<Uuid>, how: &str| {
        let repeats = stored[..3].iter().filter(|m| found.contains(&m.id)).count();
        assert_eq!(repeats, 1, "{how}: {found:?}");
        assert!(found.contains(&stored[3].id) && found.contains(&stored[4].id), "{how}: {found:?}");
        assert_eq!(found.len(), 3, "{how}: {found:?}");
    };
    for mode in [RetrievalMode::Passive, RetrievalMode::Mention, RetrievalMode::AgentQuery] {
        let result = retriever.query(request(org, mode, query)).await.unwrap();
        expect_distinct(ids(&result), &format!("{mode:?}"));
    }
    for strategy in [Strategy::Vector, Strategy::Keyword, Strategy::Hybrid] {
        let hits = retriever.search(SearchRequest::new(org, strategy, query)).await.unwrap().hits;
        expect_distinct(hits.iter().map(|h| h.memory.id).collect(), &format!("{strategy:?}"));
    }
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_passive_query_weighs_the_conversations_latest_turns(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    // A conversation longer than its latest turns: the opening (49 words) and the turn being answered.
    let latest = "Bob: and the hotel?";
    let conversation = format!("Ann: {}\n{latest}", "we drove all night ".repeat(12).trim_end());
    let embedder = FixedEmbedder::default().with(&conversation, axis(0)).with(latest, axis(1));
    let (both, old_turns) = (vector_with_similarity(std::f32::consts::FRAC_1_SQRT_2, 1), axis(0));
    let of_the_opening = memory(org, "alpha note").embedding(old_turns).insert(&db).await;
    let of_both = memory(org, "bravo note").embedding(both).insert(&db).await;
    memory(org, "charlie note").embedding(axis(1)).insert(&db).await;
    let retriever = shipped_retriever(&db, Arc::new(embedder));

    // Passive: the conversation and its latest turn count alike, so the memory of both comes last (first).
    let result = retriever.query(request(org, RetrievalMode::Passive, &conversation)).await.unwrap();
    assert_eq!(result.memories.last().map(|m| m.memory.id), Some(of_both.id), "{:?}", ids(&result));
    // An agent's query is the question as asked: the whole text alone.
    let result = retriever.query(request(org, RetrievalMode::AgentQuery, &conversation)).await.unwrap();
    assert_eq!(result.memories.last().map(|m| m.memory.id), Some(of_the_opening.id), "{:?}", ids(&result));
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_paraphrase_standing_out_among_neighbours_outranks_matches_of_a_common_word(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    // Twelve memories share the query's one common word and lie far from it; one says what the query asks in
    // other words and lies close.
    for i in 0..12 {
        let text = format!("the billing service note number {}", ["one", "two", "three", "four"][i % 4]);
        let text = format!("{text} {}", "again ".repeat(i / 4).trim_end());
        memory(org, &text).embedding(vector_with_similarity(0.30 + 0.01 * i as f32, 10 + i)).insert(&db).await;
    }
    let paraphrase =
        memory(org, "payments went down on Tuesday").embedding(vector_with_similarity(0.95, 40)).insert(&db).await;
    let query = "service outage";
    let retriever = shipped_retriever(&db, Arc::new(FixedEmbedder::default().with(query, axis(0))));

    for mode in [RetrievalMode::Passive, RetrievalMode::Mention, RetrievalMode::AgentQuery] {
        let result = retriever.query(request(org, mode, query)).await.unwrap();
        assert_eq!(result.memories.last().map(|m| m.memory.id), Some(paraphrase.id), "{mode:?}: {:?}", ids(&result));
    }
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_question_nothing_lies_close_to_is_not_decided_by_a_word_a_distant_memory_shares(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    // Twelve memories share the query's one common word, the shortest (the best keyword match) farthest from the
    // query; the memory that answers shares no word and is the nearest, yet distant (as prose asking about code
    // is from the code), standing out less than twice as far as the best keyword match does.
    let fillers =
        ["amber", "birch", "cobalt", "dune", "ember", "fjord", "garnet", "harbor", "indigo", "juniper", "kelp"];
    for i in 0..12 {
        let text = format!("the service note {}", fillers[..i].join(" "));
        memory(org, text.trim_end())
            .embedding(vector_with_similarity(0.30 + 0.01 * i as f32, 10 + i))
            .insert(&db)
            .await;
    }
    let answer =
        memory(org, "payments went down on Tuesday").embedding(vector_with_similarity(0.50, 40)).insert(&db).await;
    let query = "service outage";
    let retriever = shipped_retriever(&db, Arc::new(FixedEmbedder::default().with(query, axis(0))));

    for mode in [RetrievalMode::Passive, RetrievalMode::Mention, RetrievalMode::AgentQuery] {
        let result = retriever.query(request(org, mode, query)).await.unwrap();
        assert_eq!(result.memories.last().map(|m| m.memory.id), Some(answer.id), "{mode:?}: {:?}", ids(&result));
    }
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_neighbour_a_full_keyword_list_had_no_room_for_is_not_ranked_below_all_its_matches(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    // More memories share the query's common word than the keyword branch returns (50 rows), the shorter the
    // farther from the query (0 to 10 fillers, the five with 10 left out of the list); the nearest neighbour
    // shares no word, and nothing stands out enough for the vector branch to lead.
    let fillers = ["amber", "birch", "cobalt", "dune", "ember", "fjord", "garnet", "harbor", "indigo", "juniper"];
    let mut matches = Vec::new();
    for i in 0..55 {
        let text = format!("the service note {i} {}", fillers[..i % 11].join(" "));
        let similarity = 0.60 + 0.002 * i as f32;
        matches
            .push(memory(org, text.trim_end()).embedding(vector_with_similarity(similarity, 10 + i)).insert(&db).await);
    }
    let neighbour =
        memory(org, "payments went down on Tuesday").embedding(vector_with_similarity(0.72, 90)).insert(&db).await;
    let query = "service outage";
    let retriever = shipped_retriever(&db, Arc::new(FixedEmbedder::default().with(query, axis(0))));

    for mode in [RetrievalMode::Mention, RetrievalMode::AgentQuery] {
        let mut request = request(org, mode, query);
        request.max_results = 50;
        let result = retriever.query(request).await.unwrap();
        let position = |id: Uuid| ids(&result).iter().position(|found| *found == id);
        // A match with the list's last keyword score (9 fillers) and nearly as close: the neighbour ranks above it
        // (most relevant last).
        let last_listed = position(matches[53].id).unwrap_or_else(|| panic!("{mode:?}: a listed match is missing"));
        let neighbour = position(neighbour.id).unwrap_or_else(|| panic!("{mode:?}: the neighbour is not among the 50"));
        assert!(neighbour > last_listed, "{mode:?}: the neighbour ranks below every match");
    }
}

/// Memories of `org` in a file of `path`: when `as_code`, chunks of the source file anchored at a symbol on their
/// lines, prose otherwise.
struct File {
    org: Uuid,
    path: &'static str,
    as_code: bool,
}

impl File {
    fn memory(&self, text: &str, symbol: &str, lines: std::ops::RangeInclusive<u32>) -> Fixture {
        let fixture = memory(self.org, text);
        if self.as_code { fixture.code(self.path, symbol, lines) } else { fixture }
    }

    /// Memories sharing none of the query's words at these similarities.
    async fn unrelated(&self, db: &Db, similarities: &[f32]) {
        for (i, similarity) in similarities.iter().enumerate() {
            let line = 100 + 10 * i as u32;
            let fixture = self.memory(&format!("let value_{i} = table[{i}];"), &format!("entry_{i}"), line..=line + 5);
            fixture.embedding(vector_with_similarity(*similarity, 50 + i)).insert(db).await;
        }
    }
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_question_answered_from_code_is_led_by_the_nearest_chunk_not_by_identifiers_it_shares(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let query = "retry the upload";
    let retriever = shipped_retriever(&db, Arc::new(FixedEmbedder::default().with(query, axis(0))));
    for as_code in [true, false] {
        let file = File { org: Uuid::now_v7(), path: "src/upload.rs", as_code };
        // The nearest chunk says none of the question's words; another repeats them in its identifiers.
        let nearest = file
            .memory("for attempt in 0..limit { send(part)?; sleep(backoff(attempt)); }", "send_with_backoff", 1..=5)
            .embedding(vector_with_similarity(0.70, 3))
            .insert(&db)
            .await;
        let sharing = file
            .memory("let retry_upload = UploadRetry::new(upload_id);", "UploadRetry::new", 10..=12)
            .embedding(vector_with_similarity(0.60, 4))
            .insert(&db)
            .await;
        file.unrelated(&db, &[0.60, 0.62, 0.64]).await;
        for mode in [RetrievalMode::Mention, RetrievalMode::AgentQuery] {
            let result = retriever.query(request(file.org, mode, query)).await.unwrap();
            let best = result.memories.last().map(|m| m.memory.id);
            // Prose is led by the words it shares; code by the nearest chunk.
            let expected = if as_code { nearest.id } else { sharing.id };
            assert_eq!(best, Some(expected), "code: {as_code}, {mode:?}: {:?}", ids(&result));
        }
    }
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_question_that_says_a_functions_name_in_its_own_words_gets_that_function(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let query = "Resets the bucket";
    let retriever = shipped_retriever(&db, Arc::new(FixedEmbedder::default().with(query, axis(0))));
    for as_code in [true, false] {
        let file = File { org: Uuid::now_v7(), path: "jinja/bccache.py", as_code };
        // The function named `reset` is a little farther from the question than another function of the file.
        let reset = file
            .memory("self.code = None", "Bucket.reset", 10..=11)
            .embedding(vector_with_similarity(0.68, 3))
            .insert(&db)
            .await;
        let clear = file
            .memory("for filename in self._list_cache_files():\n    remove(filename)", "clear", 40..=42)
            .embedding(vector_with_similarity(0.70, 4))
            .insert(&db)
            .await;
        file.unrelated(&db, &[0.60, 0.62, 0.64]).await;
        for mode in [RetrievalMode::Mention, RetrievalMode::AgentQuery] {
            let result = retriever.query(request(file.org, mode, query)).await.unwrap();
            // Only code has a name: prose memories are ranked by how close they are.
            let (expected, other) = if as_code { (reset.id, clear.id) } else { (clear.id, reset.id) };
            assert_eq!(result.memories.last().map(|m| m.memory.id), Some(expected), "code: {as_code}, {mode:?}");
            assert!(ids(&result).contains(&other), "code: {as_code}, {mode:?}: {:?}", ids(&result));
        }
    }
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn the_learned_ranking_orders_by_its_score_and_explains_it_as_the_sum_of_the_features_shares(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    use memory_core::retrieval::{learned::RANKER, ranking::RankingFormula};
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let query = "zephyr rollout";
    let answer = memory(org, "the zephyr rollout needs a canary first")
        .embedding(vector_with_similarity(0.8, 3))
        .insert(&db)
        .await;
    for (n, text) in
        ["lunch is at noon", "the office is closed on friday", "a rollout of the new chairs"].iter().enumerate()
    {
        memory(org, text).embedding(vector_with_similarity(0.3, 4 + n)).insert(&db).await;
    }
    let embedder = Arc::new(FixedEmbedder::default().with(query, axis(0)));
    let config = RetrievalConfig { ranking: RankingFormula::Learned, ..RetrievalConfig::default() };
    let retriever = Retriever::new(db.app.clone(), embedder, None, config);

    let mut asked = request(org, RetrievalMode::AgentQuery, query);
    asked.explain = true;
    let result = retriever.query(asked).await.unwrap();
    assert_eq!(result.memories.last().map(|m| m.memory.id), Some(answer.id), "{:?}", ids(&result));
    let scores: Vec<f64> = result.memories.iter().map(|m| m.score).collect();
    assert!(scores.windows(2).all(|w| w[0] <= w[1]), "most relevant last: {scores:?}");
    for m in &result.memories {
        let explanation = m.explanation.as_ref().expect("asked to explain");
        let logit = RANKER.bias + explanation.contributions.as_ref().expect("the model ranked").values().sum::<f64>();
        assert!((m.score - 1.0 / (1.0 + (-logit).exp())).abs() < 1e-9, "{} {logit}", m.score);
    }
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn an_explained_answer_says_how_each_memory_was_found_and_counts_what_each_rule_left_out(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    use memory_core::retrieval::fusion::Blend;
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let query = "zephyr rollout canary";
    let answer = memory(org, "the zephyr rollout needs a canary first")
        .embedding(vector_with_similarity(0.8, 3))
        .insert(&db)
        .await;
    memory(org, "the zephyr rollout needs a canary first!")
        .embedding(vector_with_similarity(0.79, 4))
        .insert(&db)
        .await;
    memory(org, "lunch is at noon").embedding(vector_with_similarity(0.5, 5)).insert(&db).await;
    memory(org, "the office is closed on friday").embedding(vector_with_similarity(0.05, 6)).insert(&db).await;
    // Another agent's private memory and a restricted one, both matching: never counted, never named.
    let hidden = ["another agent's zephyr rollout canary plan", "the restricted zephyr rollout canary key"];
    memory(org, hidden[0])
        .embedding(vector_with_similarity(0.9, 7))
        .scope(memory_core::domain::Scope::AgentPrivate)
        .agent(Uuid::now_v7())
        .insert(&db)
        .await;
    memory(org, hidden[1]).embedding(vector_with_similarity(0.9, 8)).restricted().insert(&db).await;
    let retriever = shipped_retriever(&db, Arc::new(FixedEmbedder::default().with(query, axis(0))));

    let mut asked = request(org, RetrievalMode::Passive, query);
    asked.explain = true;
    let first = retriever.query(asked.clone()).await.unwrap();
    let trace = first.trace.as_ref().expect("asked to explain");
    assert_eq!((trace.candidates.vector, trace.candidates.fused), (4, 4), "{trace:?}");
    assert!(trace.candidates.keyword >= 2, "{trace:?}");
    assert_eq!(trace.excluded.passive_floor, 1, "the office memory is below the floor");
    assert_eq!(trace.excluded.near_duplicates, 1, "the repeat of the answer");
    assert_eq!((trace.excluded.cooldown, trace.excluded.taxonomy, trace.excluded.budget), (0, 0, 0));
    assert!(matches!(trace.blend, Blend::KeywordLed { .. } | Blend::Standing { .. }), "{:?}", trace.blend);
    let best = first.memories.last().unwrap();
    assert_eq!(best.memory.id, answer.id);
    let explanation = best.explanation.as_ref().unwrap();
    let vector = explanation.vector.expect("a neighbour");
    assert_eq!(vector.rank, 1);
    assert!((vector.score - 0.8).abs() < 1e-3 && vector.in_range == 1.0, "{vector:?}");
    assert_eq!(explanation.keyword.expect("matched").rank, 1);
    assert_eq!(explanation.fused_rank, 1);
    assert!(explanation.of_the_named_time.is_none());
    let shown = serde_json::to_string(&first).unwrap();
    assert!(hidden.iter().all(|text| !shown.contains(text)), "the explained answer names nothing unreadable");

    // The next turn: the answer and the memory injected beside it are cooling down.
    asked.session.as_mut().unwrap().turn = 2;
    let second = retriever.query(asked.clone()).await.unwrap();
    assert_eq!(second.trace.unwrap().excluded.cooldown, first.memories.len());
    // Unasked, nothing of it.
    asked.explain = false;
    let unexplained = retriever.query(asked).await.unwrap();
    assert!(unexplained.trace.is_none() && unexplained.memories.iter().all(|m| m.explanation.is_none()));
}
