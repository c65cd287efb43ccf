//! Coscheduling: gang scheduling, all of a group or none of it, compatible with
//! scheduler-plugins' plugin of that name (its PodGroup resource, label, arguments, rules
//! and messages). A pod joins the group its `scheduling.x-k8s.io/pod-group` label names in
//! its namespace; the group's PodGroup says how many of its pods (`minMember`) must have a
//! place before any is bound.
//!
//! - QueueSort: priority, then the group's arrival (its pods in the active queue share the
//!   first one's, so they are taken together), then namespace/name.
//! - PreFilter rejects, before any node is tried (as unresolvable, so nothing is
//!   preempted for it), a pod whose group has fewer pods than `minMember` (gated ones do not
//!   count), or whose `minResources` the cluster cannot hold even if the group's own pods
//!   left, or whose group failed within `podGroupBackoffSeconds`.
//! - Permit holds each pod (its room reserved) until `minMember` of the group are placed,
//!   then lets them all be bound; a pod that waits longer than the group's
//!   `scheduleTimeoutSeconds` (else `permitWaitingTimeSeconds`) is rejected, and with it the
//!   rest of the group.
//! - PostFilter: a pod no node fits takes its waiting group with it, unless the group is
//!   complete without it or the gap is within `podGroupRejectPercentage`.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Deserialize;

use crate::cache::{NodeInfo, Snapshot, Tracked};
use crate::framework::{
    ArgsError, ClusterChange, ClusterEvent, Code, CycleState, EventHint, PermitPlugin, Plugin,
    PluginArgs, PluginSpec, PodsToActivate, PostFilterInput, PostFilterPlugin, PostFilterResult,
    PreFilterPlugin, PreFilterResult, QueueSortPlugin, QueueingHint, Status, WaitingPods,
    WaitingRejection, decode_args,
};
use crate::model::PodInfo;
use crate::model::pod_group::{POD_GROUP_LABEL, PodGroupModel, group_of};
use crate::model::resources::Resources;

/// The name used in configuration files.
pub const NAME: &str = "Coscheduling";

/// `CoschedulingArgs`, as scheduler-plugins spells them.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct CoschedulingArgs {
    /// How long a placed pod waits at Permit for the rest of its group, unless the group's
    /// `scheduleTimeoutSeconds` says otherwise (default 60).
    pub permit_waiting_time_seconds: i64,
    /// How long a group that failed is refused at PreFilter (default 0: not at all).
    pub pod_group_backoff_seconds: i64,
    /// A pod that fits nowhere does not reject its waiting group while the share of
    /// `minMember` not yet placed is at most this percentage (default 10).
    pub pod_group_reject_percentage: i32,
}

impl Default for CoschedulingArgs {
    fn default() -> Self {
        CoschedulingArgs {
            permit_waiting_time_seconds: 60,
            pod_group_backoff_seconds: 0,
            pod_group_reject_percentage: 10,
        }
    }
}

impl PluginArgs for CoschedulingArgs {
    const KIND: &'static str = "CoschedulingArgs";

    /// scheduler-plugins' rules: no negative times, a percentage from 0 to 100.
    fn validate(&self) -> Result<(), ArgsError> {
        if self.permit_waiting_time_seconds < 0 {
            return Err(ArgsError::new(
                "permitWaitingTimeSeconds",
                format!("{} must not be negative", self.permit_waiting_time_seconds),
            ));
        }
        if self.pod_group_backoff_seconds < 0 {
            return Err(ArgsError::new(
                "podGroupBackoffSeconds",
                format!("{} must not be negative", self.pod_group_backoff_seconds),
            ));
        }
        if !(0..=100).contains(&self.pod_group_reject_percentage) {
            return Err(ArgsError::new(
                "podGroupRejectPercentage",
                format!(
                    "{} must be between 0 and 100",
                    self.pod_group_reject_percentage
                ),
            ));
        }
        Ok(())
    }
}

/// Gang scheduling by PodGroup.
#[derive(Debug)]
pub struct Coscheduling {
    wait: Duration,
    backoff: Duration,
    reject_share: f64,
    /// Groups that failed, with the scheduler time until which PreFilter refuses them (only
    /// with `podGroupBackoffSeconds`).
    backed_off: Mutex<HashMap<(String, String), Duration>>,
}

impl Coscheduling {
    /// The plugin with `args` (validated).
    pub fn new(args: &CoschedulingArgs) -> Self {
        let secs = |s: i64| Duration::from_secs(u64::try_from(s).unwrap_or(0));
        Coscheduling {
            wait: secs(args.permit_waiting_time_seconds),
            backoff: secs(args.pod_group_backoff_seconds),
            reject_share: f64::from(args.pod_group_reject_percentage) / 100.0,
            backed_off: Mutex::new(HashMap::new()),
        }
    }

    /// The wait at Permit for a pod of `group`: the group's `scheduleTimeoutSeconds`, else
    /// the plugin's, else scheduler-plugins' default of 60 seconds.
    fn wait_for(&self, group: &PodGroupModel) -> Duration {
        group.schedule_timeout.unwrap_or(if self.wait.is_zero() {
            DEFAULT_WAIT
        } else {
            self.wait
        })
    }

    fn backed_off_until(&self, namespace: &str, group: &str) -> Option<Duration> {
        let map = self
            .backed_off
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        map.get(&(namespace.to_string(), group.to_string()))
            .copied()
    }
}

/// scheduler-plugins' `DefaultWaitTime`.
const DEFAULT_WAIT: Duration = Duration::from_secs(60);

/// What PreFilter found about the pod's group, for Permit.
#[derive(Debug, Clone)]
struct GroupCycle {
    group: Arc<PodGroupModel>,
    /// The group's pods placed when the cycle began (those waiting at Permit included).
    placed: usize,
    /// The group's other pods not placed yet, to activate when the first one waits.
    pending: Vec<String>,
}

impl Plugin for Coscheduling {
    fn name(&self) -> &'static str {
        NAME
    }

    fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        Some(self)
    }

    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }

    fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        Some(self)
    }

    fn as_permit(&self) -> Option<&dyn PermitPlugin> {
        Some(self)
    }

    fn events(&self) -> &'static [EventHint] {
        &EVENTS
    }

    fn cache_state(&self) -> &'static [Tracked] {
        &[Tracked::PodGroups]
    }
}

/// scheduler-plugins' registration: a pod added, a PodGroup added or changed; each only for
/// the pods of the group it concerns.
const EVENTS: [EventHint; 4] = [
    EventHint::when(ClusterEvent::PendingPodAdd, same_group),
    EventHint::when(ClusterEvent::PodAdd, same_group),
    EventHint::when(ClusterEvent::PodGroupAdd, same_group),
    EventHint::when(ClusterEvent::PodGroupUpdate, same_group),
];

/// Queues a pod again when the change concerns its own group.
fn same_group(change: &ClusterChange<'_>, pod: &PodInfo) -> QueueingHint {
    let Some(mine) = group_of(pod) else {
        return QueueingHint::Skip;
    };
    let same = match change {
        ClusterChange::PendingPodAdded(p) | ClusterChange::PodAdded(p) => {
            p.namespace == pod.namespace && group_of(p) == Some(mine)
        }
        ClusterChange::PodGroup { new, .. } => new.namespace == pod.namespace && new.name == mine,
        _ => true,
    };
    if same {
        QueueingHint::Queue
    } else {
        QueueingHint::Skip
    }
}

impl QueueSortPlugin for Coscheduling {
    /// scheduler-plugins' `Less`: priority, then arrival (a group's pods share theirs), then
    /// `namespace/name`.
    fn compare(&self, a: &PodInfo, a_seq: u64, b: &PodInfo, b_seq: u64) -> Ordering {
        b.priority
            .cmp(&a.priority)
            .then_with(|| a_seq.cmp(&b_seq))
            .then_with(|| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)))
    }

    fn group_label(&self) -> Option<&'static str> {
        Some(POD_GROUP_LABEL)
    }
}

impl PreFilterPlugin for Coscheduling {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let ok = (PreFilterResult::default(), Status::success());
        let Some(name) = group_of(pod) else {
            return ok;
        };
        let groups = snapshot.pod_groups();
        // A PodGroup that does not exist is Permit's to refuse, as in scheduler-plugins; one
        // that exists but cannot be read is refused here, saying why.
        let Some(group) = groups.group(&pod.namespace, name) else {
            return match groups.unreadable(&pod.namespace, name) {
                Some(error) => (
                    PreFilterResult::default(),
                    Status::unresolvable(format!(
                        "PodGroup {}/{name} cannot be read: {error}",
                        pod.namespace
                    )),
                ),
                None => ok,
            };
        };
        let full = group.full_name();
        let refuse = |reason: String| (PreFilterResult::default(), Status::unresolvable(reason));
        if self
            .backed_off_until(&pod.namespace, name)
            .is_some_and(|until| snapshot.now() < until)
        {
            return refuse(format!("podGroup {full} failed recently"));
        }
        let members = groups.members(&pod.namespace, name);
        let min = group.min_member as usize;
        if members.len() < min {
            return refuse(format!(
                "pre-filter pod {} cannot find enough sibling pods, current pods number: {}, minMember of group: {}",
                pod.name,
                members.len(),
                group.min_member
            ));
        }
        if members.len() - members.gated() < min {
            return refuse(format!(
                "pre-filter pod {} cannot proceed due to gated pods in the same PodGroup",
                pod.name
            ));
        }
        if let Some(needed) = &group.min_resources
            && let Some(gap) = resource_gap(snapshot, needed, &pod.namespace, name)
        {
            return refuse(format!("resource gap: {gap}"));
        }
        state.insert(GroupCycle {
            group: group.clone(),
            placed: members.placed(),
            pending: members
                .pending()
                .filter(|n| *n != pod.name)
                .map(str::to_string)
                .collect(),
        });
        ok
    }
}

/// What the cluster lacks for `needed` (scheduler-plugins' `CheckClusterResource`): the
/// nodes' free amounts, counting the group's own pods as free, taken in node order until
/// every resource is covered; none when it is.
fn resource_gap(
    snapshot: &Snapshot,
    needed: &Resources,
    namespace: &str,
    group: &str,
) -> Option<String> {
    let mut left = needed.clone();
    let covered = |r: &Resources| {
        r.milli_cpu <= 0
            && r.memory <= 0
            && r.ephemeral_storage <= 0
            && r.allowed_pods <= 0
            && r.scalar.iter().all(|(_, v)| *v <= 0)
    };
    for node in snapshot.nodes() {
        if covered(&left) {
            return None;
        }
        left.sub(&free(node, namespace, group));
    }
    if covered(&left) {
        return None;
    }
    let mut parts = Vec::new();
    for (name, amount) in [
        ("cpu", left.milli_cpu),
        ("memory", left.memory),
        ("ephemeral-storage", left.ephemeral_storage),
        ("pods", left.allowed_pods),
    ] {
        if amount > 0 {
            parts.push(if name == "cpu" {
                format!("cpu {amount}m")
            } else {
                format!("{name} {amount}")
            });
        }
    }
    parts.extend(
        left.scalar
            .iter()
            .filter(|(_, v)| *v > 0)
            .map(|(n, v)| format!("{n} {v}")),
    );
    Some(parts.join(", "))
}

/// What `node` has free, counting the pods of `namespace/group` on it as gone.
fn free(node: &NodeInfo, namespace: &str, group: &str) -> Resources {
    let mut requested = node.requested.clone();
    let mut pods = node.pods.len();
    for p in &node.pods {
        if p.namespace == namespace && group_of(p) == Some(group) {
            requested.sub(&p.requests);
            pods -= 1;
        }
    }
    let mut free = node.node.allocatable.clone();
    free.sub(&requested);
    free.allowed_pods = node.node.allocatable.allowed_pods - i64::try_from(pods).unwrap_or(0);
    free
}

impl PermitPlugin for Coscheduling {
    fn permit(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _node: &str,
        waiting: &mut WaitingPods,
    ) -> (Status, Duration) {
        let Some(name) = group_of(pod) else {
            return (Status::success(), Duration::ZERO);
        };
        let Some(cycle) = state.get::<GroupCycle>().cloned() else {
            return (Status::unschedulable("PodGroup not found"), Duration::ZERO);
        };
        // The pod itself is not in the cycle's snapshot.
        let placed = cycle.placed + 1;
        if placed >= cycle.group.min_member as usize {
            let members: Vec<String> = siblings(waiting, &pod.namespace, name)
                .map(|w| w.pod.name.clone())
                .collect();
            for m in members {
                waiting.allow(&pod.namespace, &m, NAME);
            }
            return (Status::success(), Duration::ZERO);
        }
        // The first of the group to wait brings the others back from backoff or the
        // unschedulable pods (scheduler-plugins' ActivateSiblings).
        if cycle.placed == 0 && !cycle.pending.is_empty() {
            let pods = cycle
                .pending
                .iter()
                .map(|n| (pod.namespace.clone(), n.clone()))
                .collect();
            state.insert(PodsToActivate(pods));
        }
        (
            Status::with_reasons(Code::Wait, Vec::new()),
            self.wait_for(&cycle.group),
        )
    }

    /// The group goes with a pod of it that will not be bound (scheduler-plugins'
    /// Unreserve).
    fn unreserved(&self, pod: &PodInfo, waiting: &mut WaitingPods) {
        let Some(name) = group_of(pod) else {
            return;
        };
        reject_group(waiting, pod, name, "rejection in Unreserve");
    }

    fn pod_group_gone(&self, namespace: &str, name: &str, waiting: &mut WaitingPods) {
        let members: Vec<String> = siblings(waiting, namespace, name)
            .map(|w| w.pod.name.clone())
            .collect();
        let message = format!("PodGroup {namespace}/{name} is gone");
        for m in members {
            waiting.reject(namespace, &m, NAME, &message);
        }
    }
}

/// The waiting pods of group `namespace/name`.
fn siblings<'a>(
    waiting: &'a WaitingPods,
    namespace: &'a str,
    name: &'a str,
) -> impl Iterator<Item = &'a crate::framework::WaitingPod> {
    waiting
        .iter()
        .filter(move |w| w.pod.namespace == namespace && group_of(&w.pod) == Some(name))
}

fn reject_group(waiting: &mut WaitingPods, pod: &PodInfo, name: &str, message: &str) {
    let members: Vec<String> = siblings(waiting, &pod.namespace, name)
        .filter(|w| w.pod.name != pod.name)
        .map(|w| w.pod.name.clone())
        .collect();
    for m in members {
        waiting.reject(&pod.namespace, &m, NAME, message);
    }
}

impl PostFilterPlugin for Coscheduling {
    fn post_filter(
        &self,
        _state: &CycleState,
        pod: &PodInfo,
        input: &PostFilterInput<'_>,
    ) -> (PostFilterResult, Status) {
        let quiet = || {
            (
                PostFilterResult::default(),
                Status::with_reasons(Code::Unschedulable, Vec::new()),
            )
        };
        let Some(name) = group_of(pod) else {
            return quiet();
        };
        let groups = input.snapshot.pod_groups();
        let Some(group) = groups.group(&pod.namespace, name) else {
            return (
                PostFilterResult::default(),
                Status::unschedulable("can not find pod group"),
            );
        };
        let members = groups.members(&pod.namespace, name);
        let placed = members.placed();
        let min = group.min_member as usize;
        // Complete without this pod, or close enough to try the next ones.
        if placed >= min || ((min - placed) as f64 / min as f64) <= self.reject_share {
            return quiet();
        }
        let reject_waiting = siblings(input.waiting, &pod.namespace, name)
            .map(|w| WaitingRejection {
                namespace: w.pod.namespace.clone(),
                name: w.pod.name.clone(),
                plugin: NAME,
                message: "optimistic rejection in PostFilter".to_string(),
            })
            .collect();
        if !self.backoff.is_zero() && members.len() >= min {
            let mut map = self
                .backed_off
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            map.insert(
                (pod.namespace.clone(), name.to_string()),
                input.snapshot.now() + self.backoff,
            );
        }
        (
            PostFilterResult {
                reject_waiting,
                group_failed: true,
                ..PostFilterResult::default()
            },
            Status::unschedulable(format!(
                "PodGroup {} gets rejected due to Pod {} is unschedulable even after PostFilter",
                group.full_name(),
                pod.name
            )),
        )
    }
}

/// The plugin for the registry; not in kube-scheduler's default profile (a profile that
/// enables it disables PrioritySort, as scheduler-plugins' does).
pub const SPEC: PluginSpec = PluginSpec {
    name: NAME,
    factory,
    default: None,
    args: Some(crate::framework::resolved_args::<CoschedulingArgs>),
};

/// Builds the plugin from its `CoschedulingArgs`.
pub fn factory(args: Option<&serde_json::Value>) -> Result<Arc<dyn Plugin>, ArgsError> {
    let args: CoschedulingArgs = decode_args(args)?;
    Ok(Arc::new(Coscheduling::new(&args)))
}

#[cfg(test)]
mod tests;
