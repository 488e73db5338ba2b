//! The file-scan worker: scans one organisation's file-backed memories against the checked-out repositories
//! under `MEMORY_REPOS_DIR` (`<dir>/<organization_id>/<project_id>/<path>`, files up to `MEMORY_FILE_MAX_BYTES`).
//! A file that cannot be read is recorded on its memory, not retried: only a database failure fails the message.

use std::sync::Arc;

use memory_core::{
    config,
    db::PgPool,
    jobs::{FileScanJob, JobType},
    lifecycle::file_scan::{DEFAULT_MAX_FILE_BYTES, DirectoryReader, FileScanner},
    services::Services,
};
use uuid::Uuid;

pub struct Worker {
    pool: PgPool,
    scanner: FileScanner,
}

impl Worker {
    pub fn new(services: &Services) -> anyhow::Result<Self> {
        let max_bytes = config::parsed_or("MEMORY_FILE_MAX_BYTES", DEFAULT_MAX_FILE_BYTES)?;
        let reader = Arc::new(DirectoryReader::new(config::required("MEMORY_REPOS_DIR")?).with_max_bytes(max_bytes));
        let scanner =
            FileScanner::new(reader, Some(services.embedder.clone())).with_timeout(services.worker_model_timeout);
        Ok(Self::with(services.pool.clone(), scanner))
    }

    pub fn with(pool: PgPool, scanner: FileScanner) -> Self {
        Self { pool, scanner }
    }
}

impl aws_edge::sqs::JobHandler for Worker {
    type Job = FileScanJob;

    fn organization_id(job: &FileScanJob) -> Uuid {
        job.organization_id
    }

    async fn handle(&self, job: FileScanJob) -> anyhow::Result<()> {
        JobType::MemoryFileScan.expect(job.job_type)?;
        let report = self.scanner.scan_project(&self.pool, job.organization_id, job.project_id).await?;
        tracing::info!(organization_id = %job.organization_id, ?report, "file scan finished");
        Ok(())
    }
}
