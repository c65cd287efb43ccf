//! The correctness check after a run: no node holds more than its allocatable cpu, memory or
//! pods, and every pod is bound, to a node that exists. Requests are computed here from the
//! API objects (not with gantry's model), so that the check does not share gantry's bugs.

use std::collections::BTreeMap;

use gantry::model::quantity::Quantity;
use k8s_openapi::api::core::v1::{Container, Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use serde::{Deserialize, Serialize};

/// cpu (millicores), memory (bytes) and pods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Amounts {
    /// Millicores.
    pub cpu: i64,
    /// Bytes.
    pub memory: i64,
    /// Pods.
    pub pods: i64,
}

impl Amounts {
    fn add(&mut self, other: Amounts) {
        self.cpu += other.cpu;
        self.memory += other.memory;
        self.pods += other.pods;
    }

    fn fits_in(&self, capacity: &Amounts) -> bool {
        self.cpu <= capacity.cpu && self.memory <= capacity.memory && self.pods <= capacity.pods
    }
}

/// A node holding more than it can.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overcommit {
    /// The node.
    pub node: String,
    /// What its pods request.
    pub used: Amounts,
    /// What it allows.
    pub allocatable: Amounts,
}

/// What the check found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Findings {
    /// Pods looked at.
    pub pods: usize,
    /// Of those, bound to a node.
    pub bound: usize,
    /// Bound to a node that does not exist.
    pub on_unknown_nodes: usize,
    /// Nodes holding more than their allocatable.
    pub overcommitted: Vec<Overcommit>,
}

fn quantity(q: Option<&ApiQuantity>, milli: bool) -> Result<i64, String> {
    let Some(q) = q else { return Ok(0) };
    let parsed = Quantity::parse(&q.0).map_err(|e| e.to_string())?;
    Ok(if milli {
        parsed.milli_value()
    } else {
        parsed.value()
    })
}

fn container_requests(c: &Container) -> Result<Amounts, String> {
    let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
    let get = |name: &str, milli| quantity(requests.and_then(|r| r.get(name)), milli);
    Ok(Amounts {
        cpu: get("cpu", true)?,
        memory: get("memory", false)?,
        pods: 0,
    })
}

/// What a pod takes from its node: the sum of its containers' requests, or the largest init
/// container's if more, plus the pod overhead, and one pod.
pub fn pod_requests(pod: &Pod) -> Result<Amounts, String> {
    let Some(spec) = &pod.spec else {
        return Ok(Amounts {
            pods: 1,
            ..Amounts::default()
        });
    };
    let mut total = Amounts::default();
    for c in &spec.containers {
        total.add(container_requests(c)?);
    }
    for c in spec.init_containers.iter().flatten() {
        let init = container_requests(c)?;
        total.cpu = total.cpu.max(init.cpu);
        total.memory = total.memory.max(init.memory);
    }
    if let Some(overhead) = &spec.overhead {
        total.cpu += quantity(overhead.get("cpu"), true)?;
        total.memory += quantity(overhead.get("memory"), false)?;
    }
    total.pods = 1;
    Ok(total)
}

/// A node's allocatable cpu, memory and pods.
pub fn node_allocatable(node: &Node) -> Result<Amounts, String> {
    let alloc = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    let get = |name: &str, milli| quantity(alloc.and_then(|a| a.get(name)), milli);
    Ok(Amounts {
        cpu: get("cpu", true)?,
        memory: get("memory", false)?,
        pods: get("pods", false)?,
    })
}

/// Checks `pods` against `nodes`.
pub fn check(nodes: &[Node], pods: &[Pod]) -> Result<Findings, String> {
    let mut allocatable = BTreeMap::new();
    for n in nodes {
        let name = n.metadata.name.clone().unwrap_or_default();
        allocatable.insert(name, node_allocatable(n)?);
    }
    let mut used: BTreeMap<&str, Amounts> = BTreeMap::new();
    let mut findings = Findings {
        pods: pods.len(),
        ..Findings::default()
    };
    for p in pods {
        let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
            continue;
        };
        findings.bound += 1;
        if !allocatable.contains_key(node) {
            findings.on_unknown_nodes += 1;
            continue;
        }
        used.entry(node).or_default().add(pod_requests(p)?);
    }
    for (node, used) in used {
        let alloc = allocatable[node];
        if !used.fits_in(&alloc) {
            findings.overcommitted.push(Overcommit {
                node: node.to_string(),
                used,
                allocatable: alloc,
            });
        }
    }
    Ok(findings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, cpu: &str, memory: &str, pods: &str) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods}}
        }))
        .unwrap()
    }

    fn pod(name: &str, node: Option<&str>, cpu: &str, memory: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "a", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]
            }
        }))
        .unwrap()
    }

    #[test]
    fn requests_add_containers_take_the_largest_init_container_and_overhead() {
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "1Gi"}}},
                    {"name": "b", "resources": {"requests": {"cpu": "1", "memory": "128Mi"}}}
                ],
                "initContainers": [
                    {"name": "i", "resources": {"requests": {"cpu": "2", "memory": "1Mi"}}}
                ],
                "overhead": {"cpu": "10m", "memory": "1Ki"}
            }
        }))
        .unwrap();
        assert_eq!(
            pod_requests(&p).unwrap(),
            Amounts {
                cpu: 2010,
                memory: (1 << 30) + (128 << 20) + 1024,
                pods: 1
            }
        );
    }

    #[test]
    fn a_full_node_passes_and_one_more_millicore_fails() {
        let nodes = [node("n1", "1", "1Gi", "110"), node("n2", "1", "1Gi", "110")];
        let fits = [
            pod("a", Some("n1"), "600m", "512Mi"),
            pod("b", Some("n1"), "400m", "512Mi"),
            pod("c", None, "1", "1Gi"),
        ];
        let f = check(&nodes, &fits).unwrap();
        assert_eq!((f.pods, f.bound, f.on_unknown_nodes), (3, 2, 0));
        assert!(f.overcommitted.is_empty());
        let over = [
            pod("a", Some("n1"), "600m", "512Mi"),
            pod("b", Some("n1"), "401m", "512Mi"),
        ];
        let f = check(&nodes, &over).unwrap();
        assert_eq!(f.overcommitted.len(), 1);
        assert_eq!(f.overcommitted[0].node, "n1");
        assert_eq!(f.overcommitted[0].used.cpu, 1001);
    }

    #[test]
    fn memory_and_pod_count_are_checked_too() {
        let nodes = [node("n1", "8", "1Gi", "2")];
        let memory = [
            pod("a", Some("n1"), "1", "512Mi"),
            pod("b", Some("n1"), "1", "513Mi"),
        ];
        assert_eq!(check(&nodes, &memory).unwrap().overcommitted.len(), 1);
        let count = [
            pod("a", Some("n1"), "1", "1Mi"),
            pod("b", Some("n1"), "1", "1Mi"),
            pod("c", Some("n1"), "1", "1Mi"),
        ];
        let f = check(&nodes, &count).unwrap();
        assert_eq!(f.overcommitted[0].used.pods, 3);
    }

    #[test]
    fn pods_on_missing_nodes_are_counted() {
        let nodes = [node("n1", "8", "1Gi", "110")];
        let f = check(&nodes, &[pod("a", Some("gone"), "1", "1Mi")]).unwrap();
        assert_eq!((f.bound, f.on_unknown_nodes), (1, 1));
    }
}
