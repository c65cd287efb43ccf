//! The HTTP endpoints: `/metrics` (Prometheus), `/healthz` and `/livez` (the process is up),
//! `/readyz` (the caches are warm and every watcher in step, each a named check), `/debug/decisions/<namespace>/<pod>` (the pod's latest
//! scheduling attempts, as decision records in JSON), `POST /debug/whatif` (where pods would
//! go, see [`gantry_sim::whatif`]), `GET /debug/snapshot` (the scheduler's state in the
//! simulator's input format), and `/debug/pprof` when profiling is on.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};

use super::metrics::Metrics;
use super::questions::{QuestionError, Questions};
use super::readiness::Watchers;
use gantry_core::decision::SharedStore;
use gantry_core::decision::store::latest_shared;

/// Attempts `/debug/decisions` returns when the query does not say (`?attempts=N`).
pub const DEFAULT_ATTEMPTS: usize = 10;

/// What the endpoints report.
#[derive(Clone)]
pub struct Health {
    /// Metrics to serve.
    pub metrics: Arc<Metrics>,
    /// True once every watcher has listed.
    pub ready: Arc<AtomicBool>,
    /// How each watcher stands since.
    pub watchers: Arc<Watchers>,
    /// The latest decision records.
    pub decisions: SharedStore,
    /// Whether `/debug/pprof` is served (`enableProfiling`).
    pub profiling: bool,
    /// The way to the scheduler for `/debug/whatif` and `/debug/snapshot` (none: they
    /// answer 503).
    pub questions: Option<Questions>,
    /// Whether `/debug/*` is served at all: the plain port serves only the metrics and the
    /// health checks unless asked to (`--address-serves-debug`).
    pub debug: bool,
}

/// The router serving the endpoints (`/debug/*` only when `health.debug`).
pub fn router(health: Health) -> Router {
    let (debug, profiling) = (health.debug, health.profiling);
    let router = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(ok))
        .route("/livez", get(ok))
        .route("/readyz", get(readyz));
    if !debug {
        return router.with_state(health);
    }
    let router = router
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

async fn metrics(State(h): State<Health>, headers: header::HeaderMap) -> impl IntoResponse {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let (content_type, body) = h.metrics.render(accept);
    ([(header::CONTENT_TYPE, content_type)], body)
}

async fn ok() -> &'static str {
    "ok"
}

/// `/readyz`: `ok` when every check passes; else 503 and each check on a line of its own,
/// as Kubernetes' components list them (`[-]watch-podgroups failed: ...`). `?verbose`
/// lists them when all pass too.
async fn readyz(State(h): State<Health>, RawQuery(query): RawQuery) -> TextAnswer {
    let checks = readiness_checks(&h, std::time::Instant::now());
    let passed = checks.iter().all(|(_, failure)| failure.is_none());
    let verbose = query
        .as_deref()
        .unwrap_or_default()
        .split('&')
        .any(|p| p == "verbose" || p.starts_with("verbose="));
    if passed && !verbose {
        return text(StatusCode::OK, "ok".to_string());
    }
    let mut body = String::new();
    for (name, failure) in &checks {
        match failure {
            None => body.push_str(&format!("[+]{name} ok\n")),
            Some(reason) => body.push_str(&format!("[-]{name} failed: {reason}\n")),
        }
    }
    if passed {
        body.push_str("readyz check passed\n");
        text(StatusCode::OK, body)
    } else {
        body.push_str("readyz check failed\n");
        text(StatusCode::SERVICE_UNAVAILABLE, body)
    }
}

/// The readiness checks at `now`, by name, each with why it fails: `ping`, `caches-synced`
/// (every watcher has listed once), and `watch-<resource>` per watcher (it is listing
/// again and its list failed, or has run too long; see [`Watchers::lagging`]).
fn readiness_checks(h: &Health, now: std::time::Instant) -> Vec<(String, Option<String>)> {
    let mut checks = vec![
        ("ping".to_string(), None),
        (
            "caches-synced".to_string(),
            (!h.ready.load(Ordering::Relaxed)).then(|| "caches not synced".to_string()),
        ),
    ];
    let lagging = h.watchers.lagging(now);
    for watcher in h.watchers.names() {
        let failure = lagging
            .iter()
            .find(|l| l.watcher == watcher)
            .map(|l| l.reason.clone());
        checks.push((format!("watch-{watcher}"), failure));
    }
    checks
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
        QuestionError::Busy(_) => StatusCode::TOO_MANY_REQUESTS,
        QuestionError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    text(status, format!("{e}\n"))
}

/// `POST /debug/whatif`: a [`gantry_sim::whatif::Question`] (JSON) answered against the
/// scheduler's state now, as a [`gantry_sim::whatif::Answer`] (JSON).
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
        gantry_sim::snapshot::write(&reply.view, &reply.queued)
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
    let records: Vec<&gantry_core::decision::DecisionRecord> =
        records.iter().map(|r| &**r).collect();
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
    use gantry_core::decision::{DecisionRecord, DecisionStore};
    use gantry_core::scheduler::Scheduler;
    use gantry_core::testing::{node, pod};

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
    async fn readiness_names_the_watcher_that_holds_it_back() {
        let health = Health {
            metrics: Arc::new(Metrics::new()),
            ready: Arc::new(AtomicBool::new(false)),
            watchers: Arc::default(),
            decisions: DecisionStore::shared(10),
            questions: None,
            debug: true,
            profiling: false,
        };
        health.watchers.listing("pods");
        let (status, body) = get(&health, "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            body,
            "[+]ping ok\n[-]caches-synced failed: caches not synced\n[+]watch-pods ok\nreadyz check failed\n"
        );
        health.ready.store(true, Ordering::Relaxed);
        health.watchers.watching("pods");
        assert_eq!(
            get(&health, "/readyz").await,
            (StatusCode::OK, "ok".to_string())
        );
        let (status, body) = get(&health, "/readyz?verbose").await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            body.ends_with("[+]watch-pods ok\nreadyz check passed\n"),
            "{body}"
        );
        // The watch is lost and the relist fails: ready no more, and why.
        health.watchers.listing("podgroups");
        health
            .watchers
            .list_failed("podgroups", "HTTP 403: podgroups is forbidden");
        let (status, body) = get(&health, "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            body.contains("[-]watch-podgroups failed: not synced for 0s: the list failed: HTTP 403: podgroups is forbidden\n"),
            "{body}"
        );
        health.watchers.watching("podgroups");
        assert_eq!(get(&health, "/readyz").await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn decisions_of_a_pod_are_served_newest_first() {
        let config =
            gantry_core::config::Config::default_with(&gantry_core::plugins::registry()).unwrap();
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
            watchers: Arc::default(),
            decisions: store,
            questions: None,
            debug: true,
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
