//! The tenant-count shape (`--indexed-tenants 100,2000`): one corpus of many organisations (`--organizations`), its
//! largest tenants moved into partitions of their own (`store::ann::Mover`, as `memory-admin ann-indexes` does)
//! in steps, and at each step the retrieval path end to end and the planner's time for the vector branch.

use std::{sync::Arc, time::Instant};

use indicatif::{ProgressBar, ProgressStyle};
use memory_core::{
    retrieval::{RetrievalConfig, RetrievalMode, RetrievalRequest, Retriever, StageTimings},
    store,
};
use memory_tools::stats::Percentiles;
use pgvector::Vector;
use sqlx::PgPool;
use uuid::Uuid;

use crate::{
    Args, ms,
    report::{self, TenantReport, TenantStep},
    retrieval::{self, Prepared},
    workload::{Precomputed, probes},
};

pub async fn run(args: &Args) -> anyhow::Result<TenantReport> {
    let size = *args.sizes.first().ok_or_else(|| anyhow::anyhow!("--sizes names no size"))?;
    let Prepared { db, corpus, load_s, index_s, .. } = retrieval::prepare(args, size).await?;
    let mut by_size: Vec<_> = corpus.organizations.iter().collect();
    by_size.sort_by(|a, b| b.memories.cmp(&a.memories).then(a.id.cmp(&b.id)));

    let warmup = 50;
    let config = RetrievalConfig { found_cache_bytes: 0, ..RetrievalConfig::from_env()? };
    let depth = config.rows_per_branch;
    let mut steps = Vec::new();
    for (n, &indexed) in args.indexed_tenants.iter().enumerate() {
        let wanted: Vec<Uuid> = by_size.iter().take(indexed).map(|o| o.id).collect();
        let started = Instant::now();
        move_to(&db.admin, &wanted).await?;
        let move_s = started.elapsed().as_secs_f64();
        if !args.no_prewarm {
            retrieval::prewarm(&db.admin).await?;
        }

        let probe_set = probes(&corpus, args.queries + warmup, args.seed + 1_000 * n as u64, None);
        let embedder = Precomputed(probe_set.iter().map(|p| (p.text.clone(), p.vector.clone())).collect());
        let retriever = Retriever::new(db.app.clone(), Arc::new(embedder), None, config.clone());
        let bar = ProgressBar::new(probe_set.len() as u64)
            .with_style(ProgressStyle::with_template("querying {bar:40} {pos}/{len} eta {eta}").unwrap());
        let (mut e2e, mut stages, mut planning, mut planning_indexed) = (vec![], vec![], vec![], vec![]);
        for (i, probe) in probe_set.iter().enumerate() {
            let mut request = RetrievalRequest::new(probe.organization, RetrievalMode::Passive, probe.text.clone());
            (request.agent_id, request.project_id, request.task_id) =
                (Some(probe.agent), Some(probe.project), Some(probe.task));
            let t = Instant::now();
            let (result, timings) = retriever.query_timed(request).await?;
            let took = ms(t);
            anyhow::ensure!(!result.degraded, "degraded result: {:?}", result.degraded_reasons);
            let scope = retriever
                .scope_filter(probe.organization, Some(probe.agent), Some(probe.project), Some(probe.task), true)
                .await?;
            let query = Vector::from(probe.vector.clone());
            let indexed = wanted.contains(&probe.organization);
            let planned = retrieval::vector_planning_ms(&db.app, &scope, &query, depth, indexed).await?;
            if i >= warmup {
                e2e.push(took);
                stages.push(timings);
                planning.push(planned);
                if indexed {
                    planning_indexed.push(planned);
                }
            }
            bar.inc(1);
        }
        bar.finish_and_clear();
        let stage = |of: fn(&StageTimings) -> f64| Percentiles::of(&stages.iter().map(of).collect::<Vec<f64>>());
        let step = TenantStep {
            indexed: store::ann::indexed_tenants(&db.admin).await?.len(),
            move_s,
            e2e_ms: Percentiles::of(&e2e),
            vector_ms: stage(|t| t.vector_ms),
            keyword_ms: stage(|t| t.keyword_ms),
            vector_planning_ms: Percentiles::of(&planning),
            vector_planning_indexed_ms: Percentiles::of(&planning_indexed),
        };
        report::print_step(size, corpus.organizations.len(), &step);
        steps.push(step);
    }
    Ok(TenantReport {
        memories: size,
        organizations: corpus.organizations.len(),
        load_s,
        index_s,
        steps,
        queries: args.queries,
        machine: report::machine(),
    })
}

/// Gives exactly `wanted` partitions of their own: the others move out, the missing move in, one at a time.
async fn move_to(admin: &PgPool, wanted: &[Uuid]) -> anyhow::Result<()> {
    let mut mover = store::ann::Mover::lock(admin).await?;
    let have = store::ann::indexed_tenants(admin).await?;
    for org in have.iter().filter(|o| !wanted.contains(o)) {
        mover.move_out(*org).await?;
    }
    let missing: Vec<&Uuid> = wanted.iter().filter(|o| !have.contains(o)).collect();
    let bar = ProgressBar::new(missing.len() as u64)
        .with_style(ProgressStyle::with_template("moving tenants in {bar:40} {pos}/{len} eta {eta}").unwrap());
    for org in missing {
        mover.move_in(*org).await?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(())
}
