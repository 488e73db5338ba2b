//! Stage 1's candidates kept under the organisation's generation: the same request again takes them, and every
//! kind of write that changes what retrieval reads (an ingest through the workers' path, a transition, a change of
//! confidence, a forget, a taxonomy tag, an entity mention) makes the next answer come from the database. Nothing
//! kept crosses organisations or readers, outlives a candidate's expiry, or escapes the passive cooldown.

use std::sync::Arc;

use chrono::Utc;
use integration_tests::{Db, FixedEmbedder, agent_with_scopes, axis, memory, retriever};
use memory_core::{
    domain::{MemoryType, Scope, SourceKind, TrustLevel},
    ingest::{Admission, IngestBatch, IngestMemory, IngestProvenance, Ingestor, VERSION},
    lifecycle::forget::{ForgetSelector, forget},
    retrieval::{RetrievalMode, RetrievalRequest, Retriever, SessionTurn},
    store::{self, transitions},
};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use uuid::Uuid;

const PROBE: &str = "when does billing deploy";

fn embedder() -> Arc<FixedEmbedder> {
    let mut fixed = FixedEmbedder::default().with(PROBE, axis(0));
    for text in ["billing deploys after the freeze", "billing deploys on Fridays now"] {
        fixed = fixed.with(text, axis(0));
    }
    Arc::new(fixed)
}

/// The answer's ids, most relevant first, and whether Stage 1's candidates were the kept ones.
async fn asked(r: &Retriever, request: RetrievalRequest) -> (Vec<Uuid>, bool) {
    let (result, timings) = r.query_timed(request).await.unwrap();
    (result.memories.iter().rev().map(|m| m.memory.id).collect(), timings.stage1_kept)
}

fn agent_query(org: Uuid) -> RetrievalRequest {
    RetrievalRequest::new(org, RetrievalMode::AgentQuery, PROBE)
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn the_same_request_takes_the_kept_candidates_until_a_write_changes_the_organisation(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let (org, other) = (Uuid::now_v7(), Uuid::now_v7());
    let tuesday = memory(org, "billing deploys on Tuesdays").embedding(axis(0)).insert(&db).await;
    let r = retriever(&db, embedder(), None);
    assert_eq!(asked(&r, agent_query(org)).await, (vec![tuesday.id], false));
    assert_eq!(asked(&r, agent_query(org)).await, (vec![tuesday.id], true), "asked again: kept");
    memory(other, "billing deploys on Mondays").embedding(axis(0)).insert(&db).await;
    assert!(asked(&r, agent_query(org)).await.1, "another organisation's write changes nothing here");
    let mut longer = agent_query(org);
    longer.max_results = 3;
    assert!(asked(&r, longer).await.1, "what only the later stages read is not part of the key");

    // An ingest through the workers' path.
    let batch = IngestBatch {
        job_type: None,
        version: VERSION,
        organization_id: org,
        batch_id: "found-cache-1".into(),
        memories: vec![IngestMemory::new(
            "billing deploys after the freeze",
            MemoryType::Semantic,
            IngestProvenance::new(SourceKind::Run, "test", TrustLevel::Unverified),
        )],
    };
    let ingested = Ingestor::new(db.app.clone(), embedder()).ingest(&batch, Admission::Active).await.unwrap();
    let freeze = ingested.memory_ids[0];
    let (ids, kept) = asked(&r, agent_query(org)).await;
    assert!(!kept && ids.contains(&freeze), "the ingested memory is found: {ids:?}");
    assert!(asked(&r, agent_query(org)).await.1);

    // A transition.
    let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
    transitions::archive(&mut tx, org, freeze, "test").await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(asked(&r, agent_query(org)).await, (vec![tuesday.id], false), "the archived memory is gone");
    assert!(asked(&r, agent_query(org)).await.1);

    // A change of confidence: the same memories, asked again of the database.
    let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
    transitions::change_confidence(&mut tx, org, tuesday.id, 0.8, 0.4, "test", &[]).await.unwrap();
    tx.commit().await.unwrap();
    assert!(!asked(&r, agent_query(org)).await.1, "confidence changed");

    // A taxonomy tag and an entity mention, which the taxonomy filter and the profiles read.
    assert!(asked(&r, agent_query(org)).await.1);
    let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
    let node = store::taxonomy::upsert_node(&mut *tx, org, None, "deploys").await.unwrap();
    tx.commit().await.unwrap();
    assert!(!asked(&r, agent_query(org)).await.1, "a taxonomy node");
    assert!(asked(&r, agent_query(org)).await.1);
    let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
    store::taxonomy::tag(&mut *tx, org, tuesday.id, node).await.unwrap();
    tx.commit().await.unwrap();
    assert!(!asked(&r, agent_query(org)).await.1, "tagged");
    assert!(asked(&r, agent_query(org)).await.1);
    let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
    let entity = store::entities::upsert(&mut *tx, org, "service", "billing").await.unwrap();
    store::entities::add_mention(&mut *tx, org, entity, tuesday.id).await.unwrap();
    tx.commit().await.unwrap();
    assert!(!asked(&r, agent_query(org)).await.1, "mentioned");

    // The organisation's own ANN index: its vector branch turns approximate.
    assert!(asked(&r, agent_query(org)).await.1);
    let changes = store::ann::reconcile(&db.admin, 1).await.unwrap();
    assert!(changes.created.contains(&org));
    assert!(!asked(&r, agent_query(org)).await.1, "an index of its own");

    // A forget.
    assert!(asked(&r, agent_query(org)).await.1);
    assert_eq!(forget(&db.app, org, &ForgetSelector::Memories(vec![tuesday.id])).await.unwrap(), 1);
    assert_eq!(asked(&r, agent_query(org)).await, (vec![], false), "the forgotten memory is never an answer");
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn kept_candidates_are_one_readerships_and_not_kept_past_an_expiry(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let (everyone, own) =
        (agent_with_scopes(&db, org, &[]).await, agent_with_scopes(&db, org, &[Scope::AgentPrivate]).await);
    let shared = memory(org, "billing deploys on Tuesdays").embedding(axis(0)).insert(&db).await;
    let private = memory(org, "billing deploys on Fridays now")
        .embedding(axis(0))
        .scope(Scope::AgentPrivate)
        .agent(own)
        .insert(&db)
        .await;
    let r = retriever(&db, embedder(), None);
    let as_agent = |agent: Uuid| RetrievalRequest { agent_id: Some(agent), ..agent_query(org) };
    assert_eq!(asked(&r, as_agent(everyone)).await, (vec![shared.id], false));
    assert_eq!(asked(&r, as_agent(everyone)).await, (vec![shared.id], true));
    let (ids, kept) = asked(&r, as_agent(own)).await;
    assert!(!kept && ids.contains(&private.id), "another readership asks the branches: {ids:?}");
    assert_eq!(asked(&r, as_agent(everyone)).await, (vec![shared.id], true), "and never sees the other's");

    // A candidate that expires: its set is not kept past that time, when the branches leave it out.
    let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
    let soon = Utc::now() + chrono::Duration::milliseconds(1500);
    sqlx::query("UPDATE memory SET expires_at = $2 WHERE id = $1")
        .bind(shared.id)
        .bind(soon)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(asked(&r, as_agent(everyone)).await, (vec![shared.id], false));
    assert_eq!(asked(&r, as_agent(everyone)).await, (vec![shared.id], true));
    tokio::time::sleep((soon - Utc::now()).to_std().unwrap_or_default() + std::time::Duration::from_millis(50)).await;
    assert_eq!(asked(&r, as_agent(everyone)).await, (vec![], false), "expired, and no write told the generation");
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn the_passive_cooldown_withholds_from_kept_candidates(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let tuesday = memory(org, "billing deploys on Tuesdays").embedding(axis(0)).insert(&db).await;
    let r = retriever(&db, embedder(), None);
    let passive = |turn| RetrievalRequest {
        session: Some(SessionTurn { session_id: "s".into(), turn }),
        ..RetrievalRequest::new(org, RetrievalMode::Passive, PROBE)
    };
    assert_eq!(asked(&r, passive(1)).await, (vec![tuesday.id], false));
    assert_eq!(asked(&r, passive(2)).await, (vec![], true), "kept, and still cooling down");

    // A conversation whose latest turn the model fails to embed is searched with the whole conversation's vector
    // alone: what that finds is not kept for the requests whose embeddings succeed.
    let conversation = format!("{} billing deploys\nand when is that", "we talked about the release train ".repeat(8));
    let fixed = FixedEmbedder::default().with(&conversation, axis(0));
    let r = retriever(&db, Arc::new(fixed), None);
    let passive = |turn| RetrievalRequest {
        session: Some(SessionTurn { session_id: "t".into(), turn }),
        ..RetrievalRequest::new(org, RetrievalMode::Passive, &conversation)
    };
    assert_eq!(asked(&r, passive(1)).await, (vec![tuesday.id], false));
    assert!(!asked(&r, passive(2)).await.1, "not kept");
}
