//! A snapshot written from a scheduler's state and read back answers what-if questions as
//! that state does: the objects its plugins read beyond nodes and pods (storage, namespace
//! labels, selectors, disruption budgets) are written too.

use std::sync::Arc;

use super::*;
use crate::ClusterInput;
use gantry_core::plugins;
use gantry_core::scheduler::ClusterView;

/// Three nodes; in `shop`, a pod on `n1` using claim `data`, bound to a volume only `n1`
/// reaches; a claim `new` to bind, whose only matching volume is on `n2`; on `n3` (2 cpu) two
/// pods of 1 cpu, `guarded` covered by a budget allowing no disruption and `free` of higher
/// priority; namespaces labelled by team; a Service and a ReplicaSet.
const CLUSTER: &str = r#"
{apiVersion: v1, kind: Namespace, metadata: {name: shop, labels: {team: a}}}
---
{apiVersion: v1, kind: Namespace, metadata: {name: batch, labels: {team: b}}}
---
{apiVersion: v1, kind: Node, metadata: {name: n1, labels: {kubernetes.io/hostname: n1, topology.kubernetes.io/zone: a}}, status: {allocatable: {cpu: '4', memory: 8Gi, pods: '10'}}}
---
{apiVersion: v1, kind: Node, metadata: {name: n2, labels: {kubernetes.io/hostname: n2, topology.kubernetes.io/zone: b}}, status: {allocatable: {cpu: '4', memory: 8Gi, pods: '10'}}}
---
{apiVersion: v1, kind: Node, metadata: {name: n3, labels: {kubernetes.io/hostname: n3, topology.kubernetes.io/zone: b}}, status: {allocatable: {cpu: '2', memory: 8Gi, pods: '10'}}}
---
{apiVersion: storage.k8s.io/v1, kind: StorageClass, metadata: {name: local}, provisioner: kubernetes.io/no-provisioner, volumeBindingMode: WaitForFirstConsumer}
---
{apiVersion: storage.k8s.io/v1, kind: CSIDriver, metadata: {name: disk.example}, spec: {storageCapacity: false}}
---
{apiVersion: storage.k8s.io/v1, kind: CSINode, metadata: {name: n1}, spec: {drivers: [{name: disk.example, nodeID: n1, allocatable: {count: 8}}]}}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-a, labels: {tier: fast}}
spec:
  storageClassName: local
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce]
  claimRef: {namespace: shop, name: data, uid: uid-data}
  csi: {driver: disk.example, volumeHandle: vol-a}
  nodeAffinity: {required: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [n1]}]}]}}
status: {phase: Bound}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-free}
spec:
  storageClassName: local
  capacity: {storage: 5Gi}
  accessModes: [ReadWriteOnce]
  nodeAffinity: {required: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [n2]}]}]}}
status: {phase: Available}
---
{apiVersion: v1, kind: PersistentVolumeClaim, metadata: {name: data, namespace: shop, uid: uid-data, annotations: {pv.kubernetes.io/bind-completed: 'yes'}}, spec: {storageClassName: local, accessModes: [ReadWriteOnce], volumeName: pv-a, resources: {requests: {storage: 10Gi}}}}
---
{apiVersion: v1, kind: PersistentVolumeClaim, metadata: {name: new, namespace: shop, uid: uid-new}, spec: {storageClassName: local, accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}}
---
{apiVersion: v1, kind: Service, metadata: {name: web, namespace: shop}, spec: {selector: {app: web}}}
---
{apiVersion: apps/v1, kind: ReplicaSet, metadata: {name: web-1, namespace: shop}, spec: {selector: {matchLabels: {app: web}}, template: {}}}
---
{apiVersion: v1, kind: ReplicationController, metadata: {name: legacy, namespace: batch}, spec: {selector: {app: legacy}}}
---
{apiVersion: policy/v1, kind: PodDisruptionBudget, metadata: {name: guarded, namespace: shop}, spec: {selector: {matchLabels: {app: guarded}}}, status: {disruptionsAllowed: 0, currentHealthy: 1, desiredHealthy: 1, expectedPods: 1}}
---
{apiVersion: v1, kind: Pod, metadata: {name: db, namespace: shop, labels: {app: db}}, spec: {nodeName: n1, containers: [{name: c, image: i, resources: {requests: {cpu: '1'}}}], volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]}}
---
{apiVersion: v1, kind: Pod, metadata: {name: guarded, namespace: shop, labels: {app: guarded}}, spec: {nodeName: n3, priority: 0, containers: [{name: c, image: i, resources: {requests: {cpu: '1'}}}]}}
---
{apiVersion: v1, kind: Pod, metadata: {name: free, namespace: shop, labels: {app: free}}, spec: {nodeName: n3, priority: 1, containers: [{name: c, image: i, resources: {requests: {cpu: '1'}}}]}}
"#;

/// Pods whose placement depends on each kind of object: the claim bound to `n1`'s volume,
/// the claim only `n2`'s volume can take, a namespace selector (only `shop` is team a), and
/// a preemption on `n3` where the budget decides the victim.
const QUESTION: &str = r#"
{apiVersion: v1, kind: Pod, metadata: {name: reader, namespace: shop}, spec: {containers: [{name: c, image: i}], volumes: [{name: d, persistentVolumeClaim: {claimName: data}}]}}
---
{apiVersion: v1, kind: Pod, metadata: {name: writer, namespace: shop}, spec: {containers: [{name: c, image: i}], volumes: [{name: d, persistentVolumeClaim: {claimName: new}}]}}
---
apiVersion: v1
kind: Pod
metadata: {name: friend, namespace: batch}
spec:
  containers: [{name: c, image: i}]
  affinity:
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - {labelSelector: {matchLabels: {app: db}}, namespaceSelector: {matchLabels: {team: a}}, topologyKey: kubernetes.io/hostname}
---
{apiVersion: v1, kind: Pod, metadata: {name: urgent, namespace: shop}, spec: {priority: 100, nodeSelector: {kubernetes.io/hostname: n3}, containers: [{name: c, image: i, resources: {requests: {cpu: '1'}}}]}}
"#;

fn config() -> Result<Config, String> {
    Config::default_with(&plugins::registry()).map_err(|e| e.to_string())
}

fn view_of(text: &str) -> ClusterView {
    let mut input = ClusterInput::default();
    input.add_yaml(text, "cluster").expect("the cluster reads");
    let (view, invalid) = view_of_snapshot(&input, config().expect("config"));
    assert!(invalid.is_empty(), "{invalid:?}");
    view
}

/// Each pod of the question with its node and the pods it preempts.
fn placements(view: &ClusterView) -> Vec<(String, Option<String>, Vec<String>)> {
    let question = Question {
        objects: serde_yaml::Deserializer::from_str(QUESTION)
            .map(|d| serde::Deserialize::deserialize(d).expect("yaml"))
            .collect(),
        ..Question::default()
    };
    let answer = ask(&config, view, &question).expect("an answer");
    answer
        .pods
        .into_iter()
        .map(|p| (p.name, p.node, p.preempts))
        .collect()
}

/// The objects of `view` beyond nodes and pods, each sorted, for comparing two views.
fn objects(view: &ClusterView) -> Vec<String> {
    let cache = view.cache();
    let storage = cache.storage();
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    let mut out = Vec::new();
    out.extend(sorted(
        cache
            .namespaces()
            .iter()
            .map(|n| format!("{n:?}"))
            .collect(),
    ));
    out.extend(sorted(storage.claims().map(|c| format!("{c:?}")).collect()));
    out.extend(sorted(
        storage.volumes().map(|v| format!("{v:?}")).collect(),
    ));
    out.extend(sorted(
        storage.classes().map(|c| format!("{c:?}")).collect(),
    ));
    out.extend(sorted(
        storage.csi_nodes().map(|n| format!("{n:?}")).collect(),
    ));
    out.extend(sorted(
        storage
            .csi_drivers()
            .map(|d| format!("{d:?} {}", storage.reports_capacity(&d.name)))
            .collect(),
    ));
    let workloads = cache.workloads();
    out.extend(sorted(
        workloads.services().map(|s| format!("{s:?}")).collect(),
    ));
    out.extend(sorted(
        workloads.controllers().map(|c| format!("{c:?}")).collect(),
    ));
    out.extend(cache.disruption_budgets().map(|b| format!("{b:?}")));
    out
}

#[test]
fn a_snapshot_read_back_answers_as_the_state_it_was_written_from() {
    let live = view_of(CLUSTER);
    let expected = placements(&live);
    let names = |p: &[(String, Option<String>, Vec<String>)]| {
        p.iter()
            .map(|(name, node, preempts)| format!("{name} {node:?} {preempts:?}"))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(&expected),
        [
            "reader Some(\"n1\") []",
            "writer Some(\"n2\") []",
            "friend Some(\"n1\") []",
            "urgent Some(\"n3\") [\"shop/free\"]",
        ]
    );
    let queued: Vec<Arc<gantry_core::model::PodInfo>> = Vec::new();
    let written = crate::snapshot::write(&live, &queued).expect("written");
    let again = view_of(&written);
    assert_eq!(objects(&again), objects(&live), "{written}");
    assert_eq!(placements(&again), expected, "{written}");

    // Each answer depends on what was written beyond nodes and pods: without it, each differs.
    let mut list: serde_json::Value = serde_yaml::from_str(&written).expect("YAML");
    if let Some(items) = list["items"].as_array_mut() {
        items.retain(|i| matches!(i["kind"].as_str(), Some("Node" | "Pod")));
    }
    let bare = view_of(&serde_yaml::to_string(&list).expect("YAML"));
    for (with, without) in expected.iter().zip(placements(&bare)) {
        assert_ne!(*with, without, "{} without the other objects", with.0);
    }
}
