//! Database credentials from AWS Secrets Manager: a deployed function names the secret (the RDS secret JSON:
//! `username`, `password`, `host`, `port`, `dbname`) instead of holding a connection URL in its configuration.

use secrecy::SecretString;

use crate::config::{ConfigError, DatabaseConfig};

/// The pool configuration from the environment: `url_var` when set, else the secret named by `secret_var`, whose
/// host `MEMORY_DATABASE_HOST` overrides (an RDS Proxy endpoint). TLS is required on a secret's connection.
pub async fn database_config(url_var: &'static str, secret_var: &'static str) -> anyhow::Result<DatabaseConfig> {
    let url = match set(url_var) {
        Some(url) => SecretString::from(url),
        None => {
            let arn = set(secret_var).ok_or(ConfigError::Missing(url_var))?;
            let fields = secret_fields(&arn).await?;
            SecretString::from(url_from_secret(&fields, set("MEMORY_DATABASE_HOST"))?)
        }
    };
    Ok(DatabaseConfig::with_url(url)?)
}

/// The read replica's database, when the environment names one: `MEMORY_DATABASE_READER_URL`, or the reader
/// endpoint `MEMORY_DATABASE_READER_HOST` with the credentials of `MEMORY_DATABASE_SECRET_ARN`'s secret.
pub async fn reader_database_config() -> anyhow::Result<Option<DatabaseConfig>> {
    let url = match (set("MEMORY_DATABASE_READER_URL"), set("MEMORY_DATABASE_READER_HOST")) {
        (Some(url), _) => url,
        (None, Some(host)) => {
            let arn = set("MEMORY_DATABASE_SECRET_ARN").ok_or(ConfigError::Missing("MEMORY_DATABASE_SECRET_ARN"))?;
            url_from_secret(&secret_fields(&arn).await?, Some(host))?
        }
        (None, None) => return Ok(None),
    };
    Ok(Some(DatabaseConfig::with_url(SecretString::from(url))?))
}

/// Whether the environment names a database (`url_var` or `secret_var`, not empty).
pub fn database_configured(url_var: &str, secret_var: &str) -> bool {
    set(url_var).is_some() || set(secret_var).is_some()
}

/// A variable's value, unless unset or empty.
fn set(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The JSON fields of a Secrets Manager secret.
pub async fn secret_fields(arn: &str) -> anyhow::Result<serde_json::Value> {
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let secret = aws_sdk_secretsmanager::Client::new(&sdk).get_secret_value().secret_id(arn).send().await?;
    Ok(serde_json::from_str(secret.secret_string().unwrap_or("{}"))?)
}

fn url_from_secret(fields: &serde_json::Value, host: Option<String>) -> anyhow::Result<String> {
    let field = |name: &str| {
        fields[name].as_str().map(str::to_string).ok_or_else(|| anyhow::anyhow!("the database secret has no {name}"))
    };
    let host = match host {
        Some(host) => host,
        None => field("host")?,
    };
    let port = fields["port"].as_u64().unwrap_or(5432);
    let database = field("dbname").unwrap_or_else(|_| "memory".into());
    Ok(format!(
        "postgres://{}:{}@{host}:{port}/{}?sslmode=require",
        encode(&field("username")?),
        encode(&field("password")?),
        encode(&database)
    ))
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_becomes_a_tls_url_with_its_credentials_encoded() {
        let secret = serde_json::json!({"username": "memory_app", "password": "p@ss/w:rd", "host": "db", "port": 5433});
        assert_eq!(
            url_from_secret(&secret, Some("proxy.example".into())).unwrap(),
            "postgres://memory_app:p%40ss%2Fw%3Ard@proxy.example:5433/memory?sslmode=require"
        );
        assert!(url_from_secret(&serde_json::json!({"username": "u"}), None).is_err());
    }
}
