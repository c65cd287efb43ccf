//! Overcommit: colocated batch work may use what online services requested but do not use.
//!
//! On nodes that opt in (labels matching `nodeSelector`, default `overcommit=true`), pods of
//! eligible classes may be placed beyond the node's allocatable cpu and memory, up to
//! allocatable times a ratio (`cpuRatio` 1.5, `memoryRatio` 1.2 by default), as long as the
//! node's measured utilisation of that resource is below `loadThreshold` (0.7). Eligible pods
//! are those of the `qosClasses` listed (BestEffort and Burstable by default; Guaranteed pods
//! never are), narrowed, when given, to `priorityClassNames` and to pods matching
//! `podSelector`. Everything else keeps kube-scheduler's rules.
//!
//! Accounting. On an opted-in node an eligible pod counts with its requests, and with
//! kube-scheduler's defaults (100m cpu, 200 MiB) for containers that request nothing, so that
//! BestEffort pods take room too; the node's pods count the same way. A pod that fits within
//! allocatable is placed as usual. One that fits only within the overcommitted capacity is
//! *overcommitted*: it is admitted only while the node has a fresh load sample (see
//! [`crate::model::load`]) below the threshold for every resource it overcommits, and the
//! decision is written on the pod as the annotation [`ANNOTATION`] (committed amount,
//! allocatable, margin, ratio, measured load), which the simulator reports and `gantry run`
//! turns into an `Overcommitted` event. Without a fresh sample the node counts as loaded.
//!
//! How it fits with NodeResourcesFit: like Koordinator's batch resources, overcommitted pods
//! must not be refused by the ordinary cpu and memory check. Instead of rewriting the pods'
//! requests into other resource names, this plugin tells NodeResourcesFit, through
//! [`node_resources_fit::delegate_cpu_memory`], that it checks cpu and memory itself for this
//! pod on opted-in nodes; NodeResourcesFit keeps checking pods, ephemeral storage and extended
//! resources there, and everything on other nodes. The plugin's PreFilter hands the check
//! over and its Filter does it, so the two must be enabled together (`multiPoint` does).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use serde::Deserialize;

use crate::cache::{NodeInfo, Snapshot, Tracked};
use crate::framework::{
    ArgsError, ClusterEvent, Code, CycleState, EventHint, FilterPlugin, Plugin, PluginArgs,
    PluginSpec, PreFilterPlugin, PreFilterResult, ReservePlugin, ReservedAnnotations, Status,
    decode_args,
};
use crate::model::PodInfo;
use crate::model::labels::validate_qualified_name;
use crate::model::pod::QosClass;
use crate::model::selector::LabelSelector;

use super::node_resources_fit::{self, INSUFFICIENT_CPU, INSUFFICIENT_MEMORY};

/// The plugin's name in configuration files.
pub const NAME: &str = "Overcommit";

/// Annotation set on an overcommitted pod with the binding: what was committed on its node.
pub const ANNOTATION: &str = "gantry.io/overcommit";

/// Reason for an opted-in node whose cpu load (or lack of a fresh sample) forbids
/// overcommitting cpu.
pub const ERR_REASON_LOADED_CPU: &str = "node(s) too loaded to overcommit cpu";
/// Reason for an opted-in node whose memory load forbids overcommitting memory.
pub const ERR_REASON_LOADED_MEMORY: &str = "node(s) too loaded to overcommit memory";

const QOS_SUPPORTED: &str = r#"supported values: "BestEffort", "Burstable""#;

/// `OvercommitArgs`.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct OvercommitArgs {
    /// Labels a node must carry to opt in (all of them). Default `overcommit: "true"`.
    pub node_selector: BTreeMap<String, String>,
    /// Capacity for cpu on opted-in nodes, as a multiple of allocatable (at least 1).
    pub cpu_ratio: f64,
    /// Capacity for memory on opted-in nodes, as a multiple of allocatable (at least 1).
    pub memory_ratio: f64,
    /// Measured utilisation (a fraction) at and above which no new pod is overcommitted.
    pub load_threshold: f64,
    /// QoS classes that may be overcommitted: `BestEffort`, `Burstable`.
    pub qos_classes: Vec<String>,
    /// When not empty, only pods of these priority classes may be overcommitted.
    pub priority_class_names: Vec<String>,
    /// When set, only pods matching it may be overcommitted.
    pub pod_selector: Option<meta::LabelSelector>,
}

impl Default for OvercommitArgs {
    fn default() -> Self {
        OvercommitArgs {
            node_selector: [("overcommit".to_string(), "true".to_string())].into(),
            cpu_ratio: 1.5,
            memory_ratio: 1.2,
            load_threshold: 0.7,
            qos_classes: vec!["BestEffort".to_string(), "Burstable".to_string()],
            priority_class_names: Vec::new(),
            pod_selector: None,
        }
    }
}

impl PluginArgs for OvercommitArgs {
    const KIND: &'static str = "OvercommitArgs";

    fn validate(&self) -> Result<(), ArgsError> {
        Overcommit::new(self).map(|_| ())
    }
}

/// The Overcommit plugin.
#[derive(Debug, Clone)]
pub struct Overcommit {
    node_selector: Arc<[(Box<str>, Box<str>)]>,
    /// Per resource (cpu, memory).
    ratios: [f64; 2],
    load_threshold: f64,
    best_effort: bool,
    burstable: bool,
    priority_class_names: Vec<String>,
    pod_selector: Option<LabelSelector>,
}

/// The plugin for the registry; not in kube-scheduler's default profile (a profile enables it).
pub const SPEC: PluginSpec = PluginSpec {
    name: NAME,
    factory,
    default: None,
    args: Some(crate::framework::resolved_args::<OvercommitArgs>),
};

/// Builds the plugin from its `OvercommitArgs`.
pub fn factory(args: Option<&serde_json::Value>) -> Result<Arc<dyn Plugin>, ArgsError> {
    let args = decode_args::<OvercommitArgs>(args)?;
    Ok(Arc::new(Overcommit::new(&args)?))
}

/// The highest overcommit ratio: a node given a hundred times its allocatable is no longer
/// overcommitted but unlimited, which is a mistake, not a policy.
const MAX_RATIO: f64 = 100.0;

fn check_ratio(value: f64, field: &str) -> Result<(), ArgsError> {
    if (1.0..=MAX_RATIO).contains(&value) {
        Ok(())
    } else {
        Err(ArgsError::new(
            field,
            format!("Invalid value: {value}: must be a number between 1 and {MAX_RATIO}"),
        ))
    }
}

impl Overcommit {
    /// Checks and compiles the arguments; an error names the field.
    pub fn new(args: &OvercommitArgs) -> Result<Self, ArgsError> {
        if args.node_selector.is_empty() {
            return Err(ArgsError::new(
                "nodeSelector",
                "Required value: nodes opt in by at least one label",
            ));
        }
        for key in args.node_selector.keys() {
            validate_qualified_name(key).map_err(|msg| {
                ArgsError::new(
                    format!("nodeSelector.{key}"),
                    format!("Invalid value: {key:?}: {msg}"),
                )
            })?;
        }
        check_ratio(args.cpu_ratio, "cpuRatio")?;
        check_ratio(args.memory_ratio, "memoryRatio")?;
        let t = args.load_threshold;
        if !(t > 0.0 && t <= 1.0) {
            return Err(ArgsError::new(
                "loadThreshold",
                format!("Invalid value: {t}: must be a fraction above 0 and at most 1"),
            ));
        }
        if args.qos_classes.is_empty() {
            return Err(ArgsError::new(
                "qosClasses",
                format!("Required value: {QOS_SUPPORTED}"),
            ));
        }
        let (mut best_effort, mut burstable) = (false, false);
        for (i, class) in args.qos_classes.iter().enumerate() {
            match class.as_str() {
                "BestEffort" => best_effort = true,
                "Burstable" => burstable = true,
                "Guaranteed" => {
                    return Err(ArgsError::new(
                        format!("qosClasses[{i}]"),
                        format!(
                            "Unsupported value: \"Guaranteed\": Guaranteed pods are never overcommitted; {QOS_SUPPORTED}"
                        ),
                    ));
                }
                other => {
                    return Err(ArgsError::new(
                        format!("qosClasses[{i}]"),
                        format!("Unsupported value: {other:?}: {QOS_SUPPORTED}"),
                    ));
                }
            }
        }
        let pod_selector = args
            .pod_selector
            .as_ref()
            .map(|s| {
                LabelSelector::compile(Some(s), "podSelector")
                    .map_err(|e| ArgsError::new(e.field, e.reason))
            })
            .transpose()?;
        Ok(Overcommit {
            node_selector: args
                .node_selector
                .iter()
                .map(|(k, v)| (Box::from(k.as_str()), Box::from(v.as_str())))
                .collect(),
            ratios: [args.cpu_ratio, args.memory_ratio],
            load_threshold: t,
            best_effort,
            burstable,
            priority_class_names: args.priority_class_names.clone(),
            pod_selector,
        })
    }

    /// True when the pod may be overcommitted.
    fn eligible(&self, pod: &PodInfo) -> bool {
        let class = match pod.qos_class {
            QosClass::BestEffort => self.best_effort,
            QosClass::Burstable => self.burstable,
            QosClass::Guaranteed => false,
        };
        class
            && (self.priority_class_names.is_empty()
                || self.priority_class_names.contains(&pod.priority_class_name))
            && self
                .pod_selector
                .as_ref()
                .is_none_or(|s| s.matches(&pod.labels))
    }

    /// What the pod would commit on `node` against what the node allows.
    fn assess(&self, node: &NodeInfo, pod: [i64; 2], now: Duration) -> [Assessment; 2] {
        let alloc = &node.node.allocatable;
        let allocatable = [alloc.milli_cpu, alloc.memory];
        let committed = [node.non_zero_milli_cpu, node.non_zero_memory];
        let fresh = node
            .load
            .as_deref()
            .map(|l| l.sample)
            .filter(|s| s.is_fresh(now));
        let measured = fresh.map(|s| [s.cpu, s.memory]);
        let mut out = [Assessment::Fits; 2];
        for i in 0..2 {
            let total = committed[i] + pod[i];
            if pod[i] == 0 || total <= allocatable[i] {
                continue;
            }
            let capacity = capacity(allocatable[i], self.ratios[i]);
            out[i] = if total > capacity {
                Assessment::Insufficient {
                    beyond_capacity: pod[i] > capacity,
                }
            } else {
                match measured.map(|m| m[i]) {
                    Some(load) if load < self.load_threshold => Assessment::Overcommitted {
                        committed: total,
                        allocatable: allocatable[i],
                        load,
                    },
                    _ => Assessment::TooLoaded,
                }
            };
        }
        out
    }
}

/// `allocatable * ratio`, rounded down.
fn capacity(allocatable: i64, ratio: f64) -> i64 {
    (allocatable as f64 * ratio).floor() as i64
}

/// How one resource of a pod fits an opted-in node.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Assessment {
    /// Within allocatable.
    Fits,
    /// Beyond allocatable, within the overcommitted capacity, the node lightly loaded.
    Overcommitted {
        committed: i64,
        allocatable: i64,
        load: f64,
    },
    /// Beyond allocatable, within capacity, but the node is loaded (or its load unknown).
    TooLoaded,
    /// Beyond the overcommitted capacity; `beyond_capacity` when the pod alone exceeds it.
    Insufficient { beyond_capacity: bool },
}

/// The eligible pod's cpu and memory as overcommit counts them, and the cycle's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct OvercommitState {
    pod: [i64; 2],
    now: Duration,
}

/// True when `node` carries every label of `selector`.
fn opted_in(selector: &[(Box<str>, Box<str>)], node: &NodeInfo) -> bool {
    selector
        .iter()
        .all(|(k, v)| node.node.labels.get(k) == Some(&**v))
}

/// Fresh load samples, nodes appearing or changing (the opt-in is a node label), and pods
/// going away.
const EVENTS: [EventHint; 4] = [
    EventHint::any(ClusterEvent::NodeLoadChange),
    EventHint::any(ClusterEvent::NodeAdd),
    EventHint::any(ClusterEvent::NodeUpdate),
    EventHint::any(ClusterEvent::PodDelete),
];

impl Plugin for Overcommit {
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
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for Overcommit {
    /// Skips pods that may not be overcommitted; for the others, takes over NodeResourcesFit's
    /// cpu and memory check on opted-in nodes.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        if !self.eligible(pod) {
            return (PreFilterResult::default(), Status::skip());
        }
        state.insert(OvercommitState {
            pod: [pod.non_zero_milli_cpu, pod.non_zero_memory],
            now: snapshot.now(),
        });
        let selector = self.node_selector.clone();
        node_resources_fit::delegate_cpu_memory(state, move |node: &NodeInfo| {
            opted_in(&selector, node)
        });
        (PreFilterResult::default(), Status::success())
    }
}

impl FilterPlugin for Overcommit {
    /// Checks cpu and memory against the overcommitted capacity on opted-in nodes: every
    /// shortfall is reported as NodeResourcesFit reports it (UnschedulableAndUnresolvable when
    /// the pod alone exceeds the capacity); otherwise a resource that needs the margin on a
    /// loaded node is reported as too loaded (Unschedulable: the load may drop).
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        if !opted_in(&self.node_selector, node) {
            return Status::success();
        }
        let Some(s) = state.get::<OvercommitState>() else {
            return Status::error(
                "error reading \"PreFilterOvercommit\" from cycleState: not found",
            );
        };
        let assessed = self.assess(node, s.pod, s.now);
        if assessed
            .iter()
            .all(|a| matches!(a, Assessment::Fits | Assessment::Overcommitted { .. }))
        {
            return Status::success();
        }
        let insufficient = [INSUFFICIENT_CPU, INSUFFICIENT_MEMORY];
        let loaded = [ERR_REASON_LOADED_CPU, ERR_REASON_LOADED_MEMORY];
        let mut reasons = Vec::new();
        let mut unresolvable = false;
        for (i, a) in assessed.iter().enumerate() {
            if let Assessment::Insufficient { beyond_capacity } = a {
                reasons.push(insufficient[i].into());
                unresolvable |= beyond_capacity;
            }
        }
        if reasons.is_empty() {
            for (i, a) in assessed.iter().enumerate() {
                if *a == Assessment::TooLoaded {
                    reasons.push(loaded[i].into());
                }
            }
        }
        let code = if unresolvable {
            Code::UnschedulableAndUnresolvable
        } else {
            Code::Unschedulable
        };
        Status::with_reasons(code, reasons)
    }
}

/// `1300m` for cpu, `1200Mi` for memory (rounded down to whole MiB).
fn amount(resource: usize, value: i64) -> String {
    if resource == 0 {
        format!("{value}m")
    } else {
        format!("{}Mi", value >> 20)
    }
}

impl ReservePlugin for Overcommit {
    /// Records, on a pod placed beyond its node's allocatable, what it commits there.
    fn reserve(&self, state: &mut CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.get::<OvercommitState>().copied() else {
            return Status::success();
        };
        if !opted_in(&self.node_selector, node) {
            return Status::success();
        }
        let mut note = String::new();
        for (i, a) in self.assess(node, s.pod, s.now).iter().enumerate() {
            if let Assessment::Overcommitted {
                committed,
                allocatable,
                load,
            } = *a
            {
                if !note.is_empty() {
                    note.push_str("; ");
                }
                let _ = write!(
                    note,
                    "{}: {} committed of {} allocatable (+{}, ratio {}, measured load {:.0}%)",
                    ["cpu", "memory"][i],
                    amount(i, committed),
                    amount(i, allocatable),
                    amount(i, committed - allocatable),
                    self.ratios[i],
                    load * 100.0
                );
            }
        }
        if !note.is_empty() {
            ReservedAnnotations::set(state, ANNOTATION, note);
        }
        Status::success()
    }

    fn unreserve(&self, state: &mut CycleState, _pod: &PodInfo, _node: &str) {
        ReservedAnnotations::remove(state, ANNOTATION);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::load::{LoadSample, NodeLoad};
    use crate::plugins::node_resources_fit::{self, NodeResourcesFit, NodeResourcesFitArgs};
    use crate::testing::{node, node_info, pod};

    fn plugin(args: serde_json::Value) -> Overcommit {
        Overcommit::new(&decode_args::<OvercommitArgs>(Some(&args)).expect("valid args"))
            .expect("compiles")
    }

    /// A 1-cpu, 1 GiB node, opted in or not, measured at `load` (cpu and memory) at time 0,
    /// with `pods` on it.
    fn node_with(opted: bool, load: Option<f64>, pods: &[Arc<PodInfo>]) -> NodeInfo {
        let mut n = node("n").capacity("1", "1Gi");
        if opted {
            n = n.label("overcommit", "true");
        }
        let mut info = node_info(n.build(), pods);
        info.load = load.map(|l| {
            Box::new(NodeLoad::new(LoadSample {
                cpu: l,
                memory: l,
                taken_at: Duration::ZERO,
                reflects_placements_before: Duration::ZERO,
                max_age: Some(Duration::from_secs(60)),
            }))
        });
        info
    }

    fn full() -> Vec<Arc<PodInfo>> {
        vec![pod("online").req("cpu", "1").req("memory", "512Mi").build()]
    }

    fn cycle(p: &Overcommit, pod: &PodInfo, now: u64) -> (CycleState, Status) {
        let mut snapshot = Snapshot::default();
        snapshot.set_now(Duration::from_secs(now));
        let mut state = CycleState::new();
        let (_, status) = p.pre_filter(&mut state, pod, &snapshot);
        (state, status)
    }

    /// The two filters as a profile runs them: NodeResourcesFit, then Overcommit.
    fn filters(p: &Overcommit, pod: &PodInfo, info: &NodeInfo, now: u64) -> Status {
        let fit = NodeResourcesFit::new(&NodeResourcesFitArgs::default());
        let (mut state, status) = cycle(p, pod, now);
        let _ = fit.pre_filter(&mut state, pod, &Snapshot::default());
        let s = fit.filter(&state, pod, info);
        if !s.is_success() {
            return s;
        }
        if status.is_skip() {
            return Status::success();
        }
        p.filter(&state, pod, info)
    }

    #[test]
    fn defaults_and_validation() {
        let p = plugin(serde_json::json!({}));
        assert_eq!(p.ratios, [1.5, 1.2]);
        assert_eq!(p.load_threshold, 0.7);
        assert!(p.best_effort && p.burstable);
        assert_eq!(&*p.node_selector, &[("overcommit".into(), "true".into())]);
        let err = |v: serde_json::Value| decode_args::<OvercommitArgs>(Some(&v)).unwrap_err();
        let e = err(serde_json::json!({"qosClasses": ["Guaranteed"]}));
        assert_eq!(e.field, "qosClasses[0]");
        assert_eq!(
            e.reason,
            "Unsupported value: \"Guaranteed\": Guaranteed pods are never overcommitted; supported values: \"BestEffort\", \"Burstable\""
        );
        assert_eq!(
            err(serde_json::json!({"qosClasses": ["Burstable", "Batch"]})).field,
            "qosClasses[1]"
        );
        assert_eq!(
            err(serde_json::json!({"qosClasses": []})).field,
            "qosClasses"
        );
        let e = err(serde_json::json!({"cpuRatio": 0.9}));
        assert_eq!(
            (e.field.as_str(), e.reason.as_str()),
            (
                "cpuRatio",
                "Invalid value: 0.9: must be a number between 1 and 100"
            )
        );
        for ratio in [100.5, 1e300, f64::INFINITY] {
            assert_eq!(
                err(serde_json::json!({"cpuRatio": ratio})).field,
                "cpuRatio",
                "{ratio}"
            );
        }
        assert_eq!(
            err(serde_json::json!({"memoryRatio": 0.5})).field,
            "memoryRatio"
        );
        for t in [0.0, 1.01, -1.0] {
            assert_eq!(
                err(serde_json::json!({"loadThreshold": t})).field,
                "loadThreshold"
            );
        }
        assert_eq!(
            err(serde_json::json!({"nodeSelector": {}})).field,
            "nodeSelector"
        );
        assert_eq!(
            err(serde_json::json!({"nodeSelector": {"bad key!": "x"}})).field,
            "nodeSelector.bad key!"
        );
        let e = err(
            serde_json::json!({"podSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}),
        );
        assert_eq!(e.field, "podSelector.matchExpressions[0]");
        // Edges that are valid.
        for ok in [
            serde_json::json!({"cpuRatio": 1.0, "loadThreshold": 1.0}),
            serde_json::json!({"cpuRatio": 100.0, "memoryRatio": 100.0}),
            serde_json::json!({"qosClasses": ["BestEffort"], "priorityClassNames": ["batch"]}),
        ] {
            assert!(decode_args::<OvercommitArgs>(Some(&ok)).is_ok(), "{ok}");
        }
    }

    #[test]
    fn eligibility_by_class_priority_class_and_labels() {
        let be = pod("be").build();
        let burstable = pod("b").req("cpu", "100m").build();
        let guaranteed = pod("g")
            .with_spec(|s| {
                s.containers[0].resources =
                    Some(k8s_openapi::api::core::v1::ResourceRequirements {
                        limits: Some(
                            [
                                (
                                    "cpu".to_string(),
                                    k8s_openapi::apimachinery::pkg::api::resource::Quantity(
                                        "1".into(),
                                    ),
                                ),
                                (
                                    "memory".to_string(),
                                    k8s_openapi::apimachinery::pkg::api::resource::Quantity(
                                        "1Gi".into(),
                                    ),
                                ),
                            ]
                            .into(),
                        ),
                        ..Default::default()
                    });
            })
            .build();
        assert_eq!(guaranteed.qos_class, QosClass::Guaranteed);
        let p = plugin(serde_json::json!({}));
        assert!(p.eligible(&be) && p.eligible(&burstable) && !p.eligible(&guaranteed));
        let only_be = plugin(serde_json::json!({"qosClasses": ["BestEffort"]}));
        assert!(only_be.eligible(&be) && !only_be.eligible(&burstable));
        let by_class = plugin(serde_json::json!({"priorityClassNames": ["batch"]}));
        assert!(!by_class.eligible(&be));
        let batch = pod("x")
            .with_spec(|s| s.priority_class_name = Some("batch".into()))
            .build();
        assert!(by_class.eligible(&batch));
        let by_label =
            plugin(serde_json::json!({"podSelector": {"matchLabels": {"tier": "batch"}}}));
        assert!(!by_label.eligible(&be));
        assert!(by_label.eligible(&pod("l").label("tier", "batch").build()));
        // Skipped pods leave NodeResourcesFit alone.
        let (state, status) = cycle(&p, &guaranteed, 0);
        assert!(status.is_skip());
        assert!(!node_resources_fit::cpu_memory_delegated(&state));
    }

    #[test]
    fn best_effort_beyond_requests_on_an_idle_opted_in_node() {
        let p = plugin(serde_json::json!({}));
        let be = pod("be").build();
        // The node's cpu is fully requested; a BestEffort pod counts 100m.
        let idle = node_with(true, Some(0.2), &full());
        assert!(filters(&p, &be, &idle, 0).is_success());
        // Loaded: refused, and Unschedulable (the load may drop).
        let loaded = node_with(true, Some(0.7), &full());
        let s = filters(&p, &be, &loaded, 0);
        assert_eq!(s.code(), Code::Unschedulable);
        assert_eq!(s.reasons(), [ERR_REASON_LOADED_CPU]);
        // Just below the threshold is fine.
        assert!(filters(&p, &be, &node_with(true, Some(0.6999), &full()), 0).is_success());
        // No sample, or a stale one: counts as loaded.
        assert_eq!(
            filters(&p, &be, &node_with(true, None, &full()), 0).reasons(),
            [ERR_REASON_LOADED_CPU]
        );
        assert_eq!(
            filters(&p, &be, &idle, 61).reasons(),
            [ERR_REASON_LOADED_CPU]
        );
        // A node that has not opted in keeps kube's rule: a BestEffort pod requests nothing.
        assert!(filters(&p, &be, &node_with(false, Some(0.99), &full()), 0).is_success());
    }

    #[test]
    fn burstable_pods_up_to_allocatable_times_the_ratio() {
        let p = plugin(serde_json::json!({}));
        let idle = |pods: &[Arc<PodInfo>]| node_with(true, Some(0.1), pods);
        // 1 cpu requested on a 1-cpu node, ratio 1.5: 500m more fits, 501m does not.
        let half = pod("half").req("cpu", "500m").req("memory", "1Mi").build();
        assert!(filters(&p, &half, &idle(&full()), 0).is_success());
        let more = pod("more").req("cpu", "501m").req("memory", "1Mi").build();
        let s = filters(&p, &more, &idle(&full()), 0);
        assert_eq!(s.code(), Code::Unschedulable);
        assert_eq!(s.reasons(), [INSUFFICIENT_CPU]);
        // A pod alone beyond the capacity: no eviction can help.
        let huge = pod("huge").req("cpu", "1501m").build();
        let s = filters(&p, &huge, &idle(&[]), 0);
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        // 1500m exactly fits an empty node.
        assert!(filters(&p, &pod("edge").req("cpu", "1500m").build(), &idle(&[]), 0).is_success());
        // Memory: 512Mi used, 1 GiB x 1.2 = 1228.8 MiB -> 716.8 MiB more.
        let mem_ok = pod("m").req("cpu", "1m").req("memory", "716Mi").build();
        assert!(filters(&p, &mem_ok, &idle(&full()), 0).is_success());
        let mem_no = pod("m2").req("cpu", "1m").req("memory", "717Mi").build();
        let s = filters(&p, &mem_no, &idle(&full()), 0);
        assert_eq!(s.reasons(), [INSUFFICIENT_MEMORY]);
        // Without opting in, NodeResourcesFit's rule holds.
        let s = filters(&p, &half, &node_with(false, Some(0.1), &full()), 0);
        assert_eq!(s.reasons(), [node_resources_fit::INSUFFICIENT_CPU]);
        // Guaranteed pods never use the margin.
        let guaranteed = pod("g")
            .req("cpu", "500m")
            .req("memory", "64Mi")
            .with_spec(|s| {
                let r = s.containers[0].resources.as_mut().unwrap();
                r.limits = r.requests.clone();
            })
            .build();
        assert_eq!(
            filters(&p, &guaranteed, &idle(&full()), 0).reasons(),
            [INSUFFICIENT_CPU]
        );
    }

    #[test]
    fn fit_still_checks_other_resources_on_opted_in_nodes() {
        let p = plugin(serde_json::json!({}));
        let storage = pod("s")
            .req("cpu", "100m")
            .req("ephemeral-storage", "1Gi")
            .build();
        let s = filters(&p, &storage, &node_with(true, Some(0.1), &full()), 0);
        assert_eq!(
            s.reasons(),
            [node_resources_fit::INSUFFICIENT_EPHEMERAL_STORAGE]
        );
    }

    #[test]
    fn too_loaded_is_per_resource_and_insufficient_wins() {
        let p = plugin(serde_json::json!({}));
        let mut info = node_with(true, Some(0.1), &full());
        info.load.as_mut().unwrap().sample.memory = 0.9;
        // Needs the cpu margin only: memory load does not matter.
        let cpu_only = pod("c").req("cpu", "200m").req("memory", "1Mi").build();
        assert!(filters(&p, &cpu_only, &info, 0).is_success());
        // Needs the memory margin too: refused for memory.
        let both = pod("b").req("cpu", "200m").req("memory", "600Mi").build();
        assert_eq!(
            filters(&p, &both, &info, 0).reasons(),
            [ERR_REASON_LOADED_MEMORY]
        );
        // Beyond the capacity in cpu and needing the loaded memory margin: the shortfall is
        // what is reported.
        let big = pod("x").req("cpu", "600m").req("memory", "600Mi").build();
        assert_eq!(filters(&p, &big, &info, 0).reasons(), [INSUFFICIENT_CPU]);
    }

    #[test]
    fn reserve_records_the_margin_and_unreserve_removes_it() {
        let p = plugin(serde_json::json!({}));
        let half = pod("half").req("cpu", "300m").req("memory", "1Mi").build();
        let info = node_with(true, Some(0.25), &full());
        let (mut state, _) = cycle(&p, &half, 0);
        assert!(p.reserve(&mut state, &half, &info).is_success());
        let annotations = state
            .get::<ReservedAnnotations>()
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            annotations.0,
            [(
                ANNOTATION.to_string(),
                "cpu: 1300m committed of 1000m allocatable (+300m, ratio 1.5, measured load 25%)"
                    .to_string()
            )]
        );
        p.unreserve(&mut state, &half, "n");
        assert!(state.get::<ReservedAnnotations>().unwrap().0.is_empty());
        // Within allocatable: nothing recorded.
        let (mut state, _) = cycle(&p, &half, 0);
        assert!(
            p.reserve(&mut state, &half, &node_with(true, Some(0.25), &[]))
                .is_success()
        );
        assert!(state.get::<ReservedAnnotations>().is_none());
        // Both resources.
        let both = pod("b").req("cpu", "300m").req("memory", "600Mi").build();
        let (mut state, _) = cycle(&p, &both, 0);
        assert!(p.reserve(&mut state, &both, &info).is_success());
        assert_eq!(
            state.get::<ReservedAnnotations>().unwrap().0[0].1,
            "cpu: 1300m committed of 1000m allocatable (+300m, ratio 1.5, measured load 25%); \
             memory: 1112Mi committed of 1024Mi allocatable (+88Mi, ratio 1.2, measured load 25%)"
        );
    }

    #[test]
    fn capacity_rounds_down() {
        assert_eq!(capacity(1000, 1.5), 1500);
        assert_eq!(capacity(1001, 1.5), 1501);
        assert_eq!(capacity(3, 1.5), 4);
        assert_eq!(capacity(1 << 30, 1.2), 1_288_490_188);
    }
}
