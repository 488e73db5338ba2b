//! `memory_file_scan`: scans one organisation's file-backed memories against the checked-out repositories under
//! `MEMORY_REPOS_DIR` (`<dir>/<organization_id>/<project_id>/<path>`, files up to `MEMORY_FILE_MAX_BYTES`). A file
//! that cannot be read is recorded on its memory, not retried: only a database failure fails the message.

use std::sync::Arc;

use memory_core::{
    config,
    jobs::FileScanJob,
    lifecycle::file_scan::{DEFAULT_MAX_FILE_BYTES, DEFAULT_MISSING_GRACE, DirectoryReader, FileScanner},
};

use aws_edge::sqs::{Delivery, JobHandler};

use crate::Worker;

/// The scanner the environment configures.
pub fn scanner() -> anyhow::Result<FileScanner> {
    let max_bytes = config::parsed_or("MEMORY_FILE_MAX_BYTES", DEFAULT_MAX_FILE_BYTES)?;
    let reader = Arc::new(DirectoryReader::new(config::required("MEMORY_REPOS_DIR")?).with_max_bytes(max_bytes));
    let grace = config::in_range("MEMORY_FILE_MISSING_GRACE_HOURS", DEFAULT_MISSING_GRACE.num_hours(), 0..=87_600)?;
    Ok(FileScanner::new(reader).with_missing_grace(chrono::TimeDelta::hours(grace)))
}

impl JobHandler for Worker<FileScanner> {
    type Job = FileScanJob;

    async fn handle(&self, job: FileScanJob, _: &Delivery) -> anyhow::Result<()> {
        let report = self.service.scan_project(&self.pool, job.organization_id, job.project_id).await?;
        tracing::info!(organization_id = %job.organization_id, ?report, "file scan finished");
        Ok(())
    }
}
