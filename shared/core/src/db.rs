//! The connection pool, sized for Lambda: connects lazily, few connections, short acquire timeout.

pub use sqlx::PgPool;

use secrecy::ExposeSecret;
use sqlx::postgres::{PgConnectOptions, PgSslMode};

use crate::config::{ConfigError, DatabaseConfig};

pub fn pool(config: &DatabaseConfig) -> Result<PgPool, ConfigError> {
    let options: PgConnectOptions = config.url.expose_secret().parse().map_err(|e: sqlx::Error| {
        ConfigError::Invalid { name: "MEMORY_DATABASE_URL", value: "<redacted>".into(), reason: e.to_string() }
    })?;
    Ok(pool_with(verified(options, config)?, config))
}

/// The options with `verify-full` TLS against the configured CA certificates, when there are some.
fn verified(options: PgConnectOptions, config: &DatabaseConfig) -> Result<PgConnectOptions, ConfigError> {
    let Some(ca) = &config.ssl_root_cert else { return Ok(options) };
    if !ca.is_file() {
        return Err(ConfigError::Invalid {
            name: "MEMORY_DB_SSL_ROOT_CERT",
            value: ca.display().to_string(),
            reason: "no such file".into(),
        });
    }
    Ok(options.ssl_mode(PgSslMode::VerifyFull).ssl_root_cert(ca))
}

pub fn pool_with(options: PgConnectOptions, config: &DatabaseConfig) -> PgPool {
    crate::store::connections::pool_options()
        .max_connections(config.max_connections)
        .min_connections(0)
        .acquire_timeout(config.acquire_timeout)
        .idle_timeout(Some(std::time::Duration::from_secs(300)))
        .connect_lazy_with(options.application_name("agent-memory").statement_cache_capacity(config.statement_cache))
}
