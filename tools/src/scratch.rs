//! A scratch database on the local (or given) server: dropped and recreated, migrated, with pools for the
//! owner (loading) and the application role (querying, RLS in force).

use anyhow::Context;
use memory_core::store;
use sqlx::{
    Executor, PgPool,
    postgres::{PgConnectOptions, PgPoolOptions},
};

pub struct Scratch {
    pub admin: PgPool,
    pub app: PgPool,
    pub app_options: PgConnectOptions,
}

/// Recreates database `name` on the server of `MEMORY_ADMIN_DATABASE_URL` (or `DATABASE_URL`).
pub async fn recreate(name: &str, app_connections: u32) -> anyhow::Result<Scratch> {
    let server = server()?;
    let maintenance = PgPoolOptions::new().max_connections(1).connect_with(server.clone().database("postgres")).await?;
    maintenance.execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str()).await?;
    maintenance.execute(format!("CREATE DATABASE {name}").as_str()).await?;
    maintenance.close().await;
    open(name, app_connections).await
}

/// The comment of database `name`, if the database exists (scratch databases record what they hold in it).
pub async fn comment(name: &str) -> anyhow::Result<Option<String>> {
    let maintenance = PgPoolOptions::new().max_connections(1).connect_with(server()?.database("postgres")).await?;
    let comment: Option<Option<String>> =
        sqlx::query_scalar("SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = $1")
            .bind(name)
            .fetch_optional(&maintenance)
            .await?;
    maintenance.close().await;
    Ok(comment.flatten())
}

fn server() -> anyhow::Result<PgConnectOptions> {
    let url = std::env::var("MEMORY_ADMIN_DATABASE_URL")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .context("set MEMORY_ADMIN_DATABASE_URL (the owner's connection), or run through make")?;
    Ok(url.parse()?)
}

/// Connects to existing database `name` and applies pending migrations.
pub async fn open(name: &str, app_connections: u32) -> anyhow::Result<Scratch> {
    let server = server()?;
    let admin = PgPoolOptions::new().max_connections(4).connect_with(server.clone().database(name)).await?;
    store::MIGRATOR.run(&admin).await.context("migrating the scratch database")?;
    let app_options = server.database(name).username("memory_app");
    let app = memory_core::store::connections::pool_options()
        .max_connections(app_connections)
        .connect_with(app_options.clone())
        .await?;
    Ok(Scratch { admin, app, app_options })
}
