//! Lambda entry point of the `synthesis` worker function.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    workers::lambda_main(memory_core::jobs::JobType::MemoryEntitySynthesis).await
}
