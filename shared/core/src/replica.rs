//! A read replica, and whether reads may go to it now. Retrieval reads a whole request from one place: the replica
//! while it answers and has replayed what the writer had written [`Replica::max_lag`] ago, else the writer.
//!
//! Lag is measured against the writer, not by the replica's own clock (a standby whose stream stopped has nothing
//! left to replay and looks current): each probe (at most one per [`Replica::probe_interval`], by whichever request finds the
//! last one too old) reads the writer's WAL position, then the replica's replayed position. The replica serves when
//! it has replayed the oldest writer position seen within the last `max_lag` (the writer's position now, when no
//! earlier probe is that recent): at least what the writer had written `max_lag` ago. An Aurora reader, which replays no WAL stream of its own, is
//! judged by `aurora_replica_status()`'s lag instead. A replica that fails a probe or a request is left until the
//! next probe.

use std::{
    collections::VecDeque,
    sync::Mutex,
    time::{Duration, Instant},
};

use sqlx::PgPool;

/// How long a probe may take before the replica counts as unreachable.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// The default bound on replay lag (`MEMORY_READER_MAX_LAG_MS`).
pub const DEFAULT_MAX_LAG: Duration = Duration::from_secs(1);

pub struct Replica {
    pool: PgPool,
    max_lag: Duration,
    state: Mutex<State>,
    /// Held by the request probing, so that one probes at a time.
    probing: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct State {
    /// When the last probe ended, and whether the replica was usable then.
    checked: Option<(Instant, bool)>,
    /// The writer's WAL positions the probes saw in the last `max_lag`, oldest first, each with when it was asked.
    written: VecDeque<(Instant, i64)>,
}

/// Where a request reads.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReadFrom {
    #[default]
    Writer,
    Replica,
}

impl Replica {
    pub fn new(pool: PgPool, max_lag: Duration) -> Self {
        Self { pool, max_lag, state: Mutex::default(), probing: tokio::sync::Mutex::new(()) }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub fn max_lag(&self) -> Duration {
        self.max_lag
    }

    /// How often the replica's state is probed, at most: a quarter of the bound (between 50 ms and 1 s), so a
    /// writer position asked just inside the bound is at hand.
    pub fn probe_interval(max_lag: Duration) -> Duration {
        (max_lag / 4).clamp(Duration::from_millis(50), Duration::from_secs(1))
    }

    /// Whether reads may go to the replica: the last probe's answer, or a new probe's when that one is older
    /// than [`Replica::probe_interval`] and no other request is probing.
    pub async fn usable(&self, writer: &PgPool) -> bool {
        let last = self.lock().checked;
        if let Some((at, usable)) = last
            && at.elapsed() < Self::probe_interval(self.max_lag)
        {
            return usable;
        }
        let Ok(_probing) = self.probing.try_lock() else {
            // Another request is probing: its predecessor's answer holds a little longer.
            return last.is_some_and(|(at, usable)| usable && at.elapsed() < 2 * Self::probe_interval(self.max_lag));
        };
        let usable = matches!(tokio::time::timeout(PROBE_TIMEOUT, self.probe(writer)).await, Ok(Ok(true)));
        if !usable {
            tracing::warn!(max_lag_ms = self.max_lag.as_millis() as u64, "the read replica is unreachable or behind");
        }
        self.lock().checked = Some((Instant::now(), usable));
        usable
    }

    /// A request on the replica failed: the writer serves until the next probe.
    pub fn failed(&self) {
        self.lock().checked = Some((Instant::now(), false));
    }

    /// Whether the replica has replayed what the writer had written `max_lag` ago.
    async fn probe(&self, writer: &PgPool) -> sqlx::Result<bool> {
        let at = Instant::now(); // before asking: the writer had written at least this much by then
        let written: i64 =
            sqlx::query_scalar("SELECT (pg_current_wal_lsn() - '0/0')::bigint").fetch_one(writer).await?;
        let (recovering, replayed): (bool, Option<i64>) =
            sqlx::query_as("SELECT pg_is_in_recovery(), (pg_last_wal_replay_lsn() - '0/0')::bigint")
                .fetch_one(&self.pool)
                .await?;
        let due = {
            let mut state = self.lock();
            state.written.push_back((at, written));
            while state.written.front().is_some_and(|(t, _)| t.elapsed() > self.max_lag) {
                state.written.pop_front();
            }
            // The oldest position asked within the bound is at least what the writer had written at its start.
            state.written.front().map_or(written, |&(_, position)| position)
        };
        match (recovering, replayed) {
            (false, _) => Ok(true), // not a standby: the reader endpoint answers from the writer itself
            (true, Some(replayed)) => Ok(replayed >= due),
            (true, None) => {
                let lag_ms: Option<f64> = sqlx::query_scalar(
                    "SELECT replica_lag_in_msec::float8 FROM aurora_replica_status() \
                     WHERE server_id = aurora_db_instance_identifier()",
                )
                .fetch_optional(&self.pool)
                .await?
                .flatten();
                Ok(lag_ms.is_some_and(|ms| ms <= self.max_lag.as_secs_f64() * 1000.0))
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}
