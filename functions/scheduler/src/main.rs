//! Lambda entry point of the scheduled tasks (the scheduler and the maintenance function).

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    scheduler::lambda_main().await
}
