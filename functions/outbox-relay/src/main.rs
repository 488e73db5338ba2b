//! Lambda entry point of the scheduled outbox sweep: publishes what the workers' own flushes left behind.

use lambda_runtime::{LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    memory_core::telemetry::init();
    let pool = memory_core::db::pool(&memory_core::config::DatabaseConfig::from_env()?)?;
    let relay = outbox_relay::relay_from_env(pool).await?;
    lambda_runtime::run(service_fn(move |_: LambdaEvent<serde_json::Value>| {
        let relay = relay.clone();
        async move {
            let report = relay.sweep().await?;
            tracing::info!(?report, "outbox sweep finished");
            Ok::<_, lambda_runtime::Error>(serde_json::json!({
                "published": report.published,
                "failed_organizations": report.failed_organizations,
            }))
        }
    }))
    .await
}
