//! NodeResourcesFit: rejects nodes without room for the pod's requests, and scores the
//! feasible ones by how allocated they would be (LeastAllocated, MostAllocated or
//! RequestedToCapacityRatio), with kube-scheduler's integer arithmetic.
//!
//! Another plugin may take over the cpu and memory check on some nodes, for one pod: its
//! PreFilter calls [`delegate_cpu_memory`] with the nodes it checks itself (gantry's
//! Overcommit does, on the nodes that opt in to overcommitment). On those nodes this filter
//! checks everything else as usual; the delegate must then check cpu and memory in its own
//! Filter.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::Arc;

use serde::{Deserialize, Deserializer};

use crate::cache::{NodeInfo, NodeRow, Snapshot};
use crate::framework::{
    ArgsError, Code, CycleState, DefaultPlace, EventHint, FilterPlugin, MAX_NODE_SCORE,
    NODE_CHANGES_AND_POD_DELETES, NodeBlock, Plugin, PluginArgs, PluginSpec, PreFilterPlugin,
    PreFilterResult, PreScorePlugin, ScorePlugin, Status, decode_args,
};
use crate::model::PodInfo;
use crate::model::labels::validate_qualified_name;
use crate::model::resources::{ResourceName, is_extended_resource};

use super::resource_allocation::{
    CpuMemory, PodRequests, RequestView, ResourceAllocation, ResourceSpec, default_resources,
    deserialize_resources,
};
pub use super::shape::{MAX_SHAPE_SCORE, MAX_SHAPE_UTILIZATION, UtilizationShapePoint};
use super::shape::{broken_linear, check_shape, scaled_to_node_scores};

/// The plugin's name in configuration files.
pub const NAME: &str = "NodeResourcesFit";

/// Reason when the node already runs as many pods as its allocatable `pods` allows.
pub const TOO_MANY_PODS: &str = "Too many pods";
/// Reason when the node lacks free cpu.
pub const INSUFFICIENT_CPU: &str = "Insufficient cpu";
/// Reason when the node lacks free memory.
pub const INSUFFICIENT_MEMORY: &str = "Insufficient memory";
/// Reason when the node lacks free ephemeral storage.
pub const INSUFFICIENT_EPHEMERAL_STORAGE: &str = "Insufficient ephemeral-storage";
/// Prefix of the reason for any other resource: `Insufficient nvidia.com/gpu`.
pub const INSUFFICIENT_PREFIX: &str = "Insufficient ";

/// How nodes are scored.
#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize, PartialEq, Eq)]
pub enum ScoringStrategyType {
    /// Favour nodes with the most free resources (spreading).
    LeastAllocated,
    /// Favour nodes with the least free resources (bin packing).
    MostAllocated,
    /// Score by a piecewise-linear function of each resource's utilization.
    RequestedToCapacityRatio,
}

impl ScoringStrategyType {
    /// The names configuration files use, for error messages.
    const SUPPORTED: &'static str =
        r#"supported values: "LeastAllocated", "MostAllocated", "RequestedToCapacityRatio""#;
}

/// Parameters of the RequestedToCapacityRatio strategy.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct RequestedToCapacityRatioParam {
    /// The function's points, by strictly increasing utilization.
    pub shape: Vec<UtilizationShapePoint>,
}

/// `scoringStrategy`: the strategy and the resources it weighs.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ScoringStrategy {
    /// The strategy; required when `scoringStrategy` is given at all, as in kube-scheduler.
    #[serde(default)]
    pub r#type: Option<ScoringStrategyType>,
    /// Resources and weights; cpu and memory with weight 1 when empty, weight 0 means 1.
    #[serde(
        default = "default_resources",
        deserialize_with = "deserialize_resources"
    )]
    pub resources: Vec<ResourceSpec>,
    /// The function, for the RequestedToCapacityRatio strategy.
    #[serde(default)]
    pub requested_to_capacity_ratio: Option<RequestedToCapacityRatioParam>,
}

impl Default for ScoringStrategy {
    /// kube-scheduler's default: LeastAllocated over cpu and memory, weight 1 each.
    fn default() -> Self {
        ScoringStrategy {
            r#type: Some(ScoringStrategyType::LeastAllocated),
            resources: default_resources(),
            requested_to_capacity_ratio: None,
        }
    }
}

/// `NodeResourcesFitArgs` (kubescheduler.config.k8s.io/v1).
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct NodeResourcesFitArgs {
    /// Extended resources the filter does not check.
    #[serde(deserialize_with = "null_as_default")]
    pub ignored_resources: Vec<String>,
    /// Groups (the part before `/`) of extended resources the filter does not check.
    #[serde(deserialize_with = "null_as_default")]
    pub ignored_resource_groups: Vec<String>,
    /// How feasible nodes are scored.
    #[serde(deserialize_with = "null_as_default")]
    pub scoring_strategy: ScoringStrategy,
}

/// A null value means the default, as a nil pointer or list does in kube-scheduler's config.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

impl PluginArgs for NodeResourcesFitArgs {
    const KIND: &'static str = "NodeResourcesFitArgs";

    fn validate(&self) -> Result<(), ArgsError> {
        for (i, name) in self.ignored_resources.iter().enumerate() {
            check_qualified_name(name, &format!("ignoredResources[{i}]"))?;
        }
        for (i, group) in self.ignored_resource_groups.iter().enumerate() {
            let field = format!("ignoredResourceGroups[{i}]");
            if group.contains('/') {
                return Err(ArgsError::new(
                    field,
                    format!("Invalid value: {group:?}: resource group name can't contain '/'"),
                ));
            }
            check_qualified_name(group, &field)?;
        }
        let strategy = &self.scoring_strategy;
        if strategy.r#type.is_none() {
            return Err(ArgsError::new(
                "scoringStrategy.type",
                format!(
                    "Unsupported value: \"\": {}",
                    ScoringStrategyType::SUPPORTED
                ),
            ));
        }
        for (i, r) in strategy.resources.iter().enumerate() {
            if !(1..=100).contains(&r.weight) {
                return Err(ArgsError::new(
                    format!("scoringStrategy.resources[{i}].weight"),
                    format!(
                        "Invalid value: {}: resource weight of {} not in valid range (0, 100]",
                        r.weight, r.name
                    ),
                ));
            }
        }
        let mut seen = BTreeSet::new();
        for (i, r) in strategy.resources.iter().enumerate() {
            if !seen.insert(r.name.as_str()) {
                return Err(ArgsError::new(
                    format!("scoringStrategy.resources[{i}].name"),
                    format!("Duplicate value: {:?}", r.name),
                ));
            }
        }
        match &strategy.requested_to_capacity_ratio {
            Some(param) => check_shape(
                &param.shape,
                "scoringStrategy.requestedToCapacityRatio.shape",
            )?,
            None if strategy.r#type == Some(ScoringStrategyType::RequestedToCapacityRatio) => {
                return Err(ArgsError::new(
                    "scoringStrategy.requestedToCapacityRatio",
                    "Required value: must be set for scoring strategy type RequestedToCapacityRatio",
                ));
            }
            None => {}
        }
        Ok(())
    }
}

/// Checks a qualified name in these arguments, naming the field as kube does.
fn check_qualified_name(value: &str, field: &str) -> Result<(), ArgsError> {
    validate_qualified_name(value)
        .map_err(|msg| ArgsError::new(field, format!("Invalid value: {value:?}: {msg}")))
}

/// The scoring strategy, resolved for arithmetic.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Strategy {
    LeastAllocated,
    MostAllocated,
    /// Shape points as (utilization, score scaled to 0..=MAX_NODE_SCORE).
    RequestedToCapacityRatio(Vec<(i64, i64)>),
}

/// The NodeResourcesFit plugin.
#[derive(Debug, Clone)]
pub struct NodeResourcesFit {
    ignored_resources: BTreeSet<String>,
    ignored_resource_groups: BTreeSet<String>,
    strategy: Strategy,
    allocation: ResourceAllocation,
}

/// The plugin for the registry, with its place in kube-scheduler's default profile.
pub const SPEC: PluginSpec = PluginSpec {
    name: NAME,
    factory,
    default: Some(DefaultPlace {
        order: 80,
        weight: Some(1),
    }),
    args: Some(crate::framework::resolved_args::<NodeResourcesFitArgs>),
};

/// Builds the plugin from its `NodeResourcesFitArgs`.
pub fn factory(args: Option<&serde_json::Value>) -> Result<Arc<dyn Plugin>, ArgsError> {
    let args = decode_args::<NodeResourcesFitArgs>(args)?;
    Ok(Arc::new(NodeResourcesFit::new(&args)))
}

impl NodeResourcesFit {
    /// The plugin for validated arguments.
    pub fn new(args: &NodeResourcesFitArgs) -> Self {
        let strategy = &args.scoring_strategy;
        let strategy_kind = match strategy.r#type {
            Some(ScoringStrategyType::MostAllocated) => Strategy::MostAllocated,
            Some(ScoringStrategyType::RequestedToCapacityRatio) => {
                Strategy::RequestedToCapacityRatio(scaled_to_node_scores(
                    strategy
                        .requested_to_capacity_ratio
                        .as_ref()
                        .map_or(&[][..], |p| &p.shape),
                ))
            }
            Some(ScoringStrategyType::LeastAllocated) | None => Strategy::LeastAllocated,
        };
        NodeResourcesFit {
            ignored_resources: args.ignored_resources.iter().cloned().collect(),
            ignored_resource_groups: args.ignored_resource_groups.iter().cloned().collect(),
            strategy: strategy_kind,
            allocation: ResourceAllocation::new(&strategy.resources, RequestView::NonZero),
        }
    }

    /// True for an extended resource the filter is configured not to check.
    fn is_ignored(&self, name: &str) -> bool {
        is_extended_resource(name)
            && (self.ignored_resources.contains(name)
                || name
                    .split_once('/')
                    .is_some_and(|(group, _)| self.ignored_resource_groups.contains(group)))
    }

    fn pre_filter_state(&self, pod: &PodInfo) -> PreFilterState {
        let r = &pod.requests;
        PreFilterState {
            requests_nothing: r.milli_cpu == 0
                && r.memory == 0
                && r.ephemeral_storage == 0
                && r.scalar.is_empty(),
            milli_cpu: r.milli_cpu,
            memory: r.memory,
            ephemeral_storage: r.ephemeral_storage,
            scalars: r
                .scalar
                .iter()
                .filter(|(name, amount)| *amount != 0 && !self.is_ignored(name))
                .map(|(name, amount)| ScalarRequest {
                    name: name.clone(),
                    amount: *amount,
                    reason: format!("{INSUFFICIENT_PREFIX}{name}"),
                })
                .collect(),
        }
    }

    #[inline]
    fn score_node(&self, node: &NodeInfo, pod_requests: &PodRequests) -> i64 {
        match &self.strategy {
            Strategy::LeastAllocated => weighted_mean(node, pod_requests, least_requested_score),
            Strategy::MostAllocated => weighted_mean(node, pod_requests, most_requested_score),
            Strategy::RequestedToCapacityRatio(shape) => {
                let (mut sum, mut weights) = (0i64, 0i64);
                pod_requests.for_each(node, |weight, req, alloc| {
                    let score = broken_linear(shape, utilization(req, alloc));
                    // kube-scheduler leaves resources scoring 0 out of the average.
                    if score > 0 {
                        sum += score * weight;
                        weights += weight;
                    }
                });
                if weights == 0 {
                    0
                } else {
                    (sum as f64 / weights as f64).round() as i64
                }
            }
        }
    }
}

/// The cycle state [`delegate_cpu_memory`] leaves: the nodes on which this filter leaves cpu
/// and memory to another plugin.
#[derive(Clone)]
struct CpuMemoryDelegation(Arc<dyn Fn(&NodeInfo) -> bool + Send + Sync>);

/// Hands the cpu and memory check of this cycle's pod, on the nodes `checks_itself` accepts,
/// to the calling plugin (from its PreFilter, which runs before this plugin's Filter): this
/// filter checks everything else there, and the caller's Filter must check cpu and memory.
pub fn delegate_cpu_memory(
    state: &mut CycleState,
    checks_itself: impl Fn(&NodeInfo) -> bool + Send + Sync + 'static,
) {
    state.insert(CpuMemoryDelegation(Arc::new(checks_itself)));
}

/// True when a plugin took over the cpu and memory check in this cycle.
#[cfg(test)]
pub(crate) fn cpu_memory_delegated(state: &CycleState) -> bool {
    state.get::<CpuMemoryDelegation>().is_some()
}

/// The pod's requests as the filter checks them, computed once per cycle.
#[derive(Debug, Clone)]
struct PreFilterState {
    /// The pod requests no resource at all: only the pod count is checked.
    requests_nothing: bool,
    milli_cpu: i64,
    memory: i64,
    ephemeral_storage: i64,
    /// Non-zero extended requests, minus the ignored ones, with their rejection reasons.
    scalars: Vec<ScalarRequest>,
}

#[derive(Debug, Clone)]
struct ScalarRequest {
    name: ResourceName,
    amount: i64,
    reason: String,
}

/// The pod's request of each scored resource, computed once per cycle.
#[derive(Debug, Clone)]
struct PreScoreState {
    pod_requests: PodRequests,
}

impl Plugin for NodeResourcesFit {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [EventHint] {
        &NODE_CHANGES_AND_POD_DELETES
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

impl PreFilterPlugin for NodeResourcesFit {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        state.insert(self.pre_filter_state(pod));
        (PreFilterResult::default(), Status::success())
    }
}

impl FilterPlugin for NodeResourcesFit {
    /// kube-scheduler's `fitsRequest`: every shortfall is reported, in one status. The code
    /// is UnschedulableAndUnresolvable when some request exceeds the node's whole allocatable
    /// amount (evicting pods cannot help), Unschedulable otherwise.
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        match state.get::<PreFilterState>() {
            Some(s) => fits_request(state, s, node),
            None => Status::error(ERR_MISSING_PRE_FILTER_STATE),
        }
    }

    /// The verdict reads the pod's requests and the node's allocatable and requested
    /// amounts, unless another plugin took over cpu and memory for this pod
    /// ([`delegate_cpu_memory`]).
    fn verdict_by_requests(&self, state: &CycleState, _pod: &PodInfo) -> bool {
        state.get::<CpuMemoryDelegation>().is_none()
    }

    fn filter_nodes(
        &self,
        state: &CycleState,
        _pod: &PodInfo,
        block: NodeBlock<'_>,
        statuses: &mut [Status],
    ) -> usize {
        let Some(s) = state.get::<PreFilterState>() else {
            statuses.fill(Status::error(ERR_MISSING_PRE_FILTER_STATE));
            return statuses.len();
        };
        let mut rejected = 0;
        if let Some(rows) = block.rows.filter(|_| s.scalars.is_empty()) {
            let nodes = block.nodes.iter().zip(block.positions);
            for ((node, &p), status) in nodes.zip(statuses) {
                if status.is_success() && !fits_row(s, &rows[p]) {
                    *status = fits_request(state, s, node);
                    rejected += usize::from(!status.is_success());
                }
            }
            return rejected;
        }
        for (node, status) in block.nodes.iter().zip(statuses) {
            // The usual answer first, without building (or moving) a status.
            if status.is_success() && !fits_outright(s, node) {
                *status = fits_request(state, s, node);
                rejected += usize::from(!status.is_success());
            }
        }
        rejected
    }
}

/// Error when PreFilter's state is missing, in kube-scheduler's words.
const ERR_MISSING_PRE_FILTER_STATE: &str =
    "error reading \"PreFilterNodeResourcesFit\" from cycleState: not found";

/// True when the pod fits the node with no shortfall at all: the usual answer, given without
/// building reasons or consulting a delegation.
#[inline]
fn fits_outright(s: &PreFilterState, node: &NodeInfo) -> bool {
    let (allocatable, used) = (&node.node.allocatable, &node.requested);
    fits_row(s, &NodeRow::of(node))
        && s.scalars
            .iter()
            .all(|r| r.amount <= allocatable.scalar(&r.name) - used.scalar(&r.name))
}

/// [`fits_outright`] for a pod's pod count, cpu, memory and ephemeral storage, read from the
/// node's row (the pod's extended requests left out).
#[inline]
fn fits_row(s: &PreFilterState, row: &NodeRow) -> bool {
    let room = |request: i64, alloc: i64, in_use: i64| request <= 0 || request <= alloc - in_use;
    row.pods < row.allowed_pods
        && (s.requests_nothing
            || (room(s.milli_cpu, row.allocatable_cpu, row.requested_cpu)
                && room(s.memory, row.allocatable_memory, row.requested_memory)
                && room(
                    s.ephemeral_storage,
                    row.allocatable_ephemeral_storage,
                    row.requested_ephemeral_storage,
                )))
}

/// kube-scheduler's `fitsRequest` for the requests PreFilter computed, with cpu and memory
/// shortfalls left to a plugin that took them over on the node ([`delegate_cpu_memory`]).
#[inline]
fn fits_request(state: &CycleState, s: &PreFilterState, node: &NodeInfo) -> Status {
    if fits_outright(s, node) {
        return Status::success();
    }
    let allocatable = &node.node.allocatable;
    let used = &node.requested;
    let mut reasons: Vec<Cow<'static, str>> = Vec::new();
    let mut unresolvable = false;
    if node.pods.len() as i64 + 1 > allocatable.allowed_pods {
        reasons.push(Cow::Borrowed(TOO_MANY_PODS));
    }
    if !s.requests_nothing {
        // Looked up on the first cpu or memory shortfall only: nothing on the usual path.
        let mut delegated = None;
        let mut delegated_here = || {
            *delegated.get_or_insert_with(|| {
                state
                    .get::<CpuMemoryDelegation>()
                    .is_some_and(|d| (d.0)(node))
            })
        };
        let mut check =
            |request: i64, alloc: i64, in_use: i64, reason: Cow<'static, str>, delegable: bool| {
                if request > 0 && request > alloc - in_use && !(delegable && delegated_here()) {
                    unresolvable |= request > alloc;
                    reasons.push(reason);
                }
            };
        check(
            s.milli_cpu,
            allocatable.milli_cpu,
            used.milli_cpu,
            Cow::Borrowed(INSUFFICIENT_CPU),
            true,
        );
        check(
            s.memory,
            allocatable.memory,
            used.memory,
            Cow::Borrowed(INSUFFICIENT_MEMORY),
            true,
        );
        check(
            s.ephemeral_storage,
            allocatable.ephemeral_storage,
            used.ephemeral_storage,
            Cow::Borrowed(INSUFFICIENT_EPHEMERAL_STORAGE),
            false,
        );
        for r in &s.scalars {
            let alloc = allocatable.scalar(&r.name);
            let in_use = used.scalar(&r.name);
            if r.amount > alloc - in_use {
                unresolvable |= r.amount > alloc;
                reasons.push(Cow::Owned(r.reason.clone()));
            }
        }
    }
    if reasons.is_empty() {
        return Status::success();
    }
    let code = if unresolvable {
        Code::UnschedulableAndUnresolvable
    } else {
        Code::Unschedulable
    };
    Status::with_reasons(code, reasons)
}

impl PreScorePlugin for NodeResourcesFit {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
        _feasible: &[&NodeInfo],
    ) -> Status {
        state.insert(PreScoreState {
            pod_requests: self.allocation.pod_requests(pod),
        });
        Status::success()
    }

    fn reads_feasible(&self, _pod: &PodInfo, _snapshot: &Snapshot) -> bool {
        false
    }
}

impl ScorePlugin for NodeResourcesFit {
    fn normalizes(&self) -> bool {
        false
    }

    /// The score reads the pod's requests and the node's allocatable and requested amounts.
    fn score_by_requests(&self, _state: &CycleState, _pod: &PodInfo) -> bool {
        true
    }

    /// Scores in 0..=100 directly; kube-scheduler has no normalization for this plugin. As
    /// kube does, a missing PreScore state is recomputed rather than an error.
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        match state.get::<PreScoreState>() {
            Some(s) => Ok(self.score_node(node, &s.pod_requests)),
            None => Ok(self.score_node(node, &self.allocation.pod_requests(pod))),
        }
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
                &computed
            }
        };
        // The strategy matched once per block: each loop inlines its own arithmetic.
        if let Some(cm) = pod_requests.cpu_memory() {
            match &self.strategy {
                Strategy::LeastAllocated => {
                    score_cpu_memory(cm, block, scores, least_requested_score);
                    return Ok(());
                }
                Strategy::MostAllocated => {
                    score_cpu_memory(cm, block, scores, most_requested_score);
                    return Ok(());
                }
                Strategy::RequestedToCapacityRatio(_) => {}
            }
        }
        let pairs = block.nodes.iter().zip(scores.iter_mut());
        match &self.strategy {
            Strategy::LeastAllocated => {
                for (node, score) in pairs {
                    *score = weighted_mean(node, pod_requests, least_requested_score);
                }
            }
            Strategy::MostAllocated => {
                for (node, score) in pairs {
                    *score = weighted_mean(node, pod_requests, most_requested_score);
                }
            }
            Strategy::RequestedToCapacityRatio(_) => {
                for (node, score) in pairs {
                    *score = self.score_node(node, pod_requests);
                }
            }
        }
        Ok(())
    }
}

/// The integer weighted mean of `per_resource(requested, allocatable)` over the resources
/// that take part, truncated; 0 when none does.
#[inline]
fn weighted_mean(
    node: &NodeInfo,
    pod_requests: &PodRequests,
    per_resource: impl Fn(i64, i64) -> i64,
) -> i64 {
    let (mut sum, mut weights) = (0i64, 0i64);
    pod_requests.for_each(node, |weight, req, alloc| {
        sum += per_resource(req, alloc) * weight;
        weights += weight;
    });
    if weights == 0 { 0 } else { sum / weights }
}

/// Scores each node of `block` by [`mean_of_two`] of `per_resource`, from the snapshot's
/// rows when the block has them.
#[inline(always)]
fn score_cpu_memory(
    cm: CpuMemory,
    block: NodeBlock<'_>,
    scores: &mut [i64],
    per_resource: impl Fn(i64, i64) -> i64 + Copy,
) {
    match block.rows {
        Some(rows) => {
            for (&p, score) in block.positions.iter().zip(scores) {
                *score = mean_of_two(cm, cm.on_row(&rows[p]), per_resource);
            }
        }
        None => {
            for (node, score) in block.nodes.iter().zip(scores) {
                *score = mean_of_two(cm, cm.on_row(&NodeRow::of(node)), per_resource);
            }
        }
    }
}

/// [`weighted_mean`] of cpu and memory, the default resources, on a node with these
/// (requested, allocatable) amounts ([`CpuMemory::on`]).
#[inline(always)]
fn mean_of_two(
    cm: CpuMemory,
    amounts: ((i64, i64), (i64, i64)),
    per_resource: impl Fn(i64, i64) -> i64,
) -> i64 {
    let ((cpu, cpu_alloc), (memory, memory_alloc)) = amounts;
    let (mut sum, mut weights) = (0i64, 0i64);
    if cpu_alloc != 0 {
        sum += per_resource(cpu, cpu_alloc) * cm.cpu_weight;
        weights += cm.cpu_weight;
    }
    if memory_alloc != 0 {
        sum += per_resource(memory, memory_alloc) * cm.memory_weight;
        weights += cm.memory_weight;
    }
    match weights {
        0 => 0,
        // Validated weights are positive and scores non-negative: an unsigned division
        // needs no check for overflow, and by a power of two (the default weights, 1 and
        // 1) it is a shift, without a division's latency on every node scored.
        1.. if sum >= 0 && weights.count_ones() == 1 => sum >> weights.trailing_zeros(),
        1.. if sum >= 0 => (sum as u64 / weights as u64) as i64,
        _ => sum / weights,
    }
}

/// Capacities below this are scaled in floating point: `value * 100` is then exact in an
/// f64, and the correctly rounded quotient of two such integers truncates to the integer
/// quotient (a quotient below 101 that is not whole lies at least `1 / capacity` from the
/// next whole number, more than half an ulp), without the integer division's latency.
const EXACT_IN_F64: i64 = 1 << 44;

/// `value * MAX_NODE_SCORE / capacity` for `0 <= value <= capacity`, exact even where the
/// product would overflow an i64.
#[inline]
fn scaled(value: i64, capacity: i64) -> i64 {
    if capacity < EXACT_IN_F64 {
        return ((value * MAX_NODE_SCORE) as f64 / capacity as f64) as i64;
    }
    match value.checked_mul(MAX_NODE_SCORE) {
        Some(product) => product / capacity,
        None => (i128::from(value) * i128::from(MAX_NODE_SCORE) / i128::from(capacity)) as i64,
    }
}

/// The share of the node left free, 0..=100: 0 when the node is (over)full.
#[inline]
fn least_requested_score(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    scaled(capacity - requested, capacity)
}

/// The share of the node in use, 0..=100, counting an overfull node (possible with the
/// non-zero defaults) as full.
#[inline]
fn most_requested_score(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 {
        return 0;
    }
    scaled(requested.min(capacity), capacity)
}

/// Utilization in whole percent (truncated), 100 when over capacity: what a shape is read
/// at, here and by VolumeBinding's storage scoring.
pub(crate) fn utilization(requested: i64, capacity: i64) -> i64 {
    if capacity <= 0 || requested >= capacity {
        return 100;
    }
    if requested <= 0 {
        return 0;
    }
    scaled(requested, capacity)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Registry;
    use crate::model::labels::{DNS_SUBDOMAIN_RULE, QUALIFIED_NAME_RULE};
    use crate::plugins::resource_allocation::cpu_memory_edge_nodes;
    use crate::testing::{node, node_info, pod};
    use serde_json::json;

    fn plugin(args: serde_json::Value) -> NodeResourcesFit {
        let args = decode_args::<NodeResourcesFitArgs>(Some(&args)).unwrap();
        NodeResourcesFit::new(&args)
    }

    fn default_plugin() -> NodeResourcesFit {
        NodeResourcesFit::new(&NodeResourcesFitArgs::default())
    }

    fn filter(p: &NodeResourcesFit, pod: &PodInfo, node: &NodeInfo) -> Status {
        let mut state = CycleState::new();
        let (result, status) = p.pre_filter(&mut state, pod, &Snapshot::default());
        assert!(status.is_success());
        assert_eq!(result, PreFilterResult::default());
        p.filter(&state, pod, node)
    }

    fn score(p: &NodeResourcesFit, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let mut state = CycleState::new();
        assert!(
            p.pre_score(&mut state, pod, &Snapshot::default(), &[node])
                .is_success()
        );
        p.score(&state, pod, node).unwrap()
    }

    #[test]
    fn block_scores_agree_with_node_scores() {
        let pods = [
            pod("p").req("cpu", "1").req("memory", "1Gi").build(),
            pod("p").build(),
            pod("p").req("cpu", "250m").build(),
        ];
        let nodes = cpu_memory_edge_nodes();
        let refs: Vec<&NodeInfo> = nodes.iter().collect();
        let positions: Vec<usize> = (0..nodes.len()).collect();
        let rows: Vec<NodeRow> = nodes.iter().map(NodeRow::of).collect();
        let with_rows = NodeBlock {
            rows: Some(&rows),
            ..NodeBlock::new(&refs, &positions)
        };
        for strategy in ["LeastAllocated", "MostAllocated"] {
            for weights in [(1, 1), (3, 1)] {
                let p = plugin(json!({"scoringStrategy": {"type": strategy, "resources": [
                    {"name": "cpu", "weight": weights.0},
                    {"name": "memory", "weight": weights.1}]}}));
                for pod in &pods {
                    let mut state = CycleState::new();
                    let _ = p.pre_score(&mut state, pod, &Snapshot::default(), &refs);
                    let one: Vec<i64> = nodes.iter().map(|n| score(&p, pod, n)).collect();
                    for block in [NodeBlock::new(&refs, &positions), with_rows] {
                        let mut scores = vec![0; nodes.len()];
                        p.score_nodes(&state, pod, block, &mut scores).unwrap();
                        assert_eq!(scores, one, "{strategy} {weights:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn scaling_in_floating_point_is_exact() {
        let exact = |value: i64, capacity: i64| {
            (i128::from(value) * i128::from(MAX_NODE_SCORE) / i128::from(capacity)) as i64
        };
        let mut capacities = vec![1, 3, 7, 1000, 4000, 128 << 30, EXACT_IN_F64 - 1];
        capacities.extend((1..40).map(|k| EXACT_IN_F64 / k - 1));
        for capacity in capacities {
            // Values whose quotient is whole, and those just either side of it.
            for k in 0..=MAX_NODE_SCORE {
                let at = capacity * k / MAX_NODE_SCORE;
                for value in [at.saturating_sub(1), at, at + 1] {
                    let value = value.min(capacity);
                    assert_eq!(
                        scaled(value, capacity),
                        exact(value, capacity),
                        "{value} / {capacity}"
                    );
                }
            }
        }
    }

    fn reasons(s: &Status) -> Vec<&str> {
        s.reasons().iter().map(|r| r.as_ref()).collect()
    }

    fn validate(args: serde_json::Value) -> String {
        decode_args::<NodeResourcesFitArgs>(Some(&args))
            .unwrap_err()
            .to_string()
    }

    // ---- Filter ----

    #[test]
    fn exact_fit_passes_and_one_more_unit_fails() {
        let used = pod("used")
            .on("n")
            .req("cpu", "1")
            .req("memory", "1Gi")
            .req("ephemeral-storage", "1Gi")
            .req("example.com/foo", "1")
            .build();
        let n = node_info(
            node("n")
                .capacity("4", "4Gi")
                .alloc("ephemeral-storage", "4Gi")
                .alloc("example.com/foo", "4")
                .build(),
            &[used],
        );
        let p = default_plugin();
        let exact = pod("p")
            .req("cpu", "3")
            .req("memory", "3Gi")
            .req("ephemeral-storage", "3Gi")
            .req("example.com/foo", "3")
            .build();
        assert!(filter(&p, &exact, &n).is_success());

        for (resource, quantity, reason) in [
            ("cpu", "3001m", INSUFFICIENT_CPU),
            ("memory", "3221225473", INSUFFICIENT_MEMORY),
            (
                "ephemeral-storage",
                "3221225473",
                INSUFFICIENT_EPHEMERAL_STORAGE,
            ),
            ("example.com/foo", "4", "Insufficient example.com/foo"),
        ] {
            let over = pod("p").req(resource, quantity).build();
            let s = filter(&p, &over, &n);
            assert_eq!(s.code(), Code::Unschedulable, "{resource}");
            assert_eq!(reasons(&s), vec![reason]);
        }
    }

    #[test]
    fn all_shortfalls_are_reported_together() {
        let used = pod("used")
            .on("n")
            .req("cpu", "3")
            .req("memory", "3Gi")
            .req("nvidia.com/gpu", "1")
            .build();
        let n = node_info(
            node("n")
                .alloc("cpu", "4")
                .alloc("memory", "4Gi")
                .alloc("pods", "1")
                .alloc("ephemeral-storage", "1Gi")
                .alloc("nvidia.com/gpu", "2")
                .alloc("example.com/foo", "1")
                .build(),
            &[used],
        );
        let p = pod("p")
            .req("cpu", "2")
            .req("memory", "2Gi")
            .req("ephemeral-storage", "512Mi")
            .req("nvidia.com/gpu", "2")
            .req("example.com/foo", "1")
            .build();
        let s = filter(&default_plugin(), &p, &n);
        assert_eq!(s.code(), Code::Unschedulable);
        assert_eq!(
            reasons(&s),
            vec![
                TOO_MANY_PODS,
                INSUFFICIENT_CPU,
                INSUFFICIENT_MEMORY,
                "Insufficient nvidia.com/gpu",
            ]
        );
        assert_eq!(
            s.message(),
            "Too many pods, Insufficient cpu, Insufficient memory, Insufficient nvidia.com/gpu"
        );
    }

    #[test]
    fn request_beyond_whole_allocatable_is_unresolvable() {
        let n = node_info(
            node("n")
                .capacity("2", "4Gi")
                .alloc("example.com/foo", "1")
                .build(),
            &[],
        );
        let p = default_plugin();
        for (resource, quantity) in [
            ("cpu", "2001m"),
            ("memory", "5Gi"),
            ("ephemeral-storage", "1"),
            ("example.com/foo", "2"),
            ("example.com/bar", "1"),
        ] {
            let big = pod("p").req(resource, quantity).build();
            let s = filter(&p, &big, &n);
            assert_eq!(s.code(), Code::UnschedulableAndUnresolvable, "{resource}");
        }
        // One unresolvable shortfall makes the whole status unresolvable.
        let used = pod("used").on("n").req("cpu", "1").build();
        let n = node_info(node("n").capacity("2", "4Gi").build(), &[used]);
        let both = pod("p").req("cpu", "2").req("memory", "5Gi").build();
        let s = filter(&p, &both, &n);
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(reasons(&s), vec![INSUFFICIENT_CPU, INSUFFICIENT_MEMORY]);
    }

    #[test]
    fn pod_count_limit() {
        let existing = pod("a").on("n").build();
        let full = node_info(
            node("n").alloc("pods", "1").build(),
            std::slice::from_ref(&existing),
        );
        let roomy = node_info(node("n").alloc("pods", "2").build(), &[existing]);
        let p = default_plugin();
        let empty_pod = pod("p").build();
        let s = filter(&p, &empty_pod, &full);
        assert_eq!(s.code(), Code::Unschedulable);
        assert_eq!(reasons(&s), vec![TOO_MANY_PODS]);
        assert!(filter(&p, &empty_pod, &roomy).is_success());
        // A node that declares no pod capacity takes no pods.
        let no_pods = node_info(node("n").alloc("cpu", "4").build(), &[]);
        assert_eq!(
            reasons(&filter(&p, &empty_pod, &no_pods)),
            vec![TOO_MANY_PODS]
        );
    }

    #[test]
    fn unrequested_resources_are_not_checked() {
        // The node is overcommitted on cpu and memory (allocatable shrank under its pods).
        let used = pod("used")
            .on("n")
            .req("cpu", "8")
            .req("memory", "8Gi")
            .build();
        let n = node_info(
            node("n")
                .capacity("4", "4Gi")
                .alloc("ephemeral-storage", "1Gi")
                .build(),
            &[used],
        );
        let p = default_plugin();
        // Requesting nothing at all: only the pod count is checked.
        assert!(filter(&p, &pod("p").build(), &n).is_success());
        // Requesting only what is free: the overcommitted resources are not checked.
        let storage_only = pod("p").req("ephemeral-storage", "1Gi").build();
        assert!(filter(&p, &storage_only, &n).is_success());
        // An explicit zero request is no request.
        let zero_gpu = pod("p").req("nvidia.com/gpu", "0").build();
        assert!(filter(&p, &zero_gpu, &n).is_success());
        let cpu = pod("p").req("cpu", "1m").build();
        assert_eq!(reasons(&filter(&p, &cpu, &n)), vec![INSUFFICIENT_CPU]);
    }

    #[test]
    fn ignored_resources_and_groups_apply_to_extended_resources_only() {
        let n = node_info(node("n").capacity("1", "1Gi").build(), &[]);
        let p = plugin(json!({
            "ignoredResources": ["example.com/foo", "hugepages-2Mi"],
            "ignoredResourceGroups": ["ignored.io"],
        }));
        let foo = pod("p").req("example.com/foo", "1").build();
        assert!(filter(&p, &foo, &n).is_success());
        let group = pod("p").req("ignored.io/anything", "5").build();
        assert!(filter(&p, &group, &n).is_success());
        let bar = pod("p").req("example.com/bar", "1").build();
        assert_eq!(
            reasons(&filter(&p, &bar, &n)),
            vec!["Insufficient example.com/bar"]
        );
        // hugepages are not extended resources: ignoring them has no effect.
        let huge = pod("p").req("hugepages-2Mi", "2Mi").build();
        assert_eq!(
            reasons(&filter(&p, &huge, &n)),
            vec!["Insufficient hugepages-2Mi"]
        );
        // The group is the whole part before '/', not a prefix of it.
        let sub = pod("p").req("sub.ignored.io/x", "1").build();
        assert_eq!(
            reasons(&filter(&p, &sub, &n)),
            vec!["Insufficient sub.ignored.io/x"]
        );
        // Without configuration nothing is ignored.
        assert_eq!(
            reasons(&filter(&default_plugin(), &foo, &n)),
            vec!["Insufficient example.com/foo"]
        );
    }

    #[test]
    fn missing_prefilter_state_is_an_error() {
        let n = node_info(node("n").capacity("1", "1Gi").build(), &[]);
        let s = default_plugin().filter(&CycleState::new(), &pod("p").build(), &n);
        assert_eq!(s.code(), Code::Error);
        assert_eq!(
            s.message(),
            "error reading \"PreFilterNodeResourcesFit\" from cycleState: not found"
        );
    }

    // ---- Score ----

    #[test]
    fn least_allocated_arithmetic() {
        // cpu: (4000 - 3000) * 100 / 4000 = 25; memory: (10000 - 5000) * 100 / 10000 = 50.
        let p = pod("p").req("cpu", "3").req("memory", "5000").build();
        let n = node_info(node("n").capacity("4", "10000").build(), &[]);
        assert_eq!(score(&default_plugin(), &p, &n), (25 + 50) / 2);
        // Weights: (25 * 1 + 50 * 3) / 4 = 43.75 -> 43.
        let weighted = plugin(
            json!({"scoringStrategy": {"type": "LeastAllocated", "resources": [
            {"name": "cpu", "weight": 1}, {"name": "memory", "weight": 3}]}}),
        );
        assert_eq!(score(&weighted, &p, &n), 43);
        // Truncation per resource: (3000 - 1000) * 100 / 3000 = 66 (not 67).
        let one = pod("p").req("cpu", "1").req("memory", "5000").build();
        let n3 = node_info(node("n").capacity("3", "10000").build(), &[]);
        assert_eq!(score(&default_plugin(), &one, &n3), (66 + 50) / 2);
        // Over capacity scores 0 for that resource.
        let huge = pod("p").req("cpu", "5").req("memory", "5000").build();
        assert_eq!(score(&default_plugin(), &huge, &n), 25);
    }

    #[test]
    fn scoring_uses_non_zero_requests() {
        // Neither the pod nor the one on the node requests anything: each counts as
        // 100m cpu and 200Mi memory. cpu: (1000 - 200) * 100 / 1000 = 80;
        // memory: (1000Mi - 400Mi) * 100 / 1000Mi = 60.
        let existing = pod("a").on("n").build();
        let n = node_info(node("n").capacity("1", "1000Mi").build(), &[existing]);
        let p = pod("p").build();
        assert_eq!(score(&default_plugin(), &p, &n), (80 + 60) / 2);
        let most = plugin(json!({"scoringStrategy": {"type": "MostAllocated"}}));
        assert_eq!(score(&most, &p, &n), (20 + 40) / 2);
    }

    #[test]
    fn most_allocated_arithmetic() {
        let most = plugin(json!({"scoringStrategy": {"type": "MostAllocated"}}));
        let used = pod("used")
            .on("n")
            .req("cpu", "1")
            .req("memory", "2000")
            .build();
        let n = node_info(node("n").capacity("4", "10000").build(), &[used]);
        // cpu: 3000 * 100 / 4000 = 75; memory: 5000 * 100 / 10000 = 50.
        let p = pod("p").req("cpu", "2").req("memory", "3000").build();
        assert_eq!(score(&most, &p, &n), (75 + 50) / 2);
        // Over capacity counts as full: cpu 100, memory 50.
        let big = pod("p").req("cpu", "9").req("memory", "3000").build();
        assert_eq!(score(&most, &big, &n), 75);
        // Truncation: 1000 * 100 / 3000 = 33.
        let n3 = node_info(node("n").capacity("3", "10000").build(), &[]);
        let small = pod("p").req("cpu", "1").req("memory", "5000").build();
        assert_eq!(score(&most, &small, &n3), (33 + 50) / 2);
    }

    #[test]
    fn extended_resources_in_scores() {
        let args = json!({"scoringStrategy": {"type": "MostAllocated", "resources": [
            {"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1},
            {"name": "nvidia.com/gpu", "weight": 2}]}});
        let most = plugin(args);
        let gpu_node = node_info(
            node("n")
                .capacity("4", "10000")
                .alloc("nvidia.com/gpu", "4")
                .build(),
            &[],
        );
        let cpu_node = node_info(node("n").capacity("4", "10000").build(), &[]);
        // cpu 50, memory 50, gpu 3 * 100 / 4 = 75 (weight 2): (50 + 50 + 150) / 4 = 62.
        let wants_gpu = pod("p")
            .req("cpu", "2")
            .req("memory", "5000")
            .req("nvidia.com/gpu", "3")
            .build();
        assert_eq!(score(&most, &wants_gpu, &gpu_node), 62);
        // A node without the resource leaves it out: (50 + 50) / 2.
        assert_eq!(score(&most, &wants_gpu, &cpu_node), 50);
        // A pod that does not request it leaves it out too, even where the node has it.
        let no_gpu = pod("p").req("cpu", "2").req("memory", "5000").build();
        assert_eq!(score(&most, &no_gpu, &gpu_node), 50);
    }

    #[test]
    fn zero_allocatable_resources_are_left_out() {
        let p = pod("p").req("cpu", "1").build();
        // Memory allocatable 0: only cpu counts, (4000 - 1000) * 100 / 4000 = 75.
        let n = node_info(node("n").alloc("cpu", "4").alloc("pods", "10").build(), &[]);
        assert_eq!(score(&default_plugin(), &p, &n), 75);
        // Nothing allocatable at all: 0.
        let empty = node_info(node("n").alloc("pods", "10").build(), &[]);
        assert_eq!(score(&default_plugin(), &p, &empty), 0);
    }

    fn rtcr(shape: serde_json::Value, resources: serde_json::Value) -> NodeResourcesFit {
        plugin(json!({"scoringStrategy": {
            "type": "RequestedToCapacityRatio",
            "resources": resources,
            "requestedToCapacityRatio": {"shape": shape},
        }}))
    }

    #[test]
    fn requested_to_capacity_ratio_arithmetic() {
        let cpu_mem = json!([{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]);
        // Bin packing: 0% -> 0, 100% -> 10 (scaled to 100).
        let pack = rtcr(
            json!([{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]),
            cpu_mem.clone(),
        );
        let n = node_info(node("n").capacity("4", "10000").build(), &[]);
        // cpu 3000/4000 -> 75% -> 75; memory 2500/10000 -> 25% -> 25; mean 50.
        let p = pod("p").req("cpu", "3").req("memory", "2500").build();
        assert_eq!(score(&pack, &p, &n), 50);
        // Utilization truncates before interpolation: 1000/3000 -> 33% -> 33; memory
        // 6000/10000 -> 60; (33 + 60) / 2 = 46.5 rounds half away from zero to 47.
        let n3 = node_info(node("n").capacity("3", "10000").build(), &[]);
        let q = pod("p").req("cpu", "1").req("memory", "6000").build();
        assert_eq!(score(&pack, &q, &n3), 47);

        // Spreading: 0% -> 10, 100% -> 0. Interpolation truncates towards zero:
        // 100 + (0 - 100) * 33 / 100 = 100 - 33 = 67; memory 100 - 60 = 40; 53.5 -> 54.
        let spread = rtcr(
            json!([{"utilization": 0, "score": 10}, {"utilization": 100, "score": 0}]),
            cpu_mem.clone(),
        );
        assert_eq!(score(&spread, &q, &n3), 54);
        // A resource scoring 0 is left out of the average: cpu over capacity -> 100% -> 0,
        // memory 25% -> 75; the result is 75, not 37.
        let over = pod("p").req("cpu", "5").req("memory", "2500").build();
        assert_eq!(score(&spread, &over, &n), 75);
        // Everything scoring 0 gives 0.
        let full = pod("p").req("cpu", "4").req("memory", "10000").build();
        assert_eq!(score(&spread, &full, &n), 0);
    }

    #[test]
    fn requested_to_capacity_ratio_shape_edges() {
        let cpu = json!([{"name": "cpu", "weight": 1}]);
        // Flat before the first point and after the last; weights 3 and 1 weigh the mean.
        let plateau = rtcr(
            json!([{"utilization": 20, "score": 2}, {"utilization": 50, "score": 8}]),
            cpu,
        );
        let n = node_info(node("n").capacity("100", "10000").build(), &[]);
        let at = |cpu: &str| score(&plateau, &pod("p").req("cpu", cpu).build(), &n);
        assert_eq!(at("10"), 20);
        assert_eq!(at("20"), 20);
        // 20 + (80 - 20) * (35 - 20) / (50 - 20) = 20 + 30 = 50.
        assert_eq!(at("35"), 50);
        // 20 + 60 * 1 / 30 = 22.
        assert_eq!(at("21"), 22);
        assert_eq!(at("50"), 80);
        assert_eq!(at("90"), 80);

        let weighted = rtcr(
            json!([{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]),
            json!([{"name": "cpu", "weight": 3}, {"name": "memory", "weight": 1}]),
        );
        // cpu 50% -> 50 (x3), memory 25% -> 25: 175 / 4 = 43.75 -> 44.
        let p = pod("p").req("cpu", "50").req("memory", "2500").build();
        assert_eq!(score(&weighted, &p, &n), 44);
    }

    #[test]
    fn strategy_functions_at_the_edges() {
        assert_eq!(least_requested_score(0, 0), 0);
        assert_eq!(least_requested_score(0, 10), 100);
        assert_eq!(least_requested_score(10, 10), 0);
        assert_eq!(least_requested_score(11, 10), 0);
        assert_eq!(most_requested_score(0, 0), 0);
        assert_eq!(most_requested_score(0, 10), 0);
        assert_eq!(most_requested_score(10, 10), 100);
        assert_eq!(most_requested_score(11, 10), 100);
        // No overflow for huge capacities (exabytes of memory).
        assert_eq!(least_requested_score(i64::MAX / 2, i64::MAX), 50);
        assert_eq!(most_requested_score(i64::MAX / 4, i64::MAX), 24);
        assert_eq!(utilization(0, 10), 0);
        assert_eq!(utilization(10, 10), 100);
        assert_eq!(utilization(11, 10), 100);
        assert_eq!(utilization(1, 0), 100);
    }

    #[test]
    fn score_without_prescore_state_recomputes() {
        let p = pod("p").req("cpu", "3").req("memory", "5000").build();
        let n = node_info(node("n").capacity("4", "10000").build(), &[]);
        assert_eq!(
            default_plugin().score(&CycleState::new(), &p, &n).unwrap(),
            37
        );
    }

    #[test]
    fn in_a_cycle_with_balanced_allocation() {
        use crate::cache::Cache;
        use crate::cycle::{CycleError, CycleMemory, CycleOptions, schedule_one};
        use crate::framework::Profile;
        use crate::plugins::balanced_allocation;

        let mut cache = Cache::new();
        cache.upsert_node(node("small").capacity("1", "4Gi").build());
        cache.upsert_node(node("full").capacity("8", "8Gi").alloc("pods", "1").build());
        cache.upsert_node(node("half").capacity("8", "8Gi").build());
        cache.upsert_node(node("empty").capacity("8", "8Gi").build());
        cache.add_bound_pod(pod("a").on("full").build()).unwrap();
        cache
            .add_bound_pod(
                pod("b")
                    .on("half")
                    .req("cpu", "4")
                    .req("memory", "4Gi")
                    .build(),
            )
            .unwrap();
        let mut snapshot = Snapshot::default();
        cache.update_snapshot(&mut snapshot);

        let fit: Arc<dyn Plugin> = Arc::new(default_plugin());
        let balanced = balanced_allocation::factory(None).unwrap();
        let profile = Profile {
            scheduler_name: "test".into(),
            percentage_of_nodes_to_score: None,
            queue_sort: fit.clone(),
            pre_enqueue: vec![],
            pre_filter: vec![fit.clone()],
            filter: vec![fit.clone()],
            post_filter: vec![],
            pre_score: vec![fit.clone(), balanced.clone()],
            score: vec![(fit, 1), (balanced, 1)],
            reserve: vec![],
            permit: vec![],
            pre_bind: vec![],
            bind: vec![],
            post_bind: vec![],
            observer: Arc::new(crate::framework::Unobserved),
        };
        let options = CycleOptions {
            pool: None,
            percentage_of_nodes_to_score: 0,
            top_scores: 3,
            nominated: None,
            waiting: None,
            preempt_extenders: false,
            preemption_running: false,
        };
        let mut memory = CycleMemory::default();

        // LeastAllocated sends the pod to the empty node; both fitting nodes are balanced.
        let p = pod("p").req("cpu", "2").req("memory", "2Gi").build();
        let placement = schedule_one(&profile, &snapshot, &p, &mut memory, &options).unwrap();
        assert_eq!(&*placement.node, "empty");
        assert_eq!(placement.feasible, 2);
        assert_eq!(placement.scores[0].weighted, vec![75, 100]);
        assert_eq!(placement.scores[1].weighted, vec![25, 100]);

        let big = pod("big").req("cpu", "9").req("memory", "2Gi").build();
        match schedule_one(&profile, &snapshot, &big, &mut memory, &options) {
            Err(CycleError::Unschedulable(d)) => assert_eq!(
                d.message(),
                "0/4 nodes are available: 1 Too many pods, 4 Insufficient cpu."
            ),
            other => panic!("expected unschedulable, got {other:?}"),
        }
    }

    // ---- Arguments ----

    #[test]
    fn defaults() {
        let args = decode_args::<NodeResourcesFitArgs>(None).unwrap();
        assert_eq!(args, NodeResourcesFitArgs::default());
        assert_eq!(
            args.scoring_strategy.r#type,
            Some(ScoringStrategyType::LeastAllocated)
        );
        assert_eq!(args.scoring_strategy.resources, default_resources());
        let empty = decode_args::<NodeResourcesFitArgs>(Some(&json!({}))).unwrap();
        assert_eq!(empty, args);
        let null = decode_args::<NodeResourcesFitArgs>(Some(&json!({
            "scoringStrategy": null, "ignoredResources": null
        })))
        .unwrap();
        assert_eq!(null, args);
        // Resources default inside a given strategy, and weight 0 means 1.
        let most = decode_args::<NodeResourcesFitArgs>(Some(&json!({
            "kind": "NodeResourcesFitArgs",
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "scoringStrategy": {"type": "MostAllocated", "resources": []}
        })))
        .unwrap();
        assert_eq!(most.scoring_strategy.resources, default_resources());
        let zero = decode_args::<NodeResourcesFitArgs>(Some(&json!({
            "scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 0}]}
        })))
        .unwrap();
        assert_eq!(
            zero.scoring_strategy.resources,
            vec![ResourceSpec::new("cpu", 1)]
        );
    }

    #[test]
    fn weight_validation() {
        let with_weight = |w: i64| {
            json!({"scoringStrategy": {"type": "LeastAllocated", "resources": [
                {"name": "cpu", "weight": 1}, {"name": "memory", "weight": w}]}})
        };
        assert!(decode_args::<NodeResourcesFitArgs>(Some(&with_weight(100))).is_ok());
        assert_eq!(
            validate(with_weight(101)),
            "scoringStrategy.resources[1].weight: Invalid value: 101: resource weight of memory not in valid range (0, 100]"
        );
        assert_eq!(
            validate(with_weight(-1)),
            "scoringStrategy.resources[1].weight: Invalid value: -1: resource weight of memory not in valid range (0, 100]"
        );
    }

    #[test]
    fn duplicate_resources_are_rejected() {
        assert_eq!(
            validate(
                json!({"scoringStrategy": {"type": "LeastAllocated", "resources": [
                {"name": "cpu"}, {"name": "memory"}, {"name": "cpu", "weight": 2}]}})
            ),
            "scoringStrategy.resources[2].name: Duplicate value: \"cpu\""
        );
    }

    #[test]
    fn strategy_type_validation() {
        assert_eq!(
            validate(json!({"scoringStrategy": {"resources": [{"name": "cpu"}]}})),
            "scoringStrategy.type: Unsupported value: \"\": supported values: \"LeastAllocated\", \"MostAllocated\", \"RequestedToCapacityRatio\""
        );
        let e = validate(json!({"scoringStrategy": {"type": "Balanced"}}));
        assert!(
            e.starts_with("scoringStrategy.type: unknown variant `Balanced`"),
            "{e}"
        );
        assert_eq!(
            validate(json!({"scoringStrategy": {"type": "RequestedToCapacityRatio"}})),
            "scoringStrategy.requestedToCapacityRatio: Required value: must be set for scoring strategy type RequestedToCapacityRatio"
        );
        let e = validate(json!({"scoringStrategy": {"type": "MostAllocated", "shape": []}}));
        assert!(
            e.starts_with("scoringStrategy.shape: unknown field `shape`"),
            "{e}"
        );
    }

    #[test]
    fn shape_validation() {
        let shape = |points: serde_json::Value| {
            validate(
                json!({"scoringStrategy": {"type": "RequestedToCapacityRatio",
                "requestedToCapacityRatio": {"shape": points}}}),
            )
        };
        let path = "scoringStrategy.requestedToCapacityRatio.shape";
        assert_eq!(
            shape(json!([])),
            format!("{path}: Required value: at least one point must be specified")
        );
        assert_eq!(
            shape(json!([{"utilization": 10, "score": 1}, {"utilization": 10, "score": 2}])),
            format!(
                "{path}[1].utilization: Invalid value: 10: values must be sorted in increasing order"
            )
        );
        assert_eq!(
            shape(json!([{"utilization": 50}, {"utilization": 60}, {"utilization": 40}])),
            format!(
                "{path}[2].utilization: Invalid value: 40: values must be sorted in increasing order"
            )
        );
        assert_eq!(
            shape(json!([{"utilization": -1, "score": 1}])),
            format!("{path}[0].utilization: Invalid value: -1: not in valid range [0, 100]")
        );
        assert_eq!(
            shape(json!([{"utilization": 0}, {"utilization": 101}])),
            format!("{path}[1].utilization: Invalid value: 101: not in valid range [0, 100]")
        );
        assert_eq!(
            shape(json!([{"utilization": 0, "score": 11}])),
            format!("{path}[0].score: Invalid value: 11: not in valid range [0, 10]")
        );
        assert_eq!(
            shape(json!([{"utilization": 0, "score": -1}])),
            format!("{path}[0].score: Invalid value: -1: not in valid range [0, 10]")
        );
        // The boundaries themselves are valid, and the shape is checked whatever the type.
        assert!(
            decode_args::<NodeResourcesFitArgs>(Some(&json!({"scoringStrategy": {
                "type": "RequestedToCapacityRatio",
                "requestedToCapacityRatio": {"shape": [
                    {"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]}}})))
            .is_ok()
        );
        assert_eq!(
            validate(json!({"scoringStrategy": {"type": "LeastAllocated",
                "requestedToCapacityRatio": {"shape": []}}})),
            format!("{path}: Required value: at least one point must be specified")
        );
    }

    #[test]
    fn ignored_resource_validation() {
        assert!(
            decode_args::<NodeResourcesFitArgs>(Some(&json!({
                "ignoredResources": ["example.com/foo", "foo_bar.baz"],
                "ignoredResourceGroups": ["example.com", "Foo"],
            })))
            .is_ok()
        );
        assert_eq!(
            validate(json!({"ignoredResourceGroups": ["example.com/foo"]})),
            "ignoredResourceGroups[0]: Invalid value: \"example.com/foo\": resource group name can't contain '/'"
        );
        assert_eq!(
            validate(json!({"ignoredResourceGroups": ["ok", "-bad"]})),
            format!(
                "ignoredResourceGroups[1]: Invalid value: \"-bad\": name part {QUALIFIED_NAME_RULE}"
            )
        );
        assert_eq!(
            validate(json!({"ignoredResources": ["a/b/c"]})),
            format!(
                "ignoredResources[0]: Invalid value: \"a/b/c\": a qualified name {QUALIFIED_NAME_RULE} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )
        );
        assert_eq!(
            validate(json!({"ignoredResources": ["Example.com/foo"]})),
            format!(
                "ignoredResources[0]: Invalid value: \"Example.com/foo\": prefix part {DNS_SUBDOMAIN_RULE}"
            )
        );
        assert_eq!(
            validate(json!({"ignoredResources": ["/foo"]})),
            "ignoredResources[0]: Invalid value: \"/foo\": prefix part must be non-empty"
        );
        assert_eq!(
            validate(json!({"ignoredResources": ["example.com/"]})),
            "ignoredResources[0]: Invalid value: \"example.com/\": name part must be non-empty"
        );
        let long = "a".repeat(64);
        assert_eq!(
            validate(json!({"ignoredResources": [long]})),
            format!(
                "ignoredResources[0]: Invalid value: \"{long}\": name part must be no more than 63 characters"
            )
        );
        assert!(validate(json!({"unknown": 1})).starts_with("unknown: unknown field `unknown`"));
    }

    #[test]
    fn registered_under_its_name() {
        let r: Registry = crate::plugins::registry();
        let f = r.get(NAME).expect("registered");
        let p = f(None).unwrap();
        assert_eq!(p.name(), NAME);
        assert!(p.as_pre_filter().is_some());
        assert!(p.as_filter().is_some());
        assert!(p.as_pre_score().is_some());
        assert!(p.as_score().is_some());
        assert!(f(Some(&json!({"scoringStrategy": {"type": "Nope"}}))).is_err());
    }
}
