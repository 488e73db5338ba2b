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
    /// What the caller named (a memory or an entity by id, a file or a symbol by path) is not there: `kind` says
    /// what it is, the message which.
    #[error("{message}")]
    NotFound { kind: &'static str, message: String },
    #[error("embedding failed: {0}")]
    Embedding(#[from] crate::embed::EmbedError),
    #[error("language model failed: {0}")]
    Llm(#[from] crate::llm::LlmError),
    #[error("database error")]
    Database(#[from] sqlx::Error),
    /// A dependency the answer needs is down (the database, or every search branch); retrying later may succeed.
    #[error("{0}")]
    Unavailable(String),
    /// The state a job meant to change had changed under it; retrying sees the new state.
    #[error("conflict: {0}")]
    Conflict(String),
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
}

impl From<crate::store::transitions::TransitionError> for Error {
    fn from(e: crate::store::transitions::TransitionError) -> Self {
        match e {
            crate::store::transitions::TransitionError::Conflict(c) => Self::Conflict(c.0),
            crate::store::transitions::TransitionError::Database(d) => Self::Database(d),
        }
    }
}

impl Error {
    pub fn validation(message: impl Into<String>) -> Self {
        Self::Validation(message.into())
    }

    /// The row of `kind` with this id is not there.
    pub fn not_found(kind: &'static str, id: Uuid) -> Self {
        Self::NotFound { kind, message: format!("{kind} {id} not found") }
    }
}
