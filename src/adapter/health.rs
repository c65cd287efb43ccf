//! The HTTP endpoints: `/metrics` (Prometheus), `/healthz` and `/livez` (the process is up),
//! `/readyz` (the caches are warm), `/debug/decisions/<namespace>/<pod>` (the pod's latest
//! scheduling attempts, as decision records in JSON), `POST /debug/whatif` (where pods would
//! go, see [`crate::whatif`]), `GET /debug/snapshot` (the scheduler's state in the
//! simulator's input format), and `/debug/pprof` when profiling is on.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};

use super::metrics::Metrics;
use super::questions::{QuestionError, Questions};
use crate::decision::SharedStore;
use crate::decision::store::latest_shared;

/// Attempts `/debug/decisions` returns when the query does not say (`?attempts=N`).
pub const DEFAULT_ATTEMPTS: usize = 10;

/// What the endpoints report.
#[derive(Clone)]
pub struct Health {
    /// Metrics to serve.
    pub metrics: Arc<Metrics>,
    /// True once every watcher has listed.
    pub ready: Arc<AtomicBool>,
    /// The latest decision records.
    pub decisions: SharedStore,
    /// Whether `/debug/pprof` is served (`enableProfiling`).
    pub profiling: bool,
    /// The way to the scheduler for `/debug/whatif` and `/debug/snapshot` (none: they
    /// answer 503).
    pub questions: Option<Questions>,
}

/// The router serving the endpoints.
pub fn router(health: Health) -> Router {
    let profiling = health.profiling;
    let router = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(ok))
        .route("/livez", get(ok))
        .route("/readyz", get(readyz))
        .route("/debug/decisions/{namespace}/{pod}", get(decisions))
        .route("/debug/whatif", post(what_if))
        .route("/debug/snapshot", get(snapshot))
        .with_state(health);
    if profiling {
        router.merge(super::profiling::router())
    } else {
        router
    }
}

/// Binds `address` and serves the endpoints over plain HTTP, open to all (`--address`),
/// until the task is dropped. The secure port is served by the adapter's serving module.
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

async fn metrics(State(h): State<Health>, headers: header::HeaderMap) -> impl IntoResponse {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let (content_type, body) = h.metrics.render(accept);
    ([(header::CONTENT_TYPE, content_type)], body)
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

/// A text answer with its status.
type TextAnswer = (StatusCode, [(header::HeaderName, &'static str); 1], String);

fn text(status: StatusCode, message: String) -> TextAnswer {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message,
    )
}

/// The questions, once the caches are warm: before, the state is partial.
fn questions(h: &Health) -> Result<&Questions, TextAnswer> {
    let Some(questions) = &h.questions else {
        return Err(text(
            StatusCode::SERVICE_UNAVAILABLE,
            "this gantry answers no questions\n".to_string(),
        ));
    };
    if !h.ready.load(Ordering::Relaxed) {
        return Err(text(
            StatusCode::SERVICE_UNAVAILABLE,
            "caches not synced: the scheduler's state is not complete yet\n".to_string(),
        ));
    }
    Ok(questions)
}

fn failed(e: QuestionError) -> TextAnswer {
    let status = match e {
        QuestionError::Invalid(_) => StatusCode::BAD_REQUEST,
        QuestionError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    text(status, format!("{e}\n"))
}

/// `POST /debug/whatif`: a [`crate::whatif::Question`] (JSON) answered against the
/// scheduler's state now, as a [`crate::whatif::Answer`] (JSON).
async fn what_if(State(h): State<Health>, body: axum::body::Bytes) -> TextAnswer {
    let questions = match questions(&h) {
        Ok(q) => q,
        Err(answer) => return answer,
    };
    let question = match serde_json::from_slice(&body) {
        Ok(q) => q,
        Err(e) => {
            return text(
                StatusCode::BAD_REQUEST,
                format!("the question is not a what-if question: {e}\n"),
            );
        }
    };
    match questions.ask(question).await {
        Ok(answer) => match serde_json::to_string(&answer) {
            Ok(body) => (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                body,
            ),
            Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
        },
        Err(e) => failed(e),
    }
}

/// `GET /debug/snapshot`: the scheduler's state now (nodes, placed and queued pods, and the
/// other objects its plugins read) in the simulator's input format, a YAML `List`.
async fn snapshot(State(h): State<Health>) -> TextAnswer {
    let questions = match questions(&h) {
        Ok(q) => q,
        Err(answer) => return answer,
    };
    let reply = match questions.view(true).await {
        Ok(reply) => reply,
        Err(e) => return failed(e),
    };
    let written = tokio::task::spawn_blocking(move || {
        crate::sim::snapshot::write(&reply.view, &reply.queued)
    })
    .await;
    match written {
        Ok(Ok(yaml)) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/yaml")],
            yaml,
        ),
        Ok(Err(e)) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
    }
}

/// The pod's latest attempts, newest first, as a JSON array of decision records; 404 when
/// none is recorded, 400 for a bad `attempts`.
async fn decisions(
    State(h): State<Health>,
    Path((namespace, pod)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> (StatusCode, [(header::HeaderName, &'static str); 1], String) {
    let text = [(header::CONTENT_TYPE, "text/plain; charset=utf-8")];
    let mut attempts = DEFAULT_ATTEMPTS;
    for (key, value) in form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes()) {
        if key == "attempts" {
            match value.parse::<usize>() {
                Ok(n) if n > 0 => attempts = n,
                _ => {
                    return (
                        StatusCode::BAD_REQUEST,
                        text,
                        format!("attempts must be a positive number, got {value:?}\n"),
                    );
                }
            }
        }
    }
    let records = latest_shared(&h.decisions, &namespace, &pod, attempts);
    if records.is_empty() {
        let capacity = h
            .decisions
            .lock()
            .map(|s| s.capacity())
            .unwrap_or_else(|e| e.into_inner().capacity());
        return (
            StatusCode::NOT_FOUND,
            text,
            format!(
                "no scheduling attempt of pod {namespace}/{pod} is recorded (this gantry keeps \
                 the latest {capacity} attempts of all pods it schedules)\n"
            ),
        );
    }
    let records: Vec<&crate::decision::DecisionRecord> = records.iter().map(|r| &**r).collect();
    match serde_json::to_string(&records) {
        Ok(body) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            text,
            format!("cannot encode the records: {e}\n"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::*;
    use crate::decision::{DecisionRecord, DecisionStore};
    use crate::scheduler::Scheduler;
    use crate::testing::{node, pod};

    async fn get(health: &Health, uri: &str) -> (StatusCode, String) {
        let response = router(health.clone())
            .oneshot(Request::get(uri).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn decisions_of_a_pod_are_served_newest_first() {
        let config = crate::config::Config::default_with(&crate::plugins::registry()).unwrap();
        let mut s = Scheduler::new(config, None);
        s.upsert_node(node("n1").capacity("1", "1Gi").build(), Duration::ZERO);
        s.upsert_pod(pod("big").req("cpu", "2").build(), Duration::ZERO)
            .unwrap();
        let store = DecisionStore::shared(100);
        let mut attempt = s.schedule_next(Duration::ZERO).unwrap();
        for t in [1, 2] {
            let r = DecisionRecord::from_attempt(&mut attempt, t, Duration::ZERO);
            store.lock().unwrap().push(Arc::new(r));
        }
        let health = Health {
            metrics: Arc::new(Metrics::new()),
            ready: Arc::new(AtomicBool::new(true)),
            decisions: store,
            questions: None,
            profiling: false,
        };
        let (status, body) = get(&health, "/debug/decisions/default/big").await;
        assert_eq!(status, StatusCode::OK);
        let records: Vec<DecisionRecord> = serde_json::from_str(&body).unwrap();
        let times: Vec<u64> = records.iter().map(|r| r.timestamp_ms).collect();
        assert_eq!(times, vec![2, 1]);
        let (_, body) = get(&health, "/debug/decisions/default/big?attempts=1").await;
        assert_eq!(
            serde_json::from_str::<Vec<DecisionRecord>>(&body)
                .unwrap()
                .len(),
            1
        );
        let (status, body) = get(&health, "/debug/decisions/default/other").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(
            body.starts_with("no scheduling attempt of pod default/other is recorded"),
            "{body}"
        );
        let (status, body) = get(&health, "/debug/decisions/default/big?attempts=x").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(
            body.contains("attempts must be a positive number"),
            "{body}"
        );
    }
}
