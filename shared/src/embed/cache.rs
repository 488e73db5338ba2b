//! An LRU of query embeddings in front of any embedder (queries repeat across turns and agents).

use std::{num::NonZeroUsize, sync::Arc};

use async_trait::async_trait;
use lru::LruCache;
use std::sync::Mutex;

use super::{EmbedError, Embedder};

pub struct CachedEmbedder {
    inner: Arc<dyn Embedder>,
    cache: Mutex<LruCache<String, Arc<Vec<f32>>>>,
}

impl CachedEmbedder {
    pub fn new(inner: Arc<dyn Embedder>, entries: usize) -> Self {
        let capacity = NonZeroUsize::new(entries.max(1)).expect("capacity is at least one");
        Self { inner, cache: Mutex::new(LruCache::new(capacity)) }
    }

    fn cached(&self, text: &str) -> Option<Arc<Vec<f32>>> {
        self.cache.lock().expect("embedding cache lock").get(text).cloned()
    }
}

#[async_trait]
impl Embedder for CachedEmbedder {
    fn dimension(&self) -> usize {
        self.inner.dimension()
    }

    fn model_id(&self) -> &str {
        self.inner.model_id()
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let missing: Vec<String> = texts.iter().filter(|t| self.cached(t).is_none()).cloned().collect();
        if !missing.is_empty() {
            let vectors = self.inner.embed(&missing).await?;
            let mut cache = self.cache.lock().expect("embedding cache lock");
            for (text, vector) in missing.into_iter().zip(vectors) {
                cache.put(text, Arc::new(vector));
            }
        }
        let mut cache = self.cache.lock().expect("embedding cache lock");
        texts
            .iter()
            .map(|t| {
                cache
                    .get(t)
                    .map(|v| v.as_ref().clone())
                    .ok_or_else(|| EmbedError::Inference("embedding evicted before use".into()))
            })
            .collect()
    }
}
