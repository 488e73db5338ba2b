//! memory-eval: retrieval quality on a BEIR-layout dataset (corpus.jsonl, queries.jsonl, qrels/test.tsv).
//!
//! Each `metadata.group` of the corpus is loaded as its own organisation and a query searches only its group;
//! `metadata.created_at` / `metadata.asked_at` (RFC 3339) feed recency. Prints nDCG@10, Recall@5/10/25/50 and
//! MRR@10 per strategy and can write TREC run files.

mod cache;
mod dataset;
mod fit;
mod floor;
mod metrics;

use std::{
    collections::{BTreeMap, HashMap},
    path::{Path, PathBuf},
    sync::Arc,
    time::Instant,
};

use anyhow::Context;
use clap::Parser;
use memory_core::{
    embed::{Embedder, MiniLm},
    ingest::{Admission, IngestBatch, Ingestor, MAX_MEMORIES, VERSION},
    retrieval::{
        RetrievalConfig, RetrievalMode, RetrievalRequest, Retriever, SearchRequest, Strategy, fusion::Fusion,
        learned::Features, ranking::RankingFormula,
    },
    store::SearchFilters,
};
use memory_tools::scratch;
use serde_json::json;
use uuid::Uuid;

use crate::{
    cache::DiskCachedEmbedder,
    dataset::{RawDoc, RawQuery, as_memory, organization_of, project_of, read_jsonl, read_qrels},
    metrics::Metrics,
};

/// `180d` (or `180`): a number of days.
fn parse_days(text: &str) -> Result<chrono::Duration, String> {
    let days: i64 = text.trim_end_matches('d').parse().map_err(|e| format!("{text:?}: {e}"))?;
    Ok(chrono::Duration::days(days))
}

#[derive(Parser)]
#[command(name = "memory-eval", about = "Retrieval quality of the memory service on a BEIR-layout dataset")]
struct Args {
    /// Directory with corpus.jsonl, queries.jsonl and qrels/test.tsv; repeat it for several sets, evaluated in turn.
    #[arg(long, required = true)]
    dataset: Vec<PathBuf>,
    /// Comma-separated: vector, keyword, hybrid (RRF), hybrid-weighted-<w> (the weighted blend, vector weight w),
    /// pipeline (the configured Stage 4 formula, agent_query), pipeline-spec, pipeline-relevance, pipeline-learned,
    /// pipeline-passive (passive injection).
    #[arg(long, default_value = "vector,keyword,hybrid,pipeline,pipeline-spec", value_delimiter = ',')]
    strategies: Vec<String>,
    /// Depth of each ranking (at most 100).
    #[arg(long, default_value_t = 50)]
    k: usize,
    /// Write the metrics as JSON (one object per dataset).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the summary table (Markdown): per dataset, the best of vector, keyword and hybrid beside the modes.
    #[arg(long)]
    summary: Option<PathBuf>,
    /// Write one TREC run file per dataset and strategy (<dataset>/<strategy>.trec).
    #[arg(long)]
    run_dir: Option<PathBuf>,
    /// Where document embeddings are cached by content hash.
    #[arg(long, default_value = ".local/eval-cache")]
    cache_dir: PathBuf,
    /// Ask every question this much later than its `asked_at` (e.g. `180d`): how the modes' recency ages.
    #[arg(long, value_parser = parse_days)]
    asked_at_offset: Option<chrono::Duration>,
    /// Index without code words (identifiers split and joined), to measure what they add.
    #[arg(long)]
    without_code_words: bool,
    /// Study passive injection's relevance floor at these cosines (comma-separated): each set's own queries and
    /// the `--foreign` ones, asked with no floor, then cut at each (`docs/benchmarks.md`).
    #[arg(long, value_delimiter = ',')]
    passive_floors: Vec<f64>,
    /// A queries.jsonl of another set, asked in passive mode of each set's memories (its default organisation) for
    /// `--passive-floors`: questions about nothing the organisation holds.
    #[arg(long)]
    foreign: Option<PathBuf>,
    /// Also rank each set's Stage 1 candidates (as `pipeline-relevance` finds them) by the learned model fitted on
    /// the other shapes (documents, conversation, facts, code), and print that table beside today's ranking.
    #[arg(long)]
    leave_one_shape_out: bool,
    /// Fit the learned ranking on every set given and write it here (`shared/core/src/retrieval/ranker.json`);
    /// implies `--leave-one-shape-out`.
    #[arg(long)]
    fit: Option<PathBuf>,
    /// Write the candidates `--leave-one-shape-out` collects here (JSON lines: set, shape, judgements, and each
    /// candidate's document, score today and features), for study outside.
    #[arg(long)]
    features_out: Option<PathBuf>,
    /// The model directory (default MEMORY_MODEL_DIR).
    #[arg(long, env = "MEMORY_MODEL_DIR")]
    model_dir: PathBuf,
}

/// One dataset's results, strategies in the order run.
struct Evaluated {
    name: String,
    path: PathBuf,
    documents: usize,
    queries: usize,
    strategies: Vec<(String, Metrics)>,
    passive_floors: Vec<floor::AtFloor>,
    /// Its judged queries' candidates with their features, for `--leave-one-shape-out` and `--fit`.
    collected: Option<fit::Collected>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(args.k >= 10 && args.k <= 100, "--k must be between 10 and 100");
    let model = Arc::new(MiniLm::new(&args.model_dir)?);
    let mut evaluated = Vec::new();
    for dataset in &args.dataset {
        evaluated.push(evaluate(&args, dataset, &model).await?);
    }
    if let Some(path) = &args.json {
        let sets: Vec<_> = evaluated
            .iter()
            .map(|e| {
                let strategies: serde_json::Map<_, _> =
                    e.strategies.iter().map(|(name, m)| (name.clone(), m.json())).collect();
                json!({"dataset": e.path, "name": e.name, "documents": e.documents, "queries": e.queries,
                       "k": args.k, "strategies": strategies, "passive_floors": e.passive_floors})
            })
            .collect();
        std::fs::write(path, serde_json::to_string_pretty(&sets)?)?;
    }
    let mut table = summary(&evaluated);
    let collected: Vec<fit::Collected> = evaluated.into_iter().filter_map(|e| e.collected).collect();
    if let Some(path) = &args.features_out {
        fit::write(&collected, path)?;
    }
    if !collected.is_empty() {
        let held = fit::leave_one_shape_out(&collected);
        table.push_str(&format!(
            "\nLeave one shape out: the learned ranking fitted on the other shapes, against today's ranking of the \
             same candidates:\n\n{}",
            fit::table(&held)
        ));
        if let Some(path) = &args.json {
            std::fs::write(path.with_extension("loso.json"), serde_json::to_string_pretty(&held)?)?;
        }
    }
    if let Some(path) = &args.fit {
        let sets: Vec<&fit::Collected> = collected.iter().collect();
        let data: Vec<String> = collected.iter().map(|c| format!("{} ({} queries)", c.set, c.queries.len())).collect();
        let fitted = format!("memory-eval --fit at {} on {}", git_head(), data.join(", "));
        std::fs::write(path, serde_json::to_string_pretty(&fit::fit(&sets, fitted))? + "\n")?;
        eprintln!("wrote the learned ranking to {}", path.display());
    }
    println!("\n{table}");
    if let Some(path) = &args.summary {
        std::fs::write(path, table)?;
    }
    Ok(())
}

/// The branches the modes are held against.
const BRANCHES: [&str; 3] = ["vector", "keyword", "hybrid"];

/// A Markdown table: per dataset, nDCG@10 and Recall@10 of the best branch (vector, keyword or hybrid, whichever
/// is best on that metric) and of each mode run, with the mode's margin over that branch.
fn summary(evaluated: &[Evaluated]) -> String {
    let mut out = String::from(
        "| set | documents | queries | best branch nDCG@10 | best branch R@10 | mode | nDCG@10 (margin) | R@10 (margin) |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for e in evaluated {
        let best = |metric: fn(&Metrics) -> f64| {
            e.strategies
                .iter()
                .filter(|(name, _)| BRANCHES.contains(&name.as_str()))
                .map(|(name, m)| (metric(m), name.as_str()))
                .max_by(|a, b| a.0.total_cmp(&b.0))
        };
        let (Some(ndcg), Some(recall)) = (best(|m| m.ndcg10), best(|m| m.recall10())) else { continue };
        for (mode, m) in e.strategies.iter().filter(|(name, _)| name.starts_with("pipeline")) {
            out.push_str(&format!(
                "| {} | {} | {} | {:.4} ({}) | {:.4} ({}) | {mode} | {:.4} ({:+.4}) | {:.4} ({:+.4}) |\n",
                e.name,
                e.documents,
                e.queries,
                ndcg.0,
                ndcg.1,
                recall.0,
                recall.1,
                m.ndcg10,
                m.ndcg10 - ndcg.0,
                m.recall10(),
                m.recall10() - recall.0,
            ));
        }
    }
    out
}

/// The dataset's name: its directory's, without a `-beir` suffix.
fn name_of(dataset: &Path) -> String {
    let base = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    base(dataset).trim_end_matches("-beir").to_string()
}

async fn evaluate(args: &Args, dataset: &Path, model: &Arc<MiniLm>) -> anyhow::Result<Evaluated> {
    let name = name_of(dataset);
    // A repository as import-repo imports it: its ingest messages instead of a corpus.
    let imported = dataset.join("imported.jsonl");
    let imported = imported.exists().then_some(imported);
    let docs: Vec<RawDoc> = match imported {
        Some(_) => Vec::new(),
        None => read_jsonl(&dataset.join("corpus.jsonl"))?,
    };
    let queries: HashMap<String, RawQuery> =
        read_jsonl::<RawQuery>(&dataset.join("queries.jsonl"))?.into_iter().map(|q| (q.id.clone(), q)).collect();
    let qrels = read_qrels(&dataset.join("qrels/test.tsv"))?;
    let has_time = docs.iter().any(|d| d.metadata.created_at.is_some());
    eprintln!(
        "{name}: {}, {} judged queries; recency {}",
        if imported.is_some() { "an imported repository".to_string() } else { format!("{} documents", docs.len()) },
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
    let cached = Arc::new(DiskCachedEmbedder::open(model.clone(), &args.cache_dir)?);
    let ingestor = Ingestor::new(db.admin.clone(), cached);
    let mut doc_of: HashMap<Uuid, String> = HashMap::new();
    let mut by_org: BTreeMap<Uuid, Vec<&RawDoc>> = BTreeMap::new();
    for doc in &docs {
        by_org.entry(organization_of(doc.metadata.group.as_deref())).or_default().push(doc);
    }
    let started = Instant::now();
    let mut documents = docs.len();
    if let Some(path) = &imported {
        documents = ingest_imported(&ingestor, path, &mut doc_of).await?;
    }
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
    eprintln!("ingested {documents} documents in {:.0?}", started.elapsed());
    sqlx::query("ANALYZE memory").execute(&db.admin).await?;

    // The configuration the service runs with (MEMORY_* tunables honoured), so a setting can be evaluated.
    let mut config = RetrievalConfig::from_env()?;
    if !has_time {
        config.weights.recency = 0.0;
    }
    let embedder: Arc<dyn Embedder> = model.clone();
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
        ("pipeline-learned", with_formula(Some(RankingFormula::Learned))),
        ("pipeline-passive", with_formula(None)),
        (
            "pipeline-passive-unfloored",
            Retriever::new(
                db.app.clone(),
                embedder.clone(),
                None,
                RetrievalConfig { passive_floor: 0.0, ..config.clone() },
            ),
        ),
    ]
    .into_iter()
    .collect();
    let retriever = &retrievers["pipeline"];

    let run_dir = args.run_dir.as_ref().map(|dir| dir.join(&name));
    if let Some(dir) = &run_dir {
        std::fs::create_dir_all(dir)?;
    }
    println!(
        "{:<18} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        format!("{name}"),
        "nDCG@10",
        "R@1",
        "R@5",
        "R@10",
        "R@25",
        "R@50",
        "MRR@10"
    );
    let mut strategies = Vec::new();
    for strategy in &args.strategies {
        let started = Instant::now();
        let mut run = String::new();
        let mut sums = Metrics::default();
        for (qid, relevant) in &qrels {
            let query = queries.get(qid).with_context(|| format!("query {qid} is judged but not in queries.jsonl"))?;
            let chosen = retrievers.get(strategy.as_str()).unwrap_or(retriever);
            let ranked = run_query(chosen, strategy, query, args.k, args.asked_at_offset).await?;
            let ranked: Vec<String> = ranked.iter().map(|(id, _)| doc_of[id].clone()).collect::<Vec<_>>();
            for (rank, doc) in ranked.iter().enumerate() {
                run.push_str(&format!("{qid} Q0 {doc} {} {} {strategy}\n", rank + 1, (args.k - rank) as f64));
            }
            sums.add(&Metrics::of(&ranked, relevant));
        }
        let m = sums.divided(qrels.len() as f64);
        println!(
            "{strategy:<18} {:>8.4} {:>8.4} {:>8.4} {:>8.4} {:>8.4} {:>8.4} {:>8.4}   ({:.1?})",
            m.ndcg10,
            m.recall[0],
            m.recall[1],
            m.recall[2],
            m.recall[3],
            m.recall[4],
            m.mrr10,
            started.elapsed()
        );
        if let Some(dir) = &run_dir {
            std::fs::write(dir.join(format!("{strategy}.trec")), run)?;
        }
        strategies.push((strategy.clone(), m));
    }
    let mut passive_floors = Vec::new();
    if !args.passive_floors.is_empty() {
        let unfloored = &retrievers["pipeline-passive-unfloored"];
        let mut own = Vec::new();
        for (qid, relevant) in &qrels {
            own.push((floor::inject(unfloored, &queries[qid], None, args.k, &doc_of).await?, relevant));
        }
        let mut foreign = Vec::new();
        if let Some(path) = &args.foreign {
            for query in read_jsonl::<RawQuery>(path)? {
                foreign.push(floor::inject(unfloored, &query, Some(None), args.k, &doc_of).await?);
            }
        }
        passive_floors = floor::study(&args.passive_floors, &own, &foreign);
        floor::print(&name, &passive_floors);
    }
    let mut collected = None;
    if args.leave_one_shape_out || args.fit.is_some() || args.features_out.is_some() {
        let today = &retrievers["pipeline-relevance"];
        let mut judged = Vec::new();
        for (qid, relevant) in &qrels {
            let query = &queries[qid];
            let session = format!("features/{qid}");
            let mut asking = Asking::new(query, RetrievalMode::AgentQuery, &session, args.k);
            asking.recency_at = query.metadata.asked_at.map(|at| at + args.asked_at_offset.unwrap_or_default());
            asking.explain = true;
            let candidates = ask(today, query, asking)
                .await?
                .into_iter()
                .map(|m| {
                    let explanation = m.explanation.expect("asked to explain");
                    (doc_of[&m.memory.id].clone(), Features::from_named(&explanation.features), m.score)
                })
                .collect();
            judged.push(fit::Judged { candidates, relevant: relevant.clone() });
        }
        collected = Some(fit::Collected { shape: fit::shape_of(&name), set: name.clone(), queries: judged });
    }
    Ok(Evaluated {
        name,
        path: dataset.to_path_buf(),
        documents,
        queries: qrels.len(),
        strategies,
        passive_floors,
        collected,
    })
}

/// Ingests an import's messages (`code-to-beir --as-imported`) as the ingest worker applies them, into the default
/// group's organisation and project; a chunk's document id is `path#symbol`. Returns how many chunks there were.
async fn ingest_imported(
    ingestor: &Ingestor,
    path: &Path,
    doc_of: &mut HashMap<Uuid, String>,
) -> anyhow::Result<usize> {
    let (org, project) = (organization_of(None), project_of(None));
    let mut chunks = 0;
    for mut batch in read_jsonl::<IngestBatch>(path)? {
        batch.organization_id = org;
        for memory in &mut batch.memories {
            memory.project_id = Some(project);
        }
        let receipt = ingestor.ingest(&batch, Admission::Candidate).await?;
        for (id, memory) in receipt.memory_ids.into_iter().zip(&batch.memories) {
            let symbol = memory.anchor.as_ref().map(|a| a.symbol.as_str()).unwrap_or_default();
            doc_of.entry(id).or_insert_with(|| format!("{}#{symbol}", memory.file_path.as_deref().unwrap_or_default()));
        }
        chunks += batch.memories.len();
    }
    Ok(chunks)
}

/// The commit the tool runs at (`unknown` outside a clone).
fn git_head() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map_or_else(|| "unknown".into(), |out| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// How a mode is asked a query: in `group`'s organisation and project (in passive mode as `session`'s first turn), at
/// most `k` memories, recency measured at `recency_at`, each result explained when `explain`.
pub struct Asking<'a> {
    pub group: Option<&'a str>,
    pub mode: RetrievalMode,
    pub session: &'a str,
    pub k: usize,
    pub recency_at: Option<chrono::DateTime<chrono::Utc>>,
    pub explain: bool,
}

impl<'a> Asking<'a> {
    /// In the query's own group, at its `asked_at`, unexplained.
    pub fn new(query: &'a RawQuery, mode: RetrievalMode, session: &'a str, k: usize) -> Self {
        let group = query.metadata.group.as_deref();
        Self { group, mode, session, k, recency_at: query.metadata.asked_at, explain: false }
    }
}

/// The answer of a mode to `query`, best first.
pub async fn ask(
    retriever: &Retriever,
    query: &RawQuery,
    asking: Asking<'_>,
) -> anyhow::Result<Vec<memory_core::retrieval::RankedMemory>> {
    let Asking { group, mode, session, k, recency_at, explain } = asking;
    let mut request = RetrievalRequest::new(organization_of(group), mode, query.text.clone());
    request.project_id = Some(project_of(group));
    if mode == RetrievalMode::Passive {
        request.session = Some(memory_core::retrieval::SessionTurn { session_id: session.to_string(), turn: 1 });
    }
    request.max_results = k;
    request.recency_at = recency_at;
    request.explain = explain;
    let mut result = retriever.query(request).await?;
    result.memories.reverse();
    Ok(result.memories)
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
    let project = project_of(query.metadata.group.as_deref());
    if strategy.starts_with("pipeline") {
        // `pipeline-passive`: passive injection before the next turn (one session per query, its first turn).
        let mode = if strategy == "pipeline-passive" { RetrievalMode::Passive } else { RetrievalMode::AgentQuery };
        let session = format!("{strategy}/{}", query.id);
        let mut asking = Asking::new(query, mode, &session, k);
        asking.recency_at = query.metadata.asked_at.map(|at| at + offset.unwrap_or_default());
        let answer = ask(retriever, query, asking).await?;
        return Ok(answer.into_iter().map(|m| (m.memory.id, m.score)).collect());
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
        project_id: Some(project),
        task_id: None,
        query: query.text.clone(),
        strategy,
        filters: SearchFilters::default(),
        fusion,
        vector_weight,
        include_graph: false,
        max_results: k,
        sensitivity_gate: false,
        explain: false,
    };
    Ok(retriever.search(request).await?.hits.into_iter().map(|h| (h.memory.id, h.score)).collect())
}
