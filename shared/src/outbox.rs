//! The outbox relay: publishes the domain events that state changes wrote to `domain_event_outbox` to an event
//! bus, behind the [`EventSink`] trait (the functions plug in EventBridge), and sends the follow-up jobs written to
//! `memory_job_outbox` to their queues, behind [`JobSink`] (SQS).
//!
//! Events are claimed ten at a time with `FOR UPDATE SKIP LOCKED`, so two relays never send the same row in the
//! normal case; a row is marked published only once the bus accepted it, and entries the bus refused are retried,
//! then left for the next flush. Each event carries its outbox id, so a consumer drops the rare duplicate (a relay
//! that dies between the bus's answer and its commit sends again).

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::PgPool;
use uuid::Uuid;

use crate::{
    jobs::QueuedJob,
    store::{self, outbox::OutboxEvent},
};

/// Events per claim and per publish call (EventBridge's PutEvents limit).
pub const BATCH: i64 = 10;
/// Publish attempts per batch for entries the bus refused.
const ATTEMPTS: usize = 2;

/// Where events go.
#[async_trait]
pub trait EventSink: Send + Sync {
    /// Publishes the events; returns, for each in order, whether the bus accepted it. An error means none was.
    async fn publish(&self, events: &[OutboxEvent]) -> anyhow::Result<Vec<bool>>;
}

/// Where jobs go.
#[async_trait]
pub trait JobSink: Send + Sync {
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
}

#[derive(Clone)]
pub struct OutboxRelay {
    pool: PgPool,
    sink: Arc<dyn EventSink>,
    jobs: Option<Arc<dyn JobSink>>,
}

impl OutboxRelay {
    pub fn new(pool: PgPool, sink: Arc<dyn EventSink>) -> Self {
        Self { pool, sink, jobs: None }
    }

    /// Also sends the job outbox to `jobs`.
    pub fn with_jobs(mut self, jobs: Arc<dyn JobSink>) -> Self {
        self.jobs = Some(jobs);
        self
    }

    /// Sends the organisation's unsent jobs, then publishes its events; returns how many of both went out.
    pub async fn flush(&self, organization_id: Uuid) -> crate::Result<usize> {
        let sent = match &self.jobs {
            Some(jobs) => self.flush_jobs(jobs.as_ref(), organization_id).await,
            None => Ok(0),
        };
        let published = self.flush_events(organization_id).await?;
        Ok(sent? + published)
    }

    /// Sends the organisation's unsent jobs, ten at a time, until none is left or a queue refuses.
    async fn flush_jobs(&self, jobs: &dyn JobSink, organization_id: Uuid) -> crate::Result<usize> {
        let mut sent = 0;
        loop {
            let mut tx = store::begin_relay(&self.pool, organization_id).await?;
            let batch = store::jobs::claim_unsent(&mut tx, organization_id, BATCH).await?;
            if batch.is_empty() {
                tx.commit().await?;
                return Ok(sent);
            }
            let taken: Vec<Uuid> = match jobs.send(&batch).await {
                Ok(results) => batch.iter().zip(results).filter(|(_, ok)| *ok).map(|(j, _)| j.id).collect(),
                Err(error) => {
                    tx.commit().await?;
                    return Err(crate::Error::Unexpected(error.context("sending follow-up jobs")));
                }
            };
            store::jobs::mark_sent(&mut *tx, organization_id, &taken).await?;
            tx.commit().await?;
            sent += taken.len();
            if taken.len() < batch.len() {
                return Err(crate::Error::Unexpected(anyhow::anyhow!(
                    "{} of {} jobs of organisation {organization_id} not sent",
                    batch.len() - taken.len(),
                    batch.len()
                )));
            }
        }
    }

    /// Publishes the organisation's unpublished events, oldest first, until none is left; returns how many were
    /// published. Stops with an error when the bus refuses a batch; what was not accepted stays in the outbox.
    async fn flush_events(&self, organization_id: Uuid) -> crate::Result<usize> {
        let mut published = 0;
        loop {
            let mut tx = store::begin_relay(&self.pool, organization_id).await?;
            let events = store::outbox::claim_unpublished(&mut tx, organization_id, BATCH).await?;
            if events.is_empty() {
                tx.commit().await?;
                return Ok(published);
            }
            let (accepted, failure) = self.publish(&events).await;
            store::outbox::mark_published(&mut *tx, organization_id, &accepted).await?;
            tx.commit().await?;
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

    /// Flushes every organisation that has written events.
    pub async fn sweep(&self) -> crate::Result<SweepReport> {
        let mut report = SweepReport::default();
        for organization_id in store::outbox::organizations(&self.pool).await? {
            match self.flush(organization_id).await {
                Ok(n) => report.published += n,
                Err(error) => {
                    tracing::warn!(%organization_id, error = %error, "outbox events left for the next sweep");
                    report.failed_organizations += 1;
                }
            }
        }
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
