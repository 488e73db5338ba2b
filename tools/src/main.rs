//! memory-admin: migrations, the demo corpus and local tokens.

mod demo;

use clap::{Parser, Subcommand};
use memory_core::{
    config::{self, DatabaseConfig},
    db, store,
};
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
    Migrate,
    /// Give every tenant with at least --min-memories memories its own ANN index (and drop those of tenants
    /// that shrank below half of it). Run after migrations and periodically; safe to repeat.
    AnnIndexes {
        #[arg(long, default_value_t = store::ann::DEFAULT_MIN_MEMORIES)]
        min_memories: i64,
    },
    /// Load the demo corpus (two organisations) unless it is already there.
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    memory_core::telemetry::init();
    match Cli::parse().command {
        Command::Migrate => {
            let pool = admin_pool()?;
            store::MIGRATOR.run(&pool).await?;
            println!("migrations applied");
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
            };
            println!("{}", retrieve::auth::sign_local_token(&secret, &claims)?);
        }
    }
    Ok(())
}

fn admin_pool() -> anyhow::Result<sqlx::PgPool> {
    let url = config::required("MEMORY_ADMIN_DATABASE_URL")?;
    let config =
        DatabaseConfig { url: url.into(), max_connections: 4, acquire_timeout: std::time::Duration::from_secs(10) };
    Ok(db::pool(&config)?)
}
