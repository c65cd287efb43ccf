//! The correctness check after a run: no node holds more than its allocatable cpu, memory or
//! pods, and every pod is bound, to a node that exists; and with volumes, every claim of a pod
//! is bound to its volume both ways. Requests are computed here from the API objects (not
//! with gantry's model), so that the check does not share gantry's bugs.

use std::collections::{BTreeMap, HashMap};

use gantry_core::model::quantity::Quantity;
use k8s_openapi::api::core::v1::{Container, Node, PersistentVolume, PersistentVolumeClaim, Pod};
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

/// What the check found of the workload's other pods (those of other namespaces: init,
/// gated, churn).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OtherFindings {
    /// Pods looked at.
    pub pods: usize,
    /// Of those, bound to a node.
    pub bound: usize,
    /// Of those, bound while they carry scheduling gates (must be 0).
    pub gated_bound: usize,
}

/// Counts `pods`, those bound, and those bound despite their scheduling gates.
pub fn others(pods: &[Pod]) -> OtherFindings {
    let bound = |p: &&Pod| p.spec.as_ref().is_some_and(|s| s.node_name.is_some());
    let gated = |p: &&Pod| {
        p.spec
            .as_ref()
            .is_some_and(|s| s.scheduling_gates.as_ref().is_some_and(|g| !g.is_empty()))
    };
    OtherFindings {
        pods: pods.len(),
        bound: pods.iter().filter(bound).count(),
        gated_bound: pods.iter().filter(bound).filter(gated).count(),
    }
}

/// Checks `pods` against `nodes`, with `others` (pods of the same nodes not checked
/// themselves) counting in what the nodes hold.
pub fn check(nodes: &[Node], pods: &[Pod], others: &[Pod]) -> Result<Findings, String> {
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
    for p in others {
        let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
        if let Some(node) = node.filter(|n| allocatable.contains_key(*n)) {
            used.entry(node).or_default().add(pod_requests(p)?);
        }
    }
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

/// What the volume check found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeFindings {
    /// Claims the pods use.
    pub claims: usize,
    /// Of those, bound to their volume: the claim is Bound and names its volume
    /// (`spec.volumeName`), and the volume is Bound and names the claim back (`claimRef`,
    /// with the claim's uid).
    pub bound: usize,
    /// The first claim that is not, and why.
    pub first_problem: Option<String>,
}

impl VolumeFindings {
    /// Every claim bound to its volume.
    pub fn ok(&self) -> bool {
        self.bound == self.claims
    }
}

fn phase_is_bound(phase: Option<&str>) -> bool {
    phase == Some("Bound")
}

/// Why the claim `name` (of `claims`) is not bound to its volume (of `volumes`), if it is not.
fn claim_problem(
    namespace: &str,
    name: &str,
    claims: &HashMap<&str, &PersistentVolumeClaim>,
    volumes: &HashMap<&str, &PersistentVolume>,
) -> Option<String> {
    let Some(claim) = claims.get(name) else {
        return Some(format!("claim {namespace}/{name} does not exist"));
    };
    let phase = claim.status.as_ref().and_then(|s| s.phase.as_deref());
    if !phase_is_bound(phase) {
        return Some(format!("claim {namespace}/{name} is {phase:?}, not Bound"));
    }
    let Some(volume_name) = claim.spec.as_ref().and_then(|s| s.volume_name.as_deref()) else {
        return Some(format!("claim {namespace}/{name} names no volume"));
    };
    let Some(volume) = volumes.get(volume_name) else {
        return Some(format!(
            "claim {namespace}/{name}: its volume {volume_name} does not exist"
        ));
    };
    let phase = volume.status.as_ref().and_then(|s| s.phase.as_deref());
    if !phase_is_bound(phase) {
        return Some(format!("volume {volume_name} is {phase:?}, not Bound"));
    }
    let claim_ref = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    let back = claim_ref.map(|r| (r.namespace.as_deref(), r.name.as_deref(), r.uid.as_deref()));
    let uid = claim.metadata.uid.as_deref();
    if back != Some((Some(namespace), Some(name), uid)) || uid.is_none() {
        return Some(format!(
            "volume {volume_name} is bound to {back:?}, not to claim {namespace}/{name} (uid {uid:?})"
        ));
    }
    None
}

/// Checks the claims of `pods` (all of one namespace) against `claims` (that namespace's)
/// and `volumes`; `None` when no pod has a claim.
pub fn volumes(
    pods: &[Pod],
    claims: &[PersistentVolumeClaim],
    volumes: &[PersistentVolume],
) -> Option<VolumeFindings> {
    let claims: HashMap<&str, &PersistentVolumeClaim> = claims
        .iter()
        .filter_map(|c| Some((c.metadata.name.as_deref()?, c)))
        .collect();
    let volumes: HashMap<&str, &PersistentVolume> = volumes
        .iter()
        .filter_map(|v| Some((v.metadata.name.as_deref()?, v)))
        .collect();
    let mut findings = VolumeFindings::default();
    for p in pods {
        let namespace = p.metadata.namespace.as_deref().unwrap_or_default();
        let used = p.spec.iter().flat_map(|s| s.volumes.iter().flatten());
        for source in used.filter_map(|v| v.persistent_volume_claim.as_ref()) {
            findings.claims += 1;
            match claim_problem(namespace, &source.claim_name, &claims, &volumes) {
                None => findings.bound += 1,
                Some(problem) => {
                    findings.first_problem.get_or_insert(problem);
                }
            }
        }
    }
    (findings.claims > 0).then_some(findings)
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
        let f = check(&nodes, &fits, &[]).unwrap();
        assert_eq!((f.pods, f.bound, f.on_unknown_nodes), (3, 2, 0));
        assert!(f.overcommitted.is_empty());
        let over = [
            pod("a", Some("n1"), "600m", "512Mi"),
            pod("b", Some("n1"), "401m", "512Mi"),
        ];
        let f = check(&nodes, &over, &[]).unwrap();
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
        assert_eq!(check(&nodes, &memory, &[]).unwrap().overcommitted.len(), 1);
        let count = [
            pod("a", Some("n1"), "1", "1Mi"),
            pod("b", Some("n1"), "1", "1Mi"),
            pod("c", Some("n1"), "1", "1Mi"),
        ];
        let f = check(&nodes, &count, &[]).unwrap();
        assert_eq!(f.overcommitted[0].used.pods, 3);
    }

    #[test]
    fn pods_on_missing_nodes_are_counted() {
        let nodes = [node("n1", "8", "1Gi", "110")];
        let f = check(&nodes, &[pod("a", Some("gone"), "1", "1Mi")], &[]).unwrap();
        assert_eq!((f.bound, f.on_unknown_nodes), (1, 1));
    }

    #[test]
    fn other_pods_fill_the_nodes_but_are_not_counted() {
        let nodes = [node("n1", "1", "1Gi", "110")];
        let others = [
            pod("init", Some("n1"), "600m", "1Mi"),
            pod("gone", Some("gone"), "1", "1Mi"),
        ];
        let f = check(&nodes, &[pod("a", Some("n1"), "401m", "1Mi")], &others).unwrap();
        assert_eq!((f.pods, f.bound, f.overcommitted.len()), (1, 1, 1));
        let mut gated = pod("gated", Some("n1"), "1m", "1Mi");
        gated.spec.as_mut().unwrap().scheduling_gates = Some(vec![
            serde_json::from_value(serde_json::json!({"name": "hold"})).unwrap(),
        ]);
        let found = super::others(&[gated, pod("pending", None, "1", "1Mi")]);
        assert_eq!((found.pods, found.bound, found.gated_bound), (2, 1, 1));
    }

    fn claimed(name: &str, claim: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {
                "containers": [{"name": "a"}],
                "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]
            }
        }))
        .unwrap()
    }

    fn claim(name: &str, uid: &str, volume: &str, phase: &str) -> PersistentVolumeClaim {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "uid": uid},
            "spec": {"volumeName": volume},
            "status": {"phase": phase}
        }))
        .unwrap()
    }

    fn volume(name: &str, claim: &str, uid: Option<&str>, phase: &str) -> PersistentVolume {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"claimRef": {"namespace": "ns", "name": claim, "uid": uid}},
            "status": {"phase": phase}
        }))
        .unwrap()
    }

    #[test]
    fn claims_bound_both_ways_pass_and_others_say_why() {
        let pods = [claimed("a", "c1"), claimed("b", "c2"), claimed("c", "c3")];
        let claims = [
            claim("c1", "u1", "v1", "Bound"),
            claim("c2", "u2", "v2", "Bound"),
            claim("c3", "u3", "v3", "Pending"),
        ];
        let good = [
            volume("v1", "c1", Some("u1"), "Bound"),
            volume("v2", "c2", Some("u2"), "Bound"),
        ];
        let f = volumes(&pods[..2], &claims, &good).unwrap();
        assert!(f.ok(), "{f:?}");
        assert_eq!((f.claims, f.bound), (2, 2));

        let f = volumes(&pods, &claims, &good).unwrap();
        assert_eq!((f.claims, f.bound), (3, 2));
        assert!(!f.ok());
        assert!(f.first_problem.unwrap().contains("not Bound"));

        // A volume that still waits for the controller (no uid), or bound to another claim.
        let no_uid = [volume("v1", "c1", None, "Bound")];
        let f = volumes(&pods[..1], &claims, &no_uid).unwrap();
        assert!(f.first_problem.unwrap().contains("not to claim ns/c1"));
        let other = [volume("v1", "c2", Some("u2"), "Bound")];
        assert!(!volumes(&pods[..1], &claims, &other).unwrap().ok());
        let released = [volume("v1", "c1", Some("u1"), "Released")];
        assert!(!volumes(&pods[..1], &claims, &released).unwrap().ok());
        assert!(!volumes(&pods[..1], &claims, &[]).unwrap().ok());
        assert!(
            !volumes(&[claimed("d", "missing")], &claims, &good)
                .unwrap()
                .ok()
        );
    }

    #[test]
    fn pods_without_claims_have_no_volume_findings() {
        assert_eq!(volumes(&[pod("a", Some("n1"), "1", "1Mi")], &[], &[]), None);
    }
}
