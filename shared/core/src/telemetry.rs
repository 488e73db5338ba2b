//! Logging: JSON when Lambda asks for it (`AWS_LAMBDA_LOG_FORMAT=JSON`), text otherwise. Metrics: the `metrics`
//! facade, written in CloudWatch's embedded metric format (namespace `agent-memory`, dimension `function`) to
//! standard output after each request or batch ([`flush_metrics`]), which CloudWatch turns into metrics from the
//! function's logs. Without [`init_metrics`] (tests), recording is a no-op.

use std::sync::OnceLock;

use metrics_cloudwatch_embedded::Collector;
use tracing_subscriber::EnvFilter;

/// The metrics namespace of every function.
pub const METRICS_NAMESPACE: &str = "agent-memory";

static METRICS: OnceLock<&'static Collector> = OnceLock::new();

/// Installs the global metrics recorder for `function` once; later calls are no-ops.
pub fn init_metrics(function: &'static str) {
    if METRICS.get().is_some() {
        return;
    }
    let built = metrics_cloudwatch_embedded::Builder::new()
        .cloudwatch_namespace(METRICS_NAMESPACE)
        .with_dimension("function", function)
        .init();
    match built {
        Ok(collector) => {
            let _ = METRICS.set(collector);
        }
        Err(error) => tracing::warn!(%error, "metrics are not emitted"),
    }
}

/// Writes the metrics recorded since the last flush as one embedded-metric-format document per line.
pub fn flush_metrics_to(writer: impl std::io::Write) {
    if let Some(collector) = METRICS.get()
        && let Err(error) = collector.flush(writer)
    {
        tracing::warn!(%error, "metrics could not be written");
    }
}

/// [`flush_metrics_to`] standard output, where Lambda's logs take them.
pub fn flush_metrics() {
    flush_metrics_to(std::io::stdout());
}

/// Installs the global subscriber once; later calls are no-ops (tests call it freely).
pub fn init() {
    let level =
        std::env::var("AWS_LAMBDA_LOG_LEVEL").or_else(|_| std::env::var("RUST_LOG")).unwrap_or_else(|_| "info".into());
    let filter = EnvFilter::try_new(level.to_lowercase()).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_target(false);
    let json = std::env::var("AWS_LAMBDA_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let _ = if json { builder.json().without_time().try_init() } else { builder.try_init() };
}
