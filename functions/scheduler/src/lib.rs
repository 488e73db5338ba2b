//! Scheduled tasks, one EventBridge schedule each, whose constant input names the task:
//! - `{"task": "outbox_sweep"}`: sends the follow-up jobs and publishes the domain events the workers' own
//!   flushes left behind (for example while EventBridge or SQS was unreachable);
//! - `{"task": "lifecycle_sweep"}`: queues the review of deferred dedup pairs whose memories are both active, and
//!   promotes unchecked (recording why) candidates the contradiction check did not decide within
//!   `MEMORY_CANDIDATE_BOUND_MINUTES` (120), and packs the keyword postings written or deleted since the last run;
//! - `{"task": "prune"}`: deletes published events and sent jobs after a week, batch records after the queues'
//!   retention, and dedup pairs that can never be reviewed again;
//! - `{"task": "file_scan"}`: the daily fan-out, one `memory_file_scan` job per organisation with file-backed
//!   memories (per project for a large one), then sent like any job;
//! - `{"task": "ann_indexes"}` and `{"task": "migrate"}`: database maintenance with the schema owner's
//!   connection (`MEMORY_ADMIN_DATABASE_URL` or its secret), deployed as a separate function with its own role;
//!   `migrate` also sets the `memory_app` role's password from `MEMORY_APP_PASSWORD_SECRET_ARN` and the embedding
//!   column's dimension from `MEMORY_EMBEDDING_DIMENSIONS` when given.
//!
//! The sweeps and the prune each visit at most `MEMORY_SWEEP_ORGANIZATIONS` organisations per run, in turn.

use lambda_runtime::{LambdaEvent, service_fn};
use memory_core::{
    config::{self, DatabaseConfig},
    db::{self, PgPool},
    lifecycle::{file_scan, sweep},
    outbox::OutboxRelay,
    secrets, store,
};
use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "task", rename_all = "snake_case", deny_unknown_fields)]
pub enum Task {
    OutboxSweep,
    LifecycleSweep,
    Prune,
    FileScan,
    AnnIndexes {
        #[serde(default = "default_min_memories")]
        min_memories: i64,
    },
    Migrate,
}

fn default_min_memories() -> i64 {
    store::ann::DEFAULT_MIN_MEMORIES
}

/// Runs one task; returns what it did.
pub async fn run(task: Task, app: Option<(&PgPool, &OutboxRelay)>) -> anyhow::Result<serde_json::Value> {
    Ok(match task {
        Task::OutboxSweep => {
            let (_, relay) = app.ok_or_else(|| anyhow::anyhow!("outbox_sweep needs MEMORY_DATABASE_URL"))?;
            let report = relay.sweep().await?;
            serde_json::json!({
                "sent": report.published,
                "failed_organizations": report.failed_organizations,
                "unfinished_organizations": report.unfinished_organizations,
            })
        }
        Task::LifecycleSweep => {
            let (pool, relay) = app.ok_or_else(|| anyhow::anyhow!("lifecycle_sweep needs MEMORY_DATABASE_URL"))?;
            let default = sweep::DEFAULT_CANDIDATE_BOUND.num_minutes();
            let bound = config::in_range("MEMORY_CANDIDATE_BOUND_MINUTES", default, 0..=525_600)?;
            let report = sweep::run(pool, chrono::TimeDelta::minutes(bound), relay.sweep_organizations()).await?;
            let sent = relay.sweep().await?;
            serde_json::json!({
                "reviews_queued": report.reviews_queued,
                "archived_expired": report.archived_expired,
                "promoted_unchecked": report.promoted_unchecked,
                "lexemes_packed": report.lexemes_packed,
                "sent": sent.published,
            })
        }
        Task::Prune => {
            let (pool, relay) = app.ok_or_else(|| anyhow::anyhow!("prune needs MEMORY_DATABASE_URL"))?;
            let report = sweep::prune(pool, relay.sweep_organizations()).await?;
            serde_json::json!({
                "events": report.events, "jobs": report.jobs, "batches": report.batches, "pairs": report.pairs,
            })
        }
        Task::FileScan => {
            let (pool, relay) = app.ok_or_else(|| anyhow::anyhow!("file_scan needs MEMORY_DATABASE_URL"))?;
            let queued = file_scan::schedule_scans(pool).await?;
            let report = relay.sweep().await?;
            serde_json::json!({"queued": queued, "sent": report.published})
        }
        Task::AnnIndexes { min_memories } => {
            let changes = store::ann::reconcile(&admin_pool().await?, min_memories).await?;
            serde_json::json!({"created": changes.created.len(), "dropped": changes.dropped.len(), "kept": changes.kept})
        }
        Task::Migrate => {
            let pool = admin_pool().await?;
            let dimensions = std::env::var("MEMORY_EMBEDDING_DIMENSIONS").ok().filter(|v| !v.is_empty());
            store::migrate(&pool, dimensions.map(|d| d.parse()).transpose()?).await?;
            // The application role's password follows its secret, so the services can connect after a deploy.
            let password_set = match std::env::var("MEMORY_APP_PASSWORD_SECRET_ARN").ok().filter(|v| !v.is_empty()) {
                Some(arn) => {
                    let fields = secrets::secret_fields(&arn).await?;
                    let password =
                        fields["password"].as_str().ok_or_else(|| anyhow::anyhow!("no password in {arn}"))?;
                    store::set_app_password(&pool, password).await?;
                    true
                }
                None => false,
            };
            serde_json::json!({"migrated": true, "app_password_set": password_set})
        }
    })
}

/// The schema owner's pool, for maintenance tasks (`MEMORY_ADMIN_DATABASE_URL`, or the secret named by
/// `MEMORY_ADMIN_DATABASE_SECRET_ARN`).
async fn admin_pool() -> anyhow::Result<PgPool> {
    let config = secrets::database_config("MEMORY_ADMIN_DATABASE_URL", "MEMORY_ADMIN_DATABASE_SECRET_ARN").await?;
    Ok(db::pool(&DatabaseConfig { max_connections: 2, ..config })?)
}

/// The scheduler's and the maintenance function's `main`: the application pool and relay when the application
/// database is configured (the scheduler function), the owner's pool per maintenance task (the maintenance
/// function); then each scheduled event's task under the Lambda runtime.
pub async fn lambda_main() -> Result<(), lambda_runtime::Error> {
    memory_core::telemetry::init();
    memory_core::telemetry::init_metrics("scheduler");
    let app = match secrets::database_configured("MEMORY_DATABASE_URL", "MEMORY_DATABASE_SECRET_ARN") {
        true => {
            let config = secrets::database_config("MEMORY_DATABASE_URL", "MEMORY_DATABASE_SECRET_ARN").await?;
            let pool = memory_core::db::pool(&config)?;
            let relay = aws_edge::relay::relay_from_env(pool.clone()).await?;
            Some((pool, relay))
        }
        false => None,
    };
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Task>| {
        let app = app.clone();
        async move {
            let task = event.payload;
            tracing::info!(?task, "scheduled task");
            let outcome = run(task, app.as_ref().map(|(p, r)| (p, r))).await;
            memory_core::telemetry::flush_metrics();
            let outcome = outcome?;
            tracing::info!(%outcome, "scheduled task finished");
            Ok::<_, lambda_runtime::Error>(outcome)
        }
    }))
    .await
}
