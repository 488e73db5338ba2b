//! memory-bench: latency and scale of the retrieval path against the spec's targets and a raw pgvector query.
//!
//! For each corpus size: a synthetic multi-tenant corpus (see `memory_tools::synthetic`) is COPY-loaded into a
//! scratch database, the ANN and full-text indexes are built, and `--queries` queries measure the vector branch,
//! the keyword branch, fusion + filter (RRF, taxonomy filter, ranking), `Retriever::query` end to end without the
//! query embedding and two of its parts (the context read; both branches run concurrently and fused, as Stage 1
//! runs them), and the raw baseline (one HNSW query with the same tenant filter), interleaved, each with
//! queries of its own. Filtered recall@10 is measured for a tenant holding about 1% of the rows. After the last
//! size: HTTP throughput of the real retrieve server on loopback, MiniLM query-embedding latency, and the server's
//! peak RSS.

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context;
use async_trait::async_trait;
use chrono::Utc;
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use memory_core::{
    config::RetrievalConfig,
    embed::{EmbedError, Embedder, MiniLm},
    retrieval::{
        RetrievalMode, RetrievalRequest, Retriever,
        candidates::{self, BranchSettings, Candidate},
        ranking,
        taxonomy::Taxonomy,
    },
    store::{
        self, ScopeFilter, SearchFilters,
        candidates::{CandidateExtras, CandidateRow, KeywordSearch},
    },
};
use memory_tools::{
    plot, scratch,
    stats::Percentiles,
    synthetic::{self, Corpus, Organization},
};
use pgvector::Vector;
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde::Serialize;
use sqlx::{Executor, PgPool, QueryBuilder};
use uuid::Uuid;

#[derive(Parser)]
#[command(name = "memory-bench", about = "Latency and scale of the memory retrieval path")]
struct Args {
    /// Corpus sizes, comma-separated.
    #[arg(long, default_value = "10000,100000,1000000", value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Timed queries per size (after 50 warm-up queries).
    #[arg(long, default_value_t = 1000)]
    queries: usize,
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write an SVG plot of p95 against corpus size.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Duration of the HTTP throughput run, in seconds (0 skips it).
    #[arg(long, default_value_t = 10)]
    http_seconds: u64,
    /// Concurrent HTTP clients.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Reuse a scratch database already holding this size's corpus (same seed) instead of loading it again.
    #[arg(long)]
    reuse: bool,
    #[arg(long, env = "MEMORY_MODEL_DIR")]
    model_dir: PathBuf,
}

#[derive(Serialize, Default)]
struct SizeReport {
    memories: usize,
    vector_ms: Percentiles,
    keyword_ms: Percentiles,
    fusion_ms: Percentiles,
    e2e_ms: Percentiles,
    /// What end to end is made of: the context read before the branches (read scopes, taxonomy), and Stage 1 as
    /// the pipeline runs it (both branches concurrently, then fused).
    context_ms: Percentiles,
    branches_ms: Percentiles,
    baseline_ms: Percentiles,
    ratio_p95: f64,
    /// The raw query at the vector branch's depth (its LIMIT and ef_search), and end to end against it.
    baseline_depth_ms: Percentiles,
    ratio_depth_p95: f64,
    filtered_recall_at_10: f64,
    /// Overlap of the keyword branch's top 10 with exact BM25's, on the largest tenant (the one the per-term
    /// posting cap affects most).
    keyword_recall_at_10: f64,
    load_s: f64,
    index_s: f64,
    /// Tenants given their own ANN index (`memory-admin ann-indexes`).
    tenant_indexes: usize,
}

#[derive(Serialize, Default)]
struct HttpReport {
    rps: f64,
    p95_ms: f64,
    requests: usize,
    errors: usize,
    concurrency: usize,
}

#[derive(Serialize)]
struct Report {
    sizes: Vec<SizeReport>,
    http: Option<HttpReport>,
    embed_ms: Percentiles,
    rss_mb: Option<f64>,
    queries: usize,
    machine: String,
}

/// Query embeddings computed up front, so timings exclude the embedding model.
struct Precomputed(HashMap<String, Vec<f32>>);

#[async_trait]
impl Embedder for Precomputed {
    fn dimension(&self) -> usize {
        memory_tools::synthetic::DIM
    }
    fn model_id(&self) -> &str {
        "precomputed"
    }
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        texts.iter().map(|t| self.0.get(t).cloned().ok_or_else(|| EmbedError::Unavailable(t.clone()))).collect()
    }
}

struct Probe {
    organization: Uuid,
    agent: Uuid,
    project: Uuid,
    task: Uuid,
    text: String,
    vector: Vec<f32>,
}

fn probes(corpus: &Corpus, count: usize, seed: u64, only: Option<&Organization>) -> Vec<Probe> {
    let mut rng = StdRng::seed_from_u64(seed);
    let total = corpus.total();
    (0..count)
        .map(|i| {
            let org = only.unwrap_or_else(|| {
                // Tenants query in proportion to their size.
                let mut pick = rng.random_range(0..total);
                corpus
                    .organizations
                    .iter()
                    .find(|o| {
                        if pick < o.memories {
                            true
                        } else {
                            pick -= o.memories;
                            false
                        }
                    })
                    .unwrap()
            });
            let topic = rng.random_range(0..corpus.topics());
            let p = rng.random_range(0..org.projects.len());
            Probe {
                organization: org.id,
                agent: org.agents[rng.random_range(0..org.agents.len())],
                project: org.projects[p],
                task: org.tasks[p],
                text: format!("{} q{i}", corpus.query_text(topic, &mut rng)),
                vector: corpus.vector_near(topic, 0.6, &mut rng),
            }
        })
        .collect()
}

fn ms(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut sizes = Vec::new();
    let mut last: Option<(scratch::Scratch, Corpus)> = None;
    for &size in &args.sizes {
        let (report, db, corpus) = bench_size(&args, size).await?;
        print_row(&report);
        sizes.push(report);
        last = Some((db, corpus));
    }

    let embed_ms = embed_latency(&args).await?;
    let (http, rss_mb) = match (&last, args.http_seconds) {
        (Some((db, corpus)), s) if s > 0 => {
            let (http, rss) = http_throughput(&args, db, corpus).await?;
            (Some(http), rss)
        }
        _ => (None, None),
    };
    println!("query embedding (MiniLM, in process): p50 {:.2} ms, p95 {:.2} ms", embed_ms.p50, embed_ms.p95);
    if let Some(h) = &http {
        println!(
            "HTTP /v1/retrieve, {} clients for {} s: {:.0} requests/s, p95 {:.1} ms ({} requests, {} errors); peak RSS {:.0} MB",
            h.concurrency,
            args.http_seconds,
            h.rps,
            h.p95_ms,
            h.requests,
            h.errors,
            rss_mb.unwrap_or_default()
        );
    }
    let report = Report { sizes, http, embed_ms, rss_mb, queries: args.queries, machine: machine() };
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    if let Some(path) = &args.plot {
        let series = |name, color, f: fn(&SizeReport) -> f64| plot::Series {
            name,
            color,
            points: report.sizes.iter().map(|s| (s.memories as f64, f(s))).collect(),
        };
        let chart = plot::p95_chart(&[
            series("vector", "#1f77b4", |s| s.vector_ms.p95),
            series("keyword", "#ff7f0e", |s| s.keyword_ms.p95),
            series("fusion+filter", "#2ca02c", |s| s.fusion_ms.p95),
            series("end to end", "#d62728", |s| s.e2e_ms.p95),
            series("raw pgvector", "#7f7f7f", |s| s.baseline_ms.p95),
        ]);
        std::fs::write(path, chart)?;
    }
    Ok(())
}

fn print_row(r: &SizeReport) {
    println!(
        "{:>9} memories | p50/p95/p99 ms  vector {:.2}/{:.2}/{:.2}  keyword {:.2}/{:.2}/{:.2}  fusion {:.2}/{:.2}/{:.2}  \
         e2e {:.2}/{:.2}/{:.2} (context {:.2}/{:.2}/{:.2}, both branches {:.2}/{:.2}/{:.2})  baseline {:.2}/{:.2}/{:.2} | e2e/baseline p95 {:.2} (raw at depth {:.2}/{:.2}/{:.2}, ratio {:.2}) | recall@10 {:.3}, keyword {:.3} | load {:.0} s, index {:.0} s, {} tenant indexes",
        r.memories,
        r.vector_ms.p50,
        r.vector_ms.p95,
        r.vector_ms.p99,
        r.keyword_ms.p50,
        r.keyword_ms.p95,
        r.keyword_ms.p99,
        r.fusion_ms.p50,
        r.fusion_ms.p95,
        r.fusion_ms.p99,
        r.e2e_ms.p50,
        r.e2e_ms.p95,
        r.e2e_ms.p99,
        r.context_ms.p50,
        r.context_ms.p95,
        r.context_ms.p99,
        r.branches_ms.p50,
        r.branches_ms.p95,
        r.branches_ms.p99,
        r.baseline_ms.p50,
        r.baseline_ms.p95,
        r.baseline_ms.p99,
        r.ratio_p95,
        r.baseline_depth_ms.p50,
        r.baseline_depth_ms.p95,
        r.baseline_depth_ms.p99,
        r.ratio_depth_p95,
        r.filtered_recall_at_10,
        r.keyword_recall_at_10,
        r.load_s,
        r.index_s,
        r.tenant_indexes,
    );
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    format!("{} cores, {cpu}", std::thread::available_parallelism().map_or(0, |n| n.get()))
}

/// What the branches are timed with: the taxonomy tags Stage 3 needs whenever a query matches a taxonomy node
/// (the corpus has no entity profiles, so the pipeline never asks for that flag here).
const EXTRAS: CandidateExtras = CandidateExtras { taxonomy: true, profiled_entities: false };

/// HTTP clients step through the probes with this stride so they send different queries.
const STRIDE: usize = 97;

/// The keyword-impact and tag indexes: dropped for the load and rebuilt after it, as the migrations define them
/// (tenant ANN indexes are built after it).
const BULK_INDEXES: [&str; 2] = ["memory_posting_impact", "memory_tags"];

async fn bench_size(args: &Args, size: usize) -> anyhow::Result<(SizeReport, scratch::Scratch, Corpus)> {
    eprintln!("== {size} memories");
    let corpus = Corpus::plan(size, args.seed);
    let name = format!("memory_bench_{size}");
    // A database built by another corpus version or an older schema is not reused.
    let schema = store::MIGRATOR.iter().map(|m| m.version).max().unwrap_or_default();
    let marker =
        format!("synthetic corpus v{}, schema {schema}: {size} memories, seed {}", synthetic::VERSION, args.seed);
    let (db, load_s, index_s, tenant_indexes) =
        if args.reuse && scratch::comment(&name).await?.as_deref() == Some(marker.as_str()) {
            eprintln!("reusing {name}");
            let db = scratch::open(&name, 8).await?;
            let tenant_indexes = store::ann::indexed_tenants(&db.admin).await?.len();
            (db, 0.0, 0.0, tenant_indexes)
        } else {
            let db = scratch::recreate(&name, 8).await?;
            let (load_s, index_s, tenant_indexes) = load(&db, &corpus).await?;
            db.admin.execute(format!("COMMENT ON DATABASE {name} IS '{marker}'").as_str()).await?;
            (db, load_s, index_s, tenant_indexes)
        };

    let warmup = 50;
    // The configuration the service runs with (MEMORY_* tunables honoured).
    let config = RetrievalConfig::from_env()?;
    let (depth, limit) = (config.branch_depth, config.candidate_limit);
    // Each measurement gets its own queries (same distribution, another seed): a query is new to the database
    // the first time it runs, and a measurement repeating another's queries would find their index pages and
    // rows already in CPU and page caches. The measurements are interleaved, so none runs on a database that
    // the others have warmed for longer.
    let probe_set = |salt: u64| probes(&corpus, args.queries + warmup, args.seed + size as u64 + salt, None);
    let (branch_probes, e2e_probes) = (probe_set(0), probe_set(1));
    let (raw_probes, raw_depth_probes, stage1_probes) = (probe_set(2), probe_set(3), probe_set(4));
    let every =
        || branch_probes.iter().chain(&e2e_probes).chain(&raw_probes).chain(&raw_depth_probes).chain(&stage1_probes);
    let embedder = Precomputed(every().map(|p| (p.text.clone(), p.vector.clone())).collect());
    let retriever = Retriever::new(db.app.clone(), Arc::new(embedder), None, config.clone());
    let scope_of = async |probe: &Probe| {
        retriever.scope_filter(probe.organization, Some(probe.agent), Some(probe.project), Some(probe.task), true).await
    };
    let no_filters = SearchFilters::default();
    let bar = ProgressBar::new(branch_probes.len() as u64)
        .with_style(ProgressStyle::with_template("querying {bar:40} {pos}/{len} eta {eta}").unwrap());

    let (mut vector, mut keyword, mut e2e, mut baseline, mut baseline_depth) = (vec![], vec![], vec![], vec![], vec![]);
    let (mut context, mut branches, mut taxonomy_matches) = (vec![], vec![], 0);
    let mut branch_rows = Vec::new();
    for i in 0..branch_probes.len() {
        let probe = &branch_probes[i];
        let (scope, query) = (scope_of(probe).await?, Vector::from(probe.vector.clone()));
        let t = Instant::now();
        let mut tx = store::begin_vector_search(&db.app, probe.organization, depth, 5000).await?;
        let vector_rows = store::candidates::vector_branch(&mut tx, &scope, &no_filters, &query, depth, EXTRAS).await?;
        tx.commit().await?;
        vector.push(ms(t));

        let t = Instant::now();
        let mut tx = store::begin_keyword_search(&db.app, probe.organization, 5000).await?;
        let search = KeywordSearch {
            text_search_config: "memory_text",
            text: &probe.text,
            query: Some(&query),
            limit: depth,
            extras: EXTRAS,
        };
        let keyword_rows = store::candidates::keyword_branch(&mut tx, &scope, &no_filters, &search).await?;
        tx.commit().await?;
        keyword.push(ms(t));
        branch_rows.push((vector_rows, keyword_rows));

        let probe = &e2e_probes[i];
        let t = Instant::now();
        let mut request = RetrievalRequest::new(probe.organization, RetrievalMode::Passive, probe.text.clone());
        request.agent_id = Some(probe.agent);
        request.project_id = Some(probe.project);
        request.task_id = Some(probe.task);
        let result = retriever.query(request).await?;
        e2e.push(ms(t));
        anyhow::ensure!(!result.degraded, "degraded result: {:?}", result.degraded_reasons);

        let probe = &stage1_probes[i];
        let t = Instant::now();
        let found = store::agents::retrieval_context(&db.app, probe.organization, Some(probe.agent)).await?;
        context.push(ms(t));
        // The extras the pipeline asks for: taxonomy tags only when the query names a taxonomy node.
        let names_a_node = !Taxonomy::new(found.taxonomy).classify_by_rules(&probe.text).is_empty();
        taxonomy_matches += usize::from(names_a_node);
        let stage1 = BranchSettings {
            depth,
            limit,
            text_search_config: "memory_text",
            vector_timeout_ms: 5000,
            keyword_timeout_ms: 5000,
            run_vector: true,
            run_keyword: true,
            extras: CandidateExtras { taxonomy: names_a_node, profiled_entities: found.has_entity_profiles },
        };
        let (scope, query) = (scope_of(probe).await?, Vector::from(probe.vector.clone()));
        let t = Instant::now();
        let set = candidates::gather(&db.app, &scope, &no_filters, &probe.text, Some(&query), &stage1).await?;
        branches.push(ms(t));
        anyhow::ensure!(set.degraded_reasons.is_empty(), "degraded stage 1: {:?}", set.degraded_reasons);

        for (k, probe, timings) in
            [(20, &raw_probes[i], &mut baseline), (depth, &raw_depth_probes[i], &mut baseline_depth)]
        {
            let (scope, query) = (scope_of(probe).await?, Vector::from(probe.vector.clone()));
            let t = Instant::now();
            raw_baseline(&db.app, &scope, &query, k).await?;
            timings.push(ms(t));
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    eprintln!("{taxonomy_matches} of {} Stage 1 queries named a taxonomy node", stage1_probes.len());

    let mut fusion = vec![];
    for (probe, (vector_rows, keyword_rows)) in branch_probes.iter().zip(branch_rows) {
        let mut tx = store::begin_for_org(&db.app, probe.organization).await?;
        let taxonomy = Taxonomy::new(store::taxonomy::nodes(&mut *tx, probe.organization).await?);
        tx.commit().await?;
        let t = Instant::now();
        let fused = candidates::fuse(vector_rows, keyword_rows, limit);
        let classified = taxonomy.classify_by_rules(&probe.text);
        let subtree = taxonomy.subtree(&classified);
        let filtered: Vec<&Candidate> = fused
            .iter()
            .filter(|c| classified.is_empty() || c.taxonomy_node_ids.iter().any(|n| subtree.contains(n)))
            .collect();
        let ranked = ranking::rank(config.ranking, &config.weights, &filtered, Utc::now(), 20);
        fusion.push(ms(t));
        std::hint::black_box(ranked);
    }
    let timed = |samples: &[f64]| Percentiles::of(&samples[warmup..]);

    let filtered_recall_at_10 = filtered_recall(&db.app, &retriever, &corpus, args.seed).await?;
    let keyword_recall_at_10 = keyword_recall(&db.app, &retriever, &corpus, args.seed).await?;
    let (e2e_ms, baseline_ms, baseline_depth_ms) = (timed(&e2e), timed(&baseline), timed(&baseline_depth));
    let report = SizeReport {
        memories: size,
        vector_ms: timed(&vector),
        keyword_ms: timed(&keyword),
        fusion_ms: timed(&fusion),
        ratio_p95: e2e_ms.p95 / baseline_ms.p95,
        ratio_depth_p95: e2e_ms.p95 / baseline_depth_ms.p95,
        e2e_ms,
        context_ms: timed(&context),
        branches_ms: timed(&branches),
        baseline_ms,
        baseline_depth_ms,
        filtered_recall_at_10,
        keyword_recall_at_10,
        load_s,
        index_s,
        tenant_indexes,
    };
    Ok((report, db, corpus))
}

/// COPY-loads the corpus with the bulk indexes dropped, rebuilds them and gives large tenants their ANN index;
/// returns the seconds spent loading and indexing, and the number of tenant indexes.
async fn load(db: &scratch::Scratch, corpus: &Corpus) -> anyhow::Result<(f64, f64, usize)> {
    let definitions: Vec<(String, String)> =
        sqlx::query_as("SELECT indexname::text, indexdef FROM pg_indexes WHERE indexname = ANY($1)")
            .bind(BULK_INDEXES.to_vec())
            .fetch_all(&db.admin)
            .await?;
    for (name, _) in &definitions {
        db.admin.execute(format!("DROP INDEX {name}").as_str()).await?;
    }

    let bar = ProgressBar::new(corpus.total() as u64)
        .with_style(ProgressStyle::with_template("loading {bar:40} {pos}/{len} {per_sec} eta {eta}").unwrap());
    let started = Instant::now();
    corpus.load(&db.admin, |n| bar.set_position(n as u64)).await?;
    bar.finish_and_clear();
    let load_s = started.elapsed().as_secs_f64();

    let started = Instant::now();
    let mut conn = db.admin.acquire().await?;
    conn.execute("SET maintenance_work_mem = '6GB'").await?;
    conn.execute("SET max_parallel_maintenance_workers = 1").await?;
    for (name, definition) in &definitions {
        eprintln!("building {name}");
        conn.execute(definition.as_str()).await?;
    }
    conn.execute("VACUUM ANALYZE").await?;
    drop(conn);
    eprintln!("building tenant ANN indexes");
    let tenant_indexes = store::ann::reconcile(&db.admin, store::ann::DEFAULT_MIN_MEMORIES).await?.created.len();
    db.admin.execute("ANALYZE memory").await?;
    let index_s = started.elapsed().as_secs_f64();
    eprintln!("loaded in {load_s:.0} s, indexed in {index_s:.0} s ({tenant_indexes} tenant ANN indexes)");
    Ok((load_s, index_s, tenant_indexes))
}

/// The baseline: one HNSW query under the same tenant filter, in a transaction set up like the vector branch's.
async fn raw_baseline(pool: &PgPool, scope: &ScopeFilter, query: &Vector, k: usize) -> anyhow::Result<Vec<Uuid>> {
    let mut tx = store::begin_vector_search(pool, scope.organization_id, k, 5000).await?;
    let mut qb = QueryBuilder::new("SELECT m.id FROM memory m WHERE ");
    scope.push_sql(&mut qb);
    qb.push(" ORDER BY m.embedding <=> ").push_bind(query.clone()).push(" LIMIT ").push_bind(k as i64);
    let ids: Vec<Uuid> = qb.build_query_scalar().fetch_all(&mut *tx).await?;
    tx.commit().await?;
    Ok(ids)
}

/// Recall@10 of the filtered HNSW search against exact search, for the tenant closest to 1% of the rows.
async fn filtered_recall(pool: &PgPool, retriever: &Retriever, corpus: &Corpus, seed: u64) -> anyhow::Result<f64> {
    let target = corpus.total() / 100;
    let org = corpus.organizations.iter().min_by_key(|o| o.memories.abs_diff(target)).context("no organisation")?;
    let probes = probes(corpus, 200, seed + 99, Some(org));
    let mut hits = 0usize;
    for probe in &probes {
        let scope = retriever
            .scope_filter(probe.organization, Some(probe.agent), Some(probe.project), Some(probe.task), false)
            .await?;
        let query = Vector::from(probe.vector.clone());
        let mut tx = store::begin_vector_search(pool, org.id, 10, 30_000).await?;
        let approximate: Vec<Uuid> = store::candidates::vector_branch(
            &mut tx,
            &scope,
            &SearchFilters::default(),
            &query,
            10,
            CandidateExtras::NONE,
        )
        .await?
        .into_iter()
        .map(|r| r.memory.id)
        .collect();
        tx.execute("SET LOCAL enable_indexscan = off").await?;
        let mut qb = QueryBuilder::new("SELECT m.id FROM memory m WHERE ");
        scope.push_sql(&mut qb);
        qb.push(" ORDER BY m.embedding <=> ").push_bind(query.clone()).push(", m.id LIMIT 10");
        let exact: Vec<Uuid> = qb.build_query_scalar().fetch_all(&mut *tx).await?;
        tx.commit().await?;
        hits += approximate.iter().filter(|id| exact.contains(id)).count();
    }
    Ok(hits as f64 / (probes.len() * 10) as f64)
}

/// Recall@10 of the keyword branch (run at the pipeline's depth) against exact BM25, for the largest tenant.
async fn keyword_recall(pool: &PgPool, retriever: &Retriever, corpus: &Corpus, seed: u64) -> anyhow::Result<f64> {
    let org = corpus.organizations.iter().max_by_key(|o| o.memories).context("no organisation")?;
    let probes = probes(corpus, 200, seed + 77, Some(org));
    let (mut hits, mut expected) = (0usize, 0usize);
    for probe in &probes {
        let scope = retriever
            .scope_filter(probe.organization, Some(probe.agent), Some(probe.project), Some(probe.task), true)
            .await?;
        let filters = SearchFilters::default();
        let mut tx = store::begin_keyword_search(pool, org.id, 30_000).await?;
        let ids = |rows: Vec<CandidateRow>| rows.into_iter().take(10).map(|r| r.memory.id).collect::<Vec<_>>();
        let search = KeywordSearch {
            text_search_config: "memory_text",
            text: &probe.text,
            query: None,
            limit: retriever.config().branch_depth,
            extras: CandidateExtras::NONE,
        };
        let bounded = ids(store::candidates::keyword_branch(&mut tx, &scope, &filters, &search).await?);
        let exact = ids(store::candidates::keyword_branch_exact(&mut tx, &scope, &filters, &search).await?);
        tx.commit().await?;
        hits += bounded.iter().filter(|id| exact.contains(id)).count();
        expected += exact.len();
    }
    Ok(if expected == 0 { 1.0 } else { hits as f64 / expected as f64 })
}

async fn embed_latency(args: &Args) -> anyhow::Result<Percentiles> {
    let model = MiniLm::new(&args.model_dir)?;
    let corpus = Corpus::plan(1000, args.seed);
    let mut rng = StdRng::seed_from_u64(args.seed);
    let mut samples = Vec::new();
    for i in 0..201 {
        let text = format!("{} {i}", corpus.query_text(i, &mut rng));
        let t = Instant::now();
        model.embed_one(&text).await?;
        if i > 0 {
            samples.push(ms(t));
        }
    }
    Ok(Percentiles::of(&samples))
}

/// Runs the real retrieve server (the release binary next to this one) on the bench database and drives it
/// with concurrent clients on loopback for a bounded time.
async fn http_throughput(
    args: &Args,
    db: &scratch::Scratch,
    corpus: &Corpus,
) -> anyhow::Result<(HttpReport, Option<f64>)> {
    use http_body_util::{BodyExt, Full};
    use hyper::body::Bytes;
    use hyper_util::{client::legacy::Client, rt::TokioExecutor};

    let binary = std::env::current_exe()?.with_file_name("retrieve");
    anyhow::ensure!(
        binary.exists(),
        "{} not found: build the workspace's binaries with the same profile",
        binary.display()
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let secret = "bench-secret-of-at-least-thirty-two-bytes";
    let app_url = format!(
        "postgres://memory_app@{}:{}/{}",
        db.app_options.get_host(),
        db.app_options.get_port(),
        db.app_options.get_database().context("the scratch database has a name")?
    );
    let mut server = tokio::process::Command::new(&binary)
        .env("MEMORY_DATABASE_URL", app_url)
        .env("MEMORY_DB_MAX_CONNECTIONS", "16")
        .env("MEMORY_MODEL_DIR", &args.model_dir)
        .env("MEMORY_LLM", "none")
        .env("MEMORY_AUTH", "local-jwt")
        .env("MEMORY_JWT_SECRET", secret)
        .env("MEMORY_BIND", format!("127.0.0.1:{port}"))
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()?;
    let base = format!("http://127.0.0.1:{port}");
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let ready = Instant::now();
    loop {
        let ok = client.get(format!("{base}/healthz").parse()?).await.is_ok_and(|r| r.status().is_success());
        if ok {
            break;
        }
        anyhow::ensure!(ready.elapsed() < Duration::from_secs(30), "retrieve server did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let probes = Arc::new(probes(corpus, 5000, args.seed + 7, None));
    let deadline = Instant::now() + Duration::from_secs(args.http_seconds);
    let mut clients = Vec::new();
    for c in 0..args.concurrency {
        let (client, probes, base) = (client.clone(), probes.clone(), base.clone());
        clients.push(tokio::spawn(async move {
            let mut tokens: HashMap<Uuid, String> = HashMap::new();
            let (mut latencies, mut errors, mut i) = (Vec::new(), 0usize, c);
            while Instant::now() < deadline {
                let probe = &probes[i % probes.len()];
                i += STRIDE;
                let token = tokens.entry(probe.organization).or_insert_with(|| {
                    let claims = retrieve::Claims {
                        org_id: probe.organization.to_string(),
                        agent_id: Some(probe.agent.to_string()),
                        scope: None,
                        exp: Some(chrono::Utc::now().timestamp() as u64 + 3600),
                        iss: Some(retrieve::auth::LOCAL_ISSUER.into()),
                        aud: Some(retrieve::auth::LOCAL_AUDIENCE.into()),
                    };
                    retrieve::auth::sign_local_token(secret, &claims).expect("token")
                });
                let body = serde_json::json!({
                    "mode": "passive", "query": probe.text, "session_id": format!("bench-{c}"), "turn": i,
                    "project_id": probe.project, "task_id": probe.task,
                });
                let request = hyper::Request::post(format!("{base}/v1/retrieve"))
                    .header("content-type", "application/json")
                    .header("authorization", format!("Bearer {token}"))
                    .body(Full::new(Bytes::from(body.to_string())))
                    .expect("request");
                let t = Instant::now();
                match client.request(request).await {
                    Ok(response) => {
                        let ok = response.status().is_success();
                        let _ = response.into_body().collect().await;
                        if ok { latencies.push(ms(t)) } else { errors += 1 }
                    }
                    Err(_) => errors += 1,
                }
            }
            (latencies, errors)
        }));
    }
    let (mut latencies, mut errors) = (Vec::new(), 0);
    for c in clients {
        let (l, e) = c.await?;
        latencies.extend(l);
        errors += e;
    }
    let rss_mb = peak_rss_mb(server.id());
    server.kill().await?;
    let report = HttpReport {
        rps: latencies.len() as f64 / args.http_seconds as f64,
        p95_ms: Percentiles::of(&latencies).p95,
        requests: latencies.len(),
        errors,
        concurrency: args.concurrency,
    };
    Ok((report, rss_mb))
}

fn peak_rss_mb(pid: Option<u32>) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid?)).ok()?;
    let kb: f64 = status.lines().find(|l| l.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}
