//! Builds the application state from the environment, once per process.

use std::sync::Arc;

use memory_core::{
    config::{self, RetrievalConfig},
    retrieval::Retriever,
    services::Services,
};

use crate::{AppState, auth::Authenticator};

/// Builds the shared services and the retriever. `behind_api_gateway` selects API Gateway claims over local JWT
/// verification.
pub async fn state_from_env(behind_api_gateway: bool) -> anyhow::Result<AppState> {
    let services = Services::from_env().await?;
    let retriever = Retriever::new(services.pool, services.embedder, services.llm, RetrievalConfig::from_env()?)
        .with_llm_timeout(services.llm_timeout);
    let auth = if behind_api_gateway {
        Authenticator::ApiGateway {
            api_id: std::env::var("MEMORY_API_ID").ok(),
            stage: std::env::var("MEMORY_API_STAGE").ok(),
        }
    } else {
        Authenticator::LocalJwt { secret: config::required("MEMORY_JWT_SECRET")? }
    };
    Ok(AppState { retriever: Arc::new(retriever), auth: Arc::new(auth) })
}
