//! Entry point: under Lambda (AWS_LAMBDA_RUNTIME_API set) serve API Gateway events, elsewhere listen on loopback.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    memory_core::telemetry::init();
    let in_lambda = std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some();
    let app = retrieve::app(retrieve::state_from_env(in_lambda).await?);
    if in_lambda {
        lambda_http::run(app).await.map_err(|e| anyhow::anyhow!(e))
    } else {
        let addr = std::env::var("MEMORY_BIND").unwrap_or_else(|_| "127.0.0.1:8787".into());
        let listener = tokio::net::TcpListener::bind(&addr).await?;
        tracing::info!("retrieve API listening on http://{}", listener.local_addr()?);
        axum::serve(listener, app).with_graceful_shutdown(shutdown()).await?;
        Ok(())
    }
}

async fn shutdown() {
    let _ = tokio::signal::ctrl_c().await;
}
