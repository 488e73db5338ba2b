//! What memory-bench reports: the JSON document and the printed rows.

use memory_tools::stats::Percentiles;
use serde::Serialize;

#[derive(Serialize, Default)]
pub struct SizeReport {
    pub memories: usize,
    pub vector_ms: Percentiles,
    pub keyword_ms: Percentiles,
    /// Each branch run alone, the two one after the other, on other queries of the same distribution (the figures
    /// above are the pipeline's own, of the two run concurrently).
    pub vector_alone_ms: Percentiles,
    pub keyword_alone_ms: Percentiles,
    pub fusion_ms: Percentiles,
    pub e2e_ms: Percentiles,
    /// What end to end is made of: the context read before the branches (read scopes, taxonomy), and Stage 1 as
    /// the pipeline runs it (both branches concurrently, then fused).
    pub context_ms: Percentiles,
    pub branches_ms: Percentiles,
    pub baseline_ms: Percentiles,
    pub ratio_p95: f64,
    /// The raw query at the vector branch's depth (its LIMIT and ef_search), and end to end against it.
    pub baseline_depth_ms: Percentiles,
    pub ratio_depth_p95: f64,
    pub filtered_recall_at_10: f64,
    /// Overlap of the keyword branch's top 10 with the row-wise computation of exact BM25's, on the largest tenant
    /// (the one with the most postings a term), and the two timed on its queries.
    pub keyword_recall_at_10: f64,
    pub keyword_largest_ms: Percentiles,
    pub keyword_exact_ms: Percentiles,
    pub load_s: f64,
    pub index_s: f64,
    /// Tenants given their own ANN index (`memory-admin ann-indexes`).
    pub tenant_indexes: usize,
    /// What was read into shared buffers before timing (the relations retrieval reads), unless `--no-prewarm`.
    pub prewarmed_mb: Option<f64>,
    /// End to end on the same probes without and with `explain`, alternating which goes first.
    pub unexplained_ms: Percentiles,
    pub explained_ms: Percentiles,
    /// The planner's time for the vector branch's statement (`EXPLAIN (ANALYZE)`'s "Planning Time").
    pub vector_planning_ms: Percentiles,
}

/// One loopback HTTP run against the real retrieve server.
#[derive(Serialize, Default)]
pub struct HttpRun {
    pub rps: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub requests: usize,
    pub errors: usize,
    pub concurrency: usize,
    /// The server's CPU time (user + system) per answered request.
    pub server_cpu_ms_per_request: f64,
}

#[derive(Serialize)]
pub struct HttpReport {
    /// Every request a query not asked before (each embeds).
    pub distinct: HttpRun,
    /// A few queries asked over and over (query-embedding cache hits).
    pub repeated: HttpRun,
    /// The server's peak resident set size over both runs.
    pub peak_rss_mb: Option<f64>,
}

/// Query-embedding latency by query length (word pieces, [CLS] and [SEP] included).
#[derive(Serialize)]
pub struct EmbedReport {
    /// Queries of at most 32 word pieces (the target's range).
    pub up_to_32: Percentiles,
    pub by_length: Vec<LengthBucket>,
    pub word_pieces: Percentiles,
}

#[derive(Serialize)]
pub struct LengthBucket {
    pub word_pieces: String,
    pub queries: usize,
    pub ms: Percentiles,
}

/// Memories per second through `Ingestor::ingest` (batches of 100, embedded in the ingest transaction's batch).
#[derive(Serialize)]
pub struct IngestReport {
    pub sentence_per_s: f64,
    pub paragraph_per_s: f64,
    pub sentence_word_pieces: f64,
    pub paragraph_word_pieces: f64,
}

#[derive(Serialize)]
pub struct Report {
    pub sizes: Vec<SizeReport>,
    pub embed_ms: EmbedReport,
    pub ingest_per_s: IngestReport,
    /// Process start to the first answered `POST /v1/retrieve`, one sample per spawn.
    pub cold_start_ms: Option<Percentiles>,
    pub http: Option<HttpReport>,
    pub queries: usize,
    pub machine: String,
}

pub fn print_row(r: &SizeReport) {
    println!(
        "{:>9} memories | p50/p95/p99 ms  vector {:.2}/{:.2}/{:.2}  keyword {:.2}/{:.2}/{:.2}  fusion {:.2}/{:.2}/{:.2}  \
         e2e {:.2}/{:.2}/{:.2} (context {:.2}/{:.2}/{:.2}, both branches {:.2}/{:.2}/{:.2})  baseline {:.2}/{:.2}/{:.2} | e2e/baseline p95 {:.2} (raw at depth {:.2}/{:.2}/{:.2}, ratio {:.2}) | recall@10 {:.3}, keyword {:.3} (largest tenant p50/p95 ms: branch {:.2}/{:.2}, row-wise exact {:.2}/{:.2}) | load {:.0} s, index {:.0} s, {} tenant indexes",
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
        r.keyword_largest_ms.p50,
        r.keyword_largest_ms.p95,
        r.keyword_exact_ms.p50,
        r.keyword_exact_ms.p95,
        r.load_s,
        r.index_s,
        r.tenant_indexes,
    );
    println!(
        "{:>9} memories | each branch alone, p50/p95/p99 ms: vector {:.2}/{:.2}/{:.2}, keyword {:.2}/{:.2}/{:.2}",
        r.memories,
        r.vector_alone_ms.p50,
        r.vector_alone_ms.p95,
        r.vector_alone_ms.p99,
        r.keyword_alone_ms.p50,
        r.keyword_alone_ms.p95,
        r.keyword_alone_ms.p99
    );
    println!(
        "{:>9} memories | explain off / on, p50 {:.2} / {:.2} ms, p95 {:.2} / {:.2} ms",
        r.memories, r.unexplained_ms.p50, r.explained_ms.p50, r.unexplained_ms.p95, r.explained_ms.p95
    );
    println!(
        "{:>9} memories | planning the vector branch with {} tenant indexes, p50 {:.3} ms, p95 {:.3} ms",
        r.memories, r.tenant_indexes, r.vector_planning_ms.p50, r.vector_planning_ms.p95
    );
}

pub fn machine() -> String {
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

/// The tenant-count shape (`--indexed-tenants`): one corpus, its largest tenants given partitions of their own in
/// steps, each step measured.
#[derive(Serialize)]
pub struct TenantReport {
    pub memories: usize,
    pub organizations: usize,
    pub load_s: f64,
    pub index_s: f64,
    pub steps: Vec<TenantStep>,
    pub queries: usize,
    pub machine: String,
}

#[derive(Serialize)]
pub struct TenantStep {
    /// Tenants with a partition and HNSW index of their own.
    pub indexed: usize,
    /// Seconds the moves into and out of partitions took to reach this step.
    pub move_s: f64,
    pub e2e_ms: Percentiles,
    pub vector_ms: Percentiles,
    pub keyword_ms: Percentiles,
    /// The planner's time for the vector branch's statement, over every probe and over the indexed tenants' alone.
    pub vector_planning_ms: Percentiles,
    pub vector_planning_indexed_ms: Percentiles,
}

pub fn print_step(memories: usize, organizations: usize, s: &TenantStep) {
    println!(
        "{memories} memories in {organizations} organisations, {:>5} indexed (moved in {:.0} s) | p50/p95/p99 ms  e2e {:.2}/{:.2}/{:.2}  vector {:.2}/{:.2}/{:.2}  keyword {:.2}/{:.2}/{:.2} | planning the vector branch p50/p95 {:.3}/{:.3} ms (indexed tenants {:.3}/{:.3})",
        s.indexed,
        s.move_s,
        s.e2e_ms.p50,
        s.e2e_ms.p95,
        s.e2e_ms.p99,
        s.vector_ms.p50,
        s.vector_ms.p95,
        s.vector_ms.p99,
        s.keyword_ms.p50,
        s.keyword_ms.p95,
        s.keyword_ms.p99,
        s.vector_planning_ms.p50,
        s.vector_planning_ms.p95,
        s.vector_planning_indexed_ms.p50,
        s.vector_planning_indexed_ms.p95,
    );
}
