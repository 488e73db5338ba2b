//! Scheduled tasks, one EventBridge schedule each, whose constant input names the task:
//! - `{"task": "outbox_sweep"}`: sends the follow-up jobs and publishes the domain events the workers' own
//!   flushes left behind (for example while EventBridge or SQS was unreachable);
//! - `{"task": "file_scan"}`: the daily fan-out, one `memory_file_scan` job per organisation with file-backed
//!   memories (per project for a large one), then sent like any job;
//! - `{"task": "ann_indexes"}` and `{"task": "migrate"}`: database maintenance with the schema owner's
//!   connection (`MEMORY_ADMIN_DATABASE_URL`), deployed as a separate function with its own role.

use memory_core::{
    config::{self, DatabaseConfig},
    db::{self, PgPool},
    lifecycle::{file_scan, outbox::OutboxRelay},
    store,
};
use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "task", rename_all = "snake_case", deny_unknown_fields)]
pub enum Task {
    OutboxSweep,
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
            serde_json::json!({"sent": report.published, "failed_organizations": report.failed_organizations})
        }
        Task::FileScan => {
            let (pool, relay) = app.ok_or_else(|| anyhow::anyhow!("file_scan needs MEMORY_DATABASE_URL"))?;
            let queued = file_scan::schedule_scans(pool).await?;
            let report = relay.sweep().await?;
            serde_json::json!({"queued": queued, "sent": report.published})
        }
        Task::AnnIndexes { min_memories } => {
            let changes = store::ann::reconcile(&admin_pool()?, min_memories).await?;
            serde_json::json!({"created": changes.created.len(), "dropped": changes.dropped.len(), "kept": changes.kept})
        }
        Task::Migrate => {
            store::MIGRATOR.run(&admin_pool()?).await?;
            serde_json::json!({"migrated": true})
        }
    })
}

/// The schema owner's pool, for maintenance tasks.
fn admin_pool() -> anyhow::Result<PgPool> {
    let url = config::required("MEMORY_ADMIN_DATABASE_URL")?;
    let config =
        DatabaseConfig { url: url.into(), max_connections: 2, acquire_timeout: std::time::Duration::from_secs(10) };
    Ok(db::pool(&config)?)
}
