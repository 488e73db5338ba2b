//! The lifecycle jobs never widen who can read a memory, apply each decision once under redelivery and races,
//! keep what retrieval needs on a replacement, and write exactly their outbox events.

use std::{sync::Arc, time::Duration};

use integration_tests::{Db, axis, everything_contradicts, memory, mention_all, outbox_counts, vector_with_similarity};
use memory_core::{
    domain::{DedupDecision, Memory, MemoryStatus, Scope, TrustLevel},
    lifecycle::{
        contradiction::ContradictionDetector,
        dedup::{DedupPair, Deduper},
        file_scan::FileScanner,
        synthesis::EntitySynthesizer,
    },
    llm::{InvocationPurpose, ScriptedLlm},
    store::{self, ReadFilter},
};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use uuid::Uuid;

async fn reload(db: &Db, org: Uuid, id: Uuid) -> Memory {
    let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
    store::memories::get(&mut *tx, org, id).await.unwrap().unwrap()
}

fn pair(a: &Memory, b: &Memory) -> DedupPair {
    DedupPair { a: a.id, b: b.id }
}

/// Decides `decision` for every pair; merges by joining both texts.
fn dedup_model(decision: &'static str) -> ScriptedLlm {
    ScriptedLlm::new()
        .on(InvocationPurpose::MemoryDedup, move |req| {
            let n = req.prompt.matches("Pair ").count();
            let items: Vec<String> = (0..n).map(|i| format!(r#"{{"pair":{i},"decision":"{decision}"}}"#)).collect();
            Ok(format!(r#"{{"decisions":[{}]}}"#, items.join(",")))
        })
        .on(InvocationPurpose::MemoryMerge, |req| Ok(req.prompt.replace('\n', " ")))
}

async fn count(db: &Db, org: Uuid, sql: &str) -> i64 {
    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    sqlx::query_scalar(sql).bind(org).fetch_one(&mut *tx).await.unwrap()
}

async fn dedup_decision(db: &Db, org: Uuid, a: Uuid, b: Uuid) -> (DedupDecision, Option<String>) {
    let (a, b) = if a < b { (a, b) } else { (b, a) };
    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    sqlx::query_as(
        "SELECT decision, reason FROM memory_dedup_pair \
         WHERE organization_id = $1 AND memory_a_id = $2 AND memory_b_id = $3",
    )
    .bind(org)
    .bind(a)
    .bind(b)
    .fetch_one(&mut *tx)
    .await
    .unwrap()
}

fn events(pairs: &[(&str, i64)]) -> Vec<(String, i64)> {
    pairs.iter().map(|(t, n)| (t.to_string(), *n)).collect()
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_restricted_or_private_memory_merged_with_a_public_one_does_not_become_readable_by_its_readers(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let public = memory(org, "The API listens on port 8080").insert(&db).await;
    let restricted = memory(org, "The API admin password rotates monthly").restricted().insert(&db).await;
    let private = memory(org, "I keep the API token in my notes")
        .scope(Scope::AgentPrivate)
        .agent(Uuid::now_v7())
        .insert(&db)
        .await;
    let llm = Arc::new(dedup_model("merge"));
    let pairs = [pair(&public, &restricted), pair(&public, &private)];
    Deduper::new(llm.clone(), None).review_cluster(&db.app, org, &pairs).await.unwrap();

    assert_eq!(
        count(&db, org, "SELECT count(*) FROM memory WHERE organization_id = $1 AND source_kind = 'merge'").await,
        0
    );
    assert!(llm.calls().iter().all(|c| c.purpose != InvocationPurpose::MemoryMerge), "no merged text was written");
    for m in [&public, &restricted, &private] {
        assert_eq!(reload(&db, org, m.id).await.status, MemoryStatus::Active);
    }
    for other in [&restricted, &private] {
        let (decision, reason) = dedup_decision(&db, org, public.id, other.id).await;
        assert_eq!(decision, DedupDecision::KeepBoth);
        assert!(reason.unwrap().starts_with("readership"), "the reason is recorded");
    }
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn synthesis_over_two_agents_private_memories_produces_no_profile_the_other_agent_can_read(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let (x, y) = (Uuid::now_v7(), Uuid::now_v7());
    let mut sources = Vec::new();
    for (agent, secret) in [(x, "x-secret"), (y, "y-secret")] {
        for i in 0..3 {
            let text = format!("billing-api {secret} {i}");
            sources.push(memory(org, &text).scope(Scope::AgentPrivate).agent(agent).insert(&db).await);
        }
    }
    let entity = mention_all(&db, org, "billing-api", &sources.iter().collect::<Vec<_>>()).await;
    let echo = Arc::new(ScriptedLlm::new().on(InvocationPurpose::MemorySynthesis, |req| Ok(req.prompt.clone())));
    let synthesis = EntitySynthesizer::new(echo, None).synthesize_profile(&db.app, org, entity).await.unwrap();
    assert_eq!(synthesis.profiles.len(), 2, "one profile per agent");

    for (reader, others_secret) in [(x, "y-secret"), (y, "x-secret")] {
        let scope = ReadFilter::for_audit(org, Scope::ALL.to_vec(), Some(reader));
        let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
        let mut readable = 0;
        for profile in &synthesis.profiles {
            if let Some(m) = store::memories::get_readable(&mut tx, &scope, profile.profile.id).await.unwrap() {
                readable += 1;
                assert!(!m.content.contains(others_secret), "{reader} reads another agent's memory: {}", m.content);
            }
        }
        assert_eq!(readable, 1, "each agent reads its own profile");
    }
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_private_memory_never_supersedes_an_org_memory(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let agent = Uuid::now_v7();
    let org_wide =
        memory(org, "billing-api deploys on Tuesdays").embedding(vector_with_similarity(0.8, 1)).insert(&db).await;
    let private = memory(org, "billing-api deploys on Fridays")
        .scope(Scope::AgentPrivate)
        .agent(agent)
        .embedding(axis(0))
        .confidence(0.9)
        .status(MemoryStatus::Candidate)
        .insert(&db)
        .await;
    mention_all(&db, org, "billing-api", &[&org_wide, &private]).await;

    // Contradiction: a confident private memory would supersede; it is held for review instead.
    let contradicted =
        ContradictionDetector::new(everything_contradicts()).check(&db.app, org, private.id).await.unwrap();
    assert_eq!(contradicted.len(), 1);
    let after = reload(&db, org, org_wide.id).await;
    assert_eq!((after.status, after.confidence), (MemoryStatus::Active, org_wide.confidence));
    assert_eq!(reload(&db, org, private.id).await.status, MemoryStatus::Active, "the new memory is promoted");

    // Dedup: "A replaces B" with A private and B org-wide.
    Deduper::new(Arc::new(dedup_model("supersede_b")), None)
        .review_cluster(&db.app, org, &[pair(&private, &org_wide)])
        .await
        .unwrap();
    assert_eq!(reload(&db, org, org_wide.id).await.status, MemoryStatus::Active);
    let (decision, reason) = dedup_decision(&db, org, private.id, org_wide.id).await;
    assert_eq!(decision, DedupDecision::KeepBoth);
    assert!(reason.unwrap().starts_with("held for review: readership"));

    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    let held = store::held::pending(&mut *tx, org).await.unwrap();
    let actions: Vec<(&str, &str)> = held.iter().map(|h| (h.job.as_str(), h.action.as_str())).collect();
    assert_eq!(actions, vec![("contradiction", "supersede"), ("dedup", "supersede")]);
    assert!(held.iter().all(|h| h.memory_id == org_wide.id && h.other_memory_id == private.id));
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn an_untrusted_memory_never_lowers_a_verified_memorys_confidence(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let verified = memory(org, "billing-api deploys on Tuesdays")
        .embedding(vector_with_similarity(0.8, 1))
        .confidence(0.6)
        .trust(TrustLevel::Verified)
        .insert(&db)
        .await;
    let untrusted = memory(org, "billing-api deploys on Fridays")
        .embedding(axis(0))
        .confidence(0.5)
        .trust(TrustLevel::Untrusted)
        .status(MemoryStatus::Candidate)
        .insert(&db)
        .await;
    mention_all(&db, org, "billing-api", &[&verified, &untrusted]).await;
    ContradictionDetector::new(everything_contradicts()).check(&db.app, org, untrusted.id).await.unwrap();

    assert_eq!(reload(&db, org, verified.id).await.confidence, 0.6);
    let new = reload(&db, org, untrusted.id).await;
    assert!((new.confidence - 0.4).abs() < 1e-9, "the contradicted newcomer still loses confidence");
    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    let held = store::held::pending(&mut *tx, org).await.unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].action, "lower_confidence");
    assert!(held[0].reason.starts_with("trust"), "{}", held[0].reason);
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_dedup_merge_delivered_twice_leaves_exactly_one_merged_active_memory(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let a = memory(org, "The API uses port 8080").insert(&db).await;
    let b = memory(org, "The API listens on 8080 over TLS").insert(&db).await;
    let deduper = Deduper::new(Arc::new(dedup_model("merge").with_delay(Duration::from_millis(300))), None);
    let pairs = [pair(&a, &b)];
    // Two deliveries in flight at once (both read the pair before either applies), then a late third one.
    let (first, second) =
        tokio::join!(deduper.review_cluster(&db.app, org, &pairs), deduper.review_cluster(&db.app, org, &pairs));
    assert_eq!(first.unwrap() + second.unwrap(), 1, "one delivery decides the pair");
    assert_eq!(deduper.review_cluster(&db.app, org, &pairs).await.unwrap(), 0);

    let merged = "SELECT count(*) FROM memory WHERE organization_id = $1 AND source_kind = 'merge'";
    assert_eq!(count(&db, org, merged).await, 1);
    assert_eq!(count(&db, org, &format!("{merged} AND status = 'active'")).await, 1);
    assert_eq!(
        outbox_counts(&db, org).await,
        events(&[("memory.created", 1), ("memory.merged", 1), ("memory.superseded", 2)])
    );
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn synthesis_delivered_twice_leaves_one_current_profile(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let mut sources = Vec::new();
    for i in 0..5 {
        sources.push(memory(org, &format!("billing-api fact {i}")).insert(&db).await);
    }
    let entity = mention_all(&db, org, "billing-api", &sources.iter().collect::<Vec<_>>()).await;
    let llm = ScriptedLlm::new()
        .on(InvocationPurpose::MemorySynthesis, |_| Ok("billing-api: the payments service".into()))
        .with_delay(Duration::from_millis(300));
    let synthesizer = EntitySynthesizer::new(Arc::new(llm), None);
    let (first, second) = tokio::join!(
        synthesizer.synthesize_if_due(&db.app, org, entity),
        synthesizer.synthesize_if_due(&db.app, org, entity)
    );
    let written = first.unwrap().unwrap().written + second.unwrap().unwrap().written;
    assert_eq!(written, 1);
    assert_eq!(synthesizer.synthesize_if_due(&db.app, org, entity).await.unwrap().unwrap().written, 0);

    let profiles = "SELECT count(*) FROM memory WHERE organization_id = $1 AND memory_type = 'entity_profile'";
    assert_eq!(count(&db, org, profiles).await, 1);
    assert_eq!(outbox_counts(&db, org).await, events(&[("entity.synthesized", 1), ("memory.created", 1)]));
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn two_workers_racing_over_the_same_deferred_pairs_review_each_once(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let mut pairs = Vec::new();
    for i in 0..4 {
        let a = memory(org, &format!("fact {i}")).insert(&db).await;
        let b = memory(org, &format!("fact {i}, reworded")).insert(&db).await;
        pairs.push((a.id, b.id));
    }
    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    for (a, b) in &pairs {
        store::dedup::defer_pair(&mut *tx, org, *a, *b, 0.93).await.unwrap();
    }
    tx.commit().await.unwrap();

    let llm = Arc::new(dedup_model("keep_both").with_delay(Duration::from_millis(300)));
    let (one, two) = (Deduper::new(llm.clone(), None), Deduper::new(llm.clone(), None));
    let (x, y) = tokio::join!(one.review_deferred(&db.app, org), two.review_deferred(&db.app, org));
    assert_eq!(x.unwrap() + y.unwrap(), 4);
    let reviewed: usize = llm.calls().iter().map(|c| c.prompt.matches("Pair ").count()).sum();
    assert_eq!(reviewed, 4, "every pair went to the model once");
    for (a, b) in pairs {
        assert_eq!(dedup_decision(&db, org, a, b).await.0, DedupDecision::KeepBoth);
    }
    assert!(outbox_counts(&db, org).await.is_empty(), "keeping both changes nothing");
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_superseding_memory_keeps_the_taxonomy_tags_and_entity_mentions(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let a = memory(org, "The API uses port 8080").taxonomy(&["infra", "network"]).insert(&db).await;
    let b = memory(org, "The API listens on 8080 over TLS").taxonomy(&["security"]).insert(&db).await;
    let api = mention_all(&db, org, "api", &[&a]).await;
    let tls = mention_all(&db, org, "tls", &[&b]).await;
    Deduper::new(Arc::new(dedup_model("merge")), None).review_cluster(&db.app, org, &[pair(&a, &b)]).await.unwrap();
    let merged = reload(&db, org, a.id).await.superseded_by.expect("merged");

    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    let mut nodes: Vec<String> = sqlx::query_scalar(
        "SELECT n.name FROM memory_taxonomy_tag t JOIN memory_taxonomy_node n \
             ON n.organization_id = t.organization_id AND n.id = t.node_id \
         WHERE t.organization_id = $1 AND t.memory_id = $2",
    )
    .bind(org)
    .bind(merged)
    .fetch_all(&mut *tx)
    .await
    .unwrap();
    nodes.sort();
    assert_eq!(nodes, vec!["network", "security"]);
    let mut entities: Vec<Uuid> =
        sqlx::query_scalar("SELECT entity_id FROM memory_entity_mention WHERE organization_id = $1 AND memory_id = $2")
            .bind(org)
            .bind(merged)
            .fetch_all(&mut *tx)
            .await
            .unwrap();
    entities.sort();
    let mut expected = vec![api, tls];
    expected.sort();
    assert_eq!(entities, expected);
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn every_lifecycle_path_writes_exactly_its_outbox_events_and_none_for_a_no_op(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;

    // Dedup: a supersession; delivered again, nothing.
    let org = Uuid::now_v7();
    let (a, b) = (memory(org, "old wording").insert(&db).await, memory(org, "new wording").insert(&db).await);
    let deduper = Deduper::new(Arc::new(dedup_model("supersede_a")), None);
    for _ in 0..2 {
        deduper.review_cluster(&db.app, org, &[pair(&a, &b)]).await.unwrap();
        assert_eq!(outbox_counts(&db, org).await, events(&[("memory.superseded", 1)]));
    }

    // Contradiction: a weak candidate lowers the existing memory and loses confidence itself, then is promoted;
    // checked again, nothing.
    let org = Uuid::now_v7();
    let existing = memory(org, "billing-api deploys on Tuesdays")
        .embedding(vector_with_similarity(0.8, 1))
        .confidence(0.5)
        .insert(&db)
        .await;
    let new = memory(org, "billing-api deploys on Fridays")
        .embedding(axis(0))
        .confidence(0.6)
        .status(MemoryStatus::Candidate)
        .insert(&db)
        .await;
    mention_all(&db, org, "billing-api", &[&existing, &new]).await;
    let detector = ContradictionDetector::new(everything_contradicts());
    for _ in 0..2 {
        detector.check(&db.app, org, new.id).await.unwrap();
        assert_eq!(outbox_counts(&db, org).await, events(&[("memory.confidence_changed", 2), ("memory.promoted", 1)]));
    }
    // Each lowering names the memory whose contradiction caused it: the existing one by the new, the new by it.
    let because_of: Vec<(Uuid, serde_json::Value)> = sqlx::query_as(
        "SELECT (payload->>'memory_id')::uuid, payload->'because_of' FROM domain_event_outbox \
         WHERE organization_id = $1 AND event_type = 'memory.confidence_changed' ORDER BY seq",
    )
    .bind(org)
    .fetch_all(&db.admin)
    .await
    .unwrap();
    assert_eq!(
        because_of,
        vec![(existing.id, serde_json::json!([new.id])), (new.id, serde_json::json!([existing.id]))],
        "{because_of:?}"
    );
    // A candidate with nothing to contradict is promoted, and only that.
    let lone = memory(org, "search-indexer runs nightly").embedding(axis(5)).status(MemoryStatus::Candidate);
    let lone = lone.insert(&db).await;
    detector.check(&db.app, org, lone.id).await.unwrap();
    assert_eq!(outbox_counts(&db, org).await, events(&[("memory.confidence_changed", 2), ("memory.promoted", 2)]));

    // File scan: unchanged and changed files write no event, a file missing past the grace period archives.
    let org = Uuid::now_v7();
    let project = Uuid::now_v7();
    let root = std::env::temp_dir().join(format!("events-{}", Uuid::now_v7()));
    let repository = root.join(org.to_string()).join(project.to_string());
    std::fs::create_dir_all(&repository).unwrap();
    std::fs::write(repository.join("same.md"), "same").unwrap();
    std::fs::write(repository.join("changed.md"), "version 2").unwrap();
    for (path, content) in [("same.md", "same"), ("changed.md", "version 1"), ("gone.md", "gone")] {
        let mut m = memory(org, content).scope(Scope::Project).project(project);
        m.new.file_path = Some(path.into());
        m.new.content_hash = Some(memory_core::repository::blob_sha(content.as_bytes()));
        m.insert(&db).await;
    }
    let scanner = FileScanner::new(Arc::new(memory_core::repository::DirectoryReader::new(&root)));
    scanner.scan(&db.app, org).await.unwrap();
    // A changed or missing file only marks its memory; archiving after the grace period is the one state change.
    assert_eq!(outbox_counts(&db, org).await, events(&[]));
    let no_grace = FileScanner::new(Arc::new(memory_core::repository::DirectoryReader::new(&root)))
        .with_missing_grace(chrono::TimeDelta::zero());
    no_grace.scan(&db.app, org).await.unwrap();
    assert_eq!(outbox_counts(&db, org).await, events(&[("memory.archived", 1)]));
    no_grace.scan(&db.app, org).await.unwrap();
    assert_eq!(outbox_counts(&db, org).await, events(&[("memory.archived", 1)]));
    std::fs::remove_dir_all(root).unwrap();
}

mod file_reader {
    use super::*;

    #[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
    async fn a_symlink_out_of_the_repository_and_a_path_into_another_project_are_refused(
        opts: PgPoolOptions,
        conn: PgConnectOptions,
    ) {
        let db = Db::new(opts, conn).await;
        let org = Uuid::now_v7();
        let (project, other) = (Uuid::now_v7(), Uuid::now_v7());
        let root = std::env::temp_dir().join(format!("reader-{}", Uuid::now_v7()));
        let repository = root.join(org.to_string()).join(project.to_string());
        let neighbour = root.join(org.to_string()).join(other.to_string());
        std::fs::create_dir_all(&repository).unwrap();
        std::fs::create_dir_all(&neighbour).unwrap();
        std::fs::write(neighbour.join("secret.md"), "the other project's secret").unwrap();
        std::fs::write(repository.join("big.md"), "x".repeat(64)).unwrap();
        std::os::unix::fs::symlink(neighbour.join("secret.md"), repository.join("escape.md")).unwrap();
        std::os::unix::fs::symlink(format!("../{other}"), repository.join("sideways")).unwrap();

        let mut scanned = Vec::new();
        for path in ["escape.md", "sideways/secret.md", &format!("../{other}/secret.md"), "big.md"] {
            let mut m = memory(org, "what the file said").scope(Scope::Project).project(project);
            m.new.file_path = Some(path.to_string());
            m.new.content_hash = Some(memory_core::repository::blob_sha(b"what the file said"));
            scanned.push(m.insert(&db).await);
        }
        let mut projectless = memory(org, "no project");
        projectless.new.file_path = Some("README.md".into());
        scanned.push(projectless.insert(&db).await);

        let reader = memory_core::repository::DirectoryReader::new(&root).with_max_bytes(32);
        let report = FileScanner::new(Arc::new(reader)).scan(&db.app, org).await.unwrap();
        assert_eq!((report.scanned, report.failed), (5, 5));
        for m in scanned {
            let after = reload(&db, org, m.id).await;
            assert_eq!(after.status, MemoryStatus::Active, "{:?}", m.file_path);
            assert_eq!(after.content, m.content);
            assert!(after.file_last_scanned_at.is_some(), "{:?}", m.file_path);
            let error = after.file_scan_error.expect("the reason is recorded");
            assert!(error.starts_with("refused") || error.contains("outside"), "{:?}: {error}", m.file_path);
        }
        let secret = "SELECT count(*) FROM memory WHERE organization_id = $1 AND content LIKE '%secret%'";
        assert_eq!(count(&db, org, secret).await, 0);
        assert_eq!(
            count(&db, org, "SELECT count(*) FROM memory WHERE organization_id = $1 AND source_kind = 'file'").await,
            0
        );
        std::fs::remove_dir_all(root).unwrap();
    }

    #[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
    async fn an_unchanged_file_marks_its_memory_verified(opts: PgPoolOptions, conn: PgConnectOptions) {
        let db = Db::new(opts, conn).await;
        let org = Uuid::now_v7();
        let project = Uuid::now_v7();
        let root = std::env::temp_dir().join(format!("verified-{}", Uuid::now_v7()));
        let repository = root.join(org.to_string()).join(project.to_string());
        std::fs::create_dir_all(&repository).unwrap();
        std::fs::write(repository.join("deploy.md"), "Deploy with make release.").unwrap();
        let mut m = memory(org, "Deploy with make release.").scope(Scope::Project).project(project);
        m.new.file_path = Some("deploy.md".into());
        m.new.content_hash = Some(memory_core::repository::blob_sha(b"Deploy with make release."));
        let m = m.insert(&db).await;
        assert!(m.last_verified_at.is_none());
        FileScanner::new(Arc::new(memory_core::repository::DirectoryReader::new(&root)))
            .scan(&db.app, org)
            .await
            .unwrap();
        let after = reload(&db, org, m.id).await;
        assert!(after.last_verified_at.is_some() && after.last_verified_at == after.file_last_scanned_at);
        assert!(after.file_scan_error.is_none());
        std::fs::remove_dir_all(root).unwrap();
    }
}

mod statistics {
    use super::*;

    async fn corpus_rows(db: &Db, org: Uuid) -> Vec<(i16, String)> {
        sqlx::query_as("SELECT shard, xmin::text FROM memory_corpus_stats WHERE organization_id = $1 ORDER BY shard")
            .bind(org)
            .fetch_all(&db.admin)
            .await
            .unwrap()
    }

    #[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
    async fn concurrent_writers_of_one_organisation_do_not_queue_on_its_statistics(
        opts: PgPoolOptions,
        conn: PgConnectOptions,
    ) {
        let db = Db::new(opts, conn).await;
        let org = Uuid::now_v7();
        memory(org, "deploy kestrel").insert(&db).await;
        let mut first = store::begin_for_org(&db.app, org).await.unwrap();
        store::memories::insert(&mut *first, &memory(org, "deploy falcon").new).await.unwrap();
        let mut second = store::begin_for_org(&db.app, org).await.unwrap();
        sqlx::query("SET LOCAL lock_timeout = '1s'").execute(&mut *second).await.unwrap();
        store::memories::insert(&mut *second, &memory(org, "deploy osprey").new)
            .await
            .expect("the second writer does not wait for the first");
        second.commit().await.unwrap();
        first.commit().await.unwrap();

        let (docs, deploy): (i64, i64) = sqlx::query_as(
            "SELECT c.doc_count, (SELECT sum(doc_count)::bigint FROM memory_term_stats t \
                                  WHERE t.organization_id = c.organization_id AND t.lexeme = 'deploy') \
             FROM memory_corpus_totals c WHERE c.organization_id = $1",
        )
        .bind(org)
        .fetch_one(&db.admin)
        .await
        .unwrap();
        assert_eq!((docs, deploy), (3, 3));
        assert_eq!(corpus_rows(&db, org).await.len(), 2, "the second writer opened a shard of its own");
    }

    #[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
    async fn updates_that_keep_the_text_leave_the_statistics_alone(opts: PgPoolOptions, conn: PgConnectOptions) {
        let db = Db::new(opts, conn).await;
        let org = Uuid::now_v7();
        let m = memory(org, "deploy kestrel").insert(&db).await;
        let before = corpus_rows(&db, org).await;
        let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
        store::memories::record_scan(&mut *tx, org, m.id, chrono::Utc::now(), true, None).await.unwrap();
        store::transitions::archive(&mut tx, org, m.id, "test").await.unwrap();
        tx.commit().await.unwrap();
        assert_eq!(corpus_rows(&db, org).await, before);

        sqlx::query("UPDATE memory SET content = 'deploy kestrel nightly' WHERE id = $1")
            .bind(m.id)
            .execute(&db.admin)
            .await
            .unwrap();
        assert_ne!(corpus_rows(&db, org).await, before, "a new text is counted");
    }
}

mod file_baseline {
    use super::*;

    /// An ingested file-backed memory is usually a passage of its file: its first scan records the file's hash as
    /// the baseline; a later change marks the passage stale and never replaces it with the whole file.
    #[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
    async fn the_first_scan_of_an_ingested_file_memory_records_a_baseline(opts: PgPoolOptions, conn: PgConnectOptions) {
        let db = Db::new(opts, conn).await;
        let org = Uuid::now_v7();
        let project = Uuid::now_v7();
        let root = std::env::temp_dir().join(format!("baseline-{}", Uuid::now_v7()));
        let repository = root.join(org.to_string()).join(project.to_string());
        std::fs::create_dir_all(&repository).unwrap();
        std::fs::write(repository.join("release.md"), "# Releases\n\nReleases are cut on Thursdays.\n").unwrap();
        let passage = "Releases are cut on Thursdays.";
        let batch: memory_core::ingest::IngestBatch = serde_json::from_value(serde_json::json!({
            "organization_id": org, "batch_id": "b", "memories": [{
                "content": passage, "memory_type": "semantic", "scope": "project", "project_id": project,
                "file_path": "release.md",
                "provenance": {"source_kind": "file", "source_ref": "release.md", "trust_level": "unverified"}}]
        }))
        .unwrap();
        let embedder = Arc::new(integration_tests::FixedEmbedder::default().with(passage, axis(0)));
        let id = memory_core::ingest::Ingestor::new(db.app.clone(), embedder)
            .ingest(&batch, memory_core::ingest::Admission::Active)
            .await
            .unwrap()
            .memory_ids[0];

        let scanner = FileScanner::new(Arc::new(memory_core::repository::DirectoryReader::new(&root)));
        let report = scanner.scan(&db.app, org).await.unwrap();
        assert_eq!((report.unchanged, report.changed), (1, 0));
        let after = reload(&db, org, id).await;
        assert_eq!((after.status, after.content.as_str()), (MemoryStatus::Active, passage));
        assert!(after.content_hash.is_some() && after.last_verified_at.is_some());

        std::fs::write(repository.join("release.md"), "# Releases\n\nReleases are cut on Mondays.\n").unwrap();
        assert_eq!(scanner.scan(&db.app, org).await.unwrap().changed, 1);
        let after = reload(&db, org, id).await;
        assert_eq!((after.status, after.content.as_str()), (MemoryStatus::Active, passage));
        assert!(after.is_stale());
        std::fs::remove_dir_all(root).unwrap();
    }
}

/// The guarded transitions apply the rules themselves: a merge of memories with different readers, or a lowering
/// by a memory that does not reach the target's readers, is held whoever calls it, and nothing changes.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_guarded_transition_holds_what_the_rules_forbid_whoever_calls_it(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    use memory_core::{
        domain::NewMemory,
        lifecycle::guarded::{self, Decider, Outcome},
    };
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let public = memory(org, "The API listens on port 8080").insert(&db).await;
    let private = memory(org, "I keep the API token in my notes")
        .scope(Scope::AgentPrivate)
        .agent(Uuid::now_v7())
        .insert(&db)
        .await;

    let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
    let locked = store::transitions::lock(&mut tx, org, &[public.id, private.id]).await.unwrap();
    let (a, b) = (&locked[0], &locked[1]);
    let merged = NewMemory::replacing(a, "both facts in one");
    let merge = guarded::merge(&mut tx, Decider::Dedup, &merged, a, b).await.unwrap();
    assert!(matches!(&merge, Outcome::Held(why) if why.starts_with("readership")), "{merge:?}");
    let lowered =
        guarded::lower_confidence(&mut tx, Decider::Contradiction, &private, &public, 0.1, "test").await.unwrap();
    assert!(matches!(&lowered, Outcome::Held(why) if why.starts_with("readership")), "{lowered:?}");
    let superseded = guarded::supersede(&mut tx, Decider::Dedup, &private, &public, "test").await.unwrap();
    assert!(matches!(superseded, Outcome::Held(_)));
    let narrower = NewMemory::replacing(&private, "The API listens on port 8080, as my notes say");
    let succeeded =
        guarded::succeed(&mut tx, Decider::Synthesis, &narrower, &[], &public, "resynthesized").await.unwrap();
    assert!(matches!(&succeeded, Outcome::Held(why) if why.starts_with("readership")), "{succeeded:?}");
    tx.commit().await.unwrap();

    assert_eq!(count(&db, org, "SELECT count(*) FROM memory WHERE organization_id = $1").await, 2, "nothing created");
    let after = reload(&db, org, public.id).await;
    assert_eq!((after.status, after.confidence), (MemoryStatus::Active, public.confidence));
    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    let held = store::held::pending(&mut *tx, org).await.unwrap();
    let actions: Vec<&str> = held.iter().map(|h| h.action.as_str()).collect();
    assert_eq!(actions, vec!["merge", "lower_confidence", "supersede", "succeed"]);
}

/// A new version (a profile rewritten, a chunk re-read from its changed file) replaces its predecessor whatever the
/// two's trust: it is as trusted as what it was made from now, and holding it back would keep serving a version made
/// from sources since gone.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_new_version_with_its_predecessors_readers_replaces_it_whatever_its_trust(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    use memory_core::{
        domain::{NewMemory, TrustLevel},
        lifecycle::guarded::{self, Decider, Outcome},
    };
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let verified =
        memory(org, "billing-api deploys with the blue-green script").trust(TrustLevel::Verified).insert(&db).await;

    let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
    let previous = store::transitions::lock(&mut tx, org, &[verified.id]).await.unwrap().pop().unwrap();
    let mut next = NewMemory::replacing(&previous, "billing-api deploys with the canary script");
    next.provenance.trust_level = TrustLevel::Untrusted;
    let outcome =
        guarded::succeed(&mut tx, Decider::FileScan, &next, &[previous.id], &previous, "file_changed").await.unwrap();
    tx.commit().await.unwrap();
    let Outcome::Applied(created) = outcome else { panic!("held: {outcome:?}") };
    let after = reload(&db, org, verified.id).await;
    assert_eq!((after.status, after.superseded_by), (MemoryStatus::Superseded, Some(created.id)));
}

/// A merge hands the deferred pairs of its sources to the merged memory and queues their review: a pair whose
/// source was superseded could never be reviewed.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_merge_hands_its_sources_deferred_pairs_to_the_merged_memory(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let a = memory(org, "The API listens on port 8080").insert(&db).await;
    let b = memory(org, "API port: 8080").insert(&db).await;
    let c = memory(org, "The API port is 8080 in staging").insert(&db).await;
    let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
    store::dedup::defer_pair(&mut *tx, org, a.id, c.id, 0.9).await.unwrap();
    tx.commit().await.unwrap();

    Deduper::new(Arc::new(dedup_model("merge")), None).review_cluster(&db.app, org, &[pair(&a, &b)]).await.unwrap();

    let merged = reload(&db, org, a.id).await.superseded_by.expect("a was merged");
    let (first, second) = if merged < c.id { (merged, c.id) } else { (c.id, merged) };
    let (decision, _) = dedup_decision(&db, org, first, second).await;
    assert_eq!(decision, DedupDecision::Deferred, "the merged memory took over a's pair with c");
    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    let unsent = store::jobs::unsent_counts(&mut *tx, org).await.unwrap();
    assert_eq!(unsent, vec![("memory_dedup_review".to_string(), 1)], "its review is queued");
}

/// A merge claims no more confidence than its trust allows, even from sources stored above it (rows written before
/// the write gate capped confidence): two unverified memories at 0.95 merge into an unverified one at 0.85.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_merges_confidence_is_capped_by_its_trust(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let a = memory(org, "The API uses port 8080").trust(TrustLevel::Unverified).confidence(0.95).insert(&db).await;
    let b = memory(org, "The API listens on 8080").trust(TrustLevel::Unverified).confidence(0.95).insert(&db).await;
    Deduper::new(Arc::new(dedup_model("merge")), None).review_cluster(&db.app, org, &[pair(&a, &b)]).await.unwrap();
    let merged = reload(&db, org, reload(&db, org, a.id).await.superseded_by.expect("merged")).await;
    assert_eq!(merged.provenance.trust_level, TrustLevel::Unverified);
    assert!(merged.confidence <= 0.85, "an unverified merge claims {}", merged.confidence);
}
