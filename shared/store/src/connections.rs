//! Handing out connections: a connection is checked with a round trip before use only when it may have gone while
//! idle, and a transaction that finds its connection gone at `BEGIN` begins again on another.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime},
};

use sqlx::{Connection, PgPool, Postgres, Transaction, pool::PoolConnection, postgres::PgPoolOptions};

/// A connection is checked before it is handed out when it has been idle this long, or when no idle connection has
/// been handed out for this long by the wall clock (a warm Lambda frozen between invocations, during which the
/// monotonic clock that measures idleness may stand still). sqlx pings each connection as it is released, and a
/// request checks out several (its context, each branch): checking at every checkout as well would cost a round trip
/// each, on AWS a network one.
const CHECK_AFTER_IDLE: Duration = Duration::from_secs(1);

/// Pool options that check a connection before handing it out as [`CHECK_AFTER_IDLE`] says; one that does not
/// answer is closed and replaced.
pub fn pool_options() -> PgPoolOptions {
    pool_options_checking_after(CHECK_AFTER_IDLE)
}

/// [`pool_options`] with another bound on idleness (tests).
pub fn pool_options_checking_after(idle: Duration) -> PgPoolOptions {
    let checkouts = Arc::new(Checkouts { after: idle, last: Mutex::default() });
    PgPoolOptions::new().test_before_acquire(false).before_acquire(move |conn, meta| {
        let check = checkouts.must_check(meta.idle_for, || (SystemTime::now(), Instant::now()));
        Box::pin(async move {
            if check {
                conn.ping().await?;
            }
            Ok(true)
        })
    })
}

/// Begins a transaction with `statement` (`BEGIN; ...`, which only sets settings), [`again_if_lost`].
pub(crate) async fn begin(pool: &PgPool, statement: String) -> sqlx::Result<Transaction<'static, Postgres>> {
    again_if_lost(pool, |conn| Transaction::begin(conn, Some(statement.clone().into()))).await
}

/// Runs `run`, a statement that may run twice (a read, or a `BEGIN`), on a connection of `pool`; while the
/// connection it was handed unchecked turns out gone, on another (the gone one is closed as it is released): at
/// most once more for each connection the pool may hold. A failure to get a connection is not retried.
pub(crate) async fn again_if_lost<T, Fut>(
    pool: &PgPool,
    run: impl Fn(PoolConnection<Postgres>) -> Fut,
) -> sqlx::Result<T>
where
    Fut: Future<Output = sqlx::Result<T>>,
{
    let mut again = pool.options().get_max_connections();
    loop {
        match run(pool.acquire().await?).await {
            Err(e) if again > 0 && connection_lost(&e) => {
                tracing::warn!(error = %e, "a pooled connection was gone; running again on another");
                again -= 1;
            }
            ran => return ran,
        }
    }
}

/// Whether `error` says the connection it ran on is gone: the socket broke, or the backend ended or is ending
/// (SQLSTATE 08, 57P).
pub fn connection_lost(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|c| c.starts_with("08") || c.starts_with("57P")),
        _ => false,
    }
}

/// A pool's checkouts of idle connections: one is checked when idle `after`, or released before the first checkout
/// after the latest pause of `after` by the wall clock. (sqlx's idle reaper, every `idle_timeout`, also marks the
/// connections it keeps as just released, unchecked: [`again_if_lost`] covers one gone since.)
struct Checkouts {
    after: Duration,
    /// The last checkout by the wall clock, and the monotonic instant of the first checkout after the latest pause.
    last: Mutex<Option<(SystemTime, Instant)>>,
}

impl Checkouts {
    /// Whether a connection idle `idle_for` is checked before this checkout, made when `clocks` says (read under the
    /// lock, so that checkouts are seen in order).
    fn must_check(&self, idle_for: Duration, clocks: impl FnOnce() -> (SystemTime, Instant)) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let (wall, now) = clocks();
        let since = match *last {
            Some((at, since)) if wall.duration_since(at).is_ok_and(|gap| gap < self.after) => since,
            _ => now, // the first checkout, one after a pause, or the wall clock went back
        };
        *last = Some((wall, since));
        idle_for >= self.after || now.checked_sub(idle_for).is_none_or(|released| released <= since)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_connection_is_checked_after_its_own_idleness_or_a_pause_not_between_busy_checkouts() {
        let checkouts = Checkouts { after: CHECK_AFTER_IDLE, last: Mutex::default() };
        let (wall, now) = (SystemTime::now(), Instant::now());
        let at = |ms: u32| (wall + ms * MS, now + ms * MS);
        assert!(checkouts.must_check(MS, || (wall, now)), "the first checkout checks what the pool holds");
        // Busy, a checkout every 100 ms: a connection released 50 ms ago is not checked, one idle a second is.
        let (w, n) = at(100);
        assert!(!checkouts.must_check(50 * MS, || (w, n)));
        let (w, n) = at(200);
        assert!(checkouts.must_check(CHECK_AFTER_IDLE, || (w, n)));
        // Frozen for a minute, the monotonic clock standing still: the wall clock's gap makes every connection
        // released before the thaw checked, though each looks idle for 10 ms...
        let thawed = wall + Duration::from_secs(60);
        assert!(checkouts.must_check(10 * MS, || (thawed, now + 210 * MS)));
        assert!(checkouts.must_check(15 * MS, || (thawed + MS, now + 211 * MS)));
        // ...and one released after the thaw's first checkout is not.
        assert!(!checkouts.must_check(MS, || (thawed + 5 * MS, now + 215 * MS)));
        // The wall clock set back: checked.
        assert!(checkouts.must_check(MS, || (wall, now + 216 * MS)));
    }
}
