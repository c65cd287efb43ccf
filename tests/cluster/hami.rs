//! GPU sharing with HAMi's node side, against a real kube-apiserver. HAMi's device plugin
//! needs a GPU, so a small agent written here plays its part of HAMi's protocol for each
//! node (HAMi's `docs/develop/protocol.md` and its device plugin's code): it registers the
//! node's devices in `hami.io/node-nvidia-register`, and whenever the node's
//! `hami.io/mutex.lock` names a bound pod whose `hami.io/bind-phase` is `allocating`, it
//! reads `hami.io/vgpu-devices-to-allocate`, allocates those devices (or fails, for pods it
//! is told to fail), writes the bind phase and gives the lock back. gantry places HAMi
//! requests (`nvidia.com/gpumem`, `nvidia.com/gpucores`) and must leave every share on the
//! device it wrote, never more memory or compute on a device than it has, one pod at a time
//! per node under the lock; the devices of an allocation that failed are given to others.

use crate::support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use support::*;

const REGISTER: &str = "hami.io/node-nvidia-register";
const LOCK: &str = "hami.io/mutex.lock";
const TO_ALLOCATE: &str = "hami.io/vgpu-devices-to-allocate";
const ALLOCATED: &str = "hami.io/vgpu-devices-allocated";
const BIND_PHASE: &str = "hami.io/bind-phase";
/// Each test device: 16 GiB, compute 100, ten shares.
const DEVICE_MIB: u64 = 16384;
const DEVICES_PER_NODE: usize = 2;
/// A lock value no HAMi component writes, planted by a test: agents leave it alone.
const GARBAGE_LOCK: &str = "garbage";
/// Of the pods with this label, an agent fails the first allocation, and then plays its
/// kubelet's part: the pod fails admission (`UnexpectedAdmissionError`).
const FAIL_FIRST_LABEL: &str = "fail-first";

/// A GPU profile restricted to the test's nodes.
fn hami_config(profile: &str, label: &str) -> String {
    config_with_plugins(profile, label, &["GpuShare"], &[])
}

/// gantry with [`hami_config`] for the nodes labelled `ns`, ready.
async fn hami_gantry(plane: &ControlPlane, ns: &str, profile: &str) -> Gantry {
    Gantry::start_ready(
        plane.dir(),
        ns,
        &hami_config(profile, ns),
        &plane.kubeconfig(),
    )
    .await
}

fn uuid(node: &str, i: usize) -> String {
    format!("GPU-{node}-{i}")
}

/// A node offering `nvidia.com/gpu` as HAMi's device plugin does: devices times shares.
fn hami_node(name: &str, label: &str) -> Node {
    with_gpus(
        node(name, label, "32", "128Gi"),
        DEVICES_PER_NODE as u64 * 10,
    )
}

/// A pod asking one GPU with `mib` of its memory and `cores` percent of its compute.
fn hami_pod(ns: &str, name: &str, profile: &str, mib: u64, cores: u32) -> Pod {
    let mut p = pod(ns, name, profile, "500m", "256Mi");
    if let Some(r) = p
        .spec
        .as_mut()
        .and_then(|s| s.containers.first_mut())
        .and_then(|c| c.resources.as_mut())
    {
        let limits = r.limits.get_or_insert_with(BTreeMap::new);
        limits.insert("nvidia.com/gpu".into(), Quantity("1".into()));
        limits.insert("nvidia.com/gpumem".into(), Quantity(mib.to_string()));
        limits.insert("nvidia.com/gpucores".into(), Quantity(cores.to_string()));
        let requests = r.requests.get_or_insert_with(BTreeMap::new);
        requests.insert("nvidia.com/gpu".into(), Quantity("1".into()));
    }
    p
}

/// One device a container got, as the agent read it from the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Allocation {
    pod: String,
    node: String,
    uuid: String,
    mib: u64,
    cores: u32,
}

/// `UUID,type,memory,cores:` devices, `;` after each container (HAMi's protocol).
fn decode(text: &str) -> Vec<(String, u64, u32)> {
    text.split(';')
        .flat_map(|c| c.split(':'))
        .filter(|d| d.contains(','))
        .map(|d| {
            let f: Vec<&str> = d.split(',').collect();
            assert_eq!(f.len(), 4, "a device is UUID,type,memory,cores: {d:?}");
            assert_eq!(f[1], "NVIDIA", "{d:?}");
            (
                f[0].to_string(),
                f[2].parse().expect("memory"),
                f[3].parse().expect("cores"),
            )
        })
        .collect()
}

/// The agent of `node`: registers its devices, then serves allocations until aborted.
async fn agent(client: Client, node: String, allocations: Arc<Mutex<Vec<Allocation>>>) {
    let nodes: Api<Node> = Api::all(client.clone());
    let devices: Vec<serde_json::Value> = (0..DEVICES_PER_NODE)
        .map(|i| {
            json!({"id": uuid(&node, i), "index": i, "count": 10, "devmem": DEVICE_MIB,
                   "devcore": 100, "type": "NVIDIA-Tesla T4", "numa": 0, "mode": "hami-core",
                   "health": true})
        })
        .collect();
    let register = json!({"metadata": {"annotations": {
        REGISTER: serde_json::to_string(&devices).expect("devices"),
    }}});
    nodes
        .patch(&node, &PatchParams::default(), &Patch::Merge(&register))
        .await
        .expect("register the devices");
    let mut failed_first = false;
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let Ok(current) = nodes.get(&node).await else {
            continue;
        };
        let Some(lock) = current.annotations().get(LOCK).cloned() else {
            continue;
        };
        if lock == GARBAGE_LOCK {
            continue;
        }
        let parts: Vec<&str> = lock.split(',').collect();
        assert_eq!(
            parts.len(),
            3,
            "HAMi's lock is <time>,<namespace>,<name>: {lock:?}"
        );
        let pods: Api<Pod> = Api::namespaced(client.clone(), parts[1]);
        let Ok(Some(pod)) = pods.get_opt(parts[2]).await else {
            continue;
        };
        // The kubelet asks the device plugin once the pod is bound here.
        if node_of(&pod) != Some(node.as_str()) {
            continue;
        }
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        if annotations.get(BIND_PHASE).map(String::as_str) != Some("allocating") {
            continue;
        }
        let name = pod.name_any();
        let to_allocate = annotations.get(TO_ALLOCATE).cloned().unwrap_or_default();
        // Pods named fail-* fail; of the pods labelled fail-first, the first one does.
        let fail_first = pod.labels().contains_key(FAIL_FIRST_LABEL) && !failed_first;
        failed_first |= fail_first;
        let mut ok = !name.starts_with("fail-") && !fail_first;
        for (uuid, mib, cores) in decode(&to_allocate) {
            ok &= uuid.starts_with(&format!("GPU-{node}-"));
            allocations.lock().expect("allocations").push(Allocation {
                pod: name.clone(),
                node: node.clone(),
                uuid,
                mib,
                cores,
            });
        }
        let phase = if ok { "success" } else { "failed" };
        let done = json!({"metadata": {"annotations": {BIND_PHASE: phase, TO_ALLOCATE: ""}}});
        pods.patch(&name, &PatchParams::default(), &Patch::Merge(&done))
            .await
            .expect("report the allocation");
        if fail_first {
            // The kubelet's part: the device plugin's Allocate failed, so admission fails the
            // pod, as the kubelet reports it.
            let failed = json!({"status": {"phase": "Failed", "reason": "UnexpectedAdmissionError",
                "message": "Allocate failed due to the device plugin's error"}});
            pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&failed))
                .await
                .expect("fail the pod as its kubelet would");
        }
        let release = json!({"metadata": {"annotations": {LOCK: null}}});
        nodes
            .patch(&node, &PatchParams::default(), &Patch::Merge(&release))
            .await
            .expect("release the lock");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hamis_device_plugin_allocates_exactly_what_gantry_chose() {
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let (ns, profile) = ("hami", "gantry-hami");
    create_namespace(&client, ns).await;
    let node_names = ["hami-1", "hami-2"];
    let allocations = Arc::new(Mutex::new(Vec::new()));
    let mut agents = Vec::new();
    for name in node_names {
        create_node(&client, &hami_node(name, ns)).await;
        agents.push(tokio::spawn(agent(
            client.clone(),
            name.to_string(),
            allocations.clone(),
        )));
    }
    eventually(Duration::from_secs(10), "devices registered", || async {
        let nodes: Api<Node> = Api::all(client.clone());
        let mut all = true;
        for name in node_names {
            all &= nodes
                .get(name)
                .await
                .is_ok_and(|n| n.annotations().contains_key(REGISTER));
        }
        all.then_some(())
    })
    .await;
    let mut gantry = hami_gantry(&plane, ns, profile).await;

    // A pod whose allocation the device plugin fails holds no device afterwards (its
    // kubelet rejects it): the eight shares below fit only if its 6000 MiB were given back.
    create_pod(&client, &hami_pod(ns, "fail-0", profile, 6000, 30)).await;
    eventually(Duration::from_secs(30), "the failed allocation", || async {
        let p = get_pod(&client, ns, "fail-0").await;
        p.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(BIND_PHASE))
            .is_some_and(|b| b == "failed")
            .then_some(())
    })
    .await;

    // 6000 MiB each: two per 16 GiB device, eight in all; the other four wait.
    for i in 0..12 {
        create_pod(
            &client,
            &hami_pod(ns, &format!("share-{i}"), profile, 6000, 30),
        )
        .await;
    }
    let bound = eventually(
        Duration::from_secs(60),
        "eight shares allocated",
        || async {
            let ps = pods(&client, ns).await;
            let done: Vec<Pod> = ps.into_iter().filter(allocated).collect();
            (done.len() == 8).then_some(done)
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let all: Vec<Pod> = pods(&client, ns)
        .await
        .into_iter()
        .filter(|p| p.name_any() != "fail-0")
        .collect();
    assert_eq!(
        all.iter().filter(|p| node_of(p).is_some()).count(),
        8,
        "only what fits is bound: {}",
        gantry.log_text()
    );
    let pending = all
        .iter()
        .find(|p| node_of(p).is_none())
        .expect("a waiting pod");
    let (status, reason, message) = pod_scheduled(pending).expect("a condition");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "Unschedulable")
    );
    assert!(
        message.contains(
            "node(s) didn't have enough GPUs with the requested memory, compute and share free"
        ),
        "{message}"
    );

    // What the agents allocated is exactly what gantry wrote, pod by pod.
    let allocated = allocations.lock().expect("allocations").clone();
    for p in &bound {
        let name = p.name_any();
        let written = decode(
            p.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ALLOCATED))
                .expect("the allocation gantry wrote"),
        );
        let got: Vec<(String, u64, u32)> = allocated
            .iter()
            .filter(|a| a.pod == name)
            .map(|a| (a.uuid.clone(), a.mib, a.cores))
            .collect();
        assert_eq!(got, written, "{name}");
        assert_eq!(written.len(), 1);
        assert_eq!((written[0].1, written[0].2), (6000, 30));
        let node = node_of(p).expect("bound");
        assert!(
            written[0].0.starts_with(&format!("GPU-{node}-")),
            "{written:?} on {node}"
        );
    }
    // Never more memory or compute on a device than it has (the failed allocation aside).
    let mut per_device: BTreeMap<String, (u64, u32)> = BTreeMap::new();
    for a in allocated.iter().filter(|a| a.pod != "fail-0") {
        let e = per_device.entry(a.uuid.clone()).or_default();
        e.0 += a.mib;
        e.1 += a.cores;
        assert!(
            e.0 <= DEVICE_MIB && e.1 <= 100,
            "{} over-allocated: {e:?}",
            a.uuid
        );
        assert!(node_names.contains(&a.node.as_str()));
    }
    assert_eq!(per_device.len(), node_names.len() * DEVICES_PER_NODE);
    // Every lock was given back.
    let nodes: Api<Node> = Api::all(client.clone());
    for name in node_names {
        let n = nodes.get(name).await.expect("node");
        assert!(!n.annotations().contains_key(LOCK), "{name} still locked");
    }
    for a in agents {
        a.abort();
    }
    assert_eq!(gantry.terminate().code(), Some(0));
}

/// The device plugin allocated `p`'s devices (its bind phase is `success`).
fn allocated(p: &Pod) -> bool {
    p.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(BIND_PHASE))
        .is_some_and(|b| b == "success")
}

/// `p`, kept to the node `node`.
fn pinned(mut p: Pod, node: &str) -> Pod {
    if let Some(spec) = p.spec.as_mut() {
        spec.node_selector = Some(BTreeMap::from([(
            "kubernetes.io/hostname".to_string(),
            node.to_string(),
        )]));
    }
    p
}

/// Writes `value` as the lock of `node`, as the field manager `manager`.
async fn plant_lock(client: &Client, node: &str, value: &str, manager: &str) {
    let patch = json!({"metadata": {"annotations": {LOCK: value}}});
    Api::<Node>::all(client.clone())
        .patch(
            node,
            &PatchParams {
                field_manager: Some(manager.to_string()),
                ..Default::default()
            },
            &Patch::Merge(&patch),
        )
        .await
        .expect("plant the lock");
}

/// One node whose lock another pod holds for good, and one whose lock cannot be read:
/// neither holds back the events of pods bound elsewhere, the shares go to healthy nodes,
/// the unreadable lock written long ago is taken over, and the pod kept to the stuck node
/// says why it waits, until the lock's holder is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_lock_cannot_be_had_slows_no_other() {
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let (ns, profile) = ("hami-lock", "gantry-hami-lock");
    create_namespace(&client, ns).await;
    let (stuck, healthy, garbage) = ("lock-stuck", "lock-healthy", "lock-garbage");
    let allocations = Arc::new(Mutex::new(Vec::new()));
    let mut agents = Vec::new();
    for name in [stuck, healthy, garbage] {
        create_node(&client, &hami_node(name, ns)).await;
        agents.push(tokio::spawn(agent(
            client.clone(),
            name.to_string(),
            allocations.clone(),
        )));
    }
    eventually(Duration::from_secs(10), "devices registered", || async {
        let nodes: Api<Node> = Api::all(client.clone());
        let mut all = true;
        for name in [stuck, healthy, garbage] {
            all &= nodes
                .get(name)
                .await
                .is_ok_and(|n| n.annotations().contains_key(REGISTER));
        }
        all.then_some(())
    })
    .await;
    // The stuck node's lock names a live pod that no one will ever bind.
    create_pod(&client, &pod(ns, "holder", "no-scheduler", "100m", "64Mi")).await;
    let now =
        k8s_openapi::jiff::Timestamp::from_second(k8s_openapi::jiff::Timestamp::now().as_second())
            .expect("now");
    plant_lock(
        &client,
        stuck,
        &format!("{now},{ns},holder"),
        "stuck-writer",
    )
    .await;
    plant_lock(&client, garbage, GARBAGE_LOCK, "garbage-writer").await;
    let mut gantry = hami_gantry(&plane, ns, profile).await;

    // A share kept to each locked node waits for its lock; the nodes are avoided meanwhile.
    for (name, node) in [("kept", stuck), ("on-garbage", garbage)] {
        create_pod(
            &client,
            &pinned(hami_pod(ns, name, profile, 1000, 10), node),
        )
        .await;
    }
    eventually(Duration::from_secs(10), "both locks found held", || async {
        let log = gantry.log_text();
        let held: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("HAMi's node lock is held for another pod"))
            .collect();
        [stuck, garbage]
            .iter()
            .all(|n| held.iter().any(|l| l.contains(&format!("node={n}"))))
            .then_some(())
    })
    .await;
    // Pods bound meanwhile have their events at once.
    for i in 0..8 {
        create_pod(
            &client,
            &pod(ns, &format!("plain-{i}"), profile, "100m", "64Mi"),
        )
        .await;
    }
    eventually(
        Duration::from_secs(10),
        "the plain pods' events",
        || async {
            let all = events(&client, ns).await;
            (0..8)
                .all(|i| !events_about(&all, &format!("plain-{i}"), "Scheduled").is_empty())
                .then_some(())
        },
    )
    .await;
    assert!(
        node_of(&get_pod(&client, ns, "kept").await).is_none(),
        "still waiting for the lock"
    );

    // Shares go to the healthy node.
    for i in 0..16 {
        create_pod(
            &client,
            &hami_pod(ns, &format!("share-{i}"), profile, 1000, 10),
        )
        .await;
    }
    let shares = eventually(Duration::from_secs(20), "every share allocated", || async {
        let done: Vec<Pod> = pods(&client, ns)
            .await
            .into_iter()
            .filter(|p| p.name_any().starts_with("share-"))
            .filter(allocated)
            .collect();
        (done.len() == 16).then_some(done)
    })
    .await;
    for p in &shares {
        assert_eq!(node_of(p), Some(healthy), "{}", p.name_any());
    }

    // The kept shares, refused by the locks, wait and say why.
    for name in ["kept", "on-garbage"] {
        let message = wait_unschedulable(&client, ns, name, Duration::from_secs(45)).await;
        assert!(
            message.contains("node(s) had HAMi's node lock held for another pod's allocation"),
            "{name}: {message}"
        );
    }
    // Once the lock's holder is gone, the lock is taken over and the share bound.
    delete_pod(&client, ns, "holder").await;
    wait_bound(&client, ns, "kept", Duration::from_secs(60)).await;
    for a in agents {
        a.abort();
    }
    assert_eq!(gantry.terminate().code(), Some(0));
}

/// The devices the pod `ns/name` holds by its `hami.io/vgpu-devices-allocated`.
async fn devices_of(client: &Client, ns: &str, name: &str) -> Vec<(String, u64, u32)> {
    let p = get_pod(client, ns, name).await;
    decode(
        p.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ALLOCATED))
            .map_or("", String::as_str),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_reads_the_devices_back_from_hamis_allocations() {
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let (ns, profile) = ("hami-restart", "gantry-hami-restart");
    let node_name = "hami-r1";
    create_namespace(&client, ns).await;
    create_node(&client, &hami_node(node_name, ns)).await;
    let allocations = Arc::new(Mutex::new(Vec::new()));
    let agent = tokio::spawn(agent(client.clone(), node_name.to_string(), allocations));
    // A pod HAMi's own scheduler placed before gantry took over: 12000 MiB of device 0.
    let mut before = hami_pod(ns, "from-hami", "hami-scheduler", 12000, 50);
    before.metadata.annotations = Some(BTreeMap::from([
        (
            ALLOCATED.to_string(),
            format!("{},NVIDIA,12000,50:;", uuid(node_name, 0)),
        ),
        (BIND_PHASE.to_string(), "success".to_string()),
        ("hami.io/vgpu-node".to_string(), node_name.to_string()),
    ]));
    create_pod(&client, &before).await;
    bind(&client, ns, "from-hami", node_name)
        .await
        .expect("bound by hand, as HAMi's scheduler would");

    let config = hami_config(profile, ns);
    let mut gantry = Gantry::start_ready(plane.dir(), ns, &config, &plane.kubeconfig()).await;
    create_pod(&client, &hami_pod(ns, "big", profile, 12000, 10)).await;
    wait_bound(&client, ns, "big", Duration::from_secs(30)).await;
    assert_eq!(
        devices_of(&client, ns, "big").await,
        vec![(uuid(node_name, 1), 12000, 10)],
        "device 0 has 4384 MiB left"
    );
    assert_eq!(gantry.terminate().code(), Some(0));

    // A new gantry reads both allocations back: no device has 12000 MiB left, both 4384.
    let mut gantry = Gantry::start_ready(plane.dir(), ns, &config, &plane.kubeconfig()).await;
    create_pod(&client, &hami_pod(ns, "big-2", profile, 12000, 10)).await;
    let message = wait_unschedulable(&client, ns, "big-2", Duration::from_secs(30)).await;
    assert!(
        message.contains("memory, compute and share free"),
        "{message}"
    );
    create_pod(&client, &hami_pod(ns, "small", profile, 4000, 10)).await;
    wait_bound(&client, ns, "small", Duration::from_secs(30)).await;
    agent.abort();
    assert_eq!(gantry.terminate().code(), Some(0));
}

/// A failed allocation, end to end with Kubernetes' own ReplicaSet controller: the device
/// plugin fails the first pod's allocation and its kubelet rejects it; gantry gives its devices
/// back, the controller makes a replacement, and gantry places that one, whose allocation
/// succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_allocation_is_placed_again_through_its_controller() {
    let plane = ControlPlane::start();
    let _controller = KubeControllerManager::start(&plane, &["--controllers=replicaset"])
        .unwrap_or_else(|e| panic!("{e}"));
    let client = plane.client().await;
    let (ns, profile) = ("hami-rs", "gantry-hami-rs");
    let node_name = "hami-rs-1";
    create_namespace(&client, ns).await;
    create_node(&client, &hami_node(node_name, ns)).await;
    let allocations = Arc::new(Mutex::new(Vec::new()));
    let agent = tokio::spawn(agent(
        client.clone(),
        node_name.to_string(),
        allocations.clone(),
    ));
    let mut gantry = hami_gantry(&plane, ns, profile).await;
    // Twelve of sixteen GiB on both GPUs: the node holds one such pod, so the replacement
    // fits only once the failed pod's devices are given back.
    let mut template = hami_pod(ns, "unused", profile, 12000, 40);
    if let Some(r) = template
        .spec
        .as_mut()
        .and_then(|s| s.containers.first_mut())
        .and_then(|c| c.resources.as_mut())
    {
        for list in [r.limits.as_mut(), r.requests.as_mut()]
            .into_iter()
            .flatten()
        {
            list.insert("nvidia.com/gpu".into(), Quantity("2".into()));
        }
    }
    let replica_set: k8s_openapi::api::apps::v1::ReplicaSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "infer", "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "infer"}},
            "template": {
                "metadata": {"labels": {"app": "infer", FAIL_FIRST_LABEL: "true"}},
                "spec": template.spec,
            }
        }
    }))
    .expect("a ReplicaSet");
    Api::<k8s_openapi::api::apps::v1::ReplicaSet>::namespaced(client.clone(), ns)
        .create(&kube::api::PostParams::default(), &replica_set)
        .await
        .expect("create the ReplicaSet");
    let replacement = eventually(
        Duration::from_secs(60),
        "a replacement allocated",
        || async {
            pods(&client, ns).await.into_iter().find(|p| {
                p.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(BIND_PHASE))
                    .is_some_and(|b| b == "success")
            })
        },
    )
    .await;
    let all = pods(&client, ns).await;
    let failed: Vec<&Pod> = all
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed"))
        .collect();
    assert_eq!(
        failed.len(),
        1,
        "the first pod failed admission: {}",
        gantry.log_text()
    );
    assert_ne!(failed[0].name_any(), replacement.name_any());
    // Both went through the device plugin, on both devices; the replacement holds 12000 MiB
    // of each.
    let allocated = allocations.lock().expect("allocations").clone();
    assert_eq!(allocated.len(), 4, "{allocated:?}");
    assert_eq!(
        decode(
            replacement
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ALLOCATED))
                .expect("allocated")
        )
        .iter()
        .map(|d| (d.1, d.2))
        .collect::<Vec<_>>(),
        vec![(12000, 40), (12000, 40)]
    );
    agent.abort();
    assert_eq!(gantry.terminate().code(), Some(0));
}
