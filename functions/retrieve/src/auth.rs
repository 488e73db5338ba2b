//! The caller's identity. Behind API Gateway its JWT authorizer has verified the token and passes the claims in
//! the request context; locally the server verifies `Authorization: Bearer <JWT>` (HS256) itself. Both paths
//! produce the same [`Claims`] and go through [`Principal::from_claims`].

use std::collections::HashMap;

use axum::http::request::Parts;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::ApiError;

/// Scope that lets a non-agent service (the prompt builder) act for any agent of its organisation.
pub const ANY_AGENT_SCOPE: &str = "memory:any_agent";

/// The claims this service reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Claims {
    pub org_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Space-separated OAuth scopes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exp: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iss: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aud: Option<String>,
}

impl Claims {
    fn from_map(map: &HashMap<String, String>) -> Result<Self, ApiError> {
        Ok(Self {
            org_id: map.get("org_id").cloned().ok_or_else(|| ApiError::unauthorized("token has no org_id claim"))?,
            agent_id: map.get("agent_id").cloned(),
            scope: map.get("scope").or_else(|| map.get("scp")).cloned(),
            ..Self::default()
        })
    }
}

/// Who is calling: always one organisation; an agent, or a service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub organization_id: Uuid,
    pub agent_id: Option<Uuid>,
    pub may_act_for_any_agent: bool,
}

impl Principal {
    pub fn from_claims(claims: &Claims) -> Result<Self, ApiError> {
        let organization_id =
            Uuid::parse_str(&claims.org_id).map_err(|_| ApiError::unauthorized("org_id claim is not a UUID"))?;
        let agent_id = claims
            .agent_id
            .as_deref()
            .map(Uuid::parse_str)
            .transpose()
            .map_err(|_| ApiError::unauthorized("agent_id claim is not a UUID"))?;
        let scopes = claims.scope.as_deref().unwrap_or_default();
        let may_act_for_any_agent =
            scopes.split(|c: char| c.is_whitespace() || c == '[' || c == ']' || c == ',').any(|s| s == ANY_AGENT_SCOPE);
        Ok(Self { organization_id, agent_id, may_act_for_any_agent })
    }

    /// Checks an organisation named in a body against the principal's.
    pub fn check_organization(&self, named: Option<Uuid>) -> Result<(), ApiError> {
        match named {
            Some(org) if org != self.organization_id => {
                Err(ApiError::forbidden("the request names an organisation other than the caller's"))
            }
            _ => Ok(()),
        }
    }

    /// The agent a request acts for: the token's own agent, or (for services with memory:any_agent) the body's.
    pub fn acting_agent(&self, named: Option<Uuid>) -> Result<Option<Uuid>, ApiError> {
        match (self.agent_id, named) {
            (Some(own), Some(other)) if own != other => {
                Err(ApiError::forbidden("an agent's token cannot act for another agent"))
            }
            (Some(own), _) => Ok(Some(own)),
            (None, Some(other)) if self.may_act_for_any_agent => Ok(Some(other)),
            (None, Some(_)) => {
                Err(ApiError::forbidden(format!("naming agent_id needs an agent token or the {ANY_AGENT_SCOPE} scope")))
            }
            (None, None) => Ok(None),
        }
    }
}

/// The development secret the local scripts use; a server holding it refuses to listen beyond loopback.
pub const DEVELOPMENT_SECRET: &str = "local-dev-secret-not-for-production";
/// Shortest local signing secret accepted, in bytes.
pub const MIN_SECRET_BYTES: usize = 32;
/// The issuer and audience of local tokens unless configured (`MEMORY_JWT_ISSUER`, `MEMORY_JWT_AUDIENCE`).
pub const LOCAL_ISSUER: &str = "agent-memory-local";
pub const LOCAL_AUDIENCE: &str = "agent-memory";

/// How requests are authenticated (`MEMORY_AUTH`: `api-gateway` or `local-jwt`, never inferred).
pub enum Authenticator {
    /// Trust the claims of API Gateway's JWT authorizer (the token was verified before the function ran), for
    /// events of the configured HTTP API and stage only (`MEMORY_API_ID`, `MEMORY_API_STAGE`; unset: any).
    /// The claims' `iss` and `aud` are checked too when configured (`MEMORY_JWT_ISSUER`, `MEMORY_JWT_AUDIENCE`).
    ApiGateway { api_id: Option<String>, stage: Option<String>, issuer: Option<String>, audience: Option<String> },
    /// Verify HS256 bearer tokens with a shared secret (local runs and tests): `exp`, `iss` and `aud` required.
    LocalJwt(Box<LocalVerifier>),
}

/// The local token check, built once: the key and the validation rules.
pub struct LocalVerifier {
    key: DecodingKey,
    validation: Validation,
}

impl LocalVerifier {
    /// Refuses a secret shorter than [`MIN_SECRET_BYTES`].
    pub fn new(secret: &SecretString, issuer: &str, audience: &str) -> anyhow::Result<Self> {
        let bytes = secret.expose_secret().as_bytes();
        anyhow::ensure!(
            bytes.len() >= MIN_SECRET_BYTES,
            "MEMORY_JWT_SECRET must have at least {MIN_SECRET_BYTES} bytes"
        );
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.set_issuer(&[issuer]);
        validation.set_audience(&[audience]);
        Ok(Self { key: DecodingKey::from_secret(bytes)?, validation })
    }

    fn verify(&self, token: &str) -> Result<Claims, ApiError> {
        jsonwebtoken::decode::<Claims>(token, &self.key, &self.validation).map(|t| t.claims).map_err(|e| {
            tracing::debug!(reason = %e, "token refused");
            ApiError::unauthorized("invalid or expired token")
        })
    }
}

impl Authenticator {
    pub fn local(secret: &SecretString, issuer: &str, audience: &str) -> anyhow::Result<Self> {
        Ok(Self::LocalJwt(Box::new(LocalVerifier::new(secret, issuer, audience)?)))
    }

    pub fn principal(&self, parts: &Parts) -> Result<Principal, ApiError> {
        let claims = match self {
            Self::ApiGateway { api_id, stage, issuer, audience } => {
                use lambda_http::request::RequestContext;
                let expected = |want: &Option<String>, got: Option<&String>| want.is_none() || want.as_ref() == got;
                let claims = match parts.extensions.get::<RequestContext>() {
                    Some(RequestContext::ApiGatewayV2(ctx)) => {
                        if !expected(api_id, ctx.apiid.as_ref()) || !expected(stage, ctx.stage.as_ref()) {
                            return Err(ApiError::unauthorized("the request did not come through this service's API"));
                        }
                        ctx.authorizer.as_ref().and_then(|a| a.jwt.as_ref()).map(|jwt| &jwt.claims)
                    }
                    _ => None,
                };
                let claims = claims.ok_or_else(|| ApiError::unauthorized("no authorizer claims"))?;
                let audiences = claims.get("aud").map(String::as_str).unwrap_or_default();
                let audience_ok = audience.as_ref().is_none_or(|want| {
                    audiences.split(|c: char| c.is_whitespace() || "[],\"".contains(c)).any(|a| a == want)
                });
                if !expected(issuer, claims.get("iss")) || !audience_ok {
                    return Err(ApiError::unauthorized("the token was issued for another service"));
                }
                Claims::from_map(claims)?
            }
            Self::LocalJwt(verifier) => {
                let header = parts
                    .headers
                    .get(axum::http::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .ok_or_else(|| ApiError::unauthorized("missing Authorization: Bearer <token>"))?;
                let token = header
                    .strip_prefix("Bearer ")
                    .ok_or_else(|| ApiError::unauthorized("Authorization must be `Bearer <token>`"))?;
                verifier.verify(token)?
            }
        };
        Principal::from_claims(&claims)
    }
}

/// Signs a local HS256 token (for `make token` and tests).
pub fn sign_local_token(secret: &str, claims: &Claims) -> anyhow::Result<String> {
    let key = EncodingKey::from_secret(secret.as_bytes())?;
    Ok(jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, &key)?)
}
