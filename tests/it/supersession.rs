//! Supersession chains: resolving to the current memory, and the audit chain.

use integration_tests::{Db, memory};
use memory_core::{
    domain::{Memory, MemoryStatus},
    retrieval::supersession,
    store,
};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use uuid::Uuid;

/// A chain of `links + 1` memories, each superseded by the next.
async fn chain(db: &Db, org: Uuid, links: usize) -> Vec<Memory> {
    let mut memories = Vec::new();
    for i in 0..=links {
        memories.push(memory(org, &format!("version {i}")).insert(db).await);
    }
    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    for pair in memories.windows(2) {
        store::transitions::supersede(&mut tx, org, pair[0].id, pair[1].id, "test").await.unwrap();
    }
    tx.commit().await.unwrap();
    memories
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn resolve_follows_a_to_b_to_c(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let abc = chain(&db, org, 2).await;
    let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
    let current = supersession::resolve(&mut tx, org, abc[0].id).await.unwrap();
    assert_eq!(current.id, abc[2].id);
    assert_eq!(current.status, MemoryStatus::Active);
    let a = store::memories::get(&mut *tx, org, abc[0].id).await.unwrap().unwrap();
    assert_eq!((a.status, a.superseded_by), (MemoryStatus::Superseded, Some(abc[1].id)));
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_chain_of_eleven_links_exceeds_the_hop_limit(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let long = chain(&db, org, 11).await;
    let limit = chain(&db, org, 10).await;
    let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
    assert!(supersession::resolve(&mut tx, org, long[0].id).await.is_err());
    assert_eq!(supersession::resolve(&mut tx, org, limit[0].id).await.unwrap().id, limit[10].id);
}
