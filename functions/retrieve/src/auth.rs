//! The caller's identity. Behind API Gateway its JWT authorizer has verified the token and passes the claims in
//! the request context; with the issuer's public keys configured (`MEMORY_JWT_JWKS`) the function verifies the
//! token's signature itself and does not take the event's word. Locally the server verifies `Authorization: Bearer
//! <JWT>` (HS256). Every path produces the same [`Claims`] and goes through [`Principal::from_claims`].

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use axum::http::request::Parts;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation, jwk::JwkSet};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::ApiError;

/// Scope that lets a non-agent service (the prompt builder) act for any agent of its organisation.
pub const ANY_AGENT_SCOPE: &str = "memory:any_agent";

/// Scope that lets a person operating the service read what waits on review in its organisation (`GET /v1/review`).
pub const OPERATOR_SCOPE: &str = "memory:operator";

/// Scope of the deployment's operator: every job queue's depth and dead-letter count (`GET /v1/queues`), which
/// mix all organisations' messages. It reads no memory.
pub const DEPLOYMENT_SCOPE: &str = "memory:deployment";

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
    /// The claims of a local token (the local issuer and audience) for `org`, acting as `agent` when given, valid
    /// for `valid_for` from now.
    pub fn local(org: Uuid, agent: Option<Uuid>, valid_for: std::time::Duration) -> Self {
        Self {
            org_id: org.to_string(),
            agent_id: agent.map(|a| a.to_string()),
            scope: None,
            exp: Some(
                (std::time::SystemTime::now() + valid_for)
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
            ),
            iss: Some(LOCAL_ISSUER.into()),
            aud: Some(LOCAL_AUDIENCE.into()),
        }
    }

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
    /// The token has the operator scope ([`OPERATOR_SCOPE`]).
    pub operator: bool,
    /// The token has the deployment operator's scope ([`DEPLOYMENT_SCOPE`]).
    pub deployment_operator: bool,
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
        let has =
            |scope| scopes.split(|c: char| c.is_whitespace() || c == '[' || c == ']' || c == ',').any(|s| s == scope);
        Ok(Self {
            organization_id,
            agent_id,
            may_act_for_any_agent: has(ANY_AGENT_SCOPE),
            operator: has(OPERATOR_SCOPE),
            deployment_operator: has(DEPLOYMENT_SCOPE),
        })
    }

    /// Refuses a principal without the operator scope.
    pub fn check_operator(&self) -> Result<(), ApiError> {
        if self.operator { Ok(()) } else { Err(ApiError::forbidden(format!("this needs the {OPERATOR_SCOPE} scope"))) }
    }

    /// Refuses a principal without the deployment operator's scope.
    pub fn check_deployment_operator(&self) -> Result<(), ApiError> {
        if self.deployment_operator {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!("this needs the {DEPLOYMENT_SCOPE} scope")))
        }
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
    /// Behind API Gateway's JWT authorizer, for events of the configured HTTP API and stage only (`MEMORY_API_ID`,
    /// `MEMORY_API_STAGE`; unset: any). With `keys` (the issuer's public keys), the bearer token's signature is
    /// verified here as well and its claims are the ones used, so an event that did not come through the
    /// authorizer (a direct invocation) proves nothing. Without, the authorizer's claims are taken as they are,
    /// their `iss` and `aud` checked when configured (`MEMORY_JWT_ISSUER`, `MEMORY_JWT_AUDIENCE`).
    ApiGateway {
        api_id: Option<String>,
        stage: Option<String>,
        issuer: Option<String>,
        audiences: Vec<String>,
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
        validation.validate_nbf = true;
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
/// `exp`, `iss` and `aud` required, `nbf` checked when present. The keys are given once, or fetched from the
/// issuer's JWKS URL, cached, and fetched again when they are [`KEYS_MAX_AGE`] old or a token names a key the set
/// lacks (an issuer's rotation), at most once per refresh floor.
pub struct JwksVerifier {
    keys: KeySource,
    issuer: String,
    audiences: Vec<String>,
}

/// How long fetched keys are used before they are fetched again.
pub const KEYS_MAX_AGE: Duration = Duration::from_secs(3600);
/// The least time between two fetches of the keys (unknown key ids cannot make the function hammer the issuer).
pub const KEYS_REFRESH_FLOOR: Duration = Duration::from_secs(30);

enum KeySource {
    Given(Arc<JwkSet>),
    Fetched(FetchedKeys),
}

struct FetchedKeys {
    url: String,
    client: reqwest::Client,
    floor: Duration,
    /// Read by every token; written only after a fetch.
    cache: std::sync::RwLock<Cached>,
    /// Held by the one request that fetches; the others use the keys they have meanwhile.
    fetching: tokio::sync::Mutex<()>,
}

#[derive(Default, Clone)]
struct Cached {
    keys: Option<(Arc<JwkSet>, Instant)>,
    attempted: Option<Instant>,
}

impl FetchedKeys {
    fn cached(&self) -> Cached {
        self.cache.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The key set, fetched first when there is none, when it is old, or (`refresh`) when a token names a key it
    /// lacks, at most once per floor; a failed fetch keeps the set it had. One request fetches at a time; another
    /// that has keys goes on with them, and one without waits for the fetch.
    async fn keys(&self, refresh: bool) -> Result<Arc<JwkSet>, String> {
        let cached = self.cached();
        let due = cached.keys.as_ref().is_none_or(|(_, fetched)| refresh || fetched.elapsed() >= KEYS_MAX_AGE);
        let may_fetch = cached.attempted.is_none_or(|at| at.elapsed() >= self.floor);
        if due && may_fetch {
            let fetching = match self.fetching.try_lock() {
                Ok(guard) => Some(guard),
                Err(_) if cached.keys.is_none() || refresh => Some(self.fetching.lock().await),
                Err(_) => None,
            };
            // Another request may have fetched while this one waited.
            if fetching.is_some() && self.cached().attempted == cached.attempted {
                let fetched = self.fetch().await;
                let mut cache = self.cache.write().unwrap_or_else(std::sync::PoisonError::into_inner);
                cache.attempted = Some(Instant::now());
                match fetched {
                    Ok(keys) => cache.keys = Some((Arc::new(keys), Instant::now())),
                    Err(error) => tracing::warn!(url = %self.url, %error, "the issuer's keys could not be fetched"),
                }
            }
        }
        self.cached().keys.map(|(keys, _)| keys).ok_or_else(|| "no keys fetched from the issuer".into())
    }

    async fn fetch(&self) -> Result<JwkSet, String> {
        let response = self.client.get(&self.url).send().await.map_err(|e| e.to_string())?;
        let response = response.error_for_status().map_err(|e| e.to_string())?;
        let keys: JwkSet = response.json().await.map_err(|e| e.to_string())?;
        if keys.keys.is_empty() { Err("the key set holds no key".into()) } else { Ok(keys) }
    }
}

impl JwksVerifier {
    /// With the keys given (a JWKS document); refuses a set that holds no key.
    pub fn new(jwks: &str, issuer: &str, audiences: &[String]) -> anyhow::Result<Self> {
        let keys: JwkSet = serde_json::from_str(jwks).map_err(|e| anyhow::anyhow!("MEMORY_JWT_JWKS: {e}"))?;
        anyhow::ensure!(!keys.keys.is_empty(), "MEMORY_JWT_JWKS holds no key");
        Self::with(KeySource::Given(Arc::new(keys)), issuer, audiences)
    }

    /// With the keys fetched from the issuer's JWKS URL (on the first token, then as described above).
    pub fn from_url(url: &str, issuer: &str, audiences: &[String]) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build()?;
        let fetched = FetchedKeys {
            url: url.into(),
            client,
            floor: KEYS_REFRESH_FLOOR,
            cache: std::sync::RwLock::new(Cached::default()),
            fetching: tokio::sync::Mutex::new(()),
        };
        Self::with(KeySource::Fetched(fetched), issuer, audiences)
    }

    /// Changes the least time between two fetches (default [`KEYS_REFRESH_FLOOR`]).
    pub fn with_refresh_floor(mut self, floor: Duration) -> Self {
        if let KeySource::Fetched(fetched) = &mut self.keys {
            fetched.floor = floor;
        }
        self
    }

    fn with(keys: KeySource, issuer: &str, audiences: &[String]) -> anyhow::Result<Self> {
        anyhow::ensure!(!audiences.is_empty(), "the issuer's tokens need at least one accepted audience");
        Ok(Self { keys, issuer: issuer.into(), audiences: audiences.to_vec() })
    }

    async fn verify(&self, token: &str) -> Result<Claims, ApiError> {
        let refused = |reason: String| {
            tracing::debug!(%reason, "token refused");
            ApiError::unauthorized("invalid or expired token")
        };
        let header = jsonwebtoken::decode_header(token).map_err(|e| refused(e.to_string()))?;
        if matches!(header.alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512) {
            return Err(refused("a shared-secret algorithm".into()));
        }
        let find = |keys: &JwkSet| match &header.kid {
            Some(kid) => keys.find(kid).cloned(),
            None if keys.keys.len() == 1 => keys.keys.first().cloned(),
            None => None,
        };
        let jwk = match &self.keys {
            KeySource::Given(keys) => find(keys),
            KeySource::Fetched(fetched) => match find(&*fetched.keys(false).await.map_err(refused)?) {
                Some(jwk) => Some(jwk),
                None => find(&*fetched.keys(true).await.map_err(refused)?),
            },
        }
        .ok_or_else(|| refused("no key of the set signed it".into()))?;
        let key = DecodingKey::from_jwk(&jwk).map_err(|e| refused(e.to_string()))?;
        let mut validation = Validation::new(header.alg);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&self.audiences);
        validation.validate_nbf = true;
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

    pub async fn principal(&self, parts: &Parts) -> Result<Principal, ApiError> {
        let claims = match self {
            Self::ApiGateway { api_id, stage, issuer, audiences: accepted, keys } => {
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
                    return Principal::from_claims(&keys.verify(bearer(parts)?).await?);
                }
                let audiences = claims.get("aud").map(String::as_str).unwrap_or_default();
                let audience_ok = accepted.is_empty()
                    || audiences
                        .split(|c: char| c.is_whitespace() || "[],\"".contains(c))
                        .any(|a| accepted.iter().any(|w| w == a));
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
