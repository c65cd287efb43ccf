//! TaintToleration: a pod goes only to nodes whose NoSchedule and NoExecute taints it
//! tolerates, and prefers nodes with fewer PreferNoSchedule taints it does not tolerate.

use std::sync::Arc;

use crate::cache::{NodeInfo, Snapshot};
use crate::framework::{
    ArgsError, CycleState, DefaultPlace, EventHint, FilterPlugin, MAX_NODE_SCORE, NODE_CHANGES,
    NodeBlock, NodeScore, Plugin, PluginSpec, PreScorePlugin, ScorePlugin, Status,
    default_normalize_score,
};
use crate::model::PodInfo;
use crate::model::taint::{Taint, TaintEffect, Toleration, find_untolerated};

/// The name used in configuration files.
pub const NAME: &str = "TaintToleration";

/// The rejection reason, kube-scheduler's wording: it names no taint, so that one reason
/// counts every tainted node. `gantry explain` names the taint where it matters (see
/// [`first_untolerated`]).
pub const ERR_REASON_UNTOLERATED: &str = "node(s) had untolerated taint(s)";

/// Error when Score runs without this plugin's PreScore state (kube-scheduler's wording).
pub const ERR_MISSING_STATE: &str =
    "failed to read \"PreScoreTaintToleration\" from cycleState: not found";

/// The pod's tolerations that can tolerate a PreferNoSchedule taint (effect empty or
/// PreferNoSchedule), computed at PreScore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaintTolerationState {
    /// Those tolerations, in the pod's order.
    pub prefer_no_schedule: Vec<Toleration>,
}

/// Filters on hard taints; scores on soft ones.
#[derive(Debug, Default, Clone, Copy)]
pub struct TaintToleration;

impl Plugin for TaintToleration {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [EventHint] {
        &NODE_CHANGES
    }

    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }

    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }

    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

/// The node's first NoSchedule or NoExecute taint that the pod does not tolerate.
pub fn first_untolerated<'a>(pod: &PodInfo, node: &'a NodeInfo) -> Option<&'a Taint> {
    let hard = |t: &Taint| matches!(t.effect, TaintEffect::NoSchedule | TaintEffect::NoExecute);
    find_untolerated(&node.node.taints, &pod.tolerations, hard)
}

impl FilterPlugin for TaintToleration {
    /// Rejects the node if it has a NoSchedule or NoExecute taint the pod does not tolerate.
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match first_untolerated(pod, node) {
            None => Status::success(),
            Some(_) => Status::unresolvable(ERR_REASON_UNTOLERATED),
        }
    }

    /// Most clusters have few tainted nodes, often none.
    fn passes_all(&self, _: &CycleState, _: &PodInfo, snapshot: &Snapshot) -> bool {
        snapshot.node_traits().hard_tainted == 0
    }

    /// Most nodes carry no taint.
    fn passes_outright(&self, node: &NodeInfo) -> bool {
        node.node.taints.is_empty()
    }
}

impl PreScorePlugin for TaintToleration {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &Snapshot,
        _: &[&NodeInfo],
    ) -> Status {
        let prefer_no_schedule = pod
            .tolerations
            .iter()
            .filter(|t| matches!(t.effect, None | Some(TaintEffect::PreferNoSchedule)))
            .cloned()
            .collect();
        state.insert(TaintTolerationState { prefer_no_schedule });
        Status::success()
    }

    fn reads_feasible(&self, _pod: &PodInfo, _snapshot: &Snapshot) -> bool {
        false
    }
}

impl ScorePlugin for TaintToleration {
    /// The number of the node's PreferNoSchedule taints the pod does not tolerate.
    fn score(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        if node.node.taints.is_empty() {
            return Ok(0);
        }
        let s = state
            .get::<TaintTolerationState>()
            .ok_or_else(|| Status::error(ERR_MISSING_STATE))?;
        Ok(intolerable_preferences(
            &node.node.taints,
            &s.prefer_no_schedule,
        ))
    }

    fn score_nodes(
        &self,
        state: &CycleState,
        _: &PodInfo,
        block: NodeBlock<'_>,
        scores: &mut [i64],
    ) -> Result<(), Status> {
        let s = state
            .get::<TaintTolerationState>()
            .ok_or_else(|| Status::error(ERR_MISSING_STATE))?;
        for (node, score) in block.nodes.iter().zip(scores) {
            *score = intolerable_preferences(&node.node.taints, &s.prefer_no_schedule);
        }
        Ok(())
    }

    /// No node has a PreferNoSchedule taint: every node counts none.
    fn uniform_score(&self, _: &CycleState, _: &PodInfo, snapshot: &Snapshot) -> Option<i64> {
        (snapshot.node_traits().prefer_tainted == 0).then_some(0)
    }

    /// Fewer intolerable taints is better: the highest count maps to 0.
    fn normalize(&self, _: &CycleState, _: &PodInfo, scores: &mut [NodeScore]) -> Status {
        default_normalize_score(MAX_NODE_SCORE, true, scores);
        Status::success()
    }
}

/// How many of `taints` are PreferNoSchedule taints none of `tolerations` tolerates.
fn intolerable_preferences(taints: &[Taint], tolerations: &[Toleration]) -> i64 {
    taints
        .iter()
        .filter(|t| t.effect == TaintEffect::PreferNoSchedule)
        .filter(|t| !tolerations.iter().any(|tol| tol.tolerates(t)))
        .count() as i64
}

/// The plugin for the registry, with its place in kube-scheduler's default profile.
pub const SPEC: PluginSpec = PluginSpec {
    name: NAME,
    factory,
    default: Some(DefaultPlace {
        order: 50,
        weight: Some(3),
    }),
    args: None,
};

/// Builds the plugin; it takes no arguments, and ignores any given (as kube-scheduler does
/// for plugins without an arguments type).
pub fn factory(_args: Option<&serde_json::Value>) -> Result<Arc<dyn Plugin>, ArgsError> {
    Ok(Arc::new(TaintToleration))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::testing::{NodeBuilder, PodBuilder, node, pod};

    fn info(n: NodeBuilder) -> NodeInfo {
        NodeInfo::new(Arc::new(n.build()))
    }

    fn filter(p: PodBuilder, n: NodeBuilder) -> Status {
        TaintToleration.filter(&CycleState::new(), &p.build(), &info(n))
    }

    /// The taint [`first_untolerated`] finds, as `{key: value}`.
    fn untolerated(p: PodBuilder, n: NodeBuilder) -> Option<String> {
        first_untolerated(&p.build(), &info(n)).map(|t| t.to_string())
    }

    #[test]
    fn a_block_of_nodes_gets_each_node_s_verdict() {
        let nodes = [
            info(node("plain")),
            info(node("gpu").taint("dedicated", "gpu", "NoSchedule")),
            info(node("soft").taint("soft", "x", "PreferNoSchedule")),
            info(node("failed").taint("dedicated", "gpu", "NoExecute")),
        ];
        let refs: Vec<&NodeInfo> = nodes.iter().collect();
        let positions: Vec<usize> = (0..refs.len()).collect();
        for p in [
            pod("p").build(),
            pod("t")
                .toleration("dedicated", "Equal", "gpu", "NoSchedule")
                .build(),
        ] {
            let state = CycleState::new();
            let mut statuses = vec![Status::success(); 4];
            // A node another filter already rejected keeps that verdict.
            statuses[3] = Status::unschedulable("Insufficient cpu");
            let rejected = TaintToleration.filter_nodes(
                &state,
                &p,
                NodeBlock::new(&refs, &positions),
                &mut statuses,
            );
            for (n, s) in nodes[..3].iter().zip(&statuses) {
                assert_eq!(s, &TaintToleration.filter(&state, &p, n), "{}", n.name());
            }
            assert_eq!(statuses[3].message(), "Insufficient cpu");
            let expected = statuses[..3].iter().filter(|s| !s.is_success()).count();
            assert_eq!(rejected, expected);
        }
    }

    #[test]
    fn untainted_node_fits() {
        assert!(filter(pod("p"), node("n")).is_success());
    }

    #[test]
    fn untolerated_hard_taints_are_unresolvable() {
        for effect in ["NoSchedule", "NoExecute"] {
            let s = filter(pod("p"), node("n").taint("dedicated", "gpu", effect));
            assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
            assert_eq!(s.message(), "node(s) had untolerated taint(s)");
        }
    }

    #[test]
    fn empty_value_is_printed_empty() {
        assert_eq!(
            untolerated(pod("p"), node("n").taint("node-role", "", "NoSchedule")).as_deref(),
            Some("{node-role: }")
        );
    }

    #[test]
    fn prefer_no_schedule_never_filters() {
        assert!(filter(pod("p"), node("n").taint("soft", "x", "PreferNoSchedule")).is_success());
    }

    #[test]
    fn first_untolerated_taint_is_reported() {
        let n = node("n")
            .taint("a", "1", "NoSchedule")
            .taint("b", "2", "NoExecute")
            .taint("c", "3", "NoSchedule");
        let tolerant = pod("p").toleration("a", "Equal", "1", "NoSchedule");
        assert_eq!(untolerated(tolerant, n.clone()).as_deref(), Some("{b: 2}"));
        assert_eq!(untolerated(pod("p"), n).as_deref(), Some("{a: 1}"));
    }

    #[test]
    fn toleration_matching_rules() {
        let n = || node("n").taint("dedicated", "gpu", "NoSchedule");
        let fits = [
            pod("p").toleration("dedicated", "Equal", "gpu", "NoSchedule"),
            pod("p").toleration("dedicated", "Equal", "gpu", ""),
            pod("p").toleration("dedicated", "Exists", "", "NoSchedule"),
            pod("p").toleration("", "Exists", "", ""),
        ];
        for p in fits {
            assert!(filter(p, n()).is_success());
        }
        let rejected = [
            pod("p").toleration("dedicated", "Equal", "cpu", "NoSchedule"),
            pod("p").toleration("dedicated", "Equal", "gpu", "NoExecute"),
            pod("p").toleration("dedicated", "Exists", "", "PreferNoSchedule"),
            pod("p").toleration("other", "Exists", "", ""),
        ];
        for p in rejected {
            assert!(filter(p, n()).is_rejected());
        }
    }

    /// PreScore then Score on each node, then normalize.
    fn scores(p: PodBuilder, nodes: Vec<NodeBuilder>) -> (Vec<i64>, Vec<i64>) {
        let p = p.build();
        let infos: Vec<NodeInfo> = nodes.into_iter().map(info).collect();
        let refs: Vec<&NodeInfo> = infos.iter().collect();
        let mut state = CycleState::new();
        let st = TaintToleration.pre_score(&mut state, &p, &Snapshot::default(), &refs);
        assert!(st.is_success(), "never skips");
        let raw: Vec<i64> = infos
            .iter()
            .map(|n| TaintToleration.score(&state, &p, n).unwrap())
            .collect();
        let mut ns: Vec<NodeScore> = raw
            .iter()
            .enumerate()
            .map(|(index, &score)| NodeScore { index, score })
            .collect();
        assert!(TaintToleration.normalize(&state, &p, &mut ns).is_success());
        (raw, ns.iter().map(|s| s.score).collect())
    }

    #[test]
    fn counts_intolerable_prefer_no_schedule_taints_and_reverses() {
        let (raw, norm) = scores(
            pod("p"),
            vec![
                node("zero"),
                node("one").taint("a", "1", "PreferNoSchedule"),
                node("two")
                    .taint("a", "1", "PreferNoSchedule")
                    .taint("b", "2", "PreferNoSchedule")
                    .taint("hard", "x", "NoSchedule"),
                node("three")
                    .taint("a", "1", "PreferNoSchedule")
                    .taint("b", "2", "PreferNoSchedule")
                    .taint("c", "3", "PreferNoSchedule"),
            ],
        );
        assert_eq!(raw, [0, 1, 2, 3], "hard taints are not counted");
        // 100 - 100*n/3, integer division.
        assert_eq!(norm, [100, 67, 34, 0]);
    }

    #[test]
    fn only_empty_or_prefer_no_schedule_tolerations_count() {
        let n = || node("n").taint("a", "1", "PreferNoSchedule");
        let tolerated = [
            pod("p").toleration("a", "Equal", "1", "PreferNoSchedule"),
            pod("p").toleration("a", "Exists", "", ""),
            pod("p").toleration("", "Exists", "", ""),
        ];
        for p in tolerated {
            assert_eq!(scores(p, vec![n()]).0, [0]);
        }
        let not_tolerated = [
            pod("p").toleration("a", "Equal", "1", "NoSchedule"),
            pod("p").toleration("a", "Exists", "", "NoExecute"),
            pod("p").toleration("a", "Equal", "2", "PreferNoSchedule"),
        ];
        for p in not_tolerated {
            assert_eq!(scores(p, vec![n()]).0, [1]);
        }
    }

    #[test]
    fn all_zero_counts_normalize_to_max() {
        let (raw, norm) = scores(pod("p"), vec![node("a"), node("b")]);
        assert_eq!(raw, [0, 0]);
        assert_eq!(norm, [100, 100]);
    }

    #[test]
    fn score_without_pre_score_is_an_error() {
        let s = TaintToleration
            .score(
                &CycleState::new(),
                &pod("p").build(),
                &info(node("n").taint("k", "v", "PreferNoSchedule")),
            )
            .unwrap_err();
        assert_eq!(s.code(), Code::Error);
        assert_eq!(
            s.message(),
            "failed to read \"PreScoreTaintToleration\" from cycleState: not found"
        );
    }

    #[test]
    fn factory_builds_the_named_plugin() {
        let p = factory(None).unwrap();
        assert_eq!(p.name(), "TaintToleration");
        assert!(p.as_filter().is_some() && p.as_pre_score().is_some() && p.as_score().is_some());
    }
}
