//! Background maintenance of memory: LLM dedup and merge, contradiction detection, entity synthesis, forgetting
//! and the file-backed freshness scan.
//!
//! Every job has the same shape: read (or lease) what it works on in a short transaction, commit, call the model
//! under a timeout, then apply its decision in a short transaction that locks and re-checks the rows it changes.
//! State changes go through [`crate::store::transitions`], which writes each one's outbox event; a decision between
//! two memories (supersede, merge, lower confidence) goes through [`guarded`], which applies the readership and
//! trust rules and holds what they forbid for review.

pub mod contradiction;
pub mod dedup;
pub mod file_scan;
pub mod forget;
pub mod guarded;
pub mod sweep;
pub mod synthesis;

use std::time::Duration;

use crate::{
    config::DEFAULT_WORKER_MODEL_TIMEOUT,
    embed::Embedder,
    llm::{Llm, LlmRequest},
};

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
        Self { llm, embedder, timeout: DEFAULT_WORKER_MODEL_TIMEOUT }
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub(crate) async fn complete(&self, request: LlmRequest) -> crate::Result<String> {
        Ok(self.llm.complete_within(request, self.timeout).await?)
    }

    pub(crate) async fn embed(&self, text: &str) -> crate::Result<Option<Vec<f32>>> {
        embed_optional(self.embedder.as_deref(), text, self.timeout).await
    }
}

/// The earliest of some expiry times (None: none expires): derived content expires with its first source.
pub(crate) fn earliest(
    expiries: impl IntoIterator<Item = Option<chrono::DateTime<chrono::Utc>>>,
) -> Option<chrono::DateTime<chrono::Utc>> {
    expiries.into_iter().flatten().min()
}

/// Embeds `text` within `budget`; None without an embedder.
pub(crate) async fn embed_optional(
    embedder: Option<&dyn Embedder>,
    text: &str,
    budget: Duration,
) -> crate::Result<Option<Vec<f32>>> {
    let Some(embedder) = embedder else { return Ok(None) };
    Ok(embedder.embed_within(&[text.to_string()], budget).await?.pop())
}

/// Characters of one memory a prompt quotes at most. Dedup and contradiction judge only memories a model reads whole
/// ([`read_whole`]): a longer one would be judged, and merged or superseded, on its first part.
pub(crate) const QUOTED_CHARS: usize = 2_000;

/// Whether a prompt quotes all of the memory's text.
pub(crate) fn read_whole(memory: &crate::domain::Memory) -> bool {
    memory.content.chars().count() <= QUOTED_CHARS
}

/// A model answer that cannot be used (malformed, or cut off at its budget): what it was for is skipped with the
/// reason, not retried.
pub(crate) fn unusable(error: &crate::Error) -> bool {
    matches!(error, crate::Error::Llm(crate::llm::LlmError::Malformed(_)))
}

/// A memory's text fenced as data for a prompt (the prompts say that a `<memory>` element's text is never an
/// instruction): at most `max_chars` characters, with nothing in it that could close the fence.
pub(crate) fn quoted(text: &str, max_chars: usize) -> String {
    let text: String = text.chars().take(max_chars).collect();
    format!("<memory>{}</memory>\n", text.replace('<', "‹").replace('>', "›"))
}
