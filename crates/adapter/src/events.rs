//! Events and pod conditions, written off the scheduling path: the scheduling thread hands
//! records to a task of its own, which coalesces them per pod and writes them with bounded
//! concurrency, so that slow or failing writes never delay a decision or a binding.
//!
//! Like kube-scheduler, a failed attempt records a `FailedScheduling` warning event
//! (events.k8s.io/v1) and sets the pod's `PodScheduled` condition to `False` with the same
//! message, and in the same patch the pod's `status.nominatedNodeName` when a preemption
//! nominated it to a node (or no longer does); a binding records a `Scheduled` event, and a
//! pod a preemption evicted a `Preempted` one. A failure repeated with the same message is
//! written once a minute at most, and an unchanged condition is not rewritten.
//!
//! Bindings come first: on a busy API server an event costs it as much as a binding, so
//! while bindings are outstanding the writer holds its records back, and writes only those
//! waiting longer than [`MAX_DEFERRAL`], one at a time. Once no binding is outstanding it
//! writes everything, [`MAX_CONCURRENT_WRITES`] at a time.
//!
//! A write that fails for a reason that may pass (the API server unreachable or overloaded)
//! is retried with backoff, for [`MAX_RETRY_AGE`] at most; an event keeps the name and time
//! it was given when recorded, so that a retry of an event whose first try was written after
//! all is refused as a duplicate instead of written twice. At most [`MAX_PENDING_PODS`] pods'
//! writes wait at once: a long outage cannot grow the writer's memory without limit.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::metrics::Metrics;
use gantry_core::framework::Nomination;
use gantry_core::model::PodKey;

/// The reason of the warning event for a failed attempt.
pub const REASON_FAILED_SCHEDULING: &str = "FailedScheduling";
/// The reason of the event for a bound pod.
pub const REASON_SCHEDULED: &str = "Scheduled";
/// The reason of the event for a pod a preemption evicted.
pub const REASON_PREEMPTED: &str = "Preempted";
/// The reason of the event for a pod placed beyond its node's allocatable (Overcommit).
pub const REASON_OVERCOMMITTED: &str = "Overcommitted";
/// The `PodScheduled` condition reason when no node fits.
pub const CONDITION_UNSCHEDULABLE: &str = "Unschedulable";
/// The `PodScheduled` condition reason when the attempt failed for another reason.
pub const CONDITION_SCHEDULER_ERROR: &str = "SchedulerError";
/// Longest event note the API server accepts.
const MAX_NOTE_BYTES: usize = 1024;
/// Writes in flight at once.
pub const MAX_CONCURRENT_WRITES: usize = 16;
/// Writes in flight at once while bindings are outstanding (of records already held back
/// for [`MAX_DEFERRAL`]).
const MAX_WRITES_WHILE_BINDING: usize = 1;
/// Longest a record is held back while bindings are outstanding.
pub const MAX_DEFERRAL: Duration = Duration::from_secs(30);
/// How often a writer holding records back checks whether the bindings are done.
const HOLD_RECHECK: Duration = Duration::from_millis(50);
/// Events kept per pod while waiting to be written.
const MAX_PENDING_EVENTS: usize = 4;
/// An identical failure event is not repeated sooner than this.
const REPEAT_INTERVAL: Duration = Duration::from_secs(60);
/// First wait before a failed write is retried; doubled per failure up to [`MAX_RETRY_WAIT`].
const FIRST_RETRY_WAIT: Duration = Duration::from_secs(1);
/// Longest wait between tries of a write.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(30);
/// A write still failing this long after its first failure is given up.
pub const MAX_RETRY_AGE: Duration = Duration::from_secs(15 * 60);
/// Most pods with writes waiting; beyond it the oldest pod's writes are given up.
pub const MAX_PENDING_PODS: usize = 50_000;

/// The pod an event or condition is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// uid (may be empty).
    pub uid: String,
}

impl PodRef {
    fn key(&self) -> (String, String) {
        (self.namespace.clone(), self.name.clone())
    }

    /// `namespace/name`, for logs.
    pub fn display(&self) -> PodKey<'_> {
        PodKey::new(&self.namespace, &self.name)
    }
}

/// What the scheduling thread asks to record.
#[derive(Debug, Clone)]
pub enum Record {
    /// An attempt failed: a `FailedScheduling` event, and `PodScheduled=False` with
    /// `condition_reason` and the same message.
    Failed {
        /// The pod.
        pod: PodRef,
        /// The profile that tried.
        profile: String,
        /// [`CONDITION_UNSCHEDULABLE`] or [`CONDITION_SCHEDULER_ERROR`].
        condition_reason: &'static str,
        /// kube-scheduler's message.
        message: String,
        /// What the attempt's PostFilter decided for the pod's nominated node.
        nomination: Nomination,
        /// The pod's `status.nominatedNodeName` as last read: a nomination it already shows
        /// is not written again, nor one it does not show cleared.
        nominated: Option<Arc<str>>,
    },
    /// The pod was bound: a `Scheduled` event.
    Scheduled {
        /// The pod.
        pod: PodRef,
        /// The profile that bound it.
        profile: String,
        /// The node.
        node: Arc<str>,
    },
    /// Something a plugin decided about a bound pod: a `Normal` event with `reason`.
    Note {
        /// The pod.
        pod: PodRef,
        /// The profile that bound it.
        profile: String,
        /// The event's reason ([`REASON_OVERCOMMITTED`]).
        reason: &'static str,
        /// What was decided.
        note: String,
    },
    /// The pod was evicted to make room for `preemptor` on `node`: a `Preempted` event
    /// regarding the pod, related to the preemptor. Written even once the pod is gone.
    Preempted {
        /// The evicted pod.
        pod: PodRef,
        /// The pod it made room for.
        preemptor: PodRef,
        /// The preemptor's profile.
        profile: String,
        /// The node.
        node: Arc<str>,
    },
    /// A binding of the pod started: a condition update still waiting is stale.
    Binding {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// The pod is gone: forget it.
    Forget {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
}

/// Where the scheduling thread sends records, and says how many bindings are outstanding;
/// neither blocks.
#[derive(Debug, Clone)]
pub struct Recorder {
    tx: mpsc::UnboundedSender<Record>,
    bindings: Arc<AtomicUsize>,
}

impl Recorder {
    /// Queues `record` for writing (dropped if the writer has stopped).
    pub fn record(&self, record: Record) {
        let _ = self.tx.send(record);
    }

    /// Bindings decided and not yet finished: while there are any, records wait.
    pub fn set_bindings_outstanding(&self, n: usize) {
        self.bindings.store(n, Ordering::Relaxed);
    }

    /// The bindings the records wait for, as last set.
    pub fn bindings_outstanding(&self) -> usize {
        self.bindings.load(Ordering::Relaxed)
    }

    /// A recorder and the receiving end of its records (for a writer, or a test).
    pub fn channel() -> (Recorder, mpsc::UnboundedReceiver<Record>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let bindings = Arc::new(AtomicUsize::new(0));
        (Recorder { tx, bindings }, rx)
    }
}

/// Starts the writer. It stops once every [`Recorder`] is dropped and all it holds is
/// written (or given up). `identity` is the `reportingInstance` of the events.
pub fn spawn(
    client: Client,
    identity: String,
    metrics: Arc<Metrics>,
) -> (Recorder, tokio::task::JoinHandle<()>) {
    let (recorder, rx) = Recorder::channel();
    let writer = Writer {
        client,
        identity,
        state: State::default(),
        bindings: recorder.bindings.clone(),
        metrics,
    };
    (recorder, tokio::spawn(writer.run(rx)))
}

#[derive(Debug, Clone)]
struct EventSpec {
    pod: PodRef,
    profile: String,
    type_: &'static str,
    reason: &'static str,
    action: &'static str,
    note: Note,
    /// The event's `related` object (a preemptor), if any.
    related: Option<Box<PodRef>>,
    /// When it was recorded: its `eventTime`, and part of its name.
    at: Timestamp,
}

/// An event's note; a binding's is written out only when the event is (thousands of
/// `Scheduled` events wait while a burst of bindings is outstanding).
#[derive(Debug, Clone)]
enum Note {
    Text(String),
    AssignedTo(Arc<str>),
}

impl EventSpec {
    fn note(&self) -> std::borrow::Cow<'_, str> {
        match &self.note {
            Note::Text(text) => text.into(),
            Note::AssignedTo(node) => format!(
                "Successfully assigned {}/{} to {node}",
                self.pod.namespace, self.pod.name
            )
            .into(),
        }
    }
}

#[derive(Debug, Clone)]
struct ConditionSpec {
    pod: PodRef,
    reason: &'static str,
    message: String,
    transition: Timestamp,
    /// `status.nominatedNodeName` to write in the same patch: set, cleared, or left alone.
    nomination: Nomination,
}

/// One pod's writes waiting. Kept small: during a burst every bound pod has one.
#[derive(Debug, Default)]
struct Pending {
    condition: Option<Box<ConditionSpec>>,
    events: VecDeque<EventSpec>,
    /// Set once a write of this pod's failed: how often, and when to try again.
    retry: Option<Box<Retry>>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.condition.is_none() && self.events.is_empty()
    }

    /// The pod the writes are about.
    fn key(&self) -> Option<(String, String)> {
        let pod = match (&self.condition, self.events.front()) {
            (Some(c), _) => &c.pod,
            (None, Some(e)) => &e.pod,
            (None, None) => return None,
        };
        Some(pod.key())
    }

    /// How many records this holds (for the count of those given up).
    fn records(&self) -> u64 {
        u64::from(self.condition.is_some()) + self.events.len() as u64
    }

    /// Not to be tried before a retry's time.
    fn waits_at(&self, now: Instant) -> Option<Instant> {
        self.retry
            .as_ref()
            .map(|r| r.not_before)
            .filter(|t| *t > now)
    }
}

/// The failed tries of one pod's writes.
#[derive(Debug, Clone)]
struct Retry {
    /// Failed tries so far.
    tries: u32,
    /// When the first try failed.
    since: Instant,
    /// When the next try may start.
    not_before: Instant,
}

#[derive(Debug, Default)]
struct Seen {
    /// The last failure event's note and when it was recorded.
    last_failure: Option<(String, Instant)>,
    /// The `PodScheduled=False` condition last recorded: reason, message, transition time.
    condition: Option<(&'static str, String, Timestamp)>,
    /// The last nomination recorded to be written (set or cleared; `Keep`: none): a
    /// clearing is written even while the pod's status, as last read, shows none yet, and
    /// a failed write of an older one is not retried.
    nomination: Nomination,
}

impl Seen {
    /// The nomination to write with a failure: as kube-scheduler's updatePod, one that
    /// changes what the pod shows (`nominated`, as last read, or the last one recorded).
    fn nomination_to_write(&mut self, asked: Nomination, nominated: Option<&str>) -> Nomination {
        let nomination = match asked {
            Nomination::Set(node) if nominated != Some(&*node) => Nomination::Set(node),
            Nomination::Clear
                if nominated.is_some() || matches!(self.nomination, Nomination::Set(_)) =>
            {
                Nomination::Clear
            }
            _ => Nomination::Keep,
        };
        if nomination != Nomination::Keep {
            self.nomination = nomination.clone();
        }
        nomination
    }

    /// The `PodScheduled=False` condition to write, `wanted` with its transition time kept
    /// from the condition last recorded; None when that one says the same and no
    /// nomination changes.
    fn condition_to_write(&mut self, mut wanted: ConditionSpec) -> Option<Box<ConditionSpec>> {
        match &self.condition {
            Some((r, m, _))
                if *r == wanted.reason
                    && *m == wanted.message
                    && wanted.nomination == Nomination::Keep =>
            {
                None
            }
            previous => {
                if let Some((_, _, t)) = previous {
                    wanted.transition = *t;
                }
                self.condition = Some((wanted.reason, wanted.message.clone(), wanted.transition));
                Some(Box::new(wanted))
            }
        }
    }
}

/// What is waiting to be written, coalesced per pod, and what was written.
#[derive(Debug, Default)]
struct State {
    pending: HashMap<(String, String), Pending>,
    /// The pods with pending writes, oldest first, with when their first write was queued.
    order: VecDeque<((String, String), Instant)>,
    /// Pods whose writes wait for a retry, by when it is due (an entry may be out of date:
    /// each is checked against `pending` when it comes due).
    retries: BinaryHeap<Reverse<(Instant, (String, String))>>,
    seen: HashMap<(String, String), Seen>,
    /// Records given up since the last [`State::take_dropped`].
    dropped: u64,
}

impl State {
    fn pending_for(&mut self, key: (String, String), now: Instant) -> &mut Pending {
        if !self.pending.contains_key(&key) {
            if self.pending.len() >= MAX_PENDING_PODS {
                self.drop_oldest();
            }
            self.order.push_back((key.clone(), now));
        }
        self.pending.entry(key).or_default()
    }

    /// Gives up the writes of the pod that has waited longest (the writer is full).
    fn drop_oldest(&mut self) {
        let oldest = std::iter::from_fn(|| self.order.pop_front().map(|(k, _)| k))
            .chain(std::iter::from_fn(|| {
                self.retries.pop().map(|Reverse((_, k))| k)
            }))
            .find_map(|k| self.pending.remove(&k));
        if let Some(p) = oldest {
            self.dropped += p.records();
        }
    }

    /// Records given up since the last call.
    fn take_dropped(&mut self) -> u64 {
        std::mem::take(&mut self.dropped)
    }

    /// A write failed and may succeed later: what was not written goes back, to be tried
    /// again after a backoff, joined with whatever was recorded for the pod meanwhile (whose
    /// condition, being newer, wins). Given up after [`MAX_RETRY_AGE`].
    fn failed(&mut self, mut unwritten: Pending, now: Instant) {
        let Some(key) = unwritten.key() else { return };
        let mut retry = unwritten.retry.take().map_or(
            Retry {
                tries: 0,
                since: now,
                not_before: now,
            },
            |r| *r,
        );
        retry.tries += 1;
        if now.saturating_duration_since(retry.since) >= MAX_RETRY_AGE {
            tracing::warn!(pod = %PodKey::new(&key.0, &key.1), tries = retry.tries, "events and conditions given up unwritten");
            self.dropped += unwritten.records();
            return;
        }
        let shift = (retry.tries - 1).min(16);
        let wait = FIRST_RETRY_WAIT
            .saturating_mul(1 << shift)
            .min(MAX_RETRY_WAIT);
        retry.not_before = now + wait;
        // A condition is written only while it is still the pod's latest (not after the pod
        // was bound, or failed again differently), and a nomination only while no other was
        // recorded since; a nomination still to be made goes with the latest condition.
        let seen = self.seen.get(&key);
        let current = seen.and_then(|s| s.condition.clone());
        let last_nomination = seen.map_or(Nomination::Keep, |s| s.nomination.clone());
        let condition = unwritten.condition.take().and_then(|mut c| {
            let (reason, message, transition) = current?;
            if c.nomination != last_nomination {
                c.nomination = Nomination::Keep;
            }
            if c.reason != reason || c.message != message {
                if c.nomination == Nomination::Keep {
                    return None;
                }
                (c.reason, c.message, c.transition) = (reason, message, transition);
            }
            Some(c)
        });
        if condition.is_none() && unwritten.events.is_empty() {
            return;
        }
        let due = retry.not_before;
        if !self.pending.contains_key(&key) && self.pending.len() >= MAX_PENDING_PODS {
            self.drop_oldest();
        }
        let pending = self.pending.entry(key.clone()).or_default();
        match (&mut pending.condition, condition) {
            (None, c) => pending.condition = c,
            // The newer condition wins; a nomination it leaves alone is still the older one's.
            (Some(newer), Some(older)) if newer.nomination == Nomination::Keep => {
                newer.nomination = older.nomination;
            }
            _ => {}
        }
        while let Some(e) = unwritten.events.pop_back() {
            if pending.events.len() == MAX_PENDING_EVENTS {
                self.dropped += 1;
                continue;
            }
            pending.events.push_front(e);
        }
        pending.retry = Some(Box::new(retry));
        self.retries.push(Reverse((due, key)));
    }

    /// When the earliest retry is due, if any waits.
    fn next_retry(&self) -> Option<Instant> {
        self.retries.peek().map(|Reverse((due, _))| *due)
    }

    /// Puts the pods whose retry is due at `now` first in line: theirs are the oldest writes.
    fn requeue_due_retries(&mut self, now: Instant) {
        while self.next_retry().is_some_and(|due| due <= now) {
            let Some(Reverse((_, key))) = self.retries.pop() else {
                break;
            };
            let since = self
                .pending
                .get(&key)
                .filter(|p| p.waits_at(now).is_none())
                .and_then(|p| p.retry.as_ref())
                .map(|r| r.since);
            if let Some(since) = since {
                self.order.push_front((key, since));
            }
        }
    }

    /// The pod's writes if they are due at `now` (not waiting for a retry) and not empty.
    fn take_ready(&mut self, key: &(String, String), now: Instant) -> Option<Pending> {
        if self.pending.get(key)?.waits_at(now).is_some() {
            // Stays: its retry is in `retries`.
            return None;
        }
        self.pending.remove(key).filter(|p| !p.is_empty())
    }

    fn merge(&mut self, record: Record, now: Instant, wall: Timestamp) {
        match record {
            Record::Failed {
                pod,
                profile,
                condition_reason,
                message,
                nomination,
                nominated,
            } => {
                let key = pod.key();
                let seen = self.seen.entry(key.clone()).or_default();
                let nomination = seen.nomination_to_write(nomination, nominated.as_deref());
                let repeat = seen.last_failure.as_ref().is_some_and(|(note, at)| {
                    *note == message && now.duration_since(*at) < REPEAT_INTERVAL
                });
                let event = (!repeat).then(|| {
                    seen.last_failure = Some((message.clone(), now));
                    EventSpec {
                        pod: pod.clone(),
                        profile,
                        type_: "Warning",
                        reason: REASON_FAILED_SCHEDULING,
                        action: "Scheduling",
                        note: Note::Text(message.clone()),
                        related: None,
                        at: wall,
                    }
                });
                let condition = seen.condition_to_write(ConditionSpec {
                    pod,
                    reason: condition_reason,
                    message,
                    transition: wall,
                    nomination,
                });
                if event.is_none() && condition.is_none() {
                    return;
                }
                let pending = self.pending_for(key, now);
                if let Some(mut c) = condition {
                    // A nomination still unwritten is kept unless this one changes it.
                    if c.nomination == Nomination::Keep
                        && let Some(older) = pending.condition.take()
                    {
                        c.nomination = older.nomination;
                    }
                    pending.condition = Some(c);
                }
                if let Some(e) = event {
                    push_event(pending, e);
                }
            }
            Record::Scheduled { pod, profile, node } => {
                let key = pod.key();
                if let Some(seen) = self.seen.get_mut(&key) {
                    seen.condition = None;
                }
                let pending = self.pending_for(key, now);
                pending.condition = None;
                push_event(
                    pending,
                    EventSpec {
                        pod,
                        profile,
                        type_: "Normal",
                        reason: REASON_SCHEDULED,
                        action: "Binding",
                        note: Note::AssignedTo(node),
                        related: None,
                        at: wall,
                    },
                );
            }
            Record::Note {
                pod,
                profile,
                reason,
                note,
            } => {
                let pending = self.pending_for(pod.key(), now);
                push_event(
                    pending,
                    EventSpec {
                        pod,
                        profile,
                        type_: "Normal",
                        reason,
                        action: "Binding",
                        note: Note::Text(note),
                        related: None,
                        at: wall,
                    },
                );
            }
            Record::Preempted {
                pod,
                preemptor,
                profile,
                node,
            } => {
                let note = format!("Preempted by pod {} on node {node}", preemptor.uid);
                let pending = self.pending_for(pod.key(), now);
                push_event(
                    pending,
                    EventSpec {
                        pod,
                        profile,
                        type_: "Normal",
                        reason: REASON_PREEMPTED,
                        action: "Preempting",
                        note: Note::Text(note),
                        related: Some(Box::new(preemptor)),
                        at: wall,
                    },
                );
            }
            Record::Binding { namespace, name } => {
                let key = (namespace, name);
                if let Some(p) = self.pending.get_mut(&key) {
                    p.condition = None;
                }
                // Whether written or not, the condition is no longer the pod's latest: a
                // retry of it is not written, and the next failure is, even if it repeats.
                if let Some(seen) = self.seen.get_mut(&key) {
                    seen.condition = None;
                }
            }
            Record::Forget { namespace, name } => {
                let key = (namespace, name);
                if let Some(mut p) = self.pending.remove(&key) {
                    // A victim's `Preempted` event reports the deletion that made it go.
                    p.condition = None;
                    p.events.retain(|e| e.reason == REASON_PREEMPTED);
                    if !p.events.is_empty() {
                        self.pending.insert(key.clone(), p);
                    }
                }
                self.seen.remove(&key);
            }
        }
    }

    /// The next pod's pending writes due at `now`, oldest first.
    fn next(&mut self, now: Instant) -> Option<Pending> {
        self.requeue_due_retries(now);
        while let Some((key, _)) = self.order.pop_front() {
            if let Some(p) = self.take_ready(&key, now) {
                return Some(p);
            }
        }
        None
    }

    /// The next pod's pending writes if they have waited [`MAX_DEFERRAL`] at `now`.
    fn next_overdue(&mut self, now: Instant) -> Option<Pending> {
        self.requeue_due_retries(now);
        while let Some((key, since)) = self.order.front() {
            let live = self
                .pending
                .get(key)
                .is_some_and(|p| !p.is_empty() && p.waits_at(now).is_none());
            if live && now.saturating_duration_since(*since) < MAX_DEFERRAL {
                return None;
            }
            let (key, _) = self.order.pop_front()?;
            if live {
                return self.pending.remove(&key);
            }
        }
        None
    }

    /// What to write next: anything when no binding is outstanding (`busy` false), else only
    /// what waited too long.
    fn take(&mut self, busy: bool, now: Instant) -> Option<Pending> {
        if busy {
            self.next_overdue(now)
        } else {
            self.next(now)
        }
    }
}

/// Writes in flight at once.
fn write_limit(busy: bool) -> usize {
    if busy {
        MAX_WRITES_WHILE_BINDING
    } else {
        MAX_CONCURRENT_WRITES
    }
}

fn push_event(pending: &mut Pending, event: EventSpec) {
    if pending.events.len() == MAX_PENDING_EVENTS {
        pending.events.pop_front();
    }
    // Most pods have one event waiting: room for exactly one, not the default four.
    pending.events.reserve_exact(1);
    pending.events.push_back(event);
}

struct Writer {
    client: Client,
    identity: String,
    state: State,
    /// Bindings outstanding, as the scheduling thread last said.
    bindings: Arc<AtomicUsize>,
    metrics: Arc<Metrics>,
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Record>) {
        let mut writes = JoinSet::new();
        let mut open = true;
        loop {
            // Once the scheduling thread is gone, everything left is written at once.
            let busy = open && self.bindings.load(Ordering::Relaxed) > 0;
            let now = Instant::now();
            while writes.len() < write_limit(busy) {
                let Some(work) = self.state.take(busy, now) else {
                    break;
                };
                writes.spawn(write(self.client.clone(), self.identity.clone(), work));
            }
            let dropped = self.state.take_dropped();
            if dropped > 0 {
                self.metrics.records_dropped(dropped);
            }
            if !open && writes.is_empty() && self.state.pending.is_empty() {
                return;
            }
            let holding = busy && !self.state.pending.is_empty();
            // A retry that comes due can only start in a free write slot: while every slot is
            // taken, the end of a write wakes the loop instead (a due time in the past would
            // wake it over and over).
            let retry_at = self
                .state
                .next_retry()
                .filter(|_| writes.len() < write_limit(busy))
                .map(tokio::time::Instant::from_std);
            tokio::select! {
                record = rx.recv(), if open => match record {
                    Some(r) => self.state.merge(r, Instant::now(), Timestamp::now()),
                    None => open = false,
                },
                Some(done) = writes.join_next(), if !writes.is_empty() => {
                    if let Ok(unwritten) = done
                        && !unwritten.is_empty()
                    {
                        self.state.failed(unwritten, Instant::now());
                    }
                }
                () = tokio::time::sleep(HOLD_RECHECK), if holding => {}
                () = sleep_until(retry_at), if retry_at.is_some() => {}
            }
        }
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Writes one pod's condition and events; yields what failed for a reason that may pass,
/// to be tried again.
async fn write(client: Client, identity: String, work: Pending) -> Pending {
    let mut unwritten = Pending {
        retry: work.retry,
        ..Pending::default()
    };
    if let Some(c) = work.condition {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &c.pod.namespace);
        let patch = condition_patch(&c);
        let result = pods
            .patch_status(
                &c.pod.name,
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
            .map(drop);
        if judge(result, "PodScheduled condition", &c.pod) == Written::Later {
            unwritten.condition = Some(c);
        }
    }
    for e in work.events {
        let events: Api<Event> = Api::namespaced(client.clone(), &e.pod.namespace);
        let event = build_event(&e, &identity);
        let result = match events.create(&PostParams::default(), &event).await {
            // Written by an earlier try whose answer was lost.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            other => other.map(drop),
        };
        if judge(result, "event", &e.pod) == Written::Later {
            unwritten.events.push_back(e);
        }
    }
    unwritten
}

/// What became of a write.
#[derive(Debug, PartialEq, Eq)]
enum Written {
    /// Written, or never to be (the pod is gone, or the API server refused it for good).
    Settled,
    /// Failed for a reason that may pass: try again.
    Later,
}

/// Sorts a write's result, logging what is worth a line.
fn judge(result: Result<(), kube::Error>, what: &str, pod: &PodRef) -> Written {
    let pod = pod.display();
    match result {
        Ok(()) => Written::Settled,
        Err(kube::Error::Api(s)) if s.code == 404 => {
            tracing::debug!(%pod, "{what} not written: pod or namespace gone");
            Written::Settled
        }
        Err(kube::Error::Api(s)) if (400..500).contains(&s.code) && s.code != 429 => {
            tracing::warn!(%pod, code = s.code, error = %s.message, "{what} refused by the API server");
            Written::Settled
        }
        Err(e) => {
            tracing::debug!(%pod, error = %e, "cannot write {what} yet; retrying");
            Written::Later
        }
    }
}

/// The status patch (strategic merge) of a condition: `PodScheduled=False`, and the
/// nominated node when it changes (`null` clears it).
fn condition_patch(c: &ConditionSpec) -> serde_json::Value {
    let mut status = serde_json::json!({"conditions": [{
        "type": "PodScheduled",
        "status": "False",
        "reason": c.reason,
        "message": c.message,
        "lastProbeTime": null,
        "lastTransitionTime": Time(c.transition),
    }]});
    match &c.nomination {
        Nomination::Set(node) => status["nominatedNodeName"] = serde_json::json!(&**node),
        Nomination::Clear => status["nominatedNodeName"] = serde_json::Value::Null,
        Nomination::Keep => {}
    }
    serde_json::json!({ "status": status })
}

fn pod_reference(pod: &PodRef) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".to_string()),
        kind: Some("Pod".to_string()),
        namespace: Some(pod.namespace.clone()),
        name: Some(pod.name.clone()),
        uid: (!pod.uid.is_empty()).then(|| pod.uid.clone()),
        ..Default::default()
    }
}

fn build_event(e: &EventSpec, identity: &str) -> Event {
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{:x}", e.pod.name, e.at.as_nanosecond())),
            namespace: Some(e.pod.namespace.clone()),
            ..Default::default()
        },
        event_time: Some(MicroTime(e.at)),
        action: Some(e.action.to_string()),
        reason: Some(e.reason.to_string()),
        note: Some(truncate(&e.note(), MAX_NOTE_BYTES)),
        type_: Some(e.type_.to_string()),
        regarding: Some(pod_reference(&e.pod)),
        related: e.related.as_deref().map(pod_reference),
        reporting_controller: Some(e.profile.clone()),
        reporting_instance: Some(identity.to_string()),
        ..Default::default()
    }
}

/// `s` cut to at most `max` bytes, on a character boundary.
fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> PodRef {
        PodRef {
            namespace: "ns".to_string(),
            name: name.to_string(),
            uid: format!("uid-{name}"),
        }
    }

    fn failed(name: &str, message: &str) -> Record {
        nominating(name, message, Nomination::Keep, None)
    }

    fn nominating(
        name: &str,
        message: &str,
        nomination: Nomination,
        nominated: Option<&str>,
    ) -> Record {
        Record::Failed {
            pod: pod(name),
            profile: "gantry".to_string(),
            condition_reason: CONDITION_UNSCHEDULABLE,
            message: message.to_string(),
            nomination,
            nominated: nominated.map(Arc::from),
        }
    }

    #[test]
    fn failures_coalesce_per_pod_and_repeats_are_not_rewritten() {
        let mut s = State::default();
        let t0 = Instant::now();
        let w0 = Timestamp::now();
        s.merge(
            failed("a", "0/1 nodes are available: 1 Insufficient cpu."),
            t0,
            w0,
        );
        s.merge(
            failed("a", "0/2 nodes are available: 2 Insufficient cpu."),
            t0,
            w0,
        );
        let p = s.next(Instant::now()).expect("pending");
        assert_eq!(p.events.len(), 2, "both failures are recorded as events");
        let c = p.condition.expect("condition");
        assert_eq!(c.message, "0/2 nodes are available: 2 Insufficient cpu.");
        assert!(s.next(Instant::now()).is_none());
        // The same failure again, soon after: nothing to write.
        s.merge(
            failed("a", "0/2 nodes are available: 2 Insufficient cpu."),
            t0 + Duration::from_secs(5),
            w0,
        );
        assert!(s.next(Instant::now()).is_none());
        // A minute later the event is repeated, the unchanged condition is not.
        s.merge(
            failed("a", "0/2 nodes are available: 2 Insufficient cpu."),
            t0 + REPEAT_INTERVAL,
            w0,
        );
        let p = s.next(Instant::now()).expect("pending");
        assert_eq!(p.events.len(), 1);
        assert!(p.condition.is_none());
    }

    #[test]
    fn a_nomination_goes_with_the_condition_when_it_changes_what_the_pod_shows() {
        let mut s = State::default();
        let t0 = Instant::now();
        let w0 = Timestamp::from_second(1_000).unwrap();
        let msg = "0/1 nodes are available: 1 Insufficient cpu.";
        s.merge(
            nominating("a", msg, Nomination::Set("n1".into()), None),
            t0,
            w0,
        );
        let c = s.next(t0).unwrap().condition.unwrap();
        assert_eq!(c.nomination, Nomination::Set("n1".into()));
        assert_eq!(
            condition_patch(&c),
            serde_json::json!({"status": {
                "conditions": [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": msg, "lastProbeTime": null,
                    "lastTransitionTime": "1970-01-01T00:16:40Z",
                }],
                "nominatedNodeName": "n1",
            }})
        );
        // The same failure, the pod showing the nomination: nothing to write.
        let t1 = t0 + Duration::from_secs(1);
        s.merge(
            nominating("a", msg, Nomination::Set("n1".into()), Some("n1")),
            t1,
            w0,
        );
        assert!(s.next(t1).is_none());
        // Cleared: the unchanged condition is written again, to carry the clearing.
        s.merge(nominating("a", msg, Nomination::Clear, Some("n1")), t1, w0);
        let c = s.next(t1).unwrap().condition.unwrap();
        assert_eq!(c.nomination, Nomination::Clear);
        assert_eq!(c.transition, w0, "the condition did not change");
        assert_eq!(
            condition_patch(&c)["status"]["nominatedNodeName"],
            serde_json::Value::Null
        );
        // Nothing to clear: the pod shows none and none was recorded since.
        s.merge(nominating("a", msg, Nomination::Clear, None), t1, w0);
        assert!(s.next(t1).is_none());
    }

    #[test]
    fn a_nomination_recorded_but_not_yet_read_back_is_cleared_and_kept_through_coalescing() {
        let mut s = State::default();
        let t0 = Instant::now();
        let w0 = Timestamp::now();
        s.merge(
            nominating("a", "first", Nomination::Set("n1".into()), None),
            t0,
            w0,
        );
        // A newer failure that leaves the nomination alone keeps it in the write.
        s.merge(failed("a", "second"), t0, w0);
        let p = s.next(t0).unwrap();
        let c = p.condition.unwrap();
        assert_eq!(
            (c.message.as_str(), &c.nomination),
            ("second", &Nomination::Set("n1".into()))
        );
        // The pod does not show the nomination yet; a clearing is written all the same.
        s.merge(nominating("a", "second", Nomination::Clear, None), t0, w0);
        assert_eq!(
            s.next(t0).unwrap().condition.unwrap().nomination,
            Nomination::Clear
        );
        // A failed write of a nomination is retried with the newer condition recorded
        // meanwhile.
        s.merge(
            nominating("a", "third", Nomination::Set("n2".into()), None),
            t0,
            w0,
        );
        let p = s.next(t0).unwrap();
        s.merge(failed("a", "fourth"), t0, w0);
        s.failed(p, t0);
        let c = s.next(t0 + FIRST_RETRY_WAIT).unwrap().condition.unwrap();
        assert_eq!(
            (c.message.as_str(), &c.nomination),
            ("fourth", &Nomination::Set("n2".into()))
        );
    }

    #[test]
    fn a_preempted_event_names_the_preemptor_and_outlives_its_pod() {
        let mut s = State::default();
        let t0 = Instant::now();
        s.merge(failed("victim", "no"), t0, Timestamp::now());
        s.merge(
            Record::Preempted {
                pod: pod("victim"),
                preemptor: pod("vip"),
                profile: "gantry".to_string(),
                node: "n1".into(),
            },
            t0,
            Timestamp::now(),
        );
        s.merge(
            Record::Forget {
                namespace: "ns".to_string(),
                name: "victim".to_string(),
            },
            t0,
            Timestamp::now(),
        );
        let p = s.next(t0).expect("the Preempted event stays");
        assert!(p.condition.is_none());
        assert_eq!(p.events.len(), 1, "the FailedScheduling event is dropped");
        let e = build_event(&p.events[0], "host_1");
        assert_eq!(
            (
                e.type_.as_deref(),
                e.reason.as_deref(),
                e.action.as_deref(),
                e.note.as_deref()
            ),
            (
                Some("Normal"),
                Some(REASON_PREEMPTED),
                Some("Preempting"),
                Some("Preempted by pod uid-vip on node n1")
            )
        );
        assert_eq!(e.regarding.unwrap().name.as_deref(), Some("victim"));
        let related = e.related.unwrap();
        assert_eq!(
            (related.name.as_deref(), related.uid.as_deref()),
            (Some("vip"), Some("uid-vip"))
        );
        assert!(s.next(t0).is_none());
    }

    #[test]
    fn a_new_message_keeps_the_transition_time() {
        let mut s = State::default();
        let t0 = Instant::now();
        let w0 = Timestamp::from_second(1_000).unwrap();
        s.merge(failed("a", "first"), t0, w0);
        s.next(Instant::now());
        s.merge(
            failed("a", "second"),
            t0,
            Timestamp::from_second(2_000).unwrap(),
        );
        let c = s.next(Instant::now()).unwrap().condition.unwrap();
        assert_eq!((c.message.as_str(), c.transition), ("second", w0));
    }

    #[test]
    fn a_binding_drops_the_stale_condition_and_scheduled_clears_it() {
        let mut s = State::default();
        let t0 = Instant::now();
        let w0 = Timestamp::now();
        s.merge(failed("a", "no"), t0, w0);
        s.merge(
            Record::Binding {
                namespace: "ns".to_string(),
                name: "a".to_string(),
            },
            t0,
            w0,
        );
        let p = s.next(Instant::now()).unwrap();
        assert!(p.condition.is_none(), "stale condition dropped");
        assert_eq!(p.events.len(), 1, "the failure event stays");
        // The same failure later is written again: the condition never was.
        s.merge(failed("a", "no"), t0, w0);
        assert!(s.next(Instant::now()).unwrap().condition.is_some());
        s.merge(
            Record::Scheduled {
                pod: pod("a"),
                profile: "gantry".to_string(),
                node: "n1".into(),
            },
            t0,
            w0,
        );
        let p = s.next(Instant::now()).unwrap();
        assert_eq!(p.events[0].note(), "Successfully assigned ns/a to n1");
        assert_eq!(p.events[0].reason, REASON_SCHEDULED);
    }

    #[test]
    fn a_note_follows_the_scheduled_event() {
        let mut s = State::default();
        let t0 = Instant::now();
        let w0 = Timestamp::now();
        s.merge(
            Record::Scheduled {
                pod: pod("a"),
                profile: "gantry".to_string(),
                node: "n1".into(),
            },
            t0,
            w0,
        );
        s.merge(
            Record::Note {
                pod: pod("a"),
                profile: "gantry".to_string(),
                reason: REASON_OVERCOMMITTED,
                note: "cpu: 1300m committed of 1000m".to_string(),
            },
            t0,
            w0,
        );
        let p = s.next(Instant::now()).unwrap();
        assert_eq!(p.events.len(), 2);
        let e = &p.events[1];
        assert_eq!(
            (e.type_, e.reason, e.action, &*e.note()),
            (
                "Normal",
                REASON_OVERCOMMITTED,
                "Binding",
                "cpu: 1300m committed of 1000m"
            )
        );
    }

    #[test]
    fn forgetting_a_pod_drops_its_writes() {
        let mut s = State::default();
        let t0 = Instant::now();
        s.merge(failed("a", "no"), t0, Timestamp::now());
        s.merge(failed("b", "no"), t0, Timestamp::now());
        s.merge(
            Record::Forget {
                namespace: "ns".to_string(),
                name: "a".to_string(),
            },
            t0,
            Timestamp::now(),
        );
        let p = s.next(Instant::now()).unwrap();
        assert_eq!(p.events[0].pod.name, "b");
        assert!(s.next(Instant::now()).is_none());
        assert!(!s.seen.contains_key(&("ns".to_string(), "a".to_string())));
    }

    #[test]
    fn while_bindings_are_outstanding_only_overdue_records_are_written_one_at_a_time() {
        let mut s = State::default();
        let t0 = Instant::now();
        s.merge(failed("a", "no"), t0, Timestamp::now());
        s.merge(
            failed("b", "no"),
            t0 + Duration::from_secs(1),
            Timestamp::now(),
        );
        assert_eq!(write_limit(true), 1);
        assert_eq!(write_limit(false), MAX_CONCURRENT_WRITES);
        assert!(s.take(true, t0).is_none(), "held back while binding");
        let almost = t0 + MAX_DEFERRAL - Duration::from_millis(1);
        assert!(s.take(true, almost).is_none());
        let due = t0 + MAX_DEFERRAL;
        assert_eq!(s.take(true, due).unwrap().events[0].pod.name, "a");
        assert!(s.take(true, due).is_none(), "b waits a second longer");
        // No binding outstanding: b goes at once.
        assert_eq!(s.take(false, t0).unwrap().events[0].pod.name, "b");
        assert!(s.take(false, t0).is_none());
    }

    #[test]
    fn a_record_emptied_by_its_binding_does_not_block_the_next() {
        let mut s = State::default();
        let t0 = Instant::now();
        // A condition alone, dropped when the pod's binding starts: nothing left to write.
        s.merge(failed("a", "no"), t0, Timestamp::now());
        s.pending
            .get_mut(&("ns".to_string(), "a".to_string()))
            .unwrap()
            .events
            .clear();
        s.merge(
            Record::Binding {
                namespace: "ns".to_string(),
                name: "a".to_string(),
            },
            t0,
            Timestamp::now(),
        );
        s.merge(
            failed("b", "no"),
            t0 + Duration::from_secs(5),
            Timestamp::now(),
        );
        assert!(
            s.take(true, t0 + MAX_DEFERRAL).is_none(),
            "b is not due yet"
        );
        let due = t0 + Duration::from_secs(5) + MAX_DEFERRAL;
        assert_eq!(s.take(true, due).unwrap().events[0].pod.name, "b");
    }

    #[test]
    fn a_pod_forgotten_while_held_back_does_not_block_the_next() {
        let mut s = State::default();
        let t0 = Instant::now();
        s.merge(failed("a", "no"), t0, Timestamp::now());
        s.merge(failed("b", "no"), t0, Timestamp::now());
        s.merge(
            Record::Forget {
                namespace: "ns".to_string(),
                name: "a".to_string(),
            },
            t0,
            Timestamp::now(),
        );
        let p = s.take(true, t0 + MAX_DEFERRAL).unwrap();
        assert_eq!(p.events[0].pod.name, "b");
    }

    #[test]
    fn the_recorder_shares_the_outstanding_bindings_with_the_writer() {
        let (recorder, _rx) = Recorder::channel();
        recorder.set_bindings_outstanding(3);
        assert_eq!(recorder.bindings.load(Ordering::Relaxed), 3);
        recorder.clone().set_bindings_outstanding(0);
        assert_eq!(recorder.bindings.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn events_carry_what_kube_scheduler_writes() {
        let spec = EventSpec {
            pod: pod("web"),
            profile: "gantry".to_string(),
            type_: "Warning",
            reason: REASON_FAILED_SCHEDULING,
            action: "Scheduling",
            note: Note::Text("é".repeat(600)),
            related: None,
            at: Timestamp::from_second(1).unwrap(),
        };
        let e = build_event(&spec, "host_1");
        assert_eq!(e.metadata.name.as_deref(), Some("web.3b9aca00"));
        assert_eq!(e.note.as_ref().unwrap().len(), 1024);
        assert_eq!(e.reporting_controller.as_deref(), Some("gantry"));
        assert_eq!(e.reporting_instance.as_deref(), Some("host_1"));
        let regarding = e.regarding.unwrap();
        assert_eq!(regarding.uid.as_deref(), Some("uid-web"));
        assert_eq!(regarding.kind.as_deref(), Some("Pod"));
    }

    fn key(name: &str) -> (String, String) {
        ("ns".to_string(), name.to_string())
    }

    #[test]
    fn a_failed_write_is_retried_after_a_backoff_that_doubles() {
        let mut s = State::default();
        let t0 = Instant::now();
        s.merge(failed("a", "no"), t0, Timestamp::now());
        let p = s.next(t0).expect("pending");
        s.failed(p, t0);
        assert!(s.next(t0).is_none(), "waits for its retry");
        assert_eq!(s.next_retry(), Some(t0 + FIRST_RETRY_WAIT));
        let p = s.next(t0 + FIRST_RETRY_WAIT).expect("due");
        assert!(p.condition.is_some(), "the condition is still the latest");
        assert_eq!(p.events.len(), 1);
        let t1 = t0 + FIRST_RETRY_WAIT;
        s.failed(p, t1);
        assert_eq!(s.next_retry(), Some(t1 + 2 * FIRST_RETRY_WAIT));
        assert!(s.next(t1 + FIRST_RETRY_WAIT).is_none());
        assert!(s.next(t1 + 2 * FIRST_RETRY_WAIT).is_some());
    }

    #[test]
    fn a_retry_joins_what_was_recorded_meanwhile_and_a_stale_condition_is_dropped() {
        let mut s = State::default();
        let t0 = Instant::now();
        s.merge(failed("a", "first"), t0, Timestamp::now());
        let p = s.next(t0).expect("pending");
        // While the write is failing, the pod fails differently.
        s.merge(failed("a", "second"), t0, Timestamp::now());
        s.failed(p, t0);
        assert!(
            s.next(t0).is_none(),
            "the newer records wait with the retry"
        );
        let p = s.next(t0 + FIRST_RETRY_WAIT).expect("due");
        assert_eq!(p.condition.expect("condition").message, "second");
        let notes: Vec<_> = p.events.iter().map(|e| e.note().into_owned()).collect();
        assert_eq!(notes, ["first", "second"], "events keep their order");
        // A condition whose pod was bound meanwhile is not retried.
        s.merge(failed("b", "no"), t0, Timestamp::now());
        let mut p = s.next(t0).expect("pending");
        p.events.clear();
        s.merge(
            Record::Binding {
                namespace: "ns".to_string(),
                name: "b".to_string(),
            },
            t0,
            Timestamp::now(),
        );
        s.failed(p, t0);
        assert!(!s.pending.contains_key(&key("b")));
    }

    #[test]
    fn writes_failing_for_too_long_are_given_up_and_counted() {
        let mut s = State::default();
        let t0 = Instant::now();
        s.merge(failed("a", "no"), t0, Timestamp::now());
        let p = s.next(t0).expect("pending");
        s.failed(p, t0);
        let late = t0 + MAX_RETRY_AGE;
        let p = s.next(late).expect("due");
        s.failed(p, late);
        assert!(s.pending.is_empty());
        assert!(s.next(late + MAX_RETRY_WAIT).is_none());
        assert_eq!(s.take_dropped(), 2, "the condition and the event");
        assert_eq!(s.take_dropped(), 0);
    }

    #[test]
    fn the_writes_waiting_are_bounded_by_giving_up_the_oldest() {
        let mut s = State::default();
        let t0 = Instant::now();
        for i in 0..MAX_PENDING_PODS + 2 {
            s.merge(failed(&format!("p{i}"), "no"), t0, Timestamp::now());
        }
        assert_eq!(s.pending.len(), MAX_PENDING_PODS);
        assert_eq!(s.take_dropped(), 4, "two pods' condition and event");
        let first = s.next(t0).expect("pending");
        assert_eq!(first.events[0].pod.name, "p2");
    }
}
