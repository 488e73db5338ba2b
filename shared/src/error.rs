//! The error type of the core crate. Edges map it to their own responses (HTTP status, SQS batch failure).

use uuid::Uuid;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The caller asked for something malformed; the message names the problem.
    #[error("{0}")]
    Validation(String),
    /// The caller may not do this (for example name another organisation).
    #[error("{0}")]
    Forbidden(String),
    #[error("{kind} {id} not found")]
    NotFound { kind: &'static str, id: Uuid },
    #[error("embedding failed: {0}")]
    Embedding(#[from] crate::embed::EmbedError),
    #[error("language model failed: {0}")]
    Llm(#[from] crate::llm::LlmError),
    #[error("database error")]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
}

impl Error {
    pub fn validation(message: impl Into<String>) -> Self {
        Self::Validation(message.into())
    }
}
