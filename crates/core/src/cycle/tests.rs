//! Framework contracts, with minimal plugins defined here (the real plugins have their own
//! tests and the scenario suite).

use std::sync::Arc;

use super::*;
use crate::cache::Cache;
use crate::framework::{
    FilterPlugin, Plugin, PreFilterPlugin, PreFilterResult, QueueSortPlugin, ScorePlugin,
};
use crate::testing::{node, pod};

/// Rejects nodes labelled `reject=<reason>` with that reason; Unresolvable when `hard=true`.
struct LabelFilter;
impl Plugin for LabelFilter {
    fn name(&self) -> &'static str {
        "LabelFilter"
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        Some(self)
    }
}
impl FilterPlugin for LabelFilter {
    fn filter(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        match node.node.labels.get("reject") {
            Some(r) => Status::unschedulable(r.to_string()),
            None => Status::success(),
        }
    }
}
impl QueueSortPlugin for LabelFilter {
    fn compare(&self, _: &PodInfo, a: u64, _: &PodInfo, b: u64) -> std::cmp::Ordering {
        a.cmp(&b)
    }
}

/// Scores a node by its `score` label.
struct LabelScore;
impl Plugin for LabelScore {
    fn name(&self) -> &'static str {
        "LabelScore"
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}
impl ScorePlugin for LabelScore {
    fn score(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(node
            .node
            .labels
            .get("score")
            .and_then(|s| s.parse().ok())
            .unwrap_or(0))
    }
}

/// Narrows the search to nodes named in the pod's `only` label.
struct OnlyNode;
impl Plugin for OnlyNode {
    fn name(&self) -> &'static str {
        "OnlyNode"
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
}
impl PreFilterPlugin for OnlyNode {
    fn pre_filter(
        &self,
        _: &mut CycleState,
        pod: &PodInfo,
        _: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let names = pod
            .labels
            .get("only")
            .map(|n| [Arc::from(n)].into_iter().collect());
        (PreFilterResult { node_names: names }, Status::success())
    }
}

fn profile(weight: i64) -> Profile {
    Profile {
        scheduler_name: "test".into(),
        percentage_of_nodes_to_score: None,
        queue_sort: Arc::new(LabelFilter),
        pre_enqueue: vec![],
        pre_filter: vec![Arc::new(OnlyNode)],
        filter: vec![Arc::new(LabelFilter)],
        post_filter: vec![],
        pre_score: vec![],
        score: vec![(Arc::new(LabelScore), weight)],
        reserve: vec![],
        permit: vec![],
        pre_bind: vec![],
        bind: vec![],
        post_bind: vec![],
        observer: Arc::new(crate::framework::Unobserved),
    }
}

fn snapshot(nodes: Vec<crate::model::NodeModel>) -> Snapshot {
    let mut cache = Cache::new();
    for n in nodes {
        cache.upsert_node(n);
    }
    let mut snap = Snapshot::default();
    cache.update_snapshot(&mut snap);
    snap
}

const OPTS: CycleOptions<'static> = CycleOptions {
    pool: None,
    percentage_of_nodes_to_score: 0,
    top_scores: 3,
    nominated: None,
    waiting: None,
    preempt_extenders: false,
    preemption_running: false,
};

#[test]
fn message_counts_and_sorts_reasons() {
    let snap = snapshot(vec![
        node("a").label("reject", "Insufficient cpu").build(),
        node("b").label("reject", "Insufficient cpu").build(),
        node("c").label("reject", "Insufficient cpu").build(),
        node("d")
            .label("reject", "node(s) had untolerated taint(s)")
            .build(),
        node("e")
            .label("reject", "node(s) had untolerated taint(s)")
            .build(),
    ]);
    let err = schedule_one(
        &profile(1),
        &snap,
        &pod("p").build(),
        &mut CycleMemory::default(),
        &OPTS,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "0/5 nodes are available: 2 node(s) had untolerated taint(s), 3 Insufficient cpu."
    );
    let CycleError::Unschedulable(d) = err else {
        panic!("expected unschedulable")
    };
    assert_eq!(
        d.unschedulable_plugins.iter().collect::<Vec<_>>(),
        [&"LabelFilter"]
    );
}

#[test]
fn no_nodes() {
    let err = schedule_one(
        &profile(1),
        &Snapshot::default(),
        &pod("p").build(),
        &mut CycleMemory::default(),
        &OPTS,
    )
    .unwrap_err();
    assert_eq!(err.to_string(), NO_NODES_AVAILABLE);
}

#[test]
fn highest_weighted_score_wins_and_scores_are_reported() {
    let snap = snapshot(vec![
        node("low").label("score", "10").build(),
        node("high").label("score", "90").build(),
        node("mid").label("score", "50").build(),
    ]);
    let p = schedule_one(
        &profile(2),
        &snap,
        &pod("p").build(),
        &mut CycleMemory::default(),
        &OPTS,
    )
    .unwrap();
    assert_eq!(&*p.node, "high");
    assert_eq!(p.feasible, 3);
    assert_eq!(p.score_plugins, ["LabelScore"]);
    assert_eq!(p.scores[0].total, 180);
    assert_eq!(&*p.scores[2].node, "low");
}

#[test]
fn the_largest_configurable_weight_keeps_the_order_of_scores() {
    let snap = snapshot(vec![
        node("low").label("score", "10").build(),
        node("high").label("score", "90").build(),
    ]);
    let weight = crate::config::MAX_WEIGHT;
    let p = schedule_one(
        &profile(weight),
        &snap,
        &pod("p").build(),
        &mut CycleMemory::default(),
        &OPTS,
    )
    .unwrap();
    assert_eq!(&*p.node, "high");
    assert_eq!(p.scores[0].total, 90 * weight);
    // A weight no configuration accepts saturates instead of wrapping to a negative total
    // that would reorder the nodes.
    let p = schedule_one(
        &profile(i64::MAX),
        &snap,
        &pod("p").build(),
        &mut CycleMemory::default(),
        &OPTS,
    )
    .unwrap();
    assert_eq!(p.scores[0].total, i64::MAX);
    assert!(p.scores.iter().all(|s| s.total > 0), "{:?}", p.scores);
}

#[test]
fn ties_are_broken_by_pod_identity_not_node_order() {
    let names: Vec<String> = (0..20).map(|i| format!("n{i}")).collect();
    let forward = snapshot(names.iter().map(|n| node(n).build()).collect());
    let backward = snapshot(names.iter().rev().map(|n| node(n).build()).collect());
    let mut chosen = std::collections::BTreeSet::new();
    for i in 0..10 {
        let p = pod(&format!("p{i}")).build();
        let a = schedule_one(
            &profile(1),
            &forward,
            &p,
            &mut CycleMemory::default(),
            &OPTS,
        )
        .unwrap();
        let b = schedule_one(
            &profile(1),
            &backward,
            &p,
            &mut CycleMemory::default(),
            &OPTS,
        )
        .unwrap();
        assert_eq!(a.node, b.node);
        chosen.insert(a.node);
    }
    assert!(chosen.len() > 1, "different pods spread over tied nodes");
}

#[test]
fn prefilter_narrowing() {
    let snap = snapshot(vec![
        node("a").build(),
        node("b").label("reject", "nope").build(),
    ]);
    let p = pod("p").label("only", "b").build();
    let err = schedule_one(&profile(1), &snap, &p, &mut CycleMemory::default(), &OPTS).unwrap_err();
    assert_eq!(
        err.to_string(),
        "0/2 nodes are available: 1 node(s) didn't satisfy plugin(s) [OnlyNode], 1 nope."
    );
    let p = pod("p").label("only", "ghost").build();
    let err = schedule_one(&profile(1), &snap, &p, &mut CycleMemory::default(), &OPTS).unwrap_err();
    assert_eq!(
        err.to_string(),
        "0/2 nodes are available: 2 node(s) didn't satisfy plugin(s) [OnlyNode]."
    );
}

#[test]
fn adaptive_percentage_of_nodes_to_score() {
    assert_eq!(num_feasible_nodes_to_find(0, 50), 50);
    assert_eq!(num_feasible_nodes_to_find(0, 100), 100);
    assert_eq!(num_feasible_nodes_to_find(0, 1000), 420);
    assert_eq!(num_feasible_nodes_to_find(0, 5000), 500);
    assert_eq!(num_feasible_nodes_to_find(0, 15000), 750);
    assert_eq!(num_feasible_nodes_to_find(10, 500), 100);
    assert_eq!(num_feasible_nodes_to_find(100, 5000), 5000);
}

#[test]
fn memory_spreads_the_search_and_parallel_matches_sequential() {
    let nodes: Vec<_> = (0..1000)
        .map(|i| {
            let b = node(&format!("n{i:04}")).label("score", &(i % 7).to_string());
            if i % 3 == 0 {
                b.label("reject", "no").build()
            } else {
                b.build()
            }
        })
        .collect();
    let snap = snapshot(nodes);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(4)
        .build()
        .unwrap();
    let par = CycleOptions {
        pool: Some(&pool),
        percentage_of_nodes_to_score: 0,
        top_scores: 3,
        nominated: None,
        waiting: None,
        preempt_extenders: false,
        preemption_running: false,
    };
    let (mut r1, mut r2) = (CycleMemory::default(), CycleMemory::default());
    for i in 0..5 {
        let p = pod(&format!("p{i}")).build();
        let a = schedule_one(&profile(1), &snap, &p, &mut r1, &OPTS).unwrap();
        let b = schedule_one(&profile(1), &snap, &p, &mut r2, &par).unwrap();
        assert_eq!(a.node, b.node);
        assert_eq!(a.feasible, 420);
        assert_eq!(a.evaluated, b.evaluated);
        assert!(a.evaluated >= 420 + 420 / 2 - 1);
    }
    assert_eq!(r1.next_start, r2.next_start);
    assert!(r1.next_start > 0);
}

/// [`LabelScore`] declaring that it does not normalize: the cycle adds its raw scores up.
struct RawLabelScore;
impl Plugin for RawLabelScore {
    fn name(&self) -> &'static str {
        "RawLabelScore"
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}
impl ScorePlugin for RawLabelScore {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        LabelScore.score(state, pod, node)
    }
    fn normalizes(&self) -> bool {
        false
    }
}

#[test]
fn raw_scores_are_weighted_and_range_checked_as_normalized_ones_are() {
    let raw = |weight: i64| Profile {
        score: vec![(Arc::new(RawLabelScore), weight), (Arc::new(LabelScore), 1)],
        ..profile(1)
    };
    let snap = snapshot(vec![
        node("low").label("score", "10").build(),
        node("high").label("score", "90").build(),
    ]);
    let p = schedule_one(
        &raw(3),
        &snap,
        &pod("p").build(),
        &mut CycleMemory::default(),
        &OPTS,
    )
    .unwrap();
    assert_eq!(&*p.node, "high");
    assert_eq!(p.score_plugins, ["RawLabelScore", "LabelScore"]);
    assert_eq!(p.scores[0].weighted, [270, 90]);
    assert_eq!(p.scores[0].total, 360);
    let snap = snapshot(vec![
        node("a").label("score", "10").build(),
        node("b").label("score", "101").build(),
    ]);
    for prof in [raw(1), profile(1)] {
        let err = schedule_one(
            &prof,
            &snap,
            &pod("p").build(),
            &mut CycleMemory::default(),
            &OPTS,
        )
        .unwrap_err();
        let name = prof.score[0].0.name();
        assert_eq!(
            err.to_string(),
            format!(
                "Error ({name}): plugin {name} returns an invalid score 101, it should be in the range of [0, 100] after normalizing"
            )
        );
    }
}
