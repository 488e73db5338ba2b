//! memory-bench: latency and scale of the retrieval path against the spec's targets and a raw pgvector query, and
//! what a caller waits on besides the database.
//!
//! For each corpus size (`retrieval`): a synthetic multi-tenant corpus (see `memory_tools::synthetic`) is
//! COPY-loaded into a scratch database, the ANN and full-text indexes are built, and `--queries` queries measure
//! `Retriever::query` end to end without the query embedding, with each of its stages as the pipeline timed it
//! (`Retriever::query_timed`: the context read, the vector and keyword branches, run concurrently, their fusion,
//! Stages 2-4), and the raw baseline (one HNSW query with the same tenant filter), interleaved, each with queries
//! of its own. Filtered recall@10 is measured for a tenant holding about 1%
//! of the rows. Then (`model`) MiniLM query-embedding latency by query length and the ingest rate through
//! `Ingestor`, and (`http`) the real retrieve server on the last size's database: cold start to the first answer,
//! throughput with distinct and with repeated queries, its CPU time per request and peak RSS.
//!
//! `--load` runs the saturation test instead (`load`, `make load`); `--indexed-tenants` the tenant-count shape
//! (`tenants`): the first size's corpus over `--organizations` organisations, its largest tenants given
//! partitions of their own in steps.

mod http;
mod load;
mod model;
mod report;
mod retrieval;
mod tenants;
mod workload;

use std::{path::PathBuf, sync::Arc, time::Instant};

use clap::Parser;
use memory_core::embed::MiniLm;
use memory_tools::plot;

use report::{Report, SizeReport};

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
    /// Duration of each HTTP throughput run (distinct, then repeated queries), in seconds (0 skips them).
    #[arg(long, default_value_t = 10)]
    http_seconds: u64,
    /// Concurrent HTTP clients.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Spawns of the retrieve server timed from process start to the first answer (0 skips them).
    #[arg(long, default_value_t = 5)]
    cold_starts: usize,
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Reuse a scratch database already holding this size's corpus (same seed) instead of loading it again.
    #[arg(long)]
    reuse: bool,
    /// Time queries on the buffers the load left instead of reading what retrieval reads into them first, as a
    /// warm instance holds it (`pg_prewarm`).
    #[arg(long)]
    no_prewarm: bool,
    #[arg(long, env = "MEMORY_MODEL_DIR")]
    model_dir: PathBuf,
    /// Run the saturation test on the largest size's corpus instead of the benchmark, each phase
    /// `--http-seconds` long.
    #[arg(long)]
    load: bool,
    /// Clients of the busy organisation in the saturation test.
    #[arg(long, default_value_t = 64)]
    load_clients: usize,
    /// Organisations the corpus is spread over.
    #[arg(long, default_value_t = memory_tools::synthetic::ORGANIZATIONS)]
    organizations: usize,
    /// Run the tenant-count shape instead of the benchmark: the largest tenants of the first size's corpus get
    /// partitions of their own, this many at each step (comma-separated), each step measured.
    #[arg(long, value_delimiter = ',')]
    indexed_tenants: Vec<usize>,
}

fn ms(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.load {
        let report = load::run(&args).await?;
        load::print(&report);
        if let Some(path) = &args.json {
            std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
        }
        return Ok(());
    }
    if !args.indexed_tenants.is_empty() {
        let report = tenants::run(&args).await?;
        if let Some(path) = &args.json {
            std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
        }
        return Ok(());
    }
    let mut sizes = Vec::new();
    let mut last = None;
    for &size in &args.sizes {
        let (report, db, corpus) = retrieval::bench_size(&args, size).await?;
        report::print_row(&report);
        sizes.push(report);
        last = Some((db, corpus));
    }

    let minilm = Arc::new(MiniLm::new(&args.model_dir)?);
    let embed_ms = model::embed_latency(&args, &minilm).await?;
    let e = &embed_ms.up_to_32;
    println!("query embedding (MiniLM, in process), up to 32 word pieces: p50 {:.2} ms, p95 {:.2} ms", e.p50, e.p95);
    for b in &embed_ms.by_length {
        println!(
            "  {:>5} word pieces: {:>3} queries, p50 {:.2} ms, p95 {:.2} ms",
            b.word_pieces, b.queries, b.ms.p50, b.ms.p95
        );
    }
    let ingest_per_s = model::ingest_rate(&args, minilm).await?;
    println!(
        "ingest through Ingestor: {:.0} one-sentence memories/s ({:.0} word pieces), {:.0} paragraphs/s ({:.0} word pieces)",
        ingest_per_s.sentence_per_s,
        ingest_per_s.sentence_word_pieces,
        ingest_per_s.paragraph_per_s,
        ingest_per_s.paragraph_word_pieces
    );

    let (mut cold_start_ms, mut http) = (None, None);
    if let Some((db, corpus)) = &last {
        if args.cold_starts > 0 {
            let c = http::cold_start(&args, db, corpus, args.cold_starts).await?;
            println!(
                "cold start to the first answer ({} spawns): p50 {:.0} ms, p95 {:.0} ms",
                args.cold_starts, c.p50, c.p95
            );
            cold_start_ms = Some(c);
        }
        if args.http_seconds > 0 {
            let h = http::throughput(&args, db, corpus).await?;
            for (name, r) in [("distinct", &h.distinct), ("repeated", &h.repeated)] {
                println!(
                    "HTTP /v1/retrieve, {name} queries, {} clients for {} s: {:.0} requests/s, p50 {:.1} ms, p95 {:.1} ms ({} requests, {} errors), server CPU {:.2} ms/request",
                    r.concurrency,
                    args.http_seconds,
                    r.rps,
                    r.p50_ms,
                    r.p95_ms,
                    r.requests,
                    r.errors,
                    r.server_cpu_ms_per_request
                );
            }
            println!("server peak RSS {:.0} MB", h.peak_rss_mb.unwrap_or_default());
            http = Some(h);
        }
    }

    let report = Report {
        sizes,
        embed_ms,
        ingest_per_s,
        cold_start_ms,
        http,
        queries: args.queries,
        machine: report::machine(),
    };
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
