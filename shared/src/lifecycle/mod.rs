//! Background maintenance of memory: supersession chains, LLM dedup and merge, contradiction detection, entity
//! synthesis, the file-backed freshness scan, and the relay of their domain events.
//!
//! Every job has the same shape: read (or lease) what it works on in a short transaction, commit, call the model
//! under a timeout, then apply its decision in a short transaction that locks and re-checks the rows it changes.
//! State changes go through [`crate::store::transitions`], which writes each one's outbox event. What a job found
//! but may not apply (it would widen readership or override a more trusted memory, see
//! [`crate::domain::readership`]) is held for review instead.

pub mod contradiction;
pub mod dedup;
pub mod file_scan;
pub mod outbox;
pub mod supersession;
pub mod synthesis;

use std::time::Duration;

use crate::{
    embed::{EmbedError, Embedder},
    llm::{Llm, LlmError, LlmRequest},
};

/// How long a job waits for one model call before failing (its message is then retried).
pub const DEFAULT_MODEL_TIMEOUT: Duration = Duration::from_secs(30);

/// The model clients of a job and the timeout of each call.
#[derive(Clone)]
pub struct Models {
    pub llm: std::sync::Arc<dyn Llm>,
    /// Embeds the memories a job writes; without one they are stored unembedded.
    pub embedder: Option<std::sync::Arc<dyn Embedder>>,
    pub timeout: Duration,
}

impl Models {
    pub fn new(llm: std::sync::Arc<dyn Llm>, embedder: Option<std::sync::Arc<dyn Embedder>>) -> Self {
        Self { llm, embedder, timeout: DEFAULT_MODEL_TIMEOUT }
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub(crate) async fn complete(&self, request: LlmRequest) -> crate::Result<String> {
        match tokio::time::timeout(self.timeout, self.llm.complete(request)).await {
            Ok(answer) => Ok(answer?),
            Err(_) => Err(LlmError::Timeout.into()),
        }
    }

    pub(crate) async fn embed(&self, text: &str) -> crate::Result<Option<Vec<f32>>> {
        embed_within(self.embedder.as_deref(), self.timeout, text).await
    }
}

/// The earliest of some expiry times (None: none expires): derived content expires with its first source.
pub(crate) fn earliest(
    expiries: impl IntoIterator<Item = Option<chrono::DateTime<chrono::Utc>>>,
) -> Option<chrono::DateTime<chrono::Utc>> {
    expiries.into_iter().flatten().min()
}

/// Embeds `text` within `timeout`; None without an embedder.
pub(crate) async fn embed_within(
    embedder: Option<&dyn Embedder>,
    timeout: Duration,
    text: &str,
) -> crate::Result<Option<Vec<f32>>> {
    let Some(embedder) = embedder else { return Ok(None) };
    Ok(embed_all_within(embedder, timeout, &[text.to_string()]).await?.pop())
}

/// Embeds `texts` in one call within `timeout`.
pub(crate) async fn embed_all_within(
    embedder: &dyn Embedder,
    timeout: Duration,
    texts: &[String],
) -> crate::Result<Vec<Vec<f32>>> {
    match tokio::time::timeout(timeout, embedder.embed(texts)).await {
        Ok(vectors) => Ok(vectors?),
        Err(_) => Err(EmbedError::Unavailable("embedding timed out".into()).into()),
    }
}
