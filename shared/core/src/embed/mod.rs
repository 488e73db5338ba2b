//! Text embeddings: the [`Embedder`] trait, the in-process MiniLM model and the Bedrock Titan adapter (retrieval
//! keeps query embeddings in its own per-organisation cache, `retrieval::query_cache`).

mod minilm;
mod titan;
mod weights;

use std::time::Duration;

use async_trait::async_trait;

pub use minilm::MiniLm;
pub use titan::TitanEmbedder;

#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error("embedding model could not be loaded: {0}")]
    Load(String),
    #[error("embedding inference failed: {0}")]
    Inference(String),
    #[error("embedding service unavailable: {0}")]
    Unavailable(String),
}

/// A model file that could not be read, named in the error.
fn load_error(path: &std::path::Path, e: impl std::fmt::Display) -> EmbedError {
    EmbedError::Load(format!("{}: {e}", path.display()))
}

/// Turns texts into unit-length vectors of a fixed dimension.
#[async_trait]
pub trait Embedder: Send + Sync {
    /// The length of every vector this embedder returns.
    fn dimension(&self) -> usize;
    /// A stable name of the model (recorded for reproducibility).
    fn model_id(&self) -> &str;
    /// A digest of the weights the model runs with (SHA-256, hex), once loaded; None for a model served elsewhere
    /// (its id names its version).
    fn weights_digest(&self) -> Option<String> {
        None
    }
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError>;

    /// Prepares the model (loads it, runs one pass) so the first request does not pay for it. A no-op for a
    /// remote model.
    async fn warm_up(&self) -> Result<(), EmbedError> {
        Ok(())
    }

    async fn embed_one(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let mut vectors = self.embed(&[text.to_string()]).await?;
        vectors.pop().ok_or_else(|| EmbedError::Inference("no vector returned".into()))
    }

    /// [`Embedder::embed`] within `budget`; over it, `Unavailable`. Another number of vectors than of texts is an
    /// inference failure, so no caller pairs texts with vectors that are not theirs or drops a text.
    async fn embed_within(&self, texts: &[String], budget: Duration) -> Result<Vec<Vec<f32>>, EmbedError> {
        let vectors = match tokio::time::timeout(budget, self.embed(texts)).await {
            Ok(vectors) => vectors?,
            Err(_) => return Err(EmbedError::Unavailable(format!("embedding took longer than {budget:?}"))),
        };
        if vectors.len() != texts.len() {
            return Err(EmbedError::Inference(format!("{} vectors for {} texts", vectors.len(), texts.len())));
        }
        Ok(vectors)
    }
}

/// Refuses an embedder whose dimension differs from the `memory.embedding` column's.
pub fn ensure_dimension(embedder: &dyn Embedder, column_dimension: i32) -> Result<(), EmbedError> {
    if embedder.dimension() as i64 == column_dimension as i64 {
        Ok(())
    } else {
        Err(EmbedError::Load(format!(
            "embedder {} produces {}-dimensional vectors but memory.embedding is vector({column_dimension}); \
             choose a matching model or migrate the column",
            embedder.model_id(),
            embedder.dimension()
        )))
    }
}

/// L2-normalises in place (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// Cosine similarity of two vectors.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    if na == 0.0 || nb == 0.0 { 0.0 } else { dot / (na * nb) }
}
