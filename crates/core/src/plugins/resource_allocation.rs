//! What NodeResourcesFit's scoring strategies and NodeResourcesBalancedAllocation share
//! (kube-scheduler's `resourceAllocationScorer`): the configured resources with their
//! weights, the pod's request for each, and for every node the (requested, allocatable) pair
//! of each resource that takes part in the score.

use std::sync::Arc;

use serde::{Deserialize, Deserializer};

use crate::cache::{NodeInfo, NodeRow};
use crate::model::PodInfo;
use crate::model::resources::{CPU, EPHEMERAL_STORAGE, MEMORY, ResourceName, is_scalar_resource};

/// A resource to score on and its weight, as configured (`{name: cpu, weight: 1}`).
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ResourceSpec {
    /// The resource name (`cpu`, `memory`, `nvidia.com/gpu`, ...).
    pub name: String,
    /// Its weight; 0 or absent means 1, as kube-scheduler's defaulting does.
    #[serde(default)]
    pub weight: i64,
}

impl ResourceSpec {
    /// A resource with a weight.
    pub fn new(name: &str, weight: i64) -> Self {
        ResourceSpec {
            name: name.to_string(),
            weight,
        }
    }
}

/// kube-scheduler's default resources to score on: cpu and memory, weight 1 each.
pub fn default_resources() -> Vec<ResourceSpec> {
    vec![ResourceSpec::new(CPU, 1), ResourceSpec::new(MEMORY, 1)]
}

/// Deserializes a resource list with kube-scheduler's v1 defaulting applied: an absent,
/// null or empty list means [`default_resources`], and a weight of 0 means 1.
pub fn deserialize_resources<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<ResourceSpec>, D::Error> {
    let list = Option::<Vec<ResourceSpec>>::deserialize(deserializer)?.unwrap_or_default();
    if list.is_empty() {
        return Ok(default_resources());
    }
    Ok(list
        .into_iter()
        .map(|r| ResourceSpec {
            weight: if r.weight == 0 { 1 } else { r.weight },
            ..r
        })
        .collect())
}

/// How a configured resource is looked up, decided once when the plugin is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourceKind {
    /// `cpu`, in millicores.
    Cpu,
    /// `memory`, in bytes.
    Memory,
    /// `ephemeral-storage`, in bytes.
    EphemeralStorage,
    /// An extended, hugepages or attachable-volumes resource.
    Scalar(ResourceName),
    /// Any other name (`pods`, `storage`, ...): nodes have no allocatable amount of it that
    /// the scorers read, so it never takes part in a score.
    Unscored,
}

impl ResourceKind {
    /// The kind of the resource named `name`.
    pub fn of(name: &str) -> Self {
        match name {
            CPU => ResourceKind::Cpu,
            MEMORY => ResourceKind::Memory,
            EPHEMERAL_STORAGE => ResourceKind::EphemeralStorage,
            _ if is_scalar_resource(name) => ResourceKind::Scalar(Arc::from(name)),
            _ => ResourceKind::Unscored,
        }
    }
}

/// Which view of cpu and memory requests a scorer uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestView {
    /// Requests with kube-scheduler's defaults (100m cpu, 200Mi memory) for containers that
    /// set none, so that pods without requests still count (NodeResourcesFit's strategies).
    NonZero,
    /// The requests as they are (NodeResourcesBalancedAllocation).
    Actual,
}

/// The configured resources of a scoring plugin, resolved once, with the request view it
/// scores with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceAllocation {
    resources: Vec<(ResourceKind, i64)>,
    view: RequestView,
}

impl ResourceAllocation {
    /// Resolves `specs` (already defaulted and validated) for scoring with `view`.
    pub fn new(specs: &[ResourceSpec], view: RequestView) -> Self {
        ResourceAllocation {
            resources: specs
                .iter()
                .map(|s| (ResourceKind::of(&s.name), s.weight))
                .collect(),
            view,
        }
    }

    /// What the pod's scores read on every node: the configured resources that can take
    /// part, each with the pod's request; computed once per cycle at PreScore. As
    /// kube-scheduler does, an extended resource the pod does not request is left out, and so
    /// is a name nodes have no allocatable amount of.
    pub fn pod_requests(&self, pod: &PodInfo) -> PodRequests {
        let non_zero = self.view == RequestView::NonZero;
        let scored = self.resources.iter().filter_map(|(kind, weight)| {
            let (amount, request) = match kind {
                ResourceKind::Cpu if non_zero => (NodeAmount::NonZeroCpu, pod.non_zero_milli_cpu),
                ResourceKind::Cpu => (NodeAmount::Cpu, pod.requests.milli_cpu),
                ResourceKind::Memory if non_zero => {
                    (NodeAmount::NonZeroMemory, pod.non_zero_memory)
                }
                ResourceKind::Memory => (NodeAmount::Memory, pod.requests.memory),
                ResourceKind::EphemeralStorage => {
                    (NodeAmount::EphemeralStorage, pod.requests.ephemeral_storage)
                }
                ResourceKind::Scalar(name) => match pod.requests.scalar(name) {
                    0 => return None,
                    request => (NodeAmount::Scalar(name.clone()), request),
                },
                ResourceKind::Unscored => return None,
            };
            Some(ScoredResource {
                amount,
                request,
                weight: *weight,
            })
        });
        PodRequests {
            resources: scored.collect(),
        }
    }
}

/// Which of a node's amounts a scored resource compares: (requested, allocatable).
#[derive(Debug, Clone, PartialEq, Eq)]
enum NodeAmount {
    /// Requested cpu as is.
    Cpu,
    /// Requested cpu with the non-zero defaults.
    NonZeroCpu,
    /// Requested memory as is.
    Memory,
    /// Requested memory with the non-zero defaults.
    NonZeroMemory,
    /// Ephemeral storage.
    EphemeralStorage,
    /// An extended, hugepages or attachable-volumes resource.
    Scalar(ResourceName),
}

/// One resource taking part in a pod's scores.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ScoredResource {
    amount: NodeAmount,
    request: i64,
    weight: i64,
}

/// A pod's requests of the resources a scorer weighs, resolved once per cycle (see
/// [`ResourceAllocation::pod_requests`]) so that scoring a node reads two numbers per
/// resource and nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRequests {
    resources: Vec<ScoredResource>,
}

impl PodRequests {
    /// True when the pod requests none of the scored resources (a best-effort pod for them).
    pub fn is_empty(&self) -> bool {
        self.resources.iter().all(|r| r.request == 0)
    }

    /// The requests as a [`CpuMemory`], when cpu and memory are the only resources scored,
    /// in that order (kube-scheduler's default for both scorers).
    pub fn cpu_memory(&self) -> Option<CpuMemory> {
        let [cpu, memory] = self.resources.as_slice() else {
            return None;
        };
        let non_zero = match (&cpu.amount, &memory.amount) {
            (NodeAmount::NonZeroCpu, NodeAmount::NonZeroMemory) => true,
            (NodeAmount::Cpu, NodeAmount::Memory) => false,
            _ => return None,
        };
        Some(CpuMemory {
            non_zero,
            cpu: cpu.request,
            cpu_weight: cpu.weight,
            memory: memory.request,
            memory_weight: memory.weight,
        })
    }

    /// Calls `f(weight, requested, allocatable)` for each resource, in configuration order,
    /// that takes part in the node's score, where `requested` already includes the pod's
    /// request. A resource the node has no allocatable amount of is left out.
    #[inline]
    pub fn for_each(&self, node: &NodeInfo, mut f: impl FnMut(i64, i64, i64)) {
        let allocatable = &node.node.allocatable;
        // kube-scheduler's defaults, cpu and memory in the non-zero view (NodeResourcesFit) or
        // as requested (NodeResourcesBalancedAllocation), without the per-resource dispatch:
        // they are scored on every node of every cycle.
        if let [cpu, memory] = self.resources.as_slice() {
            let used = match (&cpu.amount, &memory.amount) {
                (NodeAmount::NonZeroCpu, NodeAmount::NonZeroMemory) => {
                    Some((node.non_zero_milli_cpu, node.non_zero_memory))
                }
                (NodeAmount::Cpu, NodeAmount::Memory) => {
                    Some((node.requested.milli_cpu, node.requested.memory))
                }
                _ => None,
            };
            if let Some((used_cpu, used_memory)) = used {
                if allocatable.milli_cpu != 0 {
                    f(cpu.weight, used_cpu + cpu.request, allocatable.milli_cpu);
                }
                if allocatable.memory != 0 {
                    f(
                        memory.weight,
                        used_memory + memory.request,
                        allocatable.memory,
                    );
                }
                return;
            }
        }
        let requested = &node.requested;
        for r in &self.resources {
            let (alloc, used) = match &r.amount {
                NodeAmount::Cpu => (allocatable.milli_cpu, requested.milli_cpu),
                NodeAmount::NonZeroCpu => (allocatable.milli_cpu, node.non_zero_milli_cpu),
                NodeAmount::Memory => (allocatable.memory, requested.memory),
                NodeAmount::NonZeroMemory => (allocatable.memory, node.non_zero_memory),
                NodeAmount::EphemeralStorage => {
                    (allocatable.ephemeral_storage, requested.ephemeral_storage)
                }
                NodeAmount::Scalar(name) => (allocatable.scalar(name), requested.scalar(name)),
            };
            if alloc != 0 {
                f(r.weight, used + r.request, alloc);
            }
        }
    }
}

/// A pod's requests when cpu and memory are the only resources scored: what
/// [`PodRequests::for_each`] reads, with the shape decided once per cycle rather than per
/// node, so that a scorer's loop over every node of a large cluster is a few loads and
/// arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuMemory {
    non_zero: bool,
    /// The pod's cpu request (millicores).
    pub cpu: i64,
    /// The weight of cpu.
    pub cpu_weight: i64,
    /// The pod's memory request (bytes).
    pub memory: i64,
    /// The weight of memory.
    pub memory_weight: i64,
}

impl CpuMemory {
    /// `((requested, allocatable) of cpu, (requested, allocatable) of memory)` on the node
    /// of `row`, the pod's requests included: what `for_each` passes, a resource with no
    /// allocatable amount included (its allocatable is 0, and a scorer leaves it out).
    #[inline(always)]
    pub fn on_row(&self, row: &NodeRow) -> ((i64, i64), (i64, i64)) {
        let (cpu, memory) = if self.non_zero {
            (row.non_zero_cpu, row.non_zero_memory)
        } else {
            (row.requested_cpu, row.requested_memory)
        };
        (
            (cpu + self.cpu, row.allocatable_cpu),
            (memory + self.memory, row.allocatable_memory),
        )
    }
}

#[cfg(test)]
/// Nodes the cpu and memory scorers treat apart ([`CpuMemory`]): no cpu, no memory,
/// overfull, memory beyond what NodeResourcesFit scales in floating point; for their tests.
pub(crate) fn cpu_memory_edge_nodes() -> Vec<NodeInfo> {
    use crate::testing::{node, node_info, pod};
    let used = pod("used")
        .on("n")
        .req("cpu", "3")
        .req("memory", "7Gi")
        .build();
    vec![
        node_info(
            node("n").capacity("4", "8Gi").build(),
            std::slice::from_ref(&used),
        ),
        node_info(
            node("n").capacity("0", "8Gi").build(),
            std::slice::from_ref(&used),
        ),
        node_info(node("n").capacity("4", "0").build(), &[]),
        node_info(node("n").capacity("0", "0").build(), &[]),
        node_info(
            node("n").capacity("2", "1Gi").build(),
            std::slice::from_ref(&used),
        ),
        node_info(node("n").capacity("96", "20Ti").build(), &[used]),
        node_info(node("n").capacity("3", "3000").build(), &[]),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, node_info, pod};

    fn collect(alloc: &ResourceAllocation, node: &NodeInfo, pod: &PodInfo) -> Vec<(i64, i64, i64)> {
        let mut out = Vec::new();
        alloc
            .pod_requests(pod)
            .for_each(node, |w, r, a| out.push((w, r, a)));
        out
    }

    #[test]
    fn defaulting_of_resource_lists() {
        #[derive(Deserialize)]
        struct W {
            #[serde(
                default = "default_resources",
                deserialize_with = "deserialize_resources"
            )]
            r: Vec<ResourceSpec>,
        }
        let parse = |s: &str| serde_json::from_str::<W>(s).unwrap().r;
        assert_eq!(parse("{}"), default_resources());
        assert_eq!(parse(r#"{"r": null}"#), default_resources());
        assert_eq!(parse(r#"{"r": []}"#), default_resources());
        assert_eq!(
            parse(
                r#"{"r": [{"name": "cpu"}, {"name": "memory", "weight": 0}, {"name": "x.io/y", "weight": 7}]}"#
            ),
            vec![
                ResourceSpec::new("cpu", 1),
                ResourceSpec::new("memory", 1),
                ResourceSpec::new("x.io/y", 7)
            ]
        );
    }

    #[test]
    fn kinds() {
        assert_eq!(ResourceKind::of("cpu"), ResourceKind::Cpu);
        assert_eq!(ResourceKind::of("memory"), ResourceKind::Memory);
        assert_eq!(
            ResourceKind::of("ephemeral-storage"),
            ResourceKind::EphemeralStorage
        );
        assert_eq!(
            ResourceKind::of("nvidia.com/gpu"),
            ResourceKind::Scalar(Arc::from("nvidia.com/gpu"))
        );
        assert_eq!(ResourceKind::of("pods"), ResourceKind::Unscored);
        assert_eq!(ResourceKind::of("storage"), ResourceKind::Unscored);
    }

    #[test]
    fn non_zero_view_counts_defaults_for_pods_without_requests() {
        let existing = pod("a").on("n").build();
        let n = node_info(
            node("n")
                .capacity("4", "8Gi")
                .alloc("ephemeral-storage", "10Gi")
                .build(),
            &[existing],
        );
        let specs = vec![
            ResourceSpec::new("cpu", 1),
            ResourceSpec::new("memory", 2),
            ResourceSpec::new("ephemeral-storage", 3),
        ];
        let incoming = pod("b").req("ephemeral-storage", "1Gi").build();
        let non_zero = ResourceAllocation::new(&specs, RequestView::NonZero);
        assert_eq!(
            collect(&non_zero, &n, &incoming),
            vec![
                (1, 200, 4000),
                (2, 400 << 20, 8 << 30),
                (3, 1 << 30, 10 << 30)
            ]
        );
        let actual = ResourceAllocation::new(&specs, RequestView::Actual);
        assert_eq!(
            collect(&actual, &n, &incoming),
            vec![(1, 0, 4000), (2, 0, 8 << 30), (3, 1 << 30, 10 << 30)]
        );
    }

    #[test]
    fn skips_unrequested_extended_and_unallocatable_resources() {
        let existing = pod("a").on("n").req("example.com/foo", "2").build();
        let n = node_info(
            node("n")
                .capacity("4", "0")
                .alloc("example.com/foo", "8")
                .build(),
            &[existing],
        );
        let specs = vec![
            ResourceSpec::new("cpu", 1),
            ResourceSpec::new("memory", 1),
            ResourceSpec::new("example.com/foo", 5),
            ResourceSpec::new("example.com/bar", 5),
            ResourceSpec::new("pods", 5),
        ];
        let alloc = ResourceAllocation::new(&specs, RequestView::Actual);
        // Memory has no allocatable amount; foo is not requested by the pod; bar and pods
        // are nowhere.
        let plain = pod("b").req("cpu", "1").build();
        assert_eq!(collect(&alloc, &n, &plain), vec![(1, 1000, 4000)]);
        let wants_foo = pod("c")
            .req("cpu", "1")
            .req("example.com/foo", "1")
            .req("example.com/bar", "1")
            .build();
        assert_eq!(
            collect(&alloc, &n, &wants_foo),
            vec![(1, 1000, 4000), (5, 3, 8)]
        );
    }
}
