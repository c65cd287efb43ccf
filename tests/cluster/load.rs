//! `gantry run` with node load from a real Prometheus (Debian's package) scraping an exporter
//! run by the test, which serves node-exporter-style metrics for the fake nodes; against a
//! real kube-apiserver. LoadAware moves placements away from a node whose load rises, stale
//! metrics are filtered or scored neutrally as configured, Prometheus stopped mid-run does
//! not stop scheduling, Overcommit admits a BestEffort pod beyond requests on an opted-in
//! idle node and refuses it when the node is loaded, and a ZonePolicy rule is honoured.
//!
//! The tests share one control plane and (except the one that stops it) one Prometheus; each
//! has its own namespace, nodes and gantry process.

use crate::support;

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use support::prometheus::{Exporter, Prometheus};
use support::*;

/// The cpu query the tests give gantry: node-exporter's idle counter, over the last two
/// scrapes (the default's one-minute rate would make the tests slow).
const CPU_QUERY: &str = "1 - avg by (node) (irate(node_cpu_seconds_total{mode=\"idle\"}[5s]))";
/// The default memory query, for the `node` label.
const MEMORY_QUERY: &str =
    "1 - avg by (node) (node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes)";
/// gantry's `--load-max-age`.
const MAX_AGE: Duration = Duration::from_secs(5);

/// An exporter and a Prometheus scraping it.
struct Metrics {
    exporter: Exporter,
    prometheus: Mutex<Prometheus>,
}

impl Metrics {
    fn start() -> Metrics {
        let exporter = Exporter::start();
        let prometheus = Prometheus::start(&[exporter.addr]);
        Metrics {
            exporter,
            prometheus: Mutex::new(prometheus),
        }
    }

    fn url(&self) -> String {
        self.prometheus.lock().unwrap().url()
    }

    /// Sets a node's load and waits until Prometheus reports it and gantry (querying every
    /// second) has had time to read it.
    async fn set_load(&self, node: &str, cpu: f64, memory: f64) {
        self.exporter.set(node, cpu, memory);
        eventually(
            Duration::from_secs(30),
            &format!("Prometheus reporting {node} at cpu {cpu}"),
            || async {
                let p = self.prometheus.lock().unwrap();
                let c = p.query(CPU_QUERY).get(node).copied();
                let m = p.query(MEMORY_QUERY).get(node).copied();
                (c.is_some_and(|c| (c - cpu).abs() < 0.03)
                    && m.is_some_and(|m| (m - memory).abs() < 0.01))
                .then_some(())
            },
        )
        .await;
        tokio::time::sleep(Duration::from_millis(2500)).await;
    }

    /// Stops exporting a node and waits until Prometheus no longer reports it.
    async fn drop_node(&self, node: &str) {
        self.exporter.remove(node);
        eventually(
            Duration::from_secs(30),
            &format!("Prometheus forgetting {node}"),
            || async {
                let p = self.prometheus.lock().unwrap();
                (!p.query(CPU_QUERY).contains_key(node)).then_some(())
            },
        )
        .await;
    }
}

static SHARED: Mutex<Weak<Metrics>> = Mutex::new(Weak::new());

/// The exporter and Prometheus shared by the tests running at the same time.
fn shared_metrics() -> Arc<Metrics> {
    let mut slot = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(m) = slot.upgrade() {
        return m;
    }
    let m = Arc::new(Metrics::start());
    *slot = Arc::downgrade(&m);
    m
}

/// `gantry run`'s node-load arguments for a Prometheus at `url`.
fn load_args(url: &str) -> Vec<String> {
    [
        "--load-source",
        "prometheus",
        "--prometheus-url",
        url,
        "--prometheus-node-label",
        "node",
        "--prometheus-cpu-query",
        CPU_QUERY,
        "--load-interval",
        "1s",
        "--load-max-age",
        "5s",
        "--load-lag",
        "2s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A profile restricted to the nodes labelled `gantry-test=<label>`, with `enabled` added to
/// its plugins and `args` as plugin configuration.
fn profile(name: &str, label: &str, enabled: &str, args: &[(&str, serde_json::Value)]) -> String {
    let mut out = format!(
        "- schedulerName: {name}
  plugins:
    multiPoint:
      enabled: [{enabled}]
  pluginConfig:
  - name: NodeAffinity
    args:
      addedAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          nodeSelectorTerms:
          - matchExpressions:
            - {{key: gantry-test, operator: In, values: [{label}]}}
"
    );
    for (plugin, a) in args {
        out.push_str(&format!("  - name: {plugin}\n    args: {a}\n"));
    }
    out
}

fn scheduler_config(profiles: &[String]) -> String {
    format!(
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 2
leaderElection:
  leaderElect: false
profiles:
{}",
        profiles.concat()
    )
}

/// A pending pod; `cpu` empty for a BestEffort pod; pinned to `node` when given.
fn app(namespace: &str, name: &str, scheduler: &str, cpu: &str, node: Option<&str>) -> Pod {
    let resources = if cpu.is_empty() {
        json!({})
    } else {
        json!({"requests": {"cpu": cpu, "memory": "64Mi"}})
    };
    let mut spec = json!({
        "schedulerName": scheduler,
        "containers": [{"name": "app", "image": "registry.example/app:1", "resources": resources}]
    });
    if let Some(n) = node {
        spec["nodeSelector"] = json!({"kubernetes.io/hostname": n});
    }
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec
    }))
    .expect("pod")
}

/// Waits until the pod is bound; returns its node.
async fn bound(client: &kube::Client, namespace: &str, name: &str) -> String {
    eventually(
        Duration::from_secs(30),
        &format!("{namespace}/{name} bound"),
        || async { node_of(&get_pod(client, namespace, name).await).map(str::to_string) },
    )
    .await
}

/// Panics unless `message` counts each of `reasons` (the shared control plane's other nodes
/// add reasons of their own: other tests' nodes are outside this test's profile).
fn assert_reasons(message: &str, reasons: &[&str]) {
    for r in reasons {
        assert!(
            message.contains(&format!(" {r},")) || message.contains(&format!(" {r}.")),
            "{r:?} not in {message:?}"
        );
    }
}

/// Waits until the pod's `PodScheduled` condition is False; returns its message.
async fn refused(client: &kube::Client, namespace: &str, name: &str) -> String {
    eventually(
        Duration::from_secs(30),
        &format!("{namespace}/{name} reported unschedulable"),
        || async {
            let p = get_pod(client, namespace, name).await;
            pod_scheduled(&p).filter(|c| c.0 == "False").map(|c| c.2)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placements_move_away_from_a_node_when_its_load_rises() {
    let plane = ControlPlane::shared();
    let metrics = shared_metrics();
    let client = plane.client().await;
    let (ns, profile_name) = ("lmove", "gantry-lmove");
    create_namespace(&client, ns).await;
    for n in ["lmove-a", "lmove-b"] {
        create_node(&client, &node(n, ns, "4", "8Gi")).await;
    }
    let config = scheduler_config(&[profile(
        profile_name,
        ns,
        "{name: LoadAware, weight: 10}",
        &[],
    )]);
    let mut gantry = Gantry::start_with_args(
        plane.dir(),
        ns,
        &config,
        &plane.kubeconfig(),
        &load_args(&metrics.url()),
    );
    gantry.wait_ready().await;
    metrics.set_load("lmove-a", 0.1, 0.2).await;
    metrics.set_load("lmove-b", 0.4, 0.2).await;
    create_pod(&client, &app(ns, "m1", profile_name, "100m", None)).await;
    assert_eq!(bound(&client, ns, "m1").await, "lmove-a", "the idle node");

    // lmove-a's load rises above the 65% cpu threshold: new pods go to lmove-b.
    metrics.set_load("lmove-a", 0.9, 0.2).await;
    for name in ["m2", "m3"] {
        create_pod(&client, &app(ns, name, profile_name, "100m", None)).await;
        assert_eq!(bound(&client, ns, name).await, "lmove-b", "{name}");
    }
    // Pinned to the loaded node: refused with LoadAware's reason.
    create_pod(
        &client,
        &app(ns, "m4", profile_name, "100m", Some("lmove-a")),
    )
    .await;
    assert_reasons(
        &refused(&client, ns, "m4").await,
        &[
            "1 node(s) cpu usage exceed threshold",
            "1 node(s) didn't match Pod's node affinity/selector",
        ],
    );
    // And admitted once the load falls again (a new sample wakes it).
    metrics.set_load("lmove-a", 0.2, 0.2).await;
    assert_eq!(bound(&client, ns, "m4").await, "lmove-a");
    assert_eq!(gantry.terminate().code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_metrics_are_filtered_or_scored_neutrally_as_configured() {
    let plane = ControlPlane::shared();
    let metrics = shared_metrics();
    let client = plane.client().await;
    let ns = "lstale";
    create_namespace(&client, ns).await;
    for n in ["lstale-fresh", "lstale-gone"] {
        create_node(&client, &node(n, ns, "4", "8Gi")).await;
    }
    let (strict, lenient) = ("gantry-stale-filter", "gantry-stale-neutral");
    let config = scheduler_config(&[
        profile(
            strict,
            ns,
            "{name: LoadAware, weight: 10}",
            &[("LoadAware", json!({"staleMetrics": "Filter"}))],
        ),
        profile(
            lenient,
            ns,
            "{name: LoadAware, weight: 10}",
            &[("LoadAware", json!({"staleMetrics": "Neutral"}))],
        ),
    ]);
    let mut gantry = Gantry::start_with_args(
        plane.dir(),
        ns,
        &config,
        &plane.kubeconfig(),
        &load_args(&metrics.url()),
    );
    gantry.wait_ready().await;
    metrics.set_load("lstale-fresh", 0.5, 0.2).await;
    metrics.set_load("lstale-gone", 0.05, 0.2).await;
    create_pod(&client, &app(ns, "s1", strict, "100m", None)).await;
    assert_eq!(
        bound(&client, ns, "s1").await,
        "lstale-gone",
        "the idle node"
    );

    // Its metrics disappear; once its last sample is older than --load-max-age it is stale.
    metrics.drop_node("lstale-gone").await;
    tokio::time::sleep(MAX_AGE + Duration::from_secs(2)).await;
    create_pod(&client, &app(ns, "s2", strict, "100m", None)).await;
    assert_eq!(
        bound(&client, ns, "s2").await,
        "lstale-fresh",
        "filtered, idle as it looked"
    );
    create_pod(&client, &app(ns, "s3", strict, "100m", Some("lstale-gone"))).await;
    assert_reasons(
        &refused(&client, ns, "s3").await,
        &[
            "1 node(s) didn't match Pod's node affinity/selector",
            "1 node(s) had no fresh load metrics",
        ],
    );
    // Under the Neutral policy the stale node still takes pods.
    create_pod(
        &client,
        &app(ns, "s4", lenient, "100m", Some("lstale-gone")),
    )
    .await;
    assert_eq!(bound(&client, ns, "s4").await, "lstale-gone");
    // Fresh metrics again: the strict profile's pod is admitted.
    metrics.set_load("lstale-gone", 0.05, 0.2).await;
    assert_eq!(bound(&client, ns, "s3").await, "lstale-gone");
    assert_eq!(gantry.terminate().code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_stopped_mid_run_does_not_stop_scheduling() {
    let plane = ControlPlane::shared();
    // Its own Prometheus: this test stops it.
    let metrics = Metrics::start();
    let client = plane.client().await;
    let (ns, profile_name) = ("ldown", "gantry-ldown");
    create_namespace(&client, ns).await;
    for n in ["ldown-a", "ldown-b"] {
        create_node(&client, &node(n, ns, "4", "8Gi")).await;
    }
    let config = scheduler_config(&[profile(
        profile_name,
        ns,
        "{name: LoadAware, weight: 10}",
        &[],
    )]);
    let mut gantry = Gantry::start_with_args(
        plane.dir(),
        ns,
        &config,
        &plane.kubeconfig(),
        &load_args(&metrics.url()),
    );
    gantry.wait_ready().await;
    metrics.set_load("ldown-a", 0.2, 0.2).await;
    metrics.set_load("ldown-b", 0.3, 0.2).await;
    create_pod(&client, &app(ns, "d1", profile_name, "100m", None)).await;
    assert_eq!(bound(&client, ns, "d1").await, "ldown-a");

    metrics.prometheus.lock().unwrap().kill();
    // Right away (samples still fresh) and after they have gone stale.
    for name in ["d2", "d3"] {
        create_pod(&client, &app(ns, name, profile_name, "100m", None)).await;
        bound(&client, ns, name).await;
    }
    tokio::time::sleep(MAX_AGE + Duration::from_secs(2)).await;
    for name in ["d4", "d5", "d6"] {
        create_pod(&client, &app(ns, name, profile_name, "100m", None)).await;
    }
    for name in ["d4", "d5", "d6"] {
        bound(&client, ns, name).await;
    }
    assert!(gantry.is_running());
    assert!(
        gantry.log_text().contains("cannot read node load"),
        "the failing source is logged:\n{}",
        gantry.log_text()
    );
    assert_eq!(gantry.terminate().code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overcommit_admits_best_effort_pods_on_idle_opted_in_nodes_only() {
    let plane = ControlPlane::shared();
    let metrics = shared_metrics();
    let client = plane.client().await;
    let (ns, profile_name) = ("locm", "gantry-locm");
    create_namespace(&client, ns).await;
    create_node(
        &client,
        &labelled_node("locm-1", ns, "1", "2Gi", &[("overcommit", "true")]),
    )
    .await;
    let config = scheduler_config(&[profile(
        profile_name,
        ns,
        "{name: Overcommit}",
        &[("Overcommit", json!({"cpuRatio": 1.5, "loadThreshold": 0.7}))],
    )]);
    let mut gantry = Gantry::start_with_args(
        plane.dir(),
        ns,
        &config,
        &plane.kubeconfig(),
        &load_args(&metrics.url()),
    );
    gantry.wait_ready().await;
    // An online service requests the whole cpu of the node.
    create_pod(&client, &app(ns, "online", profile_name, "1", None)).await;
    assert_eq!(bound(&client, ns, "online").await, "locm-1");
    metrics.set_load("locm-1", 0.2, 0.2).await;

    // Idle: a BestEffort pod is admitted beyond the node's requests, and the margin is
    // written on it and in an event.
    create_pod(&client, &app(ns, "batch-1", profile_name, "", None)).await;
    assert_eq!(bound(&client, ns, "batch-1").await, "locm-1");
    let p = get_pod(&client, ns, "batch-1").await;
    let note = p
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("gantry.io/overcommit"))
        .cloned()
        .expect("gantry.io/overcommit annotation");
    assert!(
        note.starts_with(
            "cpu: 1100m committed of 1000m allocatable (+100m, ratio 1.5, measured load 2"
        ),
        "{note}"
    );
    let evs = eventually(
        Duration::from_secs(10),
        "an Overcommitted event",
        || async {
            let evs = events(&client, ns).await;
            (!events_about(&evs, "batch-1", "Overcommitted").is_empty()).then_some(evs)
        },
    )
    .await;
    let e = events_about(&evs, "batch-1", "Overcommitted")[0];
    assert_eq!(e.type_.as_deref(), Some("Normal"));
    assert_eq!(
        e.note.as_deref(),
        Some(format!("Placed on locm-1 beyond its allocatable: {note}").as_str())
    );

    // Loaded: the same kind of pod is refused.
    metrics.set_load("locm-1", 0.9, 0.2).await;
    create_pod(&client, &app(ns, "batch-2", profile_name, "", None)).await;
    assert_reasons(
        &refused(&client, ns, "batch-2").await,
        &["1 node(s) too loaded to overcommit cpu"],
    );
    // A Burstable pod beyond allocatable is refused too.
    create_pod(&client, &app(ns, "burst", profile_name, "200m", None)).await;
    assert_reasons(
        &refused(&client, ns, "burst").await,
        &["1 node(s) too loaded to overcommit cpu"],
    );
    // The load falls: both are admitted (a new sample wakes them).
    metrics.set_load("locm-1", 0.1, 0.2).await;
    assert_eq!(bound(&client, ns, "batch-2").await, "locm-1");
    assert_eq!(bound(&client, ns, "burst").await, "locm-1");
    // A Guaranteed pod never uses the margin, idle node or not: NodeResourcesFit's rule.
    let mut guaranteed = app(ns, "guaranteed", profile_name, "100m", None);
    if let Some(r) = guaranteed
        .spec
        .as_mut()
        .and_then(|s| s.containers[0].resources.as_mut())
    {
        r.limits = r.requests.clone();
    }
    create_pod(&client, &guaranteed).await;
    assert_reasons(
        &refused(&client, ns, "guaranteed").await,
        &["1 Insufficient cpu"],
    );
    assert_eq!(gantry.terminate().code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zone_rule_is_honoured() {
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let (ns, profile_name) = ("lzone", "gantry-lzone");
    create_namespace(&client, ns).await;
    for (n, zone) in [("lzone-a", "z-a"), ("lzone-b", "z-b")] {
        create_node(
            &client,
            &labelled_node(
                n,
                ns,
                "4",
                "8Gi",
                &[
                    ("topology.kubernetes.io/region", "r1"),
                    ("topology.kubernetes.io/zone", zone),
                ],
            ),
        )
        .await;
    }
    let config = scheduler_config(&[profile(
        profile_name,
        ns,
        "{name: ZonePolicy}",
        &[(
            "ZonePolicy",
            json!({"rules": [{"name": "residency", "namespaces": [ns], "required": {"zones": ["z-b"]}}]}),
        )],
    )]);
    let mut gantry = Gantry::start(plane.dir(), ns, &config, &plane.kubeconfig());
    gantry.wait_ready().await;
    for i in 0..4 {
        let name = format!("z{i}");
        create_pod(&client, &app(ns, &name, profile_name, "100m", None)).await;
    }
    for i in 0..4 {
        assert_eq!(bound(&client, ns, &format!("z{i}")).await, "lzone-b");
    }
    create_pod(
        &client,
        &app(ns, "pinned", profile_name, "100m", Some("lzone-a")),
    )
    .await;
    assert_reasons(
        &refused(&client, ns, "pinned").await,
        &[
            "1 node(s) didn't match Pod's node affinity/selector",
            "1 node(s) didn't match the zone policy",
        ],
    );
    assert_eq!(gantry.terminate().code(), Some(0));
}
