//! GPU sharing under `gantry run`, against a real kube-apiserver: GPU nodes (count from
//! allocatable `nvidia.com/gpu`, model and memory from labels) and pods asking for whole GPUs,
//! a share of one by milli or by memory, or a share restricted to a model. Every pod is bound
//! with its `gantry.io/gpu-assignment` annotation and no device is ever shared beyond 1000
//! milli; a pod with a malformed GPU annotation gets an event saying what is wrong and stays
//! pending; a restarted gantry rebuilds the devices' state from the running pods, so a new pod
//! never lands on a GPU that is already full.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use support::*;

const ASSIGNMENT: &str = "gantry.io/gpu-assignment";

/// A configuration with one profile `profile`, GpuShare enabled with its default policy,
/// restricted to the nodes labelled `gantry-test=<label>`.
fn gpu_config(profile: &str, label: &str) -> String {
    format!(
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 2
leaderElection:
  leaderElect: false
profiles:
- schedulerName: {profile}
  plugins:
    multiPoint:
      enabled:
      - name: GpuShare
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

/// A node with `gpus` GPUs of `model`, each with `memory_mib` of memory.
fn gpu_node(name: &str, label: &str, gpus: u32, model: &str, memory_mib: u32) -> Node {
    let mut n = node(name, label, "32", "128Gi");
    let labels = n.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.insert("nvidia.com/gpu.product".into(), model.into());
    labels.insert("nvidia.com/gpu.memory".into(), memory_mib.to_string());
    with_gpus(n, u64::from(gpus))
}

/// What a test pod asks of GPUs.
#[derive(Clone, Copy)]
enum Ask<'a> {
    Whole(u32),
    Milli(&'a str),
    MemoryMib(u32),
    ModelMilli(&'a str, u32),
}

fn gpu_pod(ns: &str, name: &str, profile: &str, ask: Ask) -> Pod {
    let mut p = pod(ns, name, profile, "500m", "256Mi");
    let mut annotations = BTreeMap::new();
    match ask {
        Ask::Whole(n) => {
            if let Some(c) = p.spec.as_mut().and_then(|s| s.containers.first_mut())
                && let Some(r) = c.resources.as_mut()
            {
                let q = k8s_openapi::apimachinery::pkg::api::resource::Quantity(n.to_string());
                r.requests
                    .get_or_insert_with(BTreeMap::new)
                    .insert("nvidia.com/gpu".into(), q.clone());
                r.limits
                    .get_or_insert_with(BTreeMap::new)
                    .insert("nvidia.com/gpu".into(), q);
            }
        }
        Ask::Milli(m) => {
            annotations.insert("gantry.io/gpu-milli".to_string(), m.to_string());
        }
        Ask::MemoryMib(m) => {
            annotations.insert("gantry.io/gpu-memory".to_string(), m.to_string());
        }
        Ask::ModelMilli(model, m) => {
            annotations.insert("gantry.io/gpu-milli".to_string(), m.to_string());
            annotations.insert("gantry.io/gpu-model".to_string(), model.to_string());
        }
    }
    if !annotations.is_empty() {
        p.metadata.annotations = Some(annotations);
    }
    p
}

/// The pod's assignment: (device, milli) pairs.
fn assignment(p: &Pod) -> Option<Vec<(u32, u32)>> {
    let text = p.metadata.annotations.as_ref()?.get(ASSIGNMENT)?;
    text.split(',')
        .map(|part| {
            let (d, m) = part.split_once(':')?;
            Some((d.trim().parse().ok()?, m.trim().parse().ok()?))
        })
        .collect()
}

/// Panics unless every bound GPU pod carries an assignment naming devices the node has, and
/// no device holds more than 1000 milli. Returns the milli used per (node, device).
fn check_devices(pods: &[Pod], gpus: &BTreeMap<&str, u32>) -> BTreeMap<(String, u32), u32> {
    let mut used: BTreeMap<(String, u32), u32> = BTreeMap::new();
    for p in pods {
        let (Some(node), Some(a)) = (node_of(p), assignment(p)) else {
            continue;
        };
        let count = gpus.get(node).copied().unwrap_or(0);
        for (d, m) in a {
            assert!(
                d < count,
                "{:?} holds device {d} of {node}",
                p.metadata.name
            );
            *used.entry((node.to_string(), d)).or_default() += m;
        }
    }
    for ((node, d), m) in &used {
        assert!(
            *m <= 1000,
            "device {d} of {node} shared beyond a GPU: {m} milli"
        );
    }
    used
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_pods_get_devices_without_over_sharing_and_bad_annotations_are_reported() {
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let (ns, profile) = ("gpus", "gantry-gpus");
    create_namespace(&client, ns).await;
    create_node(&client, &gpu_node("gpus-v100", ns, 8, "V100M16", 16384)).await;
    create_node(&client, &gpu_node("gpus-t4", ns, 2, "T4", 15360)).await;
    create_node(&client, &node("gpus-cpu", ns, "32", "128Gi")).await;
    let gpus = BTreeMap::from([("gpus-v100", 8), ("gpus-t4", 2), ("gpus-cpu", 0)]);
    let mut gantry = Gantry::start(
        plane.dir(),
        ns,
        &gpu_config(profile, ns),
        &plane.kubeconfig(),
    );
    gantry.wait_ready().await;

    // The model-restricted pods first: two 600s need both T4s, which then have no whole GPU
    // left; the others in decreasing size, so that any placement fits them all.
    for name in ["t4-only", "t4-only-2"] {
        create_pod(
            &client,
            &gpu_pod(ns, name, profile, Ask::ModelMilli("T4", 600)),
        )
        .await;
    }
    eventually(Duration::from_secs(20), "the T4 pods bound", || async {
        let ps = pods(&client, ns).await;
        ps.iter().all(|p| node_of(p).is_some()).then_some(())
    })
    .await;
    let asks: Vec<(&str, Ask)> = vec![
        ("whole-2", Ask::Whole(2)),
        ("whole-1", Ask::Whole(1)),
        ("share-1000", Ask::Milli("1000")),
        ("share-700", Ask::Milli("700")),
        ("share-500", Ask::Milli("500")),
        ("mem-8g", Ask::MemoryMib(8192)),
        ("share-450", Ask::Milli("450")),
        ("share-300", Ask::Milli("300")),
        ("share-250", Ask::Milli("250")),
        ("share-200", Ask::Milli("200")),
    ];
    for (name, ask) in &asks {
        create_pod(&client, &gpu_pod(ns, name, profile, *ask)).await;
    }
    create_pod(&client, &pod(ns, "cpu-only", profile, "1", "1Gi")).await;
    create_pod(
        &client,
        &gpu_pod(ns, "bad-milli", profile, Ask::Milli("half")),
    )
    .await;

    let all = eventually(Duration::from_secs(30), "every valid pod bound", || async {
        let ps = pods(&client, ns).await;
        let bound = ps.iter().filter(|p| node_of(p).is_some()).count();
        (bound == asks.len() + 3).then_some(ps)
    })
    .await;
    let used = check_devices(&all, &gpus);
    let by_name: BTreeMap<&str, &Pod> = all
        .iter()
        .filter_map(|p| Some((p.metadata.name.as_deref()?, p)))
        .collect();
    let held = |name: &str| -> (String, Vec<(u32, u32)>) {
        let p = by_name[name];
        let a = assignment(p).unwrap_or_else(|| panic!("{name} has no {ASSIGNMENT}"));
        (node_of(p).unwrap_or_default().to_string(), a)
    };
    // Whole GPUs are held whole, on distinct devices.
    for (name, n) in [("whole-2", 2usize), ("whole-1", 1), ("share-1000", 1)] {
        let (_, a) = held(name);
        assert_eq!(a.len(), n, "{name}: {a:?}");
        assert!(a.iter().all(|(_, m)| *m == 1000), "{name}: {a:?}");
    }
    // Shares are of one device and exactly what was asked.
    for (name, milli) in [
        ("share-250", 250),
        ("share-500", 500),
        ("share-300", 300),
        ("share-700", 700),
        ("share-450", 450),
        ("share-200", 200),
    ] {
        let (_, a) = held(name);
        assert_eq!(
            a.iter().map(|(_, m)| *m).collect::<Vec<_>>(),
            [milli],
            "{name}"
        );
    }
    // 8 GiB of a 16 GiB V100 is 500 milli; of a 15 GiB T4, 534.
    let (node, a) = held("mem-8g");
    let expect = if node == "gpus-v100" { 500 } else { 534 };
    assert_eq!(a.iter().map(|(_, m)| *m).collect::<Vec<_>>(), [expect]);
    // Model-restricted pods are on the T4s; two 600s cannot share one.
    let (n1, a1) = held("t4-only");
    let (n2, a2) = held("t4-only-2");
    assert_eq!((n1.as_str(), n2.as_str()), ("gpus-t4", "gpus-t4"));
    assert_ne!(a1[0].0, a2[0].0, "two 600-milli shares on one T4");
    // The CPU-only pod holds no device; nothing is on the CPU node but it.
    assert!(assignment(by_name["cpu-only"]).is_none());
    assert!(used.keys().all(|(n, _)| n != "gpus-cpu"));

    // The malformed pod: an event naming the problem, a condition, no binding.
    let bad = by_name["bad-milli"];
    assert_eq!(node_of(bad), None);
    let expected = "annotation gantry.io/gpu-milli: \"half\" is not an integer in 1..=1000";
    let evs = eventually(
        Duration::from_secs(15),
        "FailedScheduling for bad-milli",
        || async {
            let evs = events(&client, ns).await;
            (!events_about(&evs, "bad-milli", "FailedScheduling").is_empty()).then_some(evs)
        },
    )
    .await;
    let note = events_about(&evs, "bad-milli", "FailedScheduling")[0]
        .note
        .clone()
        .unwrap_or_default();
    // (The other tests' nodes share the control plane, hence no fixed node count.) What
    // preemption found follows: nothing, as the pod is refused before any node.
    let (head, preemption) = note.split_once(" preemption: ").unwrap_or((&note, ""));
    assert!(
        head.starts_with("0/") && head.ends_with(&format!(" nodes are available: {expected}.")),
        "{note}"
    );
    assert!(
        preemption.ends_with(" Preemption is not helpful for scheduling."),
        "{note}"
    );
    let (status, reason, message) =
        pod_scheduled(&get_pod(&client, ns, "bad-milli").await).expect("PodScheduled condition");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "Unschedulable")
    );
    assert!(message.contains(expected), "{message}");
    assert!(gantry.is_running(), "no panic:\n{}", gantry.log_text());
    assert_eq!(gantry.terminate().code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_gantry_rebuilds_the_devices_from_running_pods() {
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let (ns, profile) = ("gpu-restart", "gantry-gpu-restart");
    create_namespace(&client, ns).await;
    create_node(&client, &gpu_node("gpu-restart-0", ns, 2, "A10", 24576)).await;
    let gpus = BTreeMap::from([("gpu-restart-0", 2)]);
    let config = gpu_config(profile, ns);
    let mut first = Gantry::start(plane.dir(), ns, &config, &plane.kubeconfig());
    first.wait_ready().await;
    // Device 0 taken whole, then 700 of device 1: the layout a restarted scheduler that
    // ignored the assignments and refilled devices in pod-name order would get wrong.
    create_pod(&client, &gpu_pod(ns, "whole", profile, Ask::Whole(1))).await;
    eventually(Duration::from_secs(20), "whole bound", || async {
        node_of(&get_pod(&client, ns, "whole").await).map(|_| ())
    })
    .await;
    create_pod(
        &client,
        &gpu_pod(ns, "share-700", profile, Ask::Milli("700")),
    )
    .await;
    let before = eventually(Duration::from_secs(20), "both bound", || async {
        let ps = pods(&client, ns).await;
        ps.iter().all(|p| node_of(p).is_some()).then_some(ps)
    })
    .await;
    let layout: BTreeMap<String, Vec<(u32, u32)>> = before
        .iter()
        .filter_map(|p| Some((p.metadata.name.clone()?, assignment(p)?)))
        .collect();
    assert_eq!(layout["whole"], [(0, 1000)]);
    assert_eq!(layout["share-700"], [(1, 700)]);
    let used = check_devices(&before, &gpus);
    assert_eq!(used.len(), 2, "{used:?}");
    assert_eq!(first.terminate().code(), Some(0));

    // A new gantry knows only what the pods say.
    let mut second = Gantry::start(plane.dir(), ns, &config, &plane.kubeconfig());
    second.wait_ready().await;
    create_pod(
        &client,
        &gpu_pod(ns, "share-400", profile, Ask::Milli("400")),
    )
    .await;
    create_pod(
        &client,
        &gpu_pod(ns, "share-300", profile, Ask::Milli("300")),
    )
    .await;
    let after = eventually(
        Duration::from_secs(20),
        "share-300 bound, share-400 rejected",
        || async {
            let ps = pods(&client, ns).await;
            let p300 = ps
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some("share-300"))?;
            let p400 = ps
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some("share-400"))?;
            (node_of(p300).is_some() && pod_scheduled(p400).is_some_and(|c| c.0 == "False"))
                .then_some(ps)
        },
    )
    .await;
    let used = check_devices(&after, &gpus);
    assert!(
        used.values().all(|m| *m == 1000),
        "both devices full: {used:?}"
    );
    let p400 = get_pod(&client, ns, "share-400").await;
    assert_eq!(node_of(&p400), None);
    let (_, _, message) = pod_scheduled(&p400).expect("condition");
    assert!(
        message.contains(": 1 node(s) didn't have a GPU with enough free share"),
        "{message}"
    );
    assert_eq!(second.terminate().code(), Some(0));
}
