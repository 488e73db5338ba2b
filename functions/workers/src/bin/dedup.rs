//! Lambda entry point of the `dedup` worker function.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    workers::lambda_main(memory_core::jobs::JobType::MemoryDedupReview).await
}
