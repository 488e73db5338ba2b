//! What an answer was made with: the embedding model and a digest of its weights, a digest of the ranking's
//! configuration, the service's version. Asked the same question `as_of` the same time, two answers with equal
//! records are the same list, less what was forgotten since, as long as what the record cannot hold is the same
//! too: the keyword statistics and confidences (today's), and a language model's taxonomy classification.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

use super::RetrievalConfig;

/// What one answer was made with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AnswerRecord {
    pub embedding_model: String,
    /// SHA-256 of the model's files (null for a model served elsewhere, or when the query was not embedded).
    pub weights_digest: Option<String>,
    /// SHA-256 of every retrieval setting and the learned ranking's weights, first 16 hex digits.
    pub ranking_digest: String,
    pub service_version: String,
}

/// The digest of a retriever's settings (their `Debug` form, which names every field), its text search
/// configuration and `ranker.json`.
pub fn ranking_digest(config: &RetrievalConfig, text_search_config: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(format!("{config:?}"));
    hasher.update(text_search_config);
    hasher.update(include_str!("ranker.json"));
    format!("{:x}", hasher.finalize())[..16].to_string()
}

/// This build's version.
pub const SERVICE_VERSION: &str = env!("CARGO_PKG_VERSION");
