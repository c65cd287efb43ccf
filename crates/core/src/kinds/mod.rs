//! The kinds of API object the scheduler reads, each declared once as a [`Kind`]: how its
//! objects are decoded (JSON, and protobuf where the API server sends them so), read into
//! the model, applied to the scheduler, and written back as API objects. The adapter's
//! watchers and scheduling thread, the simulator's loader and the snapshot writer take the
//! kinds from [`each`] and handle every one alike, as kube-rs's reflector handles any
//! `Resource`: a new kind is its model, its `Kind` and one line in [`each`].

mod dra;
mod node;
mod objects;
mod pod;
mod pod_group;
pub mod protobuf;
mod storage;
mod storage_objects;
mod workloads;

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::cache::{Cache, Tracked};
use crate::model::{NodeModel, PodInfo};
use crate::scheduler::Scheduler;

pub use dra::{DeviceClasses, ResourceClaims, ResourceSlices};
pub use node::Nodes;
pub use pod::{LeanPod, POD_FIELD_SELECTOR, PodReading, Pods, RefusedPod};
pub use pod_group::{GroupReading, PodGroups};
pub use storage::{
    Capacities, CsiDrivers, CsiNodes, PersistentVolumeClaims, PersistentVolumes, StorageClasses,
};
pub use workloads::{
    DisruptionBudgets, Namespaces, ReplicaSets, ReplicationControllers, Services, StatefulSets,
};

/// One kind of API object the scheduler reads.
pub trait Kind: 'static {
    /// The object as it is decoded from the API server (or the simulator's input).
    type Object: k8s_openapi::Resource
        + k8s_openapi::Metadata<Ty = ObjectMeta>
        + DeserializeOwned
        + Clone
        + Debug
        + Send
        + Sync
        + 'static;
    /// What the scheduler keeps of one.
    type Model: Send + 'static;

    /// The resource's plural, which also names its watcher (in `/readyz`, the logs and the
    /// metrics).
    const NAME: &'static str = <Self::Object as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    /// The part of the cache the kind feeds: the kind is read only when a plugin of some
    /// profile asks for that part; `None` for the kinds always read.
    const TRACKED: Option<Tracked>;
    /// Whether every API server serves the kind.
    const SERVING: Serving = Serving::Always;
    /// The reader of the kind's protobuf message, for the kinds the API server is asked to
    /// send in protobuf (`clientConnection.contentType`).
    const PROTOBUF: Option<ProtobufReader<Self::Object>> = None;
    /// The field selector the kind is listed and watched with: the objects the scheduler
    /// needs none of are left on the API server.
    const FIELD_SELECTOR: Option<&'static str> = None;
    /// Older `apiVersion`s whose objects have the same schema, read as this one (saved
    /// manifests the simulator reads).
    const OLDER_VERSIONS: &'static [&'static str] = &[];

    /// Reads an object into the model: `Ok(None)` when the scheduler keeps nothing of it, an
    /// error naming the field when the model cannot read it (the object is then
    /// [`Unreadable`]).
    fn read(object: &Self::Object, context: &ReadContext) -> Result<Option<Self::Model>, String>;

    /// The change an object that cannot be read makes: by default it is absent, so that
    /// nothing is placed by what it would have said.
    fn unreadable(object: &Unreadable, _context: &ReadContext) -> Option<Change<Self::Model>> {
        Some(Change::Deleted(object.key()))
    }

    /// Applies a change to the scheduler, through the front end that drives it.
    fn apply(change: Change<Self::Model>, target: &mut dyn Target, now: Duration);

    /// What the scheduler records when the API server does not serve the kind.
    fn not_served(_target: &mut dyn Target) {}

    /// Writes the objects of the kind the scheduler holds back as API objects, with what
    /// the scheduler reads of them (`gantry snapshot`).
    fn write(holding: &Holding<'_>, out: &mut Written);
}

/// Reads an object from its protobuf message (out of its envelope).
pub type ProtobufReader<O> = fn(&[u8]) -> Result<O, prost::DecodeError>;

/// Whether an API server serves a kind, and what the watcher does when it does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serving {
    /// Every supported Kubernetes serves it.
    Always,
    /// A server may not serve it (a group turned off, a version not served yet): API
    /// discovery first, and where it is not served there are none, said once.
    Discovered,
    /// A custom resource, served once its CRD is installed, which may happen after gantry
    /// starts: discovery is asked again every minute until it is.
    CustomResource,
}

/// What reading an object depends on beyond the object.
#[derive(Debug, Clone, Default)]
pub struct ReadContext {
    /// The scheduler names served (the profiles): other schedulers' pending pods are not
    /// the scheduler's business.
    pub profiles: BTreeSet<String>,
}

/// The namespace (empty for a cluster-scoped object) and name of an object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
}

impl ObjectKey {
    /// The key of an object.
    pub fn of(meta: &ObjectMeta) -> ObjectKey {
        ObjectKey {
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
        }
    }

    /// The key written `namespace/name`, or `name` for a cluster-scoped object.
    pub fn parse(key: &str) -> ObjectKey {
        match key.split_once('/') {
            Some((namespace, name)) => ObjectKey {
                namespace: namespace.to_string(),
                name: name.to_string(),
            },
            None => ObjectKey {
                namespace: String::new(),
                name: key.to_string(),
            },
        }
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

/// What is known of an object that does not decode: its names, read on their own, and why
/// the rest cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Unreadable {
    /// `metadata.namespace`, for a namespaced object.
    pub namespace: Option<String>,
    /// `metadata.name` (empty when even that cannot be read).
    pub name: String,
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<String>,
    /// `spec.nodeName`, for a pod (whether it is bound).
    pub node_name: Option<String>,
    /// `spec.schedulerName`, for a pod.
    pub scheduler_name: Option<String>,
    /// What is wrong, naming the field: `spec.minMember: invalid value: ...`.
    pub error: String,
}

impl Unreadable {
    /// The object's key.
    pub fn key(&self) -> ObjectKey {
        ObjectKey {
            namespace: self.namespace.clone().unwrap_or_default(),
            name: self.name.clone(),
        }
    }
}

/// A change of one object of a kind.
#[derive(Debug)]
pub enum Change<M> {
    /// Added or changed, as read.
    Applied(M),
    /// Gone.
    Deleted(ObjectKey),
}

/// What a kind's changes are applied to: the scheduler, through the front end driving it,
/// which adds what only it can do (date a node's load annotation against its clock, tell
/// the API server why a pod is refused).
pub trait Target {
    /// The scheduler.
    fn scheduler(&mut self) -> &mut Scheduler;

    /// A node added or changed.
    fn node_applied(&mut self, node: NodeModel, now: Duration) {
        self.scheduler().upsert_node(node, now);
    }

    /// A pending pod of the scheduler's that cannot be read: out of the queue, and refused.
    fn pod_refused(&mut self, pod: RefusedPod, now: Duration) {
        self.scheduler().remove_pod(&pod.namespace, &pod.name, now);
    }

    /// A pod deleted.
    fn pod_deleted(&mut self, namespace: &str, name: &str, now: Duration) {
        self.scheduler().remove_pod(namespace, name, now);
    }
}

impl Target for Scheduler {
    fn scheduler(&mut self) -> &mut Scheduler {
        self
    }
}

/// A change of some kind, for a front end that passes changes of every kind along one way
/// (the adapter's channel to its scheduling thread).
pub trait AnyChange: Send + Debug {
    /// Applies the change.
    fn apply(self: Box<Self>, target: &mut dyn Target, now: Duration);
    /// The kind's [`Kind::NAME`].
    fn kind(&self) -> &'static str;
}

/// [`Change`] of `K` as an [`AnyChange`].
pub fn boxed<K: Kind>(change: Change<K::Model>) -> Box<dyn AnyChange>
where
    K::Model: Debug,
{
    Box::new(Changed::<K>(change))
}

/// That the API server does not serve `K`, as an [`AnyChange`].
pub fn not_served<K: Kind>() -> Box<dyn AnyChange> {
    Box::new(NotServed::<K>(PhantomData))
}

struct Changed<K: Kind>(Change<K::Model>);

impl<K: Kind> Debug for Changed<K>
where
    K::Model: Debug,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {:?}", K::NAME, self.0)
    }
}

impl<K: Kind> AnyChange for Changed<K>
where
    K::Model: Debug,
{
    fn apply(self: Box<Self>, target: &mut dyn Target, now: Duration) {
        K::apply(self.0, target, now);
    }

    fn kind(&self) -> &'static str {
        K::NAME
    }
}

struct NotServed<K>(PhantomData<fn() -> K>);

impl<K: Kind> Debug for NotServed<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} not served", K::NAME)
    }
}

impl<K: Kind> AnyChange for NotServed<K> {
    fn apply(self: Box<Self>, target: &mut dyn Target, _now: Duration) {
        K::not_served(target);
    }

    fn kind(&self) -> &'static str {
        K::NAME
    }
}

/// What the scheduler holds, for [`Kind::write`]: its cache and its queue.
#[derive(Clone, Copy)]
pub struct Holding<'a> {
    /// The cache: nodes, placed pods and every other object read.
    pub cache: &'a Cache,
    /// The pending pods, in queue order.
    pub queued: &'a [Arc<PodInfo>],
}

/// The API objects [`Kind::write`] writes, as JSON values; the first that cannot be
/// serialized makes the whole writing fail.
#[derive(Debug, Default)]
pub struct Written {
    items: Vec<serde_json::Value>,
    error: Option<serde_json::Error>,
}

impl Written {
    /// Adds an object.
    pub fn push(&mut self, object: impl Serialize) {
        match serde_json::to_value(object) {
            Ok(value) => self.items.push(value),
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
    }

    /// The objects, or the first error.
    pub fn finish(self) -> Result<Vec<serde_json::Value>, serde_json::Error> {
        match self.error {
            Some(e) => Err(e),
            None => Ok(self.items),
        }
    }
}

/// Something done once per kind: [`each`] calls it with every kind.
pub trait Visitor {
    /// Called with one kind.
    fn visit<K: Kind>(&mut self)
    where
        K::Model: Debug;
}

/// Calls `visitor` with every kind the scheduler reads, in the order a cluster is loaded:
/// the objects pods refer to, then nodes, then pods.
pub fn each(visitor: &mut impl Visitor) {
    visitor.visit::<Namespaces>();
    visitor.visit::<Services>();
    visitor.visit::<ReplicaSets>();
    visitor.visit::<StatefulSets>();
    visitor.visit::<ReplicationControllers>();
    visitor.visit::<StorageClasses>();
    visitor.visit::<PersistentVolumes>();
    visitor.visit::<PersistentVolumeClaims>();
    visitor.visit::<CsiNodes>();
    visitor.visit::<CsiDrivers>();
    visitor.visit::<Capacities>();
    visitor.visit::<DisruptionBudgets>();
    visitor.visit::<PodGroups>();
    visitor.visit::<DeviceClasses>();
    visitor.visit::<ResourceSlices>();
    visitor.visit::<ResourceClaims>();
    visitor.visit::<Nodes>();
    visitor.visit::<Pods>();
}

/// The labels of `meta`, as the model keeps them.
fn labels_of(meta: &ObjectMeta) -> crate::model::Labels {
    meta.labels
        .as_ref()
        .map(crate::model::Labels::from)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
