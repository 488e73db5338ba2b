//! The long-lived clients every function needs, built once per process from the environment: the pool, the
//! embedder (checked against the schema's dimension) and the language model.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use sqlx::PgPool;

use crate::{
    config::{DEFAULT_REQUEST_LLM_TIMEOUT, DEFAULT_WORKER_MODEL_TIMEOUT, EmbedderConfig, LlmConfig},
    db,
    embed::{self, Embedder, MiniLm, TitanEmbedder},
    llm::{BedrockLlm, Llm},
    store,
};

pub struct Services {
    pub pool: PgPool,
    pub embedder: Arc<dyn Embedder>,
    /// None when `MEMORY_LLM=none`.
    pub llm: Option<Arc<dyn Llm>>,
    pub llm_timeout: Duration,
    /// How long a background job waits for one model call (`MEMORY_WORKER_MODEL_TIMEOUT_MS`, default 30 s).
    pub worker_model_timeout: Duration,
}

impl Services {
    pub async fn from_env() -> anyhow::Result<Self> {
        let pool =
            db::pool(&crate::secrets::database_config("MEMORY_DATABASE_URL", "MEMORY_DATABASE_SECRET_ARN").await?)?;
        let embedder_config = EmbedderConfig::from_env()?;
        let llm_config = LlmConfig::from_env()?;

        let needs_bedrock =
            matches!(embedder_config, EmbedderConfig::Titan { .. }) || matches!(llm_config, LlmConfig::Bedrock { .. });
        let bedrock = if needs_bedrock {
            let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
            Some(aws_sdk_bedrockruntime::Client::new(&config))
        } else {
            None
        };
        let embedder: Arc<dyn Embedder> = match embedder_config {
            EmbedderConfig::MiniLm { model_dir, sessions } => Arc::new(MiniLm::new(model_dir)?.with_sessions(sessions)),
            EmbedderConfig::Titan { model_id, dimensions } => {
                Arc::new(TitanEmbedder::new(bedrock.clone().context("Bedrock client")?, model_id, dimensions))
            }
        };
        let dimension = store::embedding_dimension(&pool).await.context("reading memory.embedding's dimension")?;
        embed::ensure_dimension(embedder.as_ref(), dimension)?;

        let (llm, llm_timeout): (Option<Arc<dyn Llm>>, _) = match llm_config {
            LlmConfig::Bedrock { model_id, timeout } => {
                (Some(Arc::new(BedrockLlm::new(bedrock.context("Bedrock client")?, model_id))), timeout)
            }
            LlmConfig::Disabled => (None, DEFAULT_REQUEST_LLM_TIMEOUT),
            LlmConfig::Offline => (Some(Arc::new(crate::llm::OfflineLlm)), DEFAULT_REQUEST_LLM_TIMEOUT),
            LlmConfig::Adversarial => {
                (Some(Arc::new(crate::llm::AdversarialLlm::default())), DEFAULT_REQUEST_LLM_TIMEOUT)
            }
        };
        let worker_model_timeout = Duration::from_millis(crate::config::parsed_or(
            "MEMORY_WORKER_MODEL_TIMEOUT_MS",
            DEFAULT_WORKER_MODEL_TIMEOUT.as_millis() as u64,
        )?);
        Ok(Self { pool, embedder, llm, llm_timeout, worker_model_timeout })
    }

    /// The models of a background job: the language model (required), the embedder, the worker timeout.
    pub fn job_models(&self) -> anyhow::Result<crate::lifecycle::Models> {
        Ok(crate::lifecycle::Models::new(self.require_llm()?, Some(self.embedder.clone()))
            .with_timeout(self.worker_model_timeout))
    }

    /// The language model, for functions that cannot work without one.
    pub fn require_llm(&self) -> anyhow::Result<Arc<dyn Llm>> {
        self.llm.clone().context("this function needs a language model: set MEMORY_LLM=bedrock")
    }
}
