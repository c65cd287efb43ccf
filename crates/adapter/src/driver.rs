//! The scheduling thread: it owns the [`Scheduler`], applies the cluster changes the
//! watchers send, schedules whenever a pod is due, and hands decisions to the binder,
//! preemptions to their tasks ([`super::preemption`]) and records to the event writer. It
//! never touches the network: everything it sends goes through channels that do not block,
//! and everything it hears arrives on one channel.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::mpsc::UnboundedSender;

use super::binder::{BindOutcome, BindRequest, MAX_IN_FLIGHT};
use super::events::{
    CONDITION_SCHEDULER_ERROR, CONDITION_UNSCHEDULABLE, PodRef, REASON_OVERCOMMITTED, Record,
    Recorder,
};
use super::instrument::Instrumentation;
use super::metrics::{
    Metrics, PluginProfileLabels, RESULT_ERROR, RESULT_UNSCHEDULABLE, code_label,
};
use super::node_load::{NodeLoadSettings, NodeReading};
use super::preemption::{PreemptRequest, Victim};
use gantry_core::decision::DecisionRecorder;
use gantry_core::framework::{Code, Nomination, Preemption, Status};
use gantry_core::kinds::{AnyChange, RefusedPod, Target};
use gantry_core::model::{NodeModel, PodInfo, PodKey};
use gantry_core::plugins::overcommit;
use gantry_core::queue::QueueName;
use gantry_core::scheduler::{
    Attempt, BindTask, ClusterView, ExtenderAnswer, ExtenderRequest, Scheduler, Views,
};

/// Longest the thread sleeps with nothing to do.
const IDLE_TICK: Duration = Duration::from_secs(1);
/// How often the queue gauges are refreshed while busy (and whenever the thread goes idle).
const GAUGE_INTERVAL: Duration = Duration::from_millis(500);
/// How long a shutdown waits for bindings in flight.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// How long the thread lets inputs gather after one woke it while bindings are in flight and
/// no pod waits: their results and watch echoes then arrive one at a time, thousands a
/// second, and each would cost a wake-up of its own (a third of this thread's CPU at 2,000
/// bindings a second); each gathering costs two context switches, which on a virtual
/// machine are dear. A new pod waits this long at most.
const INPUT_COALESCE: Duration = Duration::from_millis(10);
/// Most bindings decided and not finished (sent, waiting to be sent, or being read back):
/// at this many, scheduling pauses until [`RESUME_OUTSTANDING`]. The binder sends
/// [`MAX_IN_FLIGHT`] at once; deciding further ahead would not bind pods sooner, only hold
/// more decisions (and their memory) while the API server is slow or unreachable.
pub const MAX_OUTSTANDING: usize = 4 * MAX_IN_FLIGHT;
/// Where a paused scheduling resumes: a batch of decisions per wake-up, not one per binding.
const RESUME_OUTSTANDING: usize = MAX_OUTSTANDING - MAX_IN_FLIGHT;

/// Everything the scheduling thread hears about.
#[derive(Debug)]
pub enum Input {
    /// An object of some kind ([`gantry_core::kinds`]) was added, changed or deleted.
    Object(Box<dyn AnyChange>),
    /// Node load a metrics source read (see [`super::node_load`]).
    NodeLoads(Vec<NodeReading>),
    /// A watcher finished a list (its first, or a relist): it has caught up with the API
    /// server.
    Synced(&'static str),
    /// A watcher lost its watch and relists: until it has (see [`Input::Synced`]), the cache
    /// may be older than bindings the API server has made, so nothing is scheduled.
    Stale(&'static str),
    /// A binding finished.
    Bound(Box<BindRequest>, BindOutcome),
    /// A binding found a node's HAMi lock held for another pod (`holder`), or, once it was
    /// found held, took it (`holder` none).
    HamiLock {
        /// The node.
        node: Arc<str>,
        /// Who holds the lock.
        holder: Option<String>,
    },
    /// What was carried out for a pod failed (a preemption's evictions): try it again once
    /// its backoff allows, rather than wait for a cluster event.
    Activate {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// A preemption's task evicted every victim but the last: the preemptor, held since its
    /// preemption was decided, may be woken again (by the last victim's deletion, which the
    /// task makes after sending this).
    Release {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// A preemption's task is done: the preemptor may preempt again once its victims'
    /// deletions show, or at once if some could not be evicted.
    PreemptionDone {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// Every victim was deleted (or found gone).
        evicted: bool,
    },
    /// The extenders answered about a pod.
    Extenders(Box<ExtenderAnswer>),
    /// A question about placements (`/debug/whatif`, `/debug/snapshot`) asks for the
    /// scheduler's state as it is between two cycles.
    View(ViewRequest),
    /// This replica leads: start scheduling.
    Lead,
    /// Stop scheduling, wait for bindings in flight, and return.
    Shutdown,
}

/// How long a view of the scheduler's state is shared by the questions that come while the
/// state changes: an answer is at most this much behind (see [`Views`]).
pub const VIEW_REUSE: Duration = Duration::from_millis(100);

/// A request for the scheduler's state ([`Input::View`]).
#[derive(Debug)]
pub struct ViewRequest {
    /// Also the pods waiting in the queue (for a snapshot), in the order they came.
    pub with_queue: bool,
    /// Where the state goes.
    pub reply: tokio::sync::oneshot::Sender<ViewReply>,
}

/// The scheduler's state, handed off the scheduling thread.
#[derive(Debug)]
pub struct ViewReply {
    /// The cluster as the scheduler holds it (at most [`VIEW_REUSE`] old).
    pub view: Arc<ClusterView>,
    /// The queued pods, when asked for.
    pub queued: Vec<Arc<PodInfo>>,
}

/// What the scheduling thread needs.
pub struct Driver {
    /// The scheduler.
    pub scheduler: Scheduler,
    /// Its input.
    pub inputs: Receiver<Input>,
    /// Where decisions go.
    pub binder: UnboundedSender<BindRequest>,
    /// Where preemptions go.
    pub preemptions: UnboundedSender<PreemptRequest>,
    /// Where questions to the scheduler extenders go (none configured: `None`).
    pub extenders: Option<UnboundedSender<ExtenderRequest>>,
    /// Where events and conditions go.
    pub recorder: Recorder,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Plugin timing.
    pub instrumentation: Arc<Instrumentation>,
    /// The watchers that must finish a list before scheduling (re)starts: all of them at
    /// first, and each again after it lost its watch.
    pub watchers: BTreeSet<&'static str>,
    /// Set once every watcher has listed (for `/readyz`).
    pub ready: Arc<AtomicBool>,
    /// How node load readings become samples.
    pub node_load: NodeLoadSettings,
    /// Where each attempt's decision record goes.
    pub decisions: DecisionRecorder,
}

struct Run {
    /// Views handed to questions.
    views: Views,
    start: Instant,
    leading: bool,
    stopping: Option<Instant>,
    in_flight: usize,
    /// Of those, bindings with work before them (a HAMi lock, volumes to bind): they may
    /// wait minutes on other parties, and hold no event back meanwhile.
    pre_binding: usize,
    /// Paused at [`MAX_OUTSTANDING`] bindings, until [`RESUME_OUTSTANDING`].
    throttled: bool,
    last_gauges: Instant,
    /// Something changed since the gauges were last refreshed.
    changed: bool,
}

impl Driver {
    /// Runs until [`Input::Shutdown`] (then waits for bindings in flight, at most
    /// [`SHUTDOWN_GRACE`]) or until every sender is gone.
    pub fn run(mut self) {
        let now = Instant::now();
        let mut run = Run {
            views: Views::new(VIEW_REUSE),
            start: now,
            leading: false,
            stopping: None,
            in_flight: 0,
            pre_binding: 0,
            throttled: false,
            last_gauges: now,
            changed: false,
        };
        loop {
            loop {
                match self.inputs.try_recv() {
                    Ok(input) => self.apply(input, &mut run),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return,
                }
            }
            if let Some(since) = run.stopping
                && (run.in_flight == 0 || since.elapsed() >= SHUTDOWN_GRACE)
            {
                self.refresh_gauges(&mut run);
                return;
            }
            if run.last_gauges.elapsed() >= GAUGE_INTERVAL {
                self.refresh_gauges(&mut run);
            }
            if run.in_flight >= MAX_OUTSTANDING {
                run.throttled = true;
            } else if run.in_flight <= RESUME_OUTSTANDING {
                run.throttled = false;
            }
            let can_schedule =
                run.leading && run.stopping.is_none() && self.watchers.is_empty() && !run.throttled;
            if can_schedule && self.schedule_one(&mut run) {
                run.changed = true;
                continue;
            }
            if run.changed {
                self.refresh_gauges(&mut run);
            }
            let now = run.start.elapsed();
            let wait = match (can_schedule, self.scheduler.next_wakeup()) {
                (true, Some(t)) => t.saturating_sub(now).min(IDLE_TICK),
                _ => IDLE_TICK,
            };
            match self.inputs.recv_timeout(wait) {
                Ok(input) => {
                    self.apply(input, &mut run);
                    if run.in_flight > 0
                        && (run.throttled || self.scheduler.queue().len(QueueName::Active) == 0)
                    {
                        std::thread::sleep(INPUT_COALESCE);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// One attempt; false when no pod is due.
    fn schedule_one(&mut self, run: &mut Run) -> bool {
        self.instrumentation.begin_cycle();
        let attempt_start = Instant::now();
        let Some(mut attempt) = self.scheduler.schedule_next(run.start.elapsed()) else {
            return false;
        };
        let took = attempt_start.elapsed();
        let timestamp_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        if !self.decisions.record(&mut attempt, timestamp_ms, took) {
            self.metrics.decision_log_dropped();
        }
        // kube-scheduler times the algorithm of an attempt that found a node; a pod released
        // from Permit had its algorithm timed when it went there.
        if matches!(attempt, Attempt::Scheduled(..) | Attempt::Waiting { .. }) {
            self.metrics.algorithm(took);
        }
        match attempt {
            Attempt::Extending(request) => self.ask_extenders(request),
            Attempt::Waiting { pod, node, .. } => {
                tracing::debug!(pod = %pod.key(), %node, "waiting at Permit");
            }
            Attempt::Permitted { task, waited } => {
                self.metrics
                    .permit_waited(code_label(Code::Success), waited);
                self.bind(run, task, attempt_start);
            }
            Attempt::Rejected {
                pod,
                status,
                waited,
                ..
            } => {
                self.metrics
                    .permit_waited(code_label(Code::Unschedulable), waited);
                self.metrics.attempt(
                    RESULT_UNSCHEDULABLE,
                    &pod.scheduler_name,
                    attempt_start.elapsed(),
                );
                let message = status.message();
                tracing::debug!(pod = %pod.key(), %message, "rejected at Permit");
                self.recorder.record(Record::Failed {
                    pod: pod_ref(&pod),
                    profile: pod.scheduler_name.clone(),
                    condition_reason: CONDITION_UNSCHEDULABLE,
                    message,
                    nomination: Nomination::Keep,
                    nominated: pod.nominated_node.clone(),
                });
            }
            Attempt::Scheduled(task, _) => {
                // Only an earlier attempt can have left a condition waiting to be written.
                if task.queued.attempts > 1 {
                    self.recorder.record(Record::Binding {
                        namespace: task.assumed.namespace.clone(),
                        name: task.assumed.name.clone(),
                    });
                }
                self.bind(run, task, attempt_start);
            }
            Attempt::Unschedulable {
                pod,
                message,
                diagnosis,
                ..
            } => {
                self.metrics.attempt(
                    RESULT_UNSCHEDULABLE,
                    &pod.scheduler_name,
                    attempt_start.elapsed(),
                );
                tracing::debug!(pod = %pod.key(), %message, "unschedulable");
                let post_filter = *diagnosis.post_filter;
                if let Some(preemption) = post_filter.preemption {
                    self.preempt(&pod, preemption);
                }
                // As kube-scheduler: the nomination goes with the condition, in one patch.
                self.recorder.record(Record::Failed {
                    pod: pod_ref(&pod),
                    profile: pod.scheduler_name.clone(),
                    condition_reason: CONDITION_UNSCHEDULABLE,
                    message,
                    nomination: post_filter.nomination,
                    nominated: pod.nominated_node.clone(),
                });
            }
            Attempt::Failed { pod, status, .. } => {
                self.metrics
                    .attempt(RESULT_ERROR, &pod.scheduler_name, attempt_start.elapsed());
                tracing::warn!(pod = %pod.key(), %status, "scheduling attempt failed");
                self.recorder.record(Record::Failed {
                    pod: pod_ref(&pod),
                    profile: pod.scheduler_name.clone(),
                    condition_reason: CONDITION_SCHEDULER_ERROR,
                    message: status.error_message(),
                    nomination: Nomination::Keep,
                    nominated: None,
                });
            }
        }
        true
    }

    fn apply(&mut self, input: Input, run: &mut Run) {
        run.changed = true;
        let now = run.start.elapsed();
        let s = &mut self.scheduler;
        match input {
            Input::Object(change) => change.apply(self, now),
            Input::NodeLoads(readings) => self.node_loads(&readings, now),
            Input::Synced(watcher) => self.synced(watcher),
            Input::Stale(watcher) => {
                if self.watchers.insert(watcher) && self.ready.load(Ordering::Relaxed) {
                    tracing::warn!(watcher, "watch lost; no scheduling until it has relisted");
                }
            }
            Input::Bound(request, outcome) => {
                run.in_flight = run.in_flight.saturating_sub(1);
                if !request.task.plan.pre_bind.is_empty() {
                    run.pre_binding = run.pre_binding.saturating_sub(1);
                }
                self.set_in_flight(run);
                self.bound(*request, outcome, now);
            }
            Input::HamiLock { node, holder } => match holder {
                Some(holder) => {
                    tracing::info!(%node, %holder, "HAMi's node lock is held for another pod; pods with HAMi devices avoid the node for a while");
                    s.hami_lock_held(&node, &holder, now);
                }
                None => s.hami_lock_taken(&node, now),
            },
            Input::Activate { namespace, name } => {
                if s.activate(&namespace, &name, now) {
                    tracing::debug!(pod = %PodKey::new(&namespace, &name), "activated");
                }
            }
            Input::Release { namespace, name } => {
                s.release_preemptor(&namespace, &name);
            }
            Input::PreemptionDone {
                namespace,
                name,
                evicted,
            } => s.preemption_done(&namespace, &name, evicted),
            Input::Extenders(answer) => s.extenders_answered(*answer),
            Input::View(request) => self.answer_view(request, run, now),
            Input::Lead => run.leading = true,
            Input::Shutdown => {
                if run.stopping.is_none() {
                    tracing::info!(in_flight = run.in_flight, "stopping: no new attempts");
                    run.stopping = Some(Instant::now());
                }
            }
        }
    }

    /// A node added or changed, with the load its annotations carry, if any.
    fn node_applied_at(&mut self, node: NodeModel, now: Duration) {
        let load = self
            .node_load
            .from_annotations(&node, now, SystemTime::now());
        let name = node.name.clone();
        self.scheduler.upsert_node(node, now);
        if let Some(sample) = load {
            self.scheduler.set_node_loads([(&*name, sample)], now);
        }
    }

    /// Node load read from the metrics source.
    fn node_loads(&mut self, readings: &[NodeReading], now: Duration) {
        let wall = SystemTime::now();
        let settings = &self.node_load;
        self.scheduler.set_node_loads(
            readings.iter().map(|r| {
                (
                    r.node.as_str(),
                    settings.sample(r.cpu, r.memory, r.at, now, wall),
                )
            }),
            now,
        );
    }

    /// A pod the model cannot read: dropped from the queue, and told why.
    fn pod_invalid(&mut self, refused: RefusedPod, now: Duration) {
        let RefusedPod {
            namespace,
            name,
            uid,
            scheduler_name,
            message,
        } = refused;
        let pod = PodRef {
            namespace,
            name,
            uid,
        };
        self.scheduler.remove_pod(&pod.namespace, &pod.name, now);
        tracing::warn!(pod = %pod.display(), %message, "pod cannot be scheduled");
        self.recorder.record(Record::Failed {
            pod,
            profile: scheduler_name,
            condition_reason: CONDITION_SCHEDULER_ERROR,
            message,
            nomination: Nomination::Keep,
            nominated: None,
        });
    }

    /// A watcher has listed: once every watcher has, scheduling starts (or resumes).
    fn synced(&mut self, watcher: &'static str) {
        if !self.watchers.remove(watcher) || !self.watchers.is_empty() {
            return;
        }
        if self.ready.swap(true, Ordering::Relaxed) {
            tracing::info!(
                watcher,
                "caught up with the API server again; scheduling resumes"
            );
        } else {
            tracing::info!(
                nodes = self.scheduler.cache().node_count(),
                pending = self.scheduler.queue().total(),
                "caches are warm"
            );
        }
    }

    /// Hands a what-if question a view of the scheduler's state (and its queue, if asked).
    fn answer_view(&mut self, request: ViewRequest, run: &mut Run, now: Duration) {
        let s = &self.scheduler;
        let queued = if request.with_queue {
            s.queue()
                .queued()
                .into_iter()
                .map(|q| q.pod.clone())
                .collect()
        } else {
            Vec::new()
        };
        // The asker may have given up: nothing to do then.
        let _ = request.reply.send(ViewReply {
            view: run.views.get(s, now),
            queued,
        });
    }

    fn bound(&mut self, request: BindRequest, outcome: BindOutcome, now: Duration) {
        let BindRequest {
            task,
            attempt_start,
        } = request;
        let pod = pod_ref(&task.assumed);
        let profile = task.profile.clone();
        // The message of a failure: a PreBind error says which plugin failed; a refused
        // binding is said to be one.
        let failure = match &outcome {
            BindOutcome::PreBindFailed(error) => Some(error.clone()),
            BindOutcome::Failed(error) => Some(format!("binding rejected: {error}")),
            _ => None,
        };
        match outcome {
            BindOutcome::Bound => {
                let node = &task.plan.node;
                self.metrics.scheduled(
                    &profile,
                    attempt_start.elapsed(),
                    now.saturating_sub(task.queued.first_queued),
                    task.queued.attempts,
                );
                if let Err(e) = self.scheduler.binding_succeeded(&task, now) {
                    tracing::warn!(error = %e, "bound pod not recorded");
                }
                tracing::debug!(pod = %pod.display(), %node, "bound");
                let overcommit = task
                    .plan
                    .annotations
                    .iter()
                    .find(|(k, _)| k == overcommit::ANNOTATION)
                    .map(|(_, v)| format!("Placed on {node} beyond its allocatable: {v}"));
                self.recorder.record(Record::Scheduled {
                    pod: pod.clone(),
                    profile: profile.clone(),
                    node: node.clone(),
                });
                if let Some(note) = overcommit {
                    self.recorder.record(Record::Note {
                        pod,
                        profile,
                        reason: REASON_OVERCOMMITTED,
                        note,
                    });
                }
            }
            BindOutcome::BoundElsewhere(node) => {
                self.metrics
                    .attempt(RESULT_ERROR, &profile, attempt_start.elapsed());
                tracing::info!(pod = %pod.display(), planned = %task.plan.node, %node, "pod bound to another node by someone else");
                if let Err(e) = self.scheduler.binding_landed_elsewhere(*task, node, now) {
                    tracing::warn!(error = %e, "bound pod not recorded");
                }
            }
            BindOutcome::Gone(reason) => {
                self.metrics
                    .attempt(RESULT_ERROR, &profile, attempt_start.elapsed());
                tracing::info!(pod = %pod.display(), %reason, "binding refused: pod gone; dropped");
                self.scheduler.binding_dropped(*task, now);
            }
            BindOutcome::Failed(error) | BindOutcome::PreBindFailed(error) => {
                self.metrics
                    .attempt(RESULT_ERROR, &profile, attempt_start.elapsed());
                tracing::warn!(pod = %pod.display(), %error, "binding failed; retrying after backoff");
                self.scheduler.binding_failed(*task, now);
                self.recorder.record(Record::Failed {
                    pod,
                    profile,
                    condition_reason: CONDITION_SCHEDULER_ERROR,
                    message: failure.unwrap_or_default(),
                    nomination: Nomination::Keep,
                    nominated: None,
                });
            }
        }
    }

    /// Hands a pod's questions to the extenders' task; without one (shutting down), the
    /// attempt fails and the pod retries after backoff.
    fn ask_extenders(&mut self, request: Box<ExtenderRequest>) {
        tracing::debug!(pod = %request.pod.key(), "asking the scheduler extenders");
        let (namespace, name) = (request.pod.namespace.clone(), request.pod.name.clone());
        let attempt = request.attempt;
        let sent = match &self.extenders {
            Some(tx) => tx.send(*request).is_ok(),
            None => false,
        };
        if !sent {
            self.scheduler.extenders_answered(ExtenderAnswer {
                namespace,
                name,
                attempt,
                verdict: Err("the scheduler extenders cannot be reached".to_string()),
            });
        }
    }

    /// Counts the binding as outstanding and hands it to the binder.
    fn bind(&mut self, run: &mut Run, task: Box<BindTask>, attempt_start: Instant) {
        let pre_binding = usize::from(!task.plan.pre_bind.is_empty());
        run.in_flight += 1;
        run.pre_binding += pre_binding;
        self.set_in_flight(run);
        if let Err(e) = self.binder.send(BindRequest {
            task,
            attempt_start,
        }) {
            // The binder is gone (shutting down): give the decision back.
            run.in_flight -= 1;
            run.pre_binding -= pre_binding;
            self.set_in_flight(run);
            self.scheduler
                .binding_failed(*e.0.task, run.start.elapsed());
        }
    }

    /// Hands a preemption's evictions to their task, and holds the preemptor out of the
    /// queue until the task releases it; the victims already terminating are waited for, not
    /// evicted again.
    fn preempt(&mut self, preemptor: &PodInfo, preemption: Preemption) {
        self.metrics
            .preemption_victims(preemption.victims.len() + preemption.released.len());
        let victims: Vec<Victim> = preemption
            .victims
            .iter()
            .filter(|v| !v.terminating)
            .map(|v| Victim {
                pod: pod_ref(v),
                marked: v.preempted_by_scheduler,
            })
            .collect();
        tracing::debug!(preemptor = %preemptor.key(), node = %preemption.node, victims = preemption.victims.len(), to_evict = victims.len(), reason = %preemption.reason, "preempting");
        if victims.is_empty() && preemption.denominated.is_empty() {
            return;
        }
        self.scheduler
            .hold_preemptor(preemptor, &preemption.victims);
        // Dropped only when shutting down: the next leader decides again.
        let _ = self.preemptions.send(PreemptRequest {
            preemptor: pod_ref(preemptor),
            profile: preemptor.scheduler_name.clone(),
            node: preemption.node,
            victims,
            denominated: preemption.denominated.iter().map(|p| pod_ref(p)).collect(),
        });
    }

    /// Bindings decided and not finished: all of them for the metric; for the event writer,
    /// which holds back while there are any, those not waiting on work before the binding
    /// (one pod waiting for a node's HAMi lock must not hold back every pod's events).
    fn set_in_flight(&self, run: &Run) {
        self.metrics.set_bindings_in_flight(run.in_flight);
        self.recorder
            .set_bindings_outstanding(run.in_flight.saturating_sub(run.pre_binding));
    }

    fn refresh_gauges(&mut self, run: &mut Run) {
        run.last_gauges = Instant::now();
        run.changed = false;
        let q = self.scheduler.queue();
        let mut gated = 0;
        // Waiting pods by each plugin that rejected their last attempt or gates them.
        let mut rejected: BTreeMap<PluginProfileLabels, usize> = BTreeMap::new();
        for (p, name) in self.scheduler.waiting() {
            if name == QueueName::Unschedulable && p.gated.is_some() {
                gated += 1;
            }
            let gate = p.gated.as_ref().and_then(Status::plugin);
            let plugins = p.unschedulable_plugins.iter().copied();
            let gate = gate.filter(|g| !p.unschedulable_plugins.contains(g));
            for plugin in plugins.chain(gate) {
                *rejected
                    .entry(PluginProfileLabels {
                        plugin,
                        profile: p.pod.scheduler_name.clone(),
                    })
                    .or_default() += 1;
            }
        }
        self.metrics.set_unschedulable(&rejected);
        let cache = self.scheduler.cache();
        self.metrics.set_cache_size(
            cache.node_count(),
            cache.pod_count(),
            cache.assumed_pod_count(),
        );
        self.metrics.set_pending(
            q.len(QueueName::Active),
            q.len(QueueName::Backoff),
            q.len(QueueName::Unschedulable).saturating_sub(gated),
            gated,
        );
        self.metrics
            .set_permit_waiting(self.scheduler.waiting_pods().len());
        for (queue, event, n) in self.scheduler.take_queue_incoming() {
            self.metrics.incoming(queue, event, n);
        }
    }
}

/// The reference events and conditions name a pod by.
pub fn pod_ref(pod: &PodInfo) -> PodRef {
    PodRef {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        uid: pod.uid.clone(),
    }
}

/// A change of a storage object (claims, volumes, classes, CSI nodes and drivers, capacities).
/// The kinds' changes land in the scheduler, with what only `gantry run` adds: a node's
/// load annotation dated by the wall clock, a refused pod told to the API server, a deleted
/// pod's records forgotten.
impl Target for Driver {
    fn scheduler(&mut self) -> &mut Scheduler {
        &mut self.scheduler
    }

    fn node_applied(&mut self, node: NodeModel, now: Duration) {
        self.node_applied_at(node, now);
    }

    fn pod_refused(&mut self, pod: RefusedPod, now: Duration) {
        self.pod_invalid(pod, now);
    }

    fn pod_deleted(&mut self, namespace: &str, name: &str, now: Duration) {
        self.scheduler.remove_pod(namespace, name, now);
        self.recorder.record(Record::Forget {
            namespace: namespace.to_string(),
            name: name.to_string(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_core::config::Config;
    use gantry_core::decision::DecisionStore;
    use gantry_core::kinds::{self, Change};
    use gantry_core::model::gpu::GPU_RESOURCE;
    use gantry_core::model::hami;
    use gantry_core::plugins;
    use gantry_core::testing::{node, pod};
    use std::sync::mpsc::{Sender, channel};
    use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

    fn node_input(node: NodeModel) -> Input {
        Input::Object(kinds::boxed::<kinds::Nodes>(Change::Applied(node)))
    }

    fn pod_input(pod: Arc<PodInfo>) -> Input {
        let reading = kinds::PodReading::Pod(pod);
        Input::Object(kinds::boxed::<kinds::Pods>(Change::Applied(reading)))
    }

    struct Harness {
        inputs: Sender<Input>,
        binds: UnboundedReceiver<BindRequest>,
        preemptions: UnboundedReceiver<PreemptRequest>,
        records: UnboundedReceiver<Record>,
        /// The recorder the driver tells how many bindings the records wait for.
        recorder: Recorder,
        ready: Arc<AtomicBool>,
        decisions: gantry_core::decision::SharedStore,
        thread: std::thread::JoinHandle<()>,
    }

    fn start() -> Harness {
        let config = Config::default_with(&plugins::registry()).expect("defaults");
        start_with(config, NodeLoadSettings::default())
    }

    fn start_with(config: Config, node_load: NodeLoadSettings) -> Harness {
        let metrics = Arc::new(Metrics::new());
        let (inputs, rx) = channel();
        let (bind_tx, binds) = unbounded_channel();
        let (preempt_tx, preemptions) = unbounded_channel();
        let (recorder, records) = Recorder::channel();
        let ready = Arc::new(AtomicBool::new(false));
        let decisions = DecisionStore::shared(100);
        let driver = Driver {
            scheduler: Scheduler::new(config, None),
            inputs: rx,
            binder: bind_tx,
            preemptions: preempt_tx,
            extenders: None,
            recorder: recorder.clone(),
            instrumentation: Instrumentation::new(metrics.clone()),
            metrics,
            watchers: ["nodes", "pods"].into_iter().collect(),
            ready: ready.clone(),
            node_load,
            decisions: DecisionRecorder::new(decisions.clone(), None, false),
        };
        let thread = std::thread::spawn(move || driver.run());
        Harness {
            inputs,
            binds,
            preemptions,
            records,
            recorder,
            ready,
            decisions,
            thread,
        }
    }

    fn next<T>(rx: &mut UnboundedReceiver<T>) -> Option<T> {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(v) = rx.try_recv() {
                return Some(v);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }

    fn quiet<T>(rx: &mut UnboundedReceiver<T>) -> bool {
        std::thread::sleep(Duration::from_millis(100));
        rx.try_recv().is_err()
    }

    #[test]
    fn nothing_is_scheduled_before_warm_caches_and_leadership() {
        let mut h = start();
        h.inputs
            .send(node_input(node("n1").capacity("2", "4Gi").build()))
            .unwrap();
        h.inputs
            .send(pod_input(pod("a").req("cpu", "1").build()))
            .unwrap();
        h.inputs.send(Input::Synced("nodes")).unwrap();
        h.inputs.send(Input::Lead).unwrap();
        assert!(quiet(&mut h.binds), "the pod watcher has not listed yet");
        assert!(!h.ready.load(Ordering::Relaxed));
        h.inputs.send(Input::Synced("pods")).unwrap();
        let bind = next(&mut h.binds).expect("a binding once warm");
        assert!(h.ready.load(Ordering::Relaxed));
        assert_eq!(&*bind.task.plan.node, "n1");
        h.inputs
            .send(Input::Bound(Box::new(bind), BindOutcome::Bound))
            .unwrap();
        match next(&mut h.records) {
            Some(Record::Scheduled { pod, node, .. }) => {
                assert_eq!((pod.name.as_str(), &*node), ("a", "n1"));
            }
            other => panic!("expected a Scheduled record, got {other:?}"),
        }
        h.inputs.send(Input::Shutdown).unwrap();
        h.thread.join().unwrap();
    }

    #[test]
    fn a_binding_after_a_failed_attempt_cancels_the_stale_condition() {
        let mut h = start();
        send(
            &h,
            [
                node_input(node("n1").capacity("2", "4Gi").build()),
                pod_input(pod("big").req("cpu", "3").build()),
            ],
        );
        warm_and_lead(&h);
        assert!(
            matches!(next(&mut h.records), Some(Record::Failed { pod, .. }) if pod.name == "big")
        );
        send(&h, [node_input(node("n2").capacity("4", "4Gi").build())]);
        let bind = next(&mut h.binds).expect("a binding once a node fits");
        assert_eq!(&*bind.task.plan.node, "n2");
        assert!(
            matches!(next(&mut h.records), Some(Record::Binding { name, .. }) if name == "big")
        );
        h.inputs.send(Input::Shutdown).unwrap();
        h.thread.join().unwrap();
    }

    /// A profile filtering nodes without fresh load metrics.
    fn strict_load_aware() -> Config {
        Config::parse(
            "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled: [{name: LoadAware}]
  pluginConfig:
  - name: LoadAware
    args: {staleMetrics: Filter}
",
            &plugins::registry(),
        )
        .expect("config")
    }

    fn send(h: &Harness, inputs: impl IntoIterator<Item = Input>) {
        for input in inputs {
            h.inputs.send(input).unwrap();
        }
    }

    /// Waits until the driver told the recorder `n` bindings are outstanding.
    fn outstanding_becomes(h: &Harness, n: usize) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if h.recorder.bindings_outstanding() == n {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    #[test]
    fn a_binding_waiting_on_work_before_it_holds_back_no_event() {
        let yaml = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
                    profiles:\n- plugins:\n    multiPoint:\n      enabled: [{name: GpuShare}]\n";
        let config = Config::parse(yaml, &plugins::registry()).unwrap();
        let mut h = start_with(config, NodeLoadSettings::default());
        let devices = r#"[{"id":"GPU-a","index":0,"count":10,"devmem":32768,"devcore":100,"type":"NVIDIA-Tesla V100-PCIE-32GB","numa":0,"health":true}]"#;
        send(
            &h,
            [
                node_input(
                    node("gpu")
                        .capacity("32", "128Gi")
                        .alloc(GPU_RESOURCE, "10")
                        .annotation(hami::REGISTER_ANNOTATION, devices)
                        .build(),
                ),
                pod_input(
                    pod("share")
                        .req("cpu", "1")
                        .req(GPU_RESOURCE, "1")
                        .req(hami::MEMORY_RESOURCE, "1024")
                        .build(),
                ),
            ],
        );
        warm_and_lead(&h);
        let share = next(&mut h.binds).expect("the share is bound");
        assert!(
            !share.task.plan.pre_bind.is_empty(),
            "bound under HAMi's node lock"
        );
        assert!(
            outstanding_becomes(&h, 0),
            "the lock wait holds nothing back"
        );
        send(&h, [pod_input(pod("plain").req("cpu", "1").build())]);
        let plain = next(&mut h.binds).expect("the plain pod is bound");
        assert!(
            outstanding_becomes(&h, 1),
            "a plain binding holds records back"
        );
        send(&h, [Input::Bound(Box::new(plain), BindOutcome::Bound)]);
        assert!(
            outstanding_becomes(&h, 0),
            "none once the plain pod is bound, while the share still waits"
        );
        send(&h, [Input::Bound(Box::new(share), BindOutcome::Bound)]);
        h.inputs.send(Input::Shutdown).unwrap();
        h.thread.join().unwrap();
    }

    fn warm_and_lead(h: &Harness) {
        send(
            h,
            [Input::Synced("nodes"), Input::Synced("pods"), Input::Lead],
        );
    }

    #[test]
    fn every_attempt_leaves_a_decision_record() {
        let mut h = start();
        send(
            &h,
            [
                node_input(node("n1").capacity("2", "4Gi").build()),
                pod_input(pod("a").req("cpu", "1").build()),
                pod_input(pod("big").req("cpu", "3").build()),
            ],
        );
        warm_and_lead(&h);
        let bind = next(&mut h.binds).expect("a binding");
        let deadline = Instant::now() + Duration::from_secs(5);
        let latest = |name: &str| {
            gantry_core::decision::store::latest_shared(&h.decisions, "default", name, 5)
        };
        while latest("big").is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let placed = latest("a");
        assert_eq!(placed.len(), 1);
        assert_eq!(placed[0].node.as_deref(), Some("n1"));
        let stuck = latest("big");
        assert_eq!(stuck.len(), 1);
        assert_eq!(
            stuck[0].result,
            gantry_core::decision::Outcome::Unschedulable
        );
        assert_eq!(
            stuck[0].message.as_deref(),
            Some(
                "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
            )
        );
        h.inputs
            .send(Input::Bound(Box::new(bind), BindOutcome::Bound))
            .unwrap();
        h.inputs.send(Input::Shutdown).unwrap();
        h.thread.join().unwrap();
    }

    #[test]
    fn node_load_readings_reach_the_scheduler_and_wake_parked_pods() {
        let mut h = start_with(strict_load_aware(), NodeLoadSettings::default());
        h.inputs
            .send(node_input(node("n1").capacity("2", "4Gi").build()))
            .unwrap();
        h.inputs
            .send(pod_input(pod("a").req("cpu", "100m").build()))
            .unwrap();
        warm_and_lead(&h);
        let failed = loop {
            match next(&mut h.records) {
                Some(Record::Failed { message, .. }) => break message,
                Some(_) => continue,
                None => panic!("no failure recorded"),
            }
        };
        assert_eq!(
            failed,
            "0/1 nodes are available: 1 node(s) had no fresh load metrics. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
        );
        h.inputs
            .send(Input::NodeLoads(vec![NodeReading {
                node: "n1".to_string(),
                cpu: 0.1,
                memory: 0.1,
                at: SystemTime::now(),
            }]))
            .unwrap();
        let bind = next(&mut h.binds).expect("bound once measured");
        assert_eq!(&*bind.task.plan.node, "n1");
        h.inputs.send(Input::Shutdown).unwrap();
        drop(h.inputs);
        h.thread.join().unwrap();
    }

    #[test]
    fn the_annotation_source_reads_nodes_as_they_arrive() {
        use gantry_core::model::load::{
            CPU_UTILIZATION_ANNOTATION, MEMORY_UTILIZATION_ANNOTATION, METRICS_TIMESTAMP_ANNOTATION,
        };
        let settings = NodeLoadSettings {
            source: super::super::node_load::LoadSource::Annotations,
            ..Default::default()
        };
        let mut h = start_with(strict_load_aware(), settings);
        let stamp = k8s_openapi::jiff::Timestamp::now().to_string();
        let annotated = |name: &str, cpu: &str| {
            node(name)
                .capacity("2", "4Gi")
                .annotation(CPU_UTILIZATION_ANNOTATION, cpu)
                .annotation(MEMORY_UTILIZATION_ANNOTATION, "0.2")
                .annotation(METRICS_TIMESTAMP_ANNOTATION, &stamp)
                .build()
        };
        for input in [
            node_input(annotated("hot", "0.95")),
            node_input(annotated("cool", "0.1")),
            pod_input(pod("a").req("cpu", "100m").build()),
        ] {
            h.inputs.send(input).unwrap();
        }
        warm_and_lead(&h);
        let bind = next(&mut h.binds).expect("bound");
        assert_eq!(&*bind.task.plan.node, "cool");
        h.inputs.send(Input::Shutdown).unwrap();
        drop(h.inputs);
        h.thread.join().unwrap();
    }

    #[test]
    fn a_preemption_goes_to_its_task_and_the_nomination_with_the_condition() {
        let config = Config::parse(
            "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- plugins:
    multiPoint:
      enabled: [{name: DefaultPreemption}]
",
            &plugins::registry(),
        )
        .expect("config");
        let mut h = start_with(config, NodeLoadSettings::default());
        let mut terminating = (*pod("leaving").req("cpu", "1").on("n1").build()).clone();
        terminating.terminating = true;
        let mut marked = (*pod("marked").req("cpu", "1").on("n1").build()).clone();
        marked.preempted_by_scheduler = true;
        send(
            &h,
            [
                node_input(node("n1").capacity("3", "4Gi").build()),
                pod_input(pod("low").req("cpu", "1").on("n1").build()),
                pod_input(Arc::new(terminating)),
                pod_input(Arc::new(marked)),
                pod_input(pod("vip").req("cpu", "3").priority(100).build()),
            ],
        );
        warm_and_lead(&h);
        let request = next(&mut h.preemptions).expect("a preemption");
        assert_eq!(
            (request.preemptor.name.as_str(), &*request.node),
            ("vip", "n1")
        );
        let mut victims: Vec<(&str, bool)> = request
            .victims
            .iter()
            .map(|v| (v.pod.name.as_str(), v.marked))
            .collect();
        victims.sort();
        assert_eq!(
            victims,
            [("low", false), ("marked", true)],
            "the terminating victim is waited for"
        );
        match next(&mut h.records) {
            Some(Record::Failed {
                pod,
                nomination,
                nominated,
                message,
                ..
            }) => {
                assert_eq!(pod.name, "vip");
                assert_eq!(nomination, Nomination::Set("n1".into()));
                assert_eq!(nominated, None);
                assert_eq!(message, "0/1 nodes are available: 1 Insufficient cpu.");
            }
            other => panic!("expected a Failed record, got {other:?}"),
        }
        // Held while its evictions run; they failed: the task releases the preemptor, says
        // it is done, then has it tried again at once, and it preempts again.
        send(
            &h,
            [
                Input::Release {
                    namespace: "default".to_string(),
                    name: "vip".to_string(),
                },
                Input::PreemptionDone {
                    namespace: "default".to_string(),
                    name: "vip".to_string(),
                    evicted: false,
                },
                Input::Activate {
                    namespace: "default".to_string(),
                    name: "vip".to_string(),
                },
            ],
        );
        let again = next(&mut h.preemptions).expect("a second preemption");
        assert_eq!(again.preemptor.name, "vip");
        h.inputs.send(Input::Shutdown).unwrap();
        h.thread.join().unwrap();
    }

    #[test]
    fn a_follower_keeps_its_cache_but_does_not_schedule() {
        let mut h = start();
        h.inputs
            .send(node_input(node("n1").capacity("2", "4Gi").build()))
            .unwrap();
        h.inputs.send(pod_input(pod("a").build())).unwrap();
        h.inputs.send(Input::Synced("nodes")).unwrap();
        h.inputs.send(Input::Synced("pods")).unwrap();
        assert!(quiet(&mut h.binds));
        assert!(h.ready.load(Ordering::Relaxed), "ready while following");
        h.inputs.send(Input::Lead).unwrap();
        assert!(next(&mut h.binds).is_some(), "schedules once leading");
        h.inputs.send(Input::Shutdown).unwrap();
        // Shutdown waits for the binding in flight, which never finishes here; closing the
        // channel ends the thread at once.
        drop(h.inputs);
        h.thread.join().unwrap();
    }

    #[test]
    fn unschedulable_and_refused_pods_are_reported_once() {
        let mut h = start();
        for input in [
            node_input(node("n1").capacity("1", "4Gi").build()),
            pod_input(pod("big").req("cpu", "2").build()),
            pod_input(pod("small").req("cpu", "1").build()),
            Input::Synced("nodes"),
            Input::Synced("pods"),
            Input::Lead,
        ] {
            h.inputs.send(input).unwrap();
        }
        let bind = next(&mut h.binds).expect("small is bound");
        assert_eq!(bind.task.assumed.name, "small");
        let mut failed = Vec::new();
        while let Some(r) = next(&mut h.records) {
            if let Record::Failed {
                pod,
                message,
                condition_reason,
                ..
            } = r
            {
                failed.push((pod.name, condition_reason, message));
                break;
            }
        }
        assert_eq!(
            failed,
            [(
                "big".to_string(),
                CONDITION_UNSCHEDULABLE,
                "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.".to_string()
            )]
        );
        // "small" was deleted meanwhile: dropped, no retry, no record.
        h.inputs
            .send(Input::Bound(
                Box::new(bind),
                BindOutcome::Gone("not found".to_string()),
            ))
            .unwrap();
        assert!(
            quiet(&mut h.binds),
            "a binding of a pod gone is not retried"
        );
        h.inputs.send(Input::Shutdown).unwrap();
        h.thread.join().unwrap();
    }

    #[test]
    fn a_lost_watch_pauses_scheduling_until_it_has_relisted() {
        let mut h = start();
        send(&h, [node_input(node("n1").capacity("4", "4Gi").build())]);
        warm_and_lead(&h);
        send(
            &h,
            [
                Input::Stale("pods"),
                pod_input(pod("a").req("cpu", "1").build()),
            ],
        );
        assert!(quiet(&mut h.binds), "nothing is scheduled on a stale cache");
        assert!(h.ready.load(Ordering::Relaxed), "still ready");
        send(&h, [Input::Synced("pods")]);
        let bind = next(&mut h.binds).expect("scheduled once caught up");
        assert_eq!(bind.task.assumed.name, "a");
        h.inputs.send(Input::Shutdown).unwrap();
        drop(h.inputs);
        h.thread.join().unwrap();
    }

    #[test]
    fn scheduling_pauses_at_the_most_bindings_outstanding() {
        let mut h = start();
        let pods = MAX_OUTSTANDING + 10;
        let mut inputs = vec![node_input(
            node("n1")
                .capacity("10000", "10000Gi")
                .alloc("pods", &pods.to_string())
                .build(),
        )];
        inputs.extend((0..pods).map(|i| pod_input(pod(&format!("p{i}")).build())));
        send(&h, inputs);
        warm_and_lead(&h);
        let mut decided = Vec::new();
        while let Some(b) = next(&mut h.binds) {
            decided.push(b);
            if decided.len() == MAX_OUTSTANDING {
                break;
            }
        }
        assert_eq!(decided.len(), MAX_OUTSTANDING);
        assert!(quiet(&mut h.binds), "no more than MAX_OUTSTANDING decided");
        // One binding finishing is not enough to resume...
        let first = decided.pop().expect("one");
        send(&h, [Input::Bound(Box::new(first), BindOutcome::Bound)]);
        assert!(quiet(&mut h.binds), "paused until RESUME_OUTSTANDING");
        // ...but down to RESUME_OUTSTANDING is.
        let done = MAX_OUTSTANDING - 1 - RESUME_OUTSTANDING;
        for b in decided.drain(..done) {
            send(&h, [Input::Bound(Box::new(b), BindOutcome::Bound)]);
        }
        let mut resumed = 0;
        while next(&mut h.binds).is_some() {
            resumed += 1;
            if resumed == 10 {
                break;
            }
        }
        assert_eq!(
            resumed, 10,
            "the rest is decided once bindings have finished"
        );
        h.inputs.send(Input::Shutdown).unwrap();
        drop(h.inputs);
        h.thread.join().unwrap();
    }
}
