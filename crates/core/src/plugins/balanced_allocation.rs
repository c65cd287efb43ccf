//! NodeResourcesBalancedAllocation: favours nodes whose resources would be used evenly once
//! the pod is placed, scoring `(1 - standard deviation of the requested/allocatable
//! fractions) * 100`.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::Deserialize;

use crate::cache::{NodeInfo, NodeRow, Snapshot};
use crate::framework::{
    ArgsError, CycleState, DefaultPlace, MAX_NODE_SCORE, NodeBlock, Plugin, PluginArgs, PluginSpec,
    PreScorePlugin, ScorePlugin, Status, decode_args,
};
use crate::model::PodInfo;

use super::resource_allocation::{
    PodRequests, RequestView, ResourceAllocation, ResourceSpec, default_resources,
    deserialize_resources,
};

/// The plugin's name in configuration files.
pub const NAME: &str = "NodeResourcesBalancedAllocation";

/// `NodeResourcesBalancedAllocationArgs` (kubescheduler.config.k8s.io/v1).
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct NodeResourcesBalancedAllocationArgs {
    /// The resources whose balance is scored; cpu and memory when empty. Every weight must
    /// be 1 (0 or absent means 1).
    #[serde(deserialize_with = "deserialize_resources")]
    pub resources: Vec<ResourceSpec>,
}

impl Default for NodeResourcesBalancedAllocationArgs {
    /// kube-scheduler's default: cpu and memory.
    fn default() -> Self {
        NodeResourcesBalancedAllocationArgs {
            resources: default_resources(),
        }
    }
}

impl PluginArgs for NodeResourcesBalancedAllocationArgs {
    const KIND: &'static str = "NodeResourcesBalancedAllocationArgs";

    fn validate(&self) -> Result<(), ArgsError> {
        let mut seen = BTreeSet::new();
        for (i, r) in self.resources.iter().enumerate() {
            if !seen.insert(r.name.as_str()) {
                return Err(ArgsError::new(
                    format!("resources[{i}].name"),
                    format!("Duplicate value: {:?}", r.name),
                ));
            }
            if r.weight != 1 {
                return Err(ArgsError::new(
                    format!("resources[{i}].weight"),
                    format!("Invalid value: {}: must be 1", r.weight),
                ));
            }
        }
        Ok(())
    }
}

/// The NodeResourcesBalancedAllocation plugin.
#[derive(Debug, Clone)]
pub struct NodeResourcesBalancedAllocation {
    allocation: ResourceAllocation,
}

/// The plugin for the registry, with its place in kube-scheduler's default profile.
pub const SPEC: PluginSpec = PluginSpec {
    name: NAME,
    factory,
    default: Some(DefaultPlace {
        order: 110,
        weight: Some(1),
    }),
    args: Some(crate::framework::resolved_args::<NodeResourcesBalancedAllocationArgs>),
};

/// Builds the plugin from its `NodeResourcesBalancedAllocationArgs`.
pub fn factory(args: Option<&serde_json::Value>) -> Result<Arc<dyn Plugin>, ArgsError> {
    let args = decode_args::<NodeResourcesBalancedAllocationArgs>(args)?;
    Ok(Arc::new(NodeResourcesBalancedAllocation::new(&args)))
}

impl NodeResourcesBalancedAllocation {
    /// The plugin for validated arguments. It weighs the pods' actual requests: a pod
    /// without requests does not unbalance a node.
    pub fn new(args: &NodeResourcesBalancedAllocationArgs) -> Self {
        NodeResourcesBalancedAllocation {
            allocation: ResourceAllocation::new(&args.resources, RequestView::Actual),
        }
    }

    #[inline]
    fn score_node(&self, node: &NodeInfo, pod_requests: &PodRequests) -> i64 {
        // Two passes over the fractions, as kube-scheduler computes them, so the floating
        // point result (and its truncation) is the same.
        let (mut count, mut total, mut first, mut second) = (0usize, 0f64, 0f64, 0f64);
        pod_requests.for_each(node, |_, req, alloc| {
            let f = fraction(req, alloc);
            match count {
                0 => first = f,
                1 => second = f,
                _ => {}
            }
            count += 1;
            total += f;
        });
        let std = match count {
            0 | 1 => 0.0,
            2 => ((first - second) / 2.0).abs(),
            n => {
                let mean = total / n as f64;
                let mut sum = 0.0;
                pod_requests.for_each(node, |_, req, alloc| {
                    let d = fraction(req, alloc) - mean;
                    sum += d * d;
                });
                (sum / n as f64).sqrt()
            }
        };
        ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
    }
}

/// The score of a node with these (requested, allocatable) amounts of cpu and memory:
/// kube-scheduler's two-resource case, where the standard deviation of two fractions is half
/// their difference, and a node missing one resource has a deviation of 0.
#[inline(always)]
fn balance_of_two(amounts: ((i64, i64), (i64, i64))) -> i64 {
    let ((cpu, cpu_alloc), (memory, memory_alloc)) = amounts;
    if cpu_alloc != 0 && memory_alloc != 0 {
        let std = ((fraction(cpu, cpu_alloc) - fraction(memory, memory_alloc)) / 2.0).abs();
        ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
    } else {
        MAX_NODE_SCORE
    }
}

/// `requested / allocatable`, capped at 1.
#[inline]
fn fraction(requested: i64, allocatable: i64) -> f64 {
    (requested as f64 / allocatable as f64).min(1.0)
}

/// The pod's request of each scored resource, computed once per cycle.
#[derive(Debug, Clone)]
struct PreScoreState {
    pod_requests: PodRequests,
}

impl Plugin for NodeResourcesBalancedAllocation {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl PreScorePlugin for NodeResourcesBalancedAllocation {
    /// Skips scoring for pods that request none of the resources: they would not change
    /// any node's balance, and scoring them by the nodes' current balance alone piles them
    /// onto the same node (kube-scheduler 1.33+).
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
        _feasible: &[&NodeInfo],
    ) -> Status {
        let pod_requests = self.allocation.pod_requests(pod);
        if pod_requests.is_empty() {
            return Status::skip();
        }
        state.insert(PreScoreState { pod_requests });
        Status::success()
    }

    fn reads_feasible(&self, _pod: &PodInfo, _snapshot: &Snapshot) -> bool {
        false
    }
}

impl ScorePlugin for NodeResourcesBalancedAllocation {
    fn normalizes(&self) -> bool {
        false
    }

    /// The balance reads the pod's requests and the node's allocatable and requested
    /// amounts.
    fn score_by_requests(&self, _state: &CycleState, _pod: &PodInfo) -> bool {
        true
    }

    /// Scores in 0..=100 directly; kube-scheduler has no normalization for this plugin. As
    /// kube does, a missing PreScore state is recomputed (0 for a pod requesting nothing).
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        if let Some(s) = state.get::<PreScoreState>() {
            return Ok(self.score_node(node, &s.pod_requests));
        }
        let pod_requests = self.allocation.pod_requests(pod);
        if pod_requests.is_empty() {
            return Ok(0);
        }
        Ok(self.score_node(node, &pod_requests))
    }

    fn score_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        block: NodeBlock<'_>,
        scores: &mut [i64],
    ) -> Result<(), Status> {
        let computed;
        let pod_requests = match state.get::<PreScoreState>() {
            Some(s) => &s.pod_requests,
            None => {
                computed = self.allocation.pod_requests(pod);
                if computed.is_empty() {
                    scores.fill(0);
                    return Ok(());
                }
                &computed
            }
        };
        if let Some(cm) = pod_requests.cpu_memory() {
            match block.rows {
                Some(rows) => {
                    for (&p, score) in block.positions.iter().zip(scores) {
                        *score = balance_of_two(cm.on_row(&rows[p]));
                    }
                }
                None => {
                    for (node, score) in block.nodes.iter().zip(scores) {
                        *score = balance_of_two(cm.on_row(&NodeRow::of(node)));
                    }
                }
            }
            return Ok(());
        }
        for (node, score) in block.nodes.iter().zip(scores) {
            *score = self.score_node(node, pod_requests);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::testing::{node, node_info, pod};
    use serde_json::json;

    fn plugin(args: serde_json::Value) -> NodeResourcesBalancedAllocation {
        let args = decode_args::<NodeResourcesBalancedAllocationArgs>(Some(&args)).unwrap();
        NodeResourcesBalancedAllocation::new(&args)
    }

    fn default_plugin() -> NodeResourcesBalancedAllocation {
        NodeResourcesBalancedAllocation::new(&NodeResourcesBalancedAllocationArgs::default())
    }

    /// Runs PreScore and Score; `None` when PreScore skips.
    fn score(p: &NodeResourcesBalancedAllocation, pod: &PodInfo, node: &NodeInfo) -> Option<i64> {
        let mut state = CycleState::new();
        let status = p.pre_score(&mut state, pod, &Snapshot::default(), &[node]);
        if status.is_skip() {
            return None;
        }
        assert!(status.is_success());
        Some(p.score(&state, pod, node).unwrap())
    }

    #[test]
    fn block_scores_agree_with_node_scores() {
        let nodes = crate::plugins::resource_allocation::cpu_memory_edge_nodes();
        let refs: Vec<&NodeInfo> = nodes.iter().collect();
        let positions: Vec<usize> = (0..nodes.len()).collect();
        let rows: Vec<NodeRow> = nodes.iter().map(NodeRow::of).collect();
        let with_rows = NodeBlock {
            rows: Some(&rows),
            ..NodeBlock::new(&refs, &positions)
        };
        let p = default_plugin();
        for pod in [
            pod("p").req("cpu", "1").req("memory", "1Gi").build(),
            pod("p").req("cpu", "250m").build(),
        ] {
            let mut state = CycleState::new();
            assert!(
                p.pre_score(&mut state, &pod, &Snapshot::default(), &refs)
                    .is_success()
            );
            let one: Vec<i64> = nodes.iter().map(|n| score(&p, &pod, n).unwrap()).collect();
            for block in [NodeBlock::new(&refs, &positions), with_rows] {
                let mut scores = vec![0; nodes.len()];
                p.score_nodes(&state, &pod, block, &mut scores).unwrap();
                assert_eq!(scores, one);
            }
        }
    }

    fn validate(args: serde_json::Value) -> String {
        decode_args::<NodeResourcesBalancedAllocationArgs>(Some(&args))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn two_resources() {
        // cpu 3000/4000 = 0.75, memory 5000/10000 = 0.5: std = 0.125, (1 - 0.125) * 100 = 87.5
        // truncates to 87.
        let p = pod("p").req("cpu", "3").req("memory", "5000").build();
        let n = node_info(node("n").capacity("4", "10000").build(), &[]);
        assert_eq!(score(&default_plugin(), &p, &n), Some(87));
        // Perfectly balanced: 100.
        let even = pod("p").req("cpu", "2").req("memory", "5000").build();
        assert_eq!(score(&default_plugin(), &even, &n), Some(100));
        // Pods already on the node count: cpu (1000 + 2000) / 4000 = 0.75, memory
        // (1000 + 1000) / 8000 = 0.25: std 0.25, score 75.
        let used = pod("used")
            .on("n")
            .req("cpu", "1")
            .req("memory", "1000")
            .build();
        let busy = node_info(node("n").capacity("4", "8000").build(), &[used]);
        let q = pod("p").req("cpu", "2").req("memory", "1000").build();
        assert_eq!(score(&default_plugin(), &q, &busy), Some(75));
    }

    #[test]
    fn truncation_follows_floating_point() {
        // cpu 1/3, memory 0: std = 1/6, (1 - 1/6) * 100 = 83.33.. -> 83.
        let p = pod("p").req("cpu", "1").build();
        let n = node_info(node("n").capacity("3", "10000").build(), &[]);
        assert_eq!(score(&default_plugin(), &p, &n), Some(83));
        // cpu 1/6, memory 13/15: exactly (1 - 7/20) * 100 = 65, but in floating point
        // 64.99.., which truncates to 64, as in kube-scheduler.
        let q = pod("p").req("cpu", "1").req("memory", "13000").build();
        let n = node_info(node("n").capacity("6", "15000").build(), &[]);
        assert_eq!(score(&default_plugin(), &q, &n), Some(64));
    }

    #[test]
    fn fractions_are_capped_at_one() {
        // cpu 8000/4000 capped to 1, memory 0.5: std 0.25, score 75.
        let p = pod("p").req("cpu", "8").req("memory", "5000").build();
        let n = node_info(node("n").capacity("4", "10000").build(), &[]);
        assert_eq!(score(&default_plugin(), &p, &n), Some(75));
    }

    #[test]
    fn uses_actual_requests_not_non_zero_defaults() {
        // The pod on the node requests nothing and counts as nothing; with the non-zero
        // defaults its 100m cpu would unbalance cpu against memory.
        let idle = pod("idle").on("n").build();
        let n = node_info(node("n").capacity("1", "1000").build(), &[idle]);
        let p = pod("p").req("cpu", "500m").req("memory", "500").build();
        assert_eq!(score(&default_plugin(), &p, &n), Some(100));
        // A pod requesting only cpu: memory fraction stays 0. cpu 0.5: std 0.25 -> 75.
        let cpu_only = pod("p").req("cpu", "500m").build();
        assert_eq!(score(&default_plugin(), &cpu_only, &n), Some(75));
    }

    #[test]
    fn skips_pods_requesting_none_of_the_resources() {
        let n = node_info(
            node("n")
                .capacity("4", "10000")
                .alloc("nvidia.com/gpu", "4")
                .build(),
            &[],
        );
        assert_eq!(score(&default_plugin(), &pod("p").build(), &n), None);
        // Requesting only a resource that is not scored is still "none of them".
        let gpu_only = pod("p").req("nvidia.com/gpu", "1").build();
        assert_eq!(score(&default_plugin(), &gpu_only, &n), None);
        // ... unless that resource is configured.
        let with_gpu = plugin(json!({"resources": [{"name": "cpu"}, {"name": "nvidia.com/gpu"}]}));
        // cpu 0, gpu 0.25: std 0.125 -> 87.
        assert_eq!(score(&with_gpu, &gpu_only, &n), Some(87));
        // Requesting any one of the resources is enough not to skip.
        let mem_only = pod("p").req("memory", "5000").build();
        assert_eq!(score(&default_plugin(), &mem_only, &n), Some(75));
        // Without PreScore state, Score recomputes and gives 0 to such pods.
        assert_eq!(
            default_plugin()
                .score(&CycleState::new(), &pod("p").build(), &n)
                .unwrap(),
            0
        );
        assert_eq!(
            default_plugin()
                .score(&CycleState::new(), &mem_only, &n)
                .unwrap(),
            75
        );
        let mut state = CycleState::new();
        let s =
            default_plugin().pre_score(&mut state, &pod("p").build(), &Snapshot::default(), &[&n]);
        assert_eq!(s.code(), Code::Skip);
    }

    #[test]
    fn three_resources_use_the_standard_deviation() {
        let args =
            json!({"resources": [{"name": "cpu"}, {"name": "memory"}, {"name": "nvidia.com/gpu"}]});
        let p3 = plugin(args);
        let n = node_info(
            node("n")
                .capacity("4", "10000")
                .alloc("nvidia.com/gpu", "4")
                .build(),
            &[],
        );
        // Fractions 0.25, 0.5, 0.75: mean 0.5, variance (0.0625 + 0 + 0.0625) / 3,
        // std 0.2041.., score 79.
        let p = pod("p")
            .req("cpu", "1")
            .req("memory", "5000")
            .req("nvidia.com/gpu", "3")
            .build();
        assert_eq!(score(&p3, &p, &n), Some(79));
        // Without a gpu request the gpu is left out: two resources, 0.25 and 0.5 -> 87.
        let q = pod("p").req("cpu", "1").req("memory", "5000").build();
        assert_eq!(score(&p3, &q, &n), Some(87));
    }

    #[test]
    fn resources_without_allocatable_are_left_out() {
        // Memory allocatable 0: a single fraction has no spread, score 100.
        let n = node_info(node("n").alloc("cpu", "4").alloc("pods", "10").build(), &[]);
        let p = pod("p").req("cpu", "1").req("memory", "1Gi").build();
        assert_eq!(score(&default_plugin(), &p, &n), Some(100));
    }

    #[test]
    fn args_defaults_and_validation() {
        assert_eq!(
            decode_args::<NodeResourcesBalancedAllocationArgs>(None).unwrap(),
            NodeResourcesBalancedAllocationArgs::default()
        );
        assert_eq!(
            decode_args::<NodeResourcesBalancedAllocationArgs>(Some(&json!({"resources": []})))
                .unwrap()
                .resources,
            default_resources()
        );
        assert_eq!(
            decode_args::<NodeResourcesBalancedAllocationArgs>(Some(&json!({
                "kind": "NodeResourcesBalancedAllocationArgs",
                "resources": [{"name": "cpu", "weight": 1}, {"name": "example.com/foo"}]
            })))
            .unwrap()
            .resources,
            vec![
                ResourceSpec::new("cpu", 1),
                ResourceSpec::new("example.com/foo", 1)
            ]
        );
        assert_eq!(
            validate(json!({"resources": [{"name": "cpu", "weight": 2}]})),
            "resources[0].weight: Invalid value: 2: must be 1"
        );
        assert_eq!(
            validate(json!({"resources": [{"name": "cpu"}, {"name": "memory", "weight": -1}]})),
            "resources[1].weight: Invalid value: -1: must be 1"
        );
        assert_eq!(
            validate(json!({"resources": [{"name": "cpu"}, {"name": "cpu"}]})),
            "resources[1].name: Duplicate value: \"cpu\""
        );
        assert!(validate(json!({"kind": "NodeResourcesFitArgs"})).starts_with("kind: expected"));
    }

    #[test]
    fn registered_under_its_name() {
        let f = crate::plugins::registry().get(NAME).expect("registered");
        let p = f(None).unwrap();
        assert_eq!(p.name(), NAME);
        assert!(p.as_pre_score().is_some());
        assert!(p.as_score().is_some());
        assert!(p.as_filter().is_none());
        assert!(f(Some(&json!({"resources": [{"name": "cpu", "weight": 3}]}))).is_err());
    }
}
