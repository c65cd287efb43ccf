//! PodGroup status, written by gantry itself (in scheduler-plugins a controller of its own
//! does it): `phase` as that controller computes it, with `Scheduled` (once `minMember` pods
//! are bound, which its older versions had), the pods `scheduled` (bound), `running`,
//! `succeeded` and `failed`, and `scheduleStartTime`, when the group first left `Pending`.
//!
//! A task off the scheduling thread. It hears the PodGroups from their watcher
//! (in the watch module) and watches the pods that carry the group label itself, every phase
//! included: the scheduler's pod watcher leaves finished pods out, and a pod that finishes
//! looks to it as deleted. A group is looked at again only when it or one of its pods
//! changed, [`COALESCE`] after the first change (a burst of bindings is one write), and its
//! status is patched (merge patch of the `status` subresource) only when it differs from
//! what the API server holds. A write that fails for a reason that may pass is retried
//! [`MAX_ATTEMPTS`] times with backoff, then left until the group changes again; at most
//! [`MAX_CONCURRENT_WRITES`] are in flight. Only the leader writes; a standby keeps its
//! counts and writes what differs when it takes over.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher::Event;
use prost::Message;
use serde::Deserialize;
use serde::de::Deserializer;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::protobuf::pod::PodMembership;
use super::readiness::Watchers;
use super::reflector::{self, Format, Selectors};
use gantry_core::config::ContentType;
use gantry_core::model::pod_group::{POD_GROUP_LABEL, PodGroup, PodGroupStatus};

/// How long after a change a group's status is computed and written: the changes of a
/// burst (a group's pods bound one after another) make one write.
pub const COALESCE: Duration = Duration::from_millis(500);
/// Tries of one write, the first included, when it fails for a reason that may pass.
pub const MAX_ATTEMPTS: u32 = 5;
/// The first retry's delay; each next one doubles it.
const FIRST_RETRY: Duration = Duration::from_secs(1);
/// Writes in flight at once.
pub const MAX_CONCURRENT_WRITES: usize = 8;
/// The name of the member pods' watcher, in the log.
const MEMBERS: &str = "podgroup-members";

/// `status.phase` values.
const PENDING: &str = "Pending";
const SCHEDULING: &str = "Scheduling";
const SCHEDULED: &str = "Scheduled";
const RUNNING: &str = "Running";
const FINISHED: &str = "Finished";
const FAILED: &str = "Failed";

/// A PodGroup as its watcher saw it.
#[derive(Debug, Clone, PartialEq)]
pub enum GroupChange {
    /// Added or changed (and readable).
    Applied {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// `spec.minMember`, as the scheduler reads it.
        min_member: u32,
        /// `status`, as the API server holds it.
        status: PodGroupStatus,
    },
    /// Deleted, or no longer readable: its status is left alone.
    Deleted {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
}

/// Where the PodGroup watcher sends what it sees; never blocks.
#[derive(Debug, Clone)]
pub struct StatusFeed(pub(super) mpsc::UnboundedSender<GroupChange>);

impl StatusFeed {
    /// Hands `change` to the writer (dropped if it has stopped).
    pub fn send(&self, change: GroupChange) {
        let _ = self.0.send(change);
    }
}

/// Starts the writer and the watcher of the groups' pods (in `content_type`, as the
/// scheduler's pod watch); the writer writes only while
/// `leading` holds true. It stops once every [`StatusFeed`] is dropped.
pub fn spawn(
    client: Client,
    content_type: ContentType,
    leading: watch::Receiver<bool>,
) -> (StatusFeed, tokio::task::JoinHandle<()>) {
    let (feed, groups) = mpsc::unbounded_channel();
    let (pods_tx, pods) = mpsc::unbounded_channel();
    let members = tokio::spawn(watch_members(client.clone(), content_type, pods_tx));
    let writer = Writer {
        client,
        book: Book::default(),
        due: Due::default(),
        in_flight: HashSet::new(),
        members_synced: false,
    };
    let task = tokio::spawn(async move {
        writer.run(groups, pods, leading).await;
        members.abort();
    });
    (StatusFeed(feed), task)
}

/// Lists and watches the pods carrying [`POD_GROUP_LABEL`], in every phase, handing their
/// events to the writer.
async fn watch_members(
    client: Client,
    content_type: ContentType,
    out: mpsc::UnboundedSender<Event<GroupPod>>,
) {
    let api = Api::<GroupPod>::all(client.clone());
    let selectors = Selectors {
        fields: None,
        labels: Some(POD_GROUP_LABEL),
    };
    let format = match content_type {
        ContentType::Protobuf => Format::Protobuf(GroupPod::decode as fn(&[u8]) -> _),
        ContentType::Json => Format::Json,
    };
    // Status is no part of scheduling: this watcher's standing is not a readiness check.
    let standing = Watchers::default();
    reflector::run(
        client,
        api,
        selectors,
        format,
        MEMBERS,
        &standing,
        |event| {
            // A pod that cannot be read is not counted.
            match reflector::readable(event) {
                Some(event) => out.send(event).is_ok(),
                None => true,
            }
        },
    )
    .await;
}

/// A pod's phase, as the counts read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Phase {
    /// Pending, Unknown, or not reported yet.
    #[default]
    Other,
    Running,
    Succeeded,
    Failed,
}

/// A pod carrying the group label, as the writer reads it: its name, its group, whether it
/// is bound and its phase; everything else in it is skipped unread.
#[derive(Debug, Clone)]
pub struct GroupPod {
    /// Name, namespace and resourceVersion.
    metadata: ObjectMeta,
    /// The group its label names (none when the label is empty).
    group: Option<String>,
    /// Whether it has a node.
    bound: bool,
    phase: Phase,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawSpec {
    #[serde(default)]
    node_name: Option<String>,
}

#[derive(Deserialize, Default)]
struct RawStatus {
    #[serde(default)]
    phase: Option<String>,
}

#[derive(Deserialize)]
struct RawGroupPod {
    metadata: RawMeta,
    #[serde(default)]
    spec: Option<RawSpec>,
    #[serde(default)]
    status: Option<RawStatus>,
}

impl GroupPod {
    /// The pod with these fields of its object.
    fn new(
        meta: ObjectMeta,
        mut labels: BTreeMap<String, String>,
        node_name: Option<String>,
        phase: Option<&str>,
    ) -> GroupPod {
        let group = labels.remove(POD_GROUP_LABEL).filter(|g| !g.is_empty());
        let phase = match phase {
            Some("Running") => Phase::Running,
            Some("Succeeded") => Phase::Succeeded,
            Some("Failed") => Phase::Failed,
            _ => Phase::Other,
        };
        GroupPod {
            metadata: ObjectMeta {
                name: meta.name,
                namespace: meta.namespace,
                resource_version: meta.resource_version,
                ..ObjectMeta::default()
            },
            group,
            bound: node_name.is_some_and(|n| !n.is_empty()),
            phase,
        }
    }

    /// Reads a pod from its protobuf encoding, the few fields the writer needs only: the
    /// same encoding as the scheduler's own pod watch, which the API server then encodes
    /// once for both.
    pub fn decode(raw: &[u8]) -> Result<GroupPod, prost::DecodeError> {
        let pod = PodMembership::decode(raw)?;
        let mut meta = pod.metadata.unwrap_or_default();
        let labels = std::mem::take(&mut meta.labels);
        Ok(GroupPod::new(
            meta.into(),
            labels,
            pod.spec.and_then(|s| s.node_name),
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        ))
    }
}

impl<'de> Deserialize<'de> for GroupPod {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let RawGroupPod {
            metadata,
            spec,
            status,
        } = RawGroupPod::deserialize(deserializer)?;
        let meta = ObjectMeta {
            name: metadata.name,
            namespace: metadata.namespace,
            resource_version: metadata.resource_version,
            ..ObjectMeta::default()
        };
        Ok(GroupPod::new(
            meta,
            metadata.labels.unwrap_or_default(),
            spec.and_then(|s| s.node_name),
            status.as_ref().and_then(|s| s.phase.as_deref()),
        ))
    }
}

reflector::pod_view!(GroupPod);

/// (namespace, name).
type Key = (String, String);

/// The pods of one group, by state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Counts {
    pods: u32,
    bound: u32,
    running: u32,
    succeeded: u32,
    failed: u32,
}

impl Counts {
    fn add(&mut self, m: &Member, sign: i8) {
        let step = |n: &mut u32, on: bool| {
            if on {
                *n = if sign > 0 {
                    n.saturating_add(1)
                } else {
                    n.saturating_sub(1)
                };
            }
        };
        step(&mut self.pods, true);
        step(&mut self.bound, m.bound);
        step(&mut self.running, m.phase == Phase::Running);
        step(&mut self.succeeded, m.phase == Phase::Succeeded);
        step(&mut self.failed, m.phase == Phase::Failed);
    }
}

/// A member pod as counted.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Member {
    group: String,
    bound: bool,
    phase: Phase,
}

/// A PodGroup: what it needs, and its status as the API server last told (or as gantry
/// last wrote it).
#[derive(Debug, Clone)]
struct Group {
    min_member: u32,
    status: PodGroupStatus,
    /// Tries of the write under way or due.
    attempts: u32,
}

/// The groups, their members and their counts: what the writer knows, without I/O.
#[derive(Debug, Default)]
struct Book {
    groups: HashMap<Key, Group>,
    members: HashMap<Key, Member>,
    counts: HashMap<Key, Counts>,
    /// The member pods listed so far while a (re)list is under way.
    relisting: Option<HashSet<Key>>,
}

impl Book {
    /// Applies a PodGroup change; the group to look at again, if any.
    fn group(&mut self, change: GroupChange) -> Option<Key> {
        match change {
            GroupChange::Applied {
                namespace,
                name,
                min_member,
                status,
            } => {
                let key = (namespace, name);
                let attempts = self.groups.get(&key).map_or(0, |g| g.attempts);
                self.groups.insert(
                    key.clone(),
                    Group {
                        min_member,
                        status,
                        attempts,
                    },
                );
                Some(key)
            }
            GroupChange::Deleted { namespace, name } => {
                self.groups.remove(&(namespace, name));
                None
            }
        }
    }

    /// Applies a member pod's event; the groups to look at again.
    fn pod(&mut self, event: Event<GroupPod>) -> Vec<Key> {
        match event {
            Event::Init => {
                self.relisting = Some(HashSet::new());
                Vec::new()
            }
            Event::InitApply(pod) => {
                let key = pod_key(&pod);
                if let Some(fresh) = &mut self.relisting {
                    fresh.insert(key.clone());
                }
                self.set(key, pod_member(&pod))
            }
            Event::InitDone => {
                let Some(fresh) = self.relisting.take() else {
                    return Vec::new();
                };
                let gone: Vec<Key> = self
                    .members
                    .keys()
                    .filter(|k| !fresh.contains(*k))
                    .cloned()
                    .collect();
                gone.into_iter().flat_map(|k| self.set(k, None)).collect()
            }
            Event::Apply(pod) => self.set(pod_key(&pod), pod_member(&pod)),
            Event::Delete(pod) => self.set(pod_key(&pod), None),
        }
    }

    /// Records the pod `key` as `member` (or as gone); the groups whose counts changed.
    fn set(&mut self, key: Key, member: Option<Member>) -> Vec<Key> {
        let old = match &member {
            Some(m) => self.members.insert(key.clone(), m.clone()),
            None => self.members.remove(&key),
        };
        if old == member {
            return Vec::new();
        }
        let mut touched = Vec::with_capacity(2);
        if let Some(old) = old {
            let group = (key.0.clone(), old.group.clone());
            let counts = self.counts.entry(group.clone()).or_default();
            counts.add(&old, -1);
            if counts.pods == 0 {
                self.counts.remove(&group);
            }
            touched.push(group);
        }
        if let Some(new) = member {
            let group = (key.0.clone(), new.group.clone());
            self.counts.entry(group.clone()).or_default().add(&new, 1);
            if !touched.contains(&group) {
                touched.push(group);
            }
        }
        touched
    }

    /// The status group `key` should have, when it differs from what it has.
    fn wanted(&self, key: &Key, now: &str) -> Option<PodGroupStatus> {
        let group = self.groups.get(key)?;
        let counts = self.counts.get(key).copied().unwrap_or_default();
        let next = next_status(&group.status, group.min_member, counts, now);
        (next != group.status).then_some(next)
    }
}

fn pod_key(pod: &GroupPod) -> Key {
    (
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.name.clone().unwrap_or_default(),
    )
}

fn pod_member(pod: &GroupPod) -> Option<Member> {
    Some(Member {
        group: pod.group.clone()?,
        bound: pod.bound,
        phase: pod.phase,
    })
}

/// The status a group of `min_member` with pods `c` moves to from `current`, by the rules of
/// scheduler-plugins' PodGroup controller: `Finished` and `Failed` are final; else `Pending`
/// while fewer than `minMember` pods name the group, `Finished` once `minMember` succeeded,
/// `Failed` once one failed and the failed, running and succeeded make `minMember`,
/// `Running` once running and succeeded do, and, gantry's addition, `Scheduled` once
/// `minMember` are bound; `Scheduling` otherwise. `scheduleStartTime` is `now` the first
/// time the group leaves `Pending`.
fn next_status(current: &PodGroupStatus, min_member: u32, c: Counts, now: &str) -> PodGroupStatus {
    if current.phase == FINISHED || current.phase == FAILED {
        return current.clone();
    }
    let phase = if c.pods < min_member {
        PENDING
    } else if c.succeeded >= min_member {
        FINISHED
    } else if c.failed > 0 && c.failed + c.running + c.succeeded >= min_member {
        FAILED
    } else if c.running + c.succeeded >= min_member {
        RUNNING
    } else if c.bound >= min_member {
        SCHEDULED
    } else {
        SCHEDULING
    };
    let int = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
    let schedule_start_time = match &current.schedule_start_time {
        None if phase != PENDING => Some(now.to_string()),
        kept => kept.clone(),
    };
    PodGroupStatus {
        phase: phase.to_string(),
        scheduled: int(c.bound),
        running: int(c.running),
        succeeded: int(c.succeeded),
        failed: int(c.failed),
        schedule_start_time,
    }
}

/// A write's result: written, to try again, or settled otherwise (the group is gone, or the
/// API server refused the patch for good).
#[derive(Debug)]
enum Outcome {
    Written(PodGroupStatus),
    Retry,
    Settled,
}

/// The groups to look at, and when, in the order of their times: the writer looks only at
/// the first ones (those due soonest and not being written), so that an event costs it the
/// same with a thousand groups due as with one.
#[derive(Debug, Default)]
struct Due {
    at: BTreeMap<Key, Instant>,
    by_time: BTreeSet<(Instant, Key)>,
}

impl Due {
    /// Group `key` is to be looked at by `at`, unless it already is due (at whatever time).
    fn by(&mut self, key: Key, at: Instant) {
        if let std::collections::btree_map::Entry::Vacant(e) = self.at.entry(key.clone()) {
            e.insert(at);
            self.by_time.insert((at, key));
        }
    }

    /// Group `key` is to be looked at `at`, whenever it was due before.
    fn set(&mut self, key: Key, at: Instant) {
        if let Some(before) = self.at.insert(key.clone(), at) {
            self.by_time.remove(&(before, key.clone()));
        }
        self.by_time.insert((at, key));
    }

    /// The group due soonest of those `busy` does not hold, and its time. It skips only the
    /// busy groups due before it (at most the writes in flight).
    fn first(&self, busy: &HashSet<Key>) -> Option<(Instant, &Key)> {
        self.by_time
            .iter()
            .find(|(_, k)| !busy.contains(k))
            .map(|(at, k)| (*at, k))
    }

    fn remove(&mut self, key: &Key) {
        if let Some(at) = self.at.remove(key) {
            self.by_time.remove(&(at, key.clone()));
        }
    }
}

struct Writer {
    client: Client,
    book: Book,
    /// The groups to look at, and when.
    due: Due,
    in_flight: HashSet<Key>,
    /// The member pods' first list is in: before it the counts are partial.
    members_synced: bool,
}

impl Writer {
    async fn run(
        mut self,
        mut groups: mpsc::UnboundedReceiver<GroupChange>,
        mut pods: mpsc::UnboundedReceiver<Event<GroupPod>>,
        mut leading: watch::Receiver<bool>,
    ) {
        let mut writes: JoinSet<(Key, Outcome)> = JoinSet::new();
        let mut leading_open = true;
        loop {
            let now = Instant::now();
            let may_write = *leading.borrow() && self.members_synced;
            if may_write {
                self.start_due(now, &mut writes);
            }
            let next = self
                .due
                .first(&self.in_flight)
                .map(|(at, _)| at)
                .filter(|_| may_write && writes.len() < MAX_CONCURRENT_WRITES);
            tokio::select! {
                change = groups.recv() => match change {
                    Some(c) => {
                        if let Some(key) = self.book.group(c) {
                            self.soon(key, now);
                        }
                    }
                    None => return,
                },
                Some(event) = pods.recv() => {
                    if matches!(event, Event::InitDone) {
                        self.members_synced = true;
                    }
                    for key in self.book.pod(event) {
                        self.soon(key, now);
                    }
                }
                Some(done) = writes.join_next(), if !writes.is_empty() => {
                    if let Ok((key, outcome)) = done {
                        self.finished(key, outcome, Instant::now());
                    }
                }
                changed = leading.changed(), if leading_open => {
                    leading_open = changed.is_ok();
                }
                () = sleep_until(next), if next.is_some() => {}
            }
        }
    }

    /// Group `key` is to be looked at [`COALESCE`] from `now`, unless it already is sooner.
    fn soon(&mut self, key: Key, now: Instant) {
        if self.book.groups.contains_key(&key) {
            self.due.by(key, now + COALESCE);
        }
    }

    /// Starts the writes of the groups due by `now`, soonest first, as many as may be in
    /// flight; the due groups whose status is already right are done with.
    fn start_due(&mut self, now: Instant, writes: &mut JoinSet<(Key, Outcome)>) {
        let stamp = now_rfc3339();
        while writes.len() < MAX_CONCURRENT_WRITES {
            let key = match self.due.first(&self.in_flight) {
                Some((at, key)) if at <= now => key.clone(),
                _ => break,
            };
            self.due.remove(&key);
            let Some(status) = self.book.wanted(&key, &stamp) else {
                if let Some(g) = self.book.groups.get_mut(&key) {
                    g.attempts = 0;
                }
                continue;
            };
            if let Some(g) = self.book.groups.get_mut(&key) {
                g.attempts += 1;
            }
            self.in_flight.insert(key.clone());
            writes.spawn(write(self.client.clone(), key, status));
        }
    }

    fn finished(&mut self, key: Key, outcome: Outcome, now: Instant) {
        self.in_flight.remove(&key);
        let Some(group) = self.book.groups.get_mut(&key) else {
            return;
        };
        match outcome {
            Outcome::Written(status) => {
                group.status = status;
                group.attempts = 0;
            }
            Outcome::Retry if group.attempts < MAX_ATTEMPTS => {
                let delay = FIRST_RETRY * 2u32.pow(group.attempts.saturating_sub(1));
                self.due.set(key, now + delay);
            }
            Outcome::Retry | Outcome::Settled => {
                tracing::warn!(podgroup = %format!("{}/{}", key.0, key.1), attempts = group.attempts, "status not written; left until the group changes again");
                group.attempts = 0;
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Now, as a Kubernetes `Time` (whole seconds, UTC).
fn now_rfc3339() -> String {
    Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Patches the status of group `key` to `status`.
async fn write(client: Client, key: Key, status: PodGroupStatus) -> (Key, Outcome) {
    let api: Api<PodGroup> = Api::namespaced(client, &key.0);
    let patch = serde_json::json!({ "status": status });
    let result = api
        .patch_status(&key.1, &PatchParams::default(), &Patch::Merge(&patch))
        .await;
    let outcome = match result {
        Ok(_) => {
            tracing::debug!(podgroup = %format!("{}/{}", key.0, key.1), phase = %status.phase, scheduled = status.scheduled, "status written");
            Outcome::Written(status)
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Outcome::Settled,
        Err(e) if may_pass(&e) => {
            tracing::debug!(podgroup = %format!("{}/{}", key.0, key.1), error = %e, "status write failed; retrying");
            Outcome::Retry
        }
        Err(e) => {
            tracing::warn!(podgroup = %format!("{}/{}", key.0, key.1), error = %e, "status write refused");
            Outcome::Settled
        }
    };
    (key, outcome)
}

/// True for a failure that may pass: the API server unreachable, overloaded or failing.
fn may_pass(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use kube::Resource;

    use super::*;

    const NOW: &str = "2026-01-02T03:04:05Z";

    fn counts(pods: u32, bound: u32, running: u32, succeeded: u32, failed: u32) -> Counts {
        Counts {
            pods,
            bound,
            running,
            succeeded,
            failed,
        }
    }

    fn phase(current: &str, c: Counts) -> String {
        let current = PodGroupStatus {
            phase: current.to_string(),
            ..PodGroupStatus::default()
        };
        next_status(&current, 3, c, NOW).phase
    }

    #[test]
    fn the_phase_follows_the_controllers_rules_with_scheduled() {
        assert_eq!(phase("", counts(2, 0, 0, 0, 0)), PENDING);
        assert_eq!(phase("", counts(3, 0, 0, 0, 0)), SCHEDULING);
        assert_eq!(phase(SCHEDULING, counts(3, 2, 0, 0, 0)), SCHEDULING);
        assert_eq!(phase(SCHEDULING, counts(3, 3, 0, 0, 0)), SCHEDULED);
        assert_eq!(phase(SCHEDULED, counts(4, 3, 2, 1, 0)), RUNNING);
        assert_eq!(phase(RUNNING, counts(4, 4, 2, 0, 1)), FAILED);
        assert_eq!(phase(RUNNING, counts(4, 4, 0, 3, 1)), FINISHED);
        assert_eq!(phase(RUNNING, counts(2, 2, 2, 0, 0)), PENDING, "pods gone");
        assert_eq!(phase(FINISHED, counts(0, 0, 0, 0, 0)), FINISHED, "final");
        assert_eq!(phase(FAILED, counts(3, 3, 3, 0, 0)), FAILED, "final");
    }

    #[test]
    fn the_start_time_is_set_once_the_group_leaves_pending() {
        let pending = next_status(&PodGroupStatus::default(), 2, counts(1, 0, 0, 0, 0), NOW);
        assert_eq!(
            (
                pending.phase.as_str(),
                pending.schedule_start_time.as_deref()
            ),
            (PENDING, None)
        );
        let started = next_status(&pending, 2, counts(2, 1, 0, 0, 0), NOW);
        assert_eq!(started.schedule_start_time.as_deref(), Some(NOW));
        assert_eq!(started.scheduled, 1);
        let later = next_status(&started, 2, counts(2, 2, 0, 0, 0), "2030-01-01T00:00:00Z");
        assert_eq!(
            (later.phase.as_str(), later.schedule_start_time.as_deref()),
            (SCHEDULED, Some(NOW))
        );
    }

    fn pod(name: &str, group: Option<&str>, node: Option<&str>, phase: &str) -> GroupPod {
        let mut labels = serde_json::Map::new();
        if let Some(g) = group {
            labels.insert(POD_GROUP_LABEL.to_string(), g.into());
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml", "labels": labels,
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {"nodeName": node, "containers": [{"name": "a", "image": "a"}]},
            "status": {"phase": phase}
        }))
        .expect("pod")
    }

    fn applied(name: &str, min_member: u32) -> GroupChange {
        GroupChange::Applied {
            namespace: "ml".to_string(),
            name: name.to_string(),
            min_member,
            status: PodGroupStatus::default(),
        }
    }

    fn key(name: &str) -> Key {
        ("ml".to_string(), name.to_string())
    }

    #[test]
    fn counts_follow_pod_events_and_a_relist() {
        let mut book = Book::default();
        assert_eq!(book.group(applied("train", 2)), Some(key("train")));
        let mut touched = Vec::new();
        for e in [
            Event::Init,
            Event::InitApply(pod("a", Some("train"), Some("n1"), "Running")),
            Event::InitApply(pod("b", Some("train"), None, "Pending")),
            Event::InitApply(pod("c", Some(""), None, "Pending")),
            Event::InitDone,
        ] {
            touched.extend(book.pod(e));
        }
        assert_eq!(touched, [key("train"), key("train")]);
        assert_eq!(book.counts[&key("train")], counts(2, 1, 1, 0, 0));
        let wanted = book.wanted(&key("train"), NOW).expect("a change");
        assert_eq!((wanted.phase.as_str(), wanted.scheduled), (SCHEDULING, 1));
        // b is bound and finishes; a moves to another group.
        book.pod(Event::Apply(pod(
            "b",
            Some("train"),
            Some("n2"),
            "Succeeded",
        )));
        assert_eq!(book.counts[&key("train")], counts(2, 2, 1, 1, 0));
        assert_eq!(
            book.pod(Event::Apply(pod("a", Some("eval"), Some("n1"), "Running"))),
            [key("train"), key("eval")]
        );
        assert_eq!(book.counts[&key("train")], counts(1, 1, 0, 1, 0));
        // A relist without b: b is gone, and with it the group's counts.
        for e in [
            Event::Init,
            Event::InitApply(pod("a", Some("eval"), Some("n1"), "Running")),
            Event::InitDone,
        ] {
            book.pod(e);
        }
        assert!(!book.counts.contains_key(&key("train")));
        assert_eq!(book.counts[&key("eval")], counts(1, 1, 1, 0, 0));
        assert!(book.wanted(&key("eval"), NOW).is_none(), "no such PodGroup");
    }

    #[test]
    fn a_status_already_right_is_not_written_again() {
        let mut book = Book::default();
        book.group(applied("train", 1));
        book.pod(Event::Apply(pod("a", Some("train"), Some("n1"), "Pending")));
        let wanted = book.wanted(&key("train"), NOW).expect("a change");
        book.group(GroupChange::Applied {
            namespace: "ml".to_string(),
            name: "train".to_string(),
            min_member: 1,
            status: wanted,
        });
        assert!(book.wanted(&key("train"), "2030-01-01T00:00:00Z").is_none());
        book.group(GroupChange::Deleted {
            namespace: "ml".to_string(),
            name: "train".to_string(),
        });
        assert!(book.wanted(&key("train"), NOW).is_none());
    }

    #[test]
    fn due_groups_come_soonest_first_skipping_those_being_written() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let mut due = Due::default();
        due.by(key("b"), t + ms(2));
        due.by(key("a"), t + ms(3));
        // Already due: the earlier time stays.
        due.by(key("b"), t + ms(9));
        let none = HashSet::new();
        assert_eq!(due.first(&none), Some((t + ms(2), &key("b"))));
        let busy = HashSet::from([key("b")]);
        assert_eq!(due.first(&busy), Some((t + ms(3), &key("a"))));
        // A retry moves it later.
        due.set(key("b"), t + ms(5));
        assert_eq!(due.first(&none), Some((t + ms(3), &key("a"))));
        due.remove(&key("a"));
        assert_eq!(due.first(&none), Some((t + ms(5), &key("b"))));
        due.remove(&key("b"));
        assert_eq!(due.first(&none), None);
        assert!(due.by_time.is_empty() && due.at.is_empty());
    }

    #[test]
    fn a_group_pod_reads_its_group_node_and_phase_and_url() {
        let p = pod("a", Some("train"), Some("n1"), "Failed");
        assert_eq!(
            (p.group.as_deref(), p.bound, p.phase),
            (Some("train"), true, Phase::Failed)
        );
        assert_eq!(
            GroupPod::url_path(&(), Some("ml")),
            "/api/v1/namespaces/ml/pods"
        );
        assert_eq!(
            PodGroup::url_path(&(), Some("ml")),
            "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ml/podgroups"
        );
    }
}

#[cfg(test)]
mod protobuf_tests {
    use std::collections::BTreeMap;

    use prost::Message;

    use super::*;
    use crate::protobuf::meta::ObjectMeta as ProtoMeta;
    use crate::protobuf::pod::{
        Container, MembershipStatus, Pod as ProtoPod, PodSpec as ProtoSpec,
    };

    /// A whole pod as the API server encodes it, with `phase` in its status.
    fn encoded(labels: &[(&str, &str)], node: &str, phase: &str) -> Vec<u8> {
        let pod = ProtoPod {
            metadata: Some(ProtoMeta {
                name: Some("w-0".to_string()),
                namespace: Some("ml".to_string()),
                resource_version: Some("7".to_string()),
                labels: labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
                ..Default::default()
            }),
            spec: Some(ProtoSpec {
                containers: vec![Container {
                    name: Some("a".to_string()),
                    ..Default::default()
                }],
                // The API server writes string fields even when empty.
                node_name: Some(node.to_string()),
                ..Default::default()
            }),
            status: None,
        };
        let mut raw = pod.encode_to_vec();
        // A second `status` field merges into the first, as protobuf reads it.
        raw.extend(
            PodMembership {
                metadata: None,
                spec: None,
                status: Some(MembershipStatus {
                    phase: Some(phase.to_string()),
                }),
            }
            .encode_to_vec(),
        );
        raw
    }

    #[test]
    fn a_member_reads_from_protobuf_as_from_json() {
        let pod = GroupPod::decode(&encoded(
            &[(POD_GROUP_LABEL, "train"), ("app", "x")],
            "n1",
            "Running",
        ))
        .expect("decodes");
        assert_eq!(pod.group.as_deref(), Some("train"));
        assert!(pod.bound);
        assert_eq!(pod.phase, Phase::Running);
        assert_eq!(pod.metadata.name.as_deref(), Some("w-0"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("ml"));
        assert_eq!(pod.metadata.resource_version.as_deref(), Some("7"));

        let pending =
            GroupPod::decode(&encoded(&[(POD_GROUP_LABEL, "")], "", "Pending")).expect("decodes");
        assert_eq!(pending.group, None, "an empty label names no group");
        assert!(!pending.bound, "an empty nodeName is no node");
        assert_eq!(pending.phase, Phase::Other);
    }

    #[test]
    fn a_truncated_member_is_an_error() {
        let raw = encoded(&[(POD_GROUP_LABEL, "train")], "n1", "Failed");
        assert!(GroupPod::decode(&raw[..raw.len() / 2]).is_err());
    }
}
