//! Per corpus size: load, then the retrieval path's parts timed against a raw pgvector query, and recall.

use std::{sync::Arc, time::Instant};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use memory_core::{
    retrieval::{RetrievalConfig, RetrievalMode, RetrievalRequest, Retriever, StageTimings, keyword, stage1},
    store::{
        self, ReadFilter, SearchFilters,
        branches::{BranchExtras, BranchRow, VectorScan},
    },
};
use memory_tools::{
    scratch,
    stats::Percentiles,
    synthetic::{self, Corpus},
};
use pgvector::Vector;
use sqlx::{Executor, PgPool, QueryBuilder};
use uuid::Uuid;

use crate::{
    Args, ms,
    report::SizeReport,
    workload::{Precomputed, Probe, probes},
};

/// The keyword-impact, keyword-tail and tag indexes: dropped for the load and rebuilt after it, as the migrations
/// define them (tenant ANN indexes are built after it).
const BULK_INDEXES: [&str; 3] = ["memory_posting_impact", "memory_posting_tail", "memory_tags"];

/// What retrieval reads, as a warm instance holds it in shared buffers: the memory heap and its primary key, the
/// tenant ANN indexes, the taxonomy tags, and the keyword branch's packed lists, gone postings, statistics and tail
/// index, with their primary keys and TOAST tables. Left to the first query that reads them: the postings' heap (the
/// tails' rows), memory's other B-tree indexes (the exact scans of tenants without an ANN index of their own) and the
/// small tables of the retrieval context.
const READ_SET: &str = "\
    WITH base AS (SELECT c.oid FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace \
        AND c.relkind IN ('r', 'i') AND (c.relname IN \
        ('memory', 'memory_posting_list', 'memory_posting_gone', 'memory_term_stats', 'memory_corpus_stats', \
         'memory_posting_tail', 'memory_taxonomy_tag') OR c.relname LIKE 'memory\\_vector\\_%')), \
    toast AS (SELECT c.reltoastrelid AS oid FROM pg_class c JOIN base USING (oid) WHERE c.reltoastrelid <> 0) \
    SELECT oid FROM base UNION SELECT oid FROM toast \
    UNION SELECT i.indexrelid FROM pg_index i JOIN base b ON i.indrelid = b.oid WHERE i.indisprimary \
    UNION SELECT i.indexrelid FROM pg_index i JOIN toast t ON i.indrelid = t.oid";

/// A size's scratch database, loaded (or reused, with `--reuse`, when it holds this corpus on this schema).
pub struct Prepared {
    pub db: scratch::Scratch,
    pub corpus: Corpus,
    pub load_s: f64,
    pub index_s: f64,
    tenant_indexes: usize,
}

pub async fn prepare(args: &Args, size: usize) -> anyhow::Result<Prepared> {
    eprintln!("== {size} memories");
    let corpus = Corpus::plan_tenants(size, args.organizations, args.seed);
    let name = match args.organizations {
        synthetic::ORGANIZATIONS => format!("memory_bench_{size}"),
        n => format!("memory_bench_{size}_{n}_organizations"),
    };
    // A database built by another corpus version or an older schema is not reused.
    let schema = store::MIGRATOR.iter().map(|m| m.version).max().unwrap_or_default();
    let marker = format!(
        "synthetic corpus v{}, schema {schema}: {size} memories in {} organisations, seed {}",
        synthetic::VERSION,
        args.organizations,
        args.seed
    );
    if args.reuse && scratch::comment(&name).await?.as_deref() == Some(marker.as_str()) {
        eprintln!("reusing {name}");
        let db = scratch::open(&name, 8).await?;
        let tenant_indexes = store::ann::indexed_tenants(&db.admin).await?.len();
        return Ok(Prepared { db, corpus, load_s: 0.0, index_s: 0.0, tenant_indexes });
    }
    let db = scratch::recreate(&name, 8).await?;
    let (load_s, index_s, tenant_indexes) = load(&db, &corpus).await?;
    db.admin.execute(format!("COMMENT ON DATABASE {name} IS '{marker}'").as_str()).await?;
    Ok(Prepared { db, corpus, load_s, index_s, tenant_indexes })
}

pub async fn bench_size(args: &Args, size: usize) -> anyhow::Result<(SizeReport, scratch::Scratch, Corpus)> {
    let Prepared { db, corpus, load_s, index_s, tenant_indexes } = prepare(args, size).await?;

    let prewarmed_mb = if args.no_prewarm { None } else { Some(prewarm(&db.admin).await?) };

    let warmup = 50;
    // The configuration the service runs with (MEMORY_* tunables honoured), but Stage 1 always asked of the
    // database: these are the pipeline's timings (the HTTP runs measure the found cache).
    let config = RetrievalConfig { found_cache_bytes: 0, ..RetrievalConfig::from_env()? };
    let depth = config.rows_per_branch;
    // Each measurement gets its own queries (same distribution, another seed): a query is new to the database
    // the first time it runs, and a measurement repeating another's queries would find their index pages and
    // rows already in CPU and page caches. End to end and the raw queries are interleaved, so none runs on a
    // database that the others have warmed for longer; each branch alone is timed after them.
    let probe_set = |salt: u64| probes(&corpus, args.queries + warmup, args.seed + size as u64 + salt, None);
    let (e2e_probes, raw_probes, raw_depth_probes) = (probe_set(1), probe_set(2), probe_set(3));
    let alone_probes = probe_set(4);
    let every = || e2e_probes.iter().chain(&raw_probes).chain(&raw_depth_probes).chain(&alone_probes);
    let embedder = Precomputed(every().map(|p| (p.text.clone(), p.vector.clone())).collect());
    let retriever = Retriever::new(db.app.clone(), Arc::new(embedder), None, config);
    let indexed = store::ann::indexed_tenants(&db.admin).await?;
    let scope_of = async |probe: &Probe| {
        retriever.scope_filter(probe.organization, Some(probe.agent), Some(probe.project), Some(probe.task), true).await
    };
    let bar = ProgressBar::new(e2e_probes.len() as u64)
        .with_style(ProgressStyle::with_template("querying {bar:40} {pos}/{len} eta {eta}").unwrap());

    // End to end, and each stage as the pipeline itself timed it in the same requests (passive, 20 results).
    let (mut e2e, mut baseline, mut baseline_depth) = (vec![], vec![], vec![]);
    let (mut vector_alone, mut keyword_alone) = (vec![], vec![]);
    let mut stages: Vec<StageTimings> = Vec::new();
    let request_of = |probe: &Probe, explain: bool| {
        let mut request = RetrievalRequest::new(probe.organization, RetrievalMode::Passive, probe.text.clone());
        request.agent_id = Some(probe.agent);
        request.project_id = Some(probe.project);
        request.task_id = Some(probe.task);
        request.explain = explain;
        request
    };
    for i in 0..e2e_probes.len() {
        let probe = &e2e_probes[i];
        let t = Instant::now();
        let (result, timings) = retriever.query_timed(request_of(probe, false)).await?;
        e2e.push(ms(t));
        stages.push(timings);
        anyhow::ensure!(!result.degraded, "degraded result: {:?}", result.degraded_reasons);

        for (k, probe, timings) in
            [(20, &raw_probes[i], &mut baseline), (depth, &raw_depth_probes[i], &mut baseline_depth)]
        {
            let (scope, query) = (scope_of(probe).await?, Vector::from(probe.vector.clone()));
            let t = Instant::now();
            raw_baseline(&db.app, &scope, &query, k, indexed.contains(&probe.organization)).await?;
            timings.push(ms(t));
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    // Each branch alone, one after the other, as the pipeline would run it for the tenant, with the taxonomy tags
    // (the pipeline runs the two concurrently, and times each as the pair shares the machine).
    for probe in &alone_probes {
        let (scope, query) = (scope_of(probe).await?, Vector::from(probe.vector.clone()));
        let memories = corpus.organizations.iter().find(|o| o.id == probe.organization).map_or(0, |o| o.memories);
        let extras = BranchExtras { taxonomy: true, profiled_entities: false };
        let partition = indexed.contains(&probe.organization);
        let settings = retriever.tenant_branch_settings(20, memories as i64, partition, extras);
        let filters = SearchFilters::default();
        let t = Instant::now();
        stage1::vector_branch(&db.app, &scope, &filters, &query, &settings).await?;
        vector_alone.push(ms(t));
        let t = Instant::now();
        stage1::keyword_branch(&db.app, &scope, &filters, &probe.text, Some(&query), &settings).await?;
        keyword_alone.push(ms(t));
    }
    // What planning the vector branch costs, as the server reports it.
    let mut planning = Vec::new();
    for probe in raw_probes.iter().skip(warmup) {
        let (scope, query) = (scope_of(probe).await?, Vector::from(probe.vector.clone()));
        planning.push(vector_planning_ms(&db.app, &scope, &query, depth, indexed.contains(&probe.organization)).await?);
    }
    // What explain costs: each probe asked without and with it, alternating which goes first.
    let (mut unexplained, mut explained) = (vec![], vec![]);
    for (i, probe) in e2e_probes.iter().enumerate() {
        for explain in if i % 2 == 0 { [false, true] } else { [true, false] } {
            let t = Instant::now();
            retriever.query(request_of(probe, explain)).await?;
            if explain { &mut explained } else { &mut unexplained }.push(ms(t));
        }
    }
    let stage = |of: fn(&StageTimings) -> f64| stages.iter().map(of).collect::<Vec<f64>>();
    let timed = |samples: &[f64]| Percentiles::of(&samples[warmup..]);

    let filtered_recall_at_10 = filtered_recall(&db.app, &retriever, &corpus, args.seed).await?;
    let largest = keyword_against_exact(&db.app, &retriever, &corpus, args.seed).await?;
    let (e2e_ms, baseline_ms, baseline_depth_ms) = (timed(&e2e), timed(&baseline), timed(&baseline_depth));
    let report = SizeReport {
        memories: size,
        vector_ms: timed(&stage(|t| t.vector_ms)),
        keyword_ms: timed(&stage(|t| t.keyword_ms)),
        vector_alone_ms: timed(&vector_alone),
        keyword_alone_ms: timed(&keyword_alone),
        fusion_ms: timed(&stage(|t| t.fusion_ms + t.classify_ms + t.rank_ms)),
        ratio_p95: e2e_ms.p95 / baseline_ms.p95,
        ratio_depth_p95: e2e_ms.p95 / baseline_depth_ms.p95,
        e2e_ms,
        context_ms: timed(&stage(|t| t.context_ms)),
        branches_ms: timed(&stage(|t| t.branches_ms)),
        baseline_ms,
        baseline_depth_ms,
        filtered_recall_at_10,
        keyword_recall_at_10: largest.agreement,
        keyword_largest_ms: Percentiles::of(&largest.branch_ms),
        keyword_exact_ms: Percentiles::of(&largest.exact_ms),
        load_s,
        index_s,
        tenant_indexes,
        prewarmed_mb,
        unexplained_ms: timed(&unexplained),
        explained_ms: timed(&explained),
        vector_planning_ms: Percentiles::of(&planning),
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
    eprintln!("packing the keyword postings");
    // Without the bulk indexes a lexeme's postings have no index of their own, so a per-lexeme nested loop would scan
    // the organisation's primary-key range once per lexeme: packing joins by hash here.
    let packing = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_with((*db.admin.connect_options()).clone().options([("enable_nestloop", "off")]))
        .await?;
    for organization in &corpus.organizations {
        while store::keyword::pack(&packing, organization.id, i64::MAX).await? > 0 {}
    }
    packing.close().await;
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

/// Reads [`READ_SET`] into shared buffers (`pg_prewarm`), as a warm instance holds it; returns its size in MB.
pub async fn prewarm(admin: &PgPool) -> anyhow::Result<f64> {
    admin.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm").await?;
    let blocks: i64 =
        sqlx::query_scalar(&format!("SELECT sum(pg_prewarm(oid))::int8 FROM ({READ_SET}) r")).fetch_one(admin).await?;
    let buffers: i64 = sqlx::query_scalar("SELECT setting::int8 FROM pg_settings WHERE name = 'shared_buffers'")
        .fetch_one(admin)
        .await?;
    let (read_set_mb, buffers_mb) = (blocks as f64 / 128.0, buffers as f64 / 128.0);
    eprintln!("prewarmed the read set: {read_set_mb:.0} MB into {buffers_mb:.0} MB of shared buffers");
    if read_set_mb > buffers_mb {
        eprintln!("the read set does not fit: queries will read from the OS page cache");
    }
    Ok(read_set_mb)
}

/// The baseline: one HNSW query under the same tenant filter (through the tenant's own partition when it has one,
/// else over `memory`), in a transaction set up like the vector branch's.
async fn raw_baseline(
    pool: &PgPool,
    scope: &ReadFilter,
    query: &Vector,
    k: usize,
    indexed: bool,
) -> anyhow::Result<Vec<Uuid>> {
    let scan = VectorScan::for_tenant(indexed);
    let mut tx =
        store::begin_vector_search(pool, scope.organization_id(), k, 5000, scan, &SearchFilters::default()).await?;
    let mut qb = if indexed {
        let mut qb = QueryBuilder::new(
            "SELECT m.id FROM memory_vector v JOIN memory m ON m.organization_id = v.organization_id \
             AND m.id = v.memory_id WHERE v.organization_id = ",
        );
        qb.push_bind(scope.organization_id()).push(" AND ");
        scope.push_sql(&mut qb);
        qb.push(" ORDER BY v.embedding <=> ");
        qb
    } else {
        let mut qb = QueryBuilder::new("SELECT m.id FROM memory m WHERE ");
        scope.push_sql(&mut qb);
        qb.push(" ORDER BY m.embedding <=> ");
        qb
    };
    qb.push_bind(query.clone()).push(" LIMIT ").push_bind(k as i64);
    let ids: Vec<Uuid> = qb.build_query_scalar().fetch_all(&mut *tx).await?;
    tx.commit().await?;
    Ok(ids)
}

/// The planner's time for the vector branch's statement as the pipeline asks it (the partition's arm for a tenant
/// with its own partition, the exact one for any other), from `EXPLAIN (ANALYZE, FORMAT JSON)`.
pub async fn vector_planning_ms(
    pool: &PgPool,
    scope: &ReadFilter,
    query: &Vector,
    k: usize,
    indexed: bool,
) -> anyhow::Result<f64> {
    let scan = VectorScan::for_tenant(indexed);
    let mut tx =
        store::begin_vector_search(pool, scope.organization_id(), k, 5000, scan, &SearchFilters::default()).await?;
    let plan =
        store::branches::explain_vector_branch(&mut tx, scope, &SearchFilters::default(), query, k, scan).await?;
    tx.commit().await?;
    plan[0]["Planning Time"].as_f64().context("EXPLAIN gave no Planning Time")
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
        let mut tx =
            store::begin_vector_search(pool, org.id, 10, 30_000, VectorScan::Either, &SearchFilters::default()).await?;
        let approximate: Vec<Uuid> = store::branches::vector_branch(
            &mut tx,
            &scope,
            &SearchFilters::default(),
            &query,
            10,
            BranchExtras::NONE,
            VectorScan::Either,
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

/// The keyword branch against the row-wise computation of the same ranking ([`store::keyword::keyword_branch_exact`])
/// on the largest tenant's queries, each run in turn in one transaction.
struct KeywordCheck {
    /// Overlap of the two top tens.
    agreement: f64,
    branch_ms: Vec<f64>,
    exact_ms: Vec<f64>,
}

async fn keyword_against_exact(
    pool: &PgPool,
    retriever: &Retriever,
    corpus: &Corpus,
    seed: u64,
) -> anyhow::Result<KeywordCheck> {
    let org = corpus.organizations.iter().max_by_key(|o| o.memories).context("no organisation")?;
    let probes = probes(corpus, 200, seed + 77, Some(org));
    let (mut hits, mut expected, mut branch_ms, mut exact_ms) = (0usize, 0usize, vec![], vec![]);
    for probe in &probes {
        let scope = retriever
            .scope_filter(probe.organization, Some(probe.agent), Some(probe.project), Some(probe.task), true)
            .await?;
        let filters = SearchFilters::default();
        let mut tx = store::begin_keyword_search(pool, org.id, 30_000).await?;
        let ids = |rows: Vec<BranchRow>| rows.into_iter().take(10).map(|r| r.memory.id).collect::<Vec<_>>();
        let settings = retriever.branch_settings(10);
        let (search, bm25) = (settings.keyword_search(&probe.text, None), settings.bm25);
        let t = Instant::now();
        let branch = ids(keyword::keyword_branch(&mut tx, &scope, &filters, &search, bm25).await?);
        branch_ms.push(ms(t));
        let t = Instant::now();
        let exact =
            ids(store::keyword::keyword_branch_exact(&mut tx, &scope, &filters, &search, (bm25.k1, bm25.b)).await?);
        exact_ms.push(ms(t));
        tx.commit().await?;
        hits += branch.iter().filter(|id| exact.contains(id)).count();
        expected += exact.len();
    }
    let agreement = if expected == 0 { 1.0 } else { hits as f64 / expected as f64 };
    Ok(KeywordCheck { agreement, branch_ms, exact_ms })
}
