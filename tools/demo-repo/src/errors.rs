//! The errors auth-service returns, each with the code clients see.

/// An error a client of auth-service can receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthError {
    /// E4011: the credentials were wrong.
    BadCredentials,
    /// E4021: the refresh token expired; the client must log in again.
    RefreshTokenExpired,
    /// E4290: too many attempts; retry after the delay the response names.
    RateLimited,
}

impl AuthError {
    /// The code clients see in the `error` field of the response.
    pub fn code(self) -> &'static str {
        match self {
            AuthError::BadCredentials => "E4011",
            AuthError::RefreshTokenExpired => "E4021",
            AuthError::RateLimited => "E4290",
        }
    }
}
