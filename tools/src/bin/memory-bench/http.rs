//! The real retrieve server on loopback: cold start, throughput with distinct and with repeated queries, its CPU
//! time per request and its peak memory.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use memory_tools::{scratch, stats::Percentiles, synthetic::Corpus};
use tokio::process::Child;
use uuid::Uuid;

use crate::{
    Args, ms,
    report::{HttpReport, HttpRun},
    workload::{Probe, probes},
};

/// Queries the repeated run cycles through.
const REPEATED_QUERIES: usize = 16;
const SECRET: &str = "bench-secret-of-at-least-thirty-two-bytes";
/// /proc reports CPU time in USER_HZ ticks, 100 per second on Linux.
const TICKS_PER_S: f64 = 100.0;

pub(crate) type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// The retrieve server (the binary next to this one, same profile) on a free loopback port.
pub(crate) struct Server {
    child: Child,
    pub base: String,
}

impl Server {
    pub fn spawn(args: &Args, db: &scratch::Scratch) -> anyhow::Result<Self> {
        let binary = std::env::current_exe()?.with_file_name("retrieve");
        anyhow::ensure!(
            binary.exists(),
            "{} not found: build the workspace's binaries with the same profile",
            binary.display()
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let app_url = format!(
            "postgres://memory_app@{}:{}/{}",
            db.app_options.get_host(),
            db.app_options.get_port(),
            db.app_options.get_database().context("the scratch database has a name")?
        );
        let child = tokio::process::Command::new(&binary)
            .env("MEMORY_DATABASE_URL", app_url)
            .env("MEMORY_DB_MAX_CONNECTIONS", "16")
            .env("MEMORY_MODEL_DIR", &args.model_dir)
            .env("MEMORY_LLM", "none")
            .env("MEMORY_AUTH", "local-jwt")
            .env("MEMORY_JWT_SECRET", SECRET)
            .env("MEMORY_BIND", format!("127.0.0.1:{port}"))
            .env("RUST_LOG", "warn")
            // Its metrics go to stdout (CloudWatch's embedded format); the logs, to stderr, stay.
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        Ok(Self { child, base: format!("http://127.0.0.1:{port}") })
    }

    /// User + system CPU seconds so far.
    fn cpu_s(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()?)).ok()?;
        // Fields after the command name (which may hold spaces): utime and stime are the 12th and 13th.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
        Some(ticks / TICKS_PER_S)
    }

    pub fn peak_rss_mb(&self) -> Option<f64> {
        self.status_mb("VmHWM:")
    }

    pub fn rss_mb(&self) -> Option<f64> {
        self.status_mb("VmRSS:")
    }

    fn status_mb(&self, field: &str) -> Option<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()?)).ok()?;
        let kb: f64 = status.lines().find(|l| l.starts_with(field))?.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb / 1024.0)
    }

    /// Waits until the server answers its health check.
    pub async fn ready(&self, client: &HttpClient) -> anyhow::Result<()> {
        let started = Instant::now();
        while !client.get(format!("{}/healthz", self.base).parse()?).await.is_ok_and(|r| r.status().is_success()) {
            anyhow::ensure!(started.elapsed() < Duration::from_secs(30), "retrieve server did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }
}

pub(crate) fn token(organization: Uuid, agent: Uuid) -> String {
    let claims = retrieve::Claims::local(organization, Some(agent), Duration::from_secs(3600));
    retrieve::auth::sign_local_token(SECRET, &claims).expect("token")
}

/// One passive-mode retrieval; whether it was answered with a 2xx.
async fn retrieve(client: &HttpClient, base: &str, token: &str, probe: &Probe, session: &str, turn: usize) -> bool {
    let body = serde_json::json!({
        "mode": "passive", "query": probe.text, "session_id": session, "turn": turn,
        "project_id": probe.project, "task_id": probe.task,
    });
    let request = hyper::Request::post(format!("{base}/v1/retrieve"))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("request");
    match client.request(request).await {
        Ok(response) => {
            let ok = response.status().is_success();
            let _ = response.into_body().collect().await;
            ok
        }
        Err(_) => false,
    }
}

/// Spawns the server `runs` times and times process start to the first answered retrieval (the client retries
/// every 2 ms until the port is open and the answer is a 2xx).
pub async fn cold_start(
    args: &Args,
    db: &scratch::Scratch,
    corpus: &Corpus,
    runs: usize,
) -> anyhow::Result<Percentiles> {
    let client: HttpClient = Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
    let probe = probes(corpus, 1, args.seed + 11, None).remove(0);
    let token = token(probe.organization, probe.agent);
    let mut samples = Vec::new();
    for run in 0..runs {
        let started = Instant::now();
        let mut server = Server::spawn(args, db)?;
        while !retrieve(&client, &server.base, &token, &probe, "cold", run).await {
            anyhow::ensure!(started.elapsed() < Duration::from_secs(30), "retrieve server did not answer");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        samples.push(ms(started));
        server.child.kill().await?;
    }
    Ok(Percentiles::of(&samples))
}

/// The distinct-query run, then the repeated-query run, against one server.
pub async fn throughput(args: &Args, db: &scratch::Scratch, corpus: &Corpus) -> anyhow::Result<HttpReport> {
    let server = Server::spawn(args, db)?;
    let client: HttpClient = Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
    server.ready(&client).await?;
    let all = Arc::new(probes(corpus, 5000, args.seed + 7, None));
    let few = Arc::new(probes(corpus, REPEATED_QUERIES, args.seed + 8, None));
    let distinct = run(args, &server, &client, all).await?;
    let repeated = run(args, &server, &client, few).await?;
    Ok(HttpReport { distinct, repeated, peak_rss_mb: server.peak_rss_mb() })
}

/// `--concurrency` clients for `--http-seconds`, each stepping through `probes` from its own offset (the
/// distinct run has more probes than the clients send).
async fn run(args: &Args, server: &Server, client: &HttpClient, probes: Arc<Vec<Probe>>) -> anyhow::Result<HttpRun> {
    let cpu_before = server.cpu_s();
    let deadline = Instant::now() + Duration::from_secs(args.http_seconds);
    let (mut clients, concurrency) = (Vec::new(), args.concurrency);
    for c in 0..concurrency {
        let (client, probes, base) = (client.clone(), probes.clone(), server.base.clone());
        clients.push(tokio::spawn(async move {
            let mut tokens: HashMap<(Uuid, Uuid), String> = HashMap::new();
            // Each client walks its own share of the probes, so no two send the same query unless all do.
            let (mut latencies, mut errors, mut i) = (Vec::new(), 0usize, c * probes.len() / concurrency);
            let session = format!("bench-{c}-{}", Uuid::new_v4());
            while Instant::now() < deadline {
                let probe = &probes[i % probes.len()];
                i += 1;
                let token = tokens
                    .entry((probe.organization, probe.agent))
                    .or_insert_with(|| token(probe.organization, probe.agent));
                let t = Instant::now();
                if retrieve(&client, &base, token, probe, &session, i).await {
                    latencies.push(ms(t));
                } else {
                    errors += 1;
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
    let cpu_s = server.cpu_s().zip(cpu_before).map_or(0.0, |(after, before)| after - before);
    let timing = Percentiles::of(&latencies);
    Ok(HttpRun {
        rps: latencies.len() as f64 / args.http_seconds as f64,
        p50_ms: timing.p50,
        p95_ms: timing.p95,
        requests: latencies.len(),
        errors,
        concurrency: args.concurrency,
        server_cpu_ms_per_request: cpu_s * 1000.0 / latencies.len().max(1) as f64,
    })
}
