//! all-MiniLM-L6-v2 run in process by ONNX Runtime: BERT, mean pooling over the attention mask and L2
//! normalisation inside the graph, at most 256 word pieces: the same vectors as sentence-transformers.
//!
//! The model directory holds `model.onnx` (written from the published weights by `scripts/minilm_to_onnx.py`),
//! `tokenizer.json`, `config.json` and `libonnxruntime.so`, loaded at run time (nothing is linked at build time).

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use async_trait::async_trait;
use ort::{
    environment::Environment,
    session::{Session, builder::GraphOptimizationLevel},
    value::TensorRef,
};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};
use tokio::sync::OnceCell;

use super::{EmbedError, Embedder};

/// sentence-transformers' max_seq_length for this model.
const MAX_WORD_PIECES: usize = 256;
/// Texts embedded per forward pass.
const BATCH: usize = 32;
/// The ONNX Runtime library, inside the model directory.
pub const RUNTIME_LIBRARY: &str = "libonnxruntime.so";

struct Loaded {
    /// ONNX Runtime's `Run` takes the session mutably; one forward pass at a time uses every core.
    session: Mutex<Session>,
    tokenizer: Tokenizer,
}

/// The model is read from `model_dir` on first use (or `warm_up`), once per process.
pub struct MiniLm {
    model_dir: PathBuf,
    dimension: usize,
    loaded: OnceCell<Arc<Loaded>>,
}

#[derive(serde::Deserialize)]
struct Config {
    hidden_size: usize,
}

impl MiniLm {
    /// Reads only config.json now (for the dimension); the model loads lazily.
    pub fn new(model_dir: impl Into<PathBuf>) -> Result<Self, EmbedError> {
        let model_dir = model_dir.into();
        let path = model_dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|e| load_error(&path, e))?;
        let config: Config = serde_json::from_str(&text).map_err(|e| load_error(&path, e))?;
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

fn load_error(path: &Path, e: impl std::fmt::Display) -> EmbedError {
    EmbedError::Load(format!("{}: {e}", path.display()))
}

/// ONNX Runtime allows one environment per process: the first model directory's library serves every model. A
/// failed attempt is not remembered, so a later one may succeed.
fn environment(dir: &Path) -> Result<&'static Environment, EmbedError> {
    static ENVIRONMENT: Mutex<Option<&'static Environment>> = Mutex::new(None);
    let mut slot = ENVIRONMENT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(environment) = *slot {
        return Ok(environment);
    }
    let library = dir.join(RUNTIME_LIBRARY);
    let builder = ort::init_from(&library).map_err(|e| load_error(&library, e))?;
    let environment: &'static Environment =
        Box::leak(Box::new(builder.with_name("memory").build().map_err(|e| load_error(&library, e))?));
    *slot = Some(environment);
    Ok(environment)
}

fn load(dir: &Path) -> Result<Loaded, EmbedError> {
    let environment = environment(dir)?;
    let tokenizer_path = dir.join("tokenizer.json");
    let mut tokenizer = Tokenizer::from_file(&tokenizer_path).map_err(|e| load_error(&tokenizer_path, e))?;
    tokenizer
        .with_truncation(Some(TruncationParams { max_length: MAX_WORD_PIECES, ..Default::default() }))
        .map_err(|e| EmbedError::Load(e.to_string()))?;
    tokenizer.with_padding(Some(PaddingParams { strategy: PaddingStrategy::BatchLongest, ..Default::default() }));
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let model = dir.join("model.onnx");
    let configure = || -> ort::Result<ort::session::builder::SessionBuilder> {
        Ok(Session::builder(environment)?
            .with_optimization_level(GraphOptimizationLevel::All)?
            .with_intra_threads(threads)?
            .with_inter_threads(1)?
            // Idle pool threads sleep instead of spinning: the CPU goes to PostgreSQL and the other requests.
            .with_intra_op_spinning(false)?)
    };
    let session = configure()
        .map_err(|e| EmbedError::Load(e.to_string()))?
        .commit_from_file(&model)
        .map_err(|e| load_error(&model, e))?;
    Ok(Loaded { session: Mutex::new(session), tokenizer })
}

fn embed_batch(loaded: &Loaded, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
    let encodings = loaded.tokenizer.encode_batch(texts.to_vec(), true).map_err(|e| e.to_string())?;
    let tokens = encodings.first().map_or(0, |e| e.get_ids().len());
    let flat = |f: fn(&tokenizers::Encoding) -> &[u32]| -> Vec<i64> {
        encodings.iter().flat_map(|e| f(e).iter().map(|&v| i64::from(v))).collect()
    };
    let (ids, mask) = (flat(|e| e.get_ids()), flat(|e| e.get_attention_mask()));
    let shape = [texts.len(), tokens];
    let inputs = ort::inputs![
        "input_ids" => TensorRef::from_array_view((shape, &ids[..])).map_err(|e| e.to_string())?,
        "attention_mask" => TensorRef::from_array_view((shape, &mask[..])).map_err(|e| e.to_string())?,
    ];
    let mut session = loaded.session.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let outputs = session.run(inputs).map_err(|e| e.to_string())?;
    let (_, values) = outputs["sentence_embedding"].try_extract_tensor::<f32>().map_err(|e| e.to_string())?;
    let dimension = values.len() / texts.len().max(1);
    Ok(values.chunks(dimension).map(<[f32]>::to_vec).collect())
}

/// Embeds in passes of [`BATCH`] texts of similar length (little of each pass is padding), in the caller's order.
fn embed_all(loaded: &Loaded, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
    let mut order: Vec<usize> = (0..texts.len()).collect();
    order.sort_by_key(|&i| texts[i].len());
    let mut out = vec![Vec::new(); texts.len()];
    for chunk in order.chunks(BATCH) {
        let batch: Vec<String> = chunk.iter().map(|&i| texts[i].clone()).collect();
        for (&i, vector) in chunk.iter().zip(embed_batch(loaded, &batch)?) {
            out[i] = vector;
        }
    }
    Ok(out)
}

#[async_trait]
impl Embedder for MiniLm {
    fn dimension(&self) -> usize {
        self.dimension
    }

    fn model_id(&self) -> &str {
        "sentence-transformers/all-MiniLM-L6-v2"
    }

    async fn warm_up(&self) -> Result<(), EmbedError> {
        self.embed_one("warm up").await.map(|_| ())
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let loaded = self.loaded().await?;
        let texts = texts.to_vec();
        tokio::task::spawn_blocking(move || embed_all(&loaded, &texts).map_err(EmbedError::Inference))
            .await
            .map_err(|e| EmbedError::Inference(e.to_string()))?
    }
}
