//! The job queues as the deployment's operator sees them (`GET /v1/queues`, [`DEPLOYMENT_SCOPE`]): each job's
//! queue depth and its dead-letter count, what `memory-admin jobs status` prints. Counts only: one queue serves
//! every organisation, so no message is received (that would hide it from the workers) and an organisation's
//! operator never sees them.
//!
//! [`DEPLOYMENT_SCOPE`]: crate::auth::DEPLOYMENT_SCOPE

use memory_core::jobs::JobType;
use serde::Serialize;
use tokio::sync::OnceCell;

use crate::error::ApiError;

/// The job queues this instance was given (`MEMORY_<JOB>_QUEUE_URL`), and an SQS client made on first use.
#[derive(Default)]
pub struct Queues {
    urls: Vec<(JobType, String)>,
    sqs: OnceCell<aws_sdk_sqs::Client>,
}

/// One job's queue.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct QueueDepth {
    /// The job (`memory_ingest`, `dedup`, ...).
    pub job: String,
    /// Messages waiting for a worker.
    pub waiting: u64,
    /// Messages a worker has received and not yet deleted.
    pub in_flight: u64,
    /// Messages on its dead-letter queue: failed until SQS gave up on them (`memory-admin jobs dead-letters`
    /// lists, redrives or purges them). `None`: the queue has no redrive policy.
    pub dead: Option<u64>,
}

/// What `GET /v1/queues` answers.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct QueuesView {
    pub queues: Vec<QueueDepth>,
    /// Jobs whose queue URL this instance was not given.
    pub not_configured: Vec<String>,
}

impl Queues {
    /// The queues named by `MEMORY_<JOB>_QUEUE_URL` where set.
    pub fn from_env() -> Self {
        Self::of(JobType::ALL.into_iter().filter_map(|job| Some((job, std::env::var(job.queue_variable()).ok()?))))
    }

    pub fn of(urls: impl IntoIterator<Item = (JobType, String)>) -> Self {
        let urls = urls.into_iter().filter(|(_, url)| !url.trim().is_empty()).collect();
        Self { urls, sqs: OnceCell::new() }
    }

    /// Each configured queue's depth and dead-letter count; 503 when SQS does not answer.
    pub async fn view(&self) -> Result<QueuesView, ApiError> {
        let sqs =
            self.sqs.get_or_init(|| async { aws_sdk_sqs::Client::new(&aws_edge::relay::sdk_config().await) }).await;
        let unavailable = |e: anyhow::Error| ApiError::Unavailable(format!("the queues did not answer: {e:#}"));
        let mut queues = Vec::with_capacity(self.urls.len());
        for (job, url) in &self.urls {
            let (depth, dead) = aws_edge::dead_letters::depth_and_dead(sqs, url).await.map_err(unavailable)?;
            queues.push(QueueDepth {
                job: job.as_str().into(),
                waiting: depth.waiting,
                in_flight: depth.in_flight,
                dead,
            });
        }
        let not_configured = JobType::ALL
            .into_iter()
            .filter(|job| !self.urls.iter().any(|(j, _)| j == job))
            .map(|job| job.as_str().into())
            .collect();
        Ok(QueuesView { queues, not_configured })
    }
}
