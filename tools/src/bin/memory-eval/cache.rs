//! Document embeddings cached on disk across runs.

use std::{
    collections::HashMap,
    io::Write,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use async_trait::async_trait;
use memory_core::embed::{EmbedError, Embedder, MiniLm};
use sha2::{Digest, Sha256};

/// The model with document embeddings cached on disk (records of sha256(text) followed by the vector), so a
/// dataset is embedded once across runs.
pub struct DiskCachedEmbedder {
    model: Arc<MiniLm>,
    path: PathBuf,
    vectors: Mutex<HashMap<[u8; 32], Vec<f32>>>,
}

impl DiskCachedEmbedder {
    pub fn open(model: Arc<MiniLm>, dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let dim = model.dimension();
        let path = dir.join(format!("{}-{dim}.bin", model.model_id().replace('/', "_")));
        let mut vectors = HashMap::new();
        if let Ok(bytes) = std::fs::read(&path) {
            for chunk in bytes.chunks_exact(32 + dim * 4) {
                let key: [u8; 32] = chunk[..32].try_into()?;
                let v = chunk[32..].chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
                vectors.insert(key, v);
            }
        }
        Ok(Self { model, path, vectors: Mutex::new(vectors) })
    }

    fn key(text: &str) -> [u8; 32] {
        Sha256::digest(text.as_bytes()).into()
    }
}

#[async_trait]
impl Embedder for DiskCachedEmbedder {
    fn dimension(&self) -> usize {
        self.model.dimension()
    }

    fn model_id(&self) -> &str {
        self.model.model_id()
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let missing: Vec<String> = {
            let vectors = self.vectors.lock().expect("cache lock");
            texts.iter().filter(|t| !vectors.contains_key(&Self::key(t))).cloned().collect()
        };
        if !missing.is_empty() {
            let embedded = self.model.embed(&missing).await?;
            let write = |file: &mut std::fs::File, key: &[u8; 32], v: &[f32]| -> std::io::Result<()> {
                file.write_all(key)?;
                v.iter().try_for_each(|x| file.write_all(&x.to_le_bytes()))
            };
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
                .map_err(|e| EmbedError::Inference(format!("embedding cache: {e}")))?;
            let mut vectors = self.vectors.lock().expect("cache lock");
            for (text, v) in missing.iter().zip(embedded) {
                let key = Self::key(text);
                write(&mut file, &key, &v).map_err(|e| EmbedError::Inference(format!("embedding cache: {e}")))?;
                vectors.insert(key, v);
            }
        }
        let vectors = self.vectors.lock().expect("cache lock");
        Ok(texts.iter().map(|t| vectors[&Self::key(t)].clone()).collect())
    }
}
