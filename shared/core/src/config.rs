//! Typed configuration read from the environment. A missing or malformed variable is an error naming it.

use std::{path::PathBuf, str::FromStr, time::Duration};

use secrecy::SecretString;

/// The default time budgets of model calls: a background job's (embedding, LLM; its message is retried when
/// over) and a request's LLM classification (over it, the request goes on with rules).
pub const DEFAULT_WORKER_MODEL_TIMEOUT: Duration = Duration::from_secs(30);
pub const DEFAULT_REQUEST_LLM_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("environment variable {0} is required but not set")]
    Missing(&'static str),
    #[error("environment variable {name} has an invalid value {value:?}: {reason}")]
    Invalid { name: &'static str, value: String, reason: String },
}

/// Reads a required variable.
pub fn required(name: &'static str) -> Result<String, ConfigError> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => Ok(v),
        _ => Err(ConfigError::Missing(name)),
    }
}

/// Reads an optional variable and parses it, falling back to `default` when unset.
pub fn parsed_or<T: FromStr>(name: &'static str, default: T) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => {
            v.trim().parse().map_err(|e: T::Err| ConfigError::Invalid { name, value: v, reason: e.to_string() })
        }
        _ => Ok(default),
    }
}

#[derive(Debug, Clone)]
pub struct DatabaseConfig {
    pub url: SecretString,
    pub max_connections: u32,
    pub acquire_timeout: Duration,
    /// Named prepared statements cached per connection (`MEMORY_DB_STATEMENT_CACHE`, 100; 0 sends every statement
    /// unnamed, for a proxy that would pin a session holding named statements).
    pub statement_cache: usize,
    /// CA certificates the server's must chain to (`MEMORY_DB_SSL_ROOT_CERT`, a PEM file, beside the public roots):
    /// when set, every connection is TLS with `verify-full` (chain and host name checked). The deployed functions
    /// name the RDS CA bundle the layer carries.
    pub ssl_root_cert: Option<PathBuf>,
}

impl DatabaseConfig {
    /// `MEMORY_DATABASE_URL` and the pool settings. A deployed function names a secret instead:
    /// [`crate::secrets::database_config`].
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::with_url(SecretString::from(required("MEMORY_DATABASE_URL")?))
    }

    /// This URL with the pool settings of the environment.
    pub fn with_url(url: SecretString) -> Result<Self, ConfigError> {
        Ok(Self {
            url,
            max_connections: parsed_or("MEMORY_DB_MAX_CONNECTIONS", 4)?,
            acquire_timeout: Duration::from_millis(parsed_or("MEMORY_DB_ACQUIRE_TIMEOUT_MS", 3000)?),
            statement_cache: parsed_or("MEMORY_DB_STATEMENT_CACHE", 100)?,
            ssl_root_cert: std::env::var_os("MEMORY_DB_SSL_ROOT_CERT").filter(|v| !v.is_empty()).map(PathBuf::from),
        })
    }
}

/// Which embedding model to run.
#[derive(Debug, Clone)]
pub enum EmbedderConfig {
    /// all-MiniLM-L6-v2 in process, from a directory holding model.onnx, its weights (model.onnx.data and
    /// weights.json), tokenizer.json, config.json and libonnxruntime.so (`make stack` writes .local/model; `make
    /// package` puts the same in the layer).
    MiniLm {
        model_dir: PathBuf,
        /// Single-threaded inference sessions (`MEMORY_EMBED_SESSIONS`, default one per core).
        sessions: usize,
    },
    /// Amazon Titan Text Embeddings through Bedrock.
    Titan { model_id: String, dimensions: usize },
}

impl EmbedderConfig {
    pub fn from_env() -> Result<Self, ConfigError> {
        match parsed_or("MEMORY_EMBEDDER", "minilm".to_string())?.as_str() {
            "minilm" => {
                let sessions = parsed_or("MEMORY_EMBED_SESSIONS", crate::embed::MiniLm::default_sessions())?;
                if sessions == 0 {
                    return Err(ConfigError::Invalid {
                        name: "MEMORY_EMBED_SESSIONS",
                        value: "0".into(),
                        reason: "at least one session".into(),
                    });
                }
                Ok(Self::MiniLm { model_dir: required("MEMORY_MODEL_DIR")?.into(), sessions })
            }
            "titan" => Ok(Self::Titan {
                model_id: parsed_or("MEMORY_TITAN_MODEL_ID", "amazon.titan-embed-text-v2:0".to_string())?,
                dimensions: parsed_or("MEMORY_TITAN_DIMENSIONS", 1024)?,
            }),
            other => Err(ConfigError::Invalid {
                name: "MEMORY_EMBEDDER",
                value: other.into(),
                reason: "expected minilm or titan".into(),
            }),
        }
    }
}

/// Which language model serves classification (and later dedup, merge, contradiction and synthesis).
#[derive(Debug, Clone)]
pub enum LlmConfig {
    /// Bedrock Converse with a Haiku-class model.
    Bedrock { model_id: String, timeout: Duration },
    /// No model: LLM-based steps fall back to their rule-based versions and say so (`degraded`).
    Disabled,
    /// The offline stand-in ([`crate::llm::OfflineLlm`]), for running the workers locally: it finds no
    /// contradiction, keeps near-duplicates, and writes profiles that list their sources.
    Offline,
    /// The adversarial stand-in ([`crate::llm::AdversarialLlm`]), for the soak test's workers.
    Adversarial,
}

impl LlmConfig {
    pub fn from_env() -> Result<Self, ConfigError> {
        match parsed_or("MEMORY_LLM", "bedrock".to_string())?.as_str() {
            "bedrock" => Ok(Self::Bedrock {
                model_id: parsed_or("MEMORY_LLM_MODEL_ID", "anthropic.claude-3-5-haiku-20241022-v1:0".to_string())?,
                timeout: Duration::from_millis(parsed_or(
                    "MEMORY_LLM_TIMEOUT_MS",
                    DEFAULT_REQUEST_LLM_TIMEOUT.as_millis() as u64,
                )?),
            }),
            "none" => Ok(Self::Disabled),
            "offline" => Ok(Self::Offline),
            "adversarial" => Ok(Self::Adversarial),
            other => Err(ConfigError::Invalid {
                name: "MEMORY_LLM",
                value: other.into(),
                reason: "expected bedrock, none, offline or adversarial".into(),
            }),
        }
    }
}

/// A number read like [`parsed_or`] that must lie in `range`.
pub fn in_range<T>(name: &'static str, default: T, range: std::ops::RangeInclusive<T>) -> Result<T, ConfigError>
where
    T: FromStr + PartialOrd + std::fmt::Display,
    T::Err: std::fmt::Display,
{
    let value = parsed_or(name, default)?;
    if range.contains(&value) {
        Ok(value)
    } else {
        let reason = format!("must be between {} and {}", range.start(), range.end());
        Err(ConfigError::Invalid { name, value: value.to_string(), reason })
    }
}
