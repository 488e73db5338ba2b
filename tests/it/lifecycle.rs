//! LLM dedup and entity synthesis with the deterministic scripted model.

use std::sync::Arc;

use integration_tests::{Db, memory};
use memory_core::{
    domain::{DedupDecision, MemoryStatus, MemoryType, Scope},
    lifecycle::{
        dedup::{DedupPair, Deduper},
        synthesis::EntitySynthesizer,
    },
    llm::{InvocationPurpose, ScriptedLlm},
    store,
};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use uuid::Uuid;

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_supersede_a_decision_supersedes_memory_a_by_b(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let a = memory(org, "Deploys happen on Tuesdays").insert(&db).await;
    let b = memory(org, "Deploys happen on Tuesdays and Thursdays").insert(&db).await;
    let llm =
        Arc::new(ScriptedLlm::new().on(InvocationPurpose::MemoryDedup, |_| {
            Ok(r#"{"decisions":[{"pair":0,"decision":"supersede_a"}]}"#.into())
        }));
    Deduper::new(llm, None).review_cluster(&db.app, org, &[DedupPair { a: a.id, b: b.id }]).await.unwrap();

    let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
    let a_now = store::memories::get(&mut *tx, org, a.id).await.unwrap().unwrap();
    let b_now = store::memories::get(&mut *tx, org, b.id).await.unwrap().unwrap();
    assert_eq!((a_now.status, a_now.superseded_by), (MemoryStatus::Superseded, Some(b.id)));
    assert!(a_now.superseded_at.is_some());
    assert_eq!(b_now.status, MemoryStatus::Active);
    let (first, second) = if a.id < b.id { (a.id, b.id) } else { (b.id, a.id) };
    let expected = if a.id < b.id { DedupDecision::SupersedeA } else { DedupDecision::SupersedeB };
    assert_eq!(store::dedup::decision(&mut *tx, org, first, second).await.unwrap(), Some(expected));
    let events: i64 =
        sqlx::query_scalar("SELECT count(*) FROM domain_event_outbox WHERE event_type = 'memory.superseded'")
            .fetch_one(&mut *tx)
            .await
            .unwrap();
    assert_eq!(events, 1);
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn merge_and_keep_both_decisions_are_applied(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let a = memory(org, "The API uses port 8080").insert(&db).await;
    let b = memory(org, "The API listens on 8080 over TLS").insert(&db).await;
    let c = memory(org, "Lunch is at noon").insert(&db).await;
    let d = memory(org, "Lunch is served at twelve").insert(&db).await;
    let llm = Arc::new(
        ScriptedLlm::new()
            .on(InvocationPurpose::MemoryDedup, |_| {
                Ok(r#"{"decisions":[{"pair":0,"decision":"merge"},{"pair":1,"decision":"keep_both"}]}"#.into())
            })
            .on(InvocationPurpose::MemoryMerge, |_| Ok("The API listens on port 8080 over TLS".into())),
    );
    let pairs = [DedupPair { a: a.id, b: b.id }, DedupPair { a: c.id, b: d.id }];
    Deduper::new(llm, None).review_cluster(&db.app, org, &pairs).await.unwrap();

    let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
    let a_now = store::memories::get(&mut *tx, org, a.id).await.unwrap().unwrap();
    let merged = store::memories::get(&mut *tx, org, a_now.superseded_by.unwrap()).await.unwrap().unwrap();
    assert_eq!(merged.content, "The API listens on port 8080 over TLS");
    assert_eq!(store::memories::get(&mut *tx, org, b.id).await.unwrap().unwrap().superseded_by, Some(merged.id));
    assert_eq!(store::memories::get(&mut *tx, org, c.id).await.unwrap().unwrap().status, MemoryStatus::Active);
    assert_eq!(store::memories::get(&mut *tx, org, d.id).await.unwrap().unwrap().status, MemoryStatus::Active);
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn an_unusable_model_answer_changes_nothing(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let a = memory(org, "x").insert(&db).await;
    let b = memory(org, "y").insert(&db).await;
    let llm = Arc::new(ScriptedLlm::new().on(InvocationPurpose::MemoryDedup, |_| Ok("I am not sure.".into())));
    assert!(Deduper::new(llm, None).review_cluster(&db.app, org, &[DedupPair { a: a.id, b: b.id }]).await.is_err());
    let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
    assert_eq!(store::memories::get(&mut *tx, org, a.id).await.unwrap().unwrap().status, MemoryStatus::Active);
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn five_mentions_trigger_an_entity_profile_linked_from_the_entity(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let project = Uuid::now_v7();
    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    let entity = store::entities::upsert(&mut *tx, org, "service", "billing-api").await.unwrap();
    tx.commit().await.unwrap();
    let llm = Arc::new(ScriptedLlm::new().on(InvocationPurpose::MemorySynthesis, |req| {
        assert!(req.prompt.contains("billing-api"));
        Ok("billing-api: the payments service; deploy on Tuesdays.".into())
    }));
    let synthesizer = EntitySynthesizer::new(llm, None);

    for i in 0..5 {
        assert!(synthesizer.synthesize_if_due(&db.app, org, entity).await.unwrap().is_none(), "{i} mentions");
        let mut m = memory(org, &format!("billing-api fact {i}"));
        if i == 2 {
            m = m.scope(Scope::Project).project(project);
        }
        let m = m.insert(&db).await;
        let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
        store::entities::add_mention(&mut *tx, org, entity, m.id).await.unwrap();
        tx.commit().await.unwrap();
    }
    let profile = synthesizer.synthesize_if_due(&db.app, org, entity).await.unwrap().expect("synthesised at 5");
    assert_eq!(profile.profile.memory_type, MemoryType::EntityProfile);
    assert_eq!(profile.profile.scope, Scope::Project);
    assert_eq!(profile.profile.project_id, Some(project));

    let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
    let stored = store::entities::get(&mut *tx, org, entity).await.unwrap().unwrap();
    tx.commit().await.unwrap();
    assert_eq!(stored.synthesis_memory_id, Some(profile.profile.id));
    assert_eq!(synthesizer.get_profile(&db.app, org, entity).await.unwrap().unwrap().id, profile.profile.id);

    // A second synthesis supersedes the first profile.
    let again = synthesizer.synthesize_profile(&db.app, org, entity).await.unwrap();
    let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
    let first = store::memories::get(&mut *tx, org, profile.profile.id).await.unwrap().unwrap();
    assert_eq!(first.superseded_by, Some(again.profile.id));
}
