//! Shared support for the tests against a real kube-apiserver and etcd (no mocks): the
//! integration tests of `gantry run`, the kube-scheduler parity check and the check of the
//! PersistentVolume controller the volume tests run with. A control plane
//! started by `scripts/control-plane.sh` in a temporary directory and stopped by a drop guard
//! (also when a test panics, and by a watchdog process if the test process is killed), the
//! Kubernetes components run against it (kube-scheduler, kube-controller-manager), gantry
//! processes, a pausable TCP proxy to hold gantry's requests in flight, object builders
//! (storage ones in `storage`) and polling helpers.
//! And the strategies of the `fuzz_` properties, which the unit tests of several crates
//! share.

mod component;
mod control_plane;
pub mod fuzz;
pub mod prometheus;
mod provisioner;
mod storage;
pub mod tls;

pub use component::{Component, KubeControllerManager, KubeScheduler};
pub use control_plane::{ControlPlane, kube_bins, repo};
pub use provisioner::while_provisioning;
pub use storage::{host_path_volume, storage_class, volume_claim};

use std::collections::BTreeMap;
use std::future::Future;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Binding, Namespace, Node, ObjectReference, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// The `gantry` binary Cargo built for the running test: a test executable lives in
/// `target/<profile>/deps/`, and its package's binaries, built before its tests run, one
/// folder up.
pub fn gantry_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    exe.parent()
        .and_then(Path::parent)
        .expect("a test executable in target/<profile>/deps")
        .join("gantry")
}

/// Runs the shell command `command` once this test process has died, however it died: from a
/// watchdog process of its own session, so that signals to the test's process group (Ctrl-C)
/// spare it. None if it cannot be started.
fn on_test_exit(command: &str) -> Option<Child> {
    let watch = format!(
        "while kill -0 {} 2>/dev/null; do sleep 1; done; {command}",
        std::process::id()
    );
    Command::new("setsid")
        .args(["sh", "-c", &watch])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

/// A client from a kubeconfig file.
pub async fn client_for(kubeconfig: &Path) -> Client {
    let file = Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .expect("client config");
    Client::try_from(config).expect("client")
}

/// A free loopback port (free when asked; gantry binds it right after).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A `gantry run` process.
pub struct Gantry {
    child: Option<Child>,
    /// Its log (stderr).
    pub log: PathBuf,
    /// Where it serves /metrics and the health endpoints.
    pub addr: SocketAddr,
    name: String,
}

static GANTRIES: AtomicUsize = AtomicUsize::new(0);

impl Gantry {
    /// Starts `gantry run` with `config` (YAML), talking to the API server through
    /// `kubeconfig`; its files go into `dir`.
    pub fn start(dir: &Path, name: &str, config: &str, kubeconfig: &Path) -> Gantry {
        Gantry::start_with_args(dir, name, config, kubeconfig, &[])
    }

    /// Like [`Gantry::start`], with more arguments for `gantry run`.
    pub fn start_with_args(
        dir: &Path,
        name: &str,
        config: &str,
        kubeconfig: &Path,
        args: &[String],
    ) -> Gantry {
        let mut all = vec!["--address-serves-debug".to_string()];
        all.extend_from_slice(args);
        Gantry::start_serving(dir, name, config, kubeconfig, &all)
    }

    /// Like [`Gantry::start`], its plain port serving only what it serves by default (no
    /// `/debug/*`).
    pub fn start_without_debug(dir: &Path, name: &str, config: &str, kubeconfig: &Path) -> Gantry {
        Gantry::start_serving(dir, name, config, kubeconfig, &[])
    }

    fn start_serving(
        dir: &Path,
        name: &str,
        config: &str,
        kubeconfig: &Path,
        args: &[String],
    ) -> Gantry {
        let n = GANTRIES.fetch_add(1, Ordering::Relaxed);
        let config_file = dir.join(format!("gantry-{name}-{n}.yaml"));
        std::fs::write(&config_file, config).expect("write config");
        let log = dir.join(format!("gantry-{name}-{n}.log"));
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let child = Command::new(gantry_binary())
            .arg("run")
            .arg("--config")
            .arg(&config_file)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--address")
            .arg(addr.to_string())
            // Plain HTTP only: the tests of a binary run side by side, and the secure port's
            // default (10259) would be one port for all of them.
            .arg("--secure-port=0")
            .arg("--log")
            .arg("info,gantry=debug")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("start gantry");
        Gantry {
            child: Some(child),
            log,
            addr,
            name: name.to_string(),
        }
    }

    /// Starts `gantry run` as [`Gantry::start`] does and waits until it is ready: what
    /// nearly every test does before it creates the pods gantry is to schedule.
    pub async fn start_ready(dir: &Path, name: &str, config: &str, kubeconfig: &Path) -> Gantry {
        let mut gantry = Gantry::start(dir, name, config, kubeconfig);
        gantry.wait_ready().await;
        gantry
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The leader-election identity it logged at startup.
    pub fn identity(&self) -> Option<String> {
        let log = self.log_text();
        let rest = log.split(" identity=").nth(1)?;
        Some(rest.split_whitespace().next()?.to_string())
    }

    /// GET `path` from its HTTP endpoint: (status, body), or None if it does not answer.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.addr, path)
    }

    /// Its metrics.
    pub fn metrics(&self) -> String {
        self.get("/metrics").map(|(_, b)| b).unwrap_or_default()
    }

    /// The value of the series `series` (name with labels, exactly as served), 0 if absent.
    pub fn metric(&self, series: &str) -> f64 {
        metric_value(&self.metrics(), series)
    }

    /// Waits until `/readyz` says the caches are warm.
    pub async fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some((200, _)) = self.get("/readyz") {
                return;
            }
            assert!(
                self.is_running(),
                "gantry {} exited during startup:\n{}",
                self.name,
                self.log_text()
            );
            assert!(
                Instant::now() < deadline,
                "gantry {} not ready after 60 s:\n{}",
                self.name,
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Its resident memory now, in bytes (0 when it cannot be read).
    pub fn rss(&self) -> u64 {
        self.memory_status("VmRSS:")
    }

    /// The most resident memory it has had so far, in bytes (0 when it cannot be read):
    /// what a short-lived buffer leaves behind, where [`Gantry::rss`] may miss it.
    pub fn peak_rss(&self) -> u64 {
        self.memory_status("VmHWM:")
    }

    fn memory_status(&self, field: &str) -> u64 {
        let Some(pid) = self.pid() else { return 0 };
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    }

    /// True while the process runs.
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Sends SIGTERM and waits for the exit (at most 30 s).
    pub fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("gantry running");
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!(
                    "gantry {} ignored SIGTERM for 30 s:\n{}",
                    self.name,
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends SIGKILL and reaps the process.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits for the process to exit by itself (at most `timeout`).
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(child) = &mut self.child
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Gantry {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("---- log of gantry {} ----\n{}", self.name, self.log_text());
        }
    }
}

/// POSTs `body` (JSON) to `path` at `addr` and reads the answer for at most `wait`:
/// (status, body), or None if none came.
pub fn http_post(
    addr: SocketAddr,
    path: &str,
    body: &str,
    wait: Duration,
) -> Option<(u16, String)> {
    let mut stream = send_post(addr, path, body)?;
    stream.set_read_timeout(Some(wait)).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// Sends a POST of `body` (JSON) to `path` at `addr`, leaving the answer unread: the
/// connection, to read it from or to drop (a client that goes away).
pub fn send_post(addr: SocketAddr, path: &str, body: &str) -> Option<TcpStream> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    write!(
        stream,
        "POST {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    Some(stream)
}

fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// The value of `series` (name with labels, exactly as served) in a Prometheus text
/// exposition, if it is there.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// The value of `series` in a Prometheus text exposition, 0 if absent.
pub fn metric_value(text: &str, series: &str) -> f64 {
    metric(text, series).unwrap_or(0.0)
}

/// A TCP proxy in front of the API server that can hold what the client sends (while the
/// server's answers, such as watch events, keep flowing): requests stay in flight until
/// resumed.
pub struct Proxy {
    /// Where it listens.
    pub addr: SocketAddr,
    paused: Arc<AtomicBool>,
}

impl Proxy {
    /// A proxy to `target`.
    pub fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy listener");
        let addr = listener.local_addr().expect("proxy addr");
        let paused = Arc::new(AtomicBool::new(false));
        let p = paused.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(target) else {
                    continue;
                };
                let (c2, s2) = match (client.try_clone(), server.try_clone()) {
                    (Ok(c), Ok(s)) => (c, s),
                    _ => continue,
                };
                let held = p.clone();
                std::thread::spawn(move || pipe(client, server, Some(held)));
                std::thread::spawn(move || pipe(s2, c2, None));
            }
        });
        Proxy { addr, paused }
    }

    /// Holds client data from now on.
    pub fn pause(&self) {
        self.paused.store(true, Ordering::SeqCst);
    }

    /// Lets held and new client data through.
    pub fn resume(&self) {
        self.paused.store(false, Ordering::SeqCst);
    }

    /// A copy of `kubeconfig` (in `dir`) pointing at the proxy.
    pub fn kubeconfig(&self, kubeconfig: &Path, dir: &Path) -> PathBuf {
        kubeconfig_via(self.addr, kubeconfig, dir)
    }
}

/// A copy of `kubeconfig` (in `dir`) whose server is `addr` (a proxy in front of the API
/// server; the server's certificate names 127.0.0.1, whatever the port).
fn kubeconfig_via(addr: SocketAddr, kubeconfig: &Path, dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(kubeconfig).expect("kubeconfig");
    let rewritten: String = text
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("server: ") {
                format!("    server: https://{addr}\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let path = dir.join(format!("kubeconfig-proxy-{}", addr.port()));
    std::fs::write(&path, rewritten).expect("write kubeconfig");
    path
}

/// A TCP proxy in front of the API server whose network can be cut as a failing network
/// cuts it: what clients send still reaches the server for a moment while its answers are
/// lost (so requests the server carries out get no answer), then every connection is closed
/// and new ones are refused until the network is restored.
pub struct CutProxy {
    /// Where it listens.
    pub addr: SocketAddr,
    state: Arc<CutState>,
}

#[derive(Default)]
struct CutState {
    /// New connections are closed at once.
    down: AtomicBool,
    /// The server's answers are dropped.
    deaf: AtomicBool,
    /// Both ends of every connection made, to close them.
    open: Mutex<Vec<TcpStream>>,
}

impl CutProxy {
    /// A proxy to `target`.
    pub fn start(target: SocketAddr) -> CutProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy listener");
        let addr = listener.local_addr().expect("proxy addr");
        let state = Arc::new(CutState::default());
        let st = state.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if st.down.load(Ordering::SeqCst) {
                    let _ = client.shutdown(std::net::Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(target) else {
                    continue;
                };
                let clones = (
                    client.try_clone(),
                    server.try_clone(),
                    client.try_clone(),
                    server.try_clone(),
                );
                let (Ok(c2), Ok(s2), Ok(c3), Ok(s3)) = clones else {
                    continue;
                };
                st.open
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend([c3, s3]);
                std::thread::spawn(move || pipe(client, server, None));
                let deaf = st.clone();
                std::thread::spawn(move || pipe_answers(s2, c2, &deaf));
            }
        });
        CutProxy { addr, state }
    }

    /// Cuts the network: for `answers_lost_for` the server's answers are dropped while
    /// requests still reach it, then every connection is closed, and new ones are refused
    /// until [`CutProxy::restore`].
    pub fn cut(&self, answers_lost_for: Duration) {
        self.state.deaf.store(true, Ordering::SeqCst);
        std::thread::sleep(answers_lost_for);
        self.state.down.store(true, Ordering::SeqCst);
        let open = std::mem::take(&mut *self.state.open.lock().unwrap_or_else(|e| e.into_inner()));
        for stream in open {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        self.state.deaf.store(false, Ordering::SeqCst);
    }

    /// Accepts connections again.
    pub fn restore(&self) {
        self.state.down.store(false, Ordering::SeqCst);
    }

    /// A copy of `kubeconfig` (in `dir`) pointing at the proxy.
    pub fn kubeconfig(&self, kubeconfig: &Path, dir: &Path) -> PathBuf {
        kubeconfig_via(self.addr, kubeconfig, dir)
    }
}

/// Copies the server's answers to the client, dropping them while the network is deaf.
fn pipe_answers(mut from: TcpStream, mut to: TcpStream, state: &CutState) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if state.deaf.load(Ordering::SeqCst) {
            continue;
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
    let _ = from.shutdown(std::net::Shutdown::Both);
}

fn pipe(mut from: TcpStream, mut to: TcpStream, hold: Option<Arc<AtomicBool>>) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        while hold.as_ref().is_some_and(|h| h.load(Ordering::SeqCst)) {
            std::thread::sleep(Duration::from_millis(10));
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
    let _ = from.shutdown(std::net::Shutdown::Both);
}

/// A scheduler configuration for tests: one profile `profile` restricted (NodeAffinity's
/// `addedAffinity`) to nodes labelled `gantry-test=<label>`, so that tests sharing a control
/// plane never place pods on each other's nodes; short backoffs; leader election off unless
/// `leader_election` gives its YAML block.
pub fn config(profile: &str, label: &str, leader_election: Option<&str>, extra: &str) -> String {
    let le = leader_election.unwrap_or("leaderElect: false");
    let le = le.lines().collect::<Vec<_>>().join("\n  ");
    format!(
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 2
leaderElection:
  {le}
{extra}
profiles:
- schedulerName: {profile}
  pluginConfig:
  - name: NodeAffinity
    args:
      addedAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          nodeSelectorTerms:
          - matchExpressions:
            - {{key: gantry-test, operator: In, values: [{label}]}}
"
    )
}

/// [`config`] with the plugins `enabled` and `disabled` at `multiPoint` (a disabled list
/// only when one is given): the profile of a test of a plugin outside the defaults.
pub fn config_with_plugins(
    profile: &str,
    label: &str,
    enabled: &[&str],
    disabled: &[&str],
) -> String {
    let list = |names: &[&str]| {
        let items: Vec<String> = names.iter().map(|n| format!("{{name: {n}}}")).collect();
        format!("[{}]", items.join(", "))
    };
    let mut plugins = format!(
        "  plugins:\n    multiPoint:\n      enabled: {}\n",
        list(enabled)
    );
    if !disabled.is_empty() {
        plugins.push_str(&format!("      disabled: {}\n", list(disabled)));
    }
    plugins.push_str("  pluginConfig:\n");
    let base = config(profile, label, None, "");
    assert!(base.contains("  pluginConfig:\n"));
    base.replacen("  pluginConfig:\n", &plugins, 1)
}

/// A ready node labelled `gantry-test=<label>` with `cpu` and `memory` allocatable.
pub fn node(name: &str, label: &str, cpu: &str, memory: &str) -> Node {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"gantry-test": label, "kubernetes.io/hostname": name}},
        "status": {
            "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    }))
    .expect("node")
}

/// `n` with `gpus` of `nvidia.com/gpu` in its capacity and allocatable.
pub fn with_gpus(mut n: Node, gpus: u64) -> Node {
    if let Some(status) = n.status.as_mut() {
        for list in [status.capacity.as_mut(), status.allocatable.as_mut()]
            .into_iter()
            .flatten()
        {
            list.insert(
                "nvidia.com/gpu".into(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity(gpus.to_string()),
            );
        }
    }
    n
}

/// Like [`node`], with more labels (zones, opt-ins).
pub fn labelled_node(
    name: &str,
    label: &str,
    cpu: &str,
    memory: &str,
    labels: &[(&str, &str)],
) -> Node {
    let mut n = node(name, label, cpu, memory);
    let map = n.metadata.labels.get_or_insert_with(BTreeMap::new);
    for (k, v) in labels {
        map.insert(k.to_string(), v.to_string());
    }
    n
}

/// A pending pod for `scheduler` requesting `cpu` and `memory`.
pub fn pod(namespace: &str, name: &str, scheduler: &str, cpu: &str, memory: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{
                "name": "app",
                "image": "registry.example/app:1",
                "resources": {"requests": {"cpu": cpu, "memory": memory}}
            }]
        }
    }))
    .expect("pod")
}

/// A client of `plane`, with the test's own namespace `ns` created.
pub async fn client_with_namespace(plane: &ControlPlane, ns: &str) -> Client {
    let client = plane.client().await;
    create_namespace(&client, ns).await;
    client
}

/// Creates a namespace.
pub async fn create_namespace(client: &Client, name: &str) {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
}

/// Creates a node.
pub async fn create_node(client: &Client, node: &Node) {
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), node)
        .await
        .expect("create node");
}

/// Creates the nodes `names`, each as [`node`] makes it.
pub async fn create_nodes(client: &Client, names: &[&str], label: &str, cpu: &str, memory: &str) {
    for n in names {
        create_node(client, &node(n, label, cpu, memory)).await;
    }
}

/// Creates a pod. A PriorityClass created just before may not have reached the API server's
/// priority admission (it reads PriorityClasses from a cache): the creation is retried for a
/// while on that refusal alone.
pub async fn create_pod(client: &Client, pod: &Pod) {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match api.create(&PostParams::default(), pod).await {
            Err(kube::Error::Api(e))
                if e.code == 403
                    && e.message.contains("no PriorityClass with name")
                    && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            result => {
                result.expect("create pod");
                return;
            }
        }
    }
}

/// Deletes a pod at once.
pub async fn delete_pod(client: &Client, namespace: &str, name: &str) {
    Api::<Pod>::namespaced(client.clone(), namespace)
        .delete(name, &DeleteParams::default().grace_period(0))
        .await
        .expect("delete pod");
}

/// Binds a pod as another scheduler would.
pub async fn bind(
    client: &Client,
    namespace: &str,
    name: &str,
    node: &str,
) -> Result<(), kube::Error> {
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            ..Default::default()
        },
        target: ObjectReference {
            kind: Some("Node".to_string()),
            name: Some(node.to_string()),
            api_version: Some("v1".to_string()),
            ..Default::default()
        },
    };
    Api::<Pod>::namespaced(client.clone(), namespace)
        .create_subresource::<_, serde_json::Value>(
            "binding",
            name,
            &PostParams::default(),
            &binding,
        )
        .await
        .map(|_| ())
}

/// The pods of a namespace.
pub async fn pods(client: &Client, namespace: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .expect("list pods")
        .items
}

/// One pod.
pub async fn get_pod(client: &Client, namespace: &str, name: &str) -> Pod {
    Api::<Pod>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .expect("get pod")
}

/// The node a pod is bound to.
pub fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

/// The pods of a namespace that are bound to a node.
pub async fn bound_pods(client: &Client, namespace: &str) -> Vec<Pod> {
    let mut all = pods(client, namespace).await;
    all.retain(|p| node_of(p).is_some());
    all
}

/// Waits (at most `timeout`) until pod `namespace/name` is bound; returns its node.
pub async fn wait_bound(client: &Client, namespace: &str, name: &str, timeout: Duration) -> String {
    eventually(timeout, &format!("{name} bound"), || async {
        node_of(&get_pod(client, namespace, name).await).map(str::to_string)
    })
    .await
}

/// Waits (at most `timeout`) until pod `namespace/name` is reported unschedulable (its
/// `PodScheduled` condition False, reason `Unschedulable`); returns the condition's message.
pub async fn wait_unschedulable(
    client: &Client,
    namespace: &str,
    name: &str,
    timeout: Duration,
) -> String {
    eventually(
        timeout,
        &format!("{name} reported unschedulable"),
        || async {
            pod_scheduled(&get_pod(client, namespace, name).await)
                .filter(|c| c.0 == "False" && c.1 == "Unschedulable")
                .map(|c| c.2)
        },
    )
    .await
}

/// The events (events.k8s.io/v1) of a namespace.
pub async fn events(client: &Client, namespace: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .expect("list events")
        .items
}

/// The events about pod `name` with `reason`.
pub fn events_about<'a>(events: &'a [Event], name: &str, reason: &str) -> Vec<&'a Event> {
    events
        .iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .collect()
}

/// The pod's `PodScheduled` condition: (status, reason, message).
pub fn pod_scheduled(pod: &Pod) -> Option<(String, String, String)> {
    let c = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")?;
    Some((
        c.status.clone(),
        c.reason.clone().unwrap_or_default(),
        c.message.clone().unwrap_or_default(),
    ))
}

/// Millicores of a pod's cpu requests.
pub fn pod_milli_cpu(pod: &Pod) -> i64 {
    let Some(spec) = &pod.spec else { return 0 };
    spec.containers
        .iter()
        .filter_map(|c| c.resources.as_ref()?.requests.as_ref()?.get("cpu"))
        .map(|q| milli(&q.0))
        .sum()
}

/// Millicores of a cpu quantity as tests write them (`250m`, `2`).
pub fn milli(q: &str) -> i64 {
    match q.strip_suffix('m') {
        Some(m) => m.parse().expect("millicores"),
        None => q.parse::<i64>().expect("cores") * 1000,
    }
}

/// Panics if the pods bound to any node request more cpu than `allocatable` (millicores by
/// node name) allows.
pub fn assert_within_capacity(pods: &[Pod], allocatable: &BTreeMap<String, i64>) {
    let mut used: BTreeMap<String, i64> = BTreeMap::new();
    for p in pods {
        if let Some(n) = node_of(p) {
            *used.entry(n.to_string()).or_default() += pod_milli_cpu(p);
        }
    }
    for (node, u) in &used {
        let cap = allocatable.get(node).copied().unwrap_or(0);
        assert!(
            u <= &cap,
            "node {node} over capacity: {u}m requested of {cap}m"
        );
    }
}

/// Polls `check` every 100 ms until it returns Some, or panics after `timeout` naming `what`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every `status.nominatedNodeName` the pods of a namespace carried, as a watch saw them: the
/// API server clears a pod's nomination when it is bound, so a test that wants to know where
/// a preemptor was nominated must have seen it before.
pub struct Nominations {
    seen: Arc<Mutex<BTreeMap<String, String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Nominations {
    /// Starts watching the pods of `namespace`.
    pub fn watch(client: &Client, namespace: &str) -> Nominations {
        use futures::StreamExt;
        let seen = Arc::new(Mutex::new(BTreeMap::new()));
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let record = seen.clone();
        let task = tokio::spawn(async move {
            let events = kube::runtime::watcher(pods, Default::default());
            let mut objects =
                std::pin::pin!(kube::runtime::WatchStreamExt::applied_objects(events));
            while let Some(next) = objects.next().await {
                let Ok(pod) = next else { continue };
                let nominated = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.nominated_node_name.clone());
                if let (Some(name), Some(node)) = (pod.metadata.name.clone(), nominated) {
                    record.lock().expect("nominations").insert(name, node);
                }
            }
        });
        Nominations { seen, task }
    }

    /// The node `pod` was last seen nominated to.
    pub fn of(&self, pod: &str) -> Option<String> {
        self.seen.lock().expect("nominations").get(pod).cloned()
    }
}

impl Drop for Nominations {
    fn drop(&mut self) {
        self.task.abort();
    }
}
