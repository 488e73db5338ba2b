//! Access and refresh tokens.

use crate::errors::AuthError;

/// How long an access token lives, in seconds.
pub const ACCESS_TOKEN_TTL: u64 = 15 * 60;

/// How long a refresh token lives, in seconds: thirty days.
pub const REFRESH_TOKEN_TTL: u64 = 30 * 24 * 3600;

/// Issues a new access token for a refresh token issued `age` seconds ago.
pub fn refresh_access_token(refresh_token: &str, age: u64) -> Result<String, AuthError> {
    if age > REFRESH_TOKEN_TTL {
        return Err(AuthError::RefreshTokenExpired);
    }
    Ok(format!("access-for-{refresh_token}"))
}
