//! The outbox relay: publishes the domain events that state changes wrote to `domain_event_outbox` to an event
//! bus, behind the [`EventSink`] trait (the functions plug in EventBridge), and sends the follow-up jobs written to
//! `memory_job_outbox` to their queues, behind [`JobSink`] (SQS).
//!
//! Events are claimed ten at a time with `FOR UPDATE SKIP LOCKED`, so two relays never send the same row in the
//! normal case; a row is marked published only once the bus accepted it, and entries the bus refused are retried,
//! then left for the next flush. Each event carries its outbox id, so a consumer drops the rare duplicate (a relay
//! that dies between the bus's answer and its commit sends again).

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use async_trait::async_trait;
use sqlx::PgPool;
use uuid::Uuid;

use crate::{
    jobs::{JobType, QueuedJob},
    store::{self, outbox::OutboxEvent, turns::Sweep},
};

/// Events per claim and per publish call (EventBridge's PutEvents limit).
pub const BATCH: i64 = 10;
/// Publish attempts per batch for entries the bus refused.
const ATTEMPTS: usize = 2;
/// Organisations one sweep visits at most (`MEMORY_SWEEP_ORGANIZATIONS`); the next sweep takes the next ones.
pub const DEFAULT_SWEEP_ORGANIZATIONS: i64 = 100;
/// How long one sweep relays, and how long it gives one organisation: a backlog (a large import or forget, a bus
/// that was down) is relayed over several sweeps, within the scheduler's 300 s, without starving the others.
pub const SWEEP_BUDGET: Duration = Duration::from_secs(120);
pub const SWEEP_ORGANIZATION_BUDGET: Duration = Duration::from_secs(20);
/// Rows (events, and jobs apart) one sweep visit relays at most, however fast the bus: a visit's length does not
/// grow with a backlog.
pub const SWEEP_ORGANIZATION_ROWS: usize = 20_000;

/// How much one flush may relay: it claims no more once its deadline has passed or it has relayed `rows` of a kind.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub deadline: Option<Instant>,
    pub rows: usize,
}

impl Budget {
    /// No bound: until the outbox is empty.
    pub const UNBOUNDED: Self = Self { deadline: None, rows: usize::MAX };

    /// At most `rows` of each kind, for at most `time` from now.
    pub fn new(time: Duration, rows: usize) -> Self {
        Self { deadline: Some(Instant::now() + time), rows }
    }

    fn spent(&self, relayed: usize) -> bool {
        relayed >= self.rows || self.deadline.is_some_and(|d| Instant::now() > d)
    }
}

/// Where events go.
#[async_trait]
pub trait EventSink: Send + Sync {
    /// Publishes the events; returns, for each in order, whether the bus accepted it. An error means none was.
    async fn publish(&self, events: &[OutboxEvent]) -> anyhow::Result<Vec<bool>>;
}

/// Where jobs go.
#[async_trait]
pub trait JobSink: Send + Sync {
    /// The job types this sink has a queue for (the relay leaves the others to one that has).
    fn job_types(&self) -> Vec<JobType>;

    /// Sends the jobs to their queues; returns, for each in order, whether its queue took it. An error means none
    /// was taken.
    async fn send(&self, jobs: &[QueuedJob]) -> anyhow::Result<Vec<bool>>;
}

/// What a sweep over every organisation did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub published: usize,
    /// Organisations whose events could not (all) be published; they wait for the next run.
    pub failed_organizations: usize,
    /// Organisations whose backlog outlasted their budget; the next sweep visits them first.
    pub unfinished_organizations: usize,
}

/// What one flush relayed, and whether it left nothing behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Flushed {
    relayed: usize,
    done: bool,
}

#[derive(Clone)]
pub struct OutboxRelay {
    pool: PgPool,
    sink: Arc<dyn EventSink>,
    jobs: Option<Arc<dyn JobSink>>,
    sweep_organizations: i64,
    sweep_budget: (Duration, Duration, usize),
}

impl OutboxRelay {
    pub fn new(pool: PgPool, sink: Arc<dyn EventSink>) -> Self {
        Self {
            pool,
            sink,
            jobs: None,
            sweep_organizations: DEFAULT_SWEEP_ORGANIZATIONS,
            sweep_budget: (SWEEP_BUDGET, SWEEP_ORGANIZATION_BUDGET, SWEEP_ORGANIZATION_ROWS),
        }
    }

    /// How long a sweep relays, and how long and how many rows it gives one organisation (defaults
    /// [`SWEEP_BUDGET`], [`SWEEP_ORGANIZATION_BUDGET`], [`SWEEP_ORGANIZATION_ROWS`]).
    pub fn with_sweep_budget(mut self, sweep: Duration, organization: Duration, rows: usize) -> Self {
        self.sweep_budget = (sweep, organization, rows);
        self
    }

    /// Visits at most this many organisations per sweep.
    pub fn with_sweep_organizations(mut self, organizations: i64) -> Self {
        self.sweep_organizations = organizations.max(1);
        self
    }

    /// Organisations one scheduled sweep visits at most (the lifecycle sweep and the prune take as many).
    pub fn sweep_organizations(&self) -> i64 {
        self.sweep_organizations
    }

    /// Also sends the job outbox to `jobs`.
    pub fn with_jobs(mut self, jobs: Arc<dyn JobSink>) -> Self {
        self.jobs = Some(jobs);
        self
    }

    /// Sends the organisation's unsent jobs, then publishes its events; returns how many of both went out.
    pub async fn flush(&self, organization_id: Uuid) -> crate::Result<usize> {
        Ok(self.flush_budgeted(organization_id, Budget::UNBOUNDED).await?.relayed)
    }

    /// As [`flush`](Self::flush), waiting and claiming no more once `budget` is spent: a worker relays what its
    /// messages wrote without being held by a backlog (a large import or forget, a slow bus) or another relay, and
    /// leaves the rest to the next flush or the sweep.
    pub async fn flush_within(&self, organization_id: Uuid, budget: Budget) -> crate::Result<usize> {
        Ok(self.flush_budgeted(organization_id, budget).await?.relayed)
    }

    async fn flush_budgeted(&self, organization_id: Uuid, budget: Budget) -> crate::Result<Flushed> {
        let sent = match &self.jobs {
            Some(jobs) => self.flush_jobs(jobs.as_ref(), organization_id, budget).await,
            None => Ok(Flushed { relayed: 0, done: true }),
        };
        let published = self.flush_events(organization_id, budget).await?;
        let sent = sent?;
        Ok(Flushed { relayed: sent.relayed + published.relayed, done: sent.done && published.done })
    }

    /// Sends the organisation's unsent jobs that this relay has queues for, ten at a time; a job whose send fails
    /// is left for the next flush and does not hold back the others. Fails, after sending what it could, when some
    /// were not sent.
    async fn flush_jobs(&self, jobs: &dyn JobSink, organization_id: Uuid, budget: Budget) -> crate::Result<Flushed> {
        let job_types = jobs.job_types();
        let (mut sent, mut failed) = (0, Vec::new());
        let (mut error, mut done) = (None, false);
        while !budget.spent(sent + failed.len()) {
            let mut tx = store::begin_relay(&self.pool, organization_id).await?;
            let batch = store::jobs::claim_unsent(&mut tx, organization_id, &job_types, &failed, BATCH).await?;
            if batch.is_empty() {
                tx.commit().await?;
                done = true;
                break;
            }
            let results = match jobs.send(&batch).await {
                Ok(results) => results,
                Err(e) => {
                    error = Some(e);
                    Vec::new()
                }
            };
            let results = results.into_iter().chain(std::iter::repeat(false));
            let (taken, refused): (Vec<_>, Vec<_>) = batch.iter().zip(results).partition(|(_, ok)| *ok);
            let taken: Vec<Uuid> = taken.into_iter().map(|(j, _)| j.id).collect();
            failed.extend(refused.into_iter().map(|(j, _)| j.id));
            store::jobs::mark_sent(&mut *tx, organization_id, &taken).await?;
            tx.commit().await?;
            sent += taken.len();
        }
        if failed.is_empty() {
            return Ok(Flushed { relayed: sent, done });
        }
        let cause = error.unwrap_or_else(|| anyhow::anyhow!("a queue refused them"));
        Err(crate::Error::Unexpected(
            cause.context(format!("{} jobs of organisation {organization_id} left for the next flush", failed.len())),
        ))
    }

    /// Publishes the organisation's unpublished events in `seq` order, until none is left or the budget is spent;
    /// returns how many were published. One relay at a time publishes a batch of an organisation's events
    /// (another waits for it, up to the deadline or the role's lock timeout), so they leave in order. Stops with an
    /// error when the bus refuses a batch; what was not accepted stays in the outbox, ahead of what came after it.
    async fn flush_events(&self, organization_id: Uuid, budget: Budget) -> crate::Result<Flushed> {
        let mut published = 0;
        let unfinished = |relayed| Ok(Flushed { relayed, done: false });
        loop {
            if budget.spent(published) {
                return unfinished(published);
            }
            let wait = budget.deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let mut tx = store::begin_relay(&self.pool, organization_id).await?;
            if !store::outbox::lock_publisher(&mut tx, organization_id, wait).await? {
                tx.rollback().await?;
                return unfinished(published);
            }
            let events = store::outbox::claim_unpublished(&mut tx, organization_id, BATCH).await?;
            if events.is_empty() {
                tx.commit().await?;
                return Ok(Flushed { relayed: published, done: true });
            }
            let (accepted, failure) = self.publish(&events).await;
            store::outbox::mark_published(&mut *tx, organization_id, &accepted).await?;
            tx.commit().await?;
            // Every state change is an event: counted by kind as published, they are the workers' decisions.
            for event in events.iter().filter(|e| accepted.contains(&e.id)) {
                metrics::counter!("domain_events", "event_type" => event.event_type.clone()).increment(1);
            }
            published += accepted.len();
            if let Some(failure) = failure {
                return Err(crate::Error::Unexpected(failure.context(format!(
                    "{} of {} events of organisation {organization_id} not published",
                    events.len() - accepted.len(),
                    events.len()
                ))));
            }
        }
    }

    /// Flushes the next organisations round robin (at most the configured number per sweep, least recently swept
    /// first), so every organisation is visited within a bounded number of sweeps however many there are. Each gets
    /// at most the organisation budget, and the sweep takes no new one once its own budget is spent; one whose
    /// backlog outlasted its budget is visited first by the next sweep.
    pub async fn sweep(&self) -> crate::Result<SweepReport> {
        let (budget, per_organization, rows) = self.sweep_budget;
        let started = Instant::now();
        let (mut report, mut unfinished, mut visited) = (SweepReport::default(), Vec::new(), Vec::new());
        while (visited.len() as i64) < self.sweep_organizations && started.elapsed() < budget {
            let Some(organization_id) = store::turns::next_to_sweep(&self.pool, Sweep::Outbox, 1).await?.pop() else {
                break;
            };
            if visited.contains(&organization_id) {
                break; // every organisation has had its turn
            }
            visited.push(organization_id);
            let visit = Budget::new(per_organization.min(budget.saturating_sub(started.elapsed())), rows);
            match self.flush_budgeted(organization_id, visit).await {
                Ok(flushed) => {
                    report.published += flushed.relayed;
                    if !flushed.done {
                        unfinished.push(organization_id);
                    }
                }
                // Not visited first: an organisation whose events a bus refuses for good would take every turn.
                Err(error) => {
                    tracing::warn!(%organization_id, error = %error, "outbox events left for the next sweep");
                    report.failed_organizations += 1;
                }
            }
        }
        report.unfinished_organizations = unfinished.len();
        store::turns::sweep_first(&self.pool, Sweep::Outbox, &unfinished).await?;
        Ok(report)
    }

    /// Publishes a batch, retrying refused entries; returns the accepted ids and why the rest were not.
    async fn publish(&self, events: &[OutboxEvent]) -> (Vec<Uuid>, Option<anyhow::Error>) {
        let mut pending: Vec<OutboxEvent> = events.to_vec();
        let mut accepted = Vec::new();
        let mut failure = None;
        for _ in 0..ATTEMPTS {
            match self.sink.publish(&pending).await {
                Ok(results) => {
                    let mut refused = Vec::new();
                    for (event, ok) in pending.into_iter().zip(results.into_iter().chain(std::iter::repeat(false))) {
                        if ok { accepted.push(event.id) } else { refused.push(event) }
                    }
                    pending = refused;
                    failure = (!pending.is_empty()).then(|| anyhow::anyhow!("the bus refused some entries"));
                }
                Err(error) => failure = Some(error),
            }
            if pending.is_empty() {
                break;
            }
        }
        (accepted, failure)
    }
}
