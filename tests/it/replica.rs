//! Reads on a read replica: the local stack's streaming standby (`MEMORY_PG_REPLICA=1`, which `make test` sets),
//! made with `pg_basebackup` from the test server, so each test database is on it too. Retrieval reads there while
//! it keeps up, and from the writer when it falls behind (its replay paused), does not hold a memory read by id yet,
//! fails a request, or cannot be reached.

use std::{sync::Arc, time::Duration};

use integration_tests::{Db, FixedEmbedder, axis, memory, retriever};
use memory_core::{
    replica::{ReadFrom, Replica},
    retrieval::{RetrievalMode, RetrievalRequest, Retriever},
};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use uuid::Uuid;

const PROBE: &str = "when does billing deploy";

fn replica_port() -> u16 {
    std::env::var("MEMORY_PG_REPLICA_PORT")
        .expect("MEMORY_PG_REPLICA_PORT: the stack's standby (run through `make test`)")
        .parse()
        .unwrap()
}

/// The ids answered, and where they were read.
async fn asked(r: &Retriever, org: Uuid) -> (Vec<Uuid>, ReadFrom) {
    let request = RetrievalRequest::new(org, RetrievalMode::AgentQuery, PROBE);
    let (result, timings) = r.query_timed(request).await.unwrap();
    (result.memories.iter().map(|m| m.memory.id).collect(), timings.read_from)
}

/// Waits (up to a minute: the standby replays every test database's writes) until `check` holds.
async fn eventually<F: AsyncFn() -> bool>(what: &str, check: F) {
    for _ in 0..600 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("not within a minute: {what}");
}

async fn on_replica(replica: &PgPool, id: Uuid) -> bool {
    // The service's role reads under RLS: the owner's session on the standby looks without it.
    sqlx::query_scalar::<_, bool>("SELECT EXISTS (SELECT 1 FROM memory WHERE id = $1)")
        .bind(id)
        .fetch_one(replica)
        .await
        .unwrap_or(false)
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn reads_go_to_the_replica_while_it_keeps_up_and_to_the_writer_otherwise(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let standby = conn.clone().port(replica_port());
    let db = Db::new(opts, conn).await;
    let owner_on_standby = PgPoolOptions::new().max_connections(2).connect_lazy_with(standby.clone());
    let app_on_standby =
        PgPoolOptions::new().max_connections(4).connect_lazy_with(standby.clone().username("memory_app").password(""));
    let control = PgPoolOptions::new().max_connections(1).connect_lazy_with(standby.clone().database("postgres"));
    // A run stopped while replay was paused left it so.
    sqlx::query("SELECT pg_wal_replay_resume()").execute(&control).await.unwrap();
    let org = Uuid::now_v7();
    let embedder = Arc::new(FixedEmbedder::default().with(PROBE, axis(0)));
    let tuesday = memory(org, "billing deploys on Tuesdays").embedding(axis(0)).insert(&db).await;
    eventually("the standby holds the first memory", async || on_replica(&owner_on_standby, tuesday.id).await).await;

    let lag = Duration::from_millis(500);
    let r = retriever(&db, embedder.clone(), None).with_replica(Replica::new(app_on_standby.clone(), lag));
    // The standby replays every test's writes: once it keeps up, it serves.
    eventually("the replica serves", async || asked(&r, org).await == (vec![tuesday.id], ReadFrom::Replica)).await;

    // Its replay paused, a memory written now is on the writer only.
    sqlx::query("SELECT pg_wal_replay_pause()").execute(&control).await.unwrap();
    let thursday = memory(org, "billing deploys on Thursdays").embedding(axis(0)).insert(&db).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!on_replica(&owner_on_standby, thursday.id).await, "the standby has not replayed it");
    let by_id = r.memory(org, None, thursday.id).await.expect("read by id, the writer answers what the replica lacks");
    assert_eq!(by_id.id, thursday.id);

    // Once it is further behind than the bound, requests read from the writer: probes sample the writer's position
    // once a second, so a lag is seen within the bound and two probes.
    let written = std::time::Instant::now();
    let within = lag + 2 * Replica::probe_interval(lag) + Duration::from_millis(500);
    loop {
        let (ids, from) = asked(&r, org).await;
        if from == ReadFrom::Writer {
            assert!(ids.contains(&thursday.id), "the writer's answer has the new memory: {ids:?}");
            break;
        }
        assert!(!ids.contains(&thursday.id), "the replica's answer is the replica's");
        assert!(written.elapsed() < within, "still reading a replica {lag:?} behind after {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Replay resumed, it catches up and serves again.
    sqlx::query("SELECT pg_wal_replay_resume()").execute(&control).await.unwrap();
    eventually("the standby replays the second memory", async || on_replica(&owner_on_standby, thursday.id).await)
        .await;
    eventually("the replica serves again", async || asked(&r, org).await.1 == ReadFrom::Replica).await;
    assert!(asked(&r, org).await.0.contains(&thursday.id));

    // A replica that fails a request: the request is answered from the writer.
    app_on_standby.close().await;
    let (ids, from) = asked(&r, org).await;
    assert_eq!(from, ReadFrom::Writer);
    assert_eq!(ids.len(), 2, "{ids:?}");

    // A replica that cannot be reached: every request answers from the writer.
    let gone = PgPoolOptions::new()
        .acquire_timeout(Duration::from_millis(300))
        .connect_lazy_with(standby.port(9).username("memory_app"));
    let r = retriever(&db, embedder, None).with_replica(Replica::new(gone, lag));
    for _ in 0..3 {
        let (ids, from) = asked(&r, org).await;
        assert_eq!((ids.len(), from), (2, ReadFrom::Writer));
    }
    assert_eq!(r.memory(org, None, tuesday.id).await.unwrap().id, tuesday.id);
}
