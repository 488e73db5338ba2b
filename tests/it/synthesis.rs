//! When entity profiles are written: the mention that makes one due queues its synthesis (from the sweep and from
//! promotions at once too), and a popular entity is synthesised from a bounded set of its most confident sources.

use std::sync::Arc;

use integration_tests::{Db, axis, lock_waiters, memory, mention_all};
use memory_core::{
    domain::MemoryStatus,
    lifecycle::{sweep, synthesis::EntitySynthesizer},
    llm::{InvocationPurpose, ScriptedLlm},
    store,
};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use uuid::Uuid;

/// Organisations per scheduled run, as deployed: more than any test has.
const ALL: i64 = memory_core::outbox::DEFAULT_SWEEP_ORGANIZATIONS;

/// Three active mentions and two candidates of billing-api, each candidate with axis `10 + i`.
async fn three_active_two_candidates(db: &Db, org: Uuid) -> (Vec<memory_core::domain::Memory>, Uuid) {
    // Written as ingestion writes them, with their `memory.created` events (which make the organisation known to
    // the sweep).
    let mut memories = Vec::new();
    let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
    for i in 0..5 {
        let mut fixture = memory(org, &format!("billing-api fact {i}")).embedding(axis(10 + i));
        if i >= 3 {
            fixture.new.status = MemoryStatus::Candidate;
        }
        memories.push(store::transitions::create(&mut tx, &fixture.new, &[]).await.unwrap());
    }
    tx.commit().await.unwrap();
    let entity = mention_all(db, org, "billing-api", &memories.iter().collect::<Vec<_>>()).await;
    (memories, entity)
}

async fn syntheses_queued(db: &Db, org: Uuid) -> i64 {
    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    let unsent = store::jobs::unsent_counts(&mut *tx, org).await.unwrap();
    unsent.into_iter().find(|(job, _)| job == "memory_entity_synthesis").map_or(0, |(_, n)| n)
}

/// The sweep's promotion counts as the check's would: the one that makes five active mentions queues a synthesis.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn the_sweep_promoting_the_fifth_mention_queues_its_synthesis(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    three_active_two_candidates(&db, org).await;
    assert_eq!(sweep::run(&db.app, chrono::TimeDelta::zero(), ALL).await.unwrap().promoted_unchecked, 2);
    assert_eq!(syntheses_queued(&db, org).await, 1);
}

/// Two promotions of one entity's mentions at once: the second waits for the first's lock on the entity, counts
/// five active mentions and queues the synthesis (neither counts four and misses it).
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn promotions_at_once_queue_the_synthesis_their_mentions_make_due(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let (memories, _) = three_active_two_candidates(&db, org).await;
    let (fourth, fifth) = (memories[3].id, memories[4].id);
    // A check promoting the fourth, not committed yet.
    let mut first = store::begin_for_org(&db.app, org).await.unwrap();
    store::transitions::promote(&mut first, org, fourth).await.unwrap();
    memory_core::due::queue_due_syntheses(&mut first, org, &[fourth]).await.unwrap();
    let commit_first = async {
        let waiting = lock_waiters(&db, 1).await;
        assert_eq!(waiting, 1, "the second promotion waits for the entity");
        first.commit().await.unwrap();
    };
    let second = async {
        let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
        store::transitions::promote(&mut tx, org, fifth).await.unwrap();
        memory_core::due::queue_due_syntheses(&mut tx, org, &[fifth]).await.unwrap();
        tx.commit().await.unwrap();
    };
    tokio::join!(commit_first, second);
    assert_eq!(syntheses_queued(&db, org).await, 1);
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_popular_entity_is_synthesised_from_its_most_confident_sources_only(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let mut sources = Vec::new();
    for i in 0..300 {
        let confident = i % 10 == 0;
        let text =
            if confident { format!("billing-api fact {i} (confident)") } else { format!("billing-api fact {i}") };
        sources.push(memory(org, &text).confidence(if confident { 0.9 } else { 0.5 }).insert(&db).await);
    }
    let entity = mention_all(&db, org, "billing-api", &sources.iter().collect::<Vec<_>>()).await;
    let model = Arc::new(
        ScriptedLlm::new().on(InvocationPurpose::MemorySynthesis, |_| Ok("billing-api: the payments service.".into())),
    );

    let synthesis = EntitySynthesizer::new(model.clone(), None).synthesize_profile(&db.app, org, entity).await.unwrap();

    assert_eq!(synthesis.written, 1);
    let calls = model.calls();
    assert_eq!(calls.len(), 1);
    let quoted = calls[0].prompt.matches("<memory>").count();
    assert_eq!(quoted, memory_core::lifecycle::synthesis::SOURCES_PER_PROFILE);
    assert_eq!(calls[0].prompt.matches("(confident)").count(), 30, "the most confident first");
}
