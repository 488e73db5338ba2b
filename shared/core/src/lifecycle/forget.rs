//! Forgetting (`memory-admin forget`, `memory_forget` on the ingest queue): the memories a selector matches, and
//! every memory derived from them (the merges that replaced them, every profile of the entities they mention),
//! become tombstones in bounded passes of one transaction each, so a large selection is forgotten in steps and an
//! interrupted run goes on where it stopped; running it again changes nothing. Each forgotten memory writes
//! `memory.forgotten` (its id only); the sources of a forgotten merge that are not forgotten are reinstated, and the
//! entities that remain are queued for synthesis. After each pass the keyword index keeps no row of a word no memory
//! holds (the postings of words others hold leave their packed lists at the next packing).
//!
//! A request from the queue runs within a time budget; what is left continues in a follow-up job
//! ([`forget_requested`], [`forget_continued`]).

use std::time::{Duration, Instant};

use sqlx::PgPool;
use uuid::Uuid;

pub use crate::store::forget::{ForgetSelector, Forgetting};
use crate::{
    jobs::{EntitySynthesisJob, JobType},
    store::{self, outbox, transitions},
};

/// Memories one pass takes at most (with what was derived from them).
pub const PER_PASS: i64 = 100;
/// How long one delivery of a forget request forgets by default (the ingest function has 60 s, and its batch's
/// other messages and the outbox flush come after).
pub const DELIVERY_BUDGET: Duration = Duration::from_secs(20);
/// How long the keyword index's cleanup waits for other transactions.
const TIDY_WAIT: Duration = Duration::from_secs(5);

/// One pass: up to [`PER_PASS`] matching memories and their derived ones forgotten; returns how many (0: done).
pub async fn forget_pass(pool: &PgPool, organization_id: Uuid, what: &Forgetting) -> crate::Result<usize> {
    let mut tx = store::begin_for_org(pool, organization_id).await?;
    let mut ids =
        store::forget::matching(&mut tx, organization_id, &what.selector, what.sender.as_deref(), PER_PASS).await?;
    let mut frontier = ids.clone();
    // What was made from what is forgotten, and from that, and so on.
    while !frontier.is_empty() {
        let derived: Vec<Uuid> = store::forget::derived_from(&mut tx, organization_id, &frontier)
            .await?
            .into_iter()
            .filter(|id| !ids.contains(id))
            .collect();
        ids.extend(&derived);
        frontier = derived;
    }
    let erased = store::forget::erase(&mut tx, organization_id, &ids).await?;
    for id in &ids {
        outbox::append(&mut *tx, organization_id, "memory.forgotten", serde_json::json!({ "memory_id": id })).await?;
    }
    // A merge forgotten: the sources it replaced that are not forgotten are current again.
    for source in store::forget::sources_of_merges(&mut tx, organization_id, &ids).await? {
        transitions::reinstate(&mut tx, organization_id, source, "merge_forgotten").await?;
    }
    // The entities that remain lost their profiles: synthesis writes them again from what remains, when due.
    for entity in erased.entities {
        let job = serde_json::to_value(EntitySynthesisJob::new(organization_id, entity)).expect("a job serialises");
        store::jobs::enqueue(&mut *tx, organization_id, JobType::MemoryEntitySynthesis, job).await?;
    }
    tx.commit().await?;
    // The words only the forgotten memories held leave the keyword index now.
    if !store::keyword::drop_unheld(pool, organization_id, &erased.lexemes, TIDY_WAIT).await? {
        tracing::warn!(%organization_id, "keyword rows of forgotten words kept: other transactions held them");
    }
    Ok(ids.len())
}

/// After the passes: forgetting a project or the organisation deletes the list of files its imports left out.
pub async fn tidy(pool: &PgPool, organization_id: Uuid, selector: &ForgetSelector) -> crate::Result<()> {
    let project = match selector {
        ForgetSelector::Project(project) => Some(Some(*project)),
        ForgetSelector::Organization => Some(None),
        _ => None,
    };
    if let Some(project) = project {
        let mut tx = store::begin_for_org(pool, organization_id).await?;
        store::skipped::forget(&mut *tx, organization_id, project).await?;
        tx.commit().await?;
    }
    Ok(())
}

/// How far a forget request got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub forgotten: usize,
    /// Nothing it matches is left.
    pub done: bool,
}

/// Passes until nothing matches or `budget` is spent (at least one; a pass started within it may end after it),
/// then the tidying if done.
pub async fn forget_within(
    pool: &PgPool,
    organization_id: Uuid,
    what: &Forgetting,
    budget: Duration,
) -> crate::Result<Progress> {
    let started = Instant::now();
    let mut forgotten = 0;
    loop {
        let pass = forget_pass(pool, organization_id, what).await?;
        if pass == 0 {
            tidy(pool, organization_id, &what.selector).await?;
            return Ok(Progress { forgotten, done: true });
        }
        forgotten += pass;
        if started.elapsed() >= budget {
            return Ok(Progress { forgotten, done: false });
        }
    }
}

/// Everything the selector matches, however long it takes; returns how many memories were forgotten.
pub async fn forget(pool: &PgPool, organization_id: Uuid, selector: &ForgetSelector) -> crate::Result<usize> {
    let progress = forget_within(pool, organization_id, &Forgetting::all(selector.clone()), Duration::MAX).await?;
    Ok(progress.forgotten)
}

/// A request from the queue: forgets within `budget`; what is left is recorded and continued by a follow-up job
/// on the ingest queue (sent by the outbox relay), which names the record only.
pub async fn forget_requested(
    pool: &PgPool,
    organization_id: Uuid,
    what: &Forgetting,
    budget: Duration,
) -> crate::Result<Progress> {
    let progress = forget_within(pool, organization_id, what, budget).await?;
    if !progress.done {
        let mut tx = store::begin_for_org(pool, organization_id).await?;
        let id = store::forget::save_request(&mut *tx, organization_id, what).await?;
        follow_up(&mut tx, organization_id, id).await?;
        tx.commit().await?;
    }
    Ok(progress)
}

/// A follow-up job: continues the recorded request within `budget` (nothing when it is gone: done before), and
/// sends the next follow-up while something is left.
pub async fn forget_continued(
    pool: &PgPool,
    organization_id: Uuid,
    request_id: Uuid,
    budget: Duration,
) -> crate::Result<Progress> {
    let mut tx = store::begin_for_org(pool, organization_id).await?;
    let what = store::forget::request(&mut *tx, organization_id, request_id).await?;
    tx.commit().await?;
    let Some(what) = what else {
        return Ok(Progress { forgotten: 0, done: true });
    };
    let progress = forget_within(pool, organization_id, &what, budget).await?;
    let mut tx = store::begin_for_org(pool, organization_id).await?;
    if progress.done {
        store::forget::delete_request(&mut *tx, organization_id, request_id).await?;
    } else {
        follow_up(&mut tx, organization_id, request_id).await?;
    }
    tx.commit().await?;
    Ok(progress)
}

async fn follow_up(conn: &mut sqlx::PgConnection, organization_id: Uuid, request_id: Uuid) -> crate::Result<()> {
    let body = serde_json::to_value(memory_model::ingest::ForgetRequest::continuing(organization_id, request_id))
        .expect("a request serialises");
    store::jobs::enqueue(conn, organization_id, JobType::MemoryIngest, body).await?;
    Ok(())
}
