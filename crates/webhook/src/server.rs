//! The admission endpoint: reads an AdmissionReview (v1), decides, answers with a JSONPatch
//! of `/spec/schedulerName` for the pods sent to gantry. Always allows: the webhook routes
//! pods, it never blocks them.
//!
//! And the HTTPS server in front of it ([`serve`]), built to outlast hostile or broken
//! clients: every connection has a task of its own (the accept loop never waits on a client),
//! the TLS handshake, each request header and each request body have a deadline, the number
//! of connections stays below the file-descriptor limit (the oldest idle connection is closed
//! to make room for a new one), and the log lines about bad clients are rate-limited.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper::Request;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, ReplaceOperation};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::{DynamicObject, PartialObjectMeta};
use kube::runtime::reflector::{ObjectRef, Store};
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;
use tower_http::timeout::TimeoutLayer;

use super::config::RolloutConfig;
use super::decision::{Decision, Route, decide};
use super::metrics::{ClosedLabels, InvalidLabels, Metrics, RoutedLabels, SkippedLabels};

/// The content type of the OpenMetrics text format.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The largest AdmissionReview read (the API server's own request limit is 3 MiB).
const BODY_LIMIT: usize = 8 * 1024 * 1024;
/// How long a namespace missing from the cache may be looked up for.
const NAMESPACE_GET_TIMEOUT: Duration = Duration::from_secs(2);
/// The AdmissionReview version served (the webhook configuration asks for it alone).
const ADMISSION_V1: &str = "admission.k8s.io/v1";
/// The kind of an AdmissionReview.
const ADMISSION_REVIEW: &str = "AdmissionReview";
/// Skip reason of requests that are not pod creations (the webhook should not get them).
pub const NOT_A_POD_CREATION: &str = "not_a_pod_creation";

/// The namespaces' annotations: a watch cache, and a GET for a namespace the cache does not
/// have yet (one created a moment before its first pod).
#[derive(Clone)]
pub struct Namespaces {
    /// The watch cache (metadata only).
    pub store: Store<PartialObjectMeta<Namespace>>,
    /// Where to look up a namespace missing from the cache; None: no lookup.
    pub api: Option<Api<PartialObjectMeta<Namespace>>>,
}

impl Namespaces {
    /// The annotations of namespace `name`; None when it cannot be found.
    async fn annotations(&self, name: &str) -> Option<BTreeMap<String, String>> {
        if let Some(ns) = self.store.get(&ObjectRef::new(name)) {
            return Some(ns.metadata.annotations.clone().unwrap_or_default());
        }
        let api = self.api.as_ref()?;
        match tokio::time::timeout(NAMESPACE_GET_TIMEOUT, api.get_opt(name)).await {
            Ok(Ok(Some(ns))) => Some(ns.metadata.annotations.unwrap_or_default()),
            Ok(Ok(None)) => None,
            Ok(Err(e)) => {
                tracing::warn!(namespace = name, error = %e, "cannot read the namespace; its annotations are ignored");
                None
            }
            Err(_) => {
                tracing::warn!(
                    namespace = name,
                    "namespace lookup timed out; its annotations are ignored"
                );
                None
            }
        }
    }
}

/// What the endpoints need.
#[derive(Clone)]
pub struct Webhook {
    /// The configuration.
    pub config: Arc<RolloutConfig>,
    /// Namespace annotations.
    pub namespaces: Namespaces,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// True once the namespace cache has listed.
    pub ready: Arc<AtomicBool>,
    /// Holds back the log lines of malformed AdmissionReviews beyond one per [`LOG_EVERY`].
    malformed_log: Arc<LogLimiter>,
}

/// A request that cannot be answered with an AdmissionReview.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// The body is not an AdmissionReview.
    #[error("malformed AdmissionReview: {0}")]
    Malformed(serde_json::Error),
    /// It is not an `admission.k8s.io/v1` `AdmissionReview` (the only version served).
    #[error(
        "malformed AdmissionReview: expected {ADMISSION_V1} {ADMISSION_REVIEW}, got {api_version:?} {kind:?}"
    )]
    Version {
        /// The request's `apiVersion`.
        api_version: String,
        /// The request's `kind`.
        kind: String,
    },
    /// It has no `request`.
    #[error("malformed AdmissionReview: no request")]
    NoRequest,
    /// Its object is not a readable pod.
    #[error("malformed AdmissionReview: the object is not a pod: {0}")]
    NotAPod(serde_json::Error),
    /// The patch could not be written (cannot happen with a string value).
    #[error("cannot write the patch: {0}")]
    Patch(kube::core::admission::SerializePatchError),
}

impl From<serde_json::Error> for ReviewError {
    fn from(e: serde_json::Error) -> Self {
        ReviewError::Malformed(e)
    }
}

impl From<kube::core::admission::SerializePatchError> for ReviewError {
    fn from(e: kube::core::admission::SerializePatchError) -> Self {
        ReviewError::Patch(e)
    }
}

impl Webhook {
    /// A webhook with `config` and `namespaces`, new counters, not ready yet.
    pub fn new(config: RolloutConfig, namespaces: Namespaces) -> Webhook {
        Webhook {
            config: Arc::new(config),
            namespaces,
            metrics: Arc::new(Metrics::new()),
            ready: Arc::new(AtomicBool::new(false)),
            malformed_log: Arc::new(LogLimiter::new(LOG_EVERY)),
        }
    }

    /// Answers one AdmissionReview (the request body).
    pub async fn review(&self, body: &[u8]) -> Result<AdmissionReview<DynamicObject>, ReviewError> {
        let review: AdmissionReview<DynamicObject> = serde_json::from_slice(body)?;
        // The answer echoes the request's type, which the API server then checks.
        if review.types.api_version != ADMISSION_V1 || review.types.kind != ADMISSION_REVIEW {
            return Err(ReviewError::Version {
                api_version: review.types.api_version,
                kind: review.types.kind,
            });
        }
        let request: AdmissionRequest<DynamicObject> =
            review.try_into().map_err(|_| ReviewError::NoRequest)?;
        let response = AdmissionResponse::from(&request);
        let is_pod_creation = request.operation == Operation::Create
            && request.kind.group.is_empty()
            && request.kind.kind == "Pod"
            && request.sub_resource.as_deref().is_none_or(str::is_empty);
        let object = match (&request.object, is_pod_creation) {
            (Some(object), true) => object,
            _ => {
                self.count_skip(NOT_A_POD_CREATION, request.dry_run);
                return Ok(response.into_review());
            }
        };
        let pod: Pod = serde_json::to_value(object)
            .and_then(serde_json::from_value)
            .map_err(ReviewError::NotAPod)?;
        let namespace = request
            .namespace
            .clone()
            .or_else(|| pod.metadata.namespace.clone())
            .unwrap_or_default();
        let annotations = self.namespaces.annotations(&namespace).await;
        let decision = decide(&self.config, &pod, &namespace, annotations.as_ref());
        let name = pod
            .metadata
            .name
            .as_deref()
            .filter(|n| !n.is_empty())
            .or(pod.metadata.generate_name.as_deref())
            .unwrap_or_default();
        self.record(&decision, request.dry_run, &namespace, name);
        let mut response = response;
        if !decision.invalid.is_empty() {
            response.warnings = Some(decision.invalid.iter().map(ToString::to_string).collect());
        }
        if let Route::Split {
            gantry,
            workload,
            bucket,
            share,
            source,
        } = &decision.route
        {
            let side = if *gantry {
                self.config.scheduler_name.as_str()
            } else {
                "default"
            };
            response.audit_annotations.insert(
                "decision".to_string(),
                format!("{side}: {workload} bucket {bucket}, share {share} from {source}"),
            );
        }
        if matches!(decision.route, Route::Split { gantry: true, .. }) {
            let path = PointerBuf::from_tokens(["spec", "schedulerName"]);
            let value = serde_json::Value::String(self.config.scheduler_name.clone());
            let op = match &pod.spec {
                Some(spec) if spec.scheduler_name.is_some() => {
                    PatchOperation::Replace(ReplaceOperation { path, value })
                }
                Some(_) => PatchOperation::Add(AddOperation { path, value }),
                // A JSONPatch cannot add a field to an object that is not there.
                None => PatchOperation::Add(AddOperation {
                    path: PointerBuf::from_tokens(["spec"]),
                    value: serde_json::json!({ "schedulerName": value }),
                }),
            };
            response = response.with_patch(Patch(vec![op]))?;
        }
        Ok(response.into_review())
    }

    /// Counts and logs a decision (dry runs are logged but not counted: no pod is made).
    fn record(&self, decision: &Decision, dry_run: bool, namespace: &str, pod: &str) {
        for invalid in &decision.invalid {
            tracing::warn!(namespace, pod, "{invalid}");
            if !dry_run {
                self.metrics
                    .invalid
                    .get_or_create(&InvalidLabels {
                        level: invalid.on.level(),
                        annotation: invalid.on.annotation(),
                    })
                    .inc();
            }
        }
        match &decision.route {
            Route::Skip(skip) => {
                tracing::debug!(namespace, pod, reason = skip.reason(), "left alone");
                self.count_skip(skip.reason(), dry_run);
            }
            Route::Split {
                gantry,
                workload,
                bucket,
                share,
                source,
            } => {
                tracing::debug!(namespace, pod, %workload, bucket, %share, %source, gantry, "routed");
                if !dry_run {
                    self.metrics
                        .routed
                        .get_or_create(&RoutedLabels {
                            scheduler: if *gantry { "gantry" } else { "default" },
                            source: source.level(),
                        })
                        .inc();
                }
            }
        }
    }

    fn count_skip(&self, reason: &'static str, dry_run: bool) {
        if !dry_run {
            self.metrics
                .skipped
                .get_or_create(&SkippedLabels { reason })
                .inc();
        }
    }
}

/// The router: `/mutate`, `/metrics`, `/healthz`, `/livez`, `/readyz`.
pub fn router(webhook: Webhook) -> Router {
    Router::new()
        .route("/mutate", post(mutate))
        .route("/metrics", get(metrics))
        .route("/healthz", get(ok))
        .route("/livez", get(ok))
        .route("/readyz", get(readyz))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(webhook)
}

async fn mutate(State(w): State<Webhook>, body: Bytes) -> Response {
    match w.review(&body).await {
        Ok(review) => match serde_json::to_vec(&review) {
            Ok(json) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
            Err(e) => {
                tracing::error!(error = %e, "cannot write the AdmissionReview");
                (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response()
            }
        },
        Err(e) => {
            w.metrics.malformed.inc();
            if let Some(suppressed) = w.malformed_log.allow(Instant::now()) {
                tracing::warn!(error = %e, suppressed, "bad admission request");
            }
            (StatusCode::BAD_REQUEST, e.to_string()).into_response()
        }
    }
}

async fn metrics(State(w): State<Webhook>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, OPENMETRICS)], w.metrics.render())
}

async fn ok() -> &'static str {
    "ok"
}

async fn readyz(State(w): State<Webhook>) -> (StatusCode, &'static str) {
    if w.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "namespace cache not synced",
        )
    }
}

/// How long a client may take over the TLS handshake, by default.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send a request's header, by default: counted from the end
/// of the handshake, and on a kept-alive connection from the previous response (so it also
/// closes connections left idle).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request may take from the end of its header to its answer (reading the body,
/// then deciding), by default; the API server waits 10 s at most by default, 30 s at most
/// when configured.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The most connections open at once, whatever the file-descriptor limit allows: an idle TLS
/// connection holds about 25 KiB (4,096 of them about 100 MiB), and the webhook's deployment
/// has 256 MiB.
pub const MAX_CONNECTIONS: usize = 4096;
/// File descriptors left for everything but client connections: the listener, the API
/// client's connections, the runtime's own, the certificate files while they are read.
const RESERVED_FDS: u64 = 64;
/// At most one log line per this interval for each kind of bad client (and for malformed
/// AdmissionReviews); the metrics count every one.
pub const LOG_EVERY: Duration = Duration::from_secs(10);
/// How long the accept loop pauses when accepting fails for want of resources (descriptors,
/// memory), instead of spinning.
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);
/// The only application protocol served: the API server calls webhooks over HTTP/1.1, and
/// HTTP/2 would be one more way for a client to hold a connection open.
const ALPN_HTTP1: &[u8] = b"http/1.1";

/// What the server allows a client, against idle, slow and too many connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest TLS handshake.
    pub handshake_timeout: Duration,
    /// The longest wait for a request header (see [`HEADER_READ_TIMEOUT`]).
    pub header_read_timeout: Duration,
    /// The longest time from a request's header to its answer (see [`BODY_READ_TIMEOUT`]).
    pub body_read_timeout: Duration,
    /// The most connections open at once.
    pub max_connections: usize,
}

impl Limits {
    /// The default timeouts, and as many connections as this process's file-descriptor limit
    /// (`RLIMIT_NOFILE`, as it is now) safely allows: see [`connection_cap`].
    pub fn for_this_process() -> Limits {
        let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        Limits {
            handshake_timeout: HANDSHAKE_TIMEOUT,
            header_read_timeout: HEADER_READ_TIMEOUT,
            body_read_timeout: BODY_READ_TIMEOUT,
            max_connections: connection_cap(nofile),
        }
    }
}

/// The connections allowed under a soft file-descriptor limit of `nofile` (None: unlimited):
/// three quarters of what is left after a reserve of 64, at least 1 and at most
/// [`MAX_CONNECTIONS`]. The cap is reached before the limit, so that accepting never fails
/// for want of a descriptor.
pub fn connection_cap(nofile: Option<u64>) -> usize {
    let Some(nofile) = nofile else {
        return MAX_CONNECTIONS;
    };
    let usable = nofile.saturating_sub(RESERVED_FDS) / 4 * 3;
    usize::try_from(usable)
        .unwrap_or(usize::MAX)
        .clamp(1, MAX_CONNECTIONS)
}

/// The serving certificate and key. Each new connection takes the pair current at the time,
/// so a reload applies to the next handshakes without touching the open connections.
#[derive(Clone)]
pub struct TlsConfig {
    current: Arc<RwLock<Arc<ServerConfig>>>,
}

impl TlsConfig {
    /// Loads the certificate chain (PEM, the leaf first) and its private key (PEM).
    pub fn load(cert: &Path, key: &Path) -> std::io::Result<TlsConfig> {
        Ok(TlsConfig {
            current: Arc::new(RwLock::new(Arc::new(server_config(cert, key)?))),
        })
    }

    /// Loads the pair again; on an error the previous one stays in use.
    pub fn reload(&self, cert: &Path, key: &Path) -> std::io::Result<()> {
        let config = Arc::new(server_config(cert, key)?);
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = config;
        Ok(())
    }

    fn current(&self) -> Arc<ServerConfig> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// A rustls server configuration for the pair, with ring (kube's provider) and HTTP/1.1 only.
fn server_config(cert: &Path, key: &Path) -> std::io::Result<ServerConfig> {
    let invalid = |e: &dyn std::fmt::Display| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
    };
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| invalid(&e))?;
    if chain.is_empty() {
        return Err(invalid(&"no PEM certificate in the certificate file"));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| invalid(&e))?;
    let mut config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid(&e))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| invalid(&e))?;
    config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    Ok(config)
}

/// Lets one log line through per interval for one kind of event and counts the ones held
/// back, so that a flood of bad requests cannot flood the log (the metrics still count each).
#[derive(Debug)]
pub struct LogLimiter {
    every: Duration,
    state: Mutex<LimiterState>,
}

#[derive(Debug, Default)]
struct LimiterState {
    /// When the last line went out.
    last: Option<Instant>,
    /// Events since then that were not logged.
    suppressed: u64,
}

impl LogLimiter {
    /// At most one line per `every`.
    pub fn new(every: Duration) -> LogLimiter {
        LogLimiter {
            every,
            state: Mutex::default(),
        }
    }

    /// Whether an event at `now` may be logged: `Some(n)`, where `n` events were held back
    /// since the last line (to be said in this one), or `None`, and this event is counted
    /// among the held back.
    pub fn allow(&self, now: Instant) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match state.last {
            Some(last) if now.saturating_duration_since(last) < self.every => {
                state.suppressed += 1;
                None
            }
            _ => {
                state.last = Some(now);
                Some(std::mem::take(&mut state.suppressed))
            }
        }
    }
}

/// Why the server closed a connection on a client (the `reason` label of
/// `gantry_webhook_connections_closed_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// A new connection, refused at once: the cap is reached and no connection is idle.
    Refused,
    /// An idle connection (handshake or header not finished, or kept alive between
    /// requests), closed to make room for a new one at the cap.
    Evicted,
    /// The TLS handshake took longer than its timeout.
    HandshakeTimeout,
    /// The TLS handshake failed (not TLS, no common cipher or protocol, ...).
    HandshakeFailed,
    /// No complete request header within its timeout.
    HeaderTimeout,
    /// A request that is not HTTP/1.1 (answered 400, 414 or 431 by hyper).
    BadRequest,
    /// No answer within the body timeout of the header (answered 408).
    BodyTimeout,
}

impl Closed {
    /// Every reason, in the order of their log limiters.
    const ALL: [Closed; 7] = [
        Closed::Refused,
        Closed::Evicted,
        Closed::HandshakeTimeout,
        Closed::HandshakeFailed,
        Closed::HeaderTimeout,
        Closed::BadRequest,
        Closed::BodyTimeout,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Closed::Refused => "refused",
            Closed::Evicted => "evicted",
            Closed::HandshakeTimeout => "handshake_timeout",
            Closed::HandshakeFailed => "handshake_failed",
            Closed::HeaderTimeout => "header_timeout",
            Closed::BadRequest => "bad_request",
            Closed::BodyTimeout => "body_timeout",
        }
    }

    fn message(self) -> &'static str {
        match self {
            Closed::Refused => {
                "connection refused: the connection limit is reached and every connection is serving a request"
            }
            Closed::Evicted => {
                "connection limit reached: closed the oldest idle connection to make room"
            }
            Closed::HandshakeTimeout => "connection closed: TLS handshake timed out",
            Closed::HandshakeFailed => "connection closed: TLS handshake failed",
            Closed::HeaderTimeout => "connection closed: no request header in time",
            Closed::BadRequest => "connection closed: malformed HTTP request",
            Closed::BodyTimeout => "connection closed: request body not read in time",
        }
    }
}

/// What every connection task shares.
struct Shared {
    router: Router,
    http: http1::Builder,
    limits: Limits,
    metrics: Arc<Metrics>,
    /// One limiter per [`Closed`] reason, in the order of [`Closed::ALL`].
    logs: [LogLimiter; Closed::ALL.len()],
}

impl Shared {
    /// Counts a connection closed on a client, and logs it unless too many were just logged.
    fn closed(&self, reason: Closed, peer: SocketAddr, error: Option<&dyn std::fmt::Display>) {
        self.metrics
            .connections_closed
            .get_or_create(&ClosedLabels {
                reason: reason.label(),
            })
            .inc();
        let Some(position) = Closed::ALL.iter().position(|r| *r == reason) else {
            return;
        };
        if let Some(suppressed) = self.logs[position].allow(Instant::now()) {
            match error {
                Some(error) => {
                    tracing::warn!(%peer, %error, suppressed, "{}", reason.message())
                }
                None => tracing::warn!(%peer, suppressed, "{}", reason.message()),
            }
        }
    }
}

/// The open connections, oldest first, with the number of requests each is serving: what
/// keeps their number under the cap, and finds the idle one to close when it is reached.
struct Connections {
    max: usize,
    table: Mutex<Table>,
    metrics: Arc<Metrics>,
}

#[derive(Default)]
struct Table {
    next: u64,
    open: BTreeMap<u64, Open>,
}

/// One open connection.
struct Open {
    /// Requests being served (a request counts from its complete header to its answer).
    requests: usize,
    /// Tells the connection's task to close it.
    evict: oneshot::Sender<()>,
}

/// A connection let in.
struct Admitted {
    /// Its place in the table, given back when dropped.
    slot: Slot,
    /// Resolves when the connection is evicted.
    evicted: oneshot::Receiver<()>,
    /// Whether another, idle connection was evicted to make room.
    evicting: bool,
}

impl Connections {
    fn new(max: usize, metrics: Arc<Metrics>) -> Connections {
        Connections {
            max,
            table: Mutex::default(),
            metrics,
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lets a new connection in: under the cap at once; at the cap by closing the oldest
    /// idle connection; None when every connection is serving a request.
    fn admit(self: &Arc<Self>) -> Option<Admitted> {
        let mut table = self.table();
        let mut evicting = false;
        if table.open.len() >= self.max {
            let idle = table
                .open
                .iter()
                .find(|(_, open)| open.requests == 0)
                .map(|(id, _)| *id)?;
            if let Some(open) = table.open.remove(&idle) {
                // The receiver is gone only if its task already ended.
                let _ = open.evict.send(());
            }
            evicting = true;
        }
        let id = table.next;
        table.next += 1;
        let (evict, evicted) = oneshot::channel();
        table.open.insert(id, Open { requests: 0, evict });
        self.metrics.open_connections.set(table.open.len() as i64);
        Some(Admitted {
            slot: Slot(Tracker {
                id,
                connections: self.clone(),
            }),
            evicted,
            evicting,
        })
    }
}

/// Names one connection in the table.
#[derive(Clone)]
struct Tracker {
    id: u64,
    connections: Arc<Connections>,
}

impl Tracker {
    /// Counts a request that starts (`start`) or has been answered; the requests of a
    /// connection already evicted are not counted.
    fn requests(&self, start: bool) {
        let mut table = self.connections.table();
        if let Some(open) = table.open.get_mut(&self.id) {
            if start {
                open.requests += 1;
            } else {
                open.requests = open.requests.saturating_sub(1);
            }
        }
    }

    /// Marks the connection busy until the guard is dropped.
    fn busy(&self) -> Busy {
        self.requests(true);
        Busy(self.clone())
    }
}

/// A request being served.
struct Busy(Tracker);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.requests(false);
    }
}

/// A connection's place in the table, given back when the connection ends.
struct Slot(Tracker);

impl Drop for Slot {
    fn drop(&mut self) {
        let connections = &self.0.connections;
        let mut table = connections.table();
        table.open.remove(&self.0.id);
        connections
            .metrics
            .open_connections
            .set(table.open.len() as i64);
    }
}

/// Serves the webhook's endpoints over TLS (HTTP/1.1) on `listener` until `shutdown`
/// completes, then stops accepting, lets the requests in flight finish for up to `grace`
/// and returns.
///
/// Each connection is handled by a task of its own, so that no client, however slow, holds
/// up the accept loop or another client; each has `limits`' deadlines; beyond
/// `limits.max_connections`, the oldest idle connection is closed for a new one, and a new
/// connection is closed at once when none is idle.
pub async fn serve(
    listener: TcpListener,
    tls: TlsConfig,
    webhook: Webhook,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) {
    let metrics = webhook.metrics.clone();
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let shared = Arc::new(Shared {
        router: router(webhook).layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            limits.body_read_timeout,
        )),
        http,
        limits,
        metrics: metrics.clone(),
        logs: Closed::ALL.map(|_| LogLimiter::new(LOG_EVERY)),
    });
    let connections = Arc::new(Connections::new(limits.max_connections, metrics));
    let accept_log = LogLimiter::new(LOG_EVERY);
    let (stop, stopping) = watch::channel(false);
    // Every connection task holds a sender; the receiver sees the end once all are gone.
    let (drain, mut drained) = mpsc::channel::<()>(1);
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                if let Some(suppressed) = accept_log.allow(Instant::now()) {
                    tracing::warn!(error = %e, suppressed, "cannot accept a connection");
                }
                if !matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionAborted
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::Interrupted
                ) {
                    tokio::time::sleep(ACCEPT_PAUSE).await;
                }
                continue;
            }
        };
        let Some(admitted) = connections.admit() else {
            drop(tcp);
            shared.closed(Closed::Refused, peer, None);
            continue;
        };
        if admitted.evicting {
            shared.closed(Closed::Evicted, peer, None);
        }
        tokio::spawn(connection(
            shared.clone(),
            tcp,
            peer,
            tls.current(),
            admitted,
            stopping.clone(),
            drain.clone(),
        ));
    }
    drop(listener);
    stop.send_replace(true);
    drop(drain);
    if tokio::time::timeout(grace, drained.recv()).await.is_err() {
        tracing::warn!(
            ?grace,
            "connections still open at the end of the shutdown grace period"
        );
    }
}

/// Serves one connection: the handshake, then requests until the client closes, a deadline
/// passes, the connection is evicted or the server stops.
async fn connection(
    shared: Arc<Shared>,
    tcp: TcpStream,
    peer: SocketAddr,
    tls: Arc<ServerConfig>,
    admitted: Admitted,
    mut stopping: watch::Receiver<bool>,
    _drain: mpsc::Sender<()>,
) {
    let Admitted {
        slot, mut evicted, ..
    } = admitted;
    // Small answers go out at once rather than waiting for more to send.
    let _ = tcp.set_nodelay(true);
    let handshake = tokio::time::timeout(
        shared.limits.handshake_timeout,
        TlsAcceptor::from(tls).accept(tcp),
    );
    let stream = tokio::select! {
        biased;
        _ = &mut evicted => return,
        _ = stopping.wait_for(|stop| *stop) => return,
        handshake = handshake => match handshake {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return shared.closed(Closed::HandshakeFailed, peer, Some(&e)),
            Err(_) => return shared.closed(Closed::HandshakeTimeout, peer, None),
        },
    };
    let service = {
        let (tracker, shared) = (slot.0.clone(), shared.clone());
        hyper::service::service_fn(move |request: Request<Incoming>| {
            let busy = tracker.busy();
            let shared = shared.clone();
            async move {
                let response = shared.router.clone().oneshot(request).await;
                drop(busy);
                if let Ok(r) = &response
                    && r.status() == StatusCode::REQUEST_TIMEOUT
                {
                    shared.closed(Closed::BodyTimeout, peer, None);
                }
                response
            }
        })
    };
    let served = shared.http.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(served);
    let mut stop_requested = false;
    let result = loop {
        tokio::select! {
            biased;
            _ = &mut evicted => return,
            result = served.as_mut() => break result,
            _ = stopping.wait_for(|stop| *stop), if !stop_requested => stop_requested = true,
        }
        // Finish the request in flight, if any, then close.
        served.as_mut().graceful_shutdown();
    };
    if let Err(e) = result {
        if e.is_timeout() {
            shared.closed(Closed::HeaderTimeout, peer, None);
        } else if e.is_parse() {
            shared.closed(Closed::BadRequest, peer, Some(&e));
        } else {
            tracing::debug!(%peer, error = %e, "connection ended with an error");
        }
    }
    drop(slot);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Share;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::core::PartialObjectMetaExt;
    use kube::runtime::{reflector, watcher};
    use serde_json::{Value, json};

    fn webhook(share: &str, namespaces: &[(&str, &str)]) -> Webhook {
        let (store, mut writer) = reflector::store::<PartialObjectMeta<Namespace>>();
        for (name, rollout) in namespaces {
            let meta = ObjectMeta {
                name: Some(name.to_string()),
                annotations: Some([("gantry.io/rollout".to_string(), rollout.to_string())].into()),
                ..Default::default()
            };
            writer.apply_watcher_event(&watcher::Event::Apply(meta.into_request_partial()));
        }
        let w = Webhook::new(
            RolloutConfig {
                share: Share::parse(share).unwrap(),
                scheduler_name: "gantry".into(),
                excluded_namespaces: vec!["kube-system".into()],
            },
            Namespaces { store, api: None },
        );
        w.ready.store(true, Ordering::Relaxed);
        w
    }

    fn review(namespace: &str, operation: &str, pod: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
                "requestResource": {"group": "", "version": "v1", "resource": "pods"},
                "name": "",
                "namespace": namespace,
                "operation": operation,
                "userInfo": {"username": "admin"},
                "object": pod,
                "oldObject": null,
                "dryRun": false
            }
        }))
        .unwrap()
    }

    fn pod(annotations: Value, scheduler: Option<&str>) -> Value {
        let mut spec = json!({"containers": [{"name": "app", "image": "app"}]});
        if let Some(s) = scheduler {
            spec["schedulerName"] = json!(s);
        }
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": "web-5d8f7c9b4-",
                "labels": {"pod-template-hash": "5d8f7c9b4"},
                "annotations": annotations,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "web-5d8f7c9b4", "uid": "1", "controller": true}]
            },
            "spec": spec
        })
    }

    async fn answer(w: &Webhook, body: &[u8]) -> Value {
        serde_json::to_value(w.review(body).await.unwrap()).unwrap()
    }

    /// The patch, written (like Go's `[]byte` may be) as an array of bytes.
    fn patch(answer: &Value) -> Option<Value> {
        let bytes: Vec<u8> =
            serde_json::from_value(answer["response"].get("patch")?.clone()).unwrap();
        Some(serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn routes_to_gantry_with_a_patch_and_echoes_the_uid() {
        let w = webhook("100%", &[]);
        let a = answer(
            &w,
            &review(
                "apps",
                "CREATE",
                pod(json!(null), Some("default-scheduler")),
            ),
        )
        .await;
        assert_eq!(a["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(a["kind"], "AdmissionReview");
        assert_eq!(a["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert_eq!(a["response"]["allowed"], true);
        assert_eq!(a["response"]["patchType"], "JSONPatch");
        assert_eq!(
            patch(&a),
            Some(json!([{"op": "replace", "path": "/spec/schedulerName", "value": "gantry"}]))
        );
        assert_eq!(
            a["response"]["auditAnnotations"]["decision"],
            "gantry: Deployment/apps/web bucket 5126, share 100% from configuration"
        );
        // Without a schedulerName (not defaulted yet): added.
        let a = answer(&w, &review("apps", "CREATE", pod(json!(null), None))).await;
        assert_eq!(
            patch(&a),
            Some(json!([{"op": "add", "path": "/spec/schedulerName", "value": "gantry"}]))
        );
        assert!(w.metrics.render().contains(
            "gantry_webhook_pods_routed_total{scheduler=\"gantry\",source=\"config\"} 2"
        ));
    }

    #[tokio::test]
    async fn a_pod_without_a_spec_gets_one() {
        // Found by fuzz_webhook_mutated_reviews: `add /spec/schedulerName` cannot apply
        // without a spec (the API server always sends one, defaulted).
        let w = webhook("100%", &[]);
        let mut object = pod(json!(null), None);
        object.as_object_mut().unwrap().remove("spec");
        let a = answer(&w, &review("apps", "CREATE", object)).await;
        assert_eq!(
            patch(&a),
            Some(json!([{"op": "add", "path": "/spec", "value": {"schedulerName": "gantry"}}]))
        );
    }

    #[tokio::test]
    async fn leaves_the_rest_to_the_default_scheduler() {
        let w = webhook("0%", &[]);
        let a = answer(&w, &review("apps", "CREATE", pod(json!(null), None))).await;
        assert_eq!(a["response"]["allowed"], true);
        assert_eq!(patch(&a), None);
        assert!(a["response"].get("patchType").is_none());
        assert!(w.metrics.render().contains(
            "gantry_webhook_pods_routed_total{scheduler=\"default\",source=\"config\"} 1"
        ));
    }

    #[tokio::test]
    async fn namespace_annotations_come_from_the_cache_and_pod_annotations_win() {
        let w = webhook("0%", &[("all-in", "100%"), ("none", "0%")]);
        let a = answer(&w, &review("all-in", "CREATE", pod(json!(null), None))).await;
        assert!(patch(&a).is_some());
        let a = answer(
            &w,
            &review(
                "none",
                "CREATE",
                pod(
                    json!({"scheduler.alpha.kubernetes.io/use-new-scheduler": "100%"}),
                    None,
                ),
            ),
        )
        .await;
        assert!(patch(&a).is_some());
        let a = answer(
            &w,
            &review(
                "all-in",
                "CREATE",
                pod(json!({"gantry.io/rollout": "0%"}), None),
            ),
        )
        .await;
        assert_eq!(patch(&a), None);
        let text = w.metrics.render();
        for series in [
            "gantry_webhook_pods_routed_total{scheduler=\"gantry\",source=\"namespace\"} 1",
            "gantry_webhook_pods_routed_total{scheduler=\"gantry\",source=\"pod\"} 1",
            "gantry_webhook_pods_routed_total{scheduler=\"default\",source=\"pod\"} 1",
        ] {
            assert!(text.contains(series), "no {series} in\n{text}");
        }
    }

    #[tokio::test]
    async fn invalid_annotations_warn_and_fall_back() {
        let w = webhook("100%", &[("bad", "lots")]);
        let a = answer(
            &w,
            &review(
                "bad",
                "CREATE",
                pod(json!({"gantry.io/rollout": "130%"}), None),
            ),
        )
        .await;
        assert!(patch(&a).is_some(), "the configuration's 100% applies");
        assert_eq!(
            a["response"]["warnings"],
            json!([
                "gantry rollout: ignoring pod annotation gantry.io/rollout: invalid share \"130%\": must be between 0% and 100%",
                "gantry rollout: ignoring namespace annotation gantry.io/rollout: invalid share \"lots\": expected a percentage such as \"30%\""
            ])
        );
        let text = w.metrics.render();
        for series in [
            "gantry_webhook_invalid_annotations_total{level=\"pod\",annotation=\"gantry.io/rollout\"} 1",
            "gantry_webhook_invalid_annotations_total{level=\"namespace\",annotation=\"gantry.io/rollout\"} 1",
        ] {
            assert!(text.contains(series), "no {series} in\n{text}");
        }
    }

    #[tokio::test]
    async fn skips_are_allowed_unchanged_and_counted() {
        let w = webhook("100%", &[]);
        for (ns, op, scheduler) in [
            ("apps", "CREATE", Some("other")),
            ("apps", "CREATE", Some("gantry")),
            ("kube-system", "CREATE", None),
            ("apps", "UPDATE", None),
        ] {
            let a = answer(&w, &review(ns, op, pod(json!(null), scheduler))).await;
            assert_eq!(a["response"]["allowed"], true, "{ns} {op} {scheduler:?}");
            assert_eq!(patch(&a), None, "{ns} {op} {scheduler:?}");
        }
        let text = w.metrics.render();
        for reason in [
            "other_scheduler",
            "already_gantry",
            "excluded_namespace",
            "not_a_pod_creation",
        ] {
            let series = format!("gantry_webhook_pods_skipped_total{{reason=\"{reason}\"}} 1");
            assert!(text.contains(&series), "no {series} in\n{text}");
        }
    }

    #[tokio::test]
    async fn dry_runs_are_answered_but_not_counted() {
        let w = webhook("100%", &[]);
        let mut body: Value =
            serde_json::from_slice(&review("apps", "CREATE", pod(json!(null), None))).unwrap();
        body["request"]["dryRun"] = json!(true);
        let a = answer(&w, &serde_json::to_vec(&body).unwrap()).await;
        assert!(patch(&a).is_some());
        assert!(
            !w.metrics
                .render()
                .contains("gantry_webhook_pods_routed_total{")
        );
    }

    #[test]
    fn the_log_limiter_lets_one_line_through_per_interval_and_counts_the_rest() {
        let limiter = LogLimiter::new(Duration::from_secs(10));
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        assert_eq!(limiter.allow(at(0)), Some(0));
        for s in 1..=5 {
            assert_eq!(limiter.allow(at(s)), None);
        }
        assert_eq!(
            limiter.allow(at(10)),
            Some(5),
            "the line says how many were held back"
        );
        assert_eq!(limiter.allow(at(11)), None);
        assert_eq!(limiter.allow(at(25)), Some(1));
        // An instant taken earlier on another thread counts as no time at all.
        assert_eq!(limiter.allow(at(3)), None);
        assert_eq!(limiter.allow(at(35)), Some(1));
    }

    #[test]
    fn the_connection_cap_stays_under_the_descriptor_limit() {
        assert_eq!(connection_cap(Some(1024)), 720);
        assert_eq!(connection_cap(Some(4096)), 3024);
        assert_eq!(connection_cap(Some(1 << 20)), MAX_CONNECTIONS);
        assert_eq!(connection_cap(None), MAX_CONNECTIONS);
        assert_eq!(connection_cap(Some(64)), 1);
        assert_eq!(connection_cap(Some(0)), 1);
        for nofile in [128, 256, 1000, 1024, 5000, 8192] {
            let cap = connection_cap(Some(nofile));
            assert!(cap as u64 + RESERVED_FDS < nofile, "{nofile}: {cap}");
        }
        let limits = Limits::for_this_process();
        assert_eq!(limits.handshake_timeout, HANDSHAKE_TIMEOUT);
        assert_eq!(limits.header_read_timeout, HEADER_READ_TIMEOUT);
        assert_eq!(limits.body_read_timeout, BODY_READ_TIMEOUT);
        assert!((1..=MAX_CONNECTIONS).contains(&limits.max_connections));
    }

    #[test]
    fn at_the_cap_the_oldest_idle_connection_makes_room_and_busy_ones_stay() {
        let metrics = Arc::new(Metrics::new());
        let connections = Arc::new(Connections::new(2, metrics.clone()));
        let open = || {
            metrics.render().contains(&format!(
                "gantry_webhook_open_connections {}",
                connections.table().open.len()
            ))
        };
        let mut a = connections.admit().unwrap();
        let b = connections.admit().unwrap();
        assert!(!a.evicting && !b.evicting);
        let b_busy = b.slot.0.busy();
        let mut c = connections.admit().unwrap();
        assert!(c.evicting);
        assert!(
            a.evicted.try_recv().is_ok(),
            "the oldest idle one is evicted"
        );
        assert!(open());
        let c_busy = c.slot.0.busy();
        assert!(connections.admit().is_none(), "all busy: refused");
        drop(c_busy);
        let d = connections.admit().unwrap();
        assert!(d.evicting);
        assert!(c.evicted.try_recv().is_ok(), "idle again, so evicted");
        assert!(b.evicted.is_empty(), "a busy connection is never evicted");
        drop((b_busy, b, a, c));
        assert_eq!(connections.table().open.len(), 1);
        assert!(open());
        drop(d);
        assert!(connections.table().open.is_empty());
        assert!(
            metrics
                .render()
                .contains("gantry_webhook_open_connections 0")
        );
    }

    #[tokio::test]
    async fn malformed_requests_are_errors() {
        let w = webhook("100%", &[]);
        let err = |body: &[u8]| {
            let w = w.clone();
            let body = body.to_vec();
            async move { w.review(&body).await.unwrap_err().to_string() }
        };
        assert!(
            err(b"not json")
                .await
                .starts_with("malformed AdmissionReview: expected ident")
        );
        assert_eq!(
            err(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#).await,
            "malformed AdmissionReview: no request"
        );
        // Found by fuzz_webhook_mutated_reviews: another type was answered, echoed back.
        let mut body: Value =
            serde_json::from_slice(&review("apps", "CREATE", pod(json!(null), None))).unwrap();
        body["apiVersion"] = json!("");
        assert_eq!(
            err(&serde_json::to_vec(&body).unwrap()).await,
            "malformed AdmissionReview: expected admission.k8s.io/v1 AdmissionReview, got \"\" \"AdmissionReview\""
        );
        body["apiVersion"] = json!("admission.k8s.io/v1");
        body["kind"] = json!("Pod");
        assert!(
            err(&serde_json::to_vec(&body).unwrap())
                .await
                .ends_with("got \"admission.k8s.io/v1\" \"Pod\"")
        );
        let mut body: Value =
            serde_json::from_slice(&review("apps", "CREATE", pod(json!(null), None))).unwrap();
        body["request"]["object"]["spec"]["containers"] = json!("nope");
        assert!(
            err(&serde_json::to_vec(&body).unwrap())
                .await
                .starts_with("malformed AdmissionReview: the object is not a pod: invalid type")
        );
        let router = router(w.clone());
        let response = tower::ServiceExt::oneshot(
            router,
            axum::http::Request::post("/mutate")
                .body(axum::body::Body::from("{}"))
                .unwrap(),
        )
        .await
        .unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert!(
            w.metrics
                .render()
                .contains("gantry_webhook_malformed_requests_total 1")
        );
    }
}
