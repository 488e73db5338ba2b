//! The file-scan worker: scans one organisation's file-backed memories against the checked-out repositories
//! under `MEMORY_REPOS_DIR` (`<dir>/<project_id>/<path>`). A scan with unreadable files fails the message, so it is
//! retried (scans are idempotent: unchanged files change nothing).

use std::sync::Arc;

use memory_core::{
    config,
    db::PgPool,
    lifecycle::file_scan::{DirectoryReader, FileScanner},
    services::Services,
};
use serde::Deserialize;
use uuid::Uuid;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileScanJob {
    pub organization_id: Uuid,
}

pub struct Worker {
    pool: PgPool,
    scanner: FileScanner,
}

impl Worker {
    pub fn new(services: &Services) -> anyhow::Result<Self> {
        let reader = Arc::new(DirectoryReader::new(config::required("MEMORY_REPOS_DIR")?));
        Ok(Self { pool: services.pool.clone(), scanner: FileScanner::new(reader, Some(services.embedder.clone())) })
    }
}

impl sqs_worker::JobHandler for Worker {
    type Job = FileScanJob;

    async fn handle(&self, job: FileScanJob) -> anyhow::Result<()> {
        let report = self.scanner.scan(&self.pool, job.organization_id).await?;
        tracing::info!(organization_id = %job.organization_id, ?report, "file scan finished");
        anyhow::ensure!(report.failed == 0, "{} file-backed memories could not be read", report.failed);
        Ok(())
    }
}
