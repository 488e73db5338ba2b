//! Builds the application state from the environment, once per process.

use std::sync::Arc;

use anyhow::Context;
use memory_core::{
    config::{self, DatabaseConfig, EmbedderConfig, LlmConfig, RetrievalConfig},
    db,
    embed::{self, Embedder, MiniLm, TitanEmbedder},
    llm::{BedrockLlm, Llm},
    retrieval::Retriever,
    store,
};

use crate::{AppState, auth::Authenticator};

/// Reads configuration, builds the pool, embedder, LLM and retriever, and checks the embedder's dimension
/// against the schema. `behind_api_gateway` selects API Gateway claims over local JWT verification.
pub async fn state_from_env(behind_api_gateway: bool) -> anyhow::Result<AppState> {
    let pool = db::pool(&DatabaseConfig::from_env()?)?;
    let embedder_config = EmbedderConfig::from_env()?;
    let llm_config = LlmConfig::from_env()?;
    let retrieval = RetrievalConfig::from_env()?;

    let aws = match (&embedder_config, &llm_config) {
        (EmbedderConfig::Titan { .. }, _) | (_, LlmConfig::Bedrock { .. }) => {
            Some(aws_sdk_bedrockruntime::Client::new(
                &aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await,
            ))
        }
        _ => None,
    };
    let embedder: Arc<dyn Embedder> = match embedder_config {
        EmbedderConfig::MiniLm { model_dir } => Arc::new(MiniLm::new(model_dir)?),
        EmbedderConfig::Titan { model_id, dimensions } => {
            Arc::new(TitanEmbedder::new(aws.clone().context("Bedrock client")?, model_id, dimensions))
        }
    };
    let dimension = store::embedding_dimension(&pool).await.context("reading memory.embedding's dimension")?;
    embed::ensure_dimension(embedder.as_ref(), dimension)?;

    let (llm, llm_timeout): (Option<Arc<dyn Llm>>, _) = match llm_config {
        LlmConfig::Bedrock { model_id, timeout } => {
            (Some(Arc::new(BedrockLlm::new(aws.context("Bedrock client")?, model_id))), timeout)
        }
        LlmConfig::Disabled => (None, std::time::Duration::from_secs(2)),
    };
    let retriever = Retriever::new(pool, embedder, llm, retrieval).with_llm_timeout(llm_timeout);

    let auth = if behind_api_gateway {
        Authenticator::ApiGateway
    } else {
        Authenticator::LocalJwt { secret: config::required("MEMORY_JWT_SECRET")? }
    };
    Ok(AppState { retriever: Arc::new(retriever), auth: Arc::new(auth) })
}
