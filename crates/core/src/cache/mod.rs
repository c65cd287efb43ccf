//! The cluster state the scheduler keeps: nodes, the pods on them (bound and assumed),
//! namespaces and workload selectors, storage, disruption budgets; and the snapshots cycles
//! read.
//!
//! One writer (the adapter's watchers or the simulator's loader) applies changes; after each
//! decision the scheduler *assumes* the pod on its node at once, so the next cycle sees it,
//! and either confirms it when the binding is observed or forgets it when binding fails.

mod dra;
mod node_info;
mod pod_groups;
mod pod_index;
mod pod_list;
mod pod_name;
mod snapshot;
mod storage;
mod term_table;
mod tracked;
mod workloads;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use imbl::shared_ptr::DefaultSharedPtr;
use rustc_hash::FxBuildHasher;

use crate::model::disruption_budget::DisruptionBudgetModel;
use crate::model::dra::claim::ResourceClaimModel;
use crate::model::dra::class::DeviceClassModel;
use crate::model::dra::slice::SliceModel;
use crate::model::load::{LoadSample, NodeLoad};
use crate::model::pod_group::{PodGroupModel, group_of};
use crate::model::selector::LabelSelector;
use crate::model::volume::{
    ClaimModel, CsiDriverModel, CsiNodeModel, StorageCapacityModel, StorageClassModel, VolumeModel,
};
use crate::model::{Labels, NodeModel, PodInfo, PodKey};
use pod_name::{PodName, lookup};
use snapshot::DisruptionBudgets;

pub use dra::DynamicResources;
pub use node_info::{NodeInfo, NodeRow};
pub use pod_groups::{GroupProgress, Member, Members, PodGroups};
pub use pod_index::{Matched, Namespaces, PodIndex, TermPod};
pub use pod_list::{PodList, Pods};
pub use snapshot::{ChangeLog, NodeTraits, Snapshot, TopologyDomains, TopologyValues};
pub use storage::{ClaimKey, Storage, VolumeDecision};
pub use term_table::{PodTerm, TermId, TermKind};
pub use tracked::{Tracked, TrackedSet};
pub use workloads::Workloads;

/// Label holding a node's zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// Label holding a node's region.
pub const REGION_LABEL: &str = "topology.kubernetes.io/region";

/// A change the cache refuses because it contradicts its state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    /// The pod is already placed (bound or assumed).
    #[error("pod {0} is already placed on node {1}")]
    AlreadyPlaced(String, String),
    /// The pod carries no node.
    #[error("pod {0} has no node to be placed on")]
    NoNode(String),
    /// The pod is not assumed.
    #[error("pod {0} is not assumed")]
    NotAssumed(String),
}

#[derive(Debug, Clone)]
struct NodeEntry {
    info: Arc<NodeInfo>,
    /// False for a placeholder holding pods bound to a node not (or no longer) known.
    present: bool,
}

#[derive(Debug, Clone)]
struct PodEntry {
    node: Arc<str>,
    assumed: bool,
}

/// A persistent hash map with the fast (Fx) hash: a clone is a pointer copy, and a change
/// to a map shared with a clone copies only the path to one entry.
type SharedMap<K, V> = imbl::GenericHashMap<K, V, FxBuildHasher, DefaultSharedPtr>;

/// The scheduler's cluster state. A clone is a few pointer copies: the per-node and per-pod
/// maps are persistent, and every node's [`NodeInfo`] is shared (copied only when the clone
/// changes it), so that the scheduling thread can hand a copy to a question about
/// placements between two cycles.
#[derive(Debug)]
pub struct Cache {
    /// The parts kept beyond nodes and pods (see [`Tracked`]).
    tracked: TrackedSet,
    nodes: SharedMap<Arc<str>, NodeEntry>,
    /// Present nodes in arrival order (the base of the snapshot's zone-interleaved order);
    /// copied by the first node added or removed after a clone.
    order: Arc<Vec<Arc<str>>>,
    pods: SharedMap<PodName, PodEntry>,
    /// How many of `pods` are assumed.
    assumed: usize,
    namespaces: Arc<HashMap<String, Labels>>,
    workloads: Arc<Workloads>,
    image_nodes: Arc<HashMap<String, usize>>,
    storage: Storage,
    /// DeviceClasses, ResourceSlices and ResourceClaims.
    dynamic_resources: DynamicResources,
    /// PodDisruptionBudgets by namespace and name; a persistent map, so that a snapshot
    /// shares it, and a change copies only the path to one entry.
    disruption_budgets: DisruptionBudgets,
    /// PodGroups and their pods (see [`PodGroups`]).
    pod_groups: PodGroups,
    /// The group each known pod names, by pod (namespace, name).
    group_of_pod: SharedMap<PodName, Arc<str>>,
    generation: u64,
    /// Nodes changed since the last snapshot refresh.
    dirty: HashSet<Arc<str>>,
    /// The node list itself changed (a node added or removed) since the last refresh.
    list_changed: bool,
    /// Pods placed (true) or removed (false) since the last refresh, with their node, for
    /// the snapshot's [`PodIndex`].
    pod_changes: Vec<(Arc<PodInfo>, Arc<str>, bool)>,
}

/// A clone shares everything but the record of what changed since the last snapshot
/// refresh, which belongs to the original's snapshot: the clone's first refresh rebuilds
/// its snapshot whole (and the record's table, as large as the most nodes ever changed
/// between two refreshes, is not copied).
impl Clone for Cache {
    fn clone(&self) -> Self {
        Cache {
            tracked: self.tracked,
            nodes: self.nodes.clone(),
            order: self.order.clone(),
            pods: self.pods.clone(),
            assumed: self.assumed,
            namespaces: self.namespaces.clone(),
            workloads: self.workloads.clone(),
            image_nodes: self.image_nodes.clone(),
            storage: self.storage.clone(),
            dynamic_resources: self.dynamic_resources.clone(),
            disruption_budgets: self.disruption_budgets.clone(),
            pod_groups: self.pod_groups.clone(),
            group_of_pod: self.group_of_pod.clone(),
            generation: self.generation,
            dirty: HashSet::new(),
            list_changed: true,
            pod_changes: Vec::new(),
        }
    }
}

impl Default for Cache {
    fn default() -> Self {
        Cache::tracking(TrackedSet::all())
    }
}

impl Cache {
    /// An empty cache that keeps every [`Tracked`] part (for tools and tests: a scheduler
    /// keeps only what its plugins read, [`Cache::tracking`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty cache that keeps, beyond nodes and the pods on them, only the `tracked`
    /// parts; changes to other parts are ignored, and a snapshot's reader asking for one is
    /// a plugin that did not declare it (a debug assertion says which).
    pub fn tracking(tracked: TrackedSet) -> Self {
        Cache {
            tracked,
            nodes: SharedMap::default(),
            order: Arc::default(),
            pods: SharedMap::default(),
            assumed: 0,
            namespaces: Arc::default(),
            workloads: Arc::default(),
            image_nodes: Arc::default(),
            storage: Storage::default(),
            dynamic_resources: DynamicResources::default(),
            disruption_budgets: DisruptionBudgets::default(),
            pod_groups: PodGroups::default(),
            group_of_pod: SharedMap::default(),
            generation: 0,
            dirty: HashSet::new(),
            list_changed: false,
            pod_changes: Vec::new(),
        }
    }

    /// The parts this cache keeps beyond nodes and pods.
    pub fn tracked(&self) -> TrackedSet {
        self.tracked
    }

    fn touch(&mut self, name: &Arc<str>) -> &mut NodeInfo {
        self.generation += 1;
        let generation = self.generation;
        self.dirty.insert(name.clone());
        let entry = self.nodes.entry(name.clone()).or_insert_with(|| NodeEntry {
            info: Arc::new(NodeInfo::new(Arc::new(placeholder(name)))),
            present: false,
        });
        let info = Arc::make_mut(&mut entry.info);
        info.generation = generation;
        info
    }

    /// Adds a node, or replaces its object if already known.
    pub fn upsert_node(&mut self, node: NodeModel) {
        let name = node.name.clone();
        let old_images = self
            .nodes
            .get(&name)
            .filter(|e| e.present)
            .map(|e| e.info.node.clone());
        if let Some(old) = &old_images {
            self.count_images(old, -1);
        }
        self.count_images(&node, 1);
        let node = Arc::new(node);
        self.touch(&name).set_node(node);
        let entry = self.nodes.get_mut(&name).expect("touched above");
        if !entry.present {
            entry.present = true;
            Arc::make_mut(&mut self.order).push(name);
            self.list_changed = true;
        }
    }

    /// Removes a node. Pods still bound to it stay accounted for until they are removed.
    pub fn remove_node(&mut self, name: &str) {
        let Some(entry) = self.nodes.get_mut(name) else {
            return;
        };
        if !entry.present {
            return;
        }
        entry.present = false;
        let node = entry.info.node.clone();
        let empty = entry.info.pods.is_empty();
        self.count_images(&node, -1);
        if empty {
            self.nodes.remove(name);
        }
        Arc::make_mut(&mut self.order).retain(|n| &**n != name);
        self.list_changed = true;
        self.generation += 1;
    }

    fn count_images(&mut self, node: &NodeModel, delta: isize) {
        if node.images.is_empty() || !self.tracked.contains(Tracked::ImageSpread) {
            return;
        }
        let counts = Arc::make_mut(&mut self.image_nodes);
        // Count the node once per image name, even if it reports a name twice.
        let names: std::collections::BTreeSet<&String> =
            node.images.iter().flat_map(|i| i.names.iter()).collect();
        for name in names {
            let c = counts.entry(name.clone()).or_insert(0);
            *c = c.saturating_add_signed(delta);
            if *c == 0 {
                counts.remove(name);
            }
        }
    }

    /// A number that changes whenever the cached state does.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// True when the node is known.
    pub fn has_node(&self, name: &str) -> bool {
        self.nodes.get(name).is_some_and(|e| e.present)
    }

    /// Number of known nodes.
    pub fn node_count(&self) -> usize {
        self.order.len()
    }

    /// The node named `name`, as the cache currently holds it.
    pub fn node(&self, name: &str) -> Option<&Arc<NodeInfo>> {
        self.nodes.get(name).filter(|e| e.present).map(|e| &e.info)
    }

    /// Known nodes in arrival order.
    pub fn nodes(&self) -> impl Iterator<Item = &Arc<NodeInfo>> {
        self.order.iter().map(|n| &self.nodes[n].info)
    }

    /// Pods placed on nodes, bound or assumed (kube-scheduler's cache size of `pods`).
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    /// Pods placed by this scheduler and not yet confirmed bound.
    pub fn assumed_pod_count(&self) -> usize {
        self.assumed
    }

    /// Where the pod is placed, and whether only assumed.
    pub fn pod_placement(&self, namespace: &str, name: &str) -> Option<(&Arc<str>, bool)> {
        self.pods
            .get(lookup(namespace, name).as_str())
            .map(|e| (&e.node, e.assumed))
    }

    /// Records a pod bound to a node (from the API). Confirms an assumed pod; a pod assumed
    /// on another node than the one it was bound to moves there.
    pub fn add_bound_pod(&mut self, pod: Arc<PodInfo>) -> Result<(), CacheError> {
        let node = pod
            .node_name
            .clone()
            .ok_or_else(|| CacheError::NoNode(pod.key()))?;
        let key = PodName::new(&pod.namespace, &pod.name);
        if let Some(e) = self.pods.get(&key).cloned() {
            // A pod confirmed where it was assumed stays a recent placement there.
            if e.node != node {
                self.forget_recent(&e.node, &key);
            }
            self.detach(&key, &e.node);
        }
        self.attach(key, node, pod, false);
        Ok(())
    }

    /// Places a pod the scheduler decided on, before the binding is confirmed.
    pub fn assume_pod(&mut self, pod: Arc<PodInfo>) -> Result<(), CacheError> {
        let node = pod
            .node_name
            .clone()
            .ok_or_else(|| CacheError::NoNode(pod.key()))?;
        let key = PodName::new(&pod.namespace, &pod.name);
        if let Some(e) = self.pods.get(&key) {
            return Err(CacheError::AlreadyPlaced(pod.key(), e.node.to_string()));
        }
        self.attach(key, node, pod, true);
        Ok(())
    }

    /// Undoes an assumption (the binding failed).
    pub fn forget_pod(&mut self, namespace: &str, name: &str) -> Result<(), CacheError> {
        let key = PodName::new(namespace, name);
        match self.pods.get(&key) {
            Some(e) if e.assumed => {
                let node = e.node.clone();
                self.forget_recent(&node, &key);
                self.detach(&key, &node);
                Ok(())
            }
            _ => Err(CacheError::NotAssumed(PodKey::new(namespace, name).text())),
        }
    }

    /// Removes a pod (deleted, or finished); returns it if it was placed.
    pub fn remove_pod(&mut self, namespace: &str, name: &str) -> Option<Arc<PodInfo>> {
        let key = PodName::new(namespace, name);
        let node = self.pods.get(&key)?.node.clone();
        self.forget_recent(&node, &key);
        self.detach(&key, &node)
    }

    fn attach(&mut self, key: PodName, node: Arc<str>, pod: Arc<PodInfo>, assumed: bool) {
        self.set_placed(&pod, true);
        if self.tracked.contains(Tracked::PodLabels) {
            self.pod_changes.push((pod.clone(), node.clone(), true));
        }
        if self.tracked.contains(Tracked::Volumes) {
            let claims = pod.volumes.claims.iter().map(|c| c.name.as_str());
            self.storage.count_claims(&pod.namespace, claims, true);
        }
        self.touch(&node).add_pod(pod);
        self.assumed += usize::from(assumed);
        self.pods.insert(key, PodEntry { node, assumed });
    }

    /// Takes the pod `key` off `node`; returns it.
    fn detach(&mut self, key: &PodName, node: &Arc<str>) -> Option<Arc<PodInfo>> {
        if self.pods.remove(key).is_some_and(|e| e.assumed) {
            self.assumed -= 1;
        }
        let (namespace, name) = key.parts();
        let pod = self.touch(node).remove_pod(namespace, name);
        if let Some(pod) = &pod {
            self.set_placed(pod, false);
        }
        if let Some(pod) = &pod
            && self.tracked.contains(Tracked::PodLabels)
        {
            self.pod_changes.push((pod.clone(), node.clone(), false));
        }
        if let Some(pod) = &pod
            && self.tracked.contains(Tracked::Volumes)
        {
            let claims = pod.volumes.claims.iter().map(|c| c.name.as_str());
            self.storage.count_claims(&pod.namespace, claims, false);
        }
        let entry = &self.nodes[node];
        if !entry.present && entry.info.pods.is_empty() {
            self.nodes.remove(node);
        }
        pod
    }

    /// Records who holds a node's HAMi lock while gantry avoids the node (none: no longer
    /// avoided); false when the node is unknown or nothing changed.
    pub fn set_hami_lock_holder(&mut self, name: &str, holder: Option<Arc<str>>) -> bool {
        let Some(entry) = self.nodes.get(name).filter(|e| e.present) else {
            return false;
        };
        if entry.info.hami_lock_holder == holder {
            return false;
        }
        let name = entry.info.node.name.clone();
        self.touch(&name).hami_lock_holder = holder;
        true
    }

    /// Records a node's measured load (see [`crate::model::load`]); false when the node is
    /// unknown or the sample is older than the one held.
    pub fn set_node_load(&mut self, name: &str, sample: LoadSample) -> bool {
        if !self.tracked.contains(Tracked::NodeLoad) {
            return false;
        }
        let Some(entry) = self.nodes.get(name).filter(|e| e.present) else {
            return false;
        };
        if entry
            .info
            .load
            .as_ref()
            .is_some_and(|l| sample.taken_at < l.sample.taken_at)
        {
            return false;
        }
        let name = entry.info.node.name.clone();
        let info = self.touch(&name);
        match &mut info.load {
            Some(load) => load.update(sample),
            None => {
                info.load = Some(Box::new(NodeLoad::new(sample)));
                true
            }
        }
    }

    /// Notes that the pod, just assumed on its node at `now`, is not reflected in the node's
    /// load samples yet. Only nodes with load data keep such notes.
    pub fn note_placement(&mut self, pod: &Arc<PodInfo>, now: Duration) {
        let Some(node) = &pod.node_name else { return };
        if self.nodes.get(node).is_none_or(|e| e.info.load.is_none()) {
            return;
        }
        let node = node.clone();
        if let Some(load) = &mut self.touch(&node).load {
            load.note_placement(pod.clone(), now);
        }
    }

    /// Forgets the pod `key` as a recent placement on `node` (before it is detached).
    fn forget_recent(&mut self, node: &Arc<str>, key: &PodName) {
        let (namespace, name) = key.parts();
        let recent = self
            .nodes
            .get(node)
            .and_then(|e| e.info.load.as_ref())
            .is_some_and(|l| l.is_recent(namespace, name));
        if recent && let Some(load) = &mut self.touch(node).load {
            load.forget(namespace, name);
        }
    }

    /// Records a namespace's labels (for namespace selectors in affinity terms).
    pub fn set_namespace(&mut self, name: &str, labels: Labels) {
        if !self.tracked.contains(Tracked::NamespaceLabels) {
            return;
        }
        Arc::make_mut(&mut self.namespaces).insert(name.to_string(), labels);
        self.generation += 1;
    }

    /// Forgets a namespace.
    pub fn remove_namespace(&mut self, name: &str) {
        if !self.tracked.contains(Tracked::NamespaceLabels) {
            return;
        }
        Arc::make_mut(&mut self.namespaces).remove(name);
        self.generation += 1;
    }

    /// Records a Service's selector (for default topology spreading).
    pub fn set_service(&mut self, namespace: &str, name: &str, selector: Labels) {
        if !self.tracked.contains(Tracked::Workloads) {
            return;
        }
        Arc::make_mut(&mut self.workloads).set_service(namespace, name, selector);
        self.generation += 1;
    }

    /// Forgets a Service (deleted).
    pub fn remove_service(&mut self, namespace: &str, name: &str) {
        if !self.tracked.contains(Tracked::Workloads) {
            return;
        }
        Arc::make_mut(&mut self.workloads).remove_service(namespace, name);
        self.generation += 1;
    }

    /// Forgets a controller (deleted).
    pub fn remove_controller(&mut self, kind: &str, namespace: &str, name: &str) {
        if !self.tracked.contains(Tracked::Workloads) {
            return;
        }
        Arc::make_mut(&mut self.workloads).remove_controller(kind, namespace, name);
        self.generation += 1;
    }

    /// Records a controller's selector (for default topology spreading).
    pub fn set_controller(&mut self, kind: &str, namespace: &str, name: &str, sel: LabelSelector) {
        if !self.tracked.contains(Tracked::Workloads) {
            return;
        }
        Arc::make_mut(&mut self.workloads).set_controller(kind, namespace, name, sel);
        self.generation += 1;
    }

    /// Namespaces' labels, by namespace (empty unless [`Tracked::NamespaceLabels`] is
    /// tracked).
    pub fn namespaces(&self) -> &HashMap<String, Labels> {
        &self.namespaces
    }

    /// Services' and controllers' selectors (empty unless [`Tracked::Workloads`] is
    /// tracked).
    pub fn workloads(&self) -> &Workloads {
        &self.workloads
    }

    /// Every PodDisruptionBudget, ordered by namespace and name (none unless
    /// [`Tracked::DisruptionBudgets`] is tracked).
    pub fn disruption_budgets(&self) -> impl Iterator<Item = &Arc<DisruptionBudgetModel>> {
        self.disruption_budgets.values()
    }

    /// The objects of Dynamic Resource Allocation held (none unless
    /// [`Tracked::DynamicResources`] is tracked).
    pub fn dynamic_resources(&self) -> &DynamicResources {
        &self.dynamic_resources
    }

    fn dynamic_resources_mut(&mut self) -> Option<&mut DynamicResources> {
        if !self.tracked.contains(Tracked::DynamicResources) {
            return None;
        }
        self.generation += 1;
        Some(&mut self.dynamic_resources)
    }

    /// Records a DeviceClass (added or changed).
    pub fn upsert_device_class(&mut self, class: DeviceClassModel) {
        if let Some(d) = self.dynamic_resources_mut() {
            d.upsert_class(class);
        }
    }

    /// Forgets a DeviceClass.
    pub fn remove_device_class(&mut self, name: &str) {
        if let Some(d) = self.dynamic_resources_mut() {
            d.remove_class(name);
        }
    }

    /// Records a ResourceSlice (added or changed).
    pub fn upsert_resource_slice(&mut self, slice: SliceModel) {
        if let Some(d) = self.dynamic_resources_mut() {
            d.upsert_slice(slice);
        }
    }

    /// Forgets a ResourceSlice.
    pub fn remove_resource_slice(&mut self, name: &str) {
        if let Some(d) = self.dynamic_resources_mut() {
            d.remove_slice(name);
        }
    }

    /// Records a ResourceClaim (added or changed).
    pub fn upsert_resource_claim(&mut self, claim: ResourceClaimModel) {
        if let Some(d) = self.dynamic_resources_mut() {
            d.upsert_claim(claim);
        }
    }

    /// Forgets a ResourceClaim.
    pub fn remove_resource_claim(&mut self, namespace: &str, name: &str) {
        if let Some(d) = self.dynamic_resources_mut() {
            d.remove_claim(namespace, name);
        }
    }

    /// The storage objects held (empty unless [`Tracked::Volumes`] is tracked).
    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    fn storage_mut(&mut self) -> Option<&mut Storage> {
        if !self.tracked.contains(Tracked::Volumes) {
            return None;
        }
        self.generation += 1;
        Some(&mut self.storage)
    }

    /// Records a PersistentVolumeClaim (added or changed).
    pub fn upsert_claim(&mut self, claim: ClaimModel) {
        if let Some(s) = self.storage_mut() {
            s.upsert_claim(claim);
        }
    }

    /// Forgets a PersistentVolumeClaim.
    pub fn remove_claim(&mut self, namespace: &str, name: &str) {
        if let Some(s) = self.storage_mut() {
            s.remove_claim(namespace, name);
        }
    }

    /// Records a PersistentVolume (added or changed).
    pub fn upsert_volume(&mut self, volume: VolumeModel) {
        if let Some(s) = self.storage_mut() {
            s.upsert_volume(volume);
        }
    }

    /// Forgets a PersistentVolume.
    pub fn remove_volume(&mut self, name: &str) {
        if let Some(s) = self.storage_mut() {
            s.remove_volume(name);
        }
    }

    /// Records a StorageClass (added or changed).
    pub fn upsert_storage_class(&mut self, class: StorageClassModel) {
        if let Some(s) = self.storage_mut() {
            s.upsert_class(class);
        }
    }

    /// Forgets a StorageClass.
    pub fn remove_storage_class(&mut self, name: &str) {
        if let Some(s) = self.storage_mut() {
            s.remove_class(name);
        }
    }

    /// Records a CSINode (added or changed).
    pub fn upsert_csi_node(&mut self, node: CsiNodeModel) {
        if let Some(s) = self.storage_mut() {
            s.upsert_csi_node(node);
        }
    }

    /// Forgets a CSINode.
    pub fn remove_csi_node(&mut self, name: &str) {
        if let Some(s) = self.storage_mut() {
            s.remove_csi_node(name);
        }
    }

    /// Records a CSIDriver (added or changed).
    pub fn upsert_csi_driver(&mut self, driver: CsiDriverModel) {
        if let Some(s) = self.storage_mut() {
            s.upsert_csi_driver(driver);
        }
    }

    /// Forgets a CSIDriver.
    pub fn remove_csi_driver(&mut self, name: &str) {
        if let Some(s) = self.storage_mut() {
            s.remove_csi_driver(name);
        }
    }

    /// Records a CSIStorageCapacity (added or changed).
    pub fn upsert_capacity(&mut self, capacity: StorageCapacityModel) {
        if let Some(s) = self.storage_mut() {
            s.upsert_capacity(capacity);
        }
    }

    /// Records that the API server does not serve CSIStorageCapacity (before Kubernetes
    /// 1.24): drivers' capacity reports cannot be read, so provisioning is not held to them.
    pub fn set_capacities_not_served(&mut self) {
        if let Some(s) = self.storage_mut() {
            s.set_capacities_not_served();
        }
    }

    /// Forgets a CSIStorageCapacity.
    pub fn remove_capacity(&mut self, namespace: &str, name: &str) {
        if let Some(s) = self.storage_mut() {
            s.remove_capacity(namespace, name);
        }
    }

    /// Records a PodDisruptionBudget (added or changed); ignored unless
    /// [`Tracked::DisruptionBudgets`] is tracked.
    pub fn upsert_disruption_budget(&mut self, budget: DisruptionBudgetModel) {
        if !self.tracked.contains(Tracked::DisruptionBudgets) {
            return;
        }
        let key = (budget.namespace.clone(), budget.name.clone());
        self.disruption_budgets.insert(key, Arc::new(budget));
        self.generation += 1;
    }

    /// Forgets a PodDisruptionBudget (deleted, or no longer readable).
    pub fn remove_disruption_budget(&mut self, namespace: &str, name: &str) {
        if !self.tracked.contains(Tracked::DisruptionBudgets) {
            return;
        }
        let key = (namespace.to_string(), name.to_string());
        if self.disruption_budgets.remove(&key).is_some() {
            self.generation += 1;
        }
    }

    /// Records a pod known to exist, pending or placed, as a member of the group its label
    /// names (or of none); ignored unless [`Tracked::PodGroups`] is tracked.
    pub fn note_pod(&mut self, pod: &PodInfo) {
        if !self.tracked.contains(Tracked::PodGroups) {
            return;
        }
        let key = PodName::new(&pod.namespace, &pod.name);
        let group = group_of(pod);
        if let Some(old) = self.group_of_pod.get(&key)
            && Some(&**old) != group
        {
            self.pod_groups
                .remove_member(&pod.namespace, &pod.name, old);
            self.group_of_pod.remove(&key);
        }
        let Some(group) = group else {
            return;
        };
        let member = Member {
            placed: self.pods.contains_key(&key),
            gated: !pod.scheduling_gates.is_empty(),
        };
        self.pod_groups.set_member(pod, group, member);
        self.group_of_pod.insert(key, group.into());
        self.generation += 1;
    }

    /// Forgets the pod `namespace/name` as a group member (it was deleted).
    pub fn forget_member(&mut self, namespace: &str, name: &str) {
        if let Some(group) = self.group_of_pod.remove(lookup(namespace, name).as_str()) {
            self.pod_groups.remove_member(namespace, name, &group);
            self.generation += 1;
        }
    }

    fn set_placed(&mut self, pod: &PodInfo, placed: bool) {
        if !self.tracked.contains(Tracked::PodGroups) {
            return;
        }
        let Some(group) = group_of(pod) else {
            return;
        };
        let gated = self.pod_groups.member(pod, group).is_some_and(|m| m.gated);
        self.pod_groups
            .set_member(pod, group, Member { placed, gated });
        self.group_of_pod
            .insert(PodName::new(&pod.namespace, &pod.name), group.into());
    }

    /// Records a PodGroup (added or changed); ignored unless [`Tracked::PodGroups`] is
    /// tracked.
    pub fn upsert_pod_group(&mut self, group: PodGroupModel) {
        if !self.tracked.contains(Tracked::PodGroups) {
            return;
        }
        self.pod_groups.upsert_group(group);
        self.generation += 1;
    }

    /// Forgets a PodGroup (deleted).
    pub fn remove_pod_group(&mut self, namespace: &str, name: &str) {
        if self.tracked.contains(Tracked::PodGroups)
            && self.pod_groups.remove_group(namespace, name)
        {
            self.generation += 1;
        }
    }

    /// Forgets a PodGroup that cannot be read, keeping why for its pods' messages.
    pub fn pod_group_unreadable(&mut self, namespace: &str, name: &str, error: &str) {
        if self.tracked.contains(Tracked::PodGroups) {
            self.pod_groups.set_unreadable(namespace, name, error);
            self.generation += 1;
        }
    }

    /// PodGroups and their pods.
    pub fn pod_groups(&self) -> &PodGroups {
        &self.pod_groups
    }

    /// Assumes the volume decisions of a pod just placed (see [`Storage`]); on an error
    /// nothing stays assumed.
    pub fn assume_volumes(&mut self, decisions: &[VolumeDecision]) -> Result<(), String> {
        let Some(s) = self.storage_mut() else {
            return Ok(());
        };
        let result = s.assume(decisions);
        if result.is_err() {
            s.revert(decisions);
        }
        result
    }

    /// Drops the volume decisions of a pod whose binding failed or that went away.
    pub fn forget_volumes(&mut self, decisions: &[VolumeDecision]) {
        if let Some(s) = self.storage_mut() {
            s.revert(decisions);
        }
    }

    /// Brings `snapshot` up to date, replacing only the nodes that changed since the last call.
    /// The cache tracks changes for one snapshot: keep one per scheduler.
    pub fn update_snapshot(&mut self, snapshot: &mut Snapshot) {
        snapshot.namespaces = self.namespaces.clone();
        snapshot.workloads = self.workloads.clone();
        snapshot.image_nodes = self.image_nodes.clone();
        snapshot.storage = self.storage.clone();
        snapshot.dynamic_resources = self.dynamic_resources.clone();
        snapshot.disruption_budgets = self.disruption_budgets.clone();
        snapshot.pod_groups = self.pod_groups.clone();
        snapshot.generation = self.generation;
        snapshot.untracked = self.tracked.complement();
        if self.list_changed || snapshot.nodes.len() != self.order.len() {
            self.rebuild(snapshot);
        } else {
            let mut nodes_changed = false;
            let track_pods = self.tracked.contains(Tracked::PodLabels);
            for name in self.dirty.drain() {
                let (Some(&i), Some(entry)) = (snapshot.index.get(&name), self.nodes.get(&name))
                else {
                    continue;
                };
                let old = &snapshot.nodes[i];
                let (was, is) = (&old.node, &entry.info.node);
                nodes_changed |= !Arc::ptr_eq(was, is)
                    && (was.labels != is.labels
                        || was.taints != is.taints
                        || was.unschedulable != is.unschedulable);
                if track_pods {
                    set_membership(
                        &mut snapshot.with_affinity,
                        i,
                        entry.info.pods_with_affinity > 0,
                    );
                    set_membership(
                        &mut snapshot.with_required_anti_affinity,
                        i,
                        entry.info.pods_with_required_anti_affinity > 0,
                    );
                }
                snapshot.rows[i] = NodeRow::of(&entry.info);
                snapshot.name_hashes[i] = entry.info.node.name_hash;
                snapshot.nodes[i] = entry.info.clone();
                let count = snapshot.nodes.len();
                snapshot.changes.record(self.generation, i, count);
            }
            if nodes_changed {
                snapshot.domains = Default::default();
            }
            for (pod, node, placed) in self.pod_changes.drain(..) {
                match (placed, snapshot.index.get(&node)) {
                    (true, Some(&i)) => snapshot.pods.insert(&pod, i),
                    (false, Some(_)) => snapshot.pods.remove(&pod),
                    (_, None) => {}
                }
            }
        }
    }

    fn rebuild(&mut self, snapshot: &mut Snapshot) {
        // Every node was marked when the cluster was listed: the set is given back, not
        // kept at that size, since the refreshes that follow each empty it (and an empty
        // set of thousands of buckets is cleared bucket by bucket every time).
        self.dirty = HashSet::new();
        self.list_changed = false;
        snapshot.nodes = zone_interleaved(&self.order, |n| &self.nodes[n].info.node.labels)
            .into_iter()
            .map(|n| self.nodes[n].info.clone())
            .collect();
        snapshot.index = snapshot
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.node.name.clone(), i))
            .collect();
        snapshot.rows = snapshot.nodes.iter().map(|n| NodeRow::of(n)).collect();
        snapshot.name_hashes = snapshot.nodes.iter().map(|n| n.node.name_hash).collect();
        snapshot.changes.lay_out(self.generation);
        snapshot.domains = Default::default();
        self.pod_changes.clear();
        snapshot.pods.clear();
        if !self.tracked.contains(Tracked::PodLabels) {
            return;
        }
        rebuild_affinity_lists(snapshot);
        for (i, n) in snapshot.nodes.iter().enumerate() {
            for pod in &n.pods {
                snapshot.pods.insert(pod, i);
            }
        }
    }
}

/// Puts `position` into the sorted list `positions` or takes it out, as `member` says: a
/// node gaining or losing its first pod with affinity terms changes one entry, without a
/// pass over every node.
fn set_membership(positions: &mut Vec<usize>, position: usize, member: bool) {
    match (positions.binary_search(&position), member) {
        (Err(at), true) => positions.insert(at, position),
        (Ok(at), false) => {
            positions.remove(at);
        }
        _ => {}
    }
}

fn rebuild_affinity_lists(snapshot: &mut Snapshot) {
    snapshot.with_affinity.clear();
    snapshot.with_required_anti_affinity.clear();
    for (i, n) in snapshot.nodes.iter().enumerate() {
        if n.pods_with_affinity > 0 {
            snapshot.with_affinity.push(i);
        }
        if n.pods_with_required_anti_affinity > 0 {
            snapshot.with_required_anti_affinity.push(i);
        }
    }
}

fn placeholder(name: &Arc<str>) -> NodeModel {
    NodeModel {
        name_hash: crate::model::node::name_hash(name),
        name: name.clone(),
        labels: Labels::default(),
        annotations: Labels::default(),
        taints: Vec::new(),
        unschedulable: false,
        allocatable: Default::default(),
        images: Vec::new(),
        gpu: Default::default(),
        declared_features: Box::default(),
    }
}

/// The zone key kube-scheduler groups nodes by: region and zone, empty when neither is set.
pub fn zone_key(labels: &Labels) -> String {
    let region = labels
        .get(REGION_LABEL)
        .or_else(|| labels.get("failure-domain.beta.kubernetes.io/region"))
        .unwrap_or("");
    let zone = labels
        .get(ZONE_LABEL)
        .or_else(|| labels.get("failure-domain.beta.kubernetes.io/zone"))
        .unwrap_or("");
    if region.is_empty() && zone.is_empty() {
        String::new()
    } else {
        format!("{region}:\x00:{zone}")
    }
}

/// Orders nodes by taking one node from each zone in turn (zones in order of first
/// appearance, nodes in arrival order), so that a cycle that stops early still sees every
/// zone. kube-scheduler's node tree does the same.
fn zone_interleaved<'a>(
    order: &'a [Arc<str>],
    labels: impl Fn(&Arc<str>) -> &'a Labels,
) -> Vec<&'a Arc<str>> {
    let mut zones: Vec<(String, Vec<&Arc<str>>)> = Vec::new();
    let mut zone_index: HashMap<String, usize> = HashMap::new();
    for name in order {
        let key = zone_key(labels(name));
        let i = *zone_index.entry(key.clone()).or_insert_with(|| {
            zones.push((key, Vec::new()));
            zones.len() - 1
        });
        zones[i].1.push(name);
    }
    let mut out = Vec::with_capacity(order.len());
    let mut round = 0;
    while out.len() < order.len() {
        for (_, nodes) in &zones {
            if let Some(n) = nodes.get(round) {
                out.push(*n);
            }
        }
        round += 1;
    }
    out
}

#[cfg(test)]
mod tests;
