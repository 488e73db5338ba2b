//! Typed configuration read from the environment. A missing or malformed variable is an error naming it.

use std::{path::PathBuf, str::FromStr, time::Duration};

use secrecy::SecretString;

use crate::retrieval::ranking::RankingWeights;

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
}

impl LlmConfig {
    pub fn from_env() -> Result<Self, ConfigError> {
        match parsed_or("MEMORY_LLM", "bedrock".to_string())?.as_str() {
            "bedrock" => Ok(Self::Bedrock {
                model_id: parsed_or("MEMORY_LLM_MODEL_ID", "anthropic.claude-3-5-haiku-20241022-v1:0".to_string())?,
                timeout: Duration::from_millis(parsed_or("MEMORY_LLM_TIMEOUT_MS", 2000)?),
            }),
            "none" => Ok(Self::Disabled),
            "offline" => Ok(Self::Offline),
            other => Err(ConfigError::Invalid {
                name: "MEMORY_LLM",
                value: other.into(),
                reason: "expected bedrock, none or offline".into(),
            }),
        }
    }
}

/// Tunables of the retrieval pipeline; the defaults are the spec's values.
#[derive(Debug, Clone)]
pub struct RetrievalConfig {
    /// The Stage 4 formula (`MEMORY_RANKING`: `spec` or `relevance`).
    pub ranking: crate::retrieval::ranking::RankingFormula,
    pub weights: RankingWeights,
    /// Stage 1 candidate count (nearest neighbours and keyword matches, fused).
    pub candidate_limit: usize,
    /// Rows each Stage 1 branch contributes (vector neighbours; keyword matches). 50 scored as well as 100 on
    /// SciFact and REALTALK and cut the 1M benchmark's end-to-end p95 by 10-20% (docs/benchmarks.md).
    pub branch_depth: usize,
    /// Largest max_results a caller may ask for.
    pub max_results_cap: usize,
    /// Below this top score the taxonomy filter is dropped and the full candidate set re-ranked.
    pub min_top_score: f64,
    /// Sessions whose cooldown state is kept per warm instance (least recently used are dropped).
    pub cooldown_sessions: usize,
    /// Bytes of query embeddings kept in process (per organisation and text).
    pub query_cache_bytes: usize,
    /// Time budgets: the query embedding, and each search branch's statement timeout. Over budget, a request goes
    /// on degraded (keyword only, or without the branch) rather than slower.
    pub embedding_budget_ms: u64,
    pub vector_budget_ms: u64,
    pub keyword_budget_ms: u64,
    /// The keyword branch's BM25 parameters (`MEMORY_BM25_K1`, `MEMORY_BM25_B`).
    pub bm25: crate::store::candidates::Bm25,
}

impl Default for RetrievalConfig {
    fn default() -> Self {
        Self {
            ranking: Default::default(),
            weights: RankingWeights::default(),
            candidate_limit: 500,
            branch_depth: 50,
            max_results_cap: 100,
            min_top_score: 0.35,
            cooldown_sessions: 10_000,
            query_cache_bytes: 8 << 20,
            embedding_budget_ms: 2_000,
            vector_budget_ms: 2_000,
            keyword_budget_ms: 2_000,
            bm25: Default::default(),
        }
    }
}

impl RetrievalConfig {
    pub fn from_env() -> Result<Self, ConfigError> {
        let d = Self::default();
        Ok(Self {
            // The service ranks by relevance unless told otherwise: on SciFact and REALTALK it scores as hybrid search
            // does, where the spec's formula trails it (docs/benchmarks.md); `Default` keeps the spec's formula.
            ranking: parsed_or("MEMORY_RANKING", crate::retrieval::ranking::RankingFormula::Relevance)?,
            weights: RankingWeights {
                cosine: parsed_or("MEMORY_RANK_WEIGHT_COSINE", d.weights.cosine)?,
                recency: parsed_or("MEMORY_RANK_WEIGHT_RECENCY", d.weights.recency)?,
                confidence: parsed_or("MEMORY_RANK_WEIGHT_CONFIDENCE", d.weights.confidence)?,
            },
            candidate_limit: parsed_or("MEMORY_CANDIDATE_LIMIT", d.candidate_limit)?,
            branch_depth: parsed_or("MEMORY_BRANCH_DEPTH", d.branch_depth)?,
            max_results_cap: parsed_or("MEMORY_MAX_RESULTS_CAP", d.max_results_cap)?,
            min_top_score: parsed_or("MEMORY_MIN_TOP_SCORE", d.min_top_score)?,
            cooldown_sessions: parsed_or("MEMORY_COOLDOWN_SESSIONS", d.cooldown_sessions)?,
            query_cache_bytes: parsed_or("MEMORY_QUERY_CACHE_BYTES", d.query_cache_bytes)?,
            embedding_budget_ms: parsed_or("MEMORY_EMBEDDING_BUDGET_MS", d.embedding_budget_ms)?,
            vector_budget_ms: parsed_or("MEMORY_VECTOR_BUDGET_MS", d.vector_budget_ms)?,
            keyword_budget_ms: parsed_or("MEMORY_KEYWORD_BUDGET_MS", d.keyword_budget_ms)?,
            bm25: crate::store::candidates::Bm25 {
                k1: in_range("MEMORY_BM25_K1", d.bm25.k1, 0.0..=10.0)?,
                b: in_range("MEMORY_BM25_B", d.bm25.b, 0.0..=1.0)?,
            },
        })
    }
}

/// A number read like [`parsed_or`] that must lie in `range`.
fn in_range(name: &'static str, default: f64, range: std::ops::RangeInclusive<f64>) -> Result<f64, ConfigError> {
    let value = parsed_or(name, default)?;
    if range.contains(&value) {
        Ok(value)
    } else {
        let reason = format!("must be between {} and {}", range.start(), range.end());
        Err(ConfigError::Invalid { name, value: value.to_string(), reason })
    }
}
