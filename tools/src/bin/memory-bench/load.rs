//! `--load`: the real retrieve server at saturation on the largest size's corpus. `--load-clients` clients of its
//! largest organisation (REST and MCP; short, common-word and long queries) with ingest into it running alongside,
//! and one client of a quiet organisation measured at the same time and alone. Every client honours `Retry-After`.
//! Reports latency of the answered requests, answers by status, the server's peak RSS against its idle RSS, and
//! the quiet organisation's p95 under load against alone. An MCP answer is counted by what it carries
//! ([`mcp_status`]). The memories the ingest wrote are deleted afterwards, so the kept corpus stays the planned one.

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use memory_core::{
    embed::{Embedder, MiniLm},
    ingest::{Admission, IngestBatch, Ingestor, VERSION},
};
use memory_tools::{
    stats::Percentiles,
    synthetic::{COMMON, Corpus, Organization},
};
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde::Serialize;
use uuid::Uuid;

use crate::{
    Args,
    http::{HttpClient, Server, token},
    model, ms, retrieval,
    workload::{Precomputed, probes},
};

/// What one kind of client saw: latency of the 2xx answers, and every answer by status (0: no answer).
#[derive(Serialize, Default)]
pub struct Seen {
    pub answered_ms: Percentiles,
    pub by_status: BTreeMap<u16, usize>,
    pub requests_per_s: f64,
}

#[derive(Serialize)]
pub struct LoadReport {
    pub memories_of_the_busy_organization: usize,
    pub memories_of_the_quiet_organization: usize,
    pub clients: usize,
    pub seconds: u64,
    pub quiet_alone: Seen,
    pub quiet_under_load: Seen,
    pub busy: Seen,
    /// Memories written by the ingest running alongside.
    pub ingested_per_s: f64,
    pub idle_rss_mb: Option<f64>,
    pub peak_rss_mb: Option<f64>,
    /// Quiet p95 under load over quiet p95 alone.
    pub quiet_p95_ratio: f64,
}

/// What a busy client asks.
#[derive(Clone, Copy)]
enum Ask {
    /// A passive retrieval of a probe's few words.
    Short,
    /// An agent query of eight of the commonest words.
    Common,
    /// An agent query of about 6 KB of probe text.
    Long,
    /// `memory.query` over MCP.
    Mcp,
}

const ASKS: [Ask; 4] = [Ask::Short, Ask::Common, Ask::Long, Ask::Mcp];

pub async fn run(args: &Args) -> anyhow::Result<LoadReport> {
    let size = *args.sizes.iter().max().expect("a size");
    let prepared = retrieval::prepare(args, size).await?;
    if !args.no_prewarm {
        retrieval::prewarm(&prepared.db.admin).await?;
    }
    let corpus = &prepared.corpus;
    let (busy, quiet) = (&corpus.organizations[0], &corpus.organizations[corpus.organizations.len() / 10]);
    let server = Server::spawn(args, &prepared.db)?;
    let client: HttpClient = Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
    server.ready(&client).await?;
    let seconds = Duration::from_secs(args.http_seconds);

    // Warm: the model, the connections, both organisations' first reads.
    for org in [busy, quiet] {
        clients(&client, &server.base, corpus, org, 4, Duration::from_secs(2), args.seed, false).await;
    }
    let idle_rss_mb = server.rss_mb();
    eprintln!("quiet organisation alone, {} s", args.http_seconds);
    let quiet_alone = clients(&client, &server.base, corpus, quiet, 1, seconds, args.seed + 1, false).await;

    eprintln!(
        "{} clients of the busy organisation, ingest alongside, and the quiet one, {} s",
        args.load_clients, args.http_seconds
    );
    let writes = Writes::embedded(&args.model_dir, busy.id, seconds, args.seed).await?;
    let ingest = tokio::spawn(writes.ingest(prepared.db.app.clone()));
    let (busy_seen, quiet_seen) = tokio::join!(
        clients(&client, &server.base, corpus, busy, args.load_clients, seconds, args.seed + 2, true),
        clients(&client, &server.base, corpus, quiet, 1, seconds, args.seed + 3, false),
    );
    let ingested = ingest.await??;
    sqlx::query("DELETE FROM memory WHERE organization_id = $1 AND id = ANY($2)")
        .bind(busy.id)
        .bind(&ingested)
        .execute(&prepared.db.admin)
        .await?;
    let ratio = quiet_seen.answered_ms.p95 / quiet_alone.answered_ms.p95.max(f64::EPSILON);
    Ok(LoadReport {
        memories_of_the_busy_organization: busy.memories,
        memories_of_the_quiet_organization: quiet.memories,
        clients: args.load_clients,
        seconds: args.http_seconds,
        quiet_alone,
        quiet_under_load: quiet_seen,
        busy: busy_seen,
        ingested_per_s: ingested.len() as f64 / seconds.as_secs_f64(),
        idle_rss_mb,
        peak_rss_mb: server.peak_rss_mb(),
        quiet_p95_ratio: ratio,
    })
}

/// `count` clients of `org` for `length`, each asking in turn (`mixed`: every kind of [`Ask`], else short
/// passive ones), and waiting what a 429 or 503 says before the next.
#[allow(clippy::too_many_arguments)]
async fn clients(
    client: &HttpClient,
    base: &str,
    corpus: &Corpus,
    org: &Organization,
    count: usize,
    length: Duration,
    seed: u64,
    mixed: bool,
) -> Seen {
    // The quiet client never asks the same text twice in a phase: the query-embedding cache would answer the
    // repeats of a phase that ran longer or faster, and the phases would not pay for the same work.
    let distinct = if mixed { 2_000 } else { (length.as_secs() as usize * 1_000).max(2_000) };
    let probes = Arc::new(probes(corpus, distinct, seed, Some(org)));
    let deadline = Instant::now() + length;
    let tasks: Vec<_> = (0..count)
        .map(|c| {
            let (client, base, probes) = (client.clone(), base.to_string(), probes.clone());
            tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(seed + c as u64);
                let (mut answered, mut by_status) = (Vec::new(), BTreeMap::<u16, usize>::new());
                let mut tokens = std::collections::HashMap::new();
                let session = format!("load-{c}-{}", Uuid::new_v4());
                let mut turn = c * probes.len() / count;
                while Instant::now() < deadline {
                    turn += 1;
                    let probe = &probes[turn % probes.len()];
                    let ask = if mixed { ASKS[rng.random_range(0..ASKS.len())] } else { Ask::Short };
                    let token =
                        tokens.entry(probe.agent).or_insert_with(|| token(probe.organization, probe.agent)).clone();
                    let (uri, body) = match ask {
                        Ask::Short => (
                            "/v1/retrieve",
                            serde_json::json!({
                                "mode": "passive", "query": probe.text, "session_id": session, "turn": turn,
                                "project_id": probe.project, "task_id": probe.task,
                            }),
                        ),
                        Ask::Common => {
                            let words: Vec<&str> = (0..8).map(|_| COMMON[rng.random_range(0..COMMON.len())]).collect();
                            ("/v1/retrieve", serde_json::json!({"mode": "agent_query", "query": words.join(" ")}))
                        }
                        Ask::Long => {
                            let mut text = String::new();
                            while text.len() < 6_000 {
                                text.push_str(&probes[rng.random_range(0..probes.len())].text);
                                text.push(' ');
                            }
                            ("/v1/retrieve", serde_json::json!({"mode": "agent_query", "query": text}))
                        }
                        Ask::Mcp => (
                            "/mcp",
                            serde_json::json!({
                                "jsonrpc": "2.0", "id": turn, "method": "tools/call",
                                "params": {"name": "memory.query", "arguments": {"query": probe.text}},
                            }),
                        ),
                    };
                    let request = hyper::Request::post(format!("{base}{uri}"))
                        .header("content-type", "application/json")
                        .header("accept", "application/json, text/event-stream")
                        .header("authorization", format!("Bearer {token}"))
                        .body(Full::new(Bytes::from(body.to_string())))
                        .expect("request");
                    let t = Instant::now();
                    let (status, retry_after) = match client.request(request).await {
                        Ok(response) => {
                            let mut status = response.status().as_u16();
                            let retry_after = response
                                .headers()
                                .get("retry-after")
                                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
                            let body = response.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                            if matches!(ask, Ask::Mcp) && status == 200 {
                                status = mcp_status(&body);
                            }
                            (status, retry_after)
                        }
                        Err(_) => (0, None),
                    };
                    *by_status.entry(status).or_default() += 1;
                    if (200..300).contains(&status) {
                        answered.push(ms(t));
                    } else if let Some(wait) = retry_after {
                        tokio::time::sleep(Duration::from_secs(wait)).await;
                    }
                }
                (answered, by_status)
            })
        })
        .collect();
    let (mut answered, mut by_status) = (Vec::new(), BTreeMap::new());
    for task in tasks {
        let (a, s) = task.await.expect("a client");
        answered.extend(a);
        for (status, n) in s {
            *by_status.entry(status).or_default() += n;
        }
    }
    Seen {
        requests_per_s: answered.len() as f64 / length.as_secs_f64(),
        answered_ms: Percentiles::of(&answered),
        by_status,
    }
}

/// What an MCP answer (HTTP 200) carries, as the status REST would have answered: 500 for an internal JSON-RPC
/// error, 503 for an unavailable tool, 400 for another tool or protocol error, 200 for a result.
fn mcp_status(body: &[u8]) -> u16 {
    let answer: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let text = answer["result"]["content"][0]["text"].as_str().unwrap_or_default();
    if answer["error"]["code"] == -32603 {
        500
    } else if answer["result"]["isError"] == true {
        if text.starts_with("unavailable") { 503 } else { 400 }
    } else if answer["result"].is_object() {
        200
    } else {
        400
    }
}

/// What the extraction pipeline adds while agents read: a batch of ten memories a second into one organisation,
/// through `Ingestor` (the workers' path). Embedded before the run: in a deployment the ingest worker embeds on its
/// own Lambda's cores, and what it shares with the API is the database.
struct Writes {
    batches: Vec<IngestBatch>,
    embedder: Arc<Precomputed>,
}

impl Writes {
    async fn embedded(
        model_dir: &std::path::Path,
        organization_id: Uuid,
        length: Duration,
        seed: u64,
    ) -> anyhow::Result<Self> {
        let mut rng = StdRng::seed_from_u64(seed);
        // Texts of this run only: a kept corpus already holds the last run's, which would be duplicates.
        let run = Uuid::new_v4().simple().to_string();
        let batches: Vec<IngestBatch> = (0..length.as_secs().max(1))
            .map(|_| IngestBatch {
                job_type: None,
                version: VERSION,
                organization_id,
                batch_id: format!("load-{}", Uuid::new_v4()),
                memories: (0..10)
                    .map(|i| model::memory(&format!("{} ({run} {i})", model::paragraph(1, &mut rng))))
                    .collect(),
            })
            .collect();
        // No context: what is embedded is the content (a text it was not given fails the ingest, and the run).
        let texts: Vec<String> = batches.iter().flat_map(|b| b.memories.iter().map(|m| m.content.clone())).collect();
        let vectors = MiniLm::new(model_dir)?.embed(&texts).await?;
        Ok(Self { batches, embedder: Arc::new(Precomputed(texts.into_iter().zip(vectors).collect())) })
    }

    /// Writes one batch a second; returns the memories' ids.
    async fn ingest(self, pool: sqlx::PgPool) -> anyhow::Result<Vec<Uuid>> {
        let ingestor = Ingestor::new(pool, self.embedder);
        let (mut tick, mut written) = (tokio::time::interval(Duration::from_secs(1)), Vec::new());
        for batch in &self.batches {
            tick.tick().await;
            written.extend(ingestor.ingest(batch, Admission::Active).await?.memory_ids);
        }
        Ok(written)
    }
}

pub fn print(report: &LoadReport) {
    let row = |name: &str, seen: &Seen| {
        let p = seen.answered_ms;
        println!(
            "{name:<28} {:>7.1} answered/s  p50 {:>7.1}  p95 {:>7.1}  p99 {:>7.1} ms  statuses {:?}",
            seen.requests_per_s, p.p50, p.p95, p.p99, seen.by_status
        );
    };
    println!(
        "busy organisation {} memories, {} clients; quiet organisation {} memories; {} s each",
        report.memories_of_the_busy_organization,
        report.clients,
        report.memories_of_the_quiet_organization,
        report.seconds
    );
    row("quiet alone", &report.quiet_alone);
    row("quiet under load", &report.quiet_under_load);
    row("busy (REST + MCP)", &report.busy);
    println!(
        "ingest alongside {:.1} memories/s; server RSS idle {:.0} MB, peak {:.0} MB; quiet p95 under load / alone {:.2}",
        report.ingested_per_s,
        report.idle_rss_mb.unwrap_or_default(),
        report.peak_rss_mb.unwrap_or_default(),
        report.quiet_p95_ratio
    );
}
