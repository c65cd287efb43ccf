//! A real Prometheus (Debian's package, `scripts/install-prometheus.sh`) on a free loopback
//! port, scraping a small exporter run by the test that serves node-exporter-style metrics
//! for fake nodes: `node_cpu_seconds_total{mode="idle"|"user"}` counters that grow as the
//! node's set load says, and `node_memory_MemTotal_bytes` / `node_memory_MemAvailable_bytes`,
//! each with a `node` label; or scraping what a test configures (gantry itself, as a
//! cluster's Prometheus scrapes kube-scheduler).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::free_port;

/// Memory of every fake node, in bytes.
const MEMORY_BYTES: f64 = 8.0 * 1024.0 * 1024.0 * 1024.0;

#[derive(Debug)]
struct FakeNode {
    cpu: f64,
    memory: f64,
    idle_seconds: f64,
    busy_seconds: f64,
    since: Instant,
}

impl FakeNode {
    /// Brings the counters up to now at the current load.
    fn advance(&mut self) {
        let now = Instant::now();
        let dt = now.duration_since(self.since).as_secs_f64();
        self.idle_seconds += (1.0 - self.cpu) * dt;
        self.busy_seconds += self.cpu * dt;
        self.since = now;
    }
}

/// The exporter: an HTTP server answering every request with the metrics of its nodes.
pub struct Exporter {
    /// Where it listens.
    pub addr: SocketAddr,
    nodes: Arc<Mutex<BTreeMap<String, FakeNode>>>,
}

impl Exporter {
    /// Starts serving (on a thread of its own, for the rest of the test process).
    pub fn start() -> Exporter {
        let listener = TcpListener::bind("127.0.0.1:0").expect("exporter listener");
        let addr = listener.local_addr().expect("exporter addr");
        let nodes: Arc<Mutex<BTreeMap<String, FakeNode>>> = Arc::default();
        let served = nodes.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let _ = answer(stream, &served);
            }
        });
        Exporter { addr, nodes }
    }

    /// Sets a node's cpu and memory utilisation (fractions); adds the node if new.
    pub fn set(&self, node: &str, cpu: f64, memory: f64) {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        let n = nodes.entry(node.to_string()).or_insert_with(|| FakeNode {
            cpu,
            memory,
            idle_seconds: 1000.0,
            busy_seconds: 1000.0,
            since: Instant::now(),
        });
        n.advance();
        n.cpu = cpu;
        n.memory = memory;
    }

    /// Stops exporting a node's series (Prometheus marks them stale).
    pub fn remove(&self, node: &str) {
        self.nodes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(node);
    }
}

fn answer(mut stream: TcpStream, nodes: &Mutex<BTreeMap<String, FakeNode>>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        request.extend_from_slice(&buf[..n]);
    }
    let body = {
        let mut nodes = nodes.lock().unwrap_or_else(|e| e.into_inner());
        render(&mut nodes)
    };
    write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn render(nodes: &mut BTreeMap<String, FakeNode>) -> String {
    let mut out = String::from(
        "# HELP node_cpu_seconds_total Seconds the CPUs spent in each mode.\n\
         # TYPE node_cpu_seconds_total counter\n",
    );
    for (name, n) in nodes.iter_mut() {
        n.advance();
        out.push_str(&format!(
            "node_cpu_seconds_total{{cpu=\"0\",mode=\"idle\",node=\"{name}\"}} {:.6}\n\
             node_cpu_seconds_total{{cpu=\"0\",mode=\"user\",node=\"{name}\"}} {:.6}\n",
            n.idle_seconds, n.busy_seconds
        ));
    }
    out.push_str("# TYPE node_memory_MemTotal_bytes gauge\n");
    for name in nodes.keys() {
        out.push_str(&format!(
            "node_memory_MemTotal_bytes{{node=\"{name}\"}} {MEMORY_BYTES:.0}\n"
        ));
    }
    out.push_str("# TYPE node_memory_MemAvailable_bytes gauge\n");
    for (name, n) in nodes.iter() {
        out.push_str(&format!(
            "node_memory_MemAvailable_bytes{{node=\"{name}\"}} {:.0}\n",
            MEMORY_BYTES * (1.0 - n.memory)
        ));
    }
    out
}

/// The prometheus binary: `GANTRY_PROMETHEUS`, else `prometheus` on the PATH.
fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("GANTRY_PROMETHEUS").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("prometheus"))
        .find(|p| p.is_file());
    on_path.unwrap_or_else(|| {
        panic!("no prometheus: run scripts/install-prometheus.sh (or set GANTRY_PROMETHEUS)")
    })
}

/// A Prometheus server scraping targets every second.
pub struct Prometheus {
    child: Option<Child>,
    /// Its HTTP address.
    pub addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts a server scraping `targets` every second, keeping their labels; returns once
    /// it is ready.
    pub fn start(targets: &[SocketAddr]) -> Prometheus {
        let list: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        Prometheus::with_scrape_configs(&format!(
            "- job_name: fake-nodes\n  honor_labels: true\n  \
             static_configs:\n  - targets: [{}]\n",
            list.join(", ")
        ))
    }

    /// Starts a server with `scrape_configs` (YAML, the list's items), scraping and
    /// evaluating every second; returns once it is ready.
    pub fn with_scrape_configs(scrape_configs: &str) -> Prometheus {
        let dir = tempfile::Builder::new()
            .prefix("gantry-prometheus-")
            .tempdir()
            .expect("temp dir");
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n{scrape_configs}"
        );
        let config_file = dir.path().join("prometheus.yml");
        std::fs::write(&config_file, config).expect("write prometheus.yml");
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log");
        let child = Command::new(binary())
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        // Stops the server when this test process dies, however it dies.
        let watch = format!(
            "while kill -0 {} 2>/dev/null; do sleep 1; done; kill {} 2>/dev/null",
            std::process::id(),
            child.id()
        );
        let _ = Command::new("setsid")
            .args(["sh", "-c", &watch])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let mut p = Prometheus {
            child: Some(child),
            addr,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if get(addr, "/-/ready").is_some_and(|(status, _)| status == 200) {
                return p;
            }
            if let Some(c) = &mut p.child
                && let Ok(Some(status)) = c.try_wait()
            {
                panic!("prometheus exited ({status}):\n{}", p.log());
            }
            assert!(
                Instant::now() < deadline,
                "prometheus not ready after 60 s:\n{}",
                p.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Its base URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Its log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// An instant query: the value of each series by its `node` label.
    pub fn query(&self, promql: &str) -> BTreeMap<String, f64> {
        let encoded: String = form_urlencoded::byte_serialize(promql.as_bytes()).collect();
        let Some((200, body)) = get(self.addr, &format!("/api/v1/query?query={encoded}")) else {
            return BTreeMap::new();
        };
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        v["data"]["result"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| {
                let node = r["metric"]["node"].as_str()?.to_string();
                let value = r["value"][1].as_str()?.parse().ok()?;
                Some((node, value))
            })
            .collect()
    }

    /// An instant query's result vector (each item's `metric` and `value`), or why there is
    /// none (an HTTP or query error, with Prometheus' words).
    pub fn query_vector(&self, promql: &str) -> Result<Vec<serde_json::Value>, String> {
        let encoded: String = form_urlencoded::byte_serialize(promql.as_bytes()).collect();
        let (status, body) = get(self.addr, &format!("/api/v1/query?query={encoded}"))
            .ok_or_else(|| "prometheus does not answer".to_string())?;
        let v: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        if status != 200 || v["status"] != "success" {
            return Err(format!("{status}: {body}"));
        }
        Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
    }

    /// The scrape targets' health, as `/api/v1/targets` reports it.
    pub fn targets(&self) -> String {
        get(self.addr, "/api/v1/targets")
            .map(|(_, b)| b)
            .unwrap_or_default()
    }

    /// Kills the server (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.kill();
    }
}

/// GET over HTTP/1.0: (status, body), or None if nothing answers.
fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}
