//! memory-admin's data commands: what a deployment needs to be populated without SQL.

use std::{io::BufRead, path::Path, sync::Arc};

use aws_edge::dead_letters;
use memory_core::{
    domain::Scope,
    embed::MiniLm,
    ingest::{Admission, IngestBatch, Ingestor},
    jobs::JobType,
    store,
};
use sqlx::PgPool;
use uuid::Uuid;

/// Sets an agent's read scopes (creating its profile) and returns them: `org` is always among them.
pub async fn set_scopes(
    pool: &PgPool,
    org: Uuid,
    agent: Uuid,
    name: &str,
    scopes: &[Scope],
) -> anyhow::Result<Vec<Scope>> {
    let mut tx = store::begin_for_org(pool, org).await?;
    store::agents::upsert(&mut *tx, org, agent, name, scopes).await?;
    let stored = store::agents::read_scopes(&mut *tx, org, agent).await?.unwrap_or_default();
    tx.commit().await?;
    Ok(stored)
}

/// Imports a taxonomy tree from a JSON or YAML file: nested maps of node names (a leaf maps to nothing, an empty
/// map, or a list of leaf names). Existing nodes are kept; returns how many nodes the file names.
pub async fn import_taxonomy(pool: &PgPool, org: Uuid, file: &Path) -> anyhow::Result<usize> {
    let tree: serde_json::Value = serde_yaml_ng::from_str(&std::fs::read_to_string(file)?)?;
    let mut tx = store::begin_for_org(pool, org).await?;
    let mut count = 0;
    let mut stack: Vec<(Option<Uuid>, serde_json::Value)> = vec![(None, tree)];
    while let Some((parent, node)) = stack.pop() {
        match node {
            serde_json::Value::Object(children) => {
                for (name, child) in children {
                    let id = store::taxonomy::upsert_node(&mut *tx, org, parent, name.trim()).await?;
                    count += 1;
                    stack.push((Some(id), child));
                }
            }
            serde_json::Value::Array(leaves) => {
                for leaf in leaves {
                    let name =
                        leaf.as_str().ok_or_else(|| anyhow::anyhow!("a taxonomy list holds names, not {leaf}"))?;
                    store::taxonomy::upsert_node(&mut *tx, org, parent, name.trim()).await?;
                    count += 1;
                }
            }
            serde_json::Value::Null => {}
            other => anyhow::bail!("a taxonomy node maps to a map, a list of names or nothing, not {other}"),
        }
    }
    tx.commit().await?;
    Ok(count)
}

/// The ingest messages of a JSON Lines file, one batch per line.
pub fn read_batches(file: &Path) -> anyhow::Result<Vec<IngestBatch>> {
    let reader = std::io::BufReader::new(std::fs::File::open(file)?);
    let mut batches = Vec::new();
    for (n, line) in reader.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        batches.push(serde_json::from_str(&line).map_err(|e| anyhow::anyhow!("line {}: {e}", n + 1))?);
    }
    Ok(batches)
}

/// Sends each batch as one message to the ingest queue (`MEMORY_INGEST_QUEUE_URL`).
pub async fn send_batches(batches: &[IngestBatch]) -> anyhow::Result<()> {
    let url = memory_core::config::required(JobType::MemoryIngest.queue_variable())?;
    let sqs = aws_sdk_sqs::Client::new(&aws_edge::relay::sdk_config().await);
    for batch in batches {
        sqs.send_message().queue_url(&url).message_body(serde_json::to_string(batch)?).send().await?;
        println!("sent batch {} ({} memories)", batch.batch_id, batch.memories.len());
    }
    Ok(())
}

/// The batches that import the repository at `path` (named `name`, or by its folder) at `reference`.
pub fn import_plan(
    path: &Path,
    org: Uuid,
    project: Uuid,
    name: Option<String>,
    reference: &str,
) -> anyhow::Result<memory_core::repository::import::ImportPlan> {
    use memory_core::repository::{Snapshot, import};
    let snapshot = Snapshot::open(path, reference)?;
    let folder = path.canonicalize()?.file_name().map(|n| n.to_string_lossy().into_owned());
    let repository = name.or(folder).ok_or_else(|| anyhow::anyhow!("name the repository with --name"))?;
    let max_file_bytes = memory_core::config::parsed_or(
        "MEMORY_FILE_MAX_BYTES",
        memory_core::repository::reader::DEFAULT_MAX_FILE_BYTES,
    )?;
    let target = import::ImportTarget {
        organization_id: org,
        project_id: project,
        repository,
        reference: reference.to_string(),
        max_file_bytes,
    };
    Ok(import::plan(&snapshot, &target, memory_core::repository::exclude::Exclusions::secrets()?)?)
}

/// Records the files an import skipped (replacing its repository's last list) and prints them, one a line.
pub async fn record_skipped(
    pool: &PgPool,
    org: Uuid,
    project: Uuid,
    repository: &str,
    skipped: &[memory_core::repository::import::SkippedFile],
) -> anyhow::Result<()> {
    for file in skipped {
        println!("  skipped {} ({}: {})", file.path, file.reason.as_str(), file.detail);
    }
    let rows: Vec<(&str, &str, &str)> =
        skipped.iter().map(|f| (f.path.as_str(), f.reason.as_str(), f.detail.as_str())).collect();
    let mut tx = store::begin_for_org(pool, org).await?;
    store::skipped::replace(&mut tx, org, project, repository, &rows).await?;
    tx.commit().await?;
    Ok(())
}

/// Applies each batch here, embedding with MiniLM, then sends the follow-up jobs and events when the queues and
/// the bus are configured (otherwise they wait in the outbox).
pub async fn ingest_directly(
    pool: &PgPool,
    model_dir: &Path,
    batches: &[IngestBatch],
    admission: Admission,
) -> anyhow::Result<()> {
    let ingestor = Ingestor::new(pool.clone(), Arc::new(MiniLm::new(model_dir)?));
    let mut receipts = Vec::new();
    for batch in batches {
        let receipt = ingestor.ingest(batch, admission).await?;
        println!(
            "batch {}: {} created, {} duplicates{}",
            batch.batch_id,
            receipt.created,
            receipt.duplicates,
            if receipt.replayed { " (ingested before)" } else { "" }
        );
        receipts.push(receipt);
    }
    // An export's history (superseded and archived memories, their successors), in a curated import.
    if admission == Admission::Active && batches.iter().flat_map(|b| &b.memories).any(|m| m.history.is_some()) {
        let mut orgs: Vec<Uuid> = batches.iter().map(|b| b.organization_id).collect();
        orgs.dedup();
        for org in orgs {
            let restored = memory_core::ingest::export::restore_history(pool, org, batches, &receipts).await?;
            println!("{restored} memories of {org} restored to their history");
        }
    }
    match aws_edge::relay::relay_from_env(pool.clone()).await {
        Ok(relay) => {
            let mut orgs: Vec<Uuid> = batches.iter().map(|b| b.organization_id).collect();
            orgs.dedup();
            for org in orgs {
                if let Err(e) = relay.flush(org).await {
                    eprintln!("follow-up jobs and events of {org} wait in the outbox: {e}");
                }
            }
        }
        Err(e) => eprintln!("follow-up jobs and events wait in the outbox ({e})"),
    }
    Ok(())
}

/// Prints each configured queue's depth and its dead-letter queue's, and what waits in the outboxes.
pub async fn jobs_status(pool: &PgPool) -> anyhow::Result<()> {
    let sqs = aws_sdk_sqs::Client::new(&aws_edge::relay::sdk_config().await);
    println!("{:<28} {:>9} {:>9} {:>9}", "queue", "waiting", "in flight", "dead");
    for job in JobType::ALL {
        let Ok(url) = std::env::var(job.queue_variable()) else {
            println!("{:<28} (not configured: {})", job.as_str(), job.queue_variable());
            continue;
        };
        let (depth, dead) = dead_letters::depth_and_dead(&sqs, &url).await?;
        println!("{:<28} {:>9} {:>9} {:>9}", job.as_str(), depth.waiting, depth.in_flight, dead.unwrap_or(0));
    }
    // Per organisation, under its own setting: the owner need not bypass row-level security.
    let (mut jobs, mut events, mut held, mut undecided) = (0, 0, 0, 0);
    let waited = chrono::TimeDelta::minutes(15);
    let mut files = Vec::new();
    for org in store::turns::organizations(pool).await? {
        let mut tx = store::begin_for_org(pool, org).await?;
        jobs += store::jobs::unsent_counts(&mut *tx, org).await?.iter().map(|(_, n)| n).sum::<i64>();
        events += store::outbox::unpublished_count(&mut *tx, org).await?;
        held += store::held::pending(&mut *tx, org).await?.len();
        undecided += store::memories::undecided_candidates(&mut *tx, org, waited, i64::MAX).await?.len();
        let skipped = store::skipped::counts(&mut *tx, org).await?;
        if !skipped.is_empty() {
            let counts: Vec<String> = skipped.iter().map(|(reason, n)| format!("{n} {reason}")).collect();
            files.push(format!("organisation {org}: files not imported: {}", counts.join(", ")));
            for row in store::skipped::list(&mut *tx, org, SHOWN_FILES).await? {
                files.push(format!(
                    "  {} {}:{} ({}: {})",
                    row.project_id, row.repository, row.path, row.reason, row.detail
                ));
            }
        }
        for (project, path, error) in store::memories::scan_errors(&mut *tx, org, SHOWN_FILES).await? {
            let project = project.map_or_else(|| "(no project)".to_string(), |p| p.to_string());
            files.push(format!("organisation {org}: the scan could not read {project} {path}: {error}"));
        }
        tx.commit().await?;
    }
    println!("outbox: {jobs} jobs not sent, {events} events not published");
    println!(
        "held for review: {held} decisions (memory-admin review --org ...); candidates undecided after 15 min: {undecided}"
    );
    for line in files {
        println!("{line}");
    }
    Ok(())
}

/// The most skipped or unreadable files `jobs status` lists per organisation.
const SHOWN_FILES: i64 = 200;

/// What `memory-admin jobs` does with the dead-letter queues' messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadLetterAction {
    List,
    Redrive,
    /// Delete those of this organisation.
    Purge(Uuid),
}

/// Lists, sends back or purges the messages on the dead-letter queues of every job's queue, or of one job's (named
/// by its worker: ingest, dedup, ...).
pub async fn dead_letters(job: Option<&str>, action: DeadLetterAction) -> anyhow::Result<()> {
    let jobs: Vec<JobType> = match job {
        Some(name) => {
            vec![JobType::ALL.into_iter().find(|j| j.function() == name || j.as_str() == name).ok_or_else(|| {
                anyhow::anyhow!("no job {name:?}: ingest, dedup, contradiction, synthesis or file-scan")
            })?]
        }
        None => JobType::ALL.to_vec(),
    };
    let sqs = aws_sdk_sqs::Client::new(&aws_edge::relay::sdk_config().await);
    for job in jobs {
        let url = memory_core::config::required(job.queue_variable())?;
        let Some(dead) = dead_letters::queue_of(&sqs, &url).await? else {
            println!("{}: no dead-letter queue", job.as_str());
            continue;
        };
        match action {
            DeadLetterAction::Redrive if job == JobType::MemoryIngest => {
                // A message sent again carries the operator's SenderId, and the producer check would judge it under
                // the operator's grant: the producer sends it again instead.
                println!("{}: not redriven (a producer's message must come from the producer)", job.as_str());
            }
            DeadLetterAction::Redrive => {
                println!("{}: {} messages sent back", job.as_str(), dead_letters::redrive(&sqs, &dead, &url).await?);
            }
            DeadLetterAction::Purge(org) => {
                let purged = dead_letters::purge(&sqs, &dead, org).await?;
                println!("{}: {purged} messages of {org} deleted", job.as_str());
            }
            DeadLetterAction::List => {
                for message in dead_letters::list(&sqs, &dead).await? {
                    let body: String = message.body.chars().take(200).collect();
                    println!("{} {} received {}x: {body}", job.as_str(), message.message_id, message.receive_count);
                }
            }
        }
    }
    Ok(())
}

/// Prints (and removes) the domain events the local bus copied to `MEMORY_EVENTS_WATCH_QUEUE_URL`, waiting up to
/// `wait_seconds` for the first.
pub async fn watch_events(wait_seconds: i32) -> anyhow::Result<usize> {
    let url = memory_core::config::required("MEMORY_EVENTS_WATCH_QUEUE_URL")?;
    let sqs = aws_sdk_sqs::Client::new(&aws_edge::relay::sdk_config().await);
    let mut printed = 0;
    loop {
        let wait = if printed == 0 { wait_seconds.clamp(0, 4) } else { 0 };
        let messages = sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .wait_time_seconds(wait)
            .send()
            .await?
            .messages
            .unwrap_or_default();
        if messages.is_empty() {
            return Ok(printed);
        }
        for message in messages {
            let event: serde_json::Value = serde_json::from_str(message.body().unwrap_or("{}"))?;
            println!("{} {}", event["detail-type"].as_str().unwrap_or("?"), event["detail"]);
            printed += 1;
            if let Some(handle) = message.receipt_handle() {
                sqs.delete_message().queue_url(&url).receipt_handle(handle).send().await?;
            }
        }
    }
}
