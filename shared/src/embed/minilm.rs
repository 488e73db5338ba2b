//! all-MiniLM-L6-v2 run in process with candle: BERT, mean pooling over the attention mask, L2 normalisation,
//! at most 256 word pieces: the same vectors as sentence-transformers.

use std::{path::PathBuf, sync::Arc};

use async_trait::async_trait;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config, DTYPE};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};
use tokio::sync::OnceCell;

use super::{EmbedError, Embedder};

/// sentence-transformers' max_seq_length for this model.
const MAX_WORD_PIECES: usize = 256;
/// Texts embedded per forward pass.
const BATCH: usize = 32;

struct Loaded {
    model: BertModel,
    tokenizer: Tokenizer,
}

/// The model is read from `model_dir` on first use, once per process.
pub struct MiniLm {
    model_dir: PathBuf,
    dimension: usize,
    loaded: OnceCell<Arc<Loaded>>,
}

impl MiniLm {
    /// Reads only config.json now (for the dimension); weights load lazily.
    pub fn new(model_dir: impl Into<PathBuf>) -> Result<Self, EmbedError> {
        let model_dir = model_dir.into();
        let config = read_config(&model_dir)?;
        Ok(Self { model_dir, dimension: config.hidden_size, loaded: OnceCell::new() })
    }

    async fn loaded(&self) -> Result<Arc<Loaded>, EmbedError> {
        self.loaded
            .get_or_try_init(|| {
                let dir = self.model_dir.clone();
                async move {
                    tokio::task::spawn_blocking(move || load(&dir).map(Arc::new))
                        .await
                        .map_err(|e| EmbedError::Load(e.to_string()))?
                }
            })
            .await
            .cloned()
    }
}

fn read_config(dir: &std::path::Path) -> Result<Config, EmbedError> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| EmbedError::Load(format!("{}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| EmbedError::Load(format!("{}: {e}", path.display())))
}

fn load(dir: &std::path::Path) -> Result<Loaded, EmbedError> {
    let config = read_config(dir)?;
    let mut tokenizer =
        Tokenizer::from_file(dir.join("tokenizer.json")).map_err(|e| EmbedError::Load(e.to_string()))?;
    tokenizer
        .with_truncation(Some(TruncationParams { max_length: MAX_WORD_PIECES, ..Default::default() }))
        .map_err(|e| EmbedError::Load(e.to_string()))?;
    tokenizer.with_padding(Some(PaddingParams { strategy: PaddingStrategy::BatchLongest, ..Default::default() }));
    let weights = dir.join("model.safetensors");
    // SAFETY: the weights file is opened read-only and not modified while mapped.
    let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[weights], DTYPE, &Device::Cpu) }
        .map_err(|e| EmbedError::Load(e.to_string()))?;
    let model = BertModel::load(vb, &config).map_err(|e| EmbedError::Load(e.to_string()))?;
    Ok(Loaded { model, tokenizer })
}

fn embed_batch(loaded: &Loaded, texts: &[String]) -> candle_core::Result<Vec<Vec<f32>>> {
    let encodings =
        loaded.tokenizer.encode_batch(texts.to_vec(), true).map_err(|e| candle_core::Error::Msg(e.to_string()))?;
    let device = &Device::Cpu;
    let rows = |f: fn(&tokenizers::Encoding) -> &[u32]| -> candle_core::Result<Tensor> {
        let tensors = encodings.iter().map(|e| Tensor::new(f(e), device)).collect::<candle_core::Result<Vec<_>>>()?;
        Tensor::stack(&tensors, 0)
    };
    let ids = rows(|e| e.get_ids())?;
    let type_ids = rows(|e| e.get_type_ids())?;
    let mask = rows(|e| e.get_attention_mask())?;
    let hidden = loaded.model.forward(&ids, &type_ids, Some(&mask))?; // [batch, tokens, dim]
    let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?; // [batch, tokens, 1]
    let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
    let counts = mask.sum(1)?.clamp(1e-9, f64::MAX)?;
    let mean = summed.broadcast_div(&counts)?;
    let norms = mean.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12, f64::MAX)?;
    mean.broadcast_div(&norms)?.to_vec2::<f32>()
}

#[async_trait]
impl Embedder for MiniLm {
    fn dimension(&self) -> usize {
        self.dimension
    }

    fn model_id(&self) -> &str {
        "sentence-transformers/all-MiniLM-L6-v2"
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let loaded = self.loaded().await?;
        let texts = texts.to_vec();
        tokio::task::spawn_blocking(move || {
            let mut out = Vec::with_capacity(texts.len());
            for chunk in texts.chunks(BATCH) {
                out.extend(embed_batch(&loaded, chunk).map_err(|e| EmbedError::Inference(e.to_string()))?);
            }
            Ok(out)
        })
        .await
        .map_err(|e| EmbedError::Inference(e.to_string()))?
    }
}
