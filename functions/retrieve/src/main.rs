//! Entry point: under Lambda (AWS_LAMBDA_RUNTIME_API set) serve API Gateway events, elsewhere listen on loopback.
//! How callers are authenticated is configured (`MEMORY_AUTH`), never inferred from where it runs.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    memory_core::telemetry::init();
    memory_core::telemetry::init_metrics("retrieve");
    let app = retrieve::app(retrieve::state_from_env().await?);
    if std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some() {
        lambda_http::run(app).await.map_err(|e| anyhow::anyhow!(e))
    } else {
        let addr = std::env::var("MEMORY_BIND").unwrap_or_else(|_| "127.0.0.1:8787".into());
        let listener = tokio::net::TcpListener::bind(&addr).await?;
        retrieve::check_bind(&listener.local_addr()?)?;
        tracing::info!("retrieve API listening on http://{}", listener.local_addr()?);
        axum::serve(listener, app).with_graceful_shutdown(shutdown()).await?;
        Ok(())
    }
}

/// Ctrl-C or SIGTERM (what `make stop` sends): stop accepting, finish the requests in flight.
async fn shutdown() {
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    tracing::info!("shutting down: draining requests in flight");
}
