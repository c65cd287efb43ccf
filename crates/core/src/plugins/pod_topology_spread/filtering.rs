//! Hard constraints (`DoNotSchedule`): PreFilter counts the matching pods of every eligible
//! domain once per cycle; Filter checks one node's skew against those counts.

use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;

use crate::cache::{Matched, Namespaces, NodeInfo, Snapshot, TopologyValues};
use crate::framework::{
    CycleState, DomainVerdict, FilterPlugin, NodeBlock, PreFilterExtensions, PreFilterPlugin,
    PreFilterResult, Status,
};
use crate::model::pod::{InclusionPolicy, WhenUnsatisfiable};
use crate::model::selector::LabelSelector;
use crate::model::{Labels, PodInfo};

use super::{
    Constraint, ERR_REASON_CONSTRAINTS_NOT_MATCH, ERR_REASON_NODE_LABEL_NOT_MATCH, Inclusion,
    PodTopologySpread,
};

/// What Filter needs of one hard constraint, computed at PreFilter.
#[derive(Debug, Clone)]
struct HardConstraint {
    topology_key: String,
    max_skew: i64,
    /// 1 when the incoming pod matches the constraint's selector itself, else 0.
    self_match: i64,
    /// Matching pods per eligible domain (label value), zero-count domains included.
    counts: HashMap<Box<str>, i64>,
    /// The key's value on every node of the cycle's snapshot, by position.
    values: Arc<TopologyValues>,
    /// `counts` by value number (0 for a value that is no eligible domain), kept in step with
    /// `counts`: what Filter reads for a node given by position.
    by_value: Vec<i64>,
    /// The global minimum: the smallest domain count, or 0 when there are fewer eligible
    /// domains than `minDomains`.
    min_match: i64,
    /// The constraint's selector, for pods added or removed later in the cycle.
    selector: LabelSelector,
    /// `minDomains` (1 when unset).
    min_domains: i32,
}

impl HardConstraint {
    /// The count of the domain with value number `id` (0 for an ineligible one).
    fn count_of(&self, id: u32) -> i64 {
        self.by_value.get(id as usize).copied().unwrap_or(0)
    }

    /// The verdict on a node whose value of the key is `value` (`None`: the node lacks it).
    fn check(&self, count: Option<i64>) -> Result<(), Status> {
        match count {
            None => Err(Status::unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH)),
            Some(count) if self.too_skewed(count) => {
                Err(Status::unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH))
            }
            Some(_) => Ok(()),
        }
    }

    /// True when placing the pod in a domain holding `count` matching pods would exceed
    /// `maxSkew`.
    fn too_skewed(&self, count: i64) -> bool {
        count + self.self_match - self.min_match > self.max_skew
    }

    /// [`HardConstraint::check`] for every node of the cycle's snapshot, by domain.
    fn domain_verdict(&self) -> DomainVerdict {
        DomainVerdict {
            values: self.values.clone(),
            by_value: (0..self.values.values.len())
                .map(|id| {
                    if self.too_skewed(self.count_of(id as u32)) {
                        2
                    } else {
                        0
                    }
                })
                .collect(),
            without: 1,
            rejections: vec![
                Status::unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH),
                Status::unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH),
            ],
        }
    }

    fn global_min(counts: &HashMap<Box<str>, i64>, min_domains: i32) -> i64 {
        if counts.len() < usize::try_from(min_domains).unwrap_or(0) {
            0
        } else {
            counts
                .values()
                .copied()
                .min()
                .unwrap_or(i64::from(i32::MAX))
        }
    }
}

/// The per-cycle state of the hard constraints.
#[derive(Debug, Clone)]
pub(super) struct PreFilterState {
    constraints: Vec<HardConstraint>,
}

impl PodTopologySpread {
    /// Counts, for every hard constraint, the matching pods per topology domain over the
    /// eligible nodes: all nodes of the snapshot that carry every hard constraint's key and
    /// pass the constraint's node inclusion policies. `None` when there is no hard constraint.
    fn pre_filter_state(&self, pod: &PodInfo, snapshot: &Snapshot) -> Option<PreFilterState> {
        let constraints = self.constraints(pod, snapshot, WhenUnsatisfiable::DoNotSchedule);
        if constraints.is_empty() {
            return None;
        }
        let keys: Vec<&str> = constraints
            .iter()
            .map(|c| c.spec.topology_key.as_str())
            .collect();
        let key_values: Vec<Arc<TopologyValues>> =
            keys.iter().map(|k| snapshot.topology_values(k)).collect();
        let mut counts = eligible_domains(pod, snapshot, &constraints, &keys);
        for (own, (c, domains)) in constraints.iter().zip(counts.iter_mut()).enumerate() {
            count_pods(pod, snapshot, c, own, &keys, &key_values, domains);
        }
        let constraints = constraints
            .into_iter()
            .zip(counts)
            .zip(key_values)
            .map(|((c, counts), values)| {
                let min_domains = c.spec.min_domains.unwrap_or(1);
                let by_value = values
                    .values
                    .iter()
                    .map(|v| counts.get(v).copied().unwrap_or(0))
                    .collect();
                HardConstraint {
                    values,
                    by_value,
                    topology_key: c.spec.topology_key.clone(),
                    max_skew: i64::from(c.spec.max_skew),
                    self_match: i64::from(c.selector.matches(&pod.labels)),
                    min_match: HardConstraint::global_min(&counts, min_domains),
                    counts,
                    selector: c.selector.into_owned(),
                    min_domains,
                }
            })
            .collect();
        Some(PreFilterState { constraints })
    }
}

/// For each constraint, its eligible domains with a count of 0. The domains of the nodes
/// that carry every key come from the snapshot's cache; the nodes the inclusion policies
/// leave out are then taken away: with the pod's node affinity honoured, by looking at every
/// node, else only at the tainted nodes, the only ones a taint policy can leave out.
fn eligible_domains(
    pod: &PodInfo,
    snapshot: &Snapshot,
    constraints: &[Constraint<'_>],
    keys: &[&str],
) -> Vec<HashMap<Box<str>, i64>> {
    let affinity_matters = (!pod.node_selector.is_empty() || pod.required_node_affinity.is_some())
        && constraints
            .iter()
            .any(|c| c.spec.node_affinity_policy == InclusionPolicy::Honor);
    if affinity_matters {
        let mut counts = vec![HashMap::default(); constraints.len()];
        let mut values: Vec<&str> = Vec::with_capacity(constraints.len());
        for node in snapshot.nodes() {
            if !node.node.labels.values_of(keys, &mut values) {
                continue;
            }
            let mut inclusion = Inclusion::new(pod, &node.node);
            for ((c, domains), &value) in constraints.iter().zip(counts.iter_mut()).zip(&values) {
                if inclusion.admits(c.spec.node_affinity_policy, c.spec.node_taints_policy)
                    && !domains.contains_key(value)
                {
                    domains.insert(value.into(), 0);
                }
            }
        }
        return counts;
    }
    let topology = snapshot.topology_domains(keys);
    constraints
        .iter()
        .zip(&topology.nodes_per_value)
        .zip(keys)
        .map(|((c, nodes_per_value), key)| {
            let mut left: Option<HashMap<&str, usize>> = None;
            if c.spec.node_taints_policy == InclusionPolicy::Honor {
                for &i in &topology.tainted {
                    let node = &snapshot.nodes()[i].node;
                    if Inclusion::new(pod, node)
                        .admits(InclusionPolicy::Ignore, InclusionPolicy::Honor)
                    {
                        continue;
                    }
                    if let Some(value) = node.labels.get(key) {
                        let left = left.get_or_insert_with(|| {
                            nodes_per_value.iter().map(|(v, n)| (&**v, *n)).collect()
                        });
                        if let Some(n) = left.get_mut(value) {
                            *n -= 1;
                        }
                    }
                }
            }
            match left {
                Some(left) => left
                    .into_iter()
                    .filter(|(_, n)| *n > 0)
                    .map(|(v, _)| (v.into(), 0))
                    .collect(),
                None => nodes_per_value.keys().map(|v| (v.clone(), 0)).collect(),
            }
        })
        .collect()
}

/// Adds to `domains` the pods matching the constraint on its eligible nodes: the pods the
/// snapshot's index names for the selector, or every pod when the selector requires no
/// particular label. `keys[own]` is the constraint's key. Nodes are read by position from
/// the snapshot's topology values (`key_values`, one per key of `keys`), not by their
/// labels: a node's memory is touched only when an inclusion policy must look at it, and
/// each domain is looked up by name once, not once per pod.
fn count_pods(
    pod: &PodInfo,
    snapshot: &Snapshot,
    c: &Constraint<'_>,
    own: usize,
    keys: &[&str],
    key_values: &[Arc<TopologyValues>],
    domains: &mut HashMap<Box<str>, i64>,
) {
    let looks_at_node = c.spec.node_taints_policy == InclusionPolicy::Honor
        || (c.spec.node_affinity_policy == InclusionPolicy::Honor
            && (!pod.node_selector.is_empty() || pod.required_node_affinity.is_some()));
    // Matching pods per value number of the constraint's key.
    let mut found: HashMap<u32, i64> = HashMap::default();
    let nodes = snapshot.nodes();
    let add = |existing: Matched<'_>| {
        if existing.terminating {
            return;
        }
        let Some(own_id) = domain_of(existing.node, nodes, keys, key_values, own) else {
            return;
        };
        if looks_at_node
            && !Inclusion::new(pod, &nodes[existing.node].node)
                .admits(c.spec.node_affinity_policy, c.spec.node_taints_policy)
        {
            return;
        }
        *found.entry(own_id).or_default() += 1;
    };
    snapshot.for_each_match(&c.selector, Namespaces::One(&pod.namespace), add);
    let values = &key_values[own];
    for (id, n) in found {
        // A value no eligible node has is no domain.
        if let Some(total) = values
            .values
            .get(id as usize)
            .and_then(|value| domains.get_mut(value))
        {
            *total += n;
        }
    }
}

/// The value number of `keys[own]` on the node at `position`, when the node carries every
/// one of `keys`; read from the snapshot's numbering, or from the node's labels for a node
/// the numbering does not cover (then `None` also for a value no numbered node has: no
/// eligible domain).
fn domain_of(
    position: usize,
    nodes: &[Arc<NodeInfo>],
    keys: &[&str],
    key_values: &[Arc<TopologyValues>],
    own: usize,
) -> Option<u32> {
    let mut own_id = None;
    for (i, values) in key_values.iter().enumerate() {
        match values.at(position) {
            Some(TopologyValues::NONE) => return None,
            Some(id) if i == own => own_id = Some(id),
            Some(_) => {}
            None => {
                let labels = &nodes[position].node.labels;
                if !keys.iter().all(|k| labels.contains_key(k)) {
                    return None;
                }
                return labels.get(keys[own]).and_then(|v| key_values[own].id_of(v));
            }
        }
    }
    own_id
}

impl PreFilterState {
    /// Counts `other` (on a node with `node_labels`) `delta` times in the domains it is in,
    /// as kube-scheduler does when a pod is added to or removed from a node within a cycle:
    /// only pods of the incoming pod's namespace, on nodes carrying every constraint's key.
    /// Unlike kube-scheduler, a domain that was not eligible is not made one, and a
    /// terminating pod (never counted) is not taken off.
    fn update_with_pod(
        &mut self,
        pod: &PodInfo,
        other: &PodInfo,
        node_labels: &Labels,
        delta: i64,
    ) {
        if other.namespace != pod.namespace
            || other.terminating
            || !self
                .constraints
                .iter()
                .all(|c| node_labels.contains_key(&c.topology_key))
        {
            return;
        }
        for c in &mut self.constraints {
            if !c.selector.matches(&other.labels) {
                continue;
            }
            let Some(value) = node_labels.get(&c.topology_key) else {
                continue;
            };
            if let Some(count) = c.counts.get_mut(value) {
                *count += delta;
                if let Some(by_value) = c
                    .values
                    .id_of(value)
                    .and_then(|id| c.by_value.get_mut(id as usize))
                {
                    *by_value = *count;
                }
                c.min_match = HardConstraint::global_min(&c.counts, c.min_domains);
            }
        }
    }
}

impl PreFilterExtensions for PodTopologySpread {
    fn add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        added: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        if let Some(s) = state.get_mut::<PreFilterState>() {
            s.update_with_pod(pod, added, &node.node.labels, 1);
        }
        Status::success()
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        removed: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        if let Some(s) = state.get_mut::<PreFilterState>() {
            s.update_with_pod(pod, removed, &node.node.labels, -1);
        }
        Status::success()
    }
}

impl PreFilterPlugin for PodTopologySpread {
    /// Skips the plugin's Filter when the pod has no hard constraint.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        match self.pre_filter_state(pod, snapshot) {
            Some(s) => {
                state.insert(s);
                (PreFilterResult::default(), Status::success())
            }
            None => (PreFilterResult::default(), Status::skip()),
        }
    }
}

impl FilterPlugin for PodTopologySpread {
    /// Rejects the node when it lacks a hard constraint's topology label (unresolvable), or
    /// when its domain's count, plus one if the pod matches the selector itself, minus the
    /// global minimum exceeds `maxSkew`. Constraints are checked in order; the first failure
    /// wins.
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.get::<PreFilterState>() else {
            return Status::error(
                "reading \"PreFilterPodTopologySpread\" from cycleState: not found",
            );
        };
        let labels = &node.node.labels;
        for c in &s.constraints {
            let count = labels
                .get(&c.topology_key)
                .map(|value| c.counts.get(value).copied().unwrap_or(0));
            if let Err(rejection) = c.check(count) {
                return rejection;
            }
        }
        Status::success()
    }

    /// Every hard constraint's verdict per domain of its key, from PreFilter's counts.
    fn verdict_by_domain(
        &self,
        state: &CycleState,
        _pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> Option<Vec<DomainVerdict>> {
        let s = state.get::<PreFilterState>()?;
        Some(
            s.constraints
                .iter()
                .map(HardConstraint::domain_verdict)
                .collect(),
        )
    }

    /// Reads each node's domain count by its position, without looking its labels up.
    fn filter_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        block: NodeBlock<'_>,
        statuses: &mut [Status],
    ) -> usize {
        let Some(s) = state.get::<PreFilterState>() else {
            for (node, status) in block.nodes.iter().zip(statuses.iter_mut()) {
                *status = self.filter(state, pod, node);
            }
            return statuses.len();
        };
        let mut rejected = 0;
        for ((node, &position), status) in block
            .nodes
            .iter()
            .zip(block.positions)
            .zip(statuses.iter_mut())
        {
            if !status.is_success() {
                continue;
            }
            for c in &s.constraints {
                let count = match c.values.at(position) {
                    Some(TopologyValues::NONE) => None,
                    Some(id) => Some(c.count_of(id)),
                    None => node
                        .node
                        .labels
                        .get(&c.topology_key)
                        .map(|value| c.counts.get(value).copied().unwrap_or(0)),
                };
                if let Err(rejection) = c.check(count) {
                    *status = rejection;
                    rejected += 1;
                    break;
                }
            }
        }
        rejected
    }
}
