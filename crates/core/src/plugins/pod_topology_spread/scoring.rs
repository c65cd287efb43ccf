//! Soft constraints (`ScheduleAnyway`): PreScore counts matching pods per domain once per
//! cycle; Score sums each constraint's weighted count for the node's domain; NormalizeScore
//! reverses the range so that the node with the fewest matching pods scores highest.

use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;

use crate::cache::{Namespaces, NodeInfo, Snapshot, TopologyValues};
use crate::framework::{
    CycleState, DomainScores, MAX_NODE_SCORE, NodeScore, PreScorePlugin, ScorePlugin, Status,
};
use crate::model::PodInfo;
use crate::model::pod::{InclusionPolicy, WhenUnsatisfiable};
use crate::model::selector::LabelSelector;

use super::{HOSTNAME_LABEL, Inclusion, PodTopologySpread, count_matching, has_all_keys};

/// What Score needs of one soft constraint, computed at PreScore.
#[derive(Debug, Clone)]
struct SoftConstraint {
    topology_key: String,
    max_skew: i32,
    /// The hostname key: one domain per node, counted at Score on the node itself.
    per_node: bool,
    /// Selector of the counted pods (read at Score for per-node counts).
    selector: LabelSelector,
    node_affinity_policy: InclusionPolicy,
    node_taints_policy: InclusionPolicy,
    /// Matching pods per domain (label value) of the feasible nodes; empty when `per_node`.
    counts: HashMap<Box<str>, i64>,
    /// `ln(domains + 2)`: the counts of a topology with many small domains weigh more, so
    /// they are not watered down by one with few big ones.
    weight: f64,
}

/// The per-cycle state of the soft constraints.
#[derive(Debug, Clone)]
pub(super) struct PreScoreState {
    constraints: Vec<SoftConstraint>,
    /// False only for system default constraints, so that nodes without a zone label are
    /// still spread by hostname.
    require_all_topologies: bool,
    /// Feasible nodes (by their index among the feasible nodes) that lack a topology key
    /// while all are required: they score 0 after normalization.
    ignored: Vec<bool>,
    /// Score's raw score by domain, when it is one (see [`ScorePlugin::score_by_domain`]):
    /// for a single constraint on a key other than the hostname, every key required and no
    /// feasible node ignored; empty otherwise.
    by_domain: Vec<(Arc<TopologyValues>, HashMap<u32, i64>)>,
}

/// A soft constraint's contribution for `count` matching pods in the node's domain; the
/// `maxSkew - 1` added to every node dampens the differences, the more the larger the skew
/// the constraint tolerates.
fn score_for_count(count: i64, max_skew: i32, weight: f64) -> f64 {
    count as f64 * weight + f64::from(max_skew - 1)
}

impl PodTopologySpread {
    /// Builds the soft constraints' state, or `None` when the pod has none.
    ///
    /// Domains (and their sizes, for the weights) come from the feasible nodes; the pods are
    /// then counted over every node of the snapshot that carries the keys (when required) and
    /// passes the constraint's inclusion policies, into the domains that exist. The hostname
    /// constraint's counts are left to Score, and its size is the number of feasible nodes not
    /// ignored. Nodes lacking a key when keys are not required count under the empty value.
    fn pre_score_state(
        &self,
        pod: &PodInfo,
        snapshot: &Snapshot,
        feasible: &[&NodeInfo],
    ) -> Option<PreScoreState> {
        let require_all_topologies = !pod.topology_spread.is_empty() || !self.system_defaulted;
        let mut constraints: Vec<SoftConstraint> = self
            .constraints(pod, snapshot, WhenUnsatisfiable::ScheduleAnyway)
            .into_iter()
            .map(|c| SoftConstraint {
                topology_key: c.spec.topology_key.clone(),
                max_skew: c.spec.max_skew,
                per_node: c.spec.topology_key == HOSTNAME_LABEL,
                selector: c.selector.into_owned(),
                node_affinity_policy: c.spec.node_affinity_policy,
                node_taints_policy: c.spec.node_taints_policy,
                counts: HashMap::default(),
                weight: 0.0,
            })
            .collect();
        if constraints.is_empty() {
            return None;
        }
        let mut state = PreScoreState {
            constraints: Vec::new(),
            require_all_topologies,
            ignored: vec![false; feasible.len()],
            by_domain: Vec::new(),
        };
        let keys: Vec<String> = constraints.iter().map(|c| c.topology_key.clone()).collect();
        let has_keys = |node: &NodeInfo| {
            !require_all_topologies || has_all_keys(&node.node, keys.iter().map(String::as_str))
        };
        let mut ignored = 0usize;
        let every_node_counts = every_node_has_the_keys(
            snapshot,
            &constraints,
            feasible.len(),
            require_all_topologies,
        );
        if every_node_counts {
            // Every node is feasible and none is ignored: the domains are all the keys'
            // values, read off the snapshot rather than off each node.
            for c in &mut constraints {
                let values = snapshot.topology_values(&c.topology_key);
                c.counts = values.values.iter().map(|v| (v.clone(), 0)).collect();
            }
        } else {
            for (i, node) in feasible.iter().enumerate() {
                if !has_keys(node) {
                    state.ignored[i] = true;
                    ignored += 1;
                    continue;
                }
                for c in constraints.iter_mut().filter(|c| !c.per_node) {
                    let value = node.node.labels.get(&c.topology_key).unwrap_or("");
                    if !c.counts.contains_key(value) {
                        c.counts.insert(value.into(), 0);
                    }
                }
            }
        }
        let scored = feasible.len() - ignored;
        for c in &mut constraints {
            let size = if c.per_node { scored } else { c.counts.len() };
            c.weight = ((size + 2) as f64).ln();
        }
        let nodes = snapshot.nodes();
        for c in constraints.iter_mut().filter(|c| !c.per_node) {
            // The matching pods, from the pod index, counted by node first.
            let mut by_node: HashMap<usize, i64> = HashMap::default();
            snapshot.for_each_match(&c.selector, Namespaces::One(&pod.namespace), |m| {
                if !m.terminating {
                    *by_node.entry(m.node).or_default() += 1;
                }
            });
            // By the number of the node's value first: many nodes share few values.
            let values = snapshot.topology_values(&c.topology_key);
            let mut by_value: HashMap<u32, i64> = HashMap::default();
            let admits_all =
                Inclusion::admits_every_node(pod, c.node_affinity_policy, c.node_taints_policy);
            for (position, count) in by_node {
                let node = &nodes[position];
                if !(every_node_counts || has_keys(node))
                    || !(admits_all
                        || Inclusion::new(pod, &node.node)
                            .admits(c.node_affinity_policy, c.node_taints_policy))
                {
                    continue;
                }
                match values.at(position) {
                    Some(TopologyValues::NONE) => {
                        if let Some(total) = c.counts.get_mut("") {
                            *total += count;
                        }
                    }
                    Some(id) => *by_value.entry(id).or_default() += count,
                    None => {}
                }
            }
            for (id, count) in by_value {
                if let Some(total) = c.counts.get_mut(&values.values[id as usize]) {
                    *total += count;
                }
            }
        }
        if let [c] = constraints.as_slice()
            && !c.per_node
            && require_all_topologies
            && ignored == 0
        {
            let values = snapshot.topology_values(&c.topology_key);
            let raws = c
                .counts
                .iter()
                .filter_map(|(value, &count)| {
                    let raw = score_for_count(count, c.max_skew, c.weight).round() as i64;
                    Some((values.id_of(value)?, raw))
                })
                .collect();
            state.by_domain = vec![(values, raws)];
        }
        state.constraints = constraints;
        Some(state)
    }
}

impl PreScorePlugin for PodTopologySpread {
    /// Skips the plugin's Score when the cluster is empty or the pod has no soft constraint.
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        feasible: &[&NodeInfo],
    ) -> Status {
        if snapshot.is_empty() {
            return Status::skip();
        }
        match self.pre_score_state(pod, snapshot, feasible) {
            Some(s) => {
                state.insert(s);
                Status::success()
            }
            None => Status::skip(),
        }
    }

    /// The feasible nodes give the soft constraints' domains: read only for a pod with some.
    fn reads_feasible(&self, pod: &PodInfo, snapshot: &Snapshot) -> bool {
        !snapshot.is_empty()
            && !self
                .constraints(pod, snapshot, WhenUnsatisfiable::ScheduleAnyway)
                .is_empty()
    }
}

/// True when the feasible nodes (`feasible` of them) are all the snapshot's, every key is
/// required and every node carries every one: no node is then ignored, and each key's
/// domains are all its values.
fn every_node_has_the_keys(
    snapshot: &Snapshot,
    constraints: &[SoftConstraint],
    feasible: usize,
    require_all_topologies: bool,
) -> bool {
    require_all_topologies
        && feasible == snapshot.len()
        && constraints.iter().all(|c| {
            !c.per_node
                && snapshot
                    .topology_values(&c.topology_key)
                    .ids
                    .iter()
                    .all(|&id| id != TopologyValues::NONE)
        })
}

const MISSING_PRE_SCORE_STATE: &str =
    "error reading \"PreScorePodTopologySpread\" from cycleState: not found";

impl ScorePlugin for PodTopologySpread {
    /// The sum over the soft constraints whose key the node carries of
    /// `count * weight + maxSkew - 1`, rounded; 0 for an ignored node.
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let s = state
            .get::<PreScoreState>()
            .ok_or_else(|| Status::error(MISSING_PRE_SCORE_STATE))?;
        let labels = &node.node.labels;
        // A node lacking a key while all are required is ignored: it scores 0 (and its other
        // keys' values may have no count, PreScore having skipped it).
        if s.require_all_topologies
            && !has_all_keys(
                &node.node,
                s.constraints.iter().map(|c| c.topology_key.as_str()),
            )
        {
            return Ok(0);
        }
        let mut score = 0.0;
        for c in &s.constraints {
            let Some(value) = labels.get(&c.topology_key) else {
                continue;
            };
            let count = if c.per_node {
                count_matching(&node.pods, &c.selector, &pod.namespace)
            } else {
                match c.counts.get(value) {
                    Some(&n) => n,
                    None => {
                        return Err(Status::error(format!(
                            "no pod count for topology {}={value} of node {}",
                            c.topology_key,
                            node.name()
                        )));
                    }
                }
            };
            score += score_for_count(count, c.max_skew, c.weight);
        }
        Ok(score.round() as i64)
    }

    /// PreScore's raw scores by domain, when it could give them.
    fn score_by_domain<'s>(
        &self,
        state: &'s CycleState,
        _pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> Option<DomainScores<'s>> {
        let s = state.get::<PreScoreState>()?;
        (!s.by_domain.is_empty()).then_some(DomainScores { keys: &s.by_domain })
    }

    /// Maps `s` to `100 * (max + min - s) / max` over the nodes not ignored (every such node
    /// gets 100 when `max` is 0); ignored nodes get 0.
    fn normalize(&self, state: &CycleState, _pod: &PodInfo, scores: &mut [NodeScore]) -> Status {
        let Some(s) = state.get::<PreScoreState>() else {
            return Status::error(MISSING_PRE_SCORE_STATE);
        };
        let ignored = |n: &NodeScore| s.ignored.get(n.index).copied().unwrap_or(false);
        let mut min = i64::MAX;
        let mut max = 0;
        for n in scores.iter().filter(|n| !ignored(n)) {
            min = min.min(n.score);
            max = max.max(n.score);
        }
        for n in scores.iter_mut() {
            n.score = if ignored(n) {
                0
            } else if max == 0 {
                MAX_NODE_SCORE
            } else {
                MAX_NODE_SCORE * (max + min - n.score) / max
            };
        }
        Status::success()
    }
}
