//! Watchers: one per kind the scheduler reads ([`gantry_core::kinds`], listed and watched
//! by [`super::reflector`]), each reading objects into the compact model as they arrive and
//! sending the changes to the scheduling thread. No full object is kept; a watcher
//! remembers only the keys of the objects it has reported, so that after a relist (an
//! expired resource version) it can report the objects that vanished meanwhile as deleted.
//! An object that cannot be read ([`Unreadable`]) is logged once, counted in
//! `gantry_unreadable_objects`, and given its kind's safe reading ([`Kind::unreadable`]):
//! it never stops the watcher.

use std::any::Any;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::mpsc::Sender;

use kube::api::Api;
use kube::runtime::watcher::Event;
use kube::{Client, Resource};
use prometheus_client::metrics::gauge::Gauge;

use super::driver::Input;
use super::lenient::{Read, Unreadable};
use super::metrics::Metrics;
use super::pod_group_status::{GroupChange, StatusFeed};
use super::readiness::Watchers;
use super::reflector::{self, Format, Selectors};
use gantry_core::cache::TrackedSet;
use gantry_core::config::ContentType;
use gantry_core::kinds::{self, Change, Kind, ObjectKey, PodGroups, ReadContext, Serving, Visitor};
pub use gantry_core::kinds::{LeanPod, POD_FIELD_SELECTOR};
use gantry_core::model::pod_group::PodGroup;

/// What every watcher shares: the API server, where its inputs go, where it says how it
/// stands (for `/readyz`), and the metrics it counts unreadable objects in.
#[derive(Clone)]
pub struct Watching {
    /// The API server.
    pub client: Client,
    /// The scheduling thread's inputs.
    pub inputs: Sender<Input>,
    /// Each watcher's standing.
    pub watchers: Arc<Watchers>,
    /// The metrics.
    pub metrics: Arc<Metrics>,
}

/// Starts a watcher for every kind of [`kinds::each`] that is read: those always read, and
/// the others only when the cache keeps what they feed (`tracked`). Each sends its changes
/// (and [`Input::Synced`] after its first list) to the scheduling thread; returned with
/// their names, which must all finish their first list before scheduling starts.
/// `profiles` are the scheduler names served: other schedulers' pending pods are not
/// reported. The kinds that have a protobuf reader travel as `content_type` says; the
/// others, few and rarely changing, as JSON. PodGroups also go to `status`, their status
/// writer (see [`super::pod_group_status`]), when there is one.
pub fn spawn_all(
    watching: &Watching,
    profiles: BTreeSet<String>,
    tracked: TrackedSet,
    content_type: ContentType,
    status: Option<StatusFeed>,
) -> (Vec<tokio::task::JoinHandle<()>>, Vec<&'static str>) {
    let mut spawner = Spawner {
        watching,
        context: Arc::new(ReadContext { profiles }),
        tracked,
        content_type,
        status,
        tasks: Vec::new(),
        names: Vec::new(),
    };
    kinds::each(&mut spawner);
    (spawner.tasks, spawner.names)
}

/// Starts the watchers of [`spawn_all`], kind by kind.
struct Spawner<'a> {
    watching: &'a Watching,
    context: Arc<ReadContext>,
    tracked: TrackedSet,
    content_type: ContentType,
    status: Option<StatusFeed>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    names: Vec<&'static str>,
}

impl Visitor for Spawner<'_> {
    fn visit<K: Kind>(&mut self)
    where
        K::Model: Debug,
    {
        if K::TRACKED.is_some_and(|part| !self.tracked.contains(part)) {
            return;
        }
        let format = match (self.content_type, K::PROTOBUF) {
            (ContentType::Protobuf, Some(decode)) => Format::Protobuf(decode),
            _ => Format::Json,
        };
        let watcher = Watcher::<K> {
            watching: self.watching.clone(),
            context: self.context.clone(),
            format,
            observer: self.status.clone().and_then(status_observer::<K>),
        };
        self.tasks.push(tokio::spawn(watcher.run()));
        self.names.push(K::NAME);
    }
}

/// Told of each object of its kind a watcher reads, beside the scheduling thread.
trait Observer<K: Kind>: Send + Sync {
    /// An object read.
    fn applied(&self, object: &K::Object, model: &K::Model);
    /// An object deleted, or no longer readable.
    fn gone(&self, key: &ObjectKey);
}

/// PodGroups' status writer, told of each PodGroup read.
struct GroupStatus(StatusFeed);

impl Observer<PodGroups> for GroupStatus {
    fn applied(&self, group: &PodGroup, model: &kinds::GroupReading) {
        let kinds::GroupReading::Group(model) = model else {
            return;
        };
        self.0.send(GroupChange::Applied {
            namespace: model.namespace.clone(),
            name: model.name.clone(),
            min_member: model.min_member,
            status: group.status.clone().unwrap_or_default(),
        });
    }

    fn gone(&self, key: &ObjectKey) {
        self.0.send(GroupChange::Deleted {
            namespace: key.namespace.clone(),
            name: key.name.clone(),
        });
    }
}

/// The observer of kind `K`: the status writer, for PodGroups; none for the other kinds.
fn status_observer<K: Kind>(feed: StatusFeed) -> Option<Box<dyn Observer<K>>> {
    let groups: Box<dyn Observer<PodGroups>> = Box::new(GroupStatus(feed));
    let any: Box<dyn Any> = Box::new(groups);
    any.downcast::<Box<dyn Observer<K>>>().ok().map(|o| *o)
}

/// The watcher of kind `K`.
struct Watcher<K: Kind> {
    watching: Watching,
    context: Arc<ReadContext>,
    format: Format<K::Object>,
    observer: Option<Box<dyn Observer<K>>>,
}

impl<K: Kind> Watcher<K>
where
    K::Model: Debug,
{
    /// Watches `K` where the API server serves it (asking first for the kinds it may not
    /// serve); stops once the scheduling thread is gone.
    async fn run(self) {
        let name = K::NAME;
        let inputs = self.watching.inputs.clone();
        match K::SERVING {
            Serving::Always => {}
            Serving::Discovered => {
                if !served::<K::Object>(&self.watching, name).await {
                    tracing::info!(
                        watcher = name,
                        "the API server does not serve {} {}: none are read",
                        K::Object::api_version(&()),
                        K::Object::kind(&())
                    );
                    let _ = inputs.send(Input::Object(kinds::not_served::<K>()));
                    let _ = inputs.send(Input::Synced(name));
                    return;
                }
            }
            Serving::CustomResource => {
                if !self.wait_until_served().await {
                    return;
                }
            }
        }
        self.watch().await;
    }

    /// Waits until the API server serves `K`, a custom resource: until then the watcher
    /// says so once, reports itself synced with none (the pods of a PodGroup then wait,
    /// refused at Permit with `PodGroup not found`, as in scheduler-plugins) and asks again
    /// every [`CUSTOM_RESOURCE_RECHECK`]. False when the scheduling thread is gone.
    async fn wait_until_served(&self) -> bool {
        let name = K::NAME;
        let mut absent = false;
        while !served::<K::Object>(&self.watching, name).await {
            if !absent {
                tracing::info!(
                    watcher = name,
                    "the API server does not serve {} {} (is the CRD installed?): none are read; asking again every {:?}",
                    K::Object::api_version(&()),
                    K::Object::kind(&()),
                    CUSTOM_RESOURCE_RECHECK
                );
                absent = true;
                if self.watching.inputs.send(Input::Synced(name)).is_err() {
                    return false;
                }
            }
            tokio::time::sleep(CUSTOM_RESOURCE_RECHECK).await;
        }
        if absent {
            tracing::info!(watcher = name, "{} are served now: watching them", name);
        }
        true
    }

    /// Lists and watches `K` (through [`reflector`]), turning its events into inputs.
    async fn watch(self) {
        let Watcher {
            watching,
            context,
            format,
            observer,
        } = self;
        let Watching {
            client,
            inputs,
            watchers,
            metrics,
        } = watching;
        let name = K::NAME;
        let api = Api::<K::Object>::all(client.clone());
        let mut state = Relist::new(metrics.unreadable_objects(name));
        let observer = observer.as_deref();
        reflector::run(
            client,
            api,
            Selectors::fields(K::FIELD_SELECTOR),
            format,
            name,
            &watchers,
            move |event| {
                state
                    .step::<K>(event, &context, observer)
                    .into_iter()
                    .all(|step| inputs.send(step.input::<K>(name)).is_ok())
            },
        )
        .await;
    }
}

/// How often a watcher of a custom resource asks again whether the API server serves it,
/// while it does not (the CRD may be installed after gantry starts).
const CUSTOM_RESOURCE_RECHECK: std::time::Duration = std::time::Duration::from_secs(60);

/// True when the API server serves `K` (API discovery of its group version; a group
/// version not found is not served). Other failures are retried with a backoff, logged as
/// `watcher`'s and told to the readiness check as its failed list.
async fn served<K: Resource<DynamicType = ()>>(watching: &Watching, watcher: &'static str) -> bool {
    let client = &watching.client;
    let group_version = K::api_version(&());
    let plural = K::plural(&());
    let mut delay = std::time::Duration::from_millis(200);
    loop {
        match client.list_api_group_resources(&group_version).await {
            Ok(list) => return list.resources.iter().any(|r| r.name == plural),
            Err(kube::Error::Api(e)) if e.code == 404 => return false,
            Err(e) => {
                tracing::warn!(watcher, error = %e, "API discovery failed; retrying");
                let failure = format!("API discovery failed: {e}");
                watching.watchers.list_failed(watcher, &failure);
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(std::time::Duration::from_secs(10));
            }
        }
    }
}

/// What a watcher's event comes to.
#[derive(Debug)]
enum Step<M> {
    /// A change for the scheduling thread.
    Change(Change<M>),
    /// The first list (or a relist) is complete.
    Synced,
    /// A relist began: what the watcher reported may be out of date until it ends.
    Stale,
}

impl<M> Step<M> {
    fn input<K: Kind<Model = M>>(self, name: &'static str) -> Input
    where
        M: Debug,
    {
        match self {
            Step::Change(change) => Input::Object(kinds::boxed::<K>(change)),
            Step::Synced => Input::Synced(name),
            Step::Stale => Input::Stale(name),
        }
    }
}

/// The keys a watcher reported, to turn a relist into deletions, and the objects it could
/// not read, so that each is logged once (not at every relist) and counted.
#[derive(Debug)]
struct Relist {
    known: HashSet<ObjectKey>,
    relisting: Option<HashSet<ObjectKey>>,
    synced: bool,
    /// The objects that cannot be read, by key, with why.
    unreadable: HashMap<ObjectKey, String>,
    /// How many there are (`gantry_unreadable_objects` of this watcher's resource).
    unreadable_gauge: Gauge,
}

impl Relist {
    fn new(unreadable_gauge: Gauge) -> Self {
        Relist {
            known: HashSet::new(),
            relisting: None,
            synced: false,
            unreadable: HashMap::new(),
            unreadable_gauge,
        }
    }

    fn step<K: Kind>(
        &mut self,
        event: Event<Read<K::Object>>,
        context: &ReadContext,
        observer: Option<&dyn Observer<K>>,
    ) -> Vec<Step<K::Model>> {
        let name = K::NAME;
        let mut out = Vec::new();
        match event {
            Event::Init => {
                self.relisting = Some(HashSet::new());
                if self.synced {
                    out.push(Step::Stale);
                }
            }
            Event::InitApply(obj) => {
                let key = read_key(&obj);
                if let Some(fresh) = &mut self.relisting {
                    fresh.insert(key.clone());
                }
                self.known.insert(key.clone());
                out.extend(self.applied::<K>(&obj, key, context, observer));
            }
            Event::InitDone => {
                if let Some(fresh) = self.relisting.take() {
                    let gone: Vec<ObjectKey> = self.known.difference(&fresh).cloned().collect();
                    if !gone.is_empty() {
                        tracing::info!(watcher = name, vanished = gone.len(), "relisted");
                    }
                    for key in gone {
                        self.unreadable.remove(&key);
                        out.push(deleted(key, observer));
                    }
                    self.known = fresh;
                    self.count_unreadable();
                }
                if !self.synced {
                    self.synced = true;
                    tracing::info!(watcher = name, objects = self.known.len(), "listed");
                }
                out.push(Step::Synced);
            }
            Event::Apply(obj) => {
                let key = read_key(&obj);
                self.known.insert(key.clone());
                out.extend(self.applied::<K>(&obj, key, context, observer));
            }
            Event::Delete(obj) => {
                let key = read_key(&obj);
                self.known.remove(&key);
                if self.unreadable.remove(&key).is_some() {
                    self.count_unreadable();
                }
                out.push(deleted(key, observer));
            }
        }
        out
    }

    /// The change for an object listed or changed, read or not.
    fn applied<K: Kind>(
        &mut self,
        obj: &Read<K::Object>,
        key: ObjectKey,
        context: &ReadContext,
        observer: Option<&dyn Observer<K>>,
    ) -> Option<Step<K::Model>> {
        let name = K::NAME;
        match obj {
            Read::Object(obj) => match K::read(obj, context) {
                Ok(model) => {
                    if self.unreadable.remove(&key).is_some() {
                        tracing::info!(watcher = name, object = %key, "readable again");
                        self.count_unreadable();
                    }
                    let model = model?;
                    if let Some(observer) = observer {
                        observer.applied(obj, &model);
                    }
                    Some(Step::Change(Change::Applied(model)))
                }
                Err(error) => {
                    let u = Unreadable {
                        namespace: Some(key.namespace.clone()).filter(|ns| !ns.is_empty()),
                        name: key.name.clone(),
                        resource_version: obj.meta().resource_version.clone(),
                        error,
                        ..Unreadable::default()
                    };
                    self.applied::<K>(&Read::Unreadable(u), key, context, observer)
                }
            },
            Read::Unreadable(u) => {
                if self.unreadable.get(&key) != Some(&u.error) {
                    tracing::warn!(
                        watcher = name,
                        object = %key,
                        error = %u.error,
                        "cannot read; given its kind's safe reading (see the docs' operations page)"
                    );
                    self.unreadable.insert(key.clone(), u.error.clone());
                    self.count_unreadable();
                }
                if u.name.is_empty() {
                    return None; // nothing can name it: nothing to forget or refuse
                }
                if let Some(observer) = observer {
                    observer.gone(&key);
                }
                K::unreadable(u, context).map(Step::Change)
            }
        }
    }

    fn count_unreadable(&self) {
        self.unreadable_gauge
            .set(i64::try_from(self.unreadable.len()).unwrap_or(i64::MAX));
    }
}

/// The step for an object deleted (or gone in a relist), told to the observer too.
fn deleted<K: Kind>(key: ObjectKey, observer: Option<&dyn Observer<K>>) -> Step<K::Model> {
    if let Some(observer) = observer {
        observer.gone(&key);
    }
    Step::Change(Change::Deleted(key))
}

/// The key of an object read, or of what is known of one that was not.
fn read_key<
    K: k8s_openapi::Metadata<Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
>(
    obj: &Read<K>,
) -> ObjectKey {
    match obj {
        Read::Object(obj) => ObjectKey::of(obj.metadata()),
        Read::Unreadable(u) => u.key(),
    }
}

#[cfg(test)]
#[path = "watch_fuzz_tests.rs"]
mod fuzz_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_core::kinds::{DisruptionBudgets, GroupReading, Nodes};
    use gantry_core::testing;
    use k8s_openapi::api::core::v1::Node;

    fn context() -> ReadContext {
        ReadContext {
            profiles: ["gantry".to_string()].into_iter().collect(),
        }
    }

    fn names(steps: &[Step<gantry_core::model::NodeModel>]) -> Vec<String> {
        steps
            .iter()
            .map(|s| match s {
                Step::Change(Change::Applied(n)) => format!("+{}", n.name),
                Step::Change(Change::Deleted(key)) => format!("-{key}"),
                Step::Synced => "synced".to_string(),
                Step::Stale => "stale".to_string(),
            })
            .collect()
    }

    fn node(name: &str) -> Read<Node> {
        Read::Object(testing::node(name).capacity("1", "1Gi").api())
    }

    fn step(r: &mut Relist, e: Event<Read<Node>>) -> Vec<Step<gantry_core::model::NodeModel>> {
        r.step::<Nodes>(e, &context(), None)
    }

    #[test]
    fn a_relist_reports_what_vanished() {
        let mut r = Relist::new(Gauge::default());
        let mut out = Vec::new();
        for e in [
            Event::Init,
            Event::InitApply(node("a")),
            Event::InitApply(node("b")),
            Event::InitDone,
            Event::Apply(node("c")),
            Event::Delete(node("a")),
        ] {
            out.extend(step(&mut r, e));
        }
        assert_eq!(names(&out), ["+a", "+b", "synced", "+c", "-a"]);
        // The watch breaks; meanwhile b is deleted and d added.
        let mut out = Vec::new();
        for e in [
            Event::Init,
            Event::InitApply(node("c")),
            Event::InitApply(node("d")),
            Event::InitDone,
        ] {
            out.extend(step(&mut r, e));
        }
        assert_eq!(
            names(&out),
            ["stale", "+c", "+d", "-b", "synced"],
            "stale from the relist's start until its end"
        );
    }

    #[test]
    fn a_malformed_node_is_absent_logged_once_and_counted_until_it_reads() {
        let Read::Object(mut bad) = node("bad") else {
            unreachable!()
        };
        bad.status
            .as_mut()
            .unwrap()
            .allocatable
            .as_mut()
            .unwrap()
            .insert(
                "cpu".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("lots".to_string()),
            );
        assert!(Nodes::read(&bad, &context()).is_err());
        let gauge = Gauge::default();
        let mut r = Relist::new(gauge.clone());
        let mut out = Vec::new();
        for e in [
            Event::Init,
            Event::InitApply(Read::Object(bad.clone())),
            Event::InitDone,
        ] {
            out.extend(step(&mut r, e));
        }
        assert_eq!(names(&out), ["-bad", "synced"]);
        assert_eq!(gauge.get(), 1);
        assert!(
            r.unreadable[&ObjectKey::parse("bad")].contains("cpu"),
            "{:?}",
            r.unreadable
        );
        // A relist meets it again: still one.
        for e in [
            Event::Init,
            Event::InitApply(Read::Object(bad)),
            Event::InitDone,
        ] {
            step(&mut r, e);
        }
        assert_eq!(gauge.get(), 1);
        out = step(&mut r, Event::Apply(node("bad")));
        assert_eq!(names(&out), ["+bad"]);
        assert_eq!(gauge.get(), 0, "readable again");
    }

    fn unreadable(namespace: Option<&str>, name: &str, error: &str) -> Unreadable {
        Unreadable {
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
            error: error.to_string(),
            ..Unreadable::default()
        }
    }

    #[test]
    fn an_object_that_does_not_decode_is_counted_and_forgotten_when_deleted_or_gone() {
        let gauge = Gauge::default();
        let mut r = Relist::new(gauge.clone());
        let mut out = Vec::new();
        for e in [
            Event::Init,
            Event::InitApply(node("a")),
            Event::InitApply(Read::Unreadable(unreadable(None, "b", "spec: bad"))),
            Event::InitApply(Read::Unreadable(unreadable(None, "", "metadata: bad"))),
            Event::InitDone,
        ] {
            out.extend(step(&mut r, e));
        }
        assert_eq!(names(&out), ["+a", "-b", "synced"]);
        assert_eq!(gauge.get(), 2);
        out = step(
            &mut r,
            Event::Delete(Read::Unreadable(unreadable(None, "b", "spec: bad"))),
        );
        assert_eq!(names(&out), ["-b"]);
        assert_eq!(gauge.get(), 1);
        for e in [Event::Init, Event::InitApply(node("a")), Event::InitDone] {
            step(&mut r, e);
        }
        assert_eq!(gauge.get(), 0, "the nameless one vanished in the relist");
    }

    #[test]
    fn an_unreadable_budget_is_treated_as_absent() {
        let bad: k8s_openapi::api::policy::v1::PodDisruptionBudget =
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "bad", "namespace": "shop"},
                "spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "Near"}]}}
            }))
            .unwrap();
        let mut r = Relist::new(Gauge::default());
        let out = r.step::<DisruptionBudgets>(Event::Apply(Read::Object(bad)), &context(), None);
        assert!(matches!(
            &out[..],
            [Step::Change(Change::Deleted(key))] if key.to_string() == "shop/bad"
        ));
    }

    #[test]
    fn a_pod_group_goes_to_the_scheduler_and_its_status_writer_or_is_unreadable() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let observer = status_observer::<PodGroups>(StatusFeed(tx)).expect("PodGroups'");
        let observer = Some(observer.as_ref());
        assert!(
            status_observer::<Nodes>(StatusFeed(tokio::sync::mpsc::unbounded_channel().0))
                .is_none()
        );
        let read = |json: serde_json::Value| -> PodGroup { serde_json::from_value(json).unwrap() };
        let good = read(serde_json::json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": "ml", "resourceVersion": "3"},
            "spec": {"minMember": 3},
            "status": {"phase": "Scheduling", "scheduled": 1}
        }));
        let mut r = Relist::new(Gauge::default());
        let out = r.step::<PodGroups>(Event::Apply(Read::Object(good)), &context(), observer);
        match &out[..] {
            [Step::Change(Change::Applied(GroupReading::Group(g)))] => {
                assert_eq!((g.full_name(), g.min_member), ("ml/train".to_string(), 3))
            }
            other => panic!("expected the group, got {other:?}"),
        }
        match rx.try_recv() {
            Ok(GroupChange::Applied {
                min_member, status, ..
            }) => {
                assert_eq!(
                    (min_member, status.phase.as_str(), status.scheduled),
                    (3, "Scheduling", 1)
                );
            }
            other => panic!("expected Applied, got {other:?}"),
        }
        let bad = read(serde_json::json!({
            "metadata": {"name": "bad", "namespace": "ml"},
            "spec": {"minMember": 2, "minResources": {"cpu": "lots"}}
        }));
        let out = r.step::<PodGroups>(Event::Apply(Read::Object(bad)), &context(), observer);
        match &out[..] {
            [Step::Change(Change::Applied(GroupReading::Unreadable(key, error)))] => {
                assert_eq!(key.to_string(), "ml/bad");
                assert!(error.contains("spec.minResources[cpu]"), "{error}");
            }
            other => panic!("expected an unreadable group, got {other:?}"),
        }
        assert!(matches!(rx.try_recv(), Ok(GroupChange::Deleted { name, .. }) if name == "bad"));
        // One that does not decode at all: the same.
        let raw: Box<serde_json::value::RawValue> = serde_json::from_str(
            r#"{"metadata":{"name":"huge","namespace":"ml"},"spec":{"minMember":2147483648}}"#,
        )
        .unwrap();
        let out = r.step::<PodGroups>(
            Event::Apply(super::super::lenient::read_json::<PodGroup>(&raw)),
            &context(),
            observer,
        );
        assert!(matches!(
            &out[..],
            [Step::Change(Change::Applied(GroupReading::Unreadable(key, error)))]
                if key.name == "huge" && error.starts_with("spec.minMember")
        ));
        assert!(matches!(rx.try_recv(), Ok(GroupChange::Deleted { name, .. }) if name == "huge"));
        let out = r.step::<PodGroups>(
            Event::Delete(Read::Unreadable(unreadable(Some("ml"), "train", ""))),
            &context(),
            observer,
        );
        assert!(matches!(&out[..], [Step::Change(Change::Deleted(key))] if key.name == "train"));
        assert!(matches!(rx.try_recv(), Ok(GroupChange::Deleted { name, .. }) if name == "train"));
    }
}
