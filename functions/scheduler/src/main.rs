//! Lambda entry point of the scheduled tasks: the application pool and relay when `MEMORY_DATABASE_URL` is set
//! (the scheduler function), the owner's pool per maintenance task (the maintenance function).

use lambda_runtime::{LambdaEvent, service_fn};
use memory_core::config::DatabaseConfig;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    memory_core::telemetry::init();
    let app = match std::env::var("MEMORY_DATABASE_URL") {
        Ok(_) => {
            let pool = memory_core::db::pool(&DatabaseConfig::from_env()?)?;
            let relay = outbox_relay::relay_from_env(pool.clone()).await?;
            Some((pool, relay))
        }
        Err(_) => None,
    };
    lambda_runtime::run(service_fn(move |event: LambdaEvent<scheduler::Task>| {
        let app = app.clone();
        async move {
            let task = event.payload;
            tracing::info!(?task, "scheduled task");
            let outcome = scheduler::run(task, app.as_ref().map(|(p, r)| (p, r))).await?;
            tracing::info!(%outcome, "scheduled task finished");
            Ok::<_, lambda_runtime::Error>(outcome)
        }
    }))
    .await
}
