//! PreFilter and Filter: required affinity and anti-affinity, both the incoming pod's and the
//! existing pods' (an existing pod's required anti-affinity keeps matching pods out of its
//! domain, whichever of the two arrived first).

use crate::cache::{NodeInfo, Snapshot, TopologyValues};
use crate::framework::{
    CycleState, DomainVerdict, FilterPlugin, PreFilterExtensions, PreFilterPlugin, PreFilterResult,
    Status,
};
use crate::model::{Labels, PodInfo};

use super::{IncomingTerm, InterPodAffinity, NamespaceScope, TopologyCounts};

/// A node in the domain of an existing pod whose required anti-affinity matches the pod.
pub const ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";
/// A node outside the domains of the pods the pod's required affinity asks for.
pub const ERR_REASON_AFFINITY_RULES_NOT_MATCH: &str = "node(s) didn't match pod affinity rules";
/// A node in the domain of a pod the pod's required anti-affinity rejects.
pub const ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH: &str =
    "node(s) didn't match pod anti-affinity rules";

/// Filter's message when PreFilter did not run (kube-scheduler's wording).
const MISSING_STATE: &str =
    "error reading \"PreFilterInterPodAffinity\" from cycleState: not found";

/// What PreFilter counts, per topology pair, for Filter.
#[derive(Debug, Clone)]
struct PreFilterState {
    /// Existing pods' required anti-affinity terms that match the incoming pod, counted at
    /// the pair of the existing pod's node.
    existing_anti_affinity: TopologyCounts,
    /// Existing pods matching all of the incoming pod's required affinity terms, counted once
    /// per term at the pair of their node.
    affinity: TopologyCounts,
    /// Existing pods matching each of the incoming pod's required anti-affinity terms.
    anti_affinity: TopologyCounts,
    /// The incoming pod matches all its own required affinity terms (it may start a group).
    matches_own_affinity: bool,
    /// The namespaces of each of the incoming pod's required affinity terms, then of its
    /// anti-affinity terms: pods added or removed later in the cycle are matched with them.
    affinity_scopes: Vec<NamespaceScope>,
    anti_scopes: Vec<NamespaceScope>,
    /// The labels of the incoming pod's namespace, for existing pods' namespace selectors.
    namespace_labels: Labels,
}

impl PreFilterState {
    /// Counts `other` (running on a node with `node_labels`) `delta` times: once more when
    /// added, once less when removed.
    fn update_with_pod(
        &mut self,
        pod: &PodInfo,
        other: &PodInfo,
        node_labels: &Labels,
        delta: i64,
    ) {
        for term in &other.affinity.required_anti {
            if term.matches(&pod.namespace, &pod.labels, &self.namespace_labels) {
                self.existing_anti_affinity
                    .update_on(node_labels, &term.topology_key, delta);
            }
        }
        let in_scope = |t: &crate::model::pod::AffinityTerm, s: &NamespaceScope| {
            s.contains(&other.namespace) && t.selector.matches(&other.labels)
        };
        let required = &pod.affinity.required;
        if !required.is_empty()
            && required
                .iter()
                .zip(&self.affinity_scopes)
                .all(|(t, s)| in_scope(t, s))
        {
            for t in required {
                self.affinity.update_on(node_labels, &t.topology_key, delta);
            }
        }
        for (t, s) in pod.affinity.required_anti.iter().zip(&self.anti_scopes) {
            if in_scope(t, s) {
                self.anti_affinity
                    .update_on(node_labels, &t.topology_key, delta);
            }
        }
    }
}

impl PreFilterPlugin for InterPodAffinity {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let existing_anti_affinity = existing_anti_affinity_counts(pod, snapshot);
        let affinity = &pod.affinity;
        if existing_anti_affinity.is_empty()
            && affinity.required.is_empty()
            && affinity.required_anti.is_empty()
        {
            return (PreFilterResult::default(), Status::skip());
        }
        let affinity_terms: Vec<IncomingTerm> = affinity
            .required
            .iter()
            .map(|t| IncomingTerm::new(t, snapshot))
            .collect();
        let anti_terms: Vec<IncomingTerm> = affinity
            .required_anti
            .iter()
            .map(|t| IncomingTerm::new(t, snapshot))
            .collect();
        let (affinity_counts, anti_counts) =
            incoming_counts(&affinity_terms, &anti_terms, snapshot);
        state.insert(PreFilterState {
            existing_anti_affinity,
            affinity: affinity_counts,
            anti_affinity: anti_counts,
            matches_own_affinity: matches_all(&affinity_terms, pod),
            affinity_scopes: affinity_terms.into_iter().map(|t| t.namespaces).collect(),
            anti_scopes: anti_terms.into_iter().map(|t| t.namespaces).collect(),
            namespace_labels: snapshot.namespace_labels(&pod.namespace).clone(),
        });
        (PreFilterResult::default(), Status::success())
    }
}

/// Counts, at each existing pod's node, its required anti-affinity terms the incoming pod
/// matches. Only nodes running such pods are visited. The existing pods' namespace selectors
/// are matched against the incoming pod's namespace labels.
fn existing_anti_affinity_counts(pod: &PodInfo, snapshot: &Snapshot) -> TopologyCounts {
    let namespace_labels = snapshot.namespace_labels(&pod.namespace);
    let mut counts = TopologyCounts::default();
    for node in snapshot.nodes_with_required_anti_affinity_pods() {
        let node_labels = &node.node.labels;
        for existing in &node.pods {
            for term in &existing.affinity.required_anti {
                if term.matches(&pod.namespace, &pod.labels, namespace_labels) {
                    counts.add_on(node_labels, &term.topology_key, 1);
                }
            }
        }
    }
    counts
}

/// Counts the existing pods that match the incoming pod's required affinity terms (all of
/// them; once per term) and each of its required anti-affinity terms, at their nodes' pairs.
/// The snapshot's pod index names the pods a term's selector can match, so only those are
/// read.
fn incoming_counts(
    affinity_terms: &[IncomingTerm],
    anti_terms: &[IncomingTerm],
    snapshot: &Snapshot,
) -> (TopologyCounts, TopologyCounts) {
    let mut affinity = TopologyCounts::default();
    let mut anti = TopologyCounts::default();
    if let Some((first, others)) = affinity_terms.split_first() {
        let mut positions = Vec::new();
        snapshot.for_each_match(&first.term.selector, first.namespaces(), |existing| {
            if others.iter().all(|t| t.matches(existing.pod)) {
                positions.push(existing.node);
            }
        });
        for t in affinity_terms {
            count_by_value(&mut affinity, snapshot, t.topology_key(), &positions);
        }
    }
    for t in anti_terms {
        let mut positions = Vec::new();
        snapshot.for_each_match(&t.term.selector, t.namespaces(), |existing| {
            positions.push(existing.node);
        });
        count_by_value(&mut anti, snapshot, t.topology_key(), &positions);
    }
    (affinity, anti)
}

/// Adds one to the pair (`key`, the node's value) for each node position in `positions`
/// (one per pod), summed by the number of the value first: many pods share few values.
fn count_by_value(
    counts: &mut TopologyCounts,
    snapshot: &Snapshot,
    key: &str,
    positions: &[usize],
) {
    if positions.is_empty() {
        return;
    }
    let values = snapshot.topology_values(key);
    let mut by_id: rustc_hash::FxHashMap<u32, i64> = rustc_hash::FxHashMap::default();
    let nodes = snapshot.nodes();
    for &position in positions {
        match values.at(position) {
            Some(TopologyValues::NONE) => {}
            Some(id) => *by_id.entry(id).or_default() += 1,
            // A position the snapshot's numbering does not cover: by the node's labels.
            None => counts.add_on(&nodes[position].node.labels, key, 1),
        }
    }
    for (id, count) in by_id {
        counts.add(key, &values.values[id as usize], count);
    }
}

/// True when `pod` matches every term; false when there are none.
fn matches_all(terms: &[IncomingTerm], pod: &PodInfo) -> bool {
    !terms.is_empty() && terms.iter().all(|t| t.matches(pod))
}

impl PreFilterExtensions for InterPodAffinity {
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

impl FilterPlugin for InterPodAffinity {
    /// The verdict is a function of the node's values of the topology keys the counts
    /// involve: one check per key, in the order `filter` checks them.
    fn verdict_by_domain(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> Option<Vec<DomainVerdict>> {
        let s = state.get::<PreFilterState>()?;
        let mut checks = Vec::new();
        // Without pods matching the terms, a pod matching them itself may start the group
        // on any node carrying the keys.
        let starts_group = s.affinity.is_empty() && s.matches_own_affinity;
        let affinity = Passes {
            without_key: false,
            counted: true,
            uncounted: starts_group,
        };
        for term in &pod.affinity.required {
            let key = &term.topology_key;
            let rejection = Status::unresolvable(ERR_REASON_AFFINITY_RULES_NOT_MATCH);
            checks.push(affinity.verdict(snapshot, key, s.affinity.values_of(key), rejection));
        }
        let anti = Passes {
            without_key: true,
            counted: false,
            uncounted: true,
        };
        for term in &pod.affinity.required_anti {
            let key = &term.topology_key;
            let rejection = Status::unschedulable(ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH);
            checks.push(anti.verdict(snapshot, key, s.anti_affinity.values_of(key), rejection));
        }
        for (key, counts) in &s.existing_anti_affinity.by_key {
            let rejection =
                Status::unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH);
            checks.push(anti.verdict(snapshot, key, Some(counts), rejection));
        }
        Some(checks)
    }

    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.get::<PreFilterState>() else {
            return Status::error(MISSING_STATE);
        };
        let labels = &node.node.labels;
        if !satisfies_pod_affinity(s, pod, labels) {
            return Status::unresolvable(ERR_REASON_AFFINITY_RULES_NOT_MATCH);
        }
        if !satisfies_pod_anti_affinity(s, pod, labels) {
            return Status::unschedulable(ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH);
        }
        if !satisfies_existing_pods_anti_affinity(s, labels) {
            return Status::unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH);
        }
        Status::success()
    }
}

/// The node has every topology key of the pod's required affinity terms, and each of its
/// domains holds a matching pod. Exception: when no pod anywhere matches the terms and the pod
/// matches them itself, it may start the group on any node that has the keys.
fn satisfies_pod_affinity(s: &PreFilterState, pod: &PodInfo, labels: &Labels) -> bool {
    let mut pods_exist = true;
    for term in &pod.affinity.required {
        match s.affinity.on(labels, &term.topology_key) {
            None => return false,
            Some(count) if count <= 0 => pods_exist = false,
            Some(_) => {}
        }
    }
    pods_exist || (s.affinity.is_empty() && s.matches_own_affinity)
}

/// No domain of the node holds a pod the pod's required anti-affinity rejects.
fn satisfies_pod_anti_affinity(s: &PreFilterState, pod: &PodInfo, labels: &Labels) -> bool {
    if s.anti_affinity.is_empty() {
        return true;
    }
    pod.affinity
        .required_anti
        .iter()
        .all(|term| s.anti_affinity.on(labels, &term.topology_key).unwrap_or(0) <= 0)
}

/// No domain of the node holds an existing pod whose required anti-affinity rejects the pod.
fn satisfies_existing_pods_anti_affinity(s: &PreFilterState, labels: &Labels) -> bool {
    s.existing_anti_affinity.is_empty()
        || s.existing_anti_affinity
            .node_values(labels)
            .all(|count| count <= 0)
}

/// Which nodes one of Filter's checks on a topology key passes.
#[derive(Debug, Clone, Copy)]
struct Passes {
    /// A node without the key.
    without_key: bool,
    /// A node whose domain's count is positive.
    counted: bool,
    /// A node whose domain's count is zero or less, or was never counted.
    uncounted: bool,
}

impl Passes {
    /// The check on every node of `snapshot`, by its value of `key`, from the counts by
    /// value.
    fn verdict(
        self,
        snapshot: &Snapshot,
        key: &str,
        counts: Option<&rustc_hash::FxHashMap<String, i64>>,
        rejection: Status,
    ) -> DomainVerdict {
        let code = |passes: bool| u8::from(!passes);
        let values = snapshot.topology_values(key);
        let mut by_value = vec![code(self.uncounted); values.values.len()];
        for (value, &count) in counts.into_iter().flatten() {
            if let Some(id) = values.id_of(value) {
                by_value[id as usize] = code(if count > 0 {
                    self.counted
                } else {
                    self.uncounted
                });
            }
        }
        DomainVerdict {
            values,
            by_value,
            without: code(self.without_key),
            rejections: vec![rejection],
        }
    }
}
