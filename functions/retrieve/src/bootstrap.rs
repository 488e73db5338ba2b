//! Builds the application state from the environment, once per process.

use std::{sync::Arc, time::Duration};

use memory_core::{
    retrieval::{RetrievalConfig, Retriever, cooldown_token::TokenKey},
    services::Services,
};

use secrecy::SecretString;

use crate::{
    AppState,
    auth::{Authenticator, DEVELOPMENT_SECRET, JwksVerifier, LOCAL_AUDIENCE, LOCAL_ISSUER},
};

/// Builds the shared services, the retriever and the authenticator that `MEMORY_AUTH` names.
pub async fn state_from_env() -> anyhow::Result<AppState> {
    let auth = authenticator_from_env()?;
    let services = Services::from_env().await?;
    // The model loads now (Lambda's init phase, before the first request), not inside the first request; a model
    // that cannot load stops start-up with its error rather than serving keyword-only.
    services.embedder.warm_up().await?;
    let mut retriever = Retriever::new(services.pool, services.embedder, services.llm, RetrievalConfig::from_env()?)
        .with_llm_timeout(services.llm_timeout);
    match std::env::var("MEMORY_COOLDOWN_KEY").ok().filter(|k| !k.is_empty()) {
        Some(secret) => {
            let key = TokenKey::from_secret(secret.as_bytes()).map_err(|e| anyhow::anyhow!(e))?;
            retriever = retriever.with_cooldown_key(key);
        }
        None => tracing::warn!("MEMORY_COOLDOWN_KEY is not set: cooldown tokens hold only on this instance"),
    }
    if let Some(reader) = memory_core::repository::RepositoryReader::from_env()? {
        retriever =
            retriever.with_repositories(Arc::new(reader), memory_core::repository::exclude::Exclusions::secrets()?);
    }
    if let Some(config) = memory_core::secrets::reader_database_config().await? {
        let default = memory_core::replica::DEFAULT_MAX_LAG.as_millis() as u64;
        let max_lag = memory_core::config::parsed_or("MEMORY_READER_MAX_LAG_MS", default)?;
        let pool = memory_core::db::pool(&config)?;
        retriever = retriever.with_replica(memory_core::replica::Replica::new(pool, Duration::from_millis(max_lag)));
    }
    let fair = crate::fair::FairShare::from_env(retriever.pool())?;
    Ok(AppState {
        retriever: Arc::new(retriever),
        auth: Arc::new(auth),
        fair: Arc::new(fair),
        queues: Arc::new(crate::queues::Queues::from_env()),
    })
}

/// `MEMORY_AUTH=api-gateway` (the HTTP API's JWT authorizer, `MEMORY_API_ID`, `MEMORY_API_STAGE`; the token's
/// signature verified here too against the issuer's keys: `MEMORY_JWT_JWKS_URL`, fetched and refreshed, or
/// `MEMORY_JWT_JWKS`, given; without either, only with `MEMORY_TRUST_AUTHORIZER=true`) or `MEMORY_AUTH=local-jwt`
/// (`MEMORY_JWT_SECRET`, `MEMORY_JWT_ISSUER`, `MEMORY_JWT_AUDIENCE`). `MEMORY_JWT_AUDIENCE` may list several
/// audiences, separated by commas.
pub fn authenticator_from_env() -> anyhow::Result<Authenticator> {
    authenticator_from(|name| std::env::var(name).ok())
}

/// [`authenticator_from_env`] with the variables `var` gives.
pub fn authenticator_from(var: impl Fn(&str) -> Option<String>) -> anyhow::Result<Authenticator> {
    let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    let auth =
        set("MEMORY_AUTH").ok_or_else(|| anyhow::anyhow!("MEMORY_AUTH is required (api-gateway or local-jwt)"))?;
    match auth.as_str() {
        "api-gateway" => {
            let issuer = set("MEMORY_JWT_ISSUER");
            let audiences: Vec<String> = set("MEMORY_JWT_AUDIENCE")
                .map(|a| a.split(',').map(str::trim).filter(|a| !a.is_empty()).map(String::from).collect())
                .unwrap_or_default();
            let keyed_issuer =
                || issuer.clone().ok_or_else(|| anyhow::anyhow!("the issuer's keys need MEMORY_JWT_ISSUER"));
            let keys = match (set("MEMORY_JWT_JWKS_URL"), set("MEMORY_JWT_JWKS")) {
                (Some(_), Some(_)) => anyhow::bail!("set MEMORY_JWT_JWKS_URL or MEMORY_JWT_JWKS, not both"),
                (Some(url), None) => Some(JwksVerifier::from_url(&url, &keyed_issuer()?, &audiences)?),
                (None, Some(jwks)) => Some(JwksVerifier::new(&jwks, &keyed_issuer()?, &audiences)?),
                (None, None) => {
                    let trusted = match set("MEMORY_TRUST_AUTHORIZER").as_deref().map(str::trim) {
                        None | Some("false") => false,
                        Some("true") => true,
                        Some(other) => anyhow::bail!("MEMORY_TRUST_AUTHORIZER must be true or false, not {other:?}"),
                    };
                    anyhow::ensure!(
                        trusted,
                        "MEMORY_AUTH=api-gateway needs the issuer's keys (MEMORY_JWT_JWKS_URL or MEMORY_JWT_JWKS), or \
                         MEMORY_TRUST_AUTHORIZER=true where nothing but API Gateway can invoke the function"
                    );
                    None
                }
            };
            Ok(Authenticator::ApiGateway {
                api_id: set("MEMORY_API_ID"),
                stage: set("MEMORY_API_STAGE"),
                issuer,
                audiences,
                keys: keys.map(Box::new),
            })
        }
        "local-jwt" => {
            let secret = SecretString::from(
                set("MEMORY_JWT_SECRET")
                    .ok_or_else(|| anyhow::anyhow!("MEMORY_JWT_SECRET is required for local-jwt"))?,
            );
            let issuer = set("MEMORY_JWT_ISSUER").unwrap_or_else(|| LOCAL_ISSUER.into());
            let audience = set("MEMORY_JWT_AUDIENCE").unwrap_or_else(|| LOCAL_AUDIENCE.into());
            Authenticator::local(&secret, &issuer, &audience)
        }
        other => anyhow::bail!("MEMORY_AUTH must be api-gateway or local-jwt, not {other:?}"),
    }
}

/// Refuses to serve beyond loopback with the published development secret.
pub fn check_bind(address: &std::net::SocketAddr) -> anyhow::Result<()> {
    let development = std::env::var("MEMORY_JWT_SECRET").is_ok_and(|s| s == DEVELOPMENT_SECRET);
    anyhow::ensure!(
        address.ip().is_loopback() || !development,
        "refusing to listen on {address} with the development JWT secret; set MEMORY_JWT_SECRET"
    );
    Ok(())
}
