//! A node together with the pods on it and their aggregated requests.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::model::gpu::{
    DeviceUse, GpuRequest, MILLI_PER_GPU, device_usage, hami_milli, hami_usage,
};
use crate::model::load::NodeLoad;
use crate::model::pod::HostPort;
use crate::model::{NodeModel, PodInfo, Resources};

use super::PodList;

/// A node and what is placed on it (bound and assumed pods). Snapshots share these behind
/// `Arc`; the cache copies one on write, so a snapshot never changes under a running cycle.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// The node.
    pub node: Arc<NodeModel>,
    /// Pods on the node, bound or assumed; changed only by [`NodeInfo::add_pod`] and
    /// [`NodeInfo::remove_pod`].
    pub pods: PodList,
    /// Sum of the pods' requests.
    pub requested: Resources,
    /// Sum of the pods' non-zero cpu (scoring view).
    pub non_zero_milli_cpu: i64,
    /// Sum of the pods' non-zero memory (scoring view).
    pub non_zero_memory: i64,
    /// Host ports in use.
    pub used_ports: Vec<HostPort>,
    /// Number of pods with any pod affinity or anti-affinity term.
    pub pods_with_affinity: usize,
    /// Number of pods with required anti-affinity terms.
    pub pods_with_required_anti_affinity: usize,
    /// The claims and inline migrated volumes the pods name, each pod's counted apart: at
    /// least as many as the volumes attached for them, whatever the claims resolve to
    /// (NodeVolumeLimits' bound that needs no claim looked up).
    pub volumes_named: usize,
    /// Number of pods with an ephemeral volume, whose claim the full count of NodeVolumeLimits
    /// must check.
    pub pods_with_ephemeral_volumes: usize,
    /// Milli of each GPU device held by the pods, from their assignments (see
    /// [`crate::model::gpu::device_usage`]); one entry per device of the node.
    pub gpu_used: Vec<u32>,
    /// What the pods hold of each HAMi device (see [`crate::model::gpu::hami_usage`]),
    /// when HAMi's device plugin registered the node's devices; empty otherwise.
    pub gpu_hami_used: Vec<DeviceUse>,
    /// The node's measured load and the placements since, once a metrics source reported
    /// it (boxed: most nodes of a plain profile never have any).
    pub load: Option<Box<NodeLoad>>,
    /// The pod holding the node's HAMi lock, while gantry avoids the node because it found
    /// the lock held for another pod's allocation (see [`super::Cache::set_hami_lock_holder`]).
    pub hami_lock_holder: Option<Arc<str>>,
    /// Cache generation of the last change.
    pub generation: u64,
}

impl NodeInfo {
    /// A node with nothing on it.
    pub fn new(node: Arc<NodeModel>) -> Self {
        NodeInfo {
            pods: PodList::default(),
            requested: Resources::default(),
            non_zero_milli_cpu: 0,
            non_zero_memory: 0,
            used_ports: Vec::new(),
            pods_with_affinity: 0,
            pods_with_required_anti_affinity: 0,
            volumes_named: 0,
            pods_with_ephemeral_volumes: 0,
            gpu_used: vec![0; node.gpu.count],
            gpu_hami_used: vec![
                DeviceUse::default();
                node.gpu.hami_devices().map_or(0, <[_]>::len)
            ],
            load: None,
            hami_lock_holder: None,
            generation: 0,
            node,
        }
    }

    /// Replaces the node object (its GPUs may have changed), keeping the pods.
    pub fn set_node(&mut self, node: Arc<NodeModel>) {
        self.node = node;
        self.recount_gpus();
    }

    /// Free milli of GPU device `i` (0 for a device over-committed or out of range).
    pub fn gpu_free(&self, i: usize) -> u32 {
        self.gpu_used
            .get(i)
            .map_or(0, |u| MILLI_PER_GPU.saturating_sub(*u))
    }

    fn recount_gpus(&mut self) {
        let pods = self.pods.iter().map(|p| &p.gpu);
        match self.node.gpu.hami_devices() {
            Some(devices) => {
                self.gpu_hami_used = hami_usage(devices, pods);
                self.gpu_used = hami_milli(devices, &self.gpu_hami_used);
            }
            None => {
                self.gpu_hami_used.clear();
                self.gpu_used = device_usage(&self.node.gpu, pods);
            }
        }
    }

    /// The node's name.
    pub fn name(&self) -> &Arc<str> {
        &self.node.name
    }

    /// Accounts for a pod placed on the node.
    pub fn add_pod(&mut self, pod: Arc<PodInfo>) {
        self.requested.add(&pod.requests);
        self.non_zero_milli_cpu += pod.non_zero_milli_cpu;
        self.non_zero_memory += pod.non_zero_memory;
        self.used_ports.extend_from_slice(&pod.host_ports);
        if !pod.affinity.is_empty() {
            self.pods_with_affinity += 1;
        }
        if !pod.affinity.required_anti.is_empty() {
            self.pods_with_required_anti_affinity += 1;
        }
        self.volumes_named += named_volumes(&pod);
        self.pods_with_ephemeral_volumes += usize::from(has_ephemeral_volume(&pod));
        let holds_gpu = holds_gpu(&pod);
        self.pods.push(pod);
        if holds_gpu {
            self.recount_gpus();
        }
    }

    /// Removes the pod with `namespace/name`; returns it if it was here.
    pub fn remove_pod(&mut self, namespace: &str, name: &str) -> Option<Arc<PodInfo>> {
        let pod = self.pods.remove(namespace, name)?;
        self.requested.sub(&pod.requests);
        self.non_zero_milli_cpu -= pod.non_zero_milli_cpu;
        self.non_zero_memory -= pod.non_zero_memory;
        for port in &pod.host_ports {
            if let Some(j) = self.used_ports.iter().position(|p| p == port) {
                self.used_ports.swap_remove(j);
            }
        }
        if !pod.affinity.is_empty() {
            self.pods_with_affinity -= 1;
        }
        if !pod.affinity.required_anti.is_empty() {
            self.pods_with_required_anti_affinity -= 1;
        }
        self.volumes_named -= named_volumes(&pod);
        self.pods_with_ephemeral_volumes -= usize::from(has_ephemeral_volume(&pod));
        if holds_gpu(&pod) {
            self.recount_gpus();
        }
        Some(pod)
    }
}

/// The volumes of `pod` that may count against an attach limit, unresolved: its claims and
/// its inline migrated volumes.
fn named_volumes(pod: &PodInfo) -> usize {
    pod.volumes.claims.len() + pod.volumes.inline.len()
}

/// True when `pod` has an ephemeral volume (a claim made for it).
fn has_ephemeral_volume(pod: &PodInfo) -> bool {
    pod.volumes.claims.iter().any(|c| c.ephemeral)
}

/// True when the pod asks for or holds GPU devices.
fn holds_gpu(pod: &PodInfo) -> bool {
    pod.gpu.request != GpuRequest::None
        || pod.gpu.assignment.is_some()
        || pod.gpu.hami_assignment.is_some()
}

/// What the resource plugins and the choice of a node read of every node in every cycle,
/// copied out of its [`NodeInfo`] (and the node model behind it) into one contiguous row per
/// snapshot position ([`crate::cache::Snapshot::rows`]): reading a row per node touches one
/// or two cache lines of an array walked in order, where reading the node itself chases two
/// pointers to objects spread over the heap, and on large clusters those misses, not the
/// arithmetic, are what examining every node costs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeRow {
    /// Allocatable cpu (millicores).
    pub allocatable_cpu: i64,
    /// Allocatable memory (bytes).
    pub allocatable_memory: i64,
    /// Allocatable ephemeral storage (bytes).
    pub allocatable_ephemeral_storage: i64,
    /// How many pods the node takes.
    pub allowed_pods: i64,
    /// The pods' cpu requests.
    pub requested_cpu: i64,
    /// The pods' memory requests.
    pub requested_memory: i64,
    /// The pods' ephemeral storage requests.
    pub requested_ephemeral_storage: i64,
    /// The pods' cpu requests with the non-zero defaults ([`NodeInfo::non_zero_milli_cpu`]).
    pub non_zero_cpu: i64,
    /// The same for memory.
    pub non_zero_memory: i64,
    /// Pods on the node.
    pub pods: i64,
    /// [`crate::model::NodeModel::name_hash`], for telling equal scores apart.
    pub name_hash: u64,
    /// [`NodeInfo::volumes_named`], or `u32::MAX` when a pod has an ephemeral volume (or
    /// the count does not fit): the volumes NodeVolumeLimits may count on the node without
    /// looking a claim up.
    pub volumes_named: u32,
    /// A hash of the amounts [`NodeRow::same_amounts`] compares, never 0; 0 when the node has extended or hugepages
    /// resources, allocatable or requested, amounts the row leaves out. Kept with the row
    /// so that grouping the nodes by amounts does not hash every row again.
    pub amounts_hash: u64,
}

impl NodeRow {
    /// The row of `info`.
    pub fn of(info: &NodeInfo) -> Self {
        let allocatable = &info.node.allocatable;
        let mut row = NodeRow {
            allocatable_cpu: allocatable.milli_cpu,
            allocatable_memory: allocatable.memory,
            allocatable_ephemeral_storage: allocatable.ephemeral_storage,
            allowed_pods: allocatable.allowed_pods,
            requested_cpu: info.requested.milli_cpu,
            requested_memory: info.requested.memory,
            requested_ephemeral_storage: info.requested.ephemeral_storage,
            non_zero_cpu: info.non_zero_milli_cpu,
            non_zero_memory: info.non_zero_memory,
            pods: info.pods.len() as i64,
            name_hash: info.node.name_hash,
            volumes_named: match info.pods_with_ephemeral_volumes {
                0 => u32::try_from(info.volumes_named).unwrap_or(u32::MAX),
                _ => u32::MAX,
            },
            amounts_hash: 0,
        };
        if allocatable.scalar.is_empty() && info.requested.scalar.is_empty() {
            let mut h = rustc_hash::FxHasher::default();
            row.amounts_fields().hash(&mut h);
            row.amounts_hash = h.finish() | 1;
        }
        row
    }

    /// True when both rows hold every resource amount of their nodes (allocatable,
    /// requested, and requested with the non-zero defaults: the nodes have no extended
    /// resources) and their pod counts, and those are equal: the two nodes get the same
    /// answers from a plugin that reads nothing else of a node (the Filter and Score
    /// plugins' `verdict_by_requests` and `score_by_requests`).
    #[inline]
    pub fn same_amounts(&self, other: &NodeRow) -> bool {
        self.amounts_hash != 0
            && self.amounts_hash == other.amounts_hash
            && self
                .amounts_fields()
                .iter()
                .zip(other.amounts_fields())
                .fold(0, |differ, (a, b)| differ | (a ^ b))
                == 0
    }

    /// The amounts [`NodeRow::same_amounts`] compares.
    #[inline]
    fn amounts_fields(&self) -> [i64; 10] {
        [
            self.allocatable_cpu,
            self.allocatable_memory,
            self.allocatable_ephemeral_storage,
            self.allowed_pods,
            self.requested_cpu,
            self.requested_memory,
            self.requested_ephemeral_storage,
            self.non_zero_cpu,
            self.non_zero_memory,
            self.pods,
        ]
    }
}
