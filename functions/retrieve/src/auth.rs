//! The caller's identity. Behind API Gateway its JWT authorizer has verified the token and passes the claims in
//! the request context; locally the server verifies `Authorization: Bearer <JWT>` (HS256) itself. Both paths
//! produce the same [`Claims`] and go through [`Principal::from_claims`].

use std::collections::HashMap;

use axum::http::request::Parts;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
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
}

impl Claims {
    fn from_map(map: &HashMap<String, String>) -> Result<Self, ApiError> {
        Ok(Self {
            org_id: map.get("org_id").cloned().ok_or_else(|| ApiError::unauthorized("token has no org_id claim"))?,
            agent_id: map.get("agent_id").cloned(),
            scope: map.get("scope").or_else(|| map.get("scp")).cloned(),
            exp: None,
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

/// How requests are authenticated.
pub enum Authenticator {
    /// Trust the claims of API Gateway's JWT authorizer (the token was verified before the function ran), for
    /// events of the configured HTTP API and stage only (`MEMORY_API_ID`, `MEMORY_API_STAGE`; unset: any).
    ApiGateway { api_id: Option<String>, stage: Option<String> },
    /// Verify HS256 bearer tokens with a shared secret (local runs and tests).
    LocalJwt { secret: String },
}

impl Authenticator {
    pub fn principal(&self, parts: &Parts) -> Result<Principal, ApiError> {
        let claims = match self {
            Self::ApiGateway { api_id, stage } => {
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
                Claims::from_map(claims.ok_or_else(|| ApiError::unauthorized("no authorizer claims"))?)?
            }
            Self::LocalJwt { secret } => {
                let header = parts
                    .headers
                    .get(axum::http::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .ok_or_else(|| ApiError::unauthorized("missing Authorization: Bearer <token>"))?;
                let token = header
                    .strip_prefix("Bearer ")
                    .ok_or_else(|| ApiError::unauthorized("Authorization must be `Bearer <token>`"))?;
                let mut validation = Validation::new(Algorithm::HS256);
                validation.required_spec_claims.clear();
                validation.validate_exp = true;
                let key = DecodingKey::from_secret(secret.as_bytes())
                    .map_err(|e| ApiError::Internal(anyhow::anyhow!("JWT key: {e}")))?;
                jsonwebtoken::decode::<Claims>(token, &key, &validation)
                    .map_err(|e| ApiError::unauthorized(format!("invalid token: {e}")))?
                    .claims
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
