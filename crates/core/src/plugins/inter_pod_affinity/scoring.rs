//! PreScore, Score and NormalizeScore: the incoming pod's preferred affinity (+weight) and
//! anti-affinity (-weight) towards existing pods, and the existing pods' terms about the
//! incoming pod (required affinity at `hardPodAffinityWeight`, preferred affinity +weight,
//! preferred anti-affinity -weight), summed per topology pair.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::cache::{NodeInfo, Snapshot, TermId, TermKind, TermPod, TopologyValues};
use crate::framework::{
    CycleState, DomainScores, MAX_NODE_SCORE, NodeBlock, NodeScore, PreScorePlugin, ScorePlugin,
    Status,
};
use crate::model::{Labels, PodInfo};

use super::{IncomingTerm, InterPodAffinity};

/// Score's and NormalizeScore's message when PreScore did not run (kube-scheduler's wording).
const MISSING_STATE: &str =
    "failed to read \"PreScoreInterPodAffinity\" from cycleState: not found";

/// The summed weights per topology pair, for Score and NormalizeScore.
#[derive(Debug, Clone, Default)]
struct PreScoreState {
    /// Per topology key met (the names in `keys`), the key's values on the snapshot's
    /// nodes and the sums of its pairs so far (at least one each), by the number of the
    /// value in the snapshot's [`TopologyValues`]: as many entries as pairs met (a few per
    /// existing pod the terms are about), however many values the key has (one per node for
    /// a hostname).
    by_key: Vec<(Arc<TopologyValues>, FxHashMap<u32, i64>)>,
    keys: Vec<Box<str>>,
}

impl PreScoreState {
    /// True when no pair was summed: Score gives 0 and NormalizeScore leaves it.
    fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// The sum on a node given by its labels.
    fn on_labels(&self, labels: &Labels) -> i64 {
        self.by_key
            .iter()
            .zip(&self.keys)
            .filter_map(|((values, sums), key)| {
                let id = values.id_of(labels.get(key)?)?;
                sums.get(&id).copied()
            })
            .sum()
    }

    /// The sum on the node at `position` of the snapshot; `None` for a position the
    /// snapshot's numbering does not cover (a node copy made within a cycle).
    fn at(&self, position: usize) -> Option<i64> {
        self.by_key.iter().try_fold(0, |sum, (values, sums)| {
            values.at(position).map(|id| match id {
                TopologyValues::NONE => sum,
                id => sum + sums.get(&id).copied().unwrap_or(0),
            })
        })
    }
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
            snapshot,
            namespace_labels: snapshot.namespace_labels(&pod.namespace),
            hard_weight: i64::from(self.args.hard_pod_affinity_weight),
            about_pod: FxHashMap::default(),
            sums: PreScoreState::default(),
        };
        // Existing pods the incoming pod's terms are about.
        for (term, weight) in &incoming {
            snapshot.for_each_match(&term.term.selector, term.namespaces(), |existing| {
                scorer.add(term.topology_key(), existing.node, *weight);
            });
        }
        // Existing pods whose own terms may be about the incoming pod.
        for p in snapshot.pod_index().term_candidates(&pod.labels) {
            scorer.process(p);
        }
        if scorer.sums.is_empty() {
            return Status::skip();
        }
        state.insert(scorer.sums);
        Status::success()
    }

    fn reads_feasible(&self, _pod: &PodInfo, _snapshot: &Snapshot) -> bool {
        false
    }
}

/// Accumulates the weights of one cycle.
struct Scorer<'a> {
    pod: &'a PodInfo,
    snapshot: &'a Snapshot,
    namespace_labels: &'a Labels,
    hard_weight: i64,
    /// Whether each term of the existing pods met so far is about the incoming pod.
    about_pod: FxHashMap<TermId, bool>,
    sums: PreScoreState,
}

impl Scorer<'_> {
    /// Adds `delta` to the pair (`key`, the value of `key` on the node at `position`), if
    /// the node has the label. The node's own labels are read only for a position the
    /// snapshot's numbering does not cover, which a placed pod's node never is.
    fn add(&mut self, key: &str, position: usize, delta: i64) {
        let nodes = self.snapshot.nodes();
        let id_in = |values: &TopologyValues| match values.at(position) {
            Some(TopologyValues::NONE) => None,
            Some(id) => Some(id),
            None => nodes[position]
                .node
                .labels
                .get(key)
                .and_then(|v| values.id_of(v)),
        };
        let sums = &mut self.sums;
        match sums.keys.iter().position(|k| **k == *key) {
            Some(k) => {
                let (values, sums) = &mut sums.by_key[k];
                if let Some(id) = id_in(values) {
                    *sums.entry(id).or_default() += delta;
                }
            }
            // A key is kept only once a pair of it is summed.
            None => {
                let values = self.snapshot.topology_values(key);
                if let Some(id) = id_in(&values) {
                    sums.keys.push(key.into());
                    sums.by_key
                        .push((values, FxHashMap::from_iter([(id, delta)])));
                }
            }
        }
    }

    /// Adds what the terms of `existing` say about the incoming pod. Each distinct term is
    /// matched against the incoming pod once per cycle.
    fn process(&mut self, existing: &TermPod) {
        let snapshot = self.snapshot;
        let index = snapshot.pod_index();
        for t in existing.terms.iter() {
            let weight = match t.kind {
                TermKind::Required if self.hard_weight > 0 => self.hard_weight,
                TermKind::Preferred(w) => i64::from(w),
                TermKind::PreferredAnti(w) => -i64::from(w),
                TermKind::Required | TermKind::RequiredAnti => continue,
            };
            let Some(term) = index.term(t.id) else {
                continue;
            };
            let (pod, ns_labels) = (self.pod, self.namespace_labels);
            let about = *self
                .about_pod
                .entry(t.id)
                .or_insert_with(|| term.matches(&pod.namespace, &pod.labels, ns_labels));
            if about {
                self.add(&term.topology_key, existing.node, weight);
            }
        }
    }
}

impl ScorePlugin for InterPodAffinity {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let s = state
            .get::<PreScoreState>()
            .ok_or_else(|| Status::error(MISSING_STATE))?;
        Ok(s.on_labels(&node.node.labels))
    }

    /// PreScore's sums per pair.
    fn score_by_domain<'s>(
        &self,
        state: &'s CycleState,
        _pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> Option<DomainScores<'s>> {
        let s = state.get::<PreScoreState>()?;
        Some(DomainScores { keys: &s.by_key })
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
            // A node the snapshot's numbering does not cover: by its labels.
            *score = s
                .at(position)
                .unwrap_or_else(|| s.on_labels(&node.node.labels));
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
        if s.is_empty() {
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
