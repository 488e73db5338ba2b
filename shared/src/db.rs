//! The connection pool, sized for Lambda: connects lazily, few connections, short acquire timeout.

pub use sqlx::PgPool;

use secrecy::ExposeSecret;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::config::{ConfigError, DatabaseConfig};

pub fn pool(config: &DatabaseConfig) -> Result<PgPool, ConfigError> {
    let options: PgConnectOptions = config.url.expose_secret().parse().map_err(|e: sqlx::Error| {
        ConfigError::Invalid { name: "MEMORY_DATABASE_URL", value: "<redacted>".into(), reason: e.to_string() }
    })?;
    Ok(pool_with(options, config))
}

pub fn pool_with(options: PgConnectOptions, config: &DatabaseConfig) -> PgPool {
    PgPoolOptions::new()
        .max_connections(config.max_connections)
        .min_connections(0)
        .acquire_timeout(config.acquire_timeout)
        .idle_timeout(Some(std::time::Duration::from_secs(300)))
        .connect_lazy_with(options.application_name("agent-memory").statement_cache_capacity(config.statement_cache))
}
