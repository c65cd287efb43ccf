//! Hard constraints (`DoNotSchedule`): PreFilter counts the matching pods of every eligible
//! domain once per cycle; Filter checks one node's skew against those counts.

use rustc_hash::FxHashMap as HashMap;

use crate::cache::{NodeInfo, Snapshot};
use crate::framework::{CycleState, FilterPlugin, PreFilterPlugin, PreFilterResult, Status};
use crate::model::PodInfo;
use crate::model::pod::WhenUnsatisfiable;

use super::{
    ERR_REASON_CONSTRAINTS_NOT_MATCH, ERR_REASON_NODE_LABEL_NOT_MATCH, Inclusion,
    PodTopologySpread, count_matching,
};

/// What Filter needs of one hard constraint, computed at PreFilter.
#[derive(Debug)]
struct HardConstraint {
    topology_key: String,
    max_skew: i64,
    /// 1 when the incoming pod matches the constraint's selector itself, else 0.
    self_match: i64,
    /// Matching pods per eligible domain (label value), zero-count domains included.
    counts: HashMap<Box<str>, i64>,
    /// The global minimum: the smallest domain count, or 0 when there are fewer eligible
    /// domains than `minDomains`.
    min_match: i64,
}

/// The per-cycle state of the hard constraints.
#[derive(Debug)]
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
        let mut counts: Vec<HashMap<Box<str>, i64>> = vec![HashMap::default(); constraints.len()];
        // The node's value for each constraint's key, looked up once per node.
        let mut values: Vec<&str> = Vec::with_capacity(constraints.len());
        'nodes: for node in snapshot.nodes() {
            let model = &node.node;
            values.clear();
            for c in &constraints {
                match model.labels.get(&c.spec.topology_key) {
                    Some(v) => values.push(v),
                    None => continue 'nodes,
                }
            }
            let mut inclusion = Inclusion::new(pod, model);
            for ((c, domains), &value) in constraints.iter().zip(counts.iter_mut()).zip(&values) {
                if !inclusion.admits(c.spec.node_affinity_policy, c.spec.node_taints_policy) {
                    continue;
                }
                let n = count_matching(&node.pods, &c.selector, &pod.namespace);
                match domains.get_mut(value) {
                    Some(total) => *total += n,
                    None => {
                        domains.insert(value.into(), n);
                    }
                }
            }
        }
        let constraints = constraints
            .into_iter()
            .zip(counts)
            .map(|(c, counts)| {
                let min_domains = c.spec.min_domains.unwrap_or(1);
                let min_match = if counts.len() < usize::try_from(min_domains).unwrap_or(0) {
                    0
                } else {
                    counts
                        .values()
                        .copied()
                        .min()
                        .unwrap_or(i64::from(i32::MAX))
                };
                HardConstraint {
                    topology_key: c.spec.topology_key.clone(),
                    max_skew: i64::from(c.spec.max_skew),
                    self_match: i64::from(c.selector.matches(&pod.labels)),
                    counts,
                    min_match,
                }
            })
            .collect();
        Some(PreFilterState { constraints })
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
            let Some(value) = labels.get(&c.topology_key) else {
                return Status::unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH);
            };
            let count = c.counts.get(value).copied().unwrap_or(0);
            if count + c.self_match - c.min_match > c.max_skew {
                return Status::unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH);
            }
        }
        Status::success()
    }
}
