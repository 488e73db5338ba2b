//! all-MiniLM-L6-v2 run in process by ONNX Runtime: BERT, mean pooling over the attention mask and L2
//! normalisation inside the graph, at most 256 word pieces: the same vectors as sentence-transformers.
//!
//! The model directory holds `model.onnx`, its weights `model.onnx.data` and their table of contents
//! `weights.json` (written from the published weights by `scripts/minilm_to_onnx.py`), `tokenizer.json`,
//! `config.json` and `libonnxruntime.so`, loaded at run time (nothing is linked at build time).

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use async_trait::async_trait;
use ort::{
    environment::Environment,
    session::{
        Session,
        builder::{GraphOptimizationLevel, SessionBuilder},
    },
    value::TensorRef,
};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};
use tokio::sync::{OnceCell, Semaphore};

use super::{EmbedError, Embedder, load_error, weights::SharedWeights};

/// sentence-transformers' max_seq_length for this model.
const MAX_WORD_PIECES: usize = 256;
/// Most texts embedded per forward pass.
const BATCH: usize = 32;
/// The ONNX Runtime library, inside the model directory.
const RUNTIME_LIBRARY: &str = "libonnxruntime.so";

/// Single-threaded sessions (one per core by default) sharing one mapping of the weights and one packed copy of
/// the matrices: concurrent requests (and a large batch's passes) run side by side, and no pass pays for
/// synchronising threads. Measured against one two-thread session on 2 vCPUs: 578 against 393 embeddings/s of 16
/// word pieces (docs/decisions.md).
struct Loaded {
    idle: Mutex<Vec<Session>>,
    /// One permit per idle session.
    permits: Semaphore,
    tokenizer: Tokenizer,
    /// The tensors and the packed-matrix container the sessions share.
    _weights: SharedWeights,
    /// SHA-256 of the files that make the embedding: the graph, its tensors, the tokenizer.
    digest: String,
}

impl Loaded {
    /// Runs `pass` on an idle session, waiting for one when all are busy. The session and its permit return to
    /// the pool together when the pass ends, even if the caller stopped waiting; a pass that panics takes both.
    async fn run<T: Send + 'static>(
        self: &Arc<Self>,
        pass: impl FnOnce(&mut Session, &Tokenizer) -> T + Send + 'static,
    ) -> Result<T, EmbedError> {
        self.permits.acquire().await.map_err(|e| EmbedError::Inference(e.to_string()))?.forget();
        let mut session = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop().expect("a permit per idle session");
        let loaded = self.clone();
        tokio::task::spawn_blocking(move || {
            let out = pass(&mut session, &loaded.tokenizer);
            loaded.idle.lock().unwrap_or_else(|p| p.into_inner()).push(session);
            loaded.permits.add_permits(1);
            out
        })
        .await
        .map_err(|e| EmbedError::Inference(e.to_string()))
    }
}

/// The model is read from `model_dir` on first use (or `warm_up`), once per process.
pub struct MiniLm {
    model_dir: PathBuf,
    dimension: usize,
    sessions: usize,
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
        Ok(Self {
            model_dir,
            dimension: config.hidden_size,
            sessions: Self::default_sessions(),
            loaded: OnceCell::new(),
        })
    }

    /// One session per core.
    pub fn default_sessions() -> usize {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }

    /// Runs `sessions` single-threaded sessions (at least one); they share the weights, so each beyond the first
    /// adds only its working memory.
    pub fn with_sessions(mut self, sessions: usize) -> Self {
        self.sessions = sessions.max(1);
        self
    }

    async fn loaded(&self) -> Result<Arc<Loaded>, EmbedError> {
        self.loaded
            .get_or_try_init(|| {
                let (dir, sessions) = (self.model_dir.clone(), self.sessions);
                async move {
                    tokio::task::spawn_blocking(move || load(&dir, sessions).map(Arc::new))
                        .await
                        .map_err(|e| EmbedError::Load(e.to_string()))?
                }
            })
            .await
            .cloned()
    }
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

fn load(dir: &Path, sessions: usize) -> Result<Loaded, EmbedError> {
    let environment = environment(dir)?;
    // Encoding runs on the session's thread: the tokenizer starts no thread pool of its own.
    tokenizers::utils::parallelism::set_parallelism(false);
    let tokenizer_path = dir.join("tokenizer.json");
    let mut tokenizer = Tokenizer::from_file(&tokenizer_path).map_err(|e| load_error(&tokenizer_path, e))?;
    tokenizer
        .with_truncation(Some(TruncationParams { max_length: MAX_WORD_PIECES, ..Default::default() }))
        .map_err(|e| EmbedError::Load(e.to_string()))?;
    tokenizer.with_padding(Some(PaddingParams { strategy: PaddingStrategy::BatchLongest, ..Default::default() }));
    let model = dir.join("model.onnx");
    let digest = digest_of(dir)?;
    let weights = SharedWeights::load(dir)?;
    let options = || -> ort::Result<SessionBuilder> {
        Ok(Session::builder(environment)?
            .with_optimization_level(GraphOptimizationLevel::All)?
            .with_intra_threads(1)?
            .with_inter_threads(1)?)
    };
    let configure = || weights.share_with(options().map_err(|e| load_error(&model, e))?);
    // Built side by side: each session optimises the graph on its own core.
    let idle = std::thread::scope(|scope| {
        let building: Vec<_> = (0..sessions)
            .map(|_| scope.spawn(|| configure()?.commit_from_file(&model).map_err(|e| load_error(&model, e))))
            .collect();
        building.into_iter().map(|b| b.join().expect("session builder")).collect::<Result<Vec<_>, _>>()
    });
    // Whether or not every session was built, packing is over.
    weights.release_pages();
    let idle = idle?;
    Ok(Loaded { idle: Mutex::new(idle), permits: Semaphore::new(sessions), tokenizer, _weights: weights, digest })
}

/// SHA-256 over the model directory's files by name (the configuration, the graph, its tensors, the tokenizer), the
/// runtime library and hidden files aside; streamed, not held.
fn digest_of(dir: &Path) -> Result<String, EmbedError> {
    use sha2::{Digest, Sha256};
    let listed = std::fs::read_dir(dir).map_err(|e| load_error(dir, e))?;
    let mut paths: Vec<PathBuf> = listed.filter_map(|entry| entry.ok().map(|e| e.path())).collect();
    paths.retain(|p| {
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        p.is_file() && !name.starts_with('.') && name != RUNTIME_LIBRARY
    });
    paths.sort();
    let mut hasher = Sha256::new();
    for path in paths {
        hasher.update(path.file_name().expect("a file").as_encoded_bytes());
        let mut file = std::fs::File::open(&path).map_err(|e| load_error(&path, e))?;
        std::io::copy(&mut file, &mut hasher).map_err(|e| load_error(&path, e))?;
    }
    Ok(format!("{:x}", hasher.finalize()))
}

/// Texts per pass: as many passes as sessions, or a multiple of them, all of about one size, so no session idles
/// through a short last pass (100 texts on 2 sessions: 4 passes of 25, not 32, 32, 32 and 4).
fn pass_size(texts: usize, sessions: usize) -> usize {
    let passes = texts.div_ceil(BATCH).next_multiple_of(sessions.max(1)).min(texts).max(1);
    texts.div_ceil(passes).max(1)
}

fn embed_batch(session: &mut Session, tokenizer: &Tokenizer, texts: Vec<String>) -> Result<Vec<Vec<f32>>, String> {
    let count = texts.len();
    let encodings = tokenizer.encode_batch(texts, true).map_err(|e| e.to_string())?;
    let tokens = encodings.first().map_or(0, |e| e.get_ids().len());
    let flat = |f: fn(&tokenizers::Encoding) -> &[u32]| -> Vec<i64> {
        encodings.iter().flat_map(|e| f(e).iter().map(|&v| i64::from(v))).collect()
    };
    let (ids, mask) = (flat(|e| e.get_ids()), flat(|e| e.get_attention_mask()));
    let shape = [count, tokens];
    let inputs = ort::inputs![
        "input_ids" => TensorRef::from_array_view((shape, &ids[..])).map_err(|e| e.to_string())?,
        "attention_mask" => TensorRef::from_array_view((shape, &mask[..])).map_err(|e| e.to_string())?,
    ];
    let outputs = session.run(inputs).map_err(|e| e.to_string())?;
    let (shape, values) = outputs["sentence_embedding"].try_extract_tensor::<f32>().map_err(|e| e.to_string())?;
    match **shape {
        [rows, dimension] if rows as usize == count && dimension > 0 => {
            Ok(values.chunks(dimension as usize).map(<[f32]>::to_vec).collect())
        }
        _ => Err(format!("the model returned shape {shape:?} for {count} texts")),
    }
}

/// Embeds in passes of at most [`BATCH`] texts of similar length (little of each pass is padding), the passes side
/// by side on the idle sessions, and returns the vectors in the caller's order.
async fn embed_all(loaded: &Arc<Loaded>, sessions: usize, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
    let mut order: Vec<usize> = (0..texts.len()).collect();
    order.sort_by_key(|&i| texts[i].len());
    let mut passes = tokio::task::JoinSet::new();
    for chunk in order.chunks(pass_size(texts.len(), sessions)) {
        let (chunk, batch) = (chunk.to_vec(), chunk.iter().map(|&i| texts[i].clone()).collect::<Vec<_>>());
        let loaded = loaded.clone();
        passes.spawn(async move {
            let vectors = loaded.run(move |session, tokenizer| embed_batch(session, tokenizer, batch)).await?;
            vectors.map(|v| (chunk, v)).map_err(EmbedError::Inference)
        });
    }
    let mut out = vec![Vec::new(); texts.len()];
    while let Some(pass) = passes.join_next().await {
        // `embed_batch` returns one vector per text of its pass, or an error.
        let (chunk, vectors) = pass.map_err(|e| EmbedError::Inference(e.to_string()))??;
        for (i, vector) in chunk.into_iter().zip(vectors) {
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

    fn weights_digest(&self) -> Option<String> {
        self.loaded.get().map(|loaded| loaded.digest.clone())
    }

    /// Loads the model and runs a first pass on every session (one text per session: one pass each).
    async fn warm_up(&self) -> Result<(), EmbedError> {
        let texts = vec!["warm up".to_string(); self.sessions];
        embed_all(&self.loaded().await?, self.sessions, &texts).await.map(drop)
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        embed_all(&self.loaded().await?, self.sessions, texts).await
    }
}

#[cfg(test)]
mod tests {
    use super::{BATCH, pass_size};

    #[test]
    fn passes_are_even_and_fill_every_session() {
        // (texts, sessions) → texts per pass.
        for (texts, sessions, size) in [(100, 2, 25), (70, 2, 18), (64, 2, 32), (200, 2, 25), (10, 2, 5), (1, 2, 1)] {
            assert_eq!(pass_size(texts, sessions), size, "{texts} texts on {sessions} sessions");
        }
        assert_eq!(pass_size(33, 1), 17);
        assert_eq!(pass_size(32, 1), 32);
        assert!((1..500).all(|n| pass_size(n, 3) <= BATCH));
    }
}
