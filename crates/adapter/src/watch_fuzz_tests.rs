//! Properties of the watchers, for every kind gantry watches: an object of any shape (a valid
//! one, mutated at random) read among valid ones never fails the list that carries it, is
//! read or given as unreadable under its own name, and becomes at most one input for the
//! scheduling thread, without a panic.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use gantry_test_support::fuzz;

/// Valid objects of the kind at `kind`, as the API server would send them.
fn seeds(kind: &str) -> Vec<Value> {
    let meta =
        |name: &str| json!({"name": name, "namespace": "ns", "resourceVersion": "5", "uid": "u"});
    match kind {
        "nodes" => vec![json!({"metadata": {"name": "n1", "labels": {"zone": "a"}},
            "spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}]}})],
        "pods" => vec![json!({"metadata": meta("p"),
            "spec": {"schedulerName": "gantry", "priority": 10,
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                    "ports": [{"containerPort": 80, "hostPort": 80}]}],
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                    [{"topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "p"}}}]}},
                "tolerations": [{"key": "k", "operator": "Exists"}]},
            "status": {"phase": "Pending"}})],
        "namespaces" => vec![json!({"metadata": {"name": "ns", "labels": {"team": "a"}}})],
        "services" => vec![json!({"metadata": meta("s"), "spec": {"selector": {"app": "p"}}})],
        "replicasets" | "statefulsets" => vec![json!({"metadata": meta("r"),
            "spec": {"selector": {"matchLabels": {"app": "p"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["web"]}]},
                "template": {"metadata": {"labels": {"app": "p"}}, "spec": {"containers": []}},
                "serviceName": "s"}})],
        "replicationcontrollers" => {
            vec![json!({"metadata": meta("rc"), "spec": {"selector": {"app": "p"}}})]
        }
        "persistentvolumeclaims" => vec![json!({"metadata": meta("c"),
            "spec": {"storageClassName": "fast", "volumeName": "v", "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Bound"}})],
        "persistentvolumes" => vec![json!({"metadata": {"name": "v"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                "storageClassName": "fast", "csi": {"driver": "d", "volumeHandle": "h"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions":
                    [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
            "status": {"phase": "Available"}})],
        "storageclasses" => vec![json!({"metadata": {"name": "fast"}, "provisioner": "d",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [{"matchLabelExpressions": [{"key": "zone", "values": ["a"]}]}]})],
        "csinodes" => vec![json!({"metadata": {"name": "n1"},
            "spec": {"drivers": [{"name": "d", "nodeID": "n1", "allocatable": {"count": 3}}]}})],
        "csidrivers" => vec![json!({"metadata": {"name": "d"},
            "spec": {"attachRequired": true, "storageCapacity": true}})],
        "csistoragecapacities" => vec![json!({"metadata": meta("cap"), "storageClassName": "fast",
            "capacity": "10Gi", "maximumVolumeSize": "5Gi",
            "nodeTopology": {"matchLabels": {"zone": "a"}}})],
        "poddisruptionbudgets" => vec![json!({"metadata": meta("b"),
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "p"}}},
            "status": {"disruptionsAllowed": 1, "currentHealthy": 3, "desiredHealthy": 2,
                "expectedPods": 3, "disruptedPods": {"p-0": "2024-01-02T03:04:05Z"}}})],
        "podgroups" => vec![
            json!({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": meta("g"),
            "spec": {"minMember": 3, "minResources": {"cpu": "2"}, "scheduleTimeoutSeconds": 30},
            "status": {"phase": "Scheduling", "scheduled": 1}}),
        ],
        "deviceclasses" => vec![
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": "gpu.nvidia.com"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}],
                "extendedResourceName": "nvidia.com/gpu"}}),
        ],
        "resourceslices" => vec![
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": "n1-gpu.nvidia.com-x7k2p"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": "n1",
                "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0",
                    "attributes": {"type": {"string": "gpu"}, "productName": {"string": "NVIDIA A100-SXM4-40GB"},
                        "index": {"int": 0}, "driverVersion": {"version": "580.65.6"},
                        "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"}},
                    "capacity": {"memory": {"value": "40Gi"}}}]}}),
        ],
        "resourceclaims" => vec![
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": meta("train-gpu-abc12"),
            "spec": {"devices": {"requests": [{"name": "gpu",
                "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1,
                    "selectors": [{"cel": {"expression": "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"}}]}}]}},
            "status": {"allocation": {"devices": {"results": [{"request": "gpu",
                "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}},
                "reservedFor": [{"resource": "pods", "name": "train-0", "uid": "u1"}]}}),
        ],
        other => panic!("no seed for {other}"),
    }
}

/// `metadata.name` of `doc`, when it is still a string.
fn name_of(doc: &Value) -> Option<&str> {
    doc.pointer("/metadata/name")?.as_str()
}

/// The property for one kind: `doc` between two valid objects in a list is handed out in its
/// place, named as it is named; read as `K`, each gives at most one change.
fn a_list_reads_every_object_alone<K: Kind>(doc: &Value)
where
    K::Model: std::fmt::Debug,
{
    let kind = K::NAME;
    let good = seeds(kind).remove(0);
    let list = json!({"metadata": {"resourceVersion": "9"}, "items": [good, doc, good]});
    let text = serde_json::to_string(&list).expect("JSON");
    let mut read = Vec::new();
    let version = reflector::decode_list(&text, |obj: Read<K::Object>| read.push(obj))
        .unwrap_or_else(|e| panic!("the {kind} list failed on {doc}: {e}"));
    assert_eq!(version, "9");
    assert_eq!(read.len(), 3, "{kind}: {doc}");
    for (i, obj) in read.iter().enumerate() {
        match obj {
            Read::Object(_) => {}
            Read::Unreadable(u) if i == 1 => {
                if let Some(name) = name_of(doc) {
                    assert_eq!(u.name, name, "{kind}: {doc}");
                }
                assert!(!u.error.is_empty());
            }
            Read::Unreadable(u) => panic!("{kind}: the valid object is unreadable: {u:?}"),
        }
    }
    let context = ReadContext {
        profiles: ["gantry".to_string()].into_iter().collect(),
    };
    let mut relist = Relist::new(Gauge::default());
    let mut steps = relist.step::<K>(Event::Init, &context, None);
    for obj in read {
        let out = relist.step::<K>(Event::InitApply(obj), &context, None);
        assert!(out.len() <= 1, "{kind}: {out:?}");
        steps.extend(out);
    }
    steps.extend(relist.step::<K>(Event::InitDone, &context, None));
    assert!(matches!(steps.last(), Some(Step::Synced)));
}

macro_rules! fuzz_kind {
    ($test:ident, $kind:ty) => {
        #[test]
        fn $test() {
            let seeds = seeds(<$kind>::NAME);
            proptest!(|(doc in fuzz::mutated(seeds.clone()))| {
                a_list_reads_every_object_alone::<$kind>(&doc);
            });
        }
    };
}

fuzz_kind!(fuzz_watched_nodes, kinds::Nodes);
fuzz_kind!(fuzz_watched_pods, kinds::Pods);
fuzz_kind!(fuzz_watched_namespaces, kinds::Namespaces);
fuzz_kind!(fuzz_watched_services, kinds::Services);
fuzz_kind!(fuzz_watched_replicasets, kinds::ReplicaSets);
fuzz_kind!(fuzz_watched_statefulsets, kinds::StatefulSets);
fuzz_kind!(
    fuzz_watched_replicationcontrollers,
    kinds::ReplicationControllers
);
fuzz_kind!(fuzz_watched_claims, kinds::PersistentVolumeClaims);
fuzz_kind!(fuzz_watched_volumes, kinds::PersistentVolumes);
fuzz_kind!(fuzz_watched_storage_classes, kinds::StorageClasses);
fuzz_kind!(fuzz_watched_csi_nodes, kinds::CsiNodes);
fuzz_kind!(fuzz_watched_csi_drivers, kinds::CsiDrivers);
fuzz_kind!(fuzz_watched_capacities, kinds::Capacities);
fuzz_kind!(fuzz_watched_budgets, kinds::DisruptionBudgets);
fuzz_kind!(fuzz_watched_pod_groups, kinds::PodGroups);
fuzz_kind!(fuzz_watched_device_classes, kinds::DeviceClasses);
fuzz_kind!(fuzz_watched_resource_slices, kinds::ResourceSlices);
fuzz_kind!(fuzz_watched_resource_claims, kinds::ResourceClaims);

#[test]
fn every_kind_has_its_seed_read() {
    // The seeds themselves are read: the properties start from objects that decode. A kind
    // added to the list has to bring its seed.
    struct Reads;
    impl Visitor for Reads {
        fn visit<K: Kind>(&mut self)
        where
            K::Model: std::fmt::Debug,
        {
            for seed in seeds(K::NAME) {
                let raw = serde_json::value::to_raw_value(&seed).expect("raw");
                assert!(
                    matches!(
                        super::super::lenient::read_json::<K::Object>(&raw),
                        Read::Object(_)
                    ),
                    "{}",
                    K::NAME
                );
            }
        }
    }
    kinds::each(&mut Reads);
}
