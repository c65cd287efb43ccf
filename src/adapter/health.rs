//! The HTTP endpoints: `/metrics` (Prometheus), `/healthz` and `/livez` (the process is up),
//! `/readyz` (the caches are warm).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use super::metrics::Metrics;

/// The content type of the OpenMetrics text format.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What the endpoints report.
#[derive(Clone)]
pub struct Health {
    /// Metrics to serve.
    pub metrics: Arc<Metrics>,
    /// True once every watcher has listed.
    pub ready: Arc<AtomicBool>,
}

/// The router serving the endpoints.
pub fn router(health: Health) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(ok))
        .route("/livez", get(ok))
        .route("/readyz", get(readyz))
        .with_state(health)
}

/// Binds `address` and serves the endpoints until the task is dropped.
pub async fn serve(
    address: SocketAddr,
    health: Health,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(address).await?;
    let local = listener.local_addr()?;
    let handle = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router(health)).await {
            tracing::error!(error = %e, "HTTP server stopped");
        }
    });
    Ok((local, handle))
}

async fn metrics(State(h): State<Health>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, OPENMETRICS)], h.metrics.render())
}

async fn ok() -> &'static str {
    "ok"
}

async fn readyz(State(h): State<Health>) -> (StatusCode, &'static str) {
    if h.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced")
    }
}
