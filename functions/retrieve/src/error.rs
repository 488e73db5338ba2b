//! The HTTP error boundary: one enum, one status mapping, JSON bodies `{"error": {"code", "message"}}`.

use axum::{
    Json,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde::Serialize;
use utoipa::ToSchema;

/// The body of every error response.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable machine-readable code (`bad_request`, `invalid_json`, `unauthorized`, `forbidden`, `not_found`,
    /// `payload_too_large`, `unprocessable`, `too_many_requests`, `unavailable`, `internal`, ...).
    pub code: String,
    /// What was wrong, for a person.
    pub message: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{1}")]
    BadRequest(&'static str, String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("request body is larger than {0} bytes")]
    PayloadTooLarge(usize),
    #[error("{0}")]
    Unprocessable(String),
    #[error("{0}")]
    TooManyRequests(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

impl ApiError {
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::Unauthorized(message.into())
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::Forbidden(message.into())
    }

    pub fn status_code(&self) -> StatusCode {
        match self {
            Self::BadRequest(..) => StatusCode::BAD_REQUEST,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::TooManyRequests(_) => StatusCode::TOO_MANY_REQUESTS,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub(crate) fn code(&self) -> &'static str {
        match self {
            Self::BadRequest(code, _) => code,
            Self::Unauthorized(_) => "unauthorized",
            Self::Forbidden(_) => "forbidden",
            Self::NotFound(_) => "not_found",
            Self::PayloadTooLarge(_) => "payload_too_large",
            Self::Unprocessable(_) => "invalid_request",
            Self::TooManyRequests(_) => "too_many_requests",
            Self::Unavailable(_) => "unavailable",
            Self::Internal(_) => "internal",
        }
    }
}

impl From<memory_core::Error> for ApiError {
    fn from(error: memory_core::Error) -> Self {
        use memory_core::Error as E;
        match error {
            E::Validation(m) => Self::Unprocessable(m),
            E::Forbidden(m) => Self::Forbidden(m),
            E::NotFound { message, .. } => Self::NotFound(message),
            E::Database(e) if database_unavailable(&e) => {
                tracing::warn!(error = %e, "database unavailable");
                Self::Unavailable("the database is unavailable; retry".into())
            }
            E::Unavailable(reason) => {
                tracing::warn!(%reason, "answer unavailable");
                Self::Unavailable("the service cannot answer now; retry".into())
            }
            other => Self::Internal(anyhow::Error::new(other)),
        }
    }
}

/// Whether a database error means the database (or the connection to it) is down or overloaded, not that the
/// request was bad: no connection in time, a refused or broken connection, a backend terminated or the server
/// shutting down (SQLSTATE 08, 57P), too many connections or out of resources (53), a statement or lock timeout
/// (57014, 55P03).
pub(crate) fn database_unavailable(error: &sqlx::Error) -> bool {
    memory_core::store::connections::connection_lost(error)
        || match error {
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Tls(_) => true,
            sqlx::Error::Database(db) => db.code().is_some_and(|c| c.starts_with("53") || c == "57014" || c == "55P03"),
            _ => false,
        }
}

/// Seconds a client should wait before retrying a 429 or a 503.
const RETRY_AFTER_SECONDS: &str = "1";

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let Self::Internal(e) = &self {
            tracing::error!(error = ?e, "request failed");
        }
        let body = ErrorBody { error: ErrorDetail { code: self.code().into(), message: self.to_string() } };
        let mut response = (self.status_code(), Json(body)).into_response();
        if matches!(self, Self::TooManyRequests(_) | Self::Unavailable(_)) {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, RETRY_AFTER_SECONDS.parse().expect("a number"));
        }
        response
    }
}

/// The answer to a request whose handler panicked: a 500 like any internal error (the panic is logged).
pub fn panic_response(panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let message = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("a panic");
    ApiError::Internal(anyhow::anyhow!("handler panicked: {message}")).into_response()
}
