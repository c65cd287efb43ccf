//! An immutable view of the cluster for one scheduling cycle.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rustc_hash::FxHashMap;

use crate::model::Labels;
use crate::model::disruption_budget::DisruptionBudgetModel;
use crate::model::selector::LabelSelector;
use crate::model::taint::TaintEffect;

use super::node_info::{NodeInfo, NodeRow};
use super::pod_groups::PodGroups;
use super::pod_index::{Matched, Namespaces, PodIndex};
use super::storage::{CsiNodes, Storage};
use super::tracked::{Tracked, TrackedSet};
use super::workloads::Workloads;

/// The cluster as one cycle sees it: nodes (with their pods) in a fixed order that interleaves
/// zones, as kube-scheduler's node tree does, plus the namespace labels, workload selectors,
/// storage and disruption budgets plugins need. Cheap to refresh: only nodes changed since the last refresh are replaced.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub(super) nodes: Vec<Arc<NodeInfo>>,
    /// Each node's [`NodeRow`], by position.
    pub(super) rows: Vec<NodeRow>,
    /// Each node's name hash, by position: the rows' own, apart, for the tie-break that
    /// reads them for thousands of nodes with equal totals.
    pub(super) name_hashes: Vec<u64>,
    /// Node name to position; looked up for every rejected node by preemption and by the
    /// explanation of a failed attempt, hence the fast (Fx) hash.
    pub(super) index: FxHashMap<Arc<str>, usize>,
    pub(super) with_affinity: Vec<usize>,
    pub(super) with_required_anti_affinity: Vec<usize>,
    pub(super) namespaces: Arc<HashMap<String, Labels>>,
    pub(super) workloads: Arc<Workloads>,
    pub(super) image_nodes: Arc<HashMap<String, usize>>,
    pub(super) pods: PodIndex,
    pub(super) storage: Storage,
    pub(super) dynamic_resources: super::DynamicResources,
    pub(super) disruption_budgets: DisruptionBudgets,
    pub(super) pod_groups: PodGroups,
    /// Domains and values of the topology keys asked so far; replaced (not cleared: an older
    /// snapshot may share it) whenever a node is added, removed, relabelled, tainted or
    /// cordoned.
    pub(super) domains: Arc<Mutex<DomainCache>>,
    pub(super) generation: u64,
    pub(super) now: Duration,
    /// The parts the cache does not keep (empty in a snapshot not filled by a cache).
    pub(super) untracked: TrackedSet,
    /// Which positions each refresh replaced (see [`ChangeLog`]).
    pub(super) changes: ChangeLog,
}

impl Snapshot {
    /// Notes a read of `part`: reading a part the cache does not keep is a plugin that did
    /// not declare it in `Plugin::cache_state`, and sees it empty.
    fn reads(&self, part: Tracked) {
        debug_assert!(
            !self.untracked.contains(part),
            "a plugin reads {part}, which no plugin of the profiles declared (Plugin::cache_state)"
        );
    }

    /// Nodes in scheduling order.
    pub fn nodes(&self) -> &[Arc<NodeInfo>] {
        &self.nodes
    }

    /// Each node's [`NodeRow`], in the order of [`Snapshot::nodes`].
    pub fn rows(&self) -> &[NodeRow] {
        &self.rows
    }

    /// Each node's [`crate::model::NodeModel::name_hash`], by position (as in its row),
    /// contiguous.
    pub fn name_hashes(&self) -> &[u64] {
        &self.name_hashes
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when the cluster has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The node named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<NodeInfo>> {
        self.index.get(name).map(|&i| &self.nodes[i])
    }

    /// Position of the node named `name` in [`Snapshot::nodes`].
    pub fn position(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// Nodes running at least one pod with pod affinity or anti-affinity terms.
    pub fn nodes_with_affinity_pods(&self) -> impl Iterator<Item = &Arc<NodeInfo>> {
        self.reads(Tracked::PodLabels);
        self.with_affinity.iter().map(|&i| &self.nodes[i])
    }

    /// Nodes running at least one pod with required anti-affinity terms.
    pub fn nodes_with_required_anti_affinity_pods(&self) -> impl Iterator<Item = &Arc<NodeInfo>> {
        self.reads(Tracked::PodLabels);
        self.with_required_anti_affinity
            .iter()
            .map(|&i| &self.nodes[i])
    }

    /// The placed pods by label (see [`PodIndex`]), positions as in [`Snapshot::nodes`].
    pub fn pod_index(&self) -> &PodIndex {
        self.reads(Tracked::PodLabels);
        &self.pods
    }

    /// Calls `f` with each placed pod of `namespaces` whose labels `selector` matches: the
    /// pods the index names for the selector, or every placed pod checked in turn when the
    /// selector requires no particular label.
    pub fn for_each_match(
        &self,
        selector: &LabelSelector,
        namespaces: Namespaces<'_>,
        mut f: impl FnMut(Matched<'_>),
    ) {
        self.reads(Tracked::PodLabels);
        if self.pods.for_each_match(selector, namespaces, &mut f) {
            return;
        }
        for (position, node) in self.nodes.iter().enumerate() {
            for pod in &node.pods {
                if namespaces.contains(&pod.namespace) && selector.matches(&pod.labels) {
                    f(Matched {
                        pod,
                        node: position,
                        terminating: pod.terminating,
                    });
                }
            }
        }
    }

    /// The topology domains of the nodes that carry every one of `keys`; computed once per
    /// node set and label change, then shared by the cycles that ask for the same keys.
    pub fn topology_domains(&self, keys: &[&str]) -> Arc<TopologyDomains> {
        let mut cache = self.domains.lock().unwrap_or_else(PoisonError::into_inner);
        // A profile asks for a handful of key lists at most: a scan beats hashing them.
        if let Some((_, d)) = cache.domains.iter().find(|(k, _)| k.iter().eq(keys.iter())) {
            return d.clone();
        }
        let mut nodes_per_value = vec![FxHashMap::<Box<str>, usize>::default(); keys.len()];
        let mut tainted = Vec::new();
        let mut values = Vec::with_capacity(keys.len());
        for (i, node) in self.nodes.iter().enumerate() {
            if !node.node.labels.values_of(keys, &mut values) {
                continue;
            }
            for (counts, value) in nodes_per_value.iter_mut().zip(&values) {
                match counts.get_mut(*value) {
                    Some(n) => *n += 1,
                    None => {
                        counts.insert((*value).into(), 1);
                    }
                }
            }
            if node
                .node
                .taints
                .iter()
                .any(|t| matches!(t.effect, TaintEffect::NoSchedule | TaintEffect::NoExecute))
            {
                tainted.push(i);
            }
        }
        let domains = Arc::new(TopologyDomains {
            nodes_per_value,
            tainted,
        });
        cache.domains.push((
            keys.iter().map(|k| k.to_string()).collect(),
            domains.clone(),
        ));
        domains
    }

    /// The value of topology key `key` on every node, as a number per position (see
    /// [`TopologyValues`]); computed once per node set and label change, then shared by the
    /// cycles that ask for the same key.
    pub fn topology_values(&self, key: &str) -> Arc<TopologyValues> {
        let mut cache = self.domains.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, v)) = cache.values.iter().find(|(k, _)| k == key) {
            return v.clone();
        }
        let mut values = TopologyValues::default();
        values.ids = self
            .nodes
            .iter()
            .map(|n| match n.node.labels.get(key) {
                Some(value) => values.intern(value),
                None => TopologyValues::NONE,
            })
            .collect();
        values.list_positions();
        let values = Arc::new(values);
        cache.values.push((key.to_string(), values.clone()));
        values
    }

    /// What the cycle may skip for every node at once (see [`NodeTraits`]); counted once
    /// per node set, label, taint and cordon change, then shared by the cycles.
    pub fn node_traits(&self) -> NodeTraits {
        let mut cache = self.domains.lock().unwrap_or_else(PoisonError::into_inner);
        *cache.traits.get_or_insert_with(|| {
            let mut traits = NodeTraits::default();
            for n in &self.nodes {
                traits.cordoned += usize::from(n.node.unschedulable);
                let taints = &n.node.taints;
                traits.hard_tainted +=
                    usize::from(taints.iter().any(|t| {
                        matches!(t.effect, TaintEffect::NoSchedule | TaintEffect::NoExecute)
                    }));
                traits.prefer_tainted += usize::from(
                    taints
                        .iter()
                        .any(|t| t.effect == TaintEffect::PreferNoSchedule),
                );
            }
            traits
        })
    }

    /// The lowest attach limit of each node's CSINode among its drivers, by position:
    /// `u32::MAX` for a node without a CSINode or without a limit. Computed once per node set
    /// and change of the CSINodes, then shared by the cycles, so that NodeVolumeLimits need
    /// not look every node's CSINode up by name for every pod.
    pub fn attach_limits(&self) -> Arc<[u32]> {
        self.reads(Tracked::Volumes);
        let csi_nodes = self.storage.csi_node_map();
        let mut cache = self.domains.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((seen, limits)) = &cache.attach_limits
            && seen.ptr_eq(csi_nodes)
        {
            return limits.clone();
        }
        let limits: Arc<[u32]> = self
            .nodes
            .iter()
            .map(|n| {
                csi_nodes
                    .get(&*n.node.name)
                    .and_then(|c| c.lowest_limit())
                    .unwrap_or(u32::MAX)
            })
            .collect();
        cache.attach_limits = Some((csi_nodes.clone(), limits.clone()));
        limits
    }

    /// Labels of a namespace (empty when the namespace is unknown).
    pub fn namespace_labels(&self, namespace: &str) -> &Labels {
        self.reads(Tracked::NamespaceLabels);
        static EMPTY: std::sync::OnceLock<Labels> = std::sync::OnceLock::new();
        self.namespaces
            .get(namespace)
            .unwrap_or_else(|| EMPTY.get_or_init(Labels::default))
    }

    /// All known namespaces with their labels.
    pub fn namespaces(&self) -> &HashMap<String, Labels> {
        self.reads(Tracked::NamespaceLabels);
        &self.namespaces
    }

    /// Services' and controllers' selectors.
    pub fn workloads(&self) -> &Workloads {
        self.reads(Tracked::Workloads);
        &self.workloads
    }

    /// Claims, volumes, storage classes and CSI nodes.
    pub fn storage(&self) -> &Storage {
        self.reads(Tracked::Volumes);
        &self.storage
    }

    /// DeviceClasses, ResourceSlices and ResourceClaims.
    pub fn dynamic_resources(&self) -> &super::DynamicResources {
        self.reads(Tracked::DynamicResources);
        &self.dynamic_resources
    }

    /// Every PodDisruptionBudget, ordered by namespace and name (read by DefaultPreemption,
    /// #20, to prefer victims whose eviction violates no budget).
    pub fn disruption_budgets(&self) -> impl Iterator<Item = &Arc<DisruptionBudgetModel>> {
        self.reads(Tracked::DisruptionBudgets);
        self.disruption_budgets.values()
    }

    /// PodGroups and the pods naming each (read by Coscheduling, #21).
    pub fn pod_groups(&self) -> &PodGroups {
        self.reads(Tracked::PodGroups);
        &self.pod_groups
    }

    /// On how many nodes the image (normalized name) is present.
    pub fn nodes_with_image(&self, image: &str) -> usize {
        self.reads(Tracked::ImageSpread);
        self.image_nodes.get(image).copied().unwrap_or(0)
    }

    /// The cache generation this snapshot reflects.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The positions the refreshes since the node list was last laid out replaced.
    pub fn changes(&self) -> &ChangeLog {
        &self.changes
    }

    /// The time of the cycle reading the snapshot, on the scheduler's clock (the driver's
    /// `now`): plugins judge the age of node load samples against it.
    pub fn now(&self) -> Duration {
        self.now
    }

    /// Sets the time of the cycle about to read the snapshot.
    pub fn set_now(&mut self, now: Duration) {
        self.now = now;
    }
}

/// The positions of the nodes each refresh of a snapshot replaced, since its node list was
/// last laid out: what a cycle keeps per node position between cycles (verdicts and scores
/// for pods asking the same resources) is brought up to date from it, node by changed node,
/// instead of over the whole cluster.
#[derive(Debug, Clone, Default)]
pub struct ChangeLog {
    /// The layout of the node list: a number drawn afresh (from a process-wide counter)
    /// whenever the list is laid out, so that positions recorded under another layout, or
    /// of another snapshot, are never taken for this one's.
    layout: u64,
    /// Every position replaced by a refresh to a generation above this one is recorded.
    complete_after: u64,
    /// (generation of the refresh, position), oldest first.
    replaced: Vec<(u64, u32)>,
}

/// Draws the number of a new layout.
fn next_layout() -> u64 {
    static LAYOUTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    LAYOUTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl ChangeLog {
    /// The current layout of the node list.
    pub fn layout(&self) -> u64 {
        self.layout
    }

    /// The positions replaced by refreshes to generations above `since` under `layout`, in
    /// refresh order (a position may come more than once); `None` when they are not known
    /// (another layout, or older than what the log keeps).
    pub fn since(&self, layout: u64, since: u64) -> Option<impl Iterator<Item = usize> + '_> {
        if layout != self.layout || since < self.complete_after {
            return None;
        }
        let first = self.replaced.partition_point(|&(g, _)| g <= since);
        Some(self.replaced[first..].iter().map(|&(_, p)| p as usize))
    }

    /// A new layout at `generation`: nothing replaced since.
    pub(super) fn lay_out(&mut self, generation: u64) {
        self.layout = next_layout();
        self.complete_after = generation;
        self.replaced.clear();
    }

    /// Records that the refresh to `generation` replaced the node at `position`. The log
    /// keeps some four times as many entries as there are `nodes` (at least 4,096); past
    /// that, the older half is forgotten, and whoever last looked before then starts over.
    pub(super) fn record(&mut self, generation: u64, position: usize, nodes: usize) {
        if self.replaced.len() >= (4 * nodes).max(4096) {
            let half = self.replaced[self.replaced.len() / 2].0;
            let keep = self.replaced.partition_point(|&(g, _)| g <= half);
            self.replaced.drain(..keep);
            self.complete_after = half;
        }
        let position = u32::try_from(position).unwrap_or(u32::MAX);
        self.replaced.push((generation, position));
    }
}

/// PodDisruptionBudgets by (namespace, name), as the cache and its snapshots share them: a
/// persistent map, whose clone is a pointer copy.
pub(super) type DisruptionBudgets = imbl::OrdMap<(String, String), Arc<DisruptionBudgetModel>>;

/// The topology domains computed so far, each with the key list it was asked for, and the
/// values of single keys.
#[derive(Debug, Default)]
pub(super) struct DomainCache {
    domains: Vec<(Vec<String>, Arc<TopologyDomains>)>,
    values: Vec<(String, Arc<TopologyValues>)>,
    traits: Option<NodeTraits>,
    /// [`Snapshot::attach_limits`], with the CSINodes it was computed from.
    attach_limits: Option<(CsiNodes, Arc<[u32]>)>,
}

/// How many nodes of a snapshot carry what some filters and scores look for on every node:
/// when none does, those plugins accept every node, or give every node the same score, and
/// the cycle need not ask them node by node (the Filter plugins' `passes_all`, the Score
/// plugins' `uniform_score`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeTraits {
    /// Nodes marked unschedulable (cordoned).
    pub cordoned: usize,
    /// Nodes with a `NoSchedule` or `NoExecute` taint.
    pub hard_tainted: usize,
    /// Nodes with a `PreferNoSchedule` taint.
    pub prefer_tainted: usize,
}

/// One topology key's value on every node of a snapshot, each distinct value numbered from
/// 0: plugins that count pods per domain keep their counts in a vector indexed by the number
/// and read a node's count by its position, without looking its labels up (Filter and Score
/// run on every node of every cycle).
#[derive(Debug, Default)]
pub struct TopologyValues {
    /// For each position of [`Snapshot::nodes`], the number of the node's value, or
    /// [`TopologyValues::NONE`] when the node lacks the key.
    pub ids: Vec<u32>,
    /// The values, by number.
    pub values: Vec<Box<str>>,
    index: FxHashMap<Box<str>, u32>,
    /// The positions of the nodes with each value, value after value: those of value `v`
    /// are `positions[starts[v]..starts[v + 1]]`.
    starts: Vec<u32>,
    positions: Vec<u32>,
}

impl TopologyValues {
    /// The number of a node without the key.
    pub const NONE: u32 = u32::MAX;

    /// Values a plugin works out for every node of a snapshot instead of reading a label
    /// (such as whether the node has room for a pod's volumes), for a Filter plugin's verdict
    /// by domain: `count` values, each named by its number, and `ids[p]` the number of the
    /// value of the node at position `p`.
    pub fn computed(count: u32, ids: Vec<u32>) -> TopologyValues {
        let values: Vec<Box<str>> = (0..count).map(|v| v.to_string().into()).collect();
        let index = values.iter().cloned().zip(0..count).collect();
        let mut values = TopologyValues {
            ids,
            values,
            index,
            starts: Vec::new(),
            positions: Vec::new(),
        };
        values.list_positions();
        values
    }

    /// The number of `value`, if some node has it.
    pub fn id_of(&self, value: &str) -> Option<u32> {
        self.index.get(value).copied()
    }

    /// The number of the value of the node at `position`; `None` when the position is
    /// beyond the snapshot this was computed on (a node copy made within a cycle), and
    /// `Some(NONE)` when the node lacks the key.
    pub fn at(&self, position: usize) -> Option<u32> {
        self.ids.get(position).copied()
    }

    /// The positions of the nodes whose value is number `id`, in ascending order.
    pub fn positions_of(&self, id: u32) -> &[u32] {
        let id = id as usize;
        match (self.starts.get(id), self.starts.get(id + 1)) {
            (Some(&from), Some(&to)) => &self.positions[from as usize..to as usize],
            _ => &[],
        }
    }

    /// Lists the positions of each value's nodes, once `ids` is complete.
    fn list_positions(&mut self) {
        let mut starts = vec![0u32; self.values.len() + 1];
        for &id in &self.ids {
            if let Some(n) = starts.get_mut(id as usize + 1) {
                *n += 1;
            }
        }
        for v in 1..starts.len() {
            starts[v] += starts[v - 1];
        }
        let mut next = starts.clone();
        let mut positions = vec![0u32; starts.last().copied().unwrap_or(0) as usize];
        for (p, &id) in self.ids.iter().enumerate() {
            if let Some(at) = next.get_mut(id as usize) {
                positions[*at as usize] = u32::try_from(p).unwrap_or(u32::MAX);
                *at += 1;
            }
        }
        self.starts = starts;
        self.positions = positions;
    }

    fn intern(&mut self, value: &str) -> u32 {
        if let Some(&id) = self.index.get(value) {
            return id;
        }
        let id = u32::try_from(self.values.len()).unwrap_or(Self::NONE - 1);
        self.values.push(value.into());
        self.index.insert(value.into(), id);
        id
    }
}

/// The domains of some topology keys over the nodes that carry all of them (see
/// [`Snapshot::topology_domains`]).
#[derive(Debug, Default)]
pub struct TopologyDomains {
    /// For each key, in the order asked: each value with its number of nodes.
    pub nodes_per_value: Vec<FxHashMap<Box<str>, usize>>,
    /// Positions of those nodes with a `NoSchedule` or `NoExecute` taint, the only ones a
    /// taint policy of `Honor` can leave out.
    pub tainted: Vec<usize>,
}
