//! PreScore, Score and NormalizeScore: the incoming pod's preferred affinity (+weight) and
//! anti-affinity (-weight) towards existing pods, and the existing pods' terms about the
//! incoming pod (required affinity at `hardPodAffinityWeight`, preferred affinity +weight,
//! preferred anti-affinity -weight), summed per topology pair.

use std::sync::Arc;

use crate::cache::{NodeInfo, Snapshot, TopologyValues};
use crate::framework::{
    CycleState, MAX_NODE_SCORE, NodeBlock, NodeScore, PreScorePlugin, ScorePlugin, Status,
};
use crate::model::{Labels, PodInfo};

use super::{IncomingTerm, InterPodAffinity, TopologyCounts};

/// Score's and NormalizeScore's message when PreScore did not run (kube-scheduler's wording).
const MISSING_STATE: &str =
    "failed to read \"PreScoreInterPodAffinity\" from cycleState: not found";

/// The summed weights per topology pair, for Score and NormalizeScore.
#[derive(Debug, Clone)]
struct PreScoreState {
    scores: TopologyCounts,
    /// The same sums by topology key, each key's by value number of the snapshot's
    /// [`TopologyValues`]: what Score reads for a node given by position.
    by_value: Vec<(Arc<TopologyValues>, Vec<i64>)>,
}

impl PreScorePlugin for InterPodAffinity {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        _feasible: &[&NodeInfo],
    ) -> Status {
        let affinity = &pod.affinity;
        let has_preferred = !affinity.preferred.is_empty() || !affinity.preferred_anti.is_empty();
        if self.args.ignore_preferred_terms_of_existing_pods && !has_preferred {
            return Status::skip();
        }
        // The incoming pod's preferred terms with signed weights: affinity attracts,
        // anti-affinity repels.
        let incoming: Vec<(IncomingTerm, i64)> = affinity
            .preferred
            .iter()
            .map(|w| (IncomingTerm::new(&w.term, snapshot), i64::from(w.weight)))
            .chain(
                affinity
                    .preferred_anti
                    .iter()
                    .map(|w| (IncomingTerm::new(&w.term, snapshot), -i64::from(w.weight))),
            )
            .collect();
        let mut scorer = Scorer {
            pod,
            namespace_labels: snapshot.namespace_labels(&pod.namespace),
            hard_weight: i64::from(self.args.hard_pod_affinity_weight),
            scores: TopologyCounts::default(),
        };
        let nodes = snapshot.nodes();
        // Existing pods the incoming pod's terms are about.
        for (term, weight) in &incoming {
            snapshot.for_each_candidate(&term.term.selector, |existing, node| {
                let node_labels = &node.node.labels;
                if !node_labels.is_empty() && term.matches(existing) {
                    scorer
                        .scores
                        .add_on(node_labels, term.topology_key(), *weight);
                }
            });
        }
        // Existing pods whose own terms may be about the incoming pod.
        for p in snapshot.pod_index().term_candidates(&pod.labels) {
            scorer.process(&p.pod, &nodes[p.node].node.labels);
        }
        if scorer.scores.is_empty() {
            return Status::skip();
        }
        let by_value = scorer
            .scores
            .by_key
            .iter()
            .map(|(key, sums)| {
                let values = snapshot.topology_values(key);
                let mut by_value = vec![0; values.values.len()];
                for (value, sum) in sums {
                    if let Some(slot) = values
                        .id_of(value)
                        .and_then(|id| by_value.get_mut(id as usize))
                    {
                        *slot = *sum;
                    }
                }
                (values, by_value)
            })
            .collect();
        state.insert(PreScoreState {
            scores: scorer.scores,
            by_value,
        });
        Status::success()
    }

    fn reads_feasible(&self, _pod: &PodInfo, _snapshot: &Snapshot) -> bool {
        false
    }
}

/// Accumulates the weights of one cycle.
struct Scorer<'a> {
    pod: &'a PodInfo,
    namespace_labels: &'a Labels,
    hard_weight: i64,
    scores: TopologyCounts,
}

impl Scorer<'_> {
    /// Adds what the terms of `existing`, on a node with `node_labels`, say about the
    /// incoming pod.
    fn process(&mut self, existing: &PodInfo, node_labels: &Labels) {
        if node_labels.is_empty() {
            return;
        }
        let (pod, ns_labels) = (self.pod, self.namespace_labels);
        let theirs = &existing.affinity;
        if self.hard_weight > 0 {
            for term in &theirs.required {
                if term.matches(&pod.namespace, &pod.labels, ns_labels) {
                    self.scores
                        .add_on(node_labels, &term.topology_key, self.hard_weight);
                }
            }
        }
        for w in &theirs.preferred {
            if w.term.matches(&pod.namespace, &pod.labels, ns_labels) {
                self.scores
                    .add_on(node_labels, &w.term.topology_key, i64::from(w.weight));
            }
        }
        for w in &theirs.preferred_anti {
            if w.term.matches(&pod.namespace, &pod.labels, ns_labels) {
                self.scores
                    .add_on(node_labels, &w.term.topology_key, -i64::from(w.weight));
            }
        }
    }
}

impl ScorePlugin for InterPodAffinity {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let s = state
            .get::<PreScoreState>()
            .ok_or_else(|| Status::error(MISSING_STATE))?;
        Ok(s.scores.node_values(&node.node.labels).sum())
    }

    /// Reads each node's sums by its position, without looking its labels up.
    fn score_nodes(
        &self,
        state: &CycleState,
        _pod: &PodInfo,
        block: NodeBlock<'_>,
        scores: &mut [i64],
    ) -> Result<(), Status> {
        let s = state
            .get::<PreScoreState>()
            .ok_or_else(|| Status::error(MISSING_STATE))?;
        for ((node, &position), score) in block.nodes.iter().zip(block.positions).zip(scores) {
            let by_position = s.by_value.iter().try_fold(0, |sum, (values, by_value)| {
                values.at(position).map(|id| match id {
                    TopologyValues::NONE => sum,
                    id => sum + by_value.get(id as usize).copied().unwrap_or(0),
                })
            });
            *score = match by_position {
                Some(sum) => sum,
                // A node the snapshot's numbering does not cover: by its labels.
                None => s.scores.node_values(&node.node.labels).sum(),
            };
        }
        Ok(())
    }

    /// Maps the scores linearly from [lowest, highest] (negative totals included) onto
    /// [0, 100], truncating as kube-scheduler's floating-point arithmetic does; all 0 when
    /// every node scored the same.
    fn normalize(&self, state: &CycleState, _pod: &PodInfo, scores: &mut [NodeScore]) -> Status {
        let Some(s) = state.get::<PreScoreState>() else {
            return Status::error(MISSING_STATE);
        };
        if s.scores.is_empty() {
            return Status::success();
        }
        let min = scores.iter().map(|s| s.score).min().unwrap_or(0);
        let max = scores.iter().map(|s| s.score).max().unwrap_or(0);
        let range = max - min;
        for s in scores.iter_mut() {
            s.score = if range > 0 {
                (MAX_NODE_SCORE as f64 * ((s.score - min) as f64 / range as f64)) as i64
            } else {
                0
            };
        }
        Status::success()
    }
}
