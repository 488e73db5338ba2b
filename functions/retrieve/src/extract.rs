//! Extractors whose rejections are JSON errors: the principal, JSON bodies and path ids.

use axum::{
    extract::{FromRequest, FromRequestParts, Path, Request, rejection::JsonRejection},
    http::{StatusCode, request::Parts},
};
use serde::de::DeserializeOwned;
use uuid::Uuid;

use crate::{AppState, MAX_BODY_BYTES, auth::Principal, error::ApiError};

impl FromRequestParts<AppState> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        match crate::fair::authenticated(parts) {
            Some(authenticated) => authenticated,
            None => state.auth.principal(parts).await,
        }
    }
}

/// `axum::Json` with JSON error bodies: 400 malformed JSON or a missing or wrong Content-Type (code
/// `unsupported_media_type`), 413 too large, 422 wrong shape.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(Self(value)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

fn json_rejection(rejection: JsonRejection) -> ApiError {
    match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge(MAX_BODY_BYTES),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            ApiError::BadRequest("unsupported_media_type", "expected Content-Type: application/json".into())
        }
        StatusCode::UNPROCESSABLE_ENTITY => ApiError::Unprocessable(rejection.body_text()),
        _ => ApiError::BadRequest("malformed_json", rejection.body_text()),
    }
}

/// A UUID path segment; anything else is a 400 naming the segment.
pub struct IdPath(pub Uuid);

impl<S: Send + Sync> FromRequestParts<S> for IdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(raw) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::BadRequest("invalid_path", e.body_text()))?;
        Uuid::parse_str(&raw)
            .map(IdPath)
            .map_err(|_| ApiError::BadRequest("invalid_uuid", format!("{raw:?} is not a valid UUID")))
    }
}
