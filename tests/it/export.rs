//! Export and import: an organisation exported and ingested elsewhere answers alike, a curated import restores
//! only the supersessions the rules allow, and an export hands over batches while it reads.

use std::sync::Arc;

use integration_tests::{Db, memory};
use memory_core::{domain::MemoryStatus, store};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use uuid::Uuid;

/// An organisation exported as ingest messages and ingested into an empty one answers the same queries with the
/// same memories, and carries provenance, times, taxonomy and entities over.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn an_exported_organisation_ingested_elsewhere_answers_alike(opts: PgPoolOptions, conn: PgConnectOptions) {
    use memory_core::{
        ingest::{Admission, IngestBatch, Ingestor},
        retrieval::{RetrievalMode, RetrievalRequest, SearchRequest, Strategy},
    };
    let db = Db::new(opts, conn).await;
    let (from, to, project) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    let embedder = integration_tests::minilm();
    let ingestor = Ingestor::new(db.app.clone(), embedder.clone());
    let sha = memory_core::repository::blob_sha(b"deploy: make release\n");
    let message: IngestBatch = serde_json::from_value(serde_json::json!({"organization_id": from, "batch_id": "b",
        "memories": [
            {"content": "billing-api deploys on Tuesdays through the release pipeline", "memory_type": "procedural",
             "scope": "org", "created_at": "2026-05-04T10:00:00Z", "tags": ["deploy"], "labels": {"team": "payments"},
             "taxonomy": ["workflow/deploy"], "entities": [{"name": "billing-api", "kind": "service"}],
             "provenance": {"source_kind": "human", "source_ref": "alice", "trust_level": "verified"}},
            {"content": "Error E4021 from auth-service means the refresh token expired", "memory_type": "semantic",
             "scope": "project", "project_id": project, "context": "from the auth-service runbook",
             "entities": [{"name": "auth-service", "kind": "service"}],
             "provenance": {"source_kind": "conversation_turn", "source_ref": "run-7/turn-3", "trust_level": "unverified"}},
            {"content": "deploy: make release", "memory_type": "semantic", "scope": "project", "project_id": project,
             "file_path": "Makefile", "repository": "billing-api",
             "provenance": {"source_kind": "file", "source_ref": "billing-api@HEAD:Makefile", "git_blob_sha": sha,
                            "trust_level": "verified"}},
            {"content": "billing-api deploys on Mondays", "memory_type": "semantic", "scope": "org",
             "provenance": {"source_kind": "human", "source_ref": "bob", "trust_level": "verified"}}]}))
    .unwrap();
    let ids = ingestor.ingest(&message, Admission::Active).await.unwrap().memory_ids;
    let mut tx = store::begin_for_org(&db.admin, from).await.unwrap();
    store::transitions::supersede(&mut tx, from, ids[3], ids[0], "test").await.unwrap();
    tx.commit().await.unwrap();

    // A memory the service made itself (a merge), with a label that is not a string.
    let mut merged = memory(from, "billing-api and auth-service share the release pipeline").embedding(
        memory_core::embed::Embedder::embed_one(
            embedder.as_ref(),
            "billing-api and auth-service share the release pipeline",
        )
        .await
        .unwrap(),
    );
    merged.new.provenance.source_kind = memory_core::domain::SourceKind::Merge;
    merged.new.labels = serde_json::json!({"sources": 2});
    merged.insert(&db).await;

    let batches = integration_tests::exported(&db.app, from, to).await;
    assert_eq!(batches.iter().map(|b| b.memories.len()).sum::<usize>(), 5, "the active memories and the history");
    assert!(batches.iter().all(|b| b.organization_id == to));
    let mut receipts = Vec::new();
    for batch in &batches {
        receipts.push(ingestor.ingest(batch, Admission::Active).await.unwrap());
    }
    let restore = memory_core::ingest::export::restore_history;
    assert_eq!(restore(&db.app, to, &batches, &receipts).await.unwrap(), 1, "the superseded memory, superseded again");
    assert_eq!(restore(&db.app, to, &batches, &receipts).await.unwrap(), 0, "once");
    // The same chain, in both organisations.
    let chain_of = async |org: Uuid| -> Vec<(String, MemoryStatus)> {
        let sql = "SELECT id FROM memory WHERE organization_id = $1 AND content = 'billing-api deploys on Mondays'";
        let old: Uuid = sqlx::query_scalar(sql).bind(org).fetch_one(&db.admin).await.unwrap();
        let chain =
            integration_tests::shipped_retriever(&db, embedder.clone()).supersession_chain(org, None, old).await;
        chain.unwrap().into_iter().map(|m| (m.content, m.status)).collect()
    };
    let chain = chain_of(from).await;
    assert_eq!(chain.len(), 2);
    assert_eq!(chain, chain_of(to).await);
    // A producer may not send history over the queue.
    let refused = ingestor.ingest_delivered(&batches[0], None).await.unwrap_err();
    assert!(refused.to_string().contains("curated import"), "{refused}");

    let retriever = integration_tests::shipped_retriever(&db, embedder);
    for query in ["when does billing-api deploy", "what does E4021 mean", "make release", "shared release pipeline"] {
        let answer = async |org: Uuid| -> (Vec<String>, Vec<String>) {
            let mut ask = RetrievalRequest::new(org, RetrievalMode::AgentQuery, query);
            ask.project_id = Some(project);
            let memories = retriever.query(ask).await.unwrap().memories;
            let search = SearchRequest {
                project_id: Some(project),
                max_results: 10,
                ..SearchRequest::new(org, Strategy::Hybrid, query)
            };
            let hits = retriever.search(search).await.unwrap().hits;
            (
                memories.into_iter().map(|m| m.memory.content).collect(),
                hits.into_iter().map(|h| h.memory.content).collect(),
            )
        };
        let (here, there) = (answer(from).await, answer(to).await);
        assert!(!here.0.is_empty(), "{query}");
        assert_eq!(here, there, "{query}");
    }
    let copied = integration_tests::exported(&db.app, to, to).await;
    let without_ids = |batches: &[IngestBatch]| -> Vec<_> {
        let mut memories: Vec<_> = batches.iter().flat_map(|b| b.memories.clone()).collect();
        for m in &mut memories {
            m.history =
                m.history.take().map(|h| memory_core::ingest::History { id: Uuid::nil(), superseded_by: None, ..h });
        }
        memories
    };
    let (a, b) = (without_ids(&batches), without_ids(&copied));
    assert_eq!(a, b, "provenance, times, taxonomy, entities, files and statuses survive the round trip");
    assert_eq!(a[0].taxonomy, ["workflow/deploy"]);
    assert_eq!(a[2].provenance.git_blob_sha.as_deref(), Some(sha.as_str()));
    assert_eq!(a[2].provenance.source_ref, "billing-api@HEAD:Makefile");
    let made = a.iter().find(|m| m.content.contains("share the release")).unwrap();
    assert_eq!(made.provenance.source_kind, memory_core::domain::SourceKind::Import);
    assert!(made.provenance.source_ref.starts_with("merge:"));
    assert_eq!(made.labels.get("sources").map(String::as_str), Some("2"));
}

/// A text superseded and later stated again is exported twice (its history and its current memory); the import
/// stores the text once, and that copy stays current: the old memory's history does not supersede it.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_text_superseded_and_stated_again_stays_current_after_an_import(opts: PgPoolOptions, conn: PgConnectOptions) {
    use memory_core::ingest::{Admission, IngestBatch, Ingestor, export};
    let db = Db::new(opts, conn).await;
    let (from, to) = (Uuid::now_v7(), Uuid::now_v7());
    let (mondays, tuesdays) = ("billing-api deploys on Mondays", "billing-api deploys on Tuesdays");
    let embedder = integration_tests::FixedEmbedder::default()
        .with(mondays, integration_tests::axis(0))
        .with(tuesdays, integration_tests::axis(1));
    let ingestor = Ingestor::new(db.app.clone(), Arc::new(embedder));
    let state = async |org: Uuid, batch_id: &str, content: &str| -> Uuid {
        let message: IngestBatch = serde_json::from_value(serde_json::json!({"organization_id": org,
            "batch_id": batch_id, "memories": [{"content": content, "memory_type": "semantic", "scope": "org",
            "provenance": {"source_kind": "human", "source_ref": "alice", "trust_level": "verified"}}]}))
        .unwrap();
        ingestor.ingest(&message, Admission::Active).await.unwrap().memory_ids[0]
    };
    let first = state(from, "b1", mondays).await;
    let second = state(from, "b2", tuesdays).await;
    let mut tx = store::begin_for_org(&db.admin, from).await.unwrap();
    store::transitions::supersede(&mut tx, from, first, second, "test").await.unwrap();
    tx.commit().await.unwrap();
    let again = state(from, "b3", mondays).await;
    assert_ne!(again, first, "stated again: a memory of its own");

    let batches = integration_tests::exported(&db.app, from, to).await;
    let mut receipts = Vec::new();
    for batch in &batches {
        receipts.push(ingestor.ingest(batch, Admission::Active).await.unwrap());
    }
    export::restore_history(&db.app, to, &batches, &receipts).await.unwrap();
    let current: Vec<String> = sqlx::query_scalar(
        "SELECT content FROM memory WHERE organization_id = $1 AND status = 'active' ORDER BY content",
    )
    .bind(to)
    .fetch_all(&db.admin)
    .await
    .unwrap();
    assert_eq!(current, [mondays, tuesdays], "what is current where it came from is current here");
}

/// Export streams: the first batch reaches the writer while the export's statement is still sending the rest (32 MB
/// of memories, more than the socket buffers hold), so an organisation is never held in memory whole.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn an_export_hands_over_its_first_batch_while_the_rest_is_still_being_read(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn.clone()).await;
    let org = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO memory (organization_id, id, scope, memory_type, content) \
         SELECT $1, gen_random_uuid(), 'org', 'semantic', repeat('ledger' || i || ' ', 400) \
         FROM generate_series(1, 8000) i",
    )
    .bind(org)
    .execute(&db.admin)
    .await
    .unwrap();
    // The writer looks from another connection (on a thread of its own: it runs inside the export's loop).
    let (mut batches, mut exported, mut seen) = (0, 0, None);
    let written = memory_core::ingest::export::export(&db.app, org, org, |batch| {
        batches += 1;
        exported += batch.memories.len();
        if seen.is_none() {
            let conn = conn.clone();
            seen = std::thread::spawn(move || {
                tokio::runtime::Runtime::new().unwrap().block_on(async move {
                    let mut observer = sqlx::ConnectOptions::connect(&conn).await.unwrap();
                    sqlx::query_scalar::<_, String>(
                        "SELECT state FROM pg_stat_activity WHERE query LIKE 'WITH RECURSIVE paths%' \
                         AND pid <> pg_backend_pid()",
                    )
                    .fetch_optional(&mut observer)
                    .await
                    .unwrap()
                })
            })
            .join()
            .unwrap();
        }
        Ok(())
    })
    .await
    .unwrap();
    assert_eq!((written, exported, batches), (8000, 8000, 80));
    assert_eq!(seen.as_deref(), Some("active"), "the statement still sends when the first batch is written");
}

/// A curated import restores history through the guarded transition: an export file whose history has an agent's
/// private memory superseding an org-wide one (which no lifecycle job could have done) leaves the org-wide copy
/// current and holds the supersession for review.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_curated_import_restores_only_the_supersessions_the_rules_allow(opts: PgPoolOptions, conn: PgConnectOptions) {
    use memory_core::ingest::{Admission, IngestBatch, Ingestor, export};
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let (org_wide, private) = ("billing-api deploys on Mondays", "billing-api deploys on Tuesdays");
    let embedder = integration_tests::FixedEmbedder::default()
        .with(org_wide, integration_tests::axis(0))
        .with(private, integration_tests::axis(1));
    let ingestor = Ingestor::new(db.app.clone(), Arc::new(embedder));
    let (old_id, new_id, agent) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    let provenance = serde_json::json!({"source_kind": "human", "source_ref": "alice", "trust_level": "verified"});
    let crafted: IngestBatch =
        serde_json::from_value(serde_json::json!({"organization_id": org, "batch_id": "export:1",
        "memories": [
            {"content": private, "memory_type": "semantic", "scope": "agent_private", "agent_id": agent,
             "provenance": provenance, "history": {"id": new_id, "status": "active"}},
            {"content": org_wide, "memory_type": "semantic", "scope": "org", "provenance": provenance,
             "history": {"id": old_id, "status": "superseded", "superseded_by": new_id}}]}))
        .unwrap();
    let receipt = ingestor.ingest(&crafted, Admission::Active).await.unwrap();
    let restored = export::restore_history(&db.app, org, &[crafted], &[receipt]).await.unwrap();
    assert_eq!(restored, 0);
    let statuses: Vec<(String, String)> =
        sqlx::query_as("SELECT content, status FROM memory WHERE organization_id = $1 ORDER BY content")
            .bind(org)
            .fetch_all(&db.admin)
            .await
            .unwrap();
    assert_eq!(statuses, [(org_wide.into(), "active".into()), (private.into(), "active".into())]);
    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    let held = store::held::pending(&mut *tx, org).await.unwrap();
    assert_eq!(held.len(), 1, "held for review: {held:?}");
    assert_eq!((held[0].job.as_str(), held[0].action.as_str()), ("import", "supersede"));
}
