//! Each organisation's fair share of a process: at most `concurrency` of its requests run at once; the next wait
//! their turn, in order, up to `wait`, and are then refused with 429 and `Retry-After`. One tenant's flood then
//! holds at most twice that many of the database pool's connections (a request's two branches run at once) and
//! never the others' turn. A Lambda instance serves one request at a time, so this binds only the plain server
//! (docs/deployment.md, sharing between tenants).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    extract::{Request, State},
    middleware::Next,
    response::{IntoResponse, Response},
};
use tokio::sync::Semaphore;
use uuid::Uuid;

use crate::{AppState, auth::Principal, error::ApiError};

/// Requests one organisation runs at once on a process, and how long the next waits for a turn.
pub struct FairShare {
    concurrency: usize,
    wait: Duration,
    running: Mutex<HashMap<Uuid, Arc<Semaphore>>>,
}

/// How long a request waits for its organisation's turn by default.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(2);

impl FairShare {
    pub fn new(concurrency: usize, wait: Duration) -> Self {
        let concurrency = concurrency.clamp(1, Semaphore::MAX_PERMITS);
        Self { concurrency, wait, running: Mutex::default() }
    }

    /// The default: half the process's cores and a quarter of the pool's connections for one organisation (a
    /// request holds up to two, its branches running at once), at least one; [`DEFAULT_WAIT`]. More would not
    /// answer it sooner, only the others later.
    pub fn of_pool(pool: &memory_core::db::PgPool) -> Self {
        Self::new(default_concurrency(pool), DEFAULT_WAIT)
    }

    /// [`of_pool`](Self::of_pool), with `MEMORY_ORG_CONCURRENCY` and `MEMORY_ORG_WAIT_MS` where set.
    pub fn from_env(pool: &memory_core::db::PgPool) -> Result<Self, memory_core::config::ConfigError> {
        let concurrency = memory_core::config::parsed_or("MEMORY_ORG_CONCURRENCY", default_concurrency(pool))?;
        let wait = memory_core::config::parsed_or("MEMORY_ORG_WAIT_MS", DEFAULT_WAIT.as_millis() as u64)?;
        Ok(Self::new(concurrency, Duration::from_millis(wait)))
    }

    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// A turn for the organisation, or `None` when none came within the wait.
    async fn turn(self: &Arc<Self>, organization_id: Uuid) -> Option<Turn> {
        let semaphore = {
            let mut running = self.running.lock().expect("not poisoned");
            running.entry(organization_id).or_insert_with(|| Arc::new(Semaphore::new(self.concurrency))).clone()
        };
        // The turn exists before its wait, so a wait that ends early (timed out, or its request dropped) forgets
        // the organisation on its way out as a turn that ran does; the wait borrows the turn's semaphore.
        let mut turn = Turn { share: self.clone(), organization_id, semaphore: Some(semaphore), running: false };
        let semaphore = turn.semaphore.as_deref().expect("held until the turn ends");
        if let Ok(Ok(permit)) = tokio::time::timeout(self.wait, semaphore.acquire()).await {
            permit.forget(); // given back when the turn ends
            turn.running = true;
        }
        turn.running.then_some(turn)
    }
}

fn default_concurrency(pool: &memory_core::db::PgPool) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    (cores / 2).min(pool.options().get_max_connections() as usize / 4)
}

/// An organisation's request, running or waiting; the last one out forgets the organisation.
struct Turn {
    share: Arc<FairShare>,
    organization_id: Uuid,
    semaphore: Option<Arc<Semaphore>>,
    /// Whether it holds one of the semaphore's permits.
    running: bool,
}

impl Drop for Turn {
    fn drop(&mut self) {
        if let Some(semaphore) = self.semaphore.take()
            && self.running
        {
            semaphore.add_permits(1);
        }
        let mut running = self.share.running.lock().expect("not poisoned");
        // Only the map holds it: nothing runs or waits for the organisation.
        if running.get(&self.organization_id).is_some_and(|s| Arc::strong_count(s) == 1) {
            running.remove(&self.organization_id);
        }
    }
}

/// Authenticates the request once (the handlers take the principal, or why there is none, from it) and runs it in
/// its organisation's turn. A request without valid credentials goes on as it came: its handler answers it (401,
/// or a public route).
pub async fn share(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let principal = match state.auth.principal(&parts).await {
        Ok(principal) => principal,
        Err(refused) => {
            parts.extensions.insert(Refused(Arc::new(Mutex::new(Some(refused)))));
            return next.run(Request::from_parts(parts, body)).await;
        }
    };
    let Some(_turn) = state.fair.turn(principal.organization_id).await else {
        return ApiError::TooManyRequests(format!(
            "the organisation has {} requests running on this instance; retry",
            state.fair.concurrency()
        ))
        .into_response();
    };
    parts.extensions.insert(principal);
    next.run(Request::from_parts(parts, body)).await
}

/// Why [`share`] found no principal; taken by the first extractor that asks.
#[derive(Clone)]
struct Refused(Arc<Mutex<Option<ApiError>>>);

/// What [`share`] made of the request's credentials: the principal, or why there is none; `None` for a request it
/// did not see, or whose refusal was already taken.
pub(crate) fn authenticated(parts: &axum::http::request::Parts) -> Option<Result<Principal, ApiError>> {
    if let Some(principal) = parts.extensions.get::<Principal>() {
        return Some(Ok(principal.clone()));
    }
    let refused = parts.extensions.get::<Refused>()?;
    refused.0.lock().expect("not poisoned").take().map(Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_turn_is_per_organisation_and_the_last_one_out_forgets_it() {
        let share = Arc::new(FairShare::new(1, Duration::from_millis(50)));
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let first = share.turn(a).await.expect("a turn");
        assert!(share.turn(a).await.is_none(), "a's one turn is taken");
        let other = share.turn(b).await.expect("b has its own");
        assert_eq!(share.running.lock().unwrap().len(), 2);
        drop((first, other));
        assert!(share.running.lock().unwrap().is_empty(), "nothing kept for organisations at rest");
        assert!(share.turn(a).await.is_some());
    }

    #[test]
    fn a_refusal_is_handed_to_the_first_extractor_that_asks() {
        let (mut parts, _) = axum::http::Request::new(()).into_parts();
        assert!(authenticated(&parts).is_none(), "a request the share did not see");
        let refused = ApiError::unauthorized("no bearer token");
        parts.extensions.insert(Refused(Arc::new(Mutex::new(Some(refused)))));
        assert!(matches!(authenticated(&parts), Some(Err(ApiError::Unauthorized(m))) if m == "no bearer token"));
        assert!(authenticated(&parts).is_none(), "taken once; a second extractor authenticates itself");
    }

    #[tokio::test]
    async fn a_request_dropped_while_it_waits_leaves_nothing_behind() {
        let share = Arc::new(FairShare::new(1, Duration::from_secs(60)));
        let a = Uuid::now_v7();
        let first = share.turn(a).await.expect("a turn");
        let mut waiting = Box::pin(share.turn(a));
        assert!(tokio::time::timeout(Duration::from_millis(20), &mut waiting).await.is_err(), "it waits");
        // The running request ends, handing its turn to the waiting one, whose client has gone away meanwhile.
        drop(first);
        drop(waiting);
        assert!(share.running.lock().unwrap().is_empty(), "nothing kept for organisations at rest");
    }
}
