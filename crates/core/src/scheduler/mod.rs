//! The scheduler: cache, queue and profiles around the cycle. Both front ends drive this one
//! type: they feed it cluster changes and the current time, take attempts from it, carry out
//! the bindings it plans, and report how each binding went.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::cache::{Cache, CacheError, GroupProgress, Snapshot, TrackedSet};
use crate::config::Config;
use crate::cycle::{
    self, CycleError, CycleMemory, CycleOptions, Diagnosis, Filtered, NodeScores, Placement,
    RejectionCount,
};
use crate::extender::Extenders;
use crate::extender::combine::{Exchange, Verdict as ExtenderVerdict};
use crate::extender::preempt::PreemptRound;
use crate::framework::{
    BindPlan, ClusterChange, ClusterEvent, CycleState, NominatedPods, Nomination,
    PendingCandidates, PodsToActivate, PostFilterResult, PreemptionCandidate, Profile,
    ReservedAnnotations, ReservedVolumes, Status, Verdict, WaitingPods,
};
use crate::model::disruption_budget::DisruptionBudgetModel;
use crate::model::load::LoadSample;
use crate::model::pod_group::PodGroupModel;
use crate::model::volume::{
    ClaimModel, CsiDriverModel, CsiNodeModel, StorageCapacityModel, StorageClassModel, VolumeModel,
};
use crate::model::{NodeModel, PodInfo, PodKey};
use crate::plugins::gpu_share::hami::LOCK_AVOIDANCE;
use crate::queue::{self, QueueName, QueuedPod, SchedulingQueue};
use crate::suggest::{self, Suggestion};

mod binding;
mod extenders;
mod input;
mod preemption;
mod views;

use crate::framework::runners::{
    run_bind, run_permit, run_post_bind, run_pre_bind, run_pre_enqueue, run_reserve,
    run_unreserved, unreserve,
};
pub use binding::BindTask;
use binding::{bind_task, plan};
use extenders::Asking;
pub use extenders::{ExtenderAnswer, ExtenderAsk, ExtenderReply, ExtenderRequest};
use preemption::Preempting;
pub use views::{ClusterView, Views};

/// How many of the best nodes each attempt reports with their scores.
pub const TOP_SCORES: usize = 5;

/// How the cycle went, for the decision log and metrics.
#[derive(Debug, Clone, Default)]
pub struct CycleSummary {
    /// Nodes in the cluster.
    pub nodes: usize,
    /// Nodes examined by filters.
    pub evaluated: usize,
    /// Nodes that passed.
    pub feasible: usize,
    /// Score plugin names, in the order of each [`NodeScores::weighted`].
    pub score_plugins: Vec<&'static str>,
    /// Scores of the best feasible nodes, best first (at most [`TOP_SCORES`]).
    pub scores: Vec<NodeScores>,
    /// The examined nodes filters rejected, per plugin and reason.
    pub rejections: Vec<RejectionCount>,
}

/// The outcome of one [`Scheduler::schedule_next`].
#[derive(Debug)]
pub enum Attempt {
    /// A node was chosen and the pod is assumed there; the caller binds it.
    Scheduled(Box<BindTask>, CycleSummary),
    /// No node fits; the pod waits for a cluster change.
    Unschedulable {
        /// The pod.
        pod: Arc<PodInfo>,
        /// Its attempt number (1 for the first).
        attempt: u32,
        /// Why, per node.
        diagnosis: Diagnosis,
        /// kube-scheduler's message for it.
        message: String,
        /// Single changes that would let it fit (see [`suggest::suggest`]); computed only
        /// when [`Scheduler::set_explain`] asked for them.
        suggestions: Vec<Suggestion>,
    },
    /// A Permit plugin holds the pod: it is assumed on `node` (the room is its) and waits
    /// to be allowed, rejected or timed out; a later [`Scheduler::schedule_next`] reports
    /// which, as [`Attempt::Permitted`] or [`Attempt::Rejected`].
    Waiting {
        /// The pod, as assumed on the node.
        pod: Arc<PodInfo>,
        /// Its attempt number (1 for the first).
        attempt: u32,
        /// The node it holds room on.
        node: Arc<str>,
        /// The plugins that asked it to wait.
        plugins: Vec<&'static str>,
        /// For a pod of a PodGroup, how far its group has got.
        group: Option<GroupProgress>,
        /// How the cycle went.
        summary: CycleSummary,
    },
    /// A pod that waited at Permit was allowed: the caller binds it.
    Permitted {
        /// The binding to carry out.
        task: Box<BindTask>,
        /// How long it waited.
        waited: Duration,
    },
    /// A pod that waited at Permit was rejected, or its wait ran out: its room is given
    /// back and it retries after backoff.
    Rejected {
        /// The pod (as queued, without a node).
        pod: Arc<PodInfo>,
        /// Its attempt number (1 for the first).
        attempt: u32,
        /// The node it held room on.
        node: Arc<str>,
        /// The rejection (Unschedulable, naming the plugin).
        status: Status,
        /// How long it waited.
        waited: Duration,
        /// For a pod of a PodGroup, how far its group has got, once it is released.
        group: Option<GroupProgress>,
    },
    /// Extenders filter or score the pod: its cycle stopped after the Filter plugins,
    /// and resumes once the front end hands their answer to
    /// [`Scheduler::extenders_answered`]; a later [`Scheduler::schedule_next`] reports how
    /// it ends.
    Extending(Box<ExtenderRequest>),
    /// Something failed (a plugin error); the pod retries after backoff.
    Failed {
        /// The pod.
        pod: Arc<PodInfo>,
        /// Its attempt number (1 for the first).
        attempt: u32,
        /// What failed.
        status: Status,
    },
}

/// The scheduling core with its state.
pub struct Scheduler {
    config: Config,
    /// The configuration's profiles, shared: a scheduling cycle holds its profile while it
    /// changes the scheduler.
    profiles: Vec<Arc<Profile>>,
    cache: Cache,
    queue: SchedulingQueue,
    snapshot: Snapshot,
    memory: CycleMemory,
    pool: Option<Arc<rayon::ThreadPool>>,
    explain: bool,
    /// Pending pods a preemption made room for, by node.
    nominated: NominatedPods,
    /// Pods held at Permit, as plugins see them.
    waiting: WaitingPods,
    /// What each pod held at Permit needs to be bound or given back.
    held: HashMap<(String, String), Held>,
    /// Pods waiting for their extenders' answers.
    asking: HashMap<(String, String), Asking>,
    /// Answers not acted on yet.
    answers: std::collections::VecDeque<ExtenderAnswer>,
    /// Nodes avoided for their HAMi lock, until when.
    lock_avoided: BTreeMap<Arc<str>, Duration>,
    /// The preemptions the front end carries out, by their preemptor's key.
    preempting: HashMap<String, Preempting>,
}

/// A pod held at Permit: its queue entry and cycle state, kept until a verdict.
struct Held {
    queued: QueuedPod,
    state: CycleState,
    profile: Arc<Profile>,
    /// The annotations its Reserve plugins set, for its binding.
    reserved: Vec<(String, String)>,
}

impl Scheduler {
    /// A scheduler for `config`; filtering and scoring of large clusters use `pool`.
    pub fn new(config: Config, pool: Option<Arc<rayon::ThreadPool>>) -> Self {
        let events = queue::plugin_events(config.profiles.iter().flat_map(|p| p.plugins()));
        let queue = SchedulingQueue::new(
            config.profiles[0].queue_sort.clone(),
            events,
            config.pod_initial_backoff,
            config.pod_max_backoff,
        );
        let tracked = config
            .profiles
            .iter()
            .flat_map(|p| p.plugins())
            .map(|p| TrackedSet::of(p.cache_state()))
            .collect();
        let profiles = config.profiles.iter().cloned().map(Arc::new).collect();
        Scheduler {
            config,
            profiles,
            cache: Cache::tracking(tracked),
            queue,
            snapshot: Snapshot::default(),
            memory: CycleMemory::default(),
            pool,
            explain: false,
            nominated: NominatedPods::default(),
            waiting: WaitingPods::default(),
            held: HashMap::new(),
            asking: HashMap::new(),
            answers: std::collections::VecDeque::new(),
            lock_avoided: BTreeMap::new(),
            preempting: HashMap::new(),
        }
    }

    /// With `true`, unschedulable attempts come with the single changes that would let the
    /// pod fit (for the decision log); this re-runs some filters, so it is off by default.
    pub fn set_explain(&mut self, explain: bool) {
        self.explain = explain;
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The cluster state (read-only; change it through the methods below so the queue
    /// hears of every change).
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// Direct access for changes that do not affect the queue (namespaces, workloads).
    pub fn cache_mut(&mut self) -> &mut Cache {
        &mut self.cache
    }

    /// The queue.
    pub fn queue(&self) -> &SchedulingQueue {
        &self.queue
    }

    /// The pending pods nominated to nodes.
    pub fn nominated(&self) -> &NominatedPods {
        &self.nominated
    }

    /// The pods held at Permit.
    pub fn waiting_pods(&self) -> &WaitingPods {
        &self.waiting
    }

    /// The profile serving `scheduler_name` (cloned, it can be held across changes to the
    /// scheduler).
    fn profile(&self, scheduler_name: &str) -> Option<&Arc<Profile>> {
        self.profiles
            .iter()
            .find(|p| p.scheduler_name == scheduler_name)
    }

    /// True when some profile serves the pod's scheduler name.
    pub fn is_responsible_for(&self, pod: &PodInfo) -> bool {
        self.profile(&pod.scheduler_name).is_some()
    }

    /// Schedules the next pod in the queue, if one is due. A verdict reached on a pod held
    /// at Permit (or its wait running out by `now`) is reported first.
    pub fn schedule_next(&mut self, now: Duration) -> Option<Attempt> {
        self.waiting.expire(now);
        self.end_lock_avoidance(now);
        if let Some(attempt) = self.carry_out_verdict(now) {
            return Some(attempt);
        }
        if let Some(attempt) = self.resume_answered(now) {
            return Some(attempt);
        }
        let queued = self.queue.pop(now)?;
        let Some(profile) = self.profile(&queued.pod.scheduler_name).cloned() else {
            self.queue.done(&queued.pod.namespace, &queued.pod.name);
            return None;
        };
        self.cache.update_snapshot(&mut self.snapshot);
        self.snapshot.set_now(now);
        let preemption_running = self.preemption_running(&queued.pod);
        let options = cycle_options(
            &self.config,
            &self.pool,
            &self.nominated,
            &self.waiting,
            &queued.pod,
            preemption_running,
        );
        if self.config.extenders.asked_to_place(&queued.pod) {
            let filtered = cycle::filter_for_extenders(
                &profile,
                &self.snapshot,
                &queued.pod,
                &mut self.memory,
                &options,
            );
            return Some(match filtered {
                Ok(filtered) => self.ask_extenders(profile, queued, filtered),
                Err(e) => self.conclude(&profile, queued, Err(e), now),
            });
        }
        let result = cycle::schedule_one(
            &profile,
            &self.snapshot,
            &queued.pod,
            &mut self.memory,
            &options,
        );
        Some(self.conclude(&profile, queued, result, now))
    }

    /// The end of an attempt whose cycle gave `result`: the pod reserved and its binding
    /// planned, or requeued.
    fn conclude(
        &mut self,
        profile: &Arc<Profile>,
        queued: QueuedPod,
        result: Result<Placement, CycleError>,
        now: Duration,
    ) -> Attempt {
        match result {
            Ok(placement) => {
                let summary = CycleSummary {
                    nodes: self.snapshot.len(),
                    evaluated: placement.evaluated,
                    feasible: placement.feasible,
                    score_plugins: placement.score_plugins,
                    scores: placement.scores,
                    rejections: placement.rejections,
                };
                self.reserve_and_plan(
                    profile,
                    queued,
                    placement.node,
                    placement.state,
                    summary,
                    now,
                )
            }
            Err(CycleError::Unschedulable(mut diagnosis)) => {
                if let Some(pending) = diagnosis.post_filter.candidates.take() {
                    return self.ask_preempt_extenders(
                        profile.clone(),
                        queued,
                        Box::new(diagnosis),
                        *pending,
                    );
                }
                self.release_waiting_victims(&mut diagnosis.post_filter);
                self.apply_nomination(&queued.pod, &diagnosis.post_filter);
                for r in &diagnosis.post_filter.reject_waiting {
                    self.waiting
                        .reject(&r.namespace, &r.name, r.plugin, &r.message);
                }
                if diagnosis.post_filter.group_failed {
                    self.queue.demote_group_of(&queued.pod, now);
                }
                diagnosis.group = self.group_progress(&queued.pod).map(Box::new);
                let message = diagnosis.message();
                let suggestions = if self.explain {
                    suggest::suggest(profile, &self.snapshot, &queued.pod, &diagnosis)
                } else {
                    Vec::new()
                };
                let (pod, attempt) = (queued.pod.clone(), queued.attempts);
                self.queue.requeue_unschedulable(
                    queued,
                    diagnosis.unschedulable_plugins.clone(),
                    now,
                );
                Attempt::Unschedulable {
                    pod,
                    attempt,
                    diagnosis,
                    message,
                    suggestions,
                }
            }
            Err(CycleError::Error(status)) => {
                let (pod, attempt) = (queued.pod.clone(), queued.attempts);
                self.queue.requeue_backoff(queued, now);
                Attempt::Failed {
                    pod,
                    attempt,
                    status,
                }
            }
        }
    }

    /// After the cycle chose `node`: Reserve ([`run_reserve`]), assume the pod in the cache,
    /// Permit ([`run_permit`]), and unless a Permit plugin holds the pod, the binding
    /// ([`Scheduler::plan`]). A step that fails undoes the ones before it and requeues the
    /// pod: parked if a plugin rejected it, backing off after an error.
    fn reserve_and_plan(
        &mut self,
        profile: &Arc<Profile>,
        queued: QueuedPod,
        node: Arc<str>,
        mut state: CycleState,
        summary: CycleSummary,
        now: Duration,
    ) -> Attempt {
        let mut assumed = (*queued.pod).clone();
        assumed.node_name = Some(node.clone());
        let Some(node_info) = self.snapshot.get(&node) else {
            let status = Status::error(format!("node {node} is not in the snapshot"));
            return self.failed(queued, status, now);
        };
        if let Err(status) = run_reserve(profile, &mut state, &assumed, node_info) {
            run_unreserved(profile, &assumed, &mut self.waiting);
            return self.failed(queued, status, now);
        }
        let reserved = state
            .get::<ReservedAnnotations>()
            .map(|r| r.0.clone())
            .unwrap_or_default();
        if !reserved.is_empty() {
            assumed.set_annotations(reserved.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        }
        let assumed = Arc::new(assumed);
        if let Err(e) = self.cache.assume_pod(assumed.clone()) {
            unreserve(profile, &mut state, &assumed, &node, profile.reserve.len());
            run_unreserved(profile, &assumed, &mut self.waiting);
            return self.failed(queued, Status::error(e.to_string()), now);
        }
        if let Some(ReservedVolumes(decisions)) = state.get::<ReservedVolumes>()
            && let Err(e) = self.cache.assume_volumes(decisions)
        {
            self.forget(profile, &mut state, &assumed, &node);
            return self.failed(queued, Status::error(e), now);
        }
        self.cache.note_placement(&assumed, now);
        self.nominated.remove(&assumed.namespace, &assumed.name);
        let permitted = run_permit(profile, &mut state, &assumed, &node, &mut self.waiting);
        if let Some(PodsToActivate(pods)) = state.remove::<PodsToActivate>() {
            for (namespace, name) in pods {
                self.queue.activate(&namespace, &name, now);
            }
        }
        let waits = match permitted {
            Ok(waits) => waits,
            Err(status) => {
                self.forget(profile, &mut state, &assumed, &node);
                return self.failed(queued, status, now);
            }
        };
        if !waits.is_empty() {
            self.waiting
                .hold(assumed.clone(), node.clone(), &waits, now);
            let attempt = queued.attempts;
            self.held.insert(
                (assumed.namespace.clone(), assumed.name.clone()),
                Held {
                    queued,
                    state,
                    profile: profile.clone(),
                    reserved,
                },
            );
            let group = self.group_progress(&assumed);
            return Attempt::Waiting {
                pod: assumed,
                attempt,
                node,
                plugins: waits.into_iter().map(|(p, _)| p).collect(),
                group,
                summary,
            };
        }
        match plan(profile, &assumed, &node, &state, reserved) {
            Ok(plan) => Attempt::Scheduled(
                Box::new(bind_task(
                    profile,
                    queued,
                    assumed,
                    plan,
                    state,
                    &self.config.extenders,
                )),
                summary,
            ),
            Err(status) => {
                self.forget(profile, &mut state, &assumed, &node);
                self.failed(queued, status, now)
            }
        }
    }

    /// A step after the cycle failed: the pod is requeued, parked if a plugin rejected it,
    /// backing off after an error.
    fn failed(&mut self, queued: QueuedPod, status: Status, now: Duration) -> Attempt {
        let (pod, attempt) = (queued.pod.clone(), queued.attempts);
        if status.is_rejected() {
            let plugins: BTreeSet<&'static str> = status.plugin().into_iter().collect();
            self.queue.requeue_unschedulable(queued, plugins, now);
            let message = status.message();
            Attempt::Unschedulable {
                pod,
                attempt,
                diagnosis: Diagnosis::default(),
                message,
                suggestions: Vec::new(),
            }
        } else {
            self.queue.requeue_backoff(queued, now);
            Attempt::Failed {
                pod,
                attempt,
                status,
            }
        }
    }

    /// Carries out the next verdict reached on a pod held at Permit, if any: an allowed pod's
    /// binding is planned; a rejected pod's room is given back (waking the pods it may
    /// help) and it backs off.
    fn carry_out_verdict(&mut self, now: Duration) -> Option<Attempt> {
        while let Some((waiting, verdict)) = self.waiting.take_decided() {
            let key = (waiting.pod.namespace.clone(), waiting.pod.name.clone());
            let Some(Held {
                queued,
                mut state,
                profile,
                reserved,
            }) = self.held.remove(&key)
            else {
                continue;
            };
            let waited = now.saturating_sub(waiting.since);
            let (assumed, node) = (waiting.pod, waiting.node);
            return Some(match verdict {
                Verdict::Allowed => match plan(&profile, &assumed, &node, &state, reserved) {
                    Ok(plan) => Attempt::Permitted {
                        task: Box::new(bind_task(
                            &profile,
                            queued,
                            assumed,
                            plan,
                            state,
                            &self.config.extenders,
                        )),
                        waited,
                    },
                    Err(status) => {
                        self.forget(&profile, &mut state, &assumed, &node);
                        self.failed(queued, status, now)
                    }
                },
                Verdict::Rejected(status) => {
                    self.forget(&profile, &mut state, &assumed, &node);
                    self.queue.demote_group_of(&assumed, now);
                    self.queue
                        .on_event(&ClusterChange::PodRemoved(&assumed), now);
                    let (pod, attempt) = (queued.pod.clone(), queued.attempts);
                    self.queue.requeue_backoff(queued, now);
                    let group = self.group_progress(&pod);
                    Attempt::Rejected {
                        pod,
                        attempt,
                        node,
                        status,
                        waited,
                        group,
                    }
                }
            });
        }
        None
    }

    /// The pod held at Permit is gone or bound by someone else: what it reserved is undone,
    /// without a verdict or a retry (the caller updates the cache and the queue).
    fn release_held(&mut self, namespace: &str, name: &str) {
        let Some(waiting) = self.waiting.remove(namespace, name) else {
            return;
        };
        if let Some(mut held) = self.held.remove(&(namespace.to_string(), name.to_string())) {
            let profile = held.profile.clone();
            self.forget(&profile, &mut held.state, &waiting.pod, &waiting.node);
        }
    }

    /// How far `pod`'s PodGroup has got, if it names one that exists.
    fn group_progress(&self, pod: &PodInfo) -> Option<GroupProgress> {
        let name = crate::model::pod_group::group_of(pod)?;
        let groups = self.cache.pod_groups();
        let group = groups.group(&pod.namespace, name)?;
        let members = groups.members(&pod.namespace, name);
        let waiting = self
            .waiting
            .iter()
            .filter(|w| {
                w.pod.namespace == pod.namespace
                    && crate::model::pod_group::group_of(&w.pod) == Some(name)
            })
            .count();
        Some(GroupProgress {
            group: group.full_name(),
            min_member: group.min_member,
            pods: members.len(),
            placed: members.placed(),
            waiting,
        })
    }

    fn forget(
        &mut self,
        profile: &Profile,
        state: &mut CycleState,
        pod: &Arc<PodInfo>,
        node: &str,
    ) {
        if let Some(ReservedVolumes(decisions)) = state.get::<ReservedVolumes>() {
            self.cache.forget_volumes(decisions);
        }
        unreserve(profile, state, pod, node, profile.reserve.len());
        run_unreserved(profile, pod, &mut self.waiting);
        // The pod was assumed before; forgetting it cannot fail.
        let _ = self.cache.forget_pod(&pod.namespace, &pod.name);
    }

    /// How many pods entered each sub-queue, by event, since the last call (for metrics).
    pub fn take_queue_incoming(&mut self) -> Vec<(QueueName, &'static str, u64)> {
        self.queue.take_incoming()
    }

    /// Pods currently waiting (backoff or unschedulable), with their sub-queue.
    pub fn waiting(&self) -> impl Iterator<Item = (&QueuedPod, QueueName)> {
        self.queue.waiting()
    }

    /// When the earliest backoff ends, if any pod is backing off.
    pub fn next_backoff_expiry(&self) -> Option<Duration> {
        self.queue.next_backoff_expiry()
    }

    /// When the queue next has a pod due, or a wait at Permit runs out, if any is waiting
    /// on time.
    pub fn next_wakeup(&self) -> Option<Duration> {
        let avoided = self.lock_avoided.values().min().copied();
        [
            self.queue.next_wakeup(),
            self.waiting.next_deadline(),
            avoided,
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

/// What a cycle needs from the scheduler's state.
fn cycle_options<'a>(
    config: &'a Config,
    pool: &'a Option<Arc<rayon::ThreadPool>>,
    nominated: &'a NominatedPods,
    waiting: &'a WaitingPods,
    pod: &PodInfo,
    preemption_running: bool,
) -> CycleOptions<'a> {
    CycleOptions {
        pool: pool.as_deref(),
        percentage_of_nodes_to_score: config.percentage_of_nodes_to_score,
        top_scores: TOP_SCORES,
        // None while nothing is nominated: the cycle then skips the nominated-pods pass.
        nominated: (!nominated.is_empty()).then_some(nominated),
        waiting: Some(waiting),
        preempt_extenders: config.extenders.asked_to_preempt(pod),
        preemption_running,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::plugins;
    use crate::testing::{node, pod};

    fn scheduler() -> Scheduler {
        let config = Config::default_with(&plugins::registry()).expect("defaults");
        Scheduler::new(config, None)
    }

    fn schedule(s: &mut Scheduler, now: Duration) -> Box<BindTask> {
        match s.schedule_next(now) {
            Some(Attempt::Scheduled(task, _)) => task,
            other => panic!("expected a placement, got {other:?}"),
        }
    }

    /// Counts the pods it hears were bound.
    #[derive(Default)]
    struct CountBound(std::sync::Mutex<Vec<String>>);

    impl crate::framework::Plugin for CountBound {
        fn name(&self) -> &'static str {
            "CountBound"
        }
        fn as_post_bind(&self) -> Option<&dyn crate::framework::PostBindPlugin> {
            Some(self)
        }
    }

    impl crate::framework::PostBindPlugin for CountBound {
        fn post_bind(&self, pod: &PodInfo, node: &str) {
            let mut seen = self.0.lock().unwrap();
            seen.push(format!("{}@{node}", pod.name));
        }
    }

    /// Holds the pods labelled `group` until `size` of them have a place, then lets them
    /// all go; when one of them will not be bound, rejects the others (a small gang).
    struct Gang {
        size: usize,
        wait: Duration,
    }

    impl crate::framework::Plugin for Gang {
        fn name(&self) -> &'static str {
            "Gang"
        }
        fn as_permit(&self) -> Option<&dyn crate::framework::PermitPlugin> {
            Some(self)
        }
    }

    impl crate::framework::PermitPlugin for Gang {
        fn permit(
            &self,
            _: &mut CycleState,
            pod: &PodInfo,
            _: &str,
            waiting: &mut WaitingPods,
        ) -> (Status, Duration) {
            if pod.labels.get("group").is_none() {
                return (Status::success(), Duration::ZERO);
            }
            let members: Vec<String> = waiting.iter().map(|w| w.pod.name.clone()).collect();
            if members.len() + 1 < self.size {
                return (Status::new(Code::Wait, "waiting for the group"), self.wait);
            }
            for m in members {
                waiting.allow("default", &m, "Gang");
            }
            (Status::success(), Duration::ZERO)
        }

        fn unreserved(&self, pod: &PodInfo, waiting: &mut WaitingPods) {
            if pod.labels.get("group").is_none() {
                return;
            }
            let members: Vec<String> = waiting.iter().map(|w| w.pod.name.clone()).collect();
            for m in members {
                waiting.reject("default", &m, "Gang", "a member will not be bound");
            }
        }
    }

    fn gang_scheduler(size: usize) -> Scheduler {
        let mut config = Config::default_with(&plugins::registry()).expect("defaults");
        config.profiles[0].permit.push(Arc::new(Gang {
            size,
            wait: Duration::from_secs(10),
        }));
        let mut s = Scheduler::new(config, None);
        s.upsert_node(node("n1").capacity("2", "2Gi").build(), Duration::ZERO);
        s
    }

    fn member(name: &str) -> Arc<PodInfo> {
        pod(name).req("cpu", "1").label("group", "g").build()
    }

    fn waits(s: &mut Scheduler, now: Duration) -> Arc<PodInfo> {
        match s.schedule_next(now) {
            Some(Attempt::Waiting {
                pod, node, plugins, ..
            }) => {
                assert_eq!((&*node, plugins.as_slice()), ("n1", ["Gang"].as_slice()));
                pod
            }
            other => panic!("expected a wait at Permit, got {other:?}"),
        }
    }

    #[test]
    fn a_pod_waiting_at_permit_keeps_its_room_until_its_group_lets_it_go() {
        let mut s = gang_scheduler(2);
        let t = Duration::from_secs(1);
        s.upsert_pod(member("a"), Duration::ZERO).unwrap();
        waits(&mut s, Duration::ZERO);
        assert_eq!(s.waiting_pods().len(), 1);
        assert!(
            s.cache().pod_placement("default", "a").unwrap().1,
            "assumed"
        );
        // Its cpu is taken: a pod of 2 cpu does not fit beside it.
        s.upsert_pod(pod("big").req("cpu", "2").build(), t).unwrap();
        assert!(matches!(
            s.schedule_next(t),
            Some(Attempt::Unschedulable { .. })
        ));
        // The second member completes the group: it is bound, then the first is let go.
        s.upsert_pod(member("b"), t).unwrap();
        assert_eq!(schedule(&mut s, t).assumed.name, "b");
        match s.schedule_next(Duration::from_secs(3)) {
            Some(Attempt::Permitted { task, waited }) => {
                assert_eq!((task.assumed.name.as_str(), &*task.plan.node), ("a", "n1"));
                assert_eq!(waited, Duration::from_secs(3));
            }
            other => panic!("expected a to be permitted, got {other:?}"),
        }
        assert!(s.waiting_pods().is_empty());
        assert_eq!(s.waiting_pods().next_deadline(), None);
    }

    #[test]
    fn a_wait_that_runs_out_gives_the_room_back_and_the_pod_backs_off() {
        let mut s = gang_scheduler(3);
        s.upsert_pod(member("a"), Duration::ZERO).unwrap();
        waits(&mut s, Duration::ZERO);
        assert_eq!(s.next_wakeup(), Some(Duration::from_secs(10)));
        assert!(s.schedule_next(Duration::from_secs(9)).is_none());
        match s.schedule_next(Duration::from_secs(10)) {
            Some(Attempt::Rejected {
                pod,
                status,
                node,
                waited,
                attempt,
                ..
            }) => {
                assert_eq!((pod.name.as_str(), &*node, attempt), ("a", "n1", 1));
                assert_eq!(waited, Duration::from_secs(10));
                assert_eq!(status.plugin(), Some("Gang"));
                assert_eq!(
                    status.message(),
                    "rejected due to timeout after waiting 10s at plugin Gang"
                );
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
        assert!(
            s.cache().pod_placement("default", "a").is_none(),
            "room given back"
        );
        assert!(s.cache().node("n1").unwrap().pods.is_empty());
        assert_eq!(s.queue().len(QueueName::Backoff), 1);
    }

    #[test]
    fn a_member_that_will_not_be_bound_takes_its_waiting_group_with_it() {
        let mut s = gang_scheduler(3);
        s.upsert_pod(member("a"), Duration::ZERO).unwrap();
        s.upsert_pod(member("b"), Duration::ZERO).unwrap();
        waits(&mut s, Duration::ZERO);
        let b = waits(&mut s, Duration::ZERO);
        assert_eq!(s.waiting_pods().len(), 2);
        // b is deleted while it waits: its room is freed, it is not retried, and the plugin
        // rejects a with it.
        s.remove_pod("default", &b.name, Duration::ZERO);
        match s.schedule_next(Duration::ZERO) {
            Some(Attempt::Rejected { pod, status, .. }) => {
                assert_eq!(pod.name, "a");
                assert_eq!(status.message(), "a member will not be bound");
            }
            other => panic!("expected a's rejection, got {other:?}"),
        }
        assert!(s.cache().node("n1").unwrap().pods.is_empty());
        assert!(s.waiting_pods().is_empty());
        assert_eq!(s.queue().total(), 1, "only a is queued again");
    }

    #[test]
    fn a_pod_bound_by_someone_else_while_it_waits_stops_waiting() {
        let mut s = gang_scheduler(2);
        s.upsert_pod(member("a"), Duration::ZERO).unwrap();
        waits(&mut s, Duration::ZERO);
        let bound = pod("a")
            .req("cpu", "1")
            .label("group", "g")
            .on("n1")
            .build();
        s.upsert_pod(bound, Duration::ZERO).unwrap();
        assert!(s.waiting_pods().is_empty());
        let (node, assumed) = s.cache().pod_placement("default", "a").unwrap();
        assert_eq!((&**node, assumed), ("n1", false));
        assert_eq!(s.cache().node("n1").unwrap().pods.len(), 1, "counted once");
        assert!(s.schedule_next(Duration::from_secs(20)).is_none());
    }

    #[test]
    fn post_bind_plugins_hear_of_bindings_that_succeeded_only() {
        let mut config = Config::default_with(&plugins::registry()).expect("defaults");
        let counter = Arc::new(CountBound::default());
        config.profiles[0].post_bind.push(counter.clone());
        let mut s = Scheduler::new(config, None);
        s.upsert_node(node("n1").capacity("2", "2Gi").build(), Duration::ZERO);
        s.upsert_pod(pod("a").req("cpu", "1").build(), Duration::ZERO)
            .unwrap();
        s.upsert_pod(pod("b").req("cpu", "1").build(), Duration::ZERO)
            .unwrap();
        let a = schedule(&mut s, Duration::ZERO);
        let b = schedule(&mut s, Duration::ZERO);
        s.binding_failed(*b, Duration::ZERO);
        s.binding_succeeded(&a, Duration::ZERO).unwrap();
        assert_eq!(*counter.0.lock().unwrap(), ["a@n1"]);
    }

    #[test]
    fn an_activated_pod_is_tried_again_once_its_backoff_is_over() {
        let mut s = scheduler();
        s.upsert_node(node("n1").capacity("1", "1Gi").build(), Duration::ZERO);
        s.upsert_pod(pod("big").req("cpu", "2").build(), Duration::ZERO)
            .unwrap();
        assert!(matches!(
            s.schedule_next(Duration::ZERO),
            Some(Attempt::Unschedulable { .. })
        ));
        let later = Duration::from_secs(2);
        assert!(s.schedule_next(later).is_none(), "parked");
        assert!(s.activate("default", "big", later));
        match s.schedule_next(later) {
            Some(Attempt::Unschedulable { pod, attempt, .. }) => {
                assert_eq!((pod.name.as_str(), attempt), ("big", 2));
            }
            other => panic!("expected a second attempt, got {other:?}"),
        }
        assert!(!s.activate("default", "missing", later));
    }

    #[test]
    fn dropped_binding_frees_the_node_without_requeueing() {
        let mut s = scheduler();
        s.upsert_node(node("n1").capacity("1", "1Gi").build(), Duration::ZERO);
        s.upsert_pod(pod("a").req("cpu", "1").build(), Duration::ZERO)
            .unwrap();
        let task = schedule(&mut s, Duration::ZERO);
        assert!(
            s.cache().pod_placement("default", "a").unwrap().1,
            "assumed"
        );
        s.binding_dropped(*task, Duration::ZERO);
        assert!(s.cache().pod_placement("default", "a").is_none());
        assert_eq!(s.queue().total() + s.queue().in_flight(), 0);
        // The freed cpu is available to the next pod.
        s.upsert_pod(pod("b").req("cpu", "1").build(), Duration::ZERO)
            .unwrap();
        assert_eq!(&*schedule(&mut s, Duration::ZERO).plan.node, "n1");
    }

    #[test]
    fn dropped_binding_keeps_the_placement_the_watch_reported() {
        let mut s = scheduler();
        s.upsert_node(node("n1").capacity("2", "1Gi").build(), Duration::ZERO);
        s.upsert_node(node("n2").capacity("2", "1Gi").build(), Duration::ZERO);
        s.upsert_pod(pod("a").req("cpu", "1").build(), Duration::ZERO)
            .unwrap();
        let task = schedule(&mut s, Duration::ZERO);
        let other = if &*task.plan.node == "n1" { "n2" } else { "n1" };
        // Someone else bound it first; the watch says so before our 409 arrives.
        s.upsert_pod(pod("a").req("cpu", "1").on(other).build(), Duration::ZERO)
            .unwrap();
        s.binding_dropped(*task, Duration::ZERO);
        let (node, assumed) = s.cache().pod_placement("default", "a").unwrap();
        assert_eq!((&**node, assumed), (other, false));
    }

    #[test]
    fn a_binding_the_watch_already_reported_keeps_the_watched_pod() {
        let mut s = scheduler();
        s.upsert_node(node("n1").capacity("2", "1Gi").build(), Duration::ZERO);
        s.upsert_pod(pod("a").req("cpu", "1").build(), Duration::ZERO)
            .unwrap();
        let task = schedule(&mut s, Duration::ZERO);
        // The watch reports the pod bound, with a label added meanwhile.
        let watched = pod("a").req("cpu", "1").label("v", "2").on("n1").build();
        s.upsert_pod(watched, Duration::ZERO).unwrap();
        s.binding_succeeded(&task, Duration::ZERO).unwrap();
        let info = s.cache().node("n1").unwrap();
        assert_eq!(info.pods.len(), 1);
        assert_eq!(info.pods[0].labels.get("v"), Some("2"));
        assert!(!s.cache().pod_placement("default", "a").unwrap().1);
    }

    fn load(cpu: f64, taken_at: u64) -> LoadSample {
        LoadSample {
            cpu,
            memory: 0.1,
            taken_at: Duration::from_secs(taken_at),
            reflects_placements_before: Duration::from_secs(taken_at),
            max_age: Some(Duration::from_secs(30)),
        }
    }

    fn load_aware_scheduler(args: &str) -> Scheduler {
        let yaml = format!(
            "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled: [{{name: LoadAware, weight: 10}}]
  pluginConfig:
  - name: LoadAware
    args: {args}
"
        );
        let config = Config::parse(&yaml, &plugins::registry()).expect("config");
        Scheduler::new(config, None)
    }

    #[test]
    fn placements_count_until_a_sample_reflects_them_and_the_cycle_sees_the_time() {
        let mut s = load_aware_scheduler("{staleMetrics: Filter}");
        s.upsert_node(node("n1").capacity("4", "8Gi").build(), Duration::ZERO);
        s.set_node_loads([("n1", load(0.1, 0))], Duration::ZERO);
        s.upsert_pod(pod("a").req("cpu", "1").build(), Duration::ZERO)
            .unwrap();
        let task = schedule(&mut s, Duration::from_secs(5));
        let recent = |s: &Scheduler| {
            s.cache()
                .node("n1")
                .unwrap()
                .load
                .as_ref()
                .unwrap()
                .recent
                .len()
        };
        assert_eq!(recent(&s), 1);
        s.binding_succeeded(&task, Duration::from_secs(5)).unwrap();
        assert_eq!(recent(&s), 1, "confirmed, still unmeasured");
        s.set_node_loads([("n1", load(0.3, 6))], Duration::from_secs(6));
        assert_eq!(recent(&s), 0);
        // At 37 s the 6 s sample is 31 s old: stale, and filtered under this policy.
        s.upsert_pod(pod("b").build(), Duration::from_secs(37))
            .unwrap();
        match s.schedule_next(Duration::from_secs(37)) {
            Some(Attempt::Unschedulable { message, .. }) => assert_eq!(
                message,
                "0/1 nodes are available: 1 node(s) had no fresh load metrics. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
            ),
            other => panic!("expected unschedulable, got {other:?}"),
        }
        // A fresh sample wakes the pod LoadAware parked.
        s.set_node_loads([("n1", load(0.3, 38))], Duration::from_secs(38));
        assert_eq!(&*schedule(&mut s, Duration::from_secs(38)).plan.node, "n1");
    }

    #[test]
    fn pod_deleted_in_flight_is_not_requeued_after_a_failed_binding() {
        let mut s = scheduler();
        s.upsert_node(node("n1").capacity("1", "1Gi").build(), Duration::ZERO);
        s.upsert_pod(pod("a").build(), Duration::ZERO).unwrap();
        let task = schedule(&mut s, Duration::ZERO);
        s.remove_pod("default", "a", Duration::ZERO);
        s.binding_failed(*task, Duration::ZERO);
        assert_eq!(s.queue().total() + s.queue().in_flight(), 0);
        assert!(s.cache().pod_placement("default", "a").is_none());
    }

    #[test]
    fn a_binding_that_failed_after_the_watch_confirmed_it_keeps_the_pod() {
        let mut s = scheduler();
        s.upsert_node(node("n1").capacity("1", "1Gi").build(), Duration::ZERO);
        s.upsert_pod(pod("a").req("cpu", "1").build(), Duration::ZERO)
            .unwrap();
        let task = schedule(&mut s, Duration::ZERO);
        s.upsert_pod(pod("a").req("cpu", "1").on("n1").build(), Duration::ZERO)
            .unwrap();
        s.binding_failed(*task, Duration::ZERO);
        let (node, assumed) = s.cache().pod_placement("default", "a").unwrap();
        assert_eq!((&**node, assumed), ("n1", false));
        assert_eq!(s.queue().total() + s.queue().in_flight(), 0, "not retried");
    }

    #[test]
    fn a_pod_bound_elsewhere_moves_there_and_frees_the_planned_node() {
        let mut s = scheduler();
        s.upsert_node(node("n1").capacity("1", "1Gi").build(), Duration::ZERO);
        s.upsert_node(node("n2").capacity("1", "1Gi").build(), Duration::ZERO);
        s.upsert_pod(pod("a").req("cpu", "1").build(), Duration::ZERO)
            .unwrap();
        let task = schedule(&mut s, Duration::ZERO);
        let planned = task.plan.node.clone();
        let other: Arc<str> = Arc::from(if &*planned == "n1" { "n2" } else { "n1" });
        s.binding_landed_elsewhere(*task, other.clone(), Duration::ZERO)
            .unwrap();
        let (node, assumed) = s.cache().pod_placement("default", "a").unwrap();
        assert_eq!((node, assumed), (&other, false));
        assert!(s.cache().node(&planned).unwrap().pods.is_empty());
        assert_eq!(s.queue().total() + s.queue().in_flight(), 0);
    }

    /// A scheduler whose one extender cuts every pod's preemptions.
    fn with_preempt_extender() -> Scheduler {
        let text = "apiVersion: kubescheduler.config.k8s.io/v1\n\
                    kind: KubeSchedulerConfiguration\n\
                    extenders:\n- urlPrefix: http://cutter:1\n  preemptVerb: preempt\n";
        let config = Config::parse(text, &plugins::registry()).expect("config");
        let mut s = Scheduler::new(config, None);
        for n in ["n1", "n2"] {
            s.upsert_node(node(n).capacity("1", "1Gi").build(), Duration::ZERO);
            let low = pod(&format!("low-{n}"))
                .on(n)
                .req("cpu", "1")
                .priority(0)
                .build();
            s.upsert_pod(low, Duration::ZERO).unwrap();
        }
        let high = pod("high").req("cpu", "1").priority(1000).build();
        s.upsert_pod(high, Duration::ZERO).unwrap();
        s
    }

    /// Stops at the preempt call: both nodes are candidates.
    fn preempt_round(s: &mut Scheduler) -> (u32, Vec<PreemptionCandidate>) {
        match s.schedule_next(Duration::ZERO) {
            Some(Attempt::Extending(request)) => match request.ask {
                ExtenderAsk::Preempt(mut round) => {
                    let (_, sent) = round.next_call().expect("the extender is asked");
                    let mut nodes: Vec<&str> = sent.iter().map(|c| &*c.node).collect();
                    nodes.sort_unstable();
                    assert_eq!(nodes, ["n1", "n2"]);
                    (request.attempt, sent.to_vec())
                }
                other => panic!("expected a preempt round, got {other:?}"),
            },
            other => panic!("expected the extenders to be asked, got {other:?}"),
        }
    }

    fn answer(attempt: u32, verdict: Result<ExtenderReply, String>) -> ExtenderAnswer {
        ExtenderAnswer {
            namespace: "default".to_string(),
            name: "high".to_string(),
            attempt,
            verdict,
        }
    }

    /// With a preempt verb, the node is chosen among what the extender leaves, not among
    /// all candidates; nothing is nominated or evicted before it answered.
    #[test]
    fn a_preempt_extender_cuts_the_candidates_before_the_node_is_chosen() {
        let mut s = with_preempt_extender();
        let (attempt, candidates) = preempt_round(&mut s);
        assert!(s.nominated.is_empty(), "nothing decided while asking");
        let only_n2: Vec<_> = candidates
            .into_iter()
            .filter(|c| &*c.node == "n2")
            .collect();
        s.extenders_answered(answer(attempt, Ok(ExtenderReply::Preempt(only_n2))));
        match s.schedule_next(Duration::ZERO) {
            Some(Attempt::Unschedulable { diagnosis, .. }) => {
                let preemption = diagnosis.post_filter.preemption.as_ref().expect("preempts");
                assert_eq!(&*preemption.node, "n2");
                assert_eq!(preemption.victims[0].name, "low-n2");
            }
            other => panic!("expected a preemption, got {other:?}"),
        }
        assert_eq!(s.nominated.on("n2").len(), 1);
    }

    /// A failed preempt call decides nothing (kube-scheduler logs it as the PostFilter's
    /// error): the pod is unschedulable, the failure in its message, nobody evicted.
    #[test]
    fn a_failed_preempt_call_leaves_the_pod_unschedulable_and_nothing_evicted() {
        let mut s = with_preempt_extender();
        let (attempt, _) = preempt_round(&mut s);
        let failed = Err("extender http://cutter:1 preempt: code 500".to_string());
        s.extenders_answered(answer(attempt, failed));
        match s.schedule_next(Duration::ZERO) {
            Some(Attempt::Unschedulable {
                diagnosis, message, ..
            }) => {
                assert!(diagnosis.post_filter.preemption.is_none());
                assert!(
                    message.ends_with("preemption: extender http://cutter:1 preempt: code 500"),
                    "{message}"
                );
            }
            other => panic!("expected an unschedulable pod, got {other:?}"),
        }
        assert!(s.nominated.is_empty());
    }

    /// A preemptor released to catch its last victim's deletion, tried again before that
    /// deletion shows, waits for it instead of evicting another pod; if its preemption
    /// failed, it may preempt again.
    #[test]
    fn a_preemptor_does_not_preempt_again_until_its_victims_are_seen_gone() {
        let text = "apiVersion: kubescheduler.config.k8s.io/v1\n\
                    kind: KubeSchedulerConfiguration\n";
        let config = Config::parse(text, &plugins::registry()).expect("config");
        let mut s = Scheduler::new(config, None);
        for n in ["n1", "n2", "n3"] {
            s.upsert_node(node(n).capacity("1", "1Gi").build(), Duration::ZERO);
            let low = pod(&format!("low-{n}")).on(n).req("cpu", "1").build();
            s.upsert_pod(low, Duration::ZERO).unwrap();
        }
        let high = pod("high").req("cpu", "1").priority(1000).build();
        s.upsert_pod(high.clone(), Duration::ZERO).unwrap();
        let mut at = Duration::ZERO;
        let mut attempt = |s: &mut Scheduler| {
            // Parked longer than pods are left parked: tried again.
            at += Duration::from_secs(600);
            match s.schedule_next(at) {
                Some(Attempt::Unschedulable {
                    diagnosis, message, ..
                }) => (diagnosis.post_filter.preemption, message),
                other => panic!("expected an unschedulable pod, got {other:?}"),
            }
        };
        let (preemption, _) = attempt(&mut s);
        let preemption = preemption.expect("preempts");
        s.hold_preemptor(&high, &preemption.victims);
        s.release_preemptor("default", "high");
        let waits = "preemption: not eligible due to a terminating pod on the nominated node.";
        let (again, message) = attempt(&mut s);
        assert!(again.is_none() && message.ends_with(waits), "{message}");
        // Evicted, but the deletion has not shown yet.
        s.preemption_done("default", "high", true);
        let (again, message) = attempt(&mut s);
        assert!(again.is_none() && message.ends_with(waits), "{message}");

        // A preemption whose evictions failed leaves the preemptor free to preempt again.
        s.preemption_done("default", "high", false);
        let (again, message) = attempt(&mut s);
        assert!(again.is_some(), "{message}");
    }
}
