//! LoadAware: schedules by how busy nodes really are, not by what their pods requested.
//!
//! Koordinator's LoadAwareScheduling is the model. A node's load is the latest sample of its
//! metrics source (see [`crate::model::load`]) plus an estimate of every pod placed there that
//! the sample does not reflect yet, plus an estimate of the pod being scheduled: a share of
//! each pod's requests (`estimatedScalingFactors`, default 85% of cpu and 70% of memory), or
//! 250m / 200 MiB for a pod that requests none. The estimate of recent placements is what
//! keeps a burst of pods from all landing on the node that looked idle a moment ago.
//!
//! - Filter: a node whose estimated utilisation of a resource, in whole percent (rounded),
//!   is above `usageThresholds` (default cpu 65, memory 95; 0 turns a check off) is rejected.
//! - Score: the weighted mean (`resourceWeights`) of each resource's free share,
//!   `(allocatable - used) * 100 / allocatable`, 0 when over-used; already on `0..=100`, so
//!   there is no normalization.
//! - A node without a fresh sample (none yet, or older than the source's maximum age) is
//!   treated as `staleMetrics` says: `Filter` rejects it; `Neutral` (the default) lets it
//!   pass and scores it [`NEUTRAL_SCORE`], halfway between an idle and a saturated node, so
//!   that a metrics source going down never stops scheduling.
//! - DaemonSet pods are not filtered: they go where their node is, whatever its load.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::cache::{NodeInfo, Snapshot, Tracked};
use crate::framework::{
    ArgsError, ClusterEvent, CycleState, EventHint, FilterPlugin, MAX_NODE_SCORE, Plugin,
    PluginArgs, PluginSpec, PreFilterPlugin, PreFilterResult, PreScorePlugin, ScorePlugin, Status,
    decode_args,
};
use crate::model::PodInfo;
use crate::model::load::NodeLoad;

/// The plugin's name in configuration files.
pub const NAME: &str = "LoadAware";

/// Reason for a node without a fresh load sample, under the `Filter` policy.
pub const ERR_REASON_STALE: &str = "node(s) had no fresh load metrics";
/// Reason for a node whose estimated cpu utilisation is above the threshold (Koordinator's
/// wording).
pub const ERR_REASON_CPU: &str = "node(s) cpu usage exceed threshold";
/// Reason for a node whose estimated memory utilisation is above the threshold.
pub const ERR_REASON_MEMORY: &str = "node(s) memory usage exceed threshold";

/// Score of a node without a fresh sample under the `Neutral` policy.
pub const NEUTRAL_SCORE: i64 = MAX_NODE_SCORE / 2;
/// Estimated cpu use of a pod that requests no cpu, in millicores (Koordinator's).
pub const DEFAULT_MILLI_CPU_ESTIMATE: i64 = 250;
/// Estimated memory use of a pod that requests no memory, in bytes (Koordinator's).
pub const DEFAULT_MEMORY_ESTIMATE: i64 = 200 * 1024 * 1024;

/// The resources the plugin weighs, in the order of its per-resource arrays.
const RESOURCES: [&str; 2] = ["cpu", "memory"];
const CPU: usize = 0;
const MEMORY: usize = 1;

/// What to do with a node whose load is unknown or stale.
#[derive(Debug, Clone, Copy, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
pub enum StaleMetrics {
    /// Reject the node.
    Filter,
    /// Let the node pass, and score it [`NEUTRAL_SCORE`].
    #[default]
    Neutral,
}

/// `LoadAwareArgs`.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct LoadAwareArgs {
    /// Highest estimated utilisation, in percent, a node may have to pass the filter, by
    /// resource (`cpu`, `memory`); a resource left out, or 0, is not checked. Default cpu 65,
    /// memory 95.
    pub usage_thresholds: BTreeMap<String, i64>,
    /// Weight of each resource in the score; a resource left out weighs 0. Default 1 each.
    pub resource_weights: BTreeMap<String, i64>,
    /// Share, in percent, of a pod's request it is expected to use; a resource left out keeps
    /// its default (cpu 85, memory 70).
    pub estimated_scaling_factors: BTreeMap<String, i64>,
    /// What to do with nodes without a fresh load sample.
    pub stale_metrics: StaleMetrics,
}

const DEFAULT_THRESHOLDS: [i64; 2] = [65, 95];
const DEFAULT_WEIGHTS: [i64; 2] = [1, 1];
const DEFAULT_FACTORS: [i64; 2] = [85, 70];

fn by_resource(values: [i64; 2]) -> BTreeMap<String, i64> {
    RESOURCES
        .iter()
        .zip(values)
        .map(|(r, v)| (r.to_string(), v))
        .collect()
}

impl Default for LoadAwareArgs {
    fn default() -> Self {
        LoadAwareArgs {
            usage_thresholds: by_resource(DEFAULT_THRESHOLDS),
            resource_weights: by_resource(DEFAULT_WEIGHTS),
            estimated_scaling_factors: by_resource(DEFAULT_FACTORS),
            stale_metrics: StaleMetrics::default(),
        }
    }
}

/// Checks that every key of `map` (the field `field`) is a resource the plugin knows and its
/// value lies in `range`.
fn check_map(
    map: &BTreeMap<String, i64>,
    field: &str,
    range: std::ops::RangeInclusive<i64>,
) -> Result<(), ArgsError> {
    for (name, value) in map {
        if !RESOURCES.contains(&name.as_str()) {
            return Err(ArgsError::new(
                format!("{field}.{name}"),
                format!("Unsupported value: {name:?}: supported values: \"cpu\", \"memory\""),
            ));
        }
        if !range.contains(value) {
            return Err(ArgsError::new(
                format!("{field}.{name}"),
                format!(
                    "Invalid value: {value}: must be between {} and {}",
                    range.start(),
                    range.end()
                ),
            ));
        }
    }
    Ok(())
}

impl PluginArgs for LoadAwareArgs {
    const KIND: &'static str = "LoadAwareArgs";

    fn validate(&self) -> Result<(), ArgsError> {
        check_map(&self.usage_thresholds, "usageThresholds", 0..=100)?;
        check_map(&self.resource_weights, "resourceWeights", 0..=100)?;
        check_map(
            &self.estimated_scaling_factors,
            "estimatedScalingFactors",
            1..=100,
        )?;
        if self.resource_weights.values().sum::<i64>() == 0 {
            return Err(ArgsError::new(
                "resourceWeights",
                "Required value: at least one resource must weigh more than 0",
            ));
        }
        Ok(())
    }
}

/// The LoadAware plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadAware {
    /// Per resource: highest utilisation percent, 0 for none.
    thresholds: [i64; 2],
    weights: [i64; 2],
    weight_sum: i64,
    factors: [i64; 2],
    stale: StaleMetrics,
}

/// The plugin for the registry; not in kube-scheduler's default profile (a profile enables it).
pub const SPEC: PluginSpec = PluginSpec {
    name: NAME,
    factory,
    default: None,
    args: Some(crate::framework::resolved_args::<LoadAwareArgs>),
};

/// Builds the plugin from its `LoadAwareArgs`.
pub fn factory(args: Option<&serde_json::Value>) -> Result<Arc<dyn Plugin>, ArgsError> {
    let args = decode_args::<LoadAwareArgs>(args)?;
    Ok(Arc::new(LoadAware::new(&args)))
}

impl LoadAware {
    /// The plugin for validated arguments.
    pub fn new(args: &LoadAwareArgs) -> Self {
        let get = |map: &BTreeMap<String, i64>, default: [i64; 2]| {
            let mut out = [0; 2];
            for (i, r) in RESOURCES.iter().enumerate() {
                out[i] = map.get(*r).copied().unwrap_or(default[i]);
            }
            out
        };
        let weights = get(&args.resource_weights, [0, 0]);
        LoadAware {
            thresholds: get(&args.usage_thresholds, [0, 0]),
            weight_sum: weights.iter().sum(),
            weights,
            factors: get(&args.estimated_scaling_factors, DEFAULT_FACTORS),
            stale: args.stale_metrics,
        }
    }

    /// The use a pod is expected to make of each resource.
    fn estimate(&self, pod: &PodInfo) -> [i64; 2] {
        [
            estimate(
                pod.requests.milli_cpu,
                self.factors[CPU],
                DEFAULT_MILLI_CPU_ESTIMATE,
            ),
            estimate(
                pod.requests.memory,
                self.factors[MEMORY],
                DEFAULT_MEMORY_ESTIMATE,
            ),
        ]
    }

    /// Estimated use and allocatable amount of each resource on the node with the pod: the
    /// measured share of allocatable, plus the recent placements' and the pod's estimates.
    fn usage(&self, node: &NodeInfo, load: &NodeLoad, pod: [i64; 2]) -> [(i64, i64); 2] {
        let alloc = &node.node.allocatable;
        let allocatable = [alloc.milli_cpu, alloc.memory];
        let measured = [load.sample.cpu, load.sample.memory];
        let mut used = [0i64; 2];
        for i in 0..2 {
            used[i] = share_of(measured[i], allocatable[i]) + pod[i];
        }
        for r in &load.recent {
            let e = self.estimate(&r.pod);
            used[CPU] += e[CPU];
            used[MEMORY] += e[MEMORY];
        }
        [
            (used[CPU], allocatable[CPU]),
            (used[MEMORY], allocatable[MEMORY]),
        ]
    }
}

/// `request * factor / 100`, rounded half up; `default` for a pod requesting nothing.
fn estimate(request: i64, factor: i64, default: i64) -> i64 {
    if request <= 0 {
        return default;
    }
    ((i128::from(request) * i128::from(factor) + 50) / 100) as i64
}

/// `fraction` of `amount`, rounded.
fn share_of(fraction: f64, amount: i64) -> i64 {
    (fraction * amount as f64).round() as i64
}

/// `used / allocatable` in whole percent, rounded half up (Koordinator's `math.Round`).
fn percent(used: i64, allocatable: i64) -> i64 {
    ((i128::from(used) * 200 + i128::from(allocatable)) / (2 * i128::from(allocatable))) as i64
}

/// The free share of a resource, `0..=100`: 0 when over-used or when nothing is allocatable.
fn least_used_score(used: i64, allocatable: i64) -> i64 {
    if allocatable <= 0 || used > allocatable {
        return 0;
    }
    ((i128::from(allocatable - used) * i128::from(MAX_NODE_SCORE)) / i128::from(allocatable)) as i64
}

/// What the plugin computes once per cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LoadAwareState {
    /// The cycle's time, to judge samples' age.
    now: Duration,
    /// The pod's estimated use of each resource.
    pod: [i64; 2],
}

/// Fresh load samples, and nodes appearing or changing.
const EVENTS: [EventHint; 3] = [
    EventHint::any(ClusterEvent::NodeLoadChange),
    EventHint::any(ClusterEvent::NodeAdd),
    EventHint::any(ClusterEvent::NodeUpdate),
];

impl Plugin for LoadAware {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [EventHint] {
        &EVENTS
    }
    fn cache_state(&self) -> &'static [Tracked] {
        &[Tracked::NodeLoad]
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
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

impl PreFilterPlugin for LoadAware {
    /// Computes the pod's estimate; skips the filter for DaemonSet pods.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        state.insert(LoadAwareState {
            now: snapshot.now(),
            pod: self.estimate(pod),
        });
        if pod.owner.as_ref().is_some_and(|o| o.kind == "DaemonSet") {
            return (PreFilterResult::default(), Status::skip());
        }
        (PreFilterResult::default(), Status::success())
    }
}

impl FilterPlugin for LoadAware {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.get::<LoadAwareState>() else {
            return Status::error(
                "error reading \"PreFilterLoadAware\" from cycleState: not found",
            );
        };
        let Some(load) = node.load.as_deref().filter(|l| l.sample.is_fresh(s.now)) else {
            return match self.stale {
                StaleMetrics::Filter => Status::unschedulable(ERR_REASON_STALE),
                StaleMetrics::Neutral => Status::success(),
            };
        };
        let usage = self.usage(node, load, s.pod);
        for (i, (used, allocatable)) in usage.into_iter().enumerate() {
            let threshold = self.thresholds[i];
            if threshold > 0 && allocatable > 0 && percent(used, allocatable) > threshold {
                return Status::unschedulable(if i == CPU {
                    ERR_REASON_CPU
                } else {
                    ERR_REASON_MEMORY
                });
            }
        }
        Status::success()
    }
}

impl PreScorePlugin for LoadAware {
    /// Computes the pod's estimate if PreFilter did not (its filter may be disabled).
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        _feasible: &[&NodeInfo],
    ) -> Status {
        if state.get::<LoadAwareState>().is_none() {
            state.insert(LoadAwareState {
                now: snapshot.now(),
                pod: self.estimate(pod),
            });
        }
        Status::success()
    }
}

impl ScorePlugin for LoadAware {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(s) = state.get::<LoadAwareState>() else {
            return Err(Status::error(
                "error reading \"PreScoreLoadAware\" from cycleState: not found",
            ));
        };
        let Some(load) = node.load.as_deref().filter(|l| l.sample.is_fresh(s.now)) else {
            return Ok(NEUTRAL_SCORE);
        };
        let usage = self.usage(node, load, s.pod);
        let sum: i64 = usage
            .into_iter()
            .zip(self.weights)
            .map(|((used, allocatable), w)| least_used_score(used, allocatable) * w)
            .sum();
        Ok(sum / self.weight_sum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::model::load::LoadSample;
    use crate::testing::{node, node_info, pod};

    const GI: i64 = 1 << 30;

    fn plugin(args: serde_json::Value) -> LoadAware {
        LoadAware::new(&decode_args::<LoadAwareArgs>(Some(&args)).expect("valid args"))
    }

    fn sample(cpu: f64, memory: f64, taken_at: u64) -> LoadSample {
        LoadSample {
            cpu,
            memory,
            taken_at: Duration::from_secs(taken_at),
            reflects_placements_before: Duration::from_secs(taken_at),
            max_age: Some(Duration::from_secs(60)),
        }
    }

    /// A 10-cpu, 10 GiB node measured at `cpu` and `memory` at time 0.
    fn loaded(cpu: f64, memory: f64) -> NodeInfo {
        let mut info = node_info(node("n").capacity("10", "10Gi").build(), &[]);
        info.load = Some(Box::new(NodeLoad::new(sample(cpu, memory, 0))));
        info
    }

    fn state(p: &LoadAware, pod: &PodInfo, now: u64) -> CycleState {
        let mut snapshot = Snapshot::default();
        snapshot.set_now(Duration::from_secs(now));
        let mut s = CycleState::new();
        let (_, status) = p.pre_filter(&mut s, pod, &snapshot);
        assert!(status.is_success() || status.is_skip());
        s
    }

    fn filter(p: &LoadAware, pod: &PodInfo, info: &NodeInfo, now: u64) -> Status {
        p.filter(&state(p, pod, now), pod, info)
    }

    fn score(p: &LoadAware, pod: &PodInfo, info: &NodeInfo, now: u64) -> i64 {
        p.score(&state(p, pod, now), pod, info).expect("score")
    }

    #[test]
    fn defaults_are_koordinators() {
        let p = plugin(serde_json::json!({}));
        assert_eq!(p.thresholds, [65, 95]);
        assert_eq!(p.weights, [1, 1]);
        assert_eq!(p.factors, [85, 70]);
        assert_eq!(p.stale, StaleMetrics::Neutral);
        // A factor left out keeps its default; a threshold or weight left out is off.
        let p = plugin(serde_json::json!({
            "usageThresholds": {"cpu": 80},
            "resourceWeights": {"memory": 2},
            "estimatedScalingFactors": {"memory": 100},
            "staleMetrics": "Filter"
        }));
        assert_eq!(p.thresholds, [80, 0]);
        assert_eq!((p.weights, p.weight_sum), ([0, 2], 2));
        assert_eq!(p.factors, [85, 100]);
        assert_eq!(p.stale, StaleMetrics::Filter);
    }

    #[test]
    fn invalid_args_name_the_field() {
        let err = |v: serde_json::Value| decode_args::<LoadAwareArgs>(Some(&v)).unwrap_err();
        let e = err(serde_json::json!({"usageThresholds": {"gpu": 50}}));
        assert_eq!(e.field, "usageThresholds.gpu");
        assert_eq!(
            e.reason,
            "Unsupported value: \"gpu\": supported values: \"cpu\", \"memory\""
        );
        let e = err(serde_json::json!({"usageThresholds": {"cpu": 101}}));
        assert_eq!(
            (e.field.as_str(), e.reason.as_str()),
            (
                "usageThresholds.cpu",
                "Invalid value: 101: must be between 0 and 100"
            )
        );
        let e = err(serde_json::json!({"estimatedScalingFactors": {"memory": 0}}));
        assert_eq!(e.field, "estimatedScalingFactors.memory");
        assert_eq!(e.reason, "Invalid value: 0: must be between 1 and 100");
        let e = err(serde_json::json!({"resourceWeights": {"cpu": -1}}));
        assert_eq!(e.field, "resourceWeights.cpu");
        let e = err(serde_json::json!({"resourceWeights": {"cpu": 0, "memory": 0}}));
        assert_eq!(e.field, "resourceWeights");
        let e = err(serde_json::json!({"staleMetrics": "Ignore"}));
        assert_eq!(e.field, "staleMetrics");
        let e = err(serde_json::json!({"threshold": 1}));
        assert_eq!(e.field, "threshold");
        assert!(
            e.reason.contains("unknown field `threshold`"),
            "{}",
            e.reason
        );
        // Thresholds of 0 and 100 are valid.
        let ok = serde_json::json!({"usageThresholds": {"cpu": 0, "memory": 100}});
        assert!(decode_args::<LoadAwareArgs>(Some(&ok)).is_ok());
    }

    #[test]
    fn estimates_are_a_rounded_share_of_requests() {
        assert_eq!(estimate(1000, 85, 250), 850);
        assert_eq!(estimate(1, 50, 250), 1, "0.5 rounds up");
        assert_eq!(estimate(1, 49, 250), 0, "0.49 rounds down");
        assert_eq!(estimate(0, 85, 250), 250, "no request: the default");
        assert_eq!(estimate(3 * GI, 70, 0), (3 * GI * 70 + 50) / 100);
        let p = plugin(serde_json::json!({}));
        let best_effort = pod("be").build();
        assert_eq!(
            p.estimate(&best_effort),
            [DEFAULT_MILLI_CPU_ESTIMATE, DEFAULT_MEMORY_ESTIMATE]
        );
        let sized = pod("s").req("cpu", "2").req("memory", "1Gi").build();
        assert_eq!(p.estimate(&sized), [1700, (GI * 70 + 50) / 100]);
    }

    #[test]
    fn percent_rounds_half_up_as_koordinator() {
        assert_eq!(percent(6449, 10_000), 64);
        assert_eq!(percent(6450, 10_000), 65);
        assert_eq!(percent(6549, 10_000), 65);
        assert_eq!(percent(6550, 10_000), 66);
        assert_eq!(percent(0, 10_000), 0);
        assert_eq!(percent(20_000, 10_000), 200);
    }

    #[test]
    fn filter_rejects_above_the_threshold_only() {
        // cpu threshold 65 on a 10-cpu node; the pod asks 100m, expected to use 85m.
        let p = plugin(serde_json::json!({}));
        let small = pod("p").req("cpu", "100m").req("memory", "1Mi").build();
        // 64% measured + 85m = 64.85% -> 65: at the threshold, passes.
        assert!(filter(&p, &small, &loaded(0.64, 0.1), 0).is_success());
        // 64.2% + 0.85% = 65.05% -> 65: still passes.
        assert!(filter(&p, &small, &loaded(0.642, 0.1), 0).is_success());
        // 64.7% + 0.85% = 65.55% -> 66: rejected, Unschedulable (load may drop).
        let s = filter(&p, &small, &loaded(0.647, 0.1), 0);
        assert_eq!(s.code(), Code::Unschedulable);
        assert_eq!(s.reasons(), [ERR_REASON_CPU]);
        // Memory: threshold 95.
        let s = filter(&p, &small, &loaded(0.1, 0.96), 0);
        assert_eq!(s.reasons(), [ERR_REASON_MEMORY]);
        assert!(filter(&p, &small, &loaded(0.1, 0.949), 0).is_success());
        // cpu is checked first.
        assert_eq!(
            filter(&p, &small, &loaded(0.99, 0.99), 0).reasons(),
            [ERR_REASON_CPU]
        );
        // A threshold of 0 checks nothing.
        let off = plugin(serde_json::json!({"usageThresholds": {"cpu": 0}}));
        assert!(filter(&off, &small, &loaded(1.0, 1.0), 0).is_success());
    }

    #[test]
    fn pods_placed_since_the_sample_count_with_their_estimate() {
        let p = plugin(serde_json::json!({}));
        let incoming = pod("next").req("cpu", "1").build();
        let mut info = loaded(0.40, 0.1);
        // 40% + 850m = 48.5% -> 49: fine.
        assert!(filter(&p, &incoming, &info, 0).is_success());
        let before = score(&p, &incoming, &info, 0);
        // Two pods of 1 cpu placed since the sample: +1700m -> 65.5% -> 66: rejected.
        let load = info.load.as_mut().unwrap();
        for name in ["a", "b"] {
            load.note_placement(pod(name).req("cpu", "1").build(), Duration::from_secs(1));
        }
        assert_eq!(filter(&p, &incoming, &info, 1).reasons(), [ERR_REASON_CPU]);
        assert!(score(&p, &incoming, &info, 1) < before);
        // A sample reflecting them replaces the estimate with the measurement.
        let load = info.load.as_mut().unwrap();
        load.update(sample(0.40, 0.1, 2));
        assert!(load.recent.is_empty());
        assert!(filter(&p, &incoming, &info, 2).is_success());
    }

    #[test]
    fn stale_or_missing_samples_follow_the_policy() {
        let neutral = plugin(serde_json::json!({}));
        let strict = plugin(serde_json::json!({"staleMetrics": "Filter"}));
        let p = pod("p").req("cpu", "1").build();
        let unknown = node_info(node("n").capacity("10", "10Gi").build(), &[]);
        let busy = loaded(0.9, 0.9);
        // Fresh up to 60 s inclusive: judged on its load.
        assert_eq!(filter(&neutral, &p, &busy, 60).reasons(), [ERR_REASON_CPU]);
        // Older: stale.
        for info in [&unknown, &busy] {
            assert!(filter(&neutral, &p, info, 61).is_success());
            assert_eq!(score(&neutral, &p, info, 61), NEUTRAL_SCORE);
            let s = filter(&strict, &p, info, 61);
            assert_eq!(s.code(), Code::Unschedulable);
            assert_eq!(s.reasons(), [ERR_REASON_STALE]);
        }
        // A sample without a maximum age never goes stale.
        let mut forever = loaded(0.1, 0.1);
        forever.load.as_mut().unwrap().sample.max_age = None;
        assert!(filter(&strict, &p, &forever, 1_000_000).is_success());
    }

    #[test]
    fn score_is_the_weighted_free_share() {
        let p = plugin(serde_json::json!({}));
        let pod_1 = pod("p").req("cpu", "1").req("memory", "1Gi").build();
        // cpu: 20% of 10 cpus + 850m = 2850m -> free 71.5 -> 71; memory: 50% of 10 GiB
        // + 0.7 GiB (rounded up to a byte) -> free just under 43 -> 42; (71 + 42) / 2 = 56.
        assert_eq!(score(&p, &pod_1, &loaded(0.2, 0.5), 0), 56);
        // Weights 3:1.
        let weighted = plugin(serde_json::json!({"resourceWeights": {"cpu": 3, "memory": 1}}));
        assert_eq!(
            score(&weighted, &pod_1, &loaded(0.2, 0.5), 0),
            (71 * 3 + 42) / 4
        );
        // Over-used scores 0; an idle node near 100.
        assert_eq!(score(&p, &pod_1, &loaded(1.0, 1.0), 0), 0);
        assert_eq!(least_used_score(0, 100), 100);
        assert_eq!(least_used_score(101, 100), 0);
        assert_eq!(least_used_score(100, 100), 0);
        assert_eq!(least_used_score(5, 0), 0);
        // Less loaded scores higher.
        assert!(score(&p, &pod_1, &loaded(0.1, 0.5), 0) > score(&p, &pod_1, &loaded(0.3, 0.5), 0));
    }

    #[test]
    fn daemonset_pods_skip_the_filter() {
        let p = plugin(serde_json::json!({}));
        let mut ds = pod("ds").req("cpu", "1").api();
        ds.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "apps/v1".to_string(),
                kind: "DaemonSet".to_string(),
                name: "agent".to_string(),
                uid: "u".to_string(),
                controller: Some(true),
                ..Default::default()
            },
        ]);
        let ds = PodInfo::from_api(&ds).unwrap();
        let mut s = CycleState::new();
        let (_, status) = p.pre_filter(&mut s, &ds, &Snapshot::default());
        assert!(status.is_skip());
        // Its state is still there for scoring.
        assert!(p.score(&s, &ds, &loaded(0.5, 0.5)).is_ok());
    }

    #[test]
    fn missing_state_is_an_error() {
        let p = plugin(serde_json::json!({}));
        let x = pod("x").build();
        let s = p.filter(&CycleState::new(), &x, &loaded(0.1, 0.1));
        assert_eq!(s.code(), Code::Error);
        assert!(p.score(&CycleState::new(), &x, &loaded(0.1, 0.1)).is_err());
        // PreScore fills the state in when PreFilter did not run.
        let mut state = CycleState::new();
        assert!(
            p.pre_score(&mut state, &x, &Snapshot::default(), &[])
                .is_success()
        );
        assert!(p.score(&state, &x, &loaded(0.1, 0.1)).is_ok());
    }
}
