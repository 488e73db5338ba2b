//! Amazon Titan Text Embeddings (v2) through Bedrock's InvokeModel.

use async_trait::async_trait;
use aws_sdk_bedrockruntime::{Client, primitives::Blob};
use serde::Deserialize;

use super::{EmbedError, Embedder};

pub struct TitanEmbedder {
    client: Client,
    model_id: String,
    dimensions: usize,
}

#[derive(Deserialize)]
struct TitanResponse {
    embedding: Vec<f32>,
}

impl TitanEmbedder {
    pub fn new(client: Client, model_id: impl Into<String>, dimensions: usize) -> Self {
        Self { client, model_id: model_id.into(), dimensions }
    }
}

#[async_trait]
impl Embedder for TitanEmbedder {
    fn dimension(&self) -> usize {
        self.dimensions
    }

    fn model_id(&self) -> &str {
        &self.model_id
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut out = Vec::with_capacity(texts.len());
        for text in texts {
            let body = serde_json::json!({ "inputText": text, "dimensions": self.dimensions, "normalize": true });
            let response = self
                .client
                .invoke_model()
                .model_id(&self.model_id)
                .content_type("application/json")
                .accept("application/json")
                .body(Blob::new(body.to_string()))
                .send()
                .await
                .map_err(|e| {
                    EmbedError::Unavailable(aws_sdk_bedrockruntime::error::DisplayErrorContext(e).to_string())
                })?;
            let parsed: TitanResponse = serde_json::from_slice(response.body.as_ref())
                .map_err(|e| EmbedError::Inference(format!("malformed Titan response: {e}")))?;
            if parsed.embedding.len() != self.dimensions {
                return Err(EmbedError::Inference(format!(
                    "Titan returned {} dimensions, expected {}",
                    parsed.embedding.len(),
                    self.dimensions
                )));
            }
            out.push(parsed.embedding);
        }
        Ok(out)
    }
}
