//! gantry never over-commits a node when the API server goes away in the middle of a burst of
//! bindings. 200 nodes take 8 pods each (in pods, cpu and memory alike), 1,600 pods wait, and
//! once some 300 are bound the API server is killed (SIGKILL) and restarted 3 s later, or the
//! network to it is cut for 3 s after the requests in flight have reached it (so that
//! bindings the server committed get no answer). Afterwards every pod is bound, no node holds
//! more than it allows, and every pod has exactly one `Scheduled` event: gantry bound each
//! pod once, and the events it could not write during the outage were written after it.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use support::*;

const NODES: usize = 200;
const PODS_PER_NODE: usize = 8;
/// Bound pods at which the outage starts.
const BOUND_AT_OUTAGE: f64 = 300.0;
/// How long the API server is away.
const OUTAGE: Duration = Duration::from_secs(3);
/// Objects created at once while setting up.
const CREATES_AT_ONCE: usize = 16;

/// A ready node of 8 pods, 4 cpus and 4 GiB, labelled for this test's profile.
fn small_node(name: &str, label: &str) -> Node {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"gantry-test": label, "kubernetes.io/hostname": name}},
        "status": {
            "capacity": {"cpu": "4", "memory": "4Gi", "pods": "8"},
            "allocatable": {"cpu": "4", "memory": "4Gi", "pods": "8"},
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    }))
    .expect("node")
}

/// Creates the nodes and the pending pods (a node's worth of pods fills it exactly).
async fn populate(client: &kube::Client, ns: &str, profile: &str) {
    create_namespace(client, ns).await;
    let nodes: Vec<Node> = (0..NODES)
        .map(|i| small_node(&format!("{ns}-{i:03}"), ns))
        .collect();
    futures::stream::iter(nodes.iter().map(|n| create_node(client, n)))
        .buffer_unordered(CREATES_AT_ONCE)
        .collect::<Vec<()>>()
        .await;
    let pods: Vec<Pod> = (0..NODES * PODS_PER_NODE)
        .map(|i| pod(ns, &format!("p{i:04}"), profile, "500m", "512Mi"))
        .collect();
    futures::stream::iter(pods.iter().map(|p| create_pod(client, p)))
        .buffer_unordered(CREATES_AT_ONCE)
        .collect::<Vec<()>>()
        .await;
}

/// Memory of a pod's requests in MiB, as these tests write it (`512Mi`).
fn pod_mebibytes(pod: &Pod) -> i64 {
    let Some(spec) = &pod.spec else { return 0 };
    spec.containers
        .iter()
        .filter_map(|c| c.resources.as_ref()?.requests.as_ref()?.get("memory"))
        .map(|q| {
            q.0.strip_suffix("Mi")
                .expect("MiB")
                .parse::<i64>()
                .expect("MiB")
        })
        .sum()
}

/// Panics unless every pod is bound with no node beyond 8 pods, 4 cpus or 4 GiB, and every
/// pod has exactly one `Scheduled` event.
async fn assert_bound_once_within_capacity(client: &kube::Client, ns: &str) {
    let total = NODES * PODS_PER_NODE;
    let all = eventually(Duration::from_secs(180), "every pod bound", || async {
        let ps = pods(client, ns).await;
        (ps.len() == total && ps.iter().all(|p| node_of(p).is_some())).then_some(ps)
    })
    .await;
    let mut used: BTreeMap<&str, (usize, i64, i64)> = BTreeMap::new();
    for p in &all {
        let node = node_of(p).expect("bound");
        let u = used.entry(node).or_default();
        *u = (u.0 + 1, u.1 + pod_milli_cpu(p), u.2 + pod_mebibytes(p));
    }
    let over: Vec<String> = used
        .iter()
        .filter(|(_, (n, cpu, mem))| *n > PODS_PER_NODE || *cpu > 4000 || *mem > 4096)
        .map(|(node, (n, cpu, mem))| format!("{node}: {n} pods, {cpu}m cpu, {mem}Mi"))
        .collect();
    assert!(over.is_empty(), "nodes over capacity:\n{}", over.join("\n"));
    let scheduled = eventually(
        Duration::from_secs(120),
        "a Scheduled event for every pod",
        || async {
            let mut per_pod: BTreeMap<String, usize> = BTreeMap::new();
            for e in events(client, ns).await {
                if e.reason.as_deref() == Some("Scheduled")
                    && let Some(name) = e.regarding.and_then(|r| r.name)
                {
                    *per_pod.entry(name).or_default() += 1;
                }
            }
            (per_pod.len() == total).then_some(per_pod)
        },
    )
    .await;
    let twice: Vec<_> = scheduled.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "pods with more than one Scheduled event: {twice:?}"
    );
}

/// Starts gantry on the test's nodes through `kubeconfig`, waits until it has bound some
/// [`BOUND_AT_OUTAGE`] pods, runs `outage`, and checks the outcome.
async fn survives(plane: &ControlPlane, kubeconfig: &Path, ns: &str, outage: impl FnOnce()) {
    let client = plane.client().await;
    let profile = format!("gantry-{ns}");
    populate(&client, ns, &profile).await;
    let mut gantry = Gantry::start(plane.dir(), ns, &config(&profile, ns, None, ""), kubeconfig);
    gantry.wait_ready().await;
    let bound =
        format!("scheduler_schedule_attempts_total{{result=\"scheduled\",profile=\"{profile}\"}}");
    eventually(Duration::from_secs(120), "the first bindings", || async {
        (gantry.metric(&bound) >= BOUND_AT_OUTAGE).then_some(())
    })
    .await;
    outage();
    let client = plane.client().await;
    assert_bound_once_within_capacity(&client, ns).await;
    assert!(
        gantry.metric("gantry_bindings_unconfirmed_total") > 0.0,
        "the outage came too late: no binding lost its answer"
    );
    assert!(gantry.is_running(), "gantry exited:\n{}", gantry.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_node_is_over_committed_when_the_api_server_is_killed_mid_burst() {
    let plane = ControlPlane::start();
    survives(&plane, &plane.kubeconfig(), "killed", || {
        plane.restart_apiserver(OUTAGE)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_node_is_over_committed_when_the_network_is_cut_mid_burst() {
    let plane = ControlPlane::start();
    let proxy = CutProxy::start(plane.api_addr());
    let kubeconfig = proxy.kubeconfig(&plane.kubeconfig(), plane.dir());
    survives(&plane, &kubeconfig, "cut", || {
        proxy.cut(Duration::from_millis(500));
        std::thread::sleep(OUTAGE);
        proxy.restore();
    })
    .await;
}
