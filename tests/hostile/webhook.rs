//! The webhook's HTTPS server against hostile and broken clients, in process on a free
//! loopback port: a thousand idle connections (and some with a TLS handshake, a request
//! header or a request body left unfinished) do not keep a proper client from its answer,
//! and the server closes them once their deadline passes; beyond the connection cap idle
//! connections make room and busy ones are not touched, a new connection is closed at once
//! when all are busy, and the server stays up; malformed requests get an error, and their
//! log lines are rate-limited.

use crate::support::tls;

use std::future::Future;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gantry_webhook::config::{RolloutConfig, Share};
use gantry_webhook::server::{self, Limits, Namespaces, TlsConfig, Webhook};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use k8s_openapi::api::core::v1::Namespace;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// The deadlines of the test servers: short, so that the test waits little for them.
const DEADLINE: Duration = Duration::from_secs(2);
/// How long past a deadline the server may take to close a connection.
const SLACK: Duration = Duration::from_secs(3);
/// How long a proper client may wait for its answer.
const PROMPTLY: Duration = Duration::from_secs(2);
/// Idle connections of the first test.
const IDLE: usize = 1000;
/// Connections of each unfinished kind (handshake, header, body).
const UNFINISHED: usize = 20;

/// A CA and a serving certificate for 127.0.0.1 signed by it, written to `dir`: the files
/// of the pair, and a client configuration trusting the CA.
fn certificates(dir: &Path) -> (TlsConfig, Arc<ClientConfig>) {
    let pki = tls::test_pki();
    let (cert_file, key_file) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert_file, &pki.cert_pem).expect("write certificate");
    std::fs::write(&key_file, &pki.key_pem).expect("write key");
    let tls = TlsConfig::load(&cert_file, &key_file).expect("load the pair");
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from(pki.ca_der))
        .expect("trust the CA");
    let client =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
    (tls, Arc::new(client))
}

/// Raises this process's soft file-descriptor limit to `need` if it is lower (both ends of
/// every test connection live in this process); fails the test if the hard limit is lower.
fn ensure_descriptors(need: u64) {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current.is_some_and(|current| current < need) {
        assert!(
            limit.maximum.is_none_or(|max| max >= need),
            "this test needs {need} file descriptors; the hard limit is {:?}",
            limit.maximum
        );
        let mut raised = limit;
        raised.current = Some(need);
        setrlimit(Resource::Nofile, raised).expect("raise the file-descriptor limit");
    }
}

/// A webhook server on a free loopback port, stopped when dropped.
struct Server {
    addr: SocketAddr,
    webhook: Webhook,
    client: Arc<ClientConfig>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn start(limits: Limits) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        let (tls, client) = certificates(dir.path());
        let (store, _writer) = reflector::store::<PartialObjectMeta<Namespace>>();
        let webhook = Webhook::new(
            RolloutConfig {
                share: Share::ALL,
                scheduler_name: "gantry".to_string(),
                excluded_namespaces: vec!["kube-system".to_string()],
            },
            Namespaces { store, api: None },
        );
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("listen");
        let addr = listener.local_addr().expect("address");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server::serve(
            listener,
            tls,
            webhook.clone(),
            limits,
            async {
                let _ = stopped.await;
            },
            Duration::from_secs(1),
        ));
        Server {
            addr,
            webhook,
            client,
            stop: Some(stop),
            task,
            _dir: dir,
        }
    }

    fn metric(&self, series: &str) -> f64 {
        self.webhook
            .metrics
            .render()
            .lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    }

    fn closed(&self, reason: &str) -> f64 {
        self.metric(&format!(
            "gantry_webhook_connections_closed_total{{reason=\"{reason}\"}}"
        ))
    }

    async fn tcp(&self) -> TcpStream {
        TcpStream::connect(self.addr).await.expect("connect")
    }

    async fn tls(&self) -> TlsStream<TcpStream> {
        let name = ServerName::IpAddress(IpAddr::from(Ipv4Addr::LOCALHOST).into());
        TlsConnector::from(self.client.clone())
            .connect(name, self.tcp().await)
            .await
            .expect("TLS handshake")
    }

    /// POSTs `body` to /mutate as a proper client (a new connection): status and body.
    async fn post(&self, body: Vec<u8>) -> (u16, Vec<u8>) {
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(self.tls().await))
                .await
                .expect("HTTP handshake");
        tokio::spawn(connection);
        let request = hyper::Request::post("/mutate")
            .header("host", self.addr.to_string())
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .expect("request");
        let response = sender.send_request(request).await.expect("response");
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("response body")
            .to_bytes()
            .to_vec();
        (status, body)
    }

    /// A proper AdmissionReview, answered within [`PROMPTLY`] with the patch to gantry.
    async fn answers_promptly(&self) {
        let started = Instant::now();
        let (status, body) = tokio::time::timeout(PROMPTLY, self.post(review()))
            .await
            .expect("a proper client is answered promptly");
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let answer: Value = serde_json::from_slice(&body).expect("an AdmissionReview");
        assert_eq!(answer["response"]["uid"], "hostile-test");
        assert_eq!(answer["response"]["allowed"], true);
        assert_eq!(answer["response"]["patchType"], "JSONPatch");
        eprintln!("answered in {:?}", started.elapsed());
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.abort();
    }
}

/// Test limits: short deadlines, and the cap of this process's descriptor limit unless
/// `max_connections` says otherwise.
fn limits(max_connections: Option<usize>) -> Limits {
    let limits = Limits::for_this_process();
    Limits {
        handshake_timeout: DEADLINE,
        header_read_timeout: DEADLINE,
        body_read_timeout: DEADLINE,
        max_connections: max_connections.unwrap_or(limits.max_connections),
    }
}

/// An AdmissionReview of a pod creation.
fn review() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "hostile-test",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "apps",
            "operation": "CREATE",
            "userInfo": {"username": "admin"},
            "object": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "web", "namespace": "apps"},
                "spec": {"containers": [{"name": "app", "image": "app"}]}
            }
        }
    }))
    .expect("JSON")
}

/// Half of a TLS ClientHello: a handshake that never finishes.
fn half_a_client_hello(client: &Arc<ClientConfig>) -> Vec<u8> {
    let name = ServerName::IpAddress(IpAddr::from(Ipv4Addr::LOCALHOST).into());
    let mut connection =
        rustls::ClientConnection::new(client.clone(), name).expect("client connection");
    let mut hello = Vec::new();
    connection.write_tls(&mut hello).expect("ClientHello");
    hello.truncate(hello.len() / 2);
    hello
}

/// A request header cut off before its end.
const PARTIAL_HEADER: &[u8] = b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl";
/// A whole header announcing 1,000 bytes of body, and the first few of them.
const PARTIAL_BODY: &[u8] = b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"apiVersion\":";

/// Reads until the server closes the connection or `within` passes: whether it closed,
/// and what it sent before.
async fn closed_within<S: AsyncReadExt + Unpin>(
    stream: &mut S,
    within: Duration,
) -> (bool, Vec<u8>) {
    let mut received = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return (false, received),
            Ok(Ok(0)) | Ok(Err(_)) => return (true, received),
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
        }
    }
}

/// Runs `check` on every stream at once; how many came out true.
async fn count<S, F, Fut>(streams: Vec<S>, check: F) -> usize
where
    S: Send + 'static,
    F: Fn(S) -> Fut,
    Fut: Future<Output = bool> + Send + 'static,
{
    let tasks: Vec<_> = streams
        .into_iter()
        .map(|s| tokio::spawn(check(s)))
        .collect();
    let mut n = 0;
    for task in tasks {
        if task.await.expect("check task") {
            n += 1;
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_slow_clients_neither_stop_a_proper_client_nor_stay() {
    ensure_descriptors(4 * IDLE as u64);
    let limits = limits(None);
    assert!(
        limits.max_connections > IDLE + 3 * UNFINISHED,
        "the cap of this process ({}) is too low for the test",
        limits.max_connections
    );
    let server = Server::start(limits).await;
    let mut idle = Vec::new();
    for _ in 0..IDLE {
        idle.push(server.tcp().await);
    }
    let hello = half_a_client_hello(&server.client);
    let mut handshakes = Vec::new();
    let mut headers = Vec::new();
    let mut bodies = Vec::new();
    for _ in 0..UNFINISHED {
        let mut tcp = server.tcp().await;
        tcp.write_all(&hello)
            .await
            .expect("send half a ClientHello");
        handshakes.push(tcp);
        let mut tls = server.tls().await;
        tls.write_all(PARTIAL_HEADER)
            .await
            .expect("send a partial header");
        tls.flush().await.expect("flush");
        headers.push(tls);
        let mut tls = server.tls().await;
        tls.write_all(PARTIAL_BODY)
            .await
            .expect("send a partial body");
        tls.flush().await.expect("flush");
        bodies.push(tls);
    }
    let held = (IDLE + 3 * UNFINISHED) as f64;
    assert!(
        server.metric("gantry_webhook_open_connections") >= held - 1.0,
        "{} open",
        server.metric("gantry_webhook_open_connections")
    );

    // While all of them are held open, proper clients are answered at once.
    for _ in 0..3 {
        server.answers_promptly().await;
    }

    // Each is closed by the server once its deadline passes.
    let within = DEADLINE + SLACK;
    let closed =
        |within| move |mut s: TcpStream| async move { closed_within(&mut s, within).await.0 };
    let idle_closed = count(idle, closed(within));
    let handshakes_closed = count(handshakes, closed(within));
    let headers_closed = count(headers, move |mut s| async move {
        closed_within(&mut s, within).await.0
    });
    let bodies_answered_408 = count(bodies, move |mut s| async move {
        let (closed, received) = closed_within(&mut s, within).await;
        closed && received.starts_with(b"HTTP/1.1 408")
    });
    let (idle_closed, handshakes_closed, headers_closed, bodies_answered_408) = tokio::join!(
        idle_closed,
        handshakes_closed,
        headers_closed,
        bodies_answered_408
    );
    assert_eq!(idle_closed, IDLE, "idle connections closed");
    assert_eq!(
        handshakes_closed, UNFINISHED,
        "unfinished handshakes closed"
    );
    assert_eq!(headers_closed, UNFINISHED, "unfinished headers closed");
    assert_eq!(
        bodies_answered_408, UNFINISHED,
        "unfinished bodies answered 408"
    );
    assert_eq!(
        server.closed("handshake_timeout"),
        (IDLE + UNFINISHED) as f64
    );
    assert_eq!(server.closed("header_timeout"), UNFINISHED as f64);
    assert_eq!(server.closed("body_timeout"), UNFINISHED as f64);
    assert_eq!(server.closed("evicted"), 0.0);
    server.answers_promptly().await;
    let deadline = Instant::now() + SLACK;
    while server.metric("gantry_webhook_open_connections") > 0.0 {
        assert!(Instant::now() < deadline, "connections left open");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_the_cap_idle_connections_make_room_and_busy_ones_stay() {
    const CAP: usize = 20;
    let server = Server::start(limits(Some(CAP))).await;

    // 30 idle connections under a cap of 20: the 10 oldest are closed at once.
    let mut idle = Vec::new();
    for _ in 0..30 {
        idle.push(server.tcp().await);
        // Admitted in order, so that "oldest" means the first connected.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let newest = idle.split_off(10);
    let quick = Duration::from_millis(500);
    let oldest_closed = count(idle, move |mut s| async move {
        closed_within(&mut s, quick).await.0
    })
    .await;
    assert_eq!(oldest_closed, 10, "the oldest idle connections make room");
    assert_eq!(server.closed("evicted"), 10.0);
    let newest_open = count(newest, move |mut s| async move {
        !closed_within(&mut s, quick).await.0
    })
    .await;
    assert_eq!(newest_open, CAP, "the newest stay under the cap");
    server.answers_promptly().await;

    // Every slot busy with a request (its body unfinished): a new connection is closed at
    // once, and none of the busy ones is touched.
    let mut busy = Vec::new();
    for _ in 0..CAP {
        let mut tls = server.tls().await;
        tls.write_all(PARTIAL_BODY)
            .await
            .expect("send a partial body");
        tls.flush().await.expect("flush");
        busy.push(tls);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..5 {
        let mut refused = server.tcp().await;
        assert!(
            closed_within(&mut refused, quick).await.0,
            "a connection beyond the cap is closed at once"
        );
    }
    assert_eq!(server.closed("refused"), 5.0);
    let answered = count(busy, move |mut s| async move {
        let (closed, received) = closed_within(&mut s, DEADLINE + SLACK).await;
        closed && received.starts_with(b"HTTP/1.1 408")
    })
    .await;
    assert_eq!(
        answered, CAP,
        "the busy connections run to their own deadline"
    );

    // The server is still up.
    server.answers_promptly().await;
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn lines_with(&self, text: &str) -> usize {
        let log = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        String::from_utf8_lossy(&log)
            .lines()
            .filter(|l| l.contains(text))
            .count()
    }
}

// A current-thread runtime: the server's tasks run on this thread, under its subscriber.
#[tokio::test]
async fn malformed_requests_get_an_error_and_few_log_lines() {
    let log = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer({
            let log = log.clone();
            move || log.clone()
        })
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let server = Server::start(limits(None)).await;

    for body in [&b"not json"[..], b"{}", b"{\"request\": 1}"].repeat(10) {
        let (status, text) = server.post(body.to_vec()).await;
        assert_eq!(status, 400, "{}", String::from_utf8_lossy(&text));
        assert!(String::from_utf8_lossy(&text).starts_with("malformed AdmissionReview"));
    }
    for _ in 0..10 {
        let mut tls = server.tls().await;
        tls.write_all(b"NOT HTTP AT ALL\r\n\r\n")
            .await
            .expect("send garbage");
        tls.flush().await.expect("flush");
        let (closed, received) = closed_within(&mut tls, SLACK).await;
        assert!(closed, "a malformed request closes the connection");
        assert!(
            received.starts_with(b"HTTP/1.1 400"),
            "{}",
            String::from_utf8_lossy(&received)
        );
    }
    for _ in 0..10 {
        let mut tcp = server.tcp().await;
        tcp.write_all(b"GET / HTTP/1.1\r\n\r\n")
            .await
            .expect("send plain HTTP");
        assert!(
            closed_within(&mut tcp, SLACK).await.0,
            "plain HTTP is closed"
        );
    }

    assert_eq!(
        server.metric("gantry_webhook_malformed_requests_total"),
        30.0
    );
    assert_eq!(server.closed("bad_request"), 10.0);
    assert_eq!(server.closed("handshake_failed"), 10.0);
    // All within one interval of the limiter: one line each.
    for message in [
        "bad admission request",
        "malformed HTTP request",
        "TLS handshake failed",
    ] {
        assert_eq!(log.lines_with(message), 1, "log lines of {message:?}");
    }
    server.answers_promptly().await;
}
