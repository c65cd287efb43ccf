//! GpuShare: GPU sharing with fragmentation-aware placement.
//!
//! Filters nodes by their GPUs (enough whole GPUs free, or one GPU with the share free, of a
//! model the pod accepts; cpu and memory are NodeResourcesFit's), scores them by the
//! configured policy, picks the pod's GPUs at Reserve and records them on the pod as
//! `gantry.io/gpu-assignment`, which the scheduler applies to the pod it assumes and writes
//! with the binding. The annotations are described in [`crate::model::gpu`].

mod devices;
pub mod hami;
pub mod policy;
pub mod workload;

#[cfg(test)]
mod hami_tests;
#[cfg(test)]
mod tests;

use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use serde::Deserialize;

use crate::cache::{NodeInfo, Snapshot};
use crate::framework::{
    ArgsError, ClusterEvent, CycleState, EventHint, FilterPlugin, NODE_CHANGES_AND_POD_DELETES,
    NodeScore, Plugin, PluginArgs, PluginSpec, PreBindAction, PreBindPlugin, PreFilterPlugin,
    PreFilterResult, PreScorePlugin, ReservePlugin, ReservedAnnotations, ScorePlugin, Status,
    decode_args,
};
use crate::model::PodInfo;
use crate::model::gpu::{
    DeviceFilter, GPU_ASSIGNMENT_ANNOTATION, GpuAssignment, GpuRequest, HamiNode,
    MAX_GPUS_PER_NODE, MILLI_PER_GPU, Packing,
};

pub use policy::Policy;
use policy::{Capacity, Take};
use workload::{Learner, ShapeKey, ShapeTable, TypicalWorkload};

/// The plugin's name in configuration files.
pub const NAME: &str = "GpuShare";

/// Reason for a node without GPUs.
pub const NO_GPU: &str = "node(s) had no GPU";
/// Reason for a node whose GPU model the pod does not accept.
pub const MODEL_MISMATCH: &str = "node(s) didn't have the requested GPU model";
/// Reason for a node without enough fully free GPUs.
pub const INSUFFICIENT_GPU: &str = "Insufficient nvidia.com/gpu";
/// Reason for a node without a GPU that has the requested share free.
pub const INSUFFICIENT_GPU_SHARE: &str = "node(s) didn't have a GPU with enough free share";
/// Reason for a node that cannot measure a share asked by memory (no memory label, or GPUs
/// smaller than asked).
pub const GPU_MEMORY_UNKNOWN: &str = "node(s) didn't have GPUs with the requested memory";

/// A typical pod shape given in the configuration.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TypicalPod {
    /// cpu in millicores.
    #[serde(default)]
    pub cpu_milli: i64,
    /// Number of GPUs (0 for a pod without GPU).
    #[serde(default)]
    pub gpu_count: u32,
    /// Milli of each GPU (1..=1000), with `gpuCount`.
    #[serde(default)]
    pub gpu_milli: u32,
    /// A share asked by memory, in MiB, instead of `gpuMilli`.
    #[serde(default)]
    pub gpu_memory_mib: u64,
    /// Accepted GPU models; empty for any.
    #[serde(default)]
    pub gpu_models: Vec<String>,
    /// Relative frequency (> 0).
    pub weight: f64,
}

/// `GpuShareArgs`: the policy and the typical workload.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct GpuShareArgs {
    /// How nodes and GPUs are chosen.
    pub scoring_strategy: Policy,
    /// The typical workload for fragmentation; learned from the pods seen when empty.
    pub typical_pods: Vec<TypicalPod>,
    /// How many of the most recent pods the learned typical workload is drawn from.
    pub learning_window: u32,
    /// Share of the learned workload, in percent, the typical pod shapes cover (given
    /// typical pods are used as given).
    pub coverage_percent: u32,
}

/// Default learning window: a few thousand pods.
pub const DEFAULT_LEARNING_WINDOW: u32 = 2000;
/// Default coverage: FGD's 95%.
pub const DEFAULT_COVERAGE_PERCENT: u32 = 95;

impl Default for GpuShareArgs {
    fn default() -> Self {
        GpuShareArgs {
            scoring_strategy: Policy::default(),
            typical_pods: Vec::new(),
            learning_window: DEFAULT_LEARNING_WINDOW,
            coverage_percent: DEFAULT_COVERAGE_PERCENT,
        }
    }
}

impl PluginArgs for GpuShareArgs {
    const KIND: &'static str = "GpuShareArgs";

    fn validate(&self) -> Result<(), ArgsError> {
        if self.learning_window == 0 {
            return Err(ArgsError::new(
                "learningWindow",
                "Invalid value: 0: must be at least 1",
            ));
        }
        if !(1..=100).contains(&self.coverage_percent) {
            return Err(ArgsError::new(
                "coveragePercent",
                format!(
                    "Invalid value: {}: not in valid range [1, 100]",
                    self.coverage_percent
                ),
            ));
        }
        for (i, p) in self.typical_pods.iter().enumerate() {
            let field = |f: &str| format!("typicalPods[{i}].{f}");
            if !(p.weight.is_finite() && p.weight > 0.0) {
                return Err(ArgsError::new(
                    field("weight"),
                    format!("Invalid value: {}: must be positive", p.weight),
                ));
            }
            if p.gpu_memory_mib > MAX_GPU_MEMORY_MIB {
                return Err(ArgsError::new(
                    field("gpuMemoryMib"),
                    format!(
                        "Invalid value: {}: more memory than any GPU has (at most {MAX_GPU_MEMORY_MIB})",
                        p.gpu_memory_mib
                    ),
                ));
            }
            if p.cpu_milli < 0 {
                return Err(ArgsError::new(
                    field("cpuMilli"),
                    format!("Invalid value: {}: must be non-negative", p.cpu_milli),
                ));
            }
            if p.gpu_milli > MILLI_PER_GPU {
                return Err(ArgsError::new(
                    field("gpuMilli"),
                    format!(
                        "Invalid value: {}: not in valid range [0, 1000]",
                        p.gpu_milli
                    ),
                ));
            }
            if p.gpu_count as usize > MAX_GPUS_PER_NODE {
                return Err(ArgsError::new(
                    field("gpuCount"),
                    format!(
                        "Invalid value: {}: more GPUs than any node has",
                        p.gpu_count
                    ),
                ));
            }
            let asks = p.gpu_milli > 0 || p.gpu_memory_mib > 0;
            if (p.gpu_count > 0) != asks {
                return Err(ArgsError::new(
                    field("gpuCount"),
                    "Invalid value: gpuCount and one of gpuMilli or gpuMemoryMib go together",
                ));
            }
            if p.gpu_milli > 0 && p.gpu_memory_mib > 0 {
                return Err(ArgsError::new(
                    field("gpuMemoryMib"),
                    "Invalid value: gpuMilli and gpuMemoryMib cannot both be set",
                ));
            }
            if p.gpu_count > 1 && (p.gpu_milli < MILLI_PER_GPU || p.gpu_memory_mib > 0) {
                return Err(ArgsError::new(
                    field("gpuMilli"),
                    "Invalid value: only a single GPU can be shared",
                ));
            }
        }
        // Weights are normalized by their sum, which must be a number.
        if !self
            .typical_pods
            .iter()
            .map(|p| p.weight)
            .sum::<f64>()
            .is_finite()
        {
            return Err(ArgsError::new(
                "typicalPods",
                "Invalid value: the weights' sum is not a finite number",
            ));
        }
        Ok(())
    }
}

/// The most GPU memory a typical pod may ask for, in MiB (4 PiB): far beyond any GPU, and
/// small enough that converting it into milli of a GPU cannot overflow.
const MAX_GPU_MEMORY_MIB: u64 = u32::MAX as u64;

impl TypicalPod {
    fn shape(&self) -> ShapeKey {
        ShapeKey {
            cpu: self.cpu_milli,
            milli: if self.gpu_memory_mib > 0 {
                0
            } else {
                self.gpu_milli
            },
            count: self.gpu_count,
            memory_mib: self.gpu_memory_mib,
            models: self
                .gpu_models
                .iter()
                .map(|m| Box::from(m.as_str()))
                .collect(),
        }
    }
}

/// Where the typical workload comes from.
#[derive(Debug)]
enum Typical {
    Given(Arc<TypicalWorkload>),
    Learned(Mutex<Learner>),
}

/// The GpuShare plugin.
#[derive(Debug)]
pub struct GpuShare {
    policy: Policy,
    typical: Typical,
}

/// The plugin for the registry; not in kube-scheduler's default profile (a profile enables it).
pub const SPEC: PluginSpec = PluginSpec {
    name: NAME,
    factory,
    default: None,
    args: Some(crate::framework::resolved_args::<GpuShareArgs>),
};

/// Builds the plugin from its `GpuShareArgs`.
pub fn factory(args: Option<&serde_json::Value>) -> Result<Arc<dyn Plugin>, ArgsError> {
    let args = decode_args::<GpuShareArgs>(args)?;
    Ok(Arc::new(GpuShare::new(&args)))
}

impl GpuShare {
    /// The plugin for validated arguments.
    pub fn new(args: &GpuShareArgs) -> Self {
        let coverage = f64::from(args.coverage_percent) / 100.0;
        let typical = if args.typical_pods.is_empty() {
            Typical::Learned(Mutex::new(Learner::new(
                args.learning_window as usize,
                coverage,
            )))
        } else {
            Typical::Given(Arc::new(TypicalWorkload::from_counts(
                args.typical_pods.iter().map(|p| (p.shape(), p.weight)),
                1.0,
            )))
        };
        GpuShare {
            policy: args.scoring_strategy,
            typical,
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    fn typical_for(&self, pod: &PodInfo, shape: &ShapeKey) -> Arc<TypicalWorkload> {
        match &self.typical {
            Typical::Given(t) => t.clone(),
            Typical::Learned(learner) => {
                let mut h = rustc_hash::FxHasher::default();
                pod.namespace.hash(&mut h);
                pod.name.hash(&mut h);
                match learner.lock() {
                    Ok(mut l) => l.observe(h.finish(), shape.clone()),
                    Err(poisoned) => poisoned.into_inner().observe(h.finish(), shape.clone()),
                }
            }
        }
    }
}

/// What PreFilter learned about the pod.
#[derive(Debug, Clone)]
struct PodState {
    request: GpuRequest,
    cpu: i64,
    typical: Arc<TypicalWorkload>,
    /// The policy for this pod: the plugin's, or the one its HAMi node policy annotation
    /// names (binpack: GpuPacking, spread: Spread).
    policy: Policy,
}

/// Fragmentation tables for the feasible nodes' GPU models, computed at PreScore.
#[derive(Debug, Default, Clone)]
struct Tables {
    /// The one table when no typical shape depends on the model or memory.
    single: Option<Arc<ShapeTable>>,
    by_model: Vec<ModelTable>,
}

/// The table for nodes of one GPU model and memory.
#[derive(Debug, Clone)]
struct ModelTable {
    model: Option<Arc<str>>,
    memory_mib: Option<u64>,
    table: Arc<ShapeTable>,
}

impl ModelTable {
    fn is_for(&self, gpu: &crate::model::gpu::NodeGpus) -> bool {
        self.model.as_deref() == gpu.model.as_deref() && self.memory_mib == gpu.memory_mib
    }
}

impl Tables {
    fn build<'a>(typical: &TypicalWorkload, nodes: impl Iterator<Item = &'a NodeInfo>) -> Self {
        let per_model =
            typical.restricts_models() || typical.shapes().iter().any(|(s, _)| s.memory_mib > 0);
        if !per_model {
            return Tables {
                single: Some(typical.table(None, None)),
                by_model: Vec::new(),
            };
        }
        let mut by_model: Vec<ModelTable> = Vec::new();
        for n in nodes {
            let gpu = &n.node.gpu;
            if !by_model.iter().any(|t| t.is_for(gpu)) {
                by_model.push(ModelTable {
                    model: gpu.model.clone(),
                    memory_mib: gpu.memory_mib,
                    table: typical.table(gpu.model.as_deref(), gpu.memory_mib),
                });
            }
        }
        Tables {
            single: None,
            by_model,
        }
    }

    fn get(&self, node: &NodeInfo) -> Option<&ShapeTable> {
        if let Some(t) = &self.single {
            return Some(t);
        }
        self.by_model
            .iter()
            .find(|t| t.is_for(&node.node.gpu))
            .map(|t| &*t.table)
    }
}

/// What scoring needs, computed at PreScore.
#[derive(Debug, Clone)]
struct ScoreState {
    tables: Tables,
    capacity: Capacity,
}

fn missing(what: &str) -> Status {
    Status::error(format!("error reading {what:?} from cycleState: not found"))
}

/// Node changes and placed pods going away free GPUs; a node is no longer avoided for its
/// HAMi lock.
const EVENTS: [EventHint; 4] = [
    NODE_CHANGES_AND_POD_DELETES[0],
    NODE_CHANGES_AND_POD_DELETES[1],
    NODE_CHANGES_AND_POD_DELETES[2],
    EventHint::any(ClusterEvent::NodeLockFree),
];

impl Plugin for GpuShare {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [EventHint] {
        &EVENTS
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
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        Some(self)
    }
    fn as_pre_bind(&self) -> Option<&dyn PreBindPlugin> {
        Some(self)
    }
}

impl PreBindPlugin for GpuShare {
    /// A pod given HAMi devices is bound under HAMi's node lock.
    fn pre_bind(
        &self,
        state: &CycleState,
        _pod: &PodInfo,
        node: &str,
    ) -> Result<Option<PreBindAction>, Status> {
        let allocates = state.get::<ReservedAnnotations>().is_some_and(|r| {
            r.0.iter()
                .any(|(k, _)| k == crate::model::hami::TO_ALLOCATE_ANNOTATION)
        });
        Ok(allocates.then(|| PreBindAction::LockHamiNode(Arc::from(node))))
    }
}

impl PreFilterPlugin for GpuShare {
    /// Rejects a pod whose GPU annotations are malformed, with what is wrong; records the
    /// pod's shape (for the learned typical workload). Pods without GPU skip the filter.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let Some(shape) = ShapeKey::of(pod) else {
            let msg = pod.gpu.error.clone().unwrap_or_default();
            return (PreFilterResult::default(), Status::unresolvable(msg));
        };
        let typical = self.typical_for(pod, &shape);
        let policy = match pod.gpu.policy.node {
            Some(Packing::Binpack) => Policy::GpuPacking,
            Some(Packing::Spread) => Policy::Spread,
            None => self.policy,
        };
        state.insert(PodState {
            request: pod.gpu.request,
            cpu: pod.non_zero_milli_cpu,
            typical,
            policy,
        });
        let status = if pod.gpu.request.is_some() {
            Status::success()
        } else {
            Status::skip()
        };
        (PreFilterResult::default(), status)
    }
}

impl FilterPlugin for GpuShare {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.get::<PodState>() else {
            return missing("PreFilterGpuShare");
        };
        let gpus = &node.node.gpu;
        if !matches!(gpus.hami, HamiNode::Absent) {
            if gpus.count == 0 && !matches!(gpus.hami, HamiNode::Unusable(_)) {
                return Status::unresolvable(NO_GPU);
            }
            if s.request.is_some() && node.hami_lock_holder.is_some() {
                return Status::unresolvable(hami::LOCK_HELD);
            }
            return match hami::feasible(pod, s.request, node) {
                Ok(()) => Status::success(),
                Err(hami::INSUFFICIENT_HAMI) => Status::unschedulable(hami::INSUFFICIENT_HAMI),
                Err(reason) => Status::unresolvable(reason),
            };
        }
        if matches!(s.request, GpuRequest::Hami(_))
            || pod
                .gpu
                .filter
                .as_deref()
                .is_some_and(DeviceFilter::names_uuids)
        {
            return Status::unresolvable(hami::NO_HAMI_DEVICES);
        }
        if gpus.count == 0 {
            return Status::unresolvable(NO_GPU);
        }
        if !pod.gpu.accepts_model(gpus.model.as_deref()) {
            return Status::unresolvable(MODEL_MISMATCH);
        }
        match Take::on(s.request, node) {
            None => Status::unresolvable(GPU_MEMORY_UNKNOWN),
            Some(Take::Nothing) => Status::success(),
            Some(Take::Whole(n)) => {
                if n > gpus.count {
                    Status::unresolvable(INSUFFICIENT_GPU)
                } else if (0..node.gpu_used.len())
                    .filter(|&i| node.gpu_free(i) >= MILLI_PER_GPU)
                    .nth(n - 1)
                    .is_some()
                {
                    Status::success()
                } else {
                    Status::unschedulable(INSUFFICIENT_GPU)
                }
            }
            Some(Take::Share(m)) => {
                if (0..node.gpu_used.len()).any(|i| node.gpu_free(i) >= m) {
                    Status::success()
                } else {
                    Status::unschedulable(INSUFFICIENT_GPU_SHARE)
                }
            }
        }
    }
}

impl PreScorePlugin for GpuShare {
    fn pre_score(
        &self,
        state: &mut CycleState,
        _pod: &PodInfo,
        snapshot: &Snapshot,
        feasible: &[&NodeInfo],
    ) -> Status {
        let Some(s) = state.get::<PodState>() else {
            return missing("PreFilterGpuShare");
        };
        let tables = if s.policy.uses_fragmentation() {
            Tables::build(&s.typical, feasible.iter().copied())
        } else {
            Tables::default()
        };
        let capacity = if s.policy == Policy::BestFit {
            largest_capacity(snapshot)
        } else {
            Capacity {
                cpu: 1,
                gpu_milli: 1,
            }
        };
        state.insert(ScoreState { tables, capacity });
        Status::success()
    }
}

/// The largest cpu and GPU milli of any node, which BestFit measures leftovers against.
fn largest_capacity(snapshot: &Snapshot) -> Capacity {
    Capacity {
        cpu: snapshot
            .nodes()
            .iter()
            .map(|n| n.node.allocatable.milli_cpu)
            .max()
            .unwrap_or(1)
            .max(1),
        gpu_milli: snapshot
            .nodes()
            .iter()
            .map(|n| n.node.gpu.count as i64 * i64::from(MILLI_PER_GPU))
            .max()
            .unwrap_or(1)
            .max(1),
    }
}

impl ScorePlugin for GpuShare {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let (Some(p), Some(s)) = (state.get::<PodState>(), state.get::<ScoreState>()) else {
            return Err(missing("PreScoreGpuShare"));
        };
        let Some(take) = Take::on(p.request, node) else {
            return Ok(0);
        };
        Ok(match p.policy {
            Policy::Fgd => match s.tables.get(node) {
                Some(t) => policy::fgd_score(t, node, p.cpu, take),
                None => 0,
            },
            Policy::BestFit => policy::best_fit_score(node, p.cpu, take, s.capacity),
            Policy::GpuPacking => policy::gpu_packing_score(node, take),
            Policy::Spread => policy::spread_score(node, take),
            Policy::Gantry => match s.tables.get(node) {
                Some(t) => policy::gantry_score(t, node, p.cpu, take),
                None => 0,
            },
        })
    }

    fn normalize(&self, state: &CycleState, _: &PodInfo, scores: &mut [NodeScore]) -> Status {
        let policy = state.get::<PodState>().map_or(self.policy, |p| p.policy);
        if policy.min_max_normalized() {
            policy::min_max_normalize(scores);
        }
        Status::success()
    }

    /// Every policy but Spread packs: among equally scored nodes, the same ones win.
    fn fixed_tie_order(&self) -> bool {
        self.policy != Policy::Spread
    }
}

impl ReservePlugin for GpuShare {
    /// Picks the pod's GPUs on the chosen node and records them as its
    /// `gantry.io/gpu-assignment` annotation.
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(p) = state.get::<PodState>() else {
            return missing("PreFilterGpuShare");
        };
        if !p.request.is_some() {
            return Status::success();
        }
        if node.node.gpu.hami_devices().is_some() {
            return self.reserve_hami(state, pod, node);
        }
        let Some(take) = Take::on(p.request, node) else {
            return Status::unschedulable(GPU_MEMORY_UNKNOWN);
        };
        let table = self.policy.uses_fragmentation().then(|| {
            p.typical
                .table(node.node.gpu.model.as_deref(), node.node.gpu.memory_mib)
        });
        let Some(devices) =
            policy::choose_devices(self.policy, table.as_deref(), node, p.cpu, take)
        else {
            return Status::unschedulable(match take {
                Take::Share(_) => INSUFFICIENT_GPU_SHARE,
                _ => INSUFFICIENT_GPU,
            });
        };
        if !devices.is_empty() {
            ReservedAnnotations::set(
                state,
                GPU_ASSIGNMENT_ANNOTATION,
                GpuAssignment(devices).to_string(),
            );
        }
        Status::success()
    }

    fn unreserve(&self, state: &mut CycleState, _pod: &PodInfo, _node: &str) {
        ReservedAnnotations::remove(state, GPU_ASSIGNMENT_ANNOTATION);
        for key in HAMI_RESERVED {
            ReservedAnnotations::remove(state, key);
        }
    }
}

/// The annotations Reserve writes for a pod placed on a HAMi node (the binder adds the
/// times and the bind phase).
const HAMI_RESERVED: [&str; 3] = [
    crate::model::hami::TO_ALLOCATE_ANNOTATION,
    crate::model::hami::ALLOCATED_ANNOTATION,
    crate::model::hami::ASSIGNED_NODE_ANNOTATION,
];

impl GpuShare {
    /// Reserve on a HAMi node: the devices the policy (or the pod's HAMi GPU policy) picks
    /// among those that can take the share, one by one, written as HAMi's scheduler writes
    /// them, so that HAMi's device plugin allocates exactly those.
    fn reserve_hami(&self, state: &mut CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(p) = state.get::<PodState>() else {
            return missing("PreFilterGpuShare");
        };
        let (count, mut allowed) = match hami::candidates(pod, p.request, node) {
            Ok(c) => c,
            Err(reason) => return Status::unschedulable(reason),
        };
        let Some(take) = Take::on(p.request, node) else {
            return Status::unschedulable(hami::INSUFFICIENT_HAMI);
        };
        let table = p.policy.uses_fragmentation().then(|| {
            p.typical
                .table(node.node.gpu.model.as_deref(), node.node.gpu.memory_mib)
        });
        let mut chosen = Vec::with_capacity(count);
        // One view of the node for the whole choice: a device chosen counts as full in it.
        let mut view = hami::masked(node, &allowed, take);
        while chosen.len() < count {
            let pick = match pod.gpu.policy.gpu {
                Some(packing) => allowed
                    .iter()
                    .map(|(i, _)| *i)
                    .min_by_key(|&i| match packing {
                        Packing::Binpack => (view.gpu_free(i), i),
                        Packing::Spread => (MILLI_PER_GPU - view.gpu_free(i), i),
                    }),
                None => {
                    let one = match take {
                        Take::Whole(_) => Take::Whole(1),
                        other => other,
                    };
                    policy::choose_devices(p.policy, table.as_deref(), &view, p.cpu, one)
                        .and_then(|d| d.first().map(|(i, _)| usize::from(*i)))
                }
            };
            let Some(position) = pick.and_then(|i| allowed.iter().position(|(a, _)| *a == i))
            else {
                return Status::unschedulable(hami::INSUFFICIENT_HAMI);
            };
            let taken = allowed.swap_remove(position);
            if let Some(used) = view.gpu_used.get_mut(taken.0) {
                *used = MILLI_PER_GPU;
            }
            chosen.push(taken);
        }
        let value = hami::allocation(node, &chosen);
        for key in [
            crate::model::hami::TO_ALLOCATE_ANNOTATION,
            crate::model::hami::ALLOCATED_ANNOTATION,
        ] {
            ReservedAnnotations::set(state, key, value.clone());
        }
        ReservedAnnotations::set(
            state,
            crate::model::hami::ASSIGNED_NODE_ANNOTATION,
            node.name().to_string(),
        );
        Status::success()
    }
}
