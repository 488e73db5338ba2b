//! The caller's identity. Behind API Gateway its JWT authorizer has verified the token and passes the claims in
//! the request context; with the issuer's public keys configured (`MEMORY_JWT_JWKS`) the function verifies the
//! token's signature itself and does not take the event's word. Locally the server verifies `Authorization: Bearer
//! <JWT>` (HS256). Every path produces the same [`Claims`] and goes through [`Principal::from_claims`].

use std::collections::HashMap;

use axum::http::request::Parts;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation, jwk::JwkSet};
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
    /// With `keys`, the bearer token's signature is verified against the issuer's public keys as well, and its
    /// claims are the ones used.
    ApiGateway {
        api_id: Option<String>,
        stage: Option<String>,
        issuer: Option<String>,
        audience: Option<String>,
        keys: Option<Box<JwksVerifier>>,
    },
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

/// The check of tokens signed by an issuer, with its published public keys (a JWKS): asymmetric algorithms only;
/// `exp`, `iss` and `aud` required.
pub struct JwksVerifier {
    keys: JwkSet,
    issuer: String,
    audience: String,
}

impl JwksVerifier {
    /// Refuses a key set that holds no key.
    pub fn new(jwks: &str, issuer: &str, audience: &str) -> anyhow::Result<Self> {
        let keys: JwkSet = serde_json::from_str(jwks).map_err(|e| anyhow::anyhow!("MEMORY_JWT_JWKS: {e}"))?;
        anyhow::ensure!(!keys.keys.is_empty(), "MEMORY_JWT_JWKS holds no key");
        Ok(Self { keys, issuer: issuer.into(), audience: audience.into() })
    }

    fn verify(&self, token: &str) -> Result<Claims, ApiError> {
        let refused = |reason: String| {
            tracing::debug!(%reason, "token refused");
            ApiError::unauthorized("invalid or expired token")
        };
        let header = jsonwebtoken::decode_header(token).map_err(|e| refused(e.to_string()))?;
        if matches!(header.alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512) {
            return Err(refused("a shared-secret algorithm".into()));
        }
        let jwk = match &header.kid {
            Some(kid) => self.keys.find(kid),
            None if self.keys.keys.len() == 1 => self.keys.keys.first(),
            None => None,
        }
        .ok_or_else(|| refused("no key of the set signed it".into()))?;
        let key = DecodingKey::from_jwk(jwk).map_err(|e| refused(e.to_string()))?;
        let mut validation = Validation::new(header.alg);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.audience]);
        let token = jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(token, &key, &validation)
            .map_err(|e| refused(e.to_string()))?;
        let text = |value: &serde_json::Value| match value {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Array(items) => {
                Some(items.iter().filter_map(|i| i.as_str()).collect::<Vec<_>>().join(" "))
            }
            _ => None,
        };
        let claims: HashMap<String, String> =
            token.claims.iter().filter_map(|(k, v)| text(v).map(|t| (k.clone(), t))).collect();
        Claims::from_map(&claims)
    }
}

/// The token of `Authorization: Bearer <token>`.
fn bearer(parts: &Parts) -> Result<&str, ApiError> {
    let header = parts
        .headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| ApiError::unauthorized("missing Authorization: Bearer <token>"))?;
    header.strip_prefix("Bearer ").ok_or_else(|| ApiError::unauthorized("Authorization must be `Bearer <token>`"))
}

impl Authenticator {
    pub fn local(secret: &SecretString, issuer: &str, audience: &str) -> anyhow::Result<Self> {
        Ok(Self::LocalJwt(Box::new(LocalVerifier::new(secret, issuer, audience)?)))
    }

    pub fn principal(&self, parts: &Parts) -> Result<Principal, ApiError> {
        let claims = match self {
            Self::ApiGateway { api_id, stage, issuer, audience, keys } => {
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
                if let Some(keys) = keys {
                    // The event's claims are not taken on trust: the token itself must verify.
                    return Principal::from_claims(&keys.verify(bearer(parts)?)?);
                }
                let audiences = claims.get("aud").map(String::as_str).unwrap_or_default();
                let audience_ok = audience.as_ref().is_none_or(|want| {
                    audiences.split(|c: char| c.is_whitespace() || "[],\"".contains(c)).any(|a| a == want)
                });
                if !expected(issuer, claims.get("iss")) || !audience_ok {
                    return Err(ApiError::unauthorized("the token was issued for another service"));
                }
                Claims::from_map(claims)?
            }
            Self::LocalJwt(verifier) => verifier.verify(bearer(parts)?)?,
        };
        Principal::from_claims(&claims)
    }
}

/// Signs a local HS256 token (for `make token` and tests).
pub fn sign_local_token(secret: &str, claims: &Claims) -> anyhow::Result<String> {
    let key = EncodingKey::from_secret(secret.as_bytes())?;
    Ok(jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, &key)?)
}
