//! memory-admin: migrations, tenant indexes, the data a deployment is populated with, the job queues, the demo
//! corpus and local tokens.

mod operate;

use std::{io::Write, path::PathBuf};

use clap::{Parser, Subcommand};
use memory_core::{
    config::{self, DatabaseConfig},
    db,
    domain::{Scope, TrustLevel},
    ingest::Admission,
    store,
};
use memory_tools::demo;
use uuid::Uuid;

#[derive(Parser)]
#[command(name = "memory-admin", about = "Operate the agent-memory database and local stack")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply pending migrations (connects as MEMORY_ADMIN_DATABASE_URL, the schema owner).
    Migrate {
        /// The embedding dimension of a new database: 384 (MiniLM, the default) or Titan v2's 256, 512, 1024.
        #[arg(long)]
        embedding_dimensions: Option<i32>,
    },
    /// Give every tenant with at least --min-memories memories its own ANN index (and drop those of tenants
    /// that shrank below half of it). Run after migrations and periodically; safe to repeat.
    AnnIndexes {
        #[arg(long, default_value_t = store::ann::DEFAULT_MIN_MEMORIES)]
        min_memories: i64,
    },
    /// Agent profiles.
    Agents {
        #[command(subcommand)]
        command: AgentsCommand,
    },
    /// The memory taxonomy.
    Taxonomy {
        #[command(subcommand)]
        command: TaxonomyCommand,
    },
    /// Ingest memories from a JSON Lines file of ingest messages (one batch per line): sent to the ingest queue,
    /// or applied here with --direct.
    Ingest {
        file: PathBuf,
        /// Apply the batches here (embedding with MiniLM) instead of sending them to MEMORY_INGEST_QUEUE_URL.
        #[arg(long)]
        direct: bool,
        /// With --direct: store the memories active, without contradiction checks (a curated import).
        #[arg(long, requires = "direct")]
        activate: bool,
    },
    /// Import a git repository as memories: one file-backed memory per chunk (declarations of Rust, Python,
    /// TypeScript/JavaScript and Go; Markdown sections; other text by size), anchored and named by the file's blob
    /// SHA, sent to the ingest queue (or applied here with --direct). Running it again changes nothing.
    ImportRepo {
        #[arg(long)]
        org: Uuid,
        #[arg(long)]
        project: Uuid,
        /// The repository's name in memories and filters (default: the folder's name).
        #[arg(long)]
        name: Option<String>,
        /// The commit to import.
        #[arg(long = "ref", default_value = "HEAD")]
        reference: String,
        /// Apply the batches here (embedding with MiniLM) instead of sending them to MEMORY_INGEST_QUEUE_URL.
        #[arg(long)]
        direct: bool,
        /// The repository (default: the project's checkout, MEMORY_REPOS_DIR/<org>/<project>, which the file scan
        /// reads).
        path: Option<PathBuf>,
    },
    /// Forget memories for good: the content, context, embedding and index entries of every memory the selector
    /// matches, and of every memory derived from them (merges, entity profiles), are erased; tombstones keep the ids,
    /// times and chain links. Give one selector.
    Forget {
        #[arg(long)]
        org: Uuid,
        /// These memories (repeat the flag for several).
        #[arg(long = "memory")]
        memories: Vec<Uuid>,
        /// The memories an ingest batch wrote.
        #[arg(long)]
        batch: Option<String>,
        /// The memories whose source reference starts so.
        #[arg(long)]
        source_ref_prefix: Option<String>,
        /// An agent's memories.
        #[arg(long)]
        agent: Option<Uuid>,
        /// A project's memories.
        #[arg(long)]
        project: Option<Uuid>,
        /// Every memory of the organisation.
        #[arg(long)]
        everything: bool,
    },
    /// Write an organisation's active memories as ingest messages (JSON Lines, one batch a line) to standard
    /// output: provenance, times, scope, context, tags, labels, taxonomy, entities, files and anchors. `memory-admin
    /// ingest --direct --activate` of the file into an empty organisation gives the same retrieval results.
    Export {
        #[arg(long)]
        org: Uuid,
        /// Write the messages for this organisation instead (a copy into another one).
        #[arg(long)]
        to_org: Option<Uuid>,
    },
    /// The producers: which SQS senders may write into an organisation, claiming at most which trust.
    Producers {
        #[command(subcommand)]
        command: ProducersCommand,
    },
    /// The lifecycle decisions held for a person (a rule forbade them, or a rule decided in place of a job).
    Review {
        #[arg(long)]
        org: Uuid,
    },
    /// The worker queues.
    Jobs {
        #[command(subcommand)]
        command: JobsCommand,
    },
    /// Print (and remove) the domain events the local bus copied to its watch queue.
    Events {
        /// Seconds to wait for the first event (at most 4).
        #[arg(long, default_value_t = 2)]
        wait: i32,
    },
    /// Run a scheduled task here, as its schedule would: outbox-sweep, lifecycle-sweep, prune, file-scan (the
    /// daily fan-out), ann-indexes or migrate.
    Schedule { task: String },
    /// Run the file scan here, now (what the daily scan's jobs do), and print each organisation's report: every
    /// organisation with file-backed memories, or one (and one of its projects).
    Scan {
        #[arg(long)]
        org: Option<Uuid>,
        #[arg(long, requires = "org")]
        project: Option<Uuid>,
    },
    /// Load the demo corpus (two organisations) through the ingest path unless it is already there.
    SeedDemo,
    /// Print a local HS256 token signed with MEMORY_JWT_SECRET.
    Token {
        #[arg(long)]
        org: Uuid,
        #[arg(long)]
        agent: Option<Uuid>,
        /// Space-separated scopes, e.g. memory:any_agent
        #[arg(long)]
        scope: Option<String>,
        /// Lifetime in hours.
        #[arg(long, default_value_t = 24)]
        hours: u64,
    },
}

#[derive(Subcommand)]
enum AgentsCommand {
    /// Set an agent's memory read scopes (`org` is always included).
    SetScopes {
        #[arg(long)]
        org: Uuid,
        #[arg(long)]
        agent: Uuid,
        #[arg(long, default_value = "")]
        name: String,
        /// Comma-separated: org, project, task, agent_private.
        #[arg(long, value_delimiter = ',')]
        scopes: Vec<Scope>,
    },
}

#[derive(Subcommand)]
enum TaxonomyCommand {
    /// Import a tree of node names from a JSON or YAML file; nodes that exist are kept.
    Import {
        #[arg(long)]
        org: Uuid,
        file: PathBuf,
    },
}

#[derive(Subcommand)]
enum ProducersCommand {
    /// Let a sender (an IAM principal's id, as SQS reports it in `SenderId`) write into the organisation.
    Add {
        #[arg(long)]
        org: Uuid,
        #[arg(long)]
        sender: String,
        /// The highest trust its messages may claim: verified, unverified or untrusted.
        #[arg(long, default_value = "unverified")]
        max_trust: TrustLevel,
        #[arg(long, default_value = "")]
        name: String,
        /// Let a verified producer forget any memory of the organisation (`memory_forget`); without it, its forget
        /// requests reach only the memories of the batches it sent.
        #[arg(long)]
        forgets_any: bool,
        /// Let it write memories anchored to a chunk of a file (the sender of `memory-admin import-repo`).
        #[arg(long)]
        imports: bool,
    },
    /// Withdraw a sender's grant.
    Remove {
        #[arg(long)]
        org: Uuid,
        #[arg(long)]
        sender: String,
    },
    /// The organisation's producers.
    List {
        #[arg(long)]
        org: Uuid,
    },
}

#[derive(Subcommand)]
enum JobsCommand {
    /// Queue depths, dead-letter counts, what waits in the outboxes, held decisions and undecided candidates.
    Status,
    /// The messages on the dead-letter queues (of one job's queue with --job), with their receive counts.
    Dead {
        /// A job's worker: ingest, dedup, contradiction, synthesis or file-scan.
        #[arg(long)]
        job: Option<String>,
    },
    /// Sends the dead-letter queues' messages back to their queues to be tried again.
    Redrive {
        #[arg(long)]
        job: Option<String>,
    },
    /// Deletes an organisation's messages from the dead-letter queues (after forgetting: they may quote what was
    /// forgotten, and the queues keep them 14 days).
    Purge {
        #[arg(long)]
        org: Uuid,
        #[arg(long)]
        job: Option<String>,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    memory_core::telemetry::init();
    match Cli::parse().command {
        Command::Migrate { embedding_dimensions } => {
            let pool = admin_pool()?;
            store::migrate(&pool, embedding_dimensions).await?;
            println!("migrations applied; memory.embedding is vector({})", store::embedding_dimension(&pool).await?);
        }
        Command::AnnIndexes { min_memories } => {
            let changes = store::ann::reconcile(&admin_pool()?, min_memories).await?;
            println!(
                "tenant ANN indexes: {} created, {} dropped, {} kept",
                changes.created.len(),
                changes.dropped.len(),
                changes.kept
            );
        }
        Command::Agents { command: AgentsCommand::SetScopes { org, agent, name, scopes } } => {
            let scopes = operate::set_scopes(&admin_pool()?, org, agent, &name, &scopes).await?;
            println!("agent {agent} reads {}", scopes.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "));
        }
        Command::Taxonomy { command: TaxonomyCommand::Import { org, file } } => {
            let count = operate::import_taxonomy(&admin_pool()?, org, &file).await?;
            println!("taxonomy of {org}: {count} nodes imported");
        }
        Command::Ingest { file, direct, activate } => {
            let batches = operate::read_batches(&file)?;
            if direct {
                let model_dir = config::required("MEMORY_MODEL_DIR")?;
                let admission = if activate { Admission::Active } else { Admission::Candidate };
                operate::ingest_directly(&admin_pool()?, model_dir.as_ref(), &batches, admission).await?;
            } else {
                operate::send_batches(&batches).await?;
            }
        }
        Command::Forget { org, memories, batch, source_ref_prefix, agent, project, everything } => {
            use memory_core::lifecycle::forget::{ForgetSelector, forget};
            let mut selectors = Vec::new();
            if !memories.is_empty() {
                selectors.push(ForgetSelector::Memories(memories));
            }
            selectors.extend(batch.map(ForgetSelector::Batch));
            selectors.extend(source_ref_prefix.map(ForgetSelector::SourceRefPrefix));
            selectors.extend(agent.map(ForgetSelector::Agent));
            selectors.extend(project.map(ForgetSelector::Project));
            if everything {
                selectors.push(ForgetSelector::Organization);
            }
            let [selector] = selectors.as_slice() else {
                anyhow::bail!(
                    "give one selector: --memory, --batch, --source-ref-prefix, --agent, --project or --everything"
                );
            };
            println!("{} memories forgotten", forget(&admin_pool()?, org, selector).await?);
        }
        Command::Export { org, to_org } => {
            let mut out = std::io::stdout().lock();
            let mut batches = 0;
            let exported = memory_core::ingest::export::export(&admin_pool()?, org, to_org.unwrap_or(org), |batch| {
                batches += 1;
                Ok(writeln!(out, "{}", serde_json::to_string(&batch)?)?)
            })
            .await?;
            eprintln!("{exported} memories in {batches} batches");
        }
        Command::ImportRepo { org, project, name, reference, direct, path } => {
            let path = match path {
                Some(path) => path,
                None => {
                    PathBuf::from(config::required("MEMORY_REPOS_DIR")?).join(org.to_string()).join(project.to_string())
                }
            };
            let plan = operate::import_plan(&path, org, project, name, &reference)?;
            println!(
                "{}: {} files, {} chunks in {} batches ({} files not imported{})",
                path.display(),
                plan.files,
                plan.chunks,
                plan.batches.len(),
                plan.skipped.len(),
                if plan.skipped.is_empty() { "" } else { ":" }
            );
            let repository = plan.repository.clone();
            operate::record_skipped(&admin_pool()?, org, project, &repository, &plan.skipped).await?;
            if direct {
                let model_dir = config::required("MEMORY_MODEL_DIR")?;
                operate::ingest_directly(&admin_pool()?, model_dir.as_ref(), &plan.batches, Admission::Active).await?;
            } else {
                operate::send_batches(&plan.batches).await?;
            }
        }
        Command::Producers { command } => {
            let pool = admin_pool()?;
            let org = match &command {
                ProducersCommand::Add { org, .. }
                | ProducersCommand::Remove { org, .. }
                | ProducersCommand::List { org } => *org,
            };
            let mut tx = store::begin_for_org(&pool, org).await?;
            match command {
                ProducersCommand::Add { sender, max_trust, name, forgets_any, imports, .. } => {
                    anyhow::ensure!(
                        !forgets_any || max_trust == TrustLevel::Verified,
                        "--forgets-any needs --max-trust verified"
                    );
                    let producer =
                        store::producers::Producer { sender_id: sender, name, max_trust, forgets_any, imports };
                    store::producers::upsert(&mut *tx, org, &producer).await?;
                }
                ProducersCommand::Remove { sender, .. } => {
                    if !store::producers::remove(&mut *tx, org, &sender).await? {
                        anyhow::bail!("{sender} is not a producer of {org}");
                    }
                }
                ProducersCommand::List { .. } => {
                    for p in store::producers::list(&mut *tx, org).await? {
                        let forgets = if p.forgets_any { ", forgets any memory" } else { "" };
                        let imports = if p.imports { ", imports repositories" } else { "" };
                        println!("{} {} (at most {}{forgets}{imports})", p.sender_id, p.name, p.max_trust);
                    }
                }
            }
            tx.commit().await?;
        }
        Command::Review { org } => {
            let pool = admin_pool()?;
            let mut tx = store::begin_for_org(&pool, org).await?;
            for held in store::held::pending(&mut *tx, org).await? {
                let cause = match held.other_memory_id == held.memory_id {
                    true => String::new(),
                    false => format!(" (because of {})", held.other_memory_id),
                };
                println!("{} {} {}{cause}: {}", held.job, held.action, held.memory_id, held.reason);
            }
            tx.commit().await?;
        }
        Command::Jobs { command: JobsCommand::Status } => operate::jobs_status(&admin_pool()?).await?,
        Command::Jobs { command: JobsCommand::Dead { job } } => {
            operate::dead_letters(job.as_deref(), operate::DeadLetterAction::List).await?
        }
        Command::Jobs { command: JobsCommand::Redrive { job } } => {
            operate::dead_letters(job.as_deref(), operate::DeadLetterAction::Redrive).await?
        }
        Command::Jobs { command: JobsCommand::Purge { org, job } } => {
            operate::dead_letters(job.as_deref(), operate::DeadLetterAction::Purge(org)).await?
        }
        Command::Events { wait } => {
            let printed = operate::watch_events(wait).await?;
            eprintln!("{printed} events");
        }
        Command::Schedule { task } => {
            let task: scheduler::Task = serde_json::from_value(serde_json::json!({ "task": task.replace('-', "_") }))?;
            let pool = db::pool(&DatabaseConfig::from_env()?)?;
            let relay = aws_edge::relay::relay_from_env(pool.clone()).await?;
            println!("{}", scheduler::run(task, Some((&pool, &relay))).await?);
        }
        Command::Scan { org, project } => {
            let pool = db::pool(&DatabaseConfig::from_env()?)?;
            let model_dir = config::required("MEMORY_MODEL_DIR")?;
            let embedder = std::sync::Arc::new(memory_core::embed::MiniLm::new(std::path::Path::new(&model_dir))?);
            let scanner = workers::file_scan::scanner(embedder)?;
            let relay = aws_edge::relay::relay_from_env(pool.clone()).await?;
            let named = org.is_some();
            let organizations = match org {
                Some(org) => vec![org],
                None => store::turns::organizations(&pool).await?,
            };
            for org in organizations {
                let report = scanner.scan_project(&pool, org, project).await?;
                if report.scanned > 0 || named {
                    println!("{org}: {report:?}");
                }
                relay.flush(org).await?;
            }
        }
        Command::SeedDemo => {
            let pool = admin_pool()?;
            let model_dir = config::required("MEMORY_MODEL_DIR")?;
            demo::seed(&pool, model_dir.as_ref()).await?;
        }
        Command::Token { org, agent, scope, hours } => {
            let secret = config::required("MEMORY_JWT_SECRET")?;
            let exp = chrono::Utc::now().timestamp() as u64 + hours * 3600;
            let claims = retrieve::Claims {
                org_id: org.to_string(),
                agent_id: agent.map(|a| a.to_string()),
                scope,
                exp: Some(exp),
                iss: Some(std::env::var("MEMORY_JWT_ISSUER").unwrap_or_else(|_| retrieve::auth::LOCAL_ISSUER.into())),
                aud: Some(
                    std::env::var("MEMORY_JWT_AUDIENCE").unwrap_or_else(|_| retrieve::auth::LOCAL_AUDIENCE.into()),
                ),
            };
            println!("{}", retrieve::auth::sign_local_token(&secret, &claims)?);
        }
    }
    Ok(())
}

fn admin_pool() -> anyhow::Result<sqlx::PgPool> {
    let config = DatabaseConfig::with_url(config::required("MEMORY_ADMIN_DATABASE_URL")?.into())?;
    Ok(db::pool(&DatabaseConfig { acquire_timeout: std::time::Duration::from_secs(10), ..config })?)
}
