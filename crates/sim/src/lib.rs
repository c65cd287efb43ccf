//! The offline simulator: loads a cluster, schedules its pending pods through the same core
//! the real scheduler runs, on a virtual clock, and reports where everything went; and
//! what-if ([`whatif`]), which runs the same loop on a copy of a scheduler's state.

#![warn(missing_docs)]

mod input;
pub mod openb;
pub mod quality;
mod report;
pub mod snapshot;
pub mod whatif;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gantry_core::cache::VolumeDecision;
use gantry_core::config::Config;
use gantry_core::decision::DecisionRecorder;
use gantry_core::framework::{PreBindAction, Status};
use gantry_core::kinds::Target;
use gantry_core::model::load::{AnnotatedLoad, LoadSample, load_from_annotations};
use gantry_core::model::volume::{ClaimRef, VolumeModel};
use gantry_core::model::{Labels, NodeModel, PodInfo};
use gantry_core::plugins::scheduling_gates;
use gantry_core::scheduler::{Attempt, Scheduler};

pub use input::{ClusterInput, InputError, Loader};
pub(crate) use report::table;
pub use report::{GpuDevice, GroupOutcome, NodeUsage, PodOutcome, PreemptionOutcome, Report};

/// What the report says of a pod that scheduler extenders would filter or score: the
/// simulator makes no network calls (`gantry simulate` refuses such a configuration).
pub const EXTENDERS_NOT_SIMULATED: &str =
    "not simulated: scheduler extenders filter or score this pod, and the simulator calls none";

/// The example cluster `gantry simulate` runs with no input.
pub const EXAMPLE: &str = include_str!("example.yaml");

/// Runs the simulation of `input` under `config`.
pub fn simulate(
    input: &ClusterInput,
    config: Config,
    pool: Option<Arc<rayon::ThreadPool>>,
) -> Report {
    simulate_recorded(input, config, pool, None)
}

/// [`simulate`], recording every attempt's decision into `decisions` (stamped with the
/// simulated time, in milliseconds from the start).
pub fn simulate_recorded(
    input: &ClusterInput,
    config: Config,
    pool: Option<Arc<rayon::ThreadPool>>,
    decisions: Option<&DecisionRecorder>,
) -> Report {
    let Loaded {
        mut scheduler,
        report,
        pending,
    } = load(input, config, pool);
    schedule_pending(&mut scheduler, report, pending, Duration::ZERO, decisions)
}

/// A cluster read into a scheduler: what [`load`] returns.
pub struct Loaded {
    /// The scheduler, holding the nodes, the running pods and the other objects.
    pub scheduler: Scheduler,
    /// The report so far: the running pods, the pods that could not be read, what was left
    /// out.
    pub report: Report,
    /// The readable pending pods, in input order (not queued yet).
    pub pending: Vec<Arc<PodInfo>>,
}

/// Reads `input` into a scheduler for `config`: everything but the pending pods, which are
/// returned for [`schedule_pending`].
pub fn load(input: &ClusterInput, config: Config, pool: Option<Arc<rayon::ThreadPool>>) -> Loaded {
    let mut sched = Scheduler::new(config, pool);
    let mut report = Report {
        ignored: input.ignored.clone(),
        ..Default::default()
    };
    let now = Duration::ZERO;

    let mut loading = Loading {
        scheduler: &mut sched,
        invalid: Vec::new(),
        loads: Vec::new(),
    };
    input.apply_objects(&mut loading, now);
    let Loading { invalid, loads, .. } = loading;
    report.invalid = invalid;
    sched.set_node_loads(loads.iter().map(|(n, s)| (&**n, *s)), now);
    // Running pods first, so pending ones see them; then pending pods in input order.
    let mut pending: Vec<Arc<PodInfo>> = Vec::new();
    for pod in &input.pods {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            continue;
        }
        let info = match PodInfo::from_api(pod) {
            Ok(p) => Arc::new(p),
            Err(e) => {
                let (namespace, name) = pod_name(pod);
                report.pods.push(PodOutcome {
                    namespace,
                    name,
                    node: None,
                    message: Some(e.to_string()),
                    running: false,
                    annotations: Default::default(),
                    devices: Vec::new(),
                    volumes: Default::default(),
                    evicted: None,
                });
                continue;
            }
        };
        if let Some(node) = &info.node_name {
            if let Err(e) = sched.upsert_pod(info.clone(), now) {
                report.invalid.push(e.to_string());
                continue;
            }
            report.pods.push(PodOutcome {
                namespace: info.namespace.clone(),
                name: info.name.clone(),
                node: Some(node.to_string()),
                message: None,
                running: true,
                annotations: Default::default(),
                devices: Vec::new(),
                volumes: Default::default(),
                evicted: None,
            });
        } else {
            pending.push(info);
        }
    }
    Loaded {
        scheduler: sched,
        report,
        pending,
    }
}

/// Queues `pending` in `sched` (in order, after whatever `report` already holds) and
/// schedules until nothing is due, from the time `start`: bindings complete at once,
/// preemptions evict their victims, the clock jumps over backoffs and waits at Permit.
/// Returns `report` with each pending pod's outcome, every node's usage and every PodGroup's
/// outcome.
pub fn schedule_pending(
    sched: &mut Scheduler,
    report: Report,
    pending: Vec<Arc<PodInfo>>,
    start: Duration,
    decisions: Option<&DecisionRecorder>,
) -> Report {
    schedule_pending_until(sched, report, pending, start, decisions, &|| true)
}

/// [`schedule_pending`], asking `keep_going` before each scheduling cycle: once it says no,
/// the pods not yet tried are left as they are.
pub fn schedule_pending_until(
    sched: &mut Scheduler,
    mut report: Report,
    pending: Vec<Arc<PodInfo>>,
    start: Duration,
    decisions: Option<&DecisionRecorder>,
    keep_going: &dyn Fn() -> bool,
) -> Report {
    let now = start;
    let mut outcome_index: HashMap<String, usize> = HashMap::new();
    for pod in pending {
        outcome_index.insert(pod.key(), report.pods.len());
        let message = (!sched.is_responsible_for(&pod)).then(|| {
            format!(
                "not scheduled: no profile serves schedulerName {:?}",
                pod.scheduler_name
            )
        });
        report.pods.push(PodOutcome {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            node: None,
            message,
            running: false,
            annotations: Default::default(),
            devices: Vec::new(),
            volumes: Default::default(),
            evicted: None,
        });
        // Pending pods carry no node, so the cache cannot refuse them.
        let _ = sched.upsert_pod(pod, now);
    }

    let held = run_queue(
        sched,
        &mut report,
        &outcome_index,
        start,
        decisions,
        keep_going,
    );
    for (queued, _) in sched.waiting() {
        if let (Some(status), Some(&i)) = (&queued.gated, outcome_index.get(&queued.pod.key())) {
            report.pods[i].message = Some(gated_message(status));
        }
    }
    report.nodes = node_usage(sched);
    report.groups = group_outcomes(sched, &report, &held);
    report
}

/// What a pod held back before its first attempt says: the API server's condition for a pod
/// with scheduling gates, else the gating plugin's reason.
fn gated_message(status: &Status) -> String {
    if status.plugin() == Some(scheduling_gates::NAME) {
        scheduling_gates::GATED_CONDITION_MESSAGE.to_string()
    } else {
        status.message()
    }
}

/// Schedules until nothing is due; advances the virtual clock over backoffs and waits at
/// Permit. Returns, for each PodGroup, the most of its pods placed at once (waiting at
/// Permit included).
fn run_queue(
    sched: &mut Scheduler,
    report: &mut Report,
    index: &HashMap<String, usize>,
    start: Duration,
    decisions: Option<&DecisionRecorder>,
    keep_going: &dyn Fn() -> bool,
) -> HashMap<(String, String), usize> {
    let mut held: HashMap<(String, String), usize> = HashMap::new();
    let mut now = start;
    // Bindings so far, and for each pod rejected at Permit, how many there were then: a pod
    // rejected twice with nothing bound in between would be held and rejected the same way
    // again, for ever, and is not tried again.
    let mut bindings = 0u64;
    let mut rejected_at: HashMap<String, u64> = HashMap::new();
    loop {
        loop {
            if !keep_going() {
                return held;
            }
            let start = Instant::now();
            let Some(mut attempt) = sched.schedule_next(now) else {
                break;
            };
            if let Some(d) = decisions {
                let at = u64::try_from(now.as_millis()).unwrap_or(u64::MAX);
                d.record(&mut attempt, at, start.elapsed());
            }
            match attempt {
                Attempt::Waiting { pod, .. } => {
                    if let Some(group) = gantry_core::model::pod_group::group_of(&pod) {
                        let placed = sched
                            .cache()
                            .pod_groups()
                            .members(&pod.namespace, group)
                            .placed();
                        let most = held
                            .entry((pod.namespace.clone(), group.to_string()))
                            .or_default();
                        *most = (*most).max(placed);
                    }
                }
                Attempt::Rejected { pod, status, .. } => {
                    if let Some(&i) = index.get(&pod.key()) {
                        report.pods[i].message = Some(status.message());
                    }
                    if rejected_at.insert(pod.key(), bindings) == Some(bindings) {
                        sched.stop_trying(&pod.namespace, &pod.name);
                    }
                }
                Attempt::Scheduled(task, _) | Attempt::Permitted { task, .. } => {
                    bindings += 1;
                    let key = task.assumed.key();
                    let node = task.plan.node.to_string();
                    let volumes = complete_pre_bind(sched, &task.plan.pre_bind, now);
                    match sched.binding_succeeded(&task, now) {
                        Ok(()) => {
                            if let Some(&i) = index.get(&key) {
                                report.pods[i].node = Some(node);
                                report.pods[i].message = None;
                                report.pods[i].annotations =
                                    task.plan.annotations.iter().cloned().collect();
                                report.pods[i].devices =
                                    GpuDevice::allocated(&report.pods[i].annotations);
                                report.pods[i].volumes = volumes;
                            }
                        }
                        Err(e) => report.invalid.push(e.to_string()),
                    }
                }
                Attempt::Unschedulable {
                    pod,
                    message,
                    diagnosis,
                    ..
                } => {
                    if let Some(&i) = index.get(&pod.key()) {
                        report.pods[i].message = Some(message);
                    }
                    if let Some(p) = &diagnosis.post_filter.preemption {
                        evict(sched, report, &pod, p, now);
                    }
                }
                Attempt::Extending(request) => {
                    let pod = &request.pod;
                    if let Some(&i) = index.get(&pod.key()) {
                        report.pods[i].message = Some(EXTENDERS_NOT_SIMULATED.to_string());
                    }
                    sched.stop_trying(&pod.namespace, &pod.name);
                }
                Attempt::Failed { pod, status, .. } => {
                    if let Some(&i) = index.get(&pod.key()) {
                        report.pods[i].message = Some(status.error_message());
                    }
                    // Nothing changes between tries in a simulation: the error would come back
                    // after every backoff, for ever. The pod is not tried again.
                    sched.remove_pod(&pod.namespace, &pod.name, now);
                }
            }
        }
        // Pods parked as unschedulable stay so: nothing else changes in a simulation. Time
        // moves on to the next backoff to end, or wait at Permit to run out.
        let waits = sched.waiting_pods().next_deadline();
        match (sched.next_backoff_expiry(), waits) {
            (Some(a), Some(b)) => now = a.min(b).max(now),
            (Some(t), None) | (None, Some(t)) => now = t.max(now),
            (None, None) => break,
        }
    }
    held
}

/// Carries a preemption out as a cluster would: the victims go away (their deletion frees
/// the node and wakes the preemptor, nominated there), and the report records it.
fn evict(
    sched: &mut Scheduler,
    report: &mut Report,
    preemptor: &PodInfo,
    preemption: &gantry_core::framework::Preemption,
    now: Duration,
) {
    let by = format!("{} on {}", preemptor.key(), preemption.node);
    for v in &preemption.victims {
        sched.remove_pod(&v.namespace, &v.name, now);
        if let Some(o) = report
            .pods
            .iter_mut()
            .find(|o| o.namespace == v.namespace && o.name == v.name)
        {
            o.node = None;
            o.message = None;
            o.evicted = Some(by.clone());
        }
    }
    report.preemptions.push(PreemptionOutcome {
        namespace: preemptor.namespace.clone(),
        pod: preemptor.name.clone(),
        node: preemption.node.to_string(),
        victims: preemption.victims.iter().map(|v| v.key()).collect(),
        reason: preemption.reason.clone(),
    });
}

/// The load a node's annotations describe, as a sample of the simulated moment: it never goes
/// stale, and the pods already running are what it measured (the simulation's placements are
/// not).
fn simulated_sample(load: AnnotatedLoad, now: Duration) -> LoadSample {
    LoadSample {
        cpu: load.cpu,
        memory: load.memory,
        taken_at: now,
        reflects_placements_before: now,
        max_age: None,
    }
}

/// Carries out what PreBind asked for at once, as the PV controller would: each chosen
/// volume is bound to its claim, and a claim to provision gets a volume of its size and
/// class (named as Kubernetes names provisioned volumes, `pvc-<claim uid>`). Returns each
/// claim with what it got.
fn complete_pre_bind(
    sched: &mut Scheduler,
    actions: &[PreBindAction],
    now: Duration,
) -> BTreeMap<String, String> {
    let mut outcome = BTreeMap::new();
    // A HAMi node lock has no one to wait for in a simulation, whose device plugins
    // allocate at once.
    let volume_bindings = actions.iter().filter_map(|a| match a {
        PreBindAction::BindVolumes(binding) => Some(binding),
        PreBindAction::LockHamiNode(_) => None,
    });
    for binding in volume_bindings {
        for decision in &binding.decisions {
            let (claim_key, volume) = match decision {
                VolumeDecision::Bind { claim, volume, .. } => (claim, volume.clone()),
                VolumeDecision::Provision { claim, .. } => (claim, String::new()),
            };
            let Some(claim) = sched
                .cache()
                .storage()
                .api_claim(&claim_key.0, &claim_key.1)
            else {
                continue;
            };
            let mut claim = (**claim).clone();
            let reference = ClaimRef {
                namespace: claim.namespace.clone(),
                name: claim.name.clone(),
                uid: claim.uid.clone(),
            };
            let volume = match decision {
                VolumeDecision::Bind { .. } => {
                    let Some(v) = sched.cache().storage().api_volume(&volume) else {
                        continue;
                    };
                    let mut v = (**v).clone();
                    v.claim_ref = Some(reference);
                    v.available = false;
                    v.resource_version.push_str("+bound");
                    outcome.insert(claim.name.clone(), v.name.clone());
                    v
                }
                VolumeDecision::Provision { node, .. } => {
                    let id = if claim.uid.is_empty() {
                        format!("{}-{}", claim.namespace, claim.name)
                    } else {
                        claim.uid.clone()
                    };
                    outcome.insert(claim.name.clone(), format!("provisioned on {node}"));
                    VolumeModel {
                        name: format!("pvc-{id}"),
                        resource_version: String::new(),
                        labels: Labels::default(),
                        class: claim.class.clone(),
                        capacity: claim.request,
                        access_modes: claim.access_modes,
                        block: claim.block,
                        claim_ref: Some(reference),
                        available: false,
                        node_affinity: None,
                        topology: Vec::new(),
                        attachable: None,
                        in_tree_plugin: None,
                        deleting: false,
                    }
                }
            };
            claim.volume_name = volume.name.clone();
            claim.bind_completed = true;
            claim.resource_version.push_str("+bound");
            sched.upsert_volume(volume, now);
            sched.upsert_claim(claim, now);
        }
    }
    outcome
}

/// How each PodGroup fared: complete once `minMember` of its pods are bound; otherwise how
/// many of them the simulation held at most, and why the rest found no place (the message
/// of a pod not placed, preferring one that did not wait for the others).
fn group_outcomes(
    sched: &Scheduler,
    report: &Report,
    held: &HashMap<(String, String), usize>,
) -> Vec<GroupOutcome> {
    let groups = sched.cache().pod_groups();
    groups
        .groups()
        .map(|g| {
            let members = groups.members(&g.namespace, &g.name);
            let placed = members.placed();
            let complete = placed >= g.min_member as usize;
            let messages: Vec<&str> = report
                .pods
                .iter()
                .filter(|p| p.namespace == g.namespace && p.node.is_none() && p.evicted.is_none())
                .filter(|p| members.pending().any(|m| m == p.name))
                .filter_map(|p| p.message.as_deref())
                .collect();
            let why = (!complete).then(|| {
                messages
                    .iter()
                    .find(|m| !is_permit_rejection(m))
                    .or(messages.first())
                    .map_or_else(
                        || "no pod of the group was tried".to_string(),
                        |m| m.to_string(),
                    )
            });
            GroupOutcome {
                namespace: g.namespace.clone(),
                name: g.name.clone(),
                min_member: g.min_member,
                pods: members.len(),
                placed,
                held_at_most: held
                    .get(&(g.namespace.clone(), g.name.clone()))
                    .copied()
                    .unwrap_or(0)
                    .max(placed),
                complete,
                why,
            }
        })
        .collect()
}

/// True for the messages of a pod released at Permit with its group (rather than one that
/// found no node).
fn is_permit_rejection(message: &str) -> bool {
    message.starts_with("rejected due to timeout")
        || message.starts_with("rejection in Unreserve")
        || message.starts_with("optimistic rejection")
}

/// What the objects of a cluster's input are applied to: the scheduler, with each node's
/// load read from its annotations (dated at the simulation's start).
struct Loading<'a> {
    scheduler: &'a mut Scheduler,
    /// The objects that cannot be read, and the nodes whose load annotations cannot, with
    /// why.
    invalid: Vec<String>,
    /// Each node's load, from its annotations.
    loads: Vec<(Arc<str>, LoadSample)>,
}

impl Loader for Loading<'_> {
    fn invalid(&mut self, error: String) {
        self.invalid.push(error);
    }
}

impl Target for Loading<'_> {
    fn scheduler(&mut self) -> &mut Scheduler {
        self.scheduler
    }

    fn node_applied(&mut self, node: NodeModel, now: Duration) {
        match load_from_annotations(&node.annotations) {
            Ok(Some(load)) => self
                .loads
                .push((node.name.clone(), simulated_sample(load, now))),
            Ok(None) => {}
            Err(e) => self.invalid.push(format!(
                "node {}: {}",
                gantry_core::model::echo::echo_name(&node.name),
                gantry_core::model::echo::bound_message(&e)
            )),
        }
        self.scheduler.upsert_node(node, now);
    }
}

fn pod_name(pod: &k8s_openapi::api::core::v1::Pod) -> (String, String) {
    (
        pod.metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string()),
        pod.metadata.name.clone().unwrap_or_default(),
    )
}

fn node_usage(sched: &Scheduler) -> Vec<NodeUsage> {
    sched
        .cache()
        .nodes()
        .map(|info| NodeUsage {
            name: info.node.name.to_string(),
            milli_cpu_requested: info.requested.milli_cpu,
            milli_cpu_allocatable: info.node.allocatable.milli_cpu,
            memory_requested: info.requested.memory,
            memory_allocatable: info.node.allocatable.memory,
            pods: info.pods.len() as i64,
            pods_allocatable: info.node.allocatable.allowed_pods,
            measured_cpu_percent: info
                .load
                .as_ref()
                .map(|l| (l.sample.cpu * 100.0).round() as i64),
            measured_memory_percent: info
                .load
                .as_ref()
                .map(|l| (l.sample.memory * 100.0).round() as i64),
        })
        .collect()
}

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod plugin_tests;
#[cfg(test)]
mod tests {
    use super::*;
    use gantry_core::plugins;

    const CLUSTER: &str = r#"
apiVersion: v1
kind: Node
metadata:
  name: colo
  labels: {overcommit: "true"}
  annotations: {gantry.io/cpu-utilization: "0.25", gantry.io/memory-utilization: "0.5"}
status: {allocatable: {cpu: "1", memory: 1Gi, pods: "10"}}
---
apiVersion: v1
kind: Node
metadata:
  name: broken
  annotations: {gantry.io/cpu-utilization: "lots", gantry.io/memory-utilization: "0.5"}
spec: {unschedulable: true}
status: {allocatable: {cpu: "1", memory: 1Gi, pods: "10"}}
---
apiVersion: v1
kind: Pod
metadata: {name: online}
spec:
  nodeName: colo
  containers: [{name: a, resources: {requests: {cpu: "1"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: batch}
spec:
  containers: [{name: a}]
"#;

    #[test]
    fn hami_devices_show_in_the_table_and_the_json() {
        let config = Config::parse(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
             profiles:\n- plugins:\n    multiPoint:\n      enabled: [{name: GpuShare}]\n",
            &gantry_core::plugins::registry(),
        )
        .unwrap();
        let mut input = ClusterInput::default();
        input
            .add_yaml(
                r#"{apiVersion: v1, kind: Node, metadata: {name: n, annotations: {hami.io/node-nvidia-register: '[{"id":"GPU-x","count":4,"devmem":8192,"devcore":100,"type":"NVIDIA-T4","health":true}]'}}, status: {allocatable: {cpu: '4', pods: '9', nvidia.com/gpu: '4'}}}
---
{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: c, image: i, resources: {limits: {nvidia.com/gpu: '1', nvidia.com/gpumem: '2048', nvidia.com/gpucores: '25'}}}]}}
"#,
                "test",
            )
            .unwrap();
        let report = simulate(&input, config, None);
        assert_eq!(report.pods[0].node.as_deref(), Some("n"), "{report:?}");
        let table = report.to_table();
        assert!(table.contains("GPU devices (HAMi):"), "{table}");
        assert!(table.contains("GPU-x   2048"), "{table}");
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(
            json["pods"][0]["devices"],
            serde_json::json!([{"uuid": "GPU-x", "memoryMib": 2048, "cores": 25}])
        );
    }

    #[test]
    fn node_load_annotations_drive_the_plugins_and_show_in_the_report() {
        let mut input = ClusterInput::default();
        input.add_yaml(CLUSTER, "test").unwrap();
        let config = Config::parse(
            "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled: [{name: Overcommit}]
",
            &plugins::registry(),
        )
        .unwrap();
        let report = simulate(&input, config, None);
        assert_eq!(
            report.invalid,
            ["node broken: annotation gantry.io/cpu-utilization: \"lots\" is not a number"]
        );
        let batch = report.pods.iter().find(|p| p.name == "batch").unwrap();
        assert_eq!(batch.node.as_deref(), Some("colo"));
        assert_eq!(
            batch
                .annotations
                .get("gantry.io/overcommit")
                .map(String::as_str),
            Some("cpu: 1100m committed of 1000m allocatable (+100m, ratio 1.5, measured load 25%)")
        );
        let colo = &report.nodes[0];
        assert_eq!(
            (colo.measured_cpu_percent, colo.measured_memory_percent),
            (Some(25), Some(50))
        );
        assert_eq!(report.nodes[1].measured_cpu_percent, None);
        let json = report.to_json();
        assert!(json.contains("\"gantry.io/overcommit\""), "{json}");
        assert!(json.contains("\"measured_cpu_percent\": 25"), "{json}");
        let table = report.to_table();
        assert!(table.contains("MEASURED CPU/MEMORY"), "{table}");
        assert!(
            table.contains("gantry.io/overcommit=cpu: 1100m committed"),
            "{table}"
        );
    }

    /// A PreFilter plugin that rejects every pod a disruption budget covers, naming the
    /// budgets: the budgets the simulator loads are in the snapshot a plugin reads.
    struct Budgeted;

    impl gantry_core::framework::Plugin for Budgeted {
        fn name(&self) -> &'static str {
            "Budgeted"
        }

        fn as_pre_filter(&self) -> Option<&dyn gantry_core::framework::PreFilterPlugin> {
            Some(self)
        }

        fn cache_state(&self) -> &'static [gantry_core::cache::Tracked] {
            &[gantry_core::cache::Tracked::DisruptionBudgets]
        }
    }

    impl gantry_core::framework::PreFilterPlugin for Budgeted {
        fn pre_filter(
            &self,
            _: &mut gantry_core::framework::CycleState,
            pod: &PodInfo,
            snapshot: &gantry_core::cache::Snapshot,
        ) -> (
            gantry_core::framework::PreFilterResult,
            gantry_core::framework::Status,
        ) {
            let covering: Vec<String> = snapshot
                .disruption_budgets()
                .filter(|b| b.covers(pod))
                .map(|b| {
                    format!(
                        "{}/{} allows {}",
                        b.namespace, b.name, b.disruptions_allowed
                    )
                })
                .collect();
            let status = if covering.is_empty() {
                gantry_core::framework::Status::success()
            } else {
                gantry_core::framework::Status::unresolvable(covering.join(", "))
            };
            (Default::default(), status)
        }
    }

    #[test]
    fn disruption_budgets_are_loaded_into_the_snapshot_and_unreadable_ones_reported() {
        let mut registry = gantry_core::plugins::registry();
        registry.register(gantry_core::framework::PluginSpec {
            name: "Budgeted",
            factory: |_| Ok(std::sync::Arc::new(Budgeted)),
            default: None,
            args: None,
        });
        let config = Config::parse(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
             profiles:\n- plugins:\n    preFilter:\n      enabled: [{name: Budgeted}]\n",
            &registry,
        )
        .expect("a configuration with the budget plugin");
        let mut input = ClusterInput::default();
        input
            .add_yaml(
                r#"
{apiVersion: v1, kind: Node, metadata: {name: n}, status: {allocatable: {cpu: '1', pods: '9'}}}
---
{apiVersion: policy/v1beta1, kind: PodDisruptionBudget, metadata: {name: web}, spec: {selector: {matchLabels: {app: web}}}, status: {disruptionsAllowed: 1}}
---
{apiVersion: policy/v1, kind: PodDisruptionBudget, metadata: {name: all, namespace: default}, spec: {selector: {}}}
---
{apiVersion: policy/v1, kind: PodDisruptionBudget, metadata: {name: bad, namespace: shop}, spec: {selector: {matchExpressions: [{key: app, operator: Near}]}}}
---
{apiVersion: v1, kind: Pod, metadata: {name: web-0, labels: {app: web}}, spec: {containers: [{name: c, image: i}]}}
---
{apiVersion: v1, kind: Pod, metadata: {name: db-0, labels: {app: db}}, spec: {containers: [{name: c, image: i}]}}
"#,
                "test",
            )
            .expect("the cluster");
        let report = simulate(&input, config, None);
        assert_eq!(
            report.invalid,
            [
                "poddisruptionbudget shop/bad: spec.selector.matchExpressions[0]: unsupported operator \"Near\""
            ]
        );
        let outcome = |name: &str| report.pods.iter().find(|p| p.name == name).unwrap();
        let web = outcome("web-0");
        assert_eq!(web.node, None);
        assert!(
            web.message
                .as_deref()
                .unwrap_or_default()
                .contains("default/web allows 1"),
            "the budget's namespace defaults to default: {:?}",
            web.message
        );
        assert_eq!(
            outcome("db-0").node.as_deref(),
            Some("n"),
            "an empty selector covers no pod"
        );
    }

    /// A Filter plugin that fails with an error on every node.
    struct Broken;

    impl gantry_core::framework::Plugin for Broken {
        fn name(&self) -> &'static str {
            "Broken"
        }

        fn as_filter(&self) -> Option<&dyn gantry_core::framework::FilterPlugin> {
            Some(self)
        }
    }

    impl gantry_core::framework::FilterPlugin for Broken {
        fn filter(
            &self,
            _: &gantry_core::framework::CycleState,
            _: &PodInfo,
            _: &gantry_core::cache::NodeInfo,
        ) -> gantry_core::framework::Status {
            gantry_core::framework::Status::error("broken")
        }
    }

    #[test]
    fn a_pod_that_fails_with_an_error_is_not_tried_for_ever() {
        // Found by fuzz_sim_structured_clusters_fit (through PodTopologySpread's Score): the
        // virtual clock went from backoff to backoff without end.
        let mut registry = gantry_core::plugins::registry();
        registry.register(gantry_core::framework::PluginSpec {
            name: "Broken",
            factory: |_| Ok(std::sync::Arc::new(Broken)),
            default: None,
            args: None,
        });
        let config = Config::parse(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
             profiles:\n- plugins:\n    filter:\n      enabled: [{name: Broken}]\n",
            &registry,
        )
        .expect("a configuration with the broken plugin");
        let mut input = ClusterInput::default();
        input
            .add_yaml(
                "{apiVersion: v1, kind: Node, metadata: {name: n}, status: {allocatable: {cpu: '1', pods: '9'}}}\n---\n\
                 {apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: c, image: i}]}}\n",
                "test",
            )
            .expect("the cluster");
        let report = simulate(&input, config, None);
        let message = report.pods[0].message.as_deref().unwrap_or_default();
        assert!(
            message.starts_with("running plugin ") && message.contains("broken"),
            "{message}"
        );
    }
}

/// The crate's own tests count memory as the `gantry` binary does (what-if's budgets).
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: gantry_core::memory::CountingAllocator = gantry_core::memory::CountingAllocator;
