//! The language model behind classification, dedup, merge, contradiction checks and synthesis: the [`Llm`] trait,
//! the Bedrock Converse adapter and a deterministic scripted model for tests.

mod adversarial;
mod bedrock;
mod offline;
mod scripted;

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use adversarial::AdversarialLlm;
pub use bedrock::BedrockLlm;
pub use offline::OfflineLlm;
pub use scripted::ScriptedLlm;

/// Why the model is called; recorded with each call (Bedrock request metadata) for cost attribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InvocationPurpose {
    MemoryRetrieval,
    MemorySynthesis,
    MemoryDedup,
    MemoryMerge,
    MemoryContradiction,
}

impl InvocationPurpose {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MemoryRetrieval => "memory_retrieval",
            Self::MemorySynthesis => "memory_synthesis",
            Self::MemoryDedup => "memory_dedup",
            Self::MemoryMerge => "memory_merge",
            Self::MemoryContradiction => "memory_contradiction",
        }
    }
}

/// One completion request: a system instruction and a user prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmRequest {
    pub purpose: InvocationPurpose,
    pub system: String,
    pub prompt: String,
    pub max_tokens: i32,
}

#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("model call failed: {0}")]
    Call(String),
    #[error("model call timed out")]
    Timeout,
    #[error("model answer could not be used: {0}")]
    Malformed(String),
}

#[async_trait]
pub trait Llm: Send + Sync {
    /// The model's text answer.
    async fn complete(&self, request: LlmRequest) -> Result<String, LlmError>;

    /// [`Llm::complete`] within `budget`; over it, `Timeout`.
    async fn complete_within(&self, request: LlmRequest, budget: Duration) -> Result<String, LlmError> {
        let purpose = request.purpose.as_str();
        let answer = match tokio::time::timeout(budget, self.complete(request)).await {
            Ok(answer) => answer,
            Err(_) => Err(LlmError::Timeout),
        };
        if answer.is_err() {
            metrics::counter!("model_failures", "purpose" => purpose).increment(1);
        }
        answer
    }
}

/// The texts of the `<memory>` elements a prompt quotes, in order.
pub fn quoted_texts(prompt: &str) -> Vec<&str> {
    prompt.split("<memory>").skip(1).filter_map(|rest| rest.split_once("</memory>").map(|(text, _)| text)).collect()
}

/// Parses the first JSON value (object or array) in a model's answer, tolerating prose or code fences around it.
pub fn parse_json<T: serde::de::DeserializeOwned>(answer: &str) -> Result<T, LlmError> {
    let start = answer.find(['{', '[']).ok_or_else(|| LlmError::Malformed("no JSON in answer".into()))?;
    let close = if answer[start..].starts_with('{') { '}' } else { ']' };
    let end =
        answer.rfind(close).filter(|e| *e > start).ok_or_else(|| LlmError::Malformed("unterminated JSON".into()))?;
    serde_json::from_str(&answer[start..=end]).map_err(|e| LlmError::Malformed(e.to_string()))
}
