//! Events and pod conditions, written off the scheduling path: the scheduling thread hands
//! records to a task of its own, which coalesces them per pod and writes them with bounded
//! concurrency, so that slow or failing writes never delay a decision or a binding.
//!
//! Like kube-scheduler, a failed attempt records a `FailedScheduling` warning event
//! (events.k8s.io/v1) and sets the pod's `PodScheduled` condition to `False` with the same
//! message; a binding records a `Scheduled` event. A failure repeated with the same message
//! is written once a minute at most, and an unchanged condition is not rewritten.
//!
//! Bindings come first: on a busy API server an event costs it as much as a binding, so
//! while bindings are outstanding the writer holds its records back, and writes only those
//! waiting longer than [`MAX_DEFERRAL`], one at a time. Once no binding is outstanding it
//! writes everything, [`MAX_CONCURRENT_WRITES`] at a time.

use std::collections::{HashMap, VecDeque};
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

/// The reason of the warning event for a failed attempt.
pub const REASON_FAILED_SCHEDULING: &str = "FailedScheduling";
/// The reason of the event for a bound pod.
pub const REASON_SCHEDULED: &str = "Scheduled";
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

    /// A recorder and the receiving end of its records (for a writer, or a test).
    pub fn channel() -> (Recorder, mpsc::UnboundedReceiver<Record>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let bindings = Arc::new(AtomicUsize::new(0));
        (Recorder { tx, bindings }, rx)
    }
}

/// Starts the writer. It stops once every [`Recorder`] is dropped and all it holds is
/// written. `identity` is the `reportingInstance` of the events.
pub fn spawn(client: Client, identity: String) -> (Recorder, tokio::task::JoinHandle<()>) {
    let (recorder, rx) = Recorder::channel();
    let writer = Writer {
        client,
        identity,
        state: State::default(),
        bindings: recorder.bindings.clone(),
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
}

/// One pod's writes waiting. Kept small: during a burst every bound pod has one.
#[derive(Debug, Default)]
struct Pending {
    condition: Option<Box<ConditionSpec>>,
    events: VecDeque<EventSpec>,
}

#[derive(Debug, Default)]
struct Seen {
    /// The last failure event's note and when it was recorded.
    last_failure: Option<(String, Instant)>,
    /// The `PodScheduled=False` condition last recorded: reason, message, transition time.
    condition: Option<(&'static str, String, Timestamp)>,
}

/// What is waiting to be written, coalesced per pod, and what was written.
#[derive(Debug, Default)]
struct State {
    pending: HashMap<(String, String), Pending>,
    /// The pods with pending writes, oldest first, with when their first write was queued.
    order: VecDeque<((String, String), Instant)>,
    seen: HashMap<(String, String), Seen>,
}

impl State {
    fn pending_for(&mut self, key: (String, String), now: Instant) -> &mut Pending {
        if !self.pending.contains_key(&key) {
            self.order.push_back((key.clone(), now));
        }
        self.pending.entry(key).or_default()
    }

    fn merge(&mut self, record: Record, now: Instant, wall: Timestamp) {
        match record {
            Record::Failed {
                pod,
                profile,
                condition_reason,
                message,
            } => {
                let key = pod.key();
                let seen = self.seen.entry(key.clone()).or_default();
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
                    }
                });
                let condition = match &seen.condition {
                    Some((r, m, _)) if *r == condition_reason && *m == message => None,
                    previous => {
                        let transition = previous.as_ref().map_or(wall, |(_, _, t)| *t);
                        seen.condition = Some((condition_reason, message.clone(), transition));
                        Some(Box::new(ConditionSpec {
                            pod,
                            reason: condition_reason,
                            message,
                            transition,
                        }))
                    }
                };
                if event.is_none() && condition.is_none() {
                    return;
                }
                let pending = self.pending_for(key, now);
                if let Some(c) = condition {
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
                    },
                );
            }
            Record::Binding { namespace, name } => {
                let key = (namespace, name);
                if let Some(p) = self.pending.get_mut(&key)
                    && p.condition.take().is_some()
                    && let Some(seen) = self.seen.get_mut(&key)
                {
                    // Never written: the next failure must be written even if it repeats.
                    seen.condition = None;
                }
            }
            Record::Forget { namespace, name } => {
                let key = (namespace, name);
                self.pending.remove(&key);
                self.seen.remove(&key);
            }
        }
    }

    /// The next pod's pending writes, oldest first.
    fn next(&mut self) -> Option<Pending> {
        while let Some((key, _)) = self.order.pop_front() {
            if let Some(p) = self.pending.remove(&key)
                && (p.condition.is_some() || !p.events.is_empty())
            {
                return Some(p);
            }
        }
        None
    }

    /// The next pod's pending writes if they have waited [`MAX_DEFERRAL`] at `now`.
    fn next_overdue(&mut self, now: Instant) -> Option<Pending> {
        while let Some((key, since)) = self.order.front() {
            let live = self
                .pending
                .get(key)
                .is_some_and(|p| p.condition.is_some() || !p.events.is_empty());
            if live && now.saturating_duration_since(*since) < MAX_DEFERRAL {
                return None;
            }
            let (key, _) = self.order.pop_front()?;
            let pending = self.pending.remove(&key);
            if live {
                return pending;
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
            self.next()
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
            if !open && writes.is_empty() && self.state.pending.is_empty() {
                return;
            }
            let holding = busy && !self.state.pending.is_empty();
            tokio::select! {
                record = rx.recv(), if open => match record {
                    Some(r) => self.state.merge(r, Instant::now(), Timestamp::now()),
                    None => open = false,
                },
                Some(_) = writes.join_next(), if !writes.is_empty() => {}
                () = tokio::time::sleep(HOLD_RECHECK), if holding => {}
            }
        }
    }
}

async fn write(client: Client, identity: String, work: Pending) {
    if let Some(c) = work.condition {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &c.pod.namespace);
        let patch = serde_json::json!({
            "status": {"conditions": [{
                "type": "PodScheduled",
                "status": "False",
                "reason": c.reason,
                "message": c.message,
                "lastProbeTime": null,
                "lastTransitionTime": Time(c.transition),
            }]}
        });
        if let Err(e) = pods
            .patch_status(
                &c.pod.name,
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
        {
            log_failure("PodScheduled condition", &c.pod, &e);
        }
    }
    for e in work.events {
        let events: Api<Event> = Api::namespaced(client.clone(), &e.pod.namespace);
        let event = build_event(&e, &identity, Timestamp::now());
        if let Err(err) = events.create(&PostParams::default(), &event).await {
            log_failure("event", &e.pod, &err);
        }
    }
}

fn log_failure(what: &str, pod: &PodRef, e: &kube::Error) {
    match e {
        kube::Error::Api(s) if s.code == 404 => {
            tracing::debug!(pod = %format!("{}/{}", pod.namespace, pod.name), "{what} not written: pod or namespace gone");
        }
        _ => {
            tracing::warn!(pod = %format!("{}/{}", pod.namespace, pod.name), error = %e, "cannot write {what}");
        }
    }
}

fn build_event(e: &EventSpec, identity: &str, now: Timestamp) -> Event {
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{:x}", e.pod.name, now.as_nanosecond())),
            namespace: Some(e.pod.namespace.clone()),
            ..Default::default()
        },
        event_time: Some(MicroTime(now)),
        action: Some(e.action.to_string()),
        reason: Some(e.reason.to_string()),
        note: Some(truncate(&e.note(), MAX_NOTE_BYTES)),
        type_: Some(e.type_.to_string()),
        regarding: Some(ObjectReference {
            api_version: Some("v1".to_string()),
            kind: Some("Pod".to_string()),
            namespace: Some(e.pod.namespace.clone()),
            name: Some(e.pod.name.clone()),
            uid: (!e.pod.uid.is_empty()).then(|| e.pod.uid.clone()),
            ..Default::default()
        }),
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
        Record::Failed {
            pod: pod(name),
            profile: "gantry".to_string(),
            condition_reason: CONDITION_UNSCHEDULABLE,
            message: message.to_string(),
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
        let p = s.next().expect("pending");
        assert_eq!(p.events.len(), 2, "both failures are recorded as events");
        let c = p.condition.expect("condition");
        assert_eq!(c.message, "0/2 nodes are available: 2 Insufficient cpu.");
        assert!(s.next().is_none());
        // The same failure again, soon after: nothing to write.
        s.merge(
            failed("a", "0/2 nodes are available: 2 Insufficient cpu."),
            t0 + Duration::from_secs(5),
            w0,
        );
        assert!(s.next().is_none());
        // A minute later the event is repeated, the unchanged condition is not.
        s.merge(
            failed("a", "0/2 nodes are available: 2 Insufficient cpu."),
            t0 + REPEAT_INTERVAL,
            w0,
        );
        let p = s.next().expect("pending");
        assert_eq!(p.events.len(), 1);
        assert!(p.condition.is_none());
    }

    #[test]
    fn a_new_message_keeps_the_transition_time() {
        let mut s = State::default();
        let t0 = Instant::now();
        let w0 = Timestamp::from_second(1_000).unwrap();
        s.merge(failed("a", "first"), t0, w0);
        s.next();
        s.merge(
            failed("a", "second"),
            t0,
            Timestamp::from_second(2_000).unwrap(),
        );
        let c = s.next().unwrap().condition.unwrap();
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
        let p = s.next().unwrap();
        assert!(p.condition.is_none(), "stale condition dropped");
        assert_eq!(p.events.len(), 1, "the failure event stays");
        // The same failure later is written again: the condition never was.
        s.merge(failed("a", "no"), t0, w0);
        assert!(s.next().unwrap().condition.is_some());
        s.merge(
            Record::Scheduled {
                pod: pod("a"),
                profile: "gantry".to_string(),
                node: "n1".into(),
            },
            t0,
            w0,
        );
        let p = s.next().unwrap();
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
        let p = s.next().unwrap();
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
        let p = s.next().unwrap();
        assert_eq!(p.events[0].pod.name, "b");
        assert!(s.next().is_none());
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
        };
        let e = build_event(&spec, "host_1", Timestamp::from_second(1).unwrap());
        assert_eq!(e.metadata.name.as_deref(), Some("web.3b9aca00"));
        assert_eq!(e.note.as_ref().unwrap().len(), 1024);
        assert_eq!(e.reporting_controller.as_deref(), Some("gantry"));
        assert_eq!(e.reporting_instance.as_deref(), Some("host_1"));
        let regarding = e.regarding.unwrap();
        assert_eq!(regarding.uid.as_deref(), Some("uid-web"));
        assert_eq!(regarding.kind.as_deref(), Some("Pod"));
    }
}
