//! import-bench (`make import-bench`): real repositories through `make run`'s queues and workers. The sources of
//! crates from the local cargo registry (tokio, serde_json, regex by default) are committed as git repositories under
//! the local `MEMORY_REPOS_DIR` and imported one after another as `memory-admin import-repo` sends them (one ingest
//! message a file); beside each, the same chunks as plain memories (no file, no anchor: the contradiction check
//! decides them, as any producer's) into an organisation of their own, interleaved, so the two rates are measured
//! side by side in one run. For each: chunks, files left out and why, time until every message is applied and no
//! candidate is left, the backlog's peak (messages not yet applied plus candidates), and the retrieve API's p95 for
//! another tenant (the demo organisation) during the import against idle. Then one repository gets a commit that
//! edits, moves and deletes declarations, and the file scan runs on it.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use clap::Parser;
use memory_core::{
    config,
    domain::{SourceKind, TrustLevel},
    ingest::IngestBatch,
    repository::{Snapshot, exclude::Exclusions, import},
    store,
};
use memory_tools::stats::Percentiles;
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

#[derive(Parser)]
#[command(name = "import-bench", about = "Repositories imported through the local queues, beside plain memories")]
struct Args {
    /// Crates of the local cargo registry, imported in this order.
    #[arg(long, default_value = "tokio,serde_json,regex", value_delimiter = ',')]
    crates: Vec<String>,
    /// The registry's sources (`~/.cargo/registry/src`).
    #[arg(long)]
    registry: Option<PathBuf>,
    /// Seconds of retrieval timed before the imports (idle).
    #[arg(long, default_value_t = 15)]
    idle_seconds: u64,
    /// The longest one import may take before the run fails, in seconds.
    #[arg(long, default_value_t = 3600)]
    timeout_seconds: u64,
    #[arg(long)]
    json: Option<PathBuf>,
}

/// The demo organisation whose retrieval is timed while the imports run.
const DEMO_ORG: &str = "0a000000-0000-4000-8000-000000000001";
const PROBES: [&str; 4] =
    ["how do we deploy billing-api", "what does E4021 mean", "rebase before the pull request", "connection pool"];

#[derive(Debug, Clone, Serialize)]
struct Phase {
    crate_name: String,
    /// `repository` (import-repo's chunks) or `plain` (the same texts as plain memories).
    shape: &'static str,
    messages: usize,
    chunks: usize,
    seconds: f64,
    chunks_per_second: f64,
    backlog_peak: i64,
    retrieval_ms: Percentiles,
}

#[derive(Debug, Serialize)]
struct Report {
    idle_retrieval_ms: Percentiles,
    phases: Vec<Phase>,
    skipped: BTreeMap<String, BTreeMap<String, usize>>,
    scan: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let registry = match &args.registry {
        Some(dir) => dir.clone(),
        None => PathBuf::from(config::required("HOME")?).join(".cargo/registry/src"),
    };
    let pool = memory_core::db::pool(&memory_core::config::DatabaseConfig::with_url(
        config::required("MEMORY_ADMIN_DATABASE_URL")?.into(),
    )?)?;
    let repos = PathBuf::from(config::required("MEMORY_REPOS_DIR")?);
    let queue = config::required("MEMORY_INGEST_QUEUE_URL")?;
    let api = format!("http://{}", std::env::var("MEMORY_BIND").unwrap_or_else(|_| "127.0.0.1:8787".into()));
    let sqs = aws_sdk_sqs::Client::new(&aws_edge::relay::sdk_config().await);
    let (repo_org, plain_org) = (Uuid::now_v7(), Uuid::now_v7());
    for org in [repo_org, plain_org] {
        grant(&pool, org).await?;
    }
    println!("repositories into {repo_org}, the same chunks as plain memories into {plain_org}");

    let prober = Prober::start(&api)?;
    tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
    let idle = prober.take();
    println!("idle: retrieval for another tenant p50 {:.1} ms, p95 {:.1} ms", idle.p50, idle.p95);

    let mut report = Report { idle_retrieval_ms: idle, phases: Vec::new(), skipped: BTreeMap::new(), scan: None };
    let mut first = None;
    for name in &args.crates {
        let source = newest_source(&registry, name)?;
        let project = Uuid::now_v7();
        let checkout = repos.join(repo_org.to_string()).join(project.to_string());
        commit_copy(&source, &checkout)?;
        let target = import::ImportTarget {
            organization_id: repo_org,
            project_id: project,
            repository: name.clone(),
            reference: "HEAD".into(),
            max_file_bytes: config::parsed_or(
                "MEMORY_FILE_MAX_BYTES",
                memory_core::repository::reader::DEFAULT_MAX_FILE_BYTES,
            )?,
        };
        let plan = import::plan(&Snapshot::open(&checkout, "HEAD")?, &target, Exclusions::secrets()?)?;
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        for file in &plan.skipped {
            *reasons.entry(file.reason.as_str().to_string()).or_default() += 1;
            if !matches!(file.reason, import::SkipReason::NotText | import::SkipReason::Empty) {
                println!("  {name}: left out {} ({}: {})", file.path, file.reason.as_str(), file.detail);
            }
        }
        println!(
            "{name}: {} files, {} chunks in {} messages; left out {reasons:?}",
            plan.files,
            plan.chunks,
            plan.batches.len()
        );
        report.skipped.insert(name.clone(), reasons);

        let plain = as_plain(&plan.batches, plain_org);
        for (shape, org, batches) in [("plain", plain_org, &plain), ("repository", repo_org, &plan.batches)] {
            let phase = run_phase(&pool, &sqs, &queue, &prober, org, batches, &args).await?;
            let phase = Phase { crate_name: name.clone(), shape, chunks: plan.chunks, ..phase };
            println!(
                "  {shape:<10} {:>5} chunks in {:>7.1} s: {:>6.1} chunks/s, backlog peak {:>5}, other tenant's retrieval p95 {:.1} ms",
                phase.chunks, phase.seconds, phase.chunks_per_second, phase.backlog_peak, phase.retrieval_ms.p95
            );
            report.phases.push(phase);
        }
        first.get_or_insert((project, checkout));
    }
    prober.stop();

    if let Some((project, checkout)) = first {
        report.scan = Some(edit_and_scan(&pool, repo_org, project, &checkout).await?);
    }
    for (name, shapes) in
        report.phases.chunk_by(|a, b| a.crate_name == b.crate_name).map(|p| (p[0].crate_name.clone(), p))
    {
        let rate = |shape: &str| shapes.iter().find(|p| p.shape == shape).map_or(0.0, |p| p.chunks_per_second);
        println!("{name}: repository / plain rate {:.2}", rate("repository") / rate("plain").max(f64::EPSILON));
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}

/// The local tools' sender may write into `org`, claiming verified trust.
async fn grant(pool: &PgPool, org: Uuid) -> anyhow::Result<()> {
    let producer = store::producers::Producer {
        sender_id: config::required("MEMORY_LOCAL_SENDER_ID")?,
        name: "import-bench".into(),
        max_trust: TrustLevel::Verified,
        forgets_any: false,
        imports: true,
    };
    let mut tx = store::begin_for_org(pool, org).await?;
    store::producers::upsert(&mut *tx, org, &producer).await?;
    tx.commit().await?;
    Ok(())
}

/// The newest version of a crate's sources in the registry.
fn newest_source(registry: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let mut found: Vec<PathBuf> = Vec::new();
    for index in std::fs::read_dir(registry)? {
        for entry in std::fs::read_dir(index?.path())? {
            let path = entry?.path();
            let folder = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
            let version = folder.strip_prefix(&format!("{name}-")).unwrap_or_default();
            if version.starts_with(|c: char| c.is_ascii_digit()) {
                found.push(path);
            }
        }
    }
    found.sort_by_key(|p| p.file_name().map(|f| f.to_owned()));
    found.pop().ok_or_else(|| anyhow::anyhow!("no sources of {name} under {} (cargo fetch first)", registry.display()))
}

/// `source` copied to `checkout` and committed as one git repository.
fn commit_copy(source: &Path, checkout: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(checkout)?;
    let copied = Command::new("cp").arg("-r").arg(format!("{}/.", source.display())).arg(checkout).status()?;
    anyhow::ensure!(copied.success(), "copying {}", source.display());
    std::fs::remove_file(checkout.join(".cargo-ok")).ok();
    for args in [&["init", "-q", "-b", "main"][..], &["add", "-A"], &["commit", "-q", "-m", "import"]] {
        git(checkout, args)?;
    }
    Ok(())
}

fn git(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let status = Command::new("git")
        .args(["-c", "user.name=bench", "-c", "user.email=bench@example.com", "-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .status()?;
    anyhow::ensure!(status.success(), "git {args:?}");
    Ok(())
}

/// The same texts as plain memories of `org`: no file, repository, anchor or blob SHA, a conversation as source.
fn as_plain(batches: &[IngestBatch], org: Uuid) -> Vec<IngestBatch> {
    let mut plain = batches.to_vec();
    for batch in &mut plain {
        batch.organization_id = org;
        batch.batch_id = format!("plain:{}", batch.batch_id);
        for m in &mut batch.memories {
            m.file_path = None;
            m.repository = None;
            m.anchor = None;
            m.provenance.git_blob_sha = None;
            m.provenance.source_kind = SourceKind::ConversationTurn;
            m.provenance.trust_level = TrustLevel::Unverified;
            m.confidence = 0.8;
        }
    }
    plain
}

/// Sends the batches to the ingest queue and waits until every one is applied and no candidate of `org` is left.
async fn run_phase(
    pool: &PgPool,
    sqs: &aws_sdk_sqs::Client,
    queue: &str,
    prober: &Prober,
    org: Uuid,
    batches: &[IngestBatch],
    args: &Args,
) -> anyhow::Result<Phase> {
    let before = applied(pool, org).await?;
    prober.take();
    let started = Instant::now();
    for batch in batches {
        sqs.send_message().queue_url(queue).message_body(serde_json::to_string(batch)?).send().await?;
    }
    let mut peak = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let done = applied(pool, org).await? - before;
        let candidates = candidates(pool, org).await?;
        peak = peak.max(batches.len() as i64 - done + candidates);
        if done >= batches.len() as i64 && candidates == 0 {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(args.timeout_seconds),
            "{done} of {} messages applied and {candidates} candidates left after {} s",
            batches.len(),
            args.timeout_seconds
        );
    }
    let seconds = started.elapsed().as_secs_f64();
    let chunks = batches.iter().map(|b| b.memories.len()).sum::<usize>();
    Ok(Phase {
        crate_name: String::new(),
        shape: "",
        messages: batches.len(),
        chunks,
        seconds,
        chunks_per_second: chunks as f64 / seconds,
        backlog_peak: peak,
        retrieval_ms: prober.take(),
    })
}

async fn applied(pool: &PgPool, org: Uuid) -> anyhow::Result<i64> {
    let mut tx = store::begin_for_org(pool, org).await?;
    let n = sqlx::query_scalar("SELECT count(*) FROM memory_ingest_batch WHERE organization_id = $1")
        .bind(org)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(n)
}

async fn candidates(pool: &PgPool, org: Uuid) -> anyhow::Result<i64> {
    let mut tx = store::begin_for_org(pool, org).await?;
    let n = sqlx::query_scalar("SELECT count(*) FROM memory WHERE organization_id = $1 AND status = 'candidate'")
        .bind(org)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(n)
}

/// A commit that edits a declaration, moves another (lines added above it) and deletes a third in the first
/// repository's largest Rust file, then the file scan of that project, here; returns its report.
async fn edit_and_scan(pool: &PgPool, org: Uuid, project: Uuid, checkout: &Path) -> anyhow::Result<String> {
    let largest = largest_rust_file(checkout)?;
    let text = std::fs::read_to_string(&largest)?;
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let functions: Vec<usize> =
        lines.iter().enumerate().filter(|(_, l)| l.trim_start().starts_with("pub fn ")).map(|(i, _)| i).collect();
    anyhow::ensure!(functions.len() >= 3, "{} has fewer than three public functions", largest.display());
    // Delete the last one's signature line (its chunk goes), edit the middle one's, and push everything down.
    let (edit, delete) = (functions[functions.len() / 2], functions[functions.len() - 1]);
    lines[delete] = "// removed".into();
    lines[edit].push_str(" // edited");
    lines.insert(0, "// moved down by a line".into());
    std::fs::write(&largest, lines.join("\n") + "\n")?;
    git(checkout, &["commit", "-qam", "edit, move, delete"])?;
    let embedder = Arc::new(memory_core::embed::MiniLm::new(Path::new(&config::required("MEMORY_MODEL_DIR")?))?);
    let scanner = workers::file_scan::scanner(embedder)?;
    let started = Instant::now();
    let report = scanner.scan_project(pool, org, Some(project)).await?;
    let line = format!("{} after a commit: {report:?} in {:.1} s", largest.display(), started.elapsed().as_secs_f64());
    println!("scan: {line}");
    Ok(line)
}

fn largest_rust_file(dir: &Path) -> anyhow::Result<PathBuf> {
    let mut best: Option<(u64, PathBuf)> = None;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(folder) = stack.pop() {
        for entry in std::fs::read_dir(&folder)? {
            let path = entry?.path();
            if path.file_name().is_some_and(|n| n == ".git") {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let size = path.metadata()?.len();
                if best.as_ref().is_none_or(|(s, _)| size > *s) {
                    best = Some((size, path));
                }
            }
        }
    }
    best.map(|(_, p)| p).ok_or_else(|| anyhow::anyhow!("no Rust file in {}", dir.display()))
}

/// Agent queries of the demo organisation, one after another, timed; `take` returns the percentiles since the last
/// take.
struct Prober {
    samples: Arc<std::sync::Mutex<Vec<f64>>>,
    running: Arc<AtomicBool>,
}

impl Prober {
    fn start(api: &str) -> anyhow::Result<Self> {
        let secret = config::required("MEMORY_JWT_SECRET")?;
        let claims = retrieve::Claims::local(DEMO_ORG.parse()?, None, Duration::from_secs(24 * 3600));
        let token = retrieve::auth::sign_local_token(&secret, &claims)?;
        let (samples, running) = (Arc::new(std::sync::Mutex::new(Vec::new())), Arc::new(AtomicBool::new(true)));
        let (url, into, go) = (format!("{api}/v1/tools/memory.query"), samples.clone(), running.clone());
        tokio::spawn(async move {
            let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<http_body_util::Full<hyper::body::Bytes>>();
            for i in 0usize.. {
                if !go.load(Ordering::Relaxed) {
                    break;
                }
                let body = serde_json::json!({"query": PROBES[i % PROBES.len()], "max_results": 10}).to_string();
                let request = hyper::Request::post(&url)
                    .header("authorization", format!("Bearer {token}"))
                    .header("content-type", "application/json")
                    .body(http_body_util::Full::new(hyper::body::Bytes::from(body)))
                    .expect("a request");
                let started = Instant::now();
                if let Ok(response) = client.request(request).await
                    && response.status().is_success()
                {
                    into.lock().expect("samples").push(started.elapsed().as_secs_f64() * 1000.0);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Ok(Self { samples, running })
    }

    fn take(&self) -> Percentiles {
        Percentiles::of(&std::mem::take(&mut *self.samples.lock().expect("samples")))
    }

    fn stop(&self) {
        self.running.store(false, Ordering::Relaxed);
    }
}
