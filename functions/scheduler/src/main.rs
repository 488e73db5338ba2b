//! Lambda entry point of the scheduled tasks: the application pool and relay when the application database is
//! configured (the scheduler function), the owner's pool per maintenance task (the maintenance function).

use lambda_runtime::{LambdaEvent, service_fn};
use memory_core::secrets;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    memory_core::telemetry::init();
    memory_core::telemetry::init_metrics("scheduler");
    let app = match secrets::database_configured("MEMORY_DATABASE_URL", "MEMORY_DATABASE_SECRET_ARN") {
        true => {
            let config = secrets::database_config("MEMORY_DATABASE_URL", "MEMORY_DATABASE_SECRET_ARN").await?;
            let pool = memory_core::db::pool(&config)?;
            let relay = aws_edge::relay::relay_from_env(pool.clone()).await?;
            Some((pool, relay))
        }
        false => None,
    };
    lambda_runtime::run(service_fn(move |event: LambdaEvent<scheduler::Task>| {
        let app = app.clone();
        async move {
            let task = event.payload;
            tracing::info!(?task, "scheduled task");
            let outcome = scheduler::run(task, app.as_ref().map(|(p, r)| (p, r))).await;
            memory_core::telemetry::flush_metrics();
            let outcome = outcome?;
            tracing::info!(%outcome, "scheduled task finished");
            Ok::<_, lambda_runtime::Error>(outcome)
        }
    }))
    .await
}
