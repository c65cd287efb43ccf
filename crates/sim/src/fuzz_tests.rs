//! Properties of the simulator's input: no YAML text makes the loader panic; clusters
//! generated from the Kubernetes schema (quantities of every size, labels, taints,
//! selectors, affinities, spreading), and the scenarios' clusters mutated, load and simulate
//! without a panic; and the simulation never puts a pod on a node its requests do not fit.

use std::collections::HashMap;

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::{ClusterInput, Report, simulate};
use gantry_core::config::Config;
use gantry_core::model::PodInfo;
use gantry_test_support::fuzz;

/// Label keys and values, few, so that selectors and spreading find matches.
const KEYS: &[&str] = &[
    "app",
    "tier",
    "topology.kubernetes.io/zone",
    "kubernetes.io/hostname",
    "gpu",
];
const VALUES: &[&str] = &["a", "b", "c", "true", "1"];
const NAMESPACES: &[&str] = &["default", "shop", "batch"];

fn labels() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(
        prop::sample::select(KEYS),
        prop::sample::select(VALUES),
        0..4,
    )
    .prop_map(|m| json!(m))
}

/// A quantity: mostly one a cluster could have, sometimes anything quantity-like.
fn quantity(plausible: &'static [&'static str]) -> impl Strategy<Value = Value> {
    prop_oneof![
        40 => prop::sample::select(plausible).prop_map(|q| json!(q)),
        1 => fuzz::quantity_like().prop_map(Value::String),
        1 => prop_oneof![Just("9e15"), Just("9223372036854775807"), Just("-1"), Just("0.5"), Just("1Ei")]
            .prop_map(|q| json!(q)),
    ]
}

fn resources() -> impl Strategy<Value = Value> {
    (
        prop::option::of(quantity(&["100m", "250m", "1", "2", "4"])),
        prop::option::of(quantity(&["64Mi", "512Mi", "1Gi", "4Gi"])),
        prop::option::weighted(0.1, quantity(&["1", "2"])),
    )
        .prop_map(|(cpu, memory, gpu)| {
            let mut m = Map::new();
            for (k, v) in [("cpu", cpu), ("memory", memory), ("nvidia.com/gpu", gpu)] {
                if let Some(v) = v {
                    m.insert(k.to_string(), v);
                }
            }
            Value::Object(m)
        })
}

fn requirement() -> impl Strategy<Value = Value> {
    let valid = (
        prop::sample::select(KEYS),
        prop::sample::select(&["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"][..]),
        prop::collection::vec(prop::sample::select(VALUES), 1..3),
    )
        .prop_map(|(key, operator, values)| {
            let values: Vec<&str> = match operator {
                "Exists" | "DoesNotExist" => vec![],
                "Gt" | "Lt" => vec!["1"],
                _ => values,
            };
            json!({"key": key, "operator": operator, "values": values})
        });
    let anything = (
        prop::sample::select(KEYS),
        fuzz::text(),
        prop::collection::vec(fuzz::text(), 0..3),
    )
        .prop_map(
            |(key, operator, values)| json!({"key": key, "operator": operator, "values": values}),
        );
    prop_oneof![20 => valid, 1 => anything]
}

fn selector() -> impl Strategy<Value = Value> {
    (labels(), prop::collection::vec(requirement(), 0..2))
        .prop_map(|(m, e)| json!({"matchLabels": m, "matchExpressions": e}))
}

fn affinity() -> impl Strategy<Value = Value> {
    let term = || {
        (selector(), prop::sample::select(KEYS))
            .prop_map(|(s, k)| json!({"labelSelector": s, "topologyKey": k}))
    };
    (
        prop::collection::vec(requirement(), 0..3),
        prop::collection::vec(term(), 0..2),
        prop::collection::vec(term(), 0..2),
        prop::collection::vec((-5i32..=105, term()), 0..2),
    )
        .prop_map(|(node, pod, anti, preferred)| {
            json!({
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                    {"nodeSelectorTerms": [{"matchExpressions": node}]}},
                "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": pod},
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": anti,
                    "preferredDuringSchedulingIgnoredDuringExecution": preferred
                        .into_iter()
                        .map(|(w, t)| json!({"weight": w, "podAffinityTerm": t}))
                        .collect::<Vec<_>>(),
                },
            })
        })
}

fn taint() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(KEYS),
        prop::sample::select(VALUES),
        prop_oneof![
            20 => prop::sample::select(&["NoSchedule", "PreferNoSchedule", "NoExecute"][..]),
            1 => Just("Other"),
        ],
    )
        .prop_map(|(key, value, effect)| json!({"key": key, "value": value, "effect": effect}))
}

fn toleration() -> impl Strategy<Value = Value> {
    (
        prop::option::of(prop::sample::select(KEYS)),
        prop_oneof![
            20 => prop::sample::select(&["Equal", "Exists"][..]),
            1 => Just("Other"),
        ],
        prop::sample::select(VALUES),
        prop::option::of(prop::sample::select(&["NoSchedule", "NoExecute", ""][..])),
    )
        .prop_map(|(key, operator, value, effect)| {
            json!({"key": key, "operator": operator, "value": value, "effect": effect})
        })
}

fn spread() -> impl Strategy<Value = Value> {
    (
        prop_oneof![20 => 1i32..=3, 1 => -1i32..=0],
        prop::sample::select(KEYS),
        prop_oneof![
            20 => prop::sample::select(&["DoNotSchedule", "ScheduleAnyway"][..]),
            1 => Just("Other"),
        ],
        selector(),
        prop::option::weighted(0.05, -1i32..=3),
    )
        .prop_map(|(skew, key, when, selector, min_domains)| {
            json!({"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": when,
                   "labelSelector": selector, "minDomains": min_domains})
        })
}

fn node(i: usize) -> impl Strategy<Value = Value> {
    (
        labels(),
        quantity(&["2", "4", "8", "16"]),
        quantity(&["4Gi", "8Gi", "32Gi"]),
        quantity(&["110", "110", "3", "0"]),
        prop::option::of(quantity(&["0", "4", "8"])),
        prop::option::weighted(0.2, prop::collection::vec(taint(), 1..3)),
        prop::bool::weighted(0.1),
    )
        .prop_map(
            move |(mut labels, cpu, memory, pods, gpu, taints, unschedulable)| {
                labels["kubernetes.io/hostname"] = json!(format!("node-{i}"));
                let mut allocatable = json!({"cpu": cpu, "memory": memory, "pods": pods});
                if let Some(gpu) = gpu {
                    allocatable["nvidia.com/gpu"] = gpu;
                }
                json!({
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": format!("node-{i}"), "labels": labels},
                    "spec": {"taints": taints.unwrap_or_default(), "unschedulable": unschedulable},
                    "status": {"allocatable": allocatable, "capacity": allocatable},
                })
            },
        )
}

fn pod(i: usize, nodes: usize) -> impl Strategy<Value = Value> {
    let container = || {
        (
            resources(),
            resources(),
            prop::option::weighted(0.1, 1u16..100),
        )
            .prop_map(|(requests, limits, host_port)| {
                let mut c = json!({"name": "c", "image": "app:1",
                    "resources": {"requests": requests, "limits": limits}});
                if let Some(port) = host_port {
                    c["ports"] = json!([{"containerPort": 80, "hostPort": port}]);
                }
                c
            })
    };
    (
        prop::sample::select(NAMESPACES),
        labels(),
        prop::collection::vec(container(), 1..3),
        prop::collection::vec(container(), 0..2),
        prop::option::weighted(0.3, 0..nodes + 1),
        prop::option::weighted(0.2, labels()),
        prop::option::weighted(0.2, affinity()),
        prop::collection::vec(toleration(), 0..2),
        prop::option::weighted(0.2, prop::collection::vec(spread(), 1..3)),
        prop::option::of(prop::sample::select(&["Running", "Pending", "Succeeded", "Failed"][..])),
        prop::option::of(any::<i32>()),
    )
        .prop_map(
            move |(namespace, labels, containers, init, node, selector, affinity, tolerations, spread, phase, priority)| {
                let mut spec = json!({"containers": containers, "initContainers": init,
                    "tolerations": tolerations,
                    "topologySpreadConstraints": spread.unwrap_or_default()});
                if let Some(n) = node {
                    spec["nodeName"] = json!(format!("node-{n}"));
                }
                if let Some(s) = selector {
                    spec["nodeSelector"] = s;
                }
                if let Some(a) = affinity {
                    spec["affinity"] = a;
                }
                if let Some(p) = priority {
                    spec["priority"] = json!(p);
                }
                json!({
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": format!("pod-{i}"), "namespace": namespace, "labels": labels},
                    "spec": spec,
                    "status": {"phase": phase},
                })
            },
        )
}

/// A cluster from the schema: nodes, pods (some bound, some pending), a namespace.
fn cluster() -> impl Strategy<Value = Vec<Value>> {
    (1usize..5, 1usize..10).prop_flat_map(|(nodes, pods)| {
        let nodes_s: Vec<_> = (0..nodes).map(node).collect();
        let pods_s: Vec<_> = (0..pods).map(|i| pod(i, nodes)).collect();
        (nodes_s, pods_s).prop_map(|(mut nodes, pods)| {
            nodes.extend(pods);
            nodes.push(json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "shop", "labels": {"app": "a"}}}));
            nodes
        })
    })
}

/// The objects as YAML: one document each, or one `List`.
fn yaml(objects: &[Value], as_list: bool) -> String {
    if as_list {
        serde_yaml::to_string(&json!({"apiVersion": "v1", "kind": "List", "items": objects}))
            .unwrap_or_default()
    } else {
        objects
            .iter()
            .map(|o| serde_yaml::to_string(o).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("---\n")
    }
}

/// The configurations the scenarios run (the valid ones), and the default.
fn configs() -> Vec<String> {
    let registry = gantry_core::plugins::registry();
    let mut configs: Vec<String> = fuzz::scenarios()
        .iter()
        .filter_map(|s| s.get("config"))
        .filter_map(|c| serde_yaml::to_string(c).ok())
        .filter(|c| Config::parse(c, &registry).is_ok())
        .collect();
    configs.push(String::new());
    configs
}

fn config(text: &str) -> Config {
    let registry = gantry_core::plugins::registry();
    if text.is_empty() {
        Config::default_with(&registry)
    } else {
        Config::parse(text, &registry)
    }
    .expect("a valid configuration")
}

/// For every node the simulation placed pods on: their requests fit, cpu and memory
/// whenever the placed pods ask for some, and the number of pods.
fn fits(input: &ClusterInput, report: &Report) -> Result<(), TestCaseError> {
    let pods: HashMap<(&str, &str), &k8s_openapi::api::core::v1::Pod> = input
        .pods
        .iter()
        .filter_map(|p| {
            Some((
                (
                    p.metadata.namespace.as_deref()?,
                    p.metadata.name.as_deref()?,
                ),
                p,
            ))
        })
        .collect();
    let mut asked: HashMap<&str, (bool, bool)> = HashMap::new();
    for outcome in report.pods.iter().filter(|o| !o.running) {
        let Some(node) = &outcome.node else { continue };
        let pod = pods
            .get(&(outcome.namespace.as_str(), outcome.name.as_str()))
            .ok_or_else(|| {
                TestCaseError::fail(format!("no pod {}/{}", outcome.namespace, outcome.name))
            })?;
        let info = PodInfo::from_api(pod).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let entry = asked.entry(node.as_str()).or_default();
        entry.0 |= info.requests.milli_cpu > 0;
        entry.1 |= info.requests.memory > 0;
    }
    for usage in &report.nodes {
        let Some((cpu, memory)) = asked.get(usage.name.as_str()) else {
            continue;
        };
        prop_assert!(usage.pods <= usage.pods_allocatable, "{usage:?}");
        prop_assert!(
            !cpu || usage.milli_cpu_requested <= usage.milli_cpu_allocatable,
            "{usage:?}"
        );
        prop_assert!(
            !memory || usage.memory_requested <= usage.memory_allocatable,
            "{usage:?}"
        );
    }
    Ok(())
}

#[test]
fn fuzz_sim_yaml_any_text() {
    proptest!(|(text in prop_oneof![any::<String>(), "[ -~\n]{0,300}"])| {
        let mut input = ClusterInput::default();
        let _ = input.add_yaml(&text, "fuzz");
    });
}

#[test]
fn fuzz_sim_structured_clusters_fit() {
    let configs = configs();
    proptest!(|(objects in cluster(), as_list in any::<bool>(), default in any::<bool>(), which in any::<prop::sample::Index>())| {
        let mut input = ClusterInput::default();
        input
            .add_yaml(&yaml(&objects, as_list), "fuzz")
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let text = if default { "" } else { which.get::<String>(&configs) };
        let report = simulate(&input, config(text), None);
        // Overcommit places pods beyond allocatable on purpose.
        if !text.contains("Overcommit") {
            fits(&input, &report)?;
        }
    });
}

#[test]
fn fuzz_sim_mutated_scenarios() {
    let clusters: Vec<Value> = fuzz::scenarios()
        .iter()
        .filter_map(|s| s.get("cluster").cloned())
        .collect();
    let configs = configs();
    proptest!(|(cluster in fuzz::mutated(clusters.clone()), as_list in any::<bool>(), which in any::<prop::sample::Index>())| {
        let objects = match cluster {
            Value::Array(items) => items,
            other => vec![other],
        };
        let mut input = ClusterInput::default();
        if input.add_yaml(&yaml(&objects, as_list), "fuzz").is_ok() {
            simulate(&input, config(which.get::<String>(&configs)), None);
        }
    });
}
