//! `memory_file_scan`: scans one organisation's file-backed memories against the repositories under
//! `MEMORY_REPOS_DIR` (`<dir>/<organization_id>/<project_id>/`: a git repository read at `MEMORY_REPOSITORY_REF`, or
//! a plain checkout; files up to `MEMORY_FILE_MAX_BYTES`). A file that cannot be read is recorded on its memories,
//! not retried: only a database failure fails the message.

use std::sync::Arc;

use memory_core::{
    config,
    embed::Embedder,
    jobs::FileScanJob,
    lifecycle::file_scan::{DEFAULT_MISSING_GRACE, FileScanner},
    repository::RepositoryReader,
};

use aws_edge::sqs::{Delivery, JobHandler};

use crate::Worker;

/// The scanner the environment configures; new versions of changed chunks are embedded with `embedder`.
pub fn scanner(embedder: Arc<dyn Embedder>) -> anyhow::Result<FileScanner> {
    let reader = RepositoryReader::from_env()?.ok_or(config::ConfigError::Missing("MEMORY_REPOS_DIR"))?;
    let grace = config::in_range("MEMORY_FILE_MISSING_GRACE_HOURS", DEFAULT_MISSING_GRACE.num_hours(), 0..=87_600)?;
    Ok(FileScanner::new(Arc::new(reader)).with_missing_grace(chrono::TimeDelta::hours(grace)).with_embedder(embedder))
}
impl JobHandler for Worker<FileScanner> {
    type Job = FileScanJob;

    async fn handle(&self, job: FileScanJob, _: &Delivery) -> anyhow::Result<()> {
        let report = self.service.scan_from(&self.pool, &job).await?;
        tracing::info!(organization_id = %job.organization_id, ?report, "file scan finished");
        Ok(())
    }
}
