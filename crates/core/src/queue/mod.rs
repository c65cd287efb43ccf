//! The scheduling queue: active (ordered by the QueueSort plugin: priority, then arrival),
//! backoff (exponential, per pod), and unschedulable (parked until a cluster event that could
//! help, or flushed after a while). Time is passed in by the caller, never read here.

mod heap;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::framework::{
    ClusterChange, ClusterEvent, EventHint, Plugin, QueueSortPlugin, Status, may_help,
};
use crate::model::{PodInfo, PodKey};

use heap::Heap;

/// How long a pod may stay unschedulable before it is retried anyway (kube-scheduler's
/// `podMaxInUnschedulablePodsDuration`).
pub const MAX_UNSCHEDULABLE_DURATION: Duration = Duration::from_secs(5 * 60);

/// A pod in the queue, with its scheduling history.
#[derive(Debug, Clone)]
pub struct QueuedPod {
    /// The pod.
    pub pod: Arc<PodInfo>,
    /// Scheduling attempts so far (incremented when popped).
    pub attempts: u32,
    /// When the pod first entered the queue (for the scheduling SLI).
    pub first_queued: Duration,
    /// When it last entered the active queue.
    pub enqueued: Duration,
    /// Plugins that rejected it last time (to decide which events can help).
    pub unschedulable_plugins: BTreeSet<&'static str>,
    /// Why it is gated (PreEnqueue), if it is.
    pub gated: Option<Status>,
}

/// Which sub-queue a pod is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QueueName {
    /// Ready to be scheduled.
    Active,
    /// Waiting out its backoff.
    Backoff,
    /// Parked until something changes (includes gated pods).
    Unschedulable,
}

impl QueueName {
    /// The label value kube-scheduler's `scheduler_pending_pods{queue}` uses.
    pub fn metric_label(self) -> &'static str {
        match self {
            QueueName::Active => "active",
            QueueName::Backoff => "backoff",
            QueueName::Unschedulable => "unschedulable",
        }
    }
}

#[derive(Debug)]
struct Entry {
    queued: QueuedPod,
    queue: QueueName,
    /// When it leaves backoff.
    backoff_until: Duration,
    /// When it was parked as unschedulable.
    parked_at: Duration,
}

/// Event label of a pod entering the queue for the first time.
pub const EVENT_POD_ADD: &str = "UnschedulablePodAdd";
/// Event label of a parked pod that changed (e.g. lost its scheduling gates).
pub const EVENT_POD_UPDATE: &str = "UnschedulablePodUpdate";
/// Event label of a pod requeued after a failed attempt.
pub const EVENT_SCHEDULE_ATTEMPT_FAILURE: &str = "ScheduleAttemptFailure";
/// Event label of a pod whose backoff ended.
pub const EVENT_BACKOFF_COMPLETE: &str = "BackoffComplete";
/// Event label of a pod parked longer than [`MAX_UNSCHEDULABLE_DURATION`].
pub const EVENT_UNSCHEDULABLE_TIMEOUT: &str = "UnschedulableTimeout";
/// Event label of a waiting pod moved to the active queue on request
/// ([`SchedulingQueue::activate`]).
pub const EVENT_FORCE_ACTIVATE: &str = "ForceActivate";

/// The cluster events each plugin declared, by plugin name (see [`crate::framework::events`]).
pub type PluginEvents = HashMap<&'static str, &'static [EventHint]>;

/// The events every plugin of `plugins` declared.
pub fn plugin_events<'a>(plugins: impl IntoIterator<Item = &'a Arc<dyn Plugin>>) -> PluginEvents {
    plugins
        .into_iter()
        .map(|p| (p.name(), p.events()))
        .collect()
}

/// The scheduling queue.
pub struct SchedulingQueue {
    sort: Arc<dyn Plugin>,
    /// Which changes may help a pod each plugin rejected.
    events: PluginEvents,
    initial_backoff: Duration,
    max_backoff: Duration,
    entries: FxHashMap<Arc<str>, Entry>,
    active: Heap,
    /// Keys of the entries not in the active queue (backoff or unschedulable) and not
    /// gated, so that flushing and cluster events look only at the pods they may move.
    waiting: FxHashSet<Arc<str>>,
    /// Keys of the entries a PreEnqueue plugin keeps out of the active queue: only an update
    /// of the pod moves them, so that thousands of gated pods cost nothing per event.
    gated: FxHashSet<Arc<str>>,
    /// Keys of pods popped and not yet done, with the move-request counter at pop time.
    in_flight: FxHashMap<Arc<str>, u64>,
    /// Keys of pods held out of the active queue while their preemption is carried out
    /// ([`hold`](Self::hold)).
    held: FxHashSet<Arc<str>>,
    /// Incremented by every cluster event that moves pods.
    move_requests: u64,
    seq: u64,
    /// For the QueueSort plugins that keep groups together
    /// ([`QueueSortPlugin::group_label`]): the group of each pod in the active queue, and
    /// for each group the sequence number its pods there share (the first one's) and how
    /// many they are. A group whose last pod leaves the active queue starts afresh: one that
    /// failed goes behind the pods that came meanwhile.
    active_groups: HashMap<Arc<str>, (String, String)>,
    group_seqs: HashMap<(String, String), (u64, usize)>,
    /// Pods that entered each sub-queue, by event label, since the last
    /// [`take_incoming`](Self::take_incoming).
    incoming: HashMap<(QueueName, &'static str), u64>,
}

impl SchedulingQueue {
    /// A queue ordered by `sort` (a QueueSort plugin), moving parked pods back on the
    /// changes that `events` say may help them.
    pub fn new(
        sort: Arc<dyn Plugin>,
        events: PluginEvents,
        initial_backoff: Duration,
        max_backoff: Duration,
    ) -> Self {
        SchedulingQueue {
            sort,
            events,
            initial_backoff,
            max_backoff,
            entries: FxHashMap::default(),
            active: Heap::default(),
            waiting: FxHashSet::default(),
            gated: FxHashSet::default(),
            in_flight: FxHashMap::default(),
            held: FxHashSet::default(),
            move_requests: 0,
            seq: 0,
            active_groups: HashMap::new(),
            group_seqs: HashMap::new(),
            incoming: HashMap::new(),
        }
    }

    fn count_incoming(&mut self, queue: QueueName, event: &'static str) {
        *self.incoming.entry((queue, event)).or_default() += 1;
    }

    /// How many pods entered each sub-queue, by event label (kube-scheduler's
    /// `scheduler_queue_incoming_pods_total`), since the last call.
    pub fn take_incoming(&mut self) -> Vec<(QueueName, &'static str, u64)> {
        self.incoming
            .drain()
            .map(|((queue, event), n)| (queue, event, n))
            .collect()
    }

    fn push_active(&mut self, key: Arc<str>, now: Duration) {
        self.seq += 1;
        if !self.entries.contains_key(&key) {
            return;
        }
        self.remove_active(&key);
        let Some(e) = self.entries.get_mut(&key) else {
            return;
        };
        self.waiting.remove(&key);
        self.gated.remove(&key);
        e.queue = QueueName::Active;
        e.queued.enqueued = now;
        let pod = e.queued.pod.clone();
        let sort = self.sort.as_queue_sort();
        let group = self.group_key(&pod);
        let seq = match group {
            Some(group) => {
                let shared = self
                    .group_seqs
                    .entry(group.clone())
                    .or_insert((self.seq, 0));
                shared.1 += 1;
                let seq = shared.0;
                self.active_groups.insert(key.clone(), group);
                seq
            }
            None => self.seq,
        };
        self.active.push(key, seq, pod, |a, b| compare(sort, a, b));
    }

    /// The group `pod` belongs to (by the QueueSort plugin's group label), if any.
    fn group_key(&self, pod: &PodInfo) -> Option<(String, String)> {
        let label = self.sort.as_queue_sort()?.group_label()?;
        let group = pod.labels.get(label).filter(|g| !g.is_empty())?;
        Some((pod.namespace.clone(), group.to_string()))
    }

    /// `pod`'s group failed (scheduler-plugins' `MarkPodGroupScheduleFailure`): its pods in
    /// the active queue go behind those that came before the failure, so that a gang that
    /// cannot complete does not hold the head of the queue.
    pub fn demote_group_of(&mut self, pod: &PodInfo, now: Duration) {
        let Some(group) = self.group_key(pod) else {
            return;
        };
        if self.group_seqs.remove(&group).is_none() {
            return;
        }
        let members: Vec<Arc<str>> = self
            .active_groups
            .iter()
            .filter(|(_, g)| **g == group)
            .map(|(k, _)| k.clone())
            .collect();
        let sort = self.sort.as_queue_sort();
        for key in &members {
            self.active_groups.remove(key);
            self.active.remove(key, &|a, b| compare(sort, a, b));
        }
        for key in members {
            self.push_active(key, now);
        }
    }

    /// Files the key of an entry out of the active queue with the gated pods or with those
    /// that time and cluster events move.
    fn file_waiting(&mut self, key: Arc<str>, gated: bool) {
        if gated {
            self.waiting.remove(&key);
            self.gated.insert(key);
        } else {
            self.gated.remove(&key);
            self.waiting.insert(key);
        }
    }

    fn remove_active(&mut self, key: &str) {
        let sort = self.sort.as_queue_sort();
        if self.active.remove(key, &|a, b| compare(sort, a, b)) {
            self.left_active(key);
        }
    }

    /// `key` left the active queue: its group has one pod fewer there.
    fn left_active(&mut self, key: &str) {
        let Some(group) = self.active_groups.remove(key) else {
            return;
        };
        if let Some(shared) = self.group_seqs.get_mut(&group) {
            shared.1 -= 1;
            if shared.1 == 0 {
                self.group_seqs.remove(&group);
            }
        }
    }

    /// Adds a new pending pod (or replaces a queued one with the same key). `gated` is the
    /// status of the PreEnqueue plugin that keeps it out of the active queue, if any.
    pub fn add(&mut self, pod: Arc<PodInfo>, gated: Option<Status>, now: Duration) {
        let key: Arc<str> = Arc::from(pod.key());
        if self.in_flight.contains_key(&key) {
            return;
        }
        let is_gated = gated.is_some();
        let queue = if is_gated || self.held.contains(&key) {
            QueueName::Unschedulable
        } else {
            QueueName::Active
        };
        let first_queued = self
            .entries
            .get(&key)
            .map_or(now, |e| e.queued.first_queued);
        let attempts = self.entries.get(&key).map_or(0, |e| e.queued.attempts);
        self.remove_active(&key);
        self.entries.insert(
            key.clone(),
            Entry {
                queued: QueuedPod {
                    pod,
                    attempts,
                    first_queued,
                    enqueued: now,
                    unschedulable_plugins: BTreeSet::new(),
                    gated,
                },
                queue,
                backoff_until: now,
                parked_at: now,
            },
        );
        self.count_incoming(queue, EVENT_POD_ADD);
        if queue == QueueName::Active {
            self.push_active(key, now);
        } else {
            self.file_waiting(key, is_gated);
        }
    }

    /// A queued pod changed (e.g. gates removed, labels edited): requeue it if it may now
    /// fit. `gated` is the pod's PreEnqueue verdict, as for [`add`](Self::add). As in
    /// kube-scheduler (its `isPodUpdated`), a change of the pod's status alone (a condition
    /// or nominated node the scheduler wrote itself) does not wake a parked pod: it cannot
    /// make the pod fit, and waking it would retry, and a preemptor preempt again, before
    /// what it waits for has happened.
    pub fn update(&mut self, pod: Arc<PodInfo>, gated: Option<Status>, now: Duration) {
        let key: Arc<str> = Arc::from(pod.key());
        let Some(e) = self.entries.get_mut(&key) else {
            self.add(pod, gated, now);
            return;
        };
        let old = std::mem::replace(&mut e.queued.pod, pod.clone());
        let was_parked = e.queue == QueueName::Unschedulable;
        let was_gated = e.queued.gated.is_some();
        let ungated = gated.is_none();
        e.queued.gated = gated;
        let active = e.queue == QueueName::Active;
        if !active {
            self.file_waiting(key.clone(), !ungated);
        }
        if self.held.contains(&key) {
            return;
        }
        if active && ungated {
            let sort = self.sort.as_queue_sort();
            self.active.update(&key, pod, |a, b| compare(sort, a, b));
        } else if was_parked && ungated && (was_gated || !equal_but_status(&old, &pod)) {
            self.push_active(key, now);
            self.count_incoming(QueueName::Active, EVENT_POD_UPDATE);
        } else if active {
            self.remove_active(&key);
            if let Some(e) = self.entries.get_mut(&key) {
                e.queue = QueueName::Unschedulable;
            }
            self.file_waiting(key, true);
        }
    }

    /// Removes a pod (deleted, or bound by someone else). Returns whether it was queued or in
    /// flight.
    pub fn delete(&mut self, namespace: &str, name: &str) -> bool {
        let key = PodKey::new(namespace, name).text();
        self.remove_active(&key);
        self.waiting.remove(key.as_str());
        self.gated.remove(key.as_str());
        self.held.remove(key.as_str());
        let was_in_flight = self.in_flight.remove(key.as_str()).is_some();
        self.entries.remove(key.as_str()).is_some() || was_in_flight
    }

    /// True when the pod is queued or in flight.
    pub fn contains(&self, namespace: &str, name: &str) -> bool {
        let key = PodKey::new(namespace, name).text();
        self.entries.contains_key(key.as_str()) || self.in_flight.contains_key(key.as_str())
    }

    /// Moves pods whose backoff ended, and pods parked too long, to the active queue; a held
    /// pod whose backoff ended is parked instead (as kube-scheduler's PreEnqueue gate parks
    /// it), to wait for the event its preemption brings.
    pub fn flush(&mut self, now: Duration) {
        let held: Vec<Arc<str>> = self
            .held
            .iter()
            .filter(|k| {
                self.entries
                    .get(*k)
                    .is_some_and(|e| e.queue == QueueName::Backoff && e.backoff_until <= now)
            })
            .cloned()
            .collect();
        for key in held {
            if let Some(e) = self.entries.get_mut(&key) {
                e.queue = QueueName::Unschedulable;
                e.parked_at = now;
            }
        }
        let due: Vec<(Arc<str>, &'static str)> = self
            .waiting
            .iter()
            .filter(|k| !self.held.contains(*k))
            .filter_map(|k| self.entries.get(k).map(|e| (k, e)))
            .filter_map(|(k, e)| match e.queue {
                QueueName::Backoff if e.backoff_until <= now => {
                    Some((k.clone(), EVENT_BACKOFF_COMPLETE))
                }
                QueueName::Unschedulable
                    if now.saturating_sub(e.parked_at) >= MAX_UNSCHEDULABLE_DURATION =>
                {
                    Some((k.clone(), EVENT_UNSCHEDULABLE_TIMEOUT))
                }
                _ => None,
            })
            .collect();
        for (key, event) in due {
            self.push_active(key, now);
            self.count_incoming(QueueName::Active, event);
        }
    }

    /// Retries a parked pod without waiting for a cluster event, as kube-scheduler's
    /// `Activate` does, but within its backoff: to the active queue if its backoff is over,
    /// else to the backoff queue, so that a pod whose activation keeps coming (what is done
    /// for it keeps failing) is retried as its backoff allows, not over and over. A pod
    /// backing off already, gated, active, in flight or not queued is left alone. Returns
    /// whether the pod moved.
    pub fn activate(&mut self, namespace: &str, name: &str, now: Duration) -> bool {
        let key = PodKey::new(namespace, name).text();
        let Some((key, e)) = self.entries.get_key_value(key.as_str()) else {
            return false;
        };
        if e.queue != QueueName::Unschedulable
            || e.queued.gated.is_some()
            || self.held.contains(key)
        {
            return false;
        }
        let key = key.clone();
        if e.backoff_until > now {
            if let Some(e) = self.entries.get_mut(&key) {
                e.queue = QueueName::Backoff;
            }
            self.count_incoming(QueueName::Backoff, EVENT_FORCE_ACTIVATE);
        } else {
            self.push_active(key, now);
            self.count_incoming(QueueName::Active, EVENT_FORCE_ACTIVATE);
        }
        true
    }

    /// Holds a pod out of the active queue while its preemption is carried out, as
    /// kube-scheduler's DefaultPreemption does with asynchronous preemption (its PreEnqueue
    /// refuses a pod whose preemption goroutine runs): no cluster event, activation, backoff
    /// or timeout moves it until [`release`](Self::release), so that it is not tried again,
    /// and does not preempt again, while its victims are still being evicted.
    pub fn hold(&mut self, namespace: &str, name: &str) {
        let key: Arc<str> = Arc::from(PodKey::new(namespace, name).text());
        if let Some(e) = self.entries.get_mut(&key)
            && e.queue == QueueName::Active
        {
            e.queue = QueueName::Unschedulable;
            e.parked_at = e.queued.enqueued;
            self.remove_active(&key);
            self.waiting.insert(key.clone());
        }
        self.held.insert(key);
    }

    /// Ends a [`hold`](Self::hold): the pod stays where it is (parked, or backing off) and
    /// moves again as any pod does, on the next cluster event that may help it (the
    /// deletion of its last victim, which kube-scheduler also evicts only after lifting its
    /// gate). Returns whether it was held.
    pub fn release(&mut self, namespace: &str, name: &str) -> bool {
        self.held
            .remove(PodKey::new(namespace, name).text().as_str())
    }

    /// The next pod to schedule, after flushing what is due. The pod stays tracked as in
    /// flight until [`done`](Self::done), [`requeue_unschedulable`](Self::requeue_unschedulable)
    /// or [`requeue_backoff`](Self::requeue_backoff).
    pub fn pop(&mut self, now: Duration) -> Option<QueuedPod> {
        self.flush(now);
        let sort = self.sort.as_queue_sort();
        let key = self.active.pop(|a, b| compare(sort, a, b))?;
        self.left_active(&key);
        let mut entry = self.entries.remove(&key)?;
        entry.queued.attempts += 1;
        self.in_flight.insert(key, self.move_requests);
        Some(entry.queued)
    }

    /// The pod was scheduled (or dropped): forget it.
    pub fn done(&mut self, namespace: &str, name: &str) {
        self.in_flight
            .remove(PodKey::new(namespace, name).text().as_str());
    }

    fn backoff_for(&self, attempts: u32) -> Duration {
        let shift = attempts.saturating_sub(1).min(31);
        self.initial_backoff
            .saturating_mul(1u32 << shift)
            .min(self.max_backoff)
    }

    /// The pod did not fit: park it until an event that could help it, unless such an event
    /// already happened while it was being scheduled, in which case it backs off and retries.
    pub fn requeue_unschedulable(
        &mut self,
        mut queued: QueuedPod,
        plugins: BTreeSet<&'static str>,
        now: Duration,
    ) {
        let key: Arc<str> = Arc::from(queued.pod.key());
        let Some(popped_at) = self.in_flight.remove(&key) else {
            return; // deleted while in flight
        };
        queued.unschedulable_plugins = plugins;
        let moved_meanwhile = self.move_requests > popped_at;
        let backoff_until = now + self.backoff_for(queued.attempts);
        let queue = if moved_meanwhile {
            QueueName::Backoff
        } else {
            QueueName::Unschedulable
        };
        self.count_incoming(queue, EVENT_SCHEDULE_ATTEMPT_FAILURE);
        self.file_waiting(key.clone(), queued.gated.is_some());
        self.entries.insert(
            key,
            Entry {
                queued,
                queue,
                backoff_until,
                parked_at: now,
            },
        );
    }

    /// The attempt failed for a reason unrelated to the cluster (an error, a failed binding):
    /// retry after the pod's backoff.
    pub fn requeue_backoff(&mut self, queued: QueuedPod, now: Duration) {
        let key: Arc<str> = Arc::from(queued.pod.key());
        if self.in_flight.remove(&key).is_none() {
            return; // deleted while in flight
        }
        let backoff_until = now + self.backoff_for(queued.attempts);
        self.count_incoming(QueueName::Backoff, EVENT_SCHEDULE_ATTEMPT_FAILURE);
        self.file_waiting(key.clone(), queued.gated.is_some());
        self.entries.insert(
            key,
            Entry {
                queued,
                queue: QueueName::Backoff,
                backoff_until,
                parked_at: now,
            },
        );
    }

    /// The cluster changed: parked pods the change may help (by the events and hints of the
    /// plugins that rejected them; a plugin the queue was not told of is taken to be helped by
    /// anything) go to backoff (if still backing off) or active.
    pub fn on_event(&mut self, change: &ClusterChange<'_>, now: Duration) {
        self.move_requests += 1;
        let event = change.event();
        let movable: Vec<Arc<str>> = self
            .waiting
            .iter()
            .filter_map(|k| self.entries.get(k).map(|e| (k, e)))
            .filter(|(k, e)| {
                e.queue == QueueName::Unschedulable
                    && !self.held.contains(*k)
                    && (e.queued.unschedulable_plugins.is_empty()
                        || e.queued.unschedulable_plugins.iter().any(|p| {
                            self.events
                                .get(p)
                                .is_none_or(|hints| may_help(hints, change, &e.queued.pod))
                        }))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in movable {
            let e = self.entries.get_mut(&key).expect("listed above");
            if e.backoff_until > now {
                e.queue = QueueName::Backoff;
                self.count_incoming(QueueName::Backoff, event.label());
            } else {
                self.push_active(key, now);
                self.count_incoming(QueueName::Active, event.label());
            }
        }
    }

    /// True when some plugin registered `event` (an event nobody listens for need not be
    /// delivered).
    pub fn listens(&self, event: ClusterEvent) -> bool {
        self.events
            .values()
            .any(|hints| hints.iter().any(|h| h.event == event))
    }

    /// Number of pods in each sub-queue.
    pub fn len(&self, queue: QueueName) -> usize {
        if queue == QueueName::Active {
            return self.active.len();
        }
        self.waiting_entries().filter(|e| e.queue == queue).count()
    }

    /// Pods queued in total (not counting those in flight).
    pub fn total(&self) -> usize {
        self.entries.len()
    }

    /// Pods popped and not yet finished.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// When the earliest backoff or parking period ends, if any pod waits on time.
    pub fn next_wakeup(&self) -> Option<Duration> {
        self.waiting
            .iter()
            .filter_map(|k| Some((self.held.contains(k), self.entries.get(k)?)))
            .filter_map(|(held, e)| match e.queue {
                QueueName::Backoff => Some(e.backoff_until),
                QueueName::Unschedulable if !held => Some(e.parked_at + MAX_UNSCHEDULABLE_DURATION),
                _ => None,
            })
            .min()
    }

    /// When the earliest backoff ends, if any pod is backing off.
    pub fn next_backoff_expiry(&self) -> Option<Duration> {
        self.waiting
            .iter()
            .filter_map(|k| self.entries.get(k))
            .filter(|e| e.queue == QueueName::Backoff)
            .map(|e| e.backoff_until)
            .min()
    }

    /// Every queued pod, active or not, in the order they were first queued (for a
    /// snapshot of the scheduler's state).
    pub fn queued(&self) -> Vec<&QueuedPod> {
        let mut pods: Vec<&QueuedPod> = self.entries.values().map(|e| &e.queued).collect();
        pods.sort_by(|a, b| {
            (a.first_queued, &a.pod.namespace, &a.pod.name).cmp(&(
                b.first_queued,
                &b.pod.namespace,
                &b.pod.name,
            ))
        });
        pods
    }

    /// Every queued pod that is not active, with its sub-queue (for reports).
    pub fn waiting(&self) -> impl Iterator<Item = (&QueuedPod, QueueName)> {
        self.waiting_entries().map(|e| (&e.queued, e.queue))
    }

    /// Every entry out of the active queue, gated or not.
    fn waiting_entries(&self) -> impl Iterator<Item = &Entry> {
        self.waiting
            .iter()
            .chain(&self.gated)
            .filter_map(|k| self.entries.get(k))
    }
}

/// True when `a` and `b` differ in nothing but what is read from the pod's status.
fn equal_but_status(a: &PodInfo, b: &PodInfo) -> bool {
    if a == b {
        return true;
    }
    let stripped = |p: &PodInfo| PodInfo {
        start_time: None,
        nominated_node: None,
        preempted_by_scheduler: false,
        ..p.clone()
    };
    stripped(a) == stripped(b)
}

/// The QueueSort plugin's order; arrival order where the plugin is not one.
fn compare(
    sort: Option<&dyn QueueSortPlugin>,
    a: (&PodInfo, u64),
    b: (&PodInfo, u64),
) -> std::cmp::Ordering {
    match sort {
        Some(s) => s.compare(a.0, a.1, b.0, b.1),
        None => a.1.cmp(&b.1),
    }
}

#[cfg(test)]
mod tests;
