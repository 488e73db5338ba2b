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
    /// Something the caller named by path or name (a file, a symbol) is not there.
    #[error("{0}")]
    Absent(String),
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
}
