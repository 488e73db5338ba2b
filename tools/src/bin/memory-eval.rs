//! memory-eval: retrieval quality on a BEIR-layout dataset (corpus.jsonl, queries.jsonl, qrels/test.tsv).
//!
//! Each `metadata.group` of the corpus is loaded as its own organisation and a query searches only its group;
//! `metadata.created_at` / `metadata.asked_at` (RFC 3339) feed recency. Prints nDCG@10, Recall@5/10/25/50 and
//! MRR@10 per strategy and can write TREC run files.

use std::{
    collections::{BTreeMap, HashMap},
    io::{BufRead, Write},
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Instant,
};

use anyhow::Context;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use clap::Parser;
use memory_core::{
    embed::{EmbedError, Embedder, MiniLm},
    ingest::{Admission, IngestBatch, IngestMemory, Ingestor, MAX_MEMORIES, VERSION},
    retrieval::{
        RetrievalConfig, RetrievalMode, RetrievalRequest, Retriever, SearchRequest, Strategy, fusion::Fusion,
        ranking::RankingFormula,
    },
    store::SearchFilters,
};
use memory_tools::{scratch, stats};
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use uuid::Uuid;

#[derive(Parser)]
#[command(name = "memory-eval", about = "Retrieval quality of the memory service on a BEIR-layout dataset")]
struct Args {
    /// Directory with corpus.jsonl, queries.jsonl and qrels/test.tsv.
    #[arg(long)]
    dataset: PathBuf,
    /// Comma-separated: vector, keyword, hybrid (RRF), hybrid-weighted-<w> (the weighted blend, vector weight w),
    /// pipeline (the configured Stage 4 formula, agent_query), pipeline-spec, pipeline-relevance, pipeline-passive
    /// (passive injection).
    #[arg(long, default_value = "vector,keyword,hybrid,pipeline,pipeline-spec", value_delimiter = ',')]
    strategies: Vec<String>,
    /// Depth of each ranking (at most 100).
    #[arg(long, default_value_t = 50)]
    k: usize,
    /// Write the metrics as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write one TREC run file per strategy (<strategy>.trec).
    #[arg(long)]
    run_dir: Option<PathBuf>,
    /// Where document embeddings are cached by content hash.
    #[arg(long, default_value = ".local/eval-cache")]
    cache_dir: PathBuf,
    /// Ask every question this much later than its `asked_at` (e.g. `180d`): how the modes' recency ages.
    #[arg(long, value_parser = parse_days)]
    asked_at_offset: Option<chrono::Duration>,
    /// Index without code words (identifiers split and joined; migration 0030), to measure what they add.
    #[arg(long)]
    without_code_words: bool,
    /// The model directory (default MEMORY_MODEL_DIR).
    #[arg(long, env = "MEMORY_MODEL_DIR")]
    model_dir: PathBuf,
}

#[derive(Deserialize)]
struct RawDoc {
    #[serde(rename = "_id")]
    id: String,
    #[serde(default)]
    title: String,
    text: String,
    #[serde(default)]
    metadata: Metadata,
}

#[derive(Deserialize)]
struct RawQuery {
    #[serde(rename = "_id")]
    id: String,
    text: String,
    #[serde(default)]
    metadata: Metadata,
}

#[derive(Deserialize, Default)]
struct Metadata {
    group: Option<String>,
    created_at: Option<DateTime<Utc>>,
    asked_at: Option<DateTime<Utc>>,
    /// A document's context (indexed and embedded with it, never returned).
    context: Option<String>,
}

fn read_jsonl<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<Vec<T>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    std::io::BufReader::new(file)
        .lines()
        .enumerate()
        .filter(|(_, l)| l.as_ref().map_or(true, |l| !l.trim().is_empty()))
        .map(|(i, l)| serde_json::from_str(&l?).with_context(|| format!("{} line {}", path.display(), i + 1)))
        .collect()
}

fn read_qrels(path: &Path) -> anyhow::Result<BTreeMap<String, HashMap<String, i32>>> {
    let mut qrels: BTreeMap<String, HashMap<String, i32>> = BTreeMap::new();
    for (i, line) in std::fs::read_to_string(path)?.lines().enumerate() {
        let fields: Vec<&str> = line.split('\t').collect();
        if i == 0 && fields.first() == Some(&"query-id") || line.trim().is_empty() {
            continue;
        }
        anyhow::ensure!(fields.len() == 3, "{} line {}: expected query-id, corpus-id, score", path.display(), i + 1);
        qrels.entry(fields[0].to_string()).or_default().insert(fields[1].to_string(), fields[2].trim().parse()?);
    }
    Ok(qrels)
}

/// `180d` (or `180`): a number of days.
fn parse_days(text: &str) -> Result<chrono::Duration, String> {
    let days: i64 = text.trim_end_matches('d').parse().map_err(|e| format!("{text:?}: {e}"))?;
    Ok(chrono::Duration::days(days))
}

fn organization_of(group: Option<&str>) -> Uuid {
    Uuid::new_v5(&Uuid::NAMESPACE_OID, format!("memory-eval/{}", group.unwrap_or("default")).as_bytes())
}

/// The model with document embeddings cached on disk (records of sha256(text) followed by the vector), so a
/// dataset is embedded once across runs.
struct DiskCachedEmbedder {
    model: Arc<MiniLm>,
    path: PathBuf,
    vectors: Mutex<HashMap<[u8; 32], Vec<f32>>>,
}

impl DiskCachedEmbedder {
    fn open(model: Arc<MiniLm>, dir: &Path) -> anyhow::Result<Self> {
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

/// One dataset document as an extraction service would hand it over: an organisation-wide semantic memory.
fn as_memory(doc: &RawDoc) -> IngestMemory {
    let content = if doc.title.is_empty() { doc.text.clone() } else { format!("{} {}", doc.title, doc.text) };
    serde_json::from_value(json!({
        "content": content,
        "memory_type": "semantic",
        "scope": "org",
        "created_at": doc.metadata.created_at,
        "context": doc.metadata.context,
        "provenance": {"source_kind": "run", "source_ref": doc.id, "trust_level": "unverified"},
    }))
    .expect("a well-formed memory")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(args.k >= 10 && args.k <= 100, "--k must be between 10 and 100");
    let docs: Vec<RawDoc> = read_jsonl(&args.dataset.join("corpus.jsonl"))?;
    let queries: HashMap<String, RawQuery> =
        read_jsonl::<RawQuery>(&args.dataset.join("queries.jsonl"))?.into_iter().map(|q| (q.id.clone(), q)).collect();
    let qrels = read_qrels(&args.dataset.join("qrels/test.tsv"))?;
    let has_time = docs.iter().any(|d| d.metadata.created_at.is_some());
    eprintln!(
        "{} documents, {} judged queries; recency {}",
        docs.len(),
        qrels.len(),
        if has_time { "on" } else { "off (no timestamps)" }
    );

    // Load through the ingest path, as production stores memories: one organisation per group, documents as
    // organisation-wide semantic memories (an exact duplicate within a group is stored once).
    let db = scratch::recreate("memory_eval", 8).await?;
    if args.without_code_words {
        sqlx::query("CREATE OR REPLACE FUNCTION memory_code_words(t text) RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT '' $$")
            .execute(&db.admin)
            .await?;
    }
    let model = Arc::new(MiniLm::new(&args.model_dir)?);
    let cached = Arc::new(DiskCachedEmbedder::open(model.clone(), &args.cache_dir)?);
    let ingestor = Ingestor::new(db.admin.clone(), cached);
    let mut doc_of: HashMap<Uuid, String> = HashMap::new();
    let mut by_org: BTreeMap<Uuid, Vec<&RawDoc>> = BTreeMap::new();
    for doc in &docs {
        by_org.entry(organization_of(doc.metadata.group.as_deref())).or_default().push(doc);
    }
    let started = Instant::now();
    for (org, org_docs) in by_org {
        for (n, chunk) in org_docs.chunks(MAX_MEMORIES).enumerate() {
            let batch = IngestBatch {
                job_type: None,
                version: VERSION,
                organization_id: org,
                batch_id: format!("eval-{n}"),
                memories: chunk.iter().map(|d| as_memory(d)).collect(),
            };
            let receipt = ingestor.ingest(&batch, Admission::Active).await?;
            for (id, doc) in receipt.memory_ids.into_iter().zip(chunk) {
                doc_of.entry(id).or_insert_with(|| doc.id.clone());
            }
        }
    }
    eprintln!("ingested {} documents in {:.0?}", docs.len(), started.elapsed());
    sqlx::query("ANALYZE memory").execute(&db.admin).await?;

    // The configuration the service runs with (MEMORY_* tunables honoured), so a setting can be evaluated.
    let mut config = RetrievalConfig::from_env()?;
    if !has_time {
        config.weights.recency = 0.0;
    }
    let embedder: Arc<dyn Embedder> = model;
    let with_formula = |formula: Option<RankingFormula>| {
        let mut config = config.clone();
        if let Some(formula) = formula {
            config.ranking = formula;
        }
        Retriever::new(db.app.clone(), embedder.clone(), None, config)
    };
    let retrievers: HashMap<&str, Retriever> = [
        ("pipeline", with_formula(None)),
        ("pipeline-spec", with_formula(Some(RankingFormula::Spec))),
        ("pipeline-relevance", with_formula(Some(RankingFormula::Relevance))),
        ("pipeline-passive", with_formula(None)),
    ]
    .into_iter()
    .collect();
    let retriever = &retrievers["pipeline"];

    if let Some(dir) = &args.run_dir {
        std::fs::create_dir_all(dir)?;
    }
    let mut report = serde_json::Map::new();
    println!(
        "{:<10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "strategy", "nDCG@10", "R@1", "R@5", "R@10", "R@25", "R@50", "MRR@10"
    );
    for strategy in &args.strategies {
        let started = Instant::now();
        let mut run = String::new();
        let mut sums = [0.0f64; 7];
        for (qid, relevant) in &qrels {
            let query = queries.get(qid).with_context(|| format!("query {qid} is judged but not in queries.jsonl"))?;
            let chosen = retrievers.get(strategy.as_str()).unwrap_or(retriever);
            let ranked = run_query(chosen, strategy, query, args.k, args.asked_at_offset).await?;
            let ranked: Vec<String> = ranked.iter().map(|(id, _)| doc_of[id].clone()).collect::<Vec<_>>();
            for (rank, doc) in ranked.iter().enumerate() {
                run.push_str(&format!("{qid} Q0 {doc} {} {} {strategy}\n", rank + 1, (args.k - rank) as f64));
            }
            let m = [
                stats::ndcg_at(&ranked, relevant, 10),
                stats::recall_at(&ranked, relevant, 1),
                stats::recall_at(&ranked, relevant, 5),
                stats::recall_at(&ranked, relevant, 10),
                stats::recall_at(&ranked, relevant, 25),
                stats::recall_at(&ranked, relevant, 50),
                stats::mrr_at(&ranked, relevant, 10),
            ];
            sums.iter_mut().zip(m).for_each(|(s, v)| *s += v);
        }
        let n = qrels.len() as f64;
        let means: Vec<f64> = sums.iter().map(|s| s / n).collect();
        println!(
            "{strategy:<10} {:>8.4} {:>8.4} {:>8.4} {:>8.4} {:>8.4} {:>8.4} {:>8.4}   ({:.1?})",
            means[0],
            means[1],
            means[2],
            means[3],
            means[4],
            means[5],
            means[6],
            started.elapsed()
        );
        report.insert(
            strategy.clone(),
            json!({"ndcg@10": means[0], "recall@1": means[1], "recall@5": means[2], "recall@10": means[3],
                   "recall@25": means[4], "recall@50": means[5], "mrr@10": means[6]}),
        );
        if let Some(dir) = &args.run_dir {
            std::fs::write(dir.join(format!("{strategy}.trec")), run)?;
        }
    }
    if let Some(path) = &args.json {
        let out = json!({"dataset": args.dataset, "documents": docs.len(), "queries": qrels.len(), "k": args.k,
                         "strategies": report});
        std::fs::write(path, serde_json::to_string_pretty(&out)?)?;
    }
    Ok(())
}

/// The top k memory ids (best first) with their scores.
async fn run_query(
    retriever: &Retriever,
    strategy: &str,
    query: &RawQuery,
    k: usize,
    offset: Option<chrono::Duration>,
) -> anyhow::Result<Vec<(Uuid, f64)>> {
    let org = organization_of(query.metadata.group.as_deref());
    if strategy.starts_with("pipeline") {
        // `pipeline-passive`: passive injection before the next turn (one session per query, its first turn).
        let passive = strategy == "pipeline-passive";
        let mode = if passive { RetrievalMode::Passive } else { RetrievalMode::AgentQuery };
        let mut request = RetrievalRequest::new(org, mode, query.text.clone());
        if passive {
            request.session = Some(memory_core::retrieval::SessionTurn { session_id: query.id.clone(), turn: 1 });
        }
        request.max_results = k;
        request.as_of = query.metadata.asked_at.map(|at| at + offset.unwrap_or_default());
        let mut result = retriever.query(request).await?;
        result.memories.reverse();
        return Ok(result.memories.into_iter().map(|m| (m.memory.id, m.score)).collect());
    }
    // `hybrid-weighted-<w>`: the weighted blend with vector weight w.
    let (fusion, vector_weight) = match strategy.strip_prefix("hybrid-weighted-") {
        Some(w) => (Fusion::Weighted, w.parse::<f64>().with_context(|| format!("vector weight in {strategy:?}"))?),
        None => (Fusion::Rrf, 0.5),
    };
    let strategy = match strategy {
        "vector" => Strategy::Vector,
        "keyword" => Strategy::Keyword,
        s if s == "hybrid" || s.starts_with("hybrid-weighted-") => Strategy::Hybrid,
        other => anyhow::bail!("unknown strategy {other:?} (vector, keyword, hybrid, hybrid-weighted-<w>, pipeline)"),
    };
    let request = SearchRequest {
        organization_id: org,
        agent_id: None,
        project_id: None,
        task_id: None,
        query: query.text.clone(),
        strategy,
        filters: SearchFilters::default(),
        fusion,
        vector_weight,
        include_graph: false,
        max_results: k,
        sensitivity_gate: false,
    };
    Ok(retriever.search(request).await?.hits.into_iter().map(|h| (h.memory.id, h.score)).collect())
}
