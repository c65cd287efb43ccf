//! Watchers: one per kind the scheduler reads (listed and watched by [`super::reflector`]),
//! each converting objects into the compact model as they arrive and sending them to the
//! scheduling thread. No full object is kept; a watcher remembers only the keys of the
//! objects it has reported, so that after a relist (an expired resource version) it can
//! report the objects that vanished meanwhile as deleted. An object that cannot be read
//! ([`Unreadable`]) is logged once, counted in `gantry_unreadable_objects`, and given its
//! kind's safe reading ([`Convert::unreadable`]): it never stops the watcher.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::mpsc::Sender;

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, ReplicationController, Service,
};
use k8s_openapi::api::core::v1::{PodSpec, PodStatus};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::api::Api;
use kube::runtime::watcher::Event;
use kube::{Client, Resource, ResourceExt};
use prometheus_client::metrics::gauge::Gauge;
use prost::Message;
use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer};

use super::driver::{Input, StorageInput};
use super::events::PodRef;
use super::lenient::{Read, Unreadable};
use super::metrics::Metrics;
use super::pod_group_status::{GroupChange, StatusFeed};
use super::protobuf::{self, ProtoError};
use super::readiness::Watchers;
use super::reflector::{self, Format, Selectors};
use gantry_core::cache::{Tracked, TrackedSet};
use gantry_core::config::ContentType;
use gantry_core::model::disruption_budget::DisruptionBudgetModel;
use gantry_core::model::pod_group::{self, PodGroup, PodGroupModel};
use gantry_core::model::selector::LabelSelector;
use gantry_core::model::volume::{
    ClaimModel, CsiDriverModel, CsiNodeModel, StorageCapacityModel, StorageClassModel, VolumeModel,
};
use gantry_core::model::{Labels, NodeModel, PodInfo};

/// A pod as the pod watcher decodes it: read into the model at once (or the reason it cannot
/// be), keeping of the API object only the metadata the watcher needs. A list of 10,000 pods
/// from the watch cache arrives in one response; decoded into API objects it would hold
/// 10,000 of them at once (about 40 MiB) until the watcher had handed out the last.
/// `metadata.managedFields`, the server-side apply bookkeeping and the largest part of a
/// pod's JSON, is skipped unread: the scheduler never looks at it.
#[derive(Debug, Clone)]
pub struct LeanPod {
    /// Name, namespace, uid and resourceVersion.
    metadata: ObjectMeta,
    /// Whether the pod has a node.
    bound: bool,
    /// `spec.schedulerName`, defaulted.
    scheduler_name: String,
    /// The pod in the model, or why it cannot be read (naming the field).
    read: Result<Arc<PodInfo>, String>,
}

impl LeanPod {
    /// Reads a pod from its protobuf encoding into the model.
    pub fn decode(raw: &[u8]) -> Result<LeanPod, ProtoError> {
        Ok(LeanPod::read(&protobuf::pod::Pod::decode(raw)?.into()))
    }

    /// Reads `pod` into the model.
    pub fn read(pod: &Pod) -> LeanPod {
        let spec = pod.spec.as_ref();
        let meta = &pod.metadata;
        LeanPod {
            metadata: ObjectMeta {
                name: meta.name.clone(),
                namespace: meta.namespace.clone(),
                uid: meta.uid.clone(),
                resource_version: meta.resource_version.clone(),
                ..ObjectMeta::default()
            },
            bound: spec.and_then(|s| s.node_name.as_ref()).is_some(),
            scheduler_name: spec
                .and_then(|s| s.scheduler_name.clone())
                .unwrap_or_else(|| gantry_core::config::DEFAULT_SCHEDULER_NAME.to_string()),
            read: PodInfo::from_api(pod)
                .map(Arc::new)
                .map_err(|e| e.to_string()),
        }
    }
}

/// `ObjectMeta` without `managedFields` (unknown fields, which that one now is, are skipped
/// without being decoded).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeanMeta {
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
    #[serde(default)]
    creation_timestamp: Option<Time>,
    #[serde(default)]
    deletion_grace_period_seconds: Option<i64>,
    #[serde(default)]
    deletion_timestamp: Option<Time>,
    #[serde(default)]
    finalizers: Option<Vec<String>>,
    #[serde(default)]
    generate_name: Option<String>,
    #[serde(default)]
    generation: Option<i64>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    owner_references: Option<Vec<OwnerReference>>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    self_link: Option<String>,
    #[serde(default)]
    uid: Option<String>,
}

#[derive(Deserialize)]
struct RawLeanPod {
    metadata: LeanMeta,
    #[serde(default)]
    spec: Option<PodSpec>,
    #[serde(default)]
    status: Option<PodStatus>,
}

impl<'de> Deserialize<'de> for LeanPod {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let RawLeanPod {
            metadata: m,
            spec,
            status,
        } = RawLeanPod::deserialize(deserializer)?;
        Ok(LeanPod::read(&Pod {
            metadata: ObjectMeta {
                annotations: m.annotations,
                creation_timestamp: m.creation_timestamp,
                deletion_grace_period_seconds: m.deletion_grace_period_seconds,
                deletion_timestamp: m.deletion_timestamp,
                finalizers: m.finalizers,
                generate_name: m.generate_name,
                generation: m.generation,
                labels: m.labels,
                managed_fields: None,
                name: m.name,
                namespace: m.namespace,
                owner_references: m.owner_references,
                resource_version: m.resource_version,
                self_link: m.self_link,
                uid: m.uid,
            },
            spec,
            status,
        }))
    }
}

reflector::pod_view!(LeanPod);

/// Pods that finished hold no resources: the pod watcher leaves them out.
pub const POD_FIELD_SELECTOR: &str = "status.phase!=Succeeded,status.phase!=Failed";

/// Turns one kind of object into inputs for the scheduling thread.
trait Convert<K>: Send + 'static {
    /// The input for an added or changed object, if the scheduler cares; an error (naming
    /// the field) when the model cannot read it, which makes it [`Unreadable`].
    fn applied(&self, obj: &K) -> Result<Option<Input>, String>;
    /// The input for a deleted object, from its key.
    fn deleted(&self, key: &str) -> Option<Input>;
    /// The input for an object that cannot be read: its kind's safe reading, absent unless
    /// the kind says otherwise.
    fn unreadable(&self, object: &Unreadable) -> Option<Input> {
        self.deleted(&object.key())
    }
}

/// `namespace/name`, or `name` for cluster-scoped objects.
fn key_of<K: Resource>(obj: &K) -> String {
    let meta = obj.meta();
    match &meta.namespace {
        Some(ns) => format!("{ns}/{}", meta.name.as_deref().unwrap_or_default()),
        None => meta.name.clone().unwrap_or_default(),
    }
}

fn split_key(key: &str) -> (String, String) {
    match key.split_once('/') {
        Some((ns, name)) => (ns.to_string(), name.to_string()),
        None => (String::new(), key.to_string()),
    }
}

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

/// Starts the watchers: nodes and pods always, the other kinds only when the cache keeps
/// what they feed (`tracked`). Each sends its inputs (and [`Input::Synced`] after its first
/// list) to the scheduling thread; returned with their names, which must all finish their
/// first list before scheduling starts. `profiles` are the scheduler names served: other
/// schedulers' pending pods are not reported. Pods and nodes travel as `content_type` says;
/// the other kinds, few and rarely changing, as JSON. PodGroups also go to `status`, their
/// status writer (see [`super::pod_group_status`]), when there is one.
pub fn spawn_all(
    watching: &Watching,
    profiles: BTreeSet<String>,
    tracked: TrackedSet,
    content_type: ContentType,
    status: Option<StatusFeed>,
) -> (Vec<tokio::task::JoinHandle<()>>, Vec<&'static str>) {
    let (node_format, pod_format) = match content_type {
        ContentType::Protobuf => (
            Format::Protobuf(decode_node as fn(&[u8]) -> _),
            Format::Protobuf(LeanPod::decode as fn(&[u8]) -> _),
        ),
        ContentType::Json => (Format::Json, Format::Json),
    };
    let mut tasks = vec![
        spawn(watching, None, node_format, "nodes", Nodes),
        spawn(
            watching,
            Some(POD_FIELD_SELECTOR),
            pod_format,
            "pods",
            Pods { profiles },
        ),
    ];
    let mut names = vec!["nodes", "pods"];
    if tracked.contains(Tracked::NamespaceLabels) {
        tasks.push(spawn::<Namespace, _>(
            watching,
            None,
            Format::Json,
            "namespaces",
            Namespaces,
        ));
        names.push("namespaces");
    }
    if tracked.contains(Tracked::Workloads) {
        tasks.extend([
            spawn::<Service, _>(watching, None, Format::Json, "services", Services),
            spawn::<ReplicaSet, _>(
                watching,
                None,
                Format::Json,
                "replicasets",
                Controllers("ReplicaSet"),
            ),
            spawn::<StatefulSet, _>(
                watching,
                None,
                Format::Json,
                "statefulsets",
                Controllers("StatefulSet"),
            ),
            spawn::<ReplicationController, _>(
                watching,
                None,
                Format::Json,
                "replicationcontrollers",
                Controllers("ReplicationController"),
            ),
        ]);
        names.extend([
            "services",
            "replicasets",
            "statefulsets",
            "replicationcontrollers",
        ]);
    }
    if tracked.contains(Tracked::Volumes) {
        tasks.extend([
            spawn::<PersistentVolumeClaim, _>(
                watching,
                None,
                Format::Json,
                "persistentvolumeclaims",
                Claims,
            ),
            spawn::<PersistentVolume, _>(
                watching,
                None,
                Format::Json,
                "persistentvolumes",
                Volumes,
            ),
            spawn::<StorageClass, _>(
                watching,
                None,
                Format::Json,
                "storageclasses",
                StorageClasses,
            ),
            spawn::<CSINode, _>(watching, None, Format::Json, "csinodes", CsiNodes),
            spawn::<CSIDriver, _>(watching, None, Format::Json, "csidrivers", CsiDrivers),
            spawn_if_served::<CSIStorageCapacity, _>(
                watching,
                "csistoragecapacities",
                Capacities,
                StorageInput::CapacitiesNotServed,
            ),
        ]);
        names.extend([
            "persistentvolumeclaims",
            "persistentvolumes",
            "storageclasses",
            "csinodes",
            "csidrivers",
            "csistoragecapacities",
        ]);
    }
    if tracked.contains(Tracked::DisruptionBudgets) {
        tasks.push(spawn_disruption_budgets(watching));
        names.push(DISRUPTION_BUDGETS);
    }
    if tracked.contains(Tracked::PodGroups) {
        tasks.push(spawn_pod_groups(watching, status));
        names.push(POD_GROUPS);
    }
    (tasks, names)
}

/// Reads a node from its protobuf encoding.
fn decode_node(raw: &[u8]) -> Result<Node, ProtoError> {
    Ok(protobuf::node::Node::decode(raw)?.into())
}

/// One watcher: lists and watches `K` (through [`reflector`]), turning its events into
/// inputs with `convert`; stops once the scheduling thread is gone.
fn spawn<K, C>(
    watching: &Watching,
    fields: Option<&'static str>,
    format: Format<K>,
    name: &'static str,
    convert: C,
) -> tokio::task::JoinHandle<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
    C: Convert<K>,
{
    let Watching {
        client,
        inputs,
        watchers,
        metrics,
    } = watching.clone();
    tokio::spawn(async move {
        let api = Api::<K>::all(client.clone());
        let mut state = Relist::new(metrics.unreadable_objects(name));
        reflector::run(
            client,
            api,
            Selectors::fields(fields),
            format,
            name,
            &watchers,
            move |event| {
                state
                    .step(event, &convert, name)
                    .into_iter()
                    .all(|input| inputs.send(input).is_ok())
            },
        )
        .await;
    })
}

/// A watcher of a kind the API server may not serve (CSIStorageCapacity is served in
/// `storage.k8s.io/v1` from Kubernetes 1.24): discovery first, and where the server does
/// not serve the kind, the watcher sends `not_served`, reports itself synced with nothing
/// and says so once.
fn spawn_if_served<K, C>(
    watching: &Watching,
    name: &'static str,
    convert: C,
    not_served: StorageInput,
) -> tokio::task::JoinHandle<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
    C: Convert<K>,
{
    let watching = watching.clone();
    let inputs = watching.inputs.clone();
    tokio::spawn(async move {
        if served::<K>(&watching, name).await {
            let _ = spawn::<K, C>(&watching, None, Format::Json, name, convert).await;
        } else {
            tracing::info!(
                watcher = name,
                "the API server does not serve {} {}: none are read",
                K::api_version(&()),
                K::kind(&())
            );
            let _ = inputs.send(Input::Storage(not_served));
            let _ = inputs.send(Input::Synced(name));
        }
    })
}

/// The name of the PodDisruptionBudget watcher, in the readiness list.
const DISRUPTION_BUDGETS: &str = "poddisruptionbudgets";

/// The PodDisruptionBudget watcher, of `policy/v1`, the one version every supported
/// Kubernetes serves. A server that does not serve it (the policy group turned off) has no
/// budgets: the watcher says so once and reports itself synced with none.
fn spawn_disruption_budgets(watching: &Watching) -> tokio::task::JoinHandle<()> {
    let watching = watching.clone();
    let inputs = watching.inputs.clone();
    let name = DISRUPTION_BUDGETS;
    tokio::spawn(async move {
        if served::<PodDisruptionBudget>(&watching, name).await {
            let _ = spawn::<PodDisruptionBudget, _>(
                &watching,
                None,
                Format::Json,
                name,
                DisruptionBudgets,
            )
            .await;
        } else {
            tracing::info!(
                watcher = name,
                "the API server serves no PodDisruptionBudgets: none are read"
            );
            let _ = inputs.send(Input::Synced(name));
        }
    })
}

/// The name of the PodGroup watcher, in the readiness list.
const POD_GROUPS: &str = "podgroups";
/// How often the PodGroup watcher asks again whether the API server serves PodGroups, while
/// it does not (the CRD may be installed after gantry starts).
const POD_GROUPS_RECHECK: std::time::Duration = std::time::Duration::from_secs(60);

/// The PodGroup watcher. PodGroups are a custom resource: where the API server does not
/// serve them (the CRD is not installed), the watcher says so once, reports itself synced
/// with none (the pods of a group then wait, refused at Permit with `PodGroup not found`,
/// as in scheduler-plugins) and asks again every [`POD_GROUPS_RECHECK`], watching them
/// once they are served.
fn spawn_pod_groups(
    watching: &Watching,
    status: Option<StatusFeed>,
) -> tokio::task::JoinHandle<()> {
    let watching = watching.clone();
    let inputs = watching.inputs.clone();
    let name = POD_GROUPS;
    tokio::spawn(async move {
        let mut absent = false;
        while !served::<PodGroup>(&watching, name).await {
            if !absent {
                tracing::info!(
                    watcher = name,
                    "the API server does not serve {} PodGroups (is the CRD installed?): none are read, and pods of a group are refused at Permit; asking again every {:?}",
                    pod_group::API_VERSION,
                    POD_GROUPS_RECHECK
                );
                absent = true;
                if inputs.send(Input::Synced(name)).is_err() {
                    return;
                }
            }
            tokio::time::sleep(POD_GROUPS_RECHECK).await;
        }
        if absent {
            tracing::info!(watcher = name, "PodGroups are served now: watching them");
        }
        let convert = PodGroups { status };
        let _ = spawn::<PodGroup, _>(&watching, None, Format::Json, name, convert).await;
    })
}

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

/// The keys a watcher reported, to turn a relist into deletions, and the objects it could
/// not read, so that each is logged once (not at every relist) and counted.
#[derive(Debug)]
struct Relist {
    known: HashSet<String>,
    relisting: Option<HashSet<String>>,
    synced: bool,
    /// The objects that cannot be read, by key, with why.
    unreadable: HashMap<String, String>,
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

    fn step<K: Resource, C: Convert<K>>(
        &mut self,
        event: Event<Read<K>>,
        convert: &C,
        name: &'static str,
    ) -> Vec<Input> {
        let mut out = Vec::new();
        match event {
            Event::Init => {
                self.relisting = Some(HashSet::new());
                if self.synced {
                    out.push(Input::Stale(name));
                }
            }
            Event::InitApply(obj) => {
                let key = read_key(&obj);
                if let Some(fresh) = &mut self.relisting {
                    fresh.insert(key.clone());
                }
                self.known.insert(key.clone());
                out.extend(self.applied(&obj, key, convert, name));
            }
            Event::InitDone => {
                if let Some(fresh) = self.relisting.take() {
                    let gone: Vec<&String> = self.known.difference(&fresh).collect();
                    if !gone.is_empty() {
                        tracing::info!(watcher = name, vanished = gone.len(), "relisted");
                    }
                    for key in &gone {
                        self.unreadable.remove(*key);
                    }
                    out.extend(gone.into_iter().filter_map(|k| convert.deleted(k)));
                    self.known = fresh;
                    self.count_unreadable();
                }
                if !self.synced {
                    self.synced = true;
                    tracing::info!(watcher = name, objects = self.known.len(), "listed");
                }
                out.push(Input::Synced(name));
            }
            Event::Apply(obj) => {
                let key = read_key(&obj);
                self.known.insert(key.clone());
                out.extend(self.applied(&obj, key, convert, name));
            }
            Event::Delete(obj) => {
                let key = read_key(&obj);
                self.known.remove(&key);
                if self.unreadable.remove(&key).is_some() {
                    self.count_unreadable();
                }
                out.extend(convert.deleted(&key));
            }
        }
        out
    }

    /// The input for an object listed or changed, read or not.
    fn applied<K: Resource, C: Convert<K>>(
        &mut self,
        obj: &Read<K>,
        key: String,
        convert: &C,
        name: &'static str,
    ) -> Option<Input> {
        match obj {
            Read::Object(obj) => match convert.applied(obj) {
                Ok(input) => {
                    if self.unreadable.remove(&key).is_some() {
                        tracing::info!(watcher = name, object = %key, "readable again");
                        self.count_unreadable();
                    }
                    input
                }
                Err(error) => {
                    let (namespace, name_of) = split_key(&key);
                    let u = Unreadable {
                        namespace: Some(namespace).filter(|ns| !ns.is_empty()),
                        name: name_of,
                        resource_version: obj.resource_version(),
                        error,
                        ..Unreadable::default()
                    };
                    self.applied(&Read::<K>::Unreadable(u), key, convert, name)
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
                    self.unreadable.insert(key, u.error.clone());
                    self.count_unreadable();
                }
                if u.name.is_empty() {
                    return None; // nothing can name it: nothing to forget or refuse
                }
                convert.unreadable(u)
            }
        }
    }

    fn count_unreadable(&self) {
        self.unreadable_gauge
            .set(i64::try_from(self.unreadable.len()).unwrap_or(i64::MAX));
    }
}

/// The key of an object read, or of what is known of one that was not.
fn read_key<K: Resource>(obj: &Read<K>) -> String {
    match obj {
        Read::Object(obj) => key_of(obj),
        Read::Unreadable(u) => u.key(),
    }
}

struct Nodes;

/// Nodes; one that cannot be read is absent: no pod goes there.
impl Convert<Node> for Nodes {
    fn applied(&self, node: &Node) -> Result<Option<Input>, String> {
        let n = NodeModel::from_api(node).map_err(|e| e.to_string())?;
        Ok(Some(Input::NodeApplied(n)))
    }

    fn deleted(&self, key: &str) -> Option<Input> {
        Some(Input::NodeDeleted(key.to_string()))
    }
}

struct Pods {
    profiles: BTreeSet<String>,
}

/// Pods. A pending pod of the scheduler's that cannot be read is refused with why; a bound
/// one keeps its last reading (its node's usage still counts it), as does one whose
/// scheduler cannot be told.
impl Convert<LeanPod> for Pods {
    fn applied(&self, pod: &LeanPod) -> Result<Option<Input>, String> {
        if !pod.bound && !self.profiles.contains(&pod.scheduler_name) {
            return Ok(None); // another scheduler's pending pod
        }
        Ok(match &pod.read {
            Ok(info) => Some(Input::PodApplied(info.clone())),
            // Unreadable, and given [`Convert::unreadable`]'s reading: its last one.
            Err(e) if pod.bound => return Err(e.clone()),
            Err(e) => {
                let (namespace, name) = split_key(&key_of(pod));
                Some(Input::PodInvalid {
                    pod: PodRef {
                        namespace,
                        name,
                        uid: pod.uid().unwrap_or_default(),
                    },
                    scheduler_name: pod.scheduler_name.clone(),
                    message: e.clone(),
                })
            }
        })
    }

    fn deleted(&self, key: &str) -> Option<Input> {
        let (namespace, name) = split_key(key);
        Some(Input::PodDeleted { namespace, name })
    }

    fn unreadable(&self, u: &Unreadable) -> Option<Input> {
        let scheduler_name = u.scheduler_name.as_ref()?;
        if u.node_name.is_some() || !self.profiles.contains(scheduler_name) {
            return None;
        }
        Some(Input::PodInvalid {
            pod: PodRef {
                namespace: u.namespace.clone().unwrap_or_default(),
                name: u.name.clone(),
                uid: u.uid.clone().unwrap_or_default(),
            },
            scheduler_name: scheduler_name.clone(),
            message: format!("the pod cannot be read: {}", u.error),
        })
    }
}

struct Namespaces;

impl Convert<Namespace> for Namespaces {
    fn applied(&self, ns: &Namespace) -> Result<Option<Input>, String> {
        let labels = ns
            .metadata
            .labels
            .as_ref()
            .map(Labels::from)
            .unwrap_or_default();
        Ok(Some(Input::NamespaceApplied(ns.name_any(), labels)))
    }

    fn deleted(&self, key: &str) -> Option<Input> {
        Some(Input::NamespaceDeleted(key.to_string()))
    }
}

/// Storage objects. One that cannot be read (the API server validates these, so only a
/// field gantry reads more strictly than Kubernetes) is absent, so that a pod using it gets
/// the message for a missing object rather than a wrong placement.
struct Claims;

impl Convert<PersistentVolumeClaim> for Claims {
    fn applied(&self, c: &PersistentVolumeClaim) -> Result<Option<Input>, String> {
        let c = ClaimModel::from_api(c)?;
        Ok(Some(Input::Storage(StorageInput::Claim(c))))
    }

    fn deleted(&self, key: &str) -> Option<Input> {
        let (namespace, name) = split_key(key);
        Some(Input::Storage(StorageInput::ClaimDeleted {
            namespace,
            name,
        }))
    }
}

struct Volumes;

impl Convert<PersistentVolume> for Volumes {
    fn applied(&self, v: &PersistentVolume) -> Result<Option<Input>, String> {
        let v = VolumeModel::from_api(v)?;
        Ok(Some(Input::Storage(StorageInput::Volume(v))))
    }

    fn deleted(&self, key: &str) -> Option<Input> {
        Some(Input::Storage(StorageInput::VolumeDeleted(key.to_string())))
    }
}

struct StorageClasses;

impl Convert<StorageClass> for StorageClasses {
    fn applied(&self, c: &StorageClass) -> Result<Option<Input>, String> {
        let c = StorageClassModel::from_api(c)?;
        Ok(Some(Input::Storage(StorageInput::Class(c))))
    }

    fn deleted(&self, key: &str) -> Option<Input> {
        Some(Input::Storage(StorageInput::ClassDeleted(key.to_string())))
    }
}

struct CsiNodes;

impl Convert<CSINode> for CsiNodes {
    fn applied(&self, n: &CSINode) -> Result<Option<Input>, String> {
        Ok(Some(Input::Storage(StorageInput::CsiNode(
            CsiNodeModel::from_api(n),
        ))))
    }

    fn deleted(&self, key: &str) -> Option<Input> {
        Some(Input::Storage(StorageInput::CsiNodeDeleted(
            key.to_string(),
        )))
    }
}

struct CsiDrivers;

impl Convert<CSIDriver> for CsiDrivers {
    fn applied(&self, d: &CSIDriver) -> Result<Option<Input>, String> {
        Ok(Some(Input::Storage(StorageInput::CsiDriver(
            CsiDriverModel::from_api(d),
        ))))
    }

    fn deleted(&self, key: &str) -> Option<Input> {
        Some(Input::Storage(StorageInput::CsiDriverDeleted(
            key.to_string(),
        )))
    }
}

struct Capacities;

impl Convert<CSIStorageCapacity> for Capacities {
    fn applied(&self, c: &CSIStorageCapacity) -> Result<Option<Input>, String> {
        let c = StorageCapacityModel::from_api(c)?;
        Ok(Some(Input::Storage(StorageInput::Capacity(c))))
    }

    fn deleted(&self, key: &str) -> Option<Input> {
        let (namespace, name) = split_key(key);
        Some(Input::Storage(StorageInput::CapacityDeleted {
            namespace,
            name,
        }))
    }
}

/// PodDisruptionBudgets of either version; one that cannot be read (a selector that does not
/// compile, which the API server's validation should never let through) is logged and
/// treated as absent, so it covers no pod, as kube-scheduler skips a budget whose selector
/// does not compile.
struct DisruptionBudgets;

impl Convert<PodDisruptionBudget> for DisruptionBudgets {
    fn applied(&self, pdb: &PodDisruptionBudget) -> Result<Option<Input>, String> {
        let b = DisruptionBudgetModel::from_api(pdb)?;
        Ok(Some(Input::DisruptionBudgetApplied(b)))
    }

    fn deleted(&self, key: &str) -> Option<Input> {
        let (namespace, name) = split_key(key);
        Some(Input::DisruptionBudgetDeleted { namespace, name })
    }
}

/// PodGroups, to the scheduling thread and to their status writer. One that cannot be read
/// (a `minMember` out of int32's range or not a number, a quantity of `spec.minResources`
/// that does not parse: the CRD's schema lets all of these through) is absent, and its pods
/// are refused with why ([`Input::PodGroupUnreadable`]); its status is left alone.
struct PodGroups {
    status: Option<StatusFeed>,
}

impl PodGroups {
    fn tell_status(&self, change: GroupChange) {
        if let Some(feed) = &self.status {
            feed.send(change);
        }
    }
}

impl Convert<PodGroup> for PodGroups {
    fn applied(&self, pg: &PodGroup) -> Result<Option<Input>, String> {
        let (namespace, name) = split_key(&key_of(pg));
        let model = PodGroupModel::from_api(pg)?;
        self.tell_status(GroupChange::Applied {
            namespace,
            name,
            min_member: model.min_member,
            status: pg.status.clone().unwrap_or_default(),
        });
        Ok(Some(Input::PodGroupApplied(model)))
    }

    fn unreadable(&self, u: &Unreadable) -> Option<Input> {
        let namespace = u.namespace.clone().unwrap_or_default();
        self.tell_status(GroupChange::Deleted {
            namespace: namespace.clone(),
            name: u.name.clone(),
        });
        Some(Input::PodGroupUnreadable {
            namespace,
            name: u.name.clone(),
            error: u.error.clone(),
        })
    }

    fn deleted(&self, key: &str) -> Option<Input> {
        let (namespace, name) = split_key(key);
        self.tell_status(GroupChange::Deleted {
            namespace: namespace.clone(),
            name: name.clone(),
        });
        Some(Input::PodGroupDeleted { namespace, name })
    }
}

struct Services;

impl Convert<Service> for Services {
    fn applied(&self, svc: &Service) -> Result<Option<Input>, String> {
        let (namespace, name) = split_key(&key_of(svc));
        let selector = svc
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .map(Labels::from)
            .unwrap_or_default();
        Ok(Some(Input::ServiceApplied {
            namespace,
            name,
            selector,
        }))
    }

    fn deleted(&self, key: &str) -> Option<Input> {
        let (namespace, name) = split_key(key);
        Some(Input::ServiceDeleted { namespace, name })
    }
}

/// ReplicaSets, StatefulSets and ReplicationControllers, whose selectors the default
/// topology spreading reads.
struct Controllers(&'static str);

/// The selector of a workload controller, compiled.
trait ControllerSelector {
    fn selector(&self) -> Option<LabelSelector>;
}

impl ControllerSelector for ReplicaSet {
    fn selector(&self) -> Option<LabelSelector> {
        let sel = &self.spec.selector;
        LabelSelector::compile(Some(sel), "spec.selector").ok()
    }
}

impl ControllerSelector for StatefulSet {
    fn selector(&self) -> Option<LabelSelector> {
        let sel = &self.spec.selector;
        LabelSelector::compile(Some(sel), "spec.selector").ok()
    }
}

impl ControllerSelector for ReplicationController {
    fn selector(&self) -> Option<LabelSelector> {
        let sel = self.spec.as_ref()?.selector.as_ref()?;
        Some(LabelSelector::from_map(sel))
    }
}

impl<K: Resource + ControllerSelector> Convert<K> for Controllers {
    fn applied(&self, obj: &K) -> Result<Option<Input>, String> {
        let (namespace, name) = split_key(&key_of(obj));
        Ok(match obj.selector() {
            Some(selector) => Some(Input::ControllerApplied {
                kind: self.0,
                namespace,
                name,
                selector,
            }),
            None => Some(Input::ControllerDeleted {
                kind: self.0,
                namespace,
                name,
            }),
        })
    }

    fn deleted(&self, key: &str) -> Option<Input> {
        let (namespace, name) = split_key(key);
        Some(Input::ControllerDeleted {
            kind: self.0,
            namespace,
            name,
        })
    }
}

#[cfg(test)]
#[path = "watch_fuzz_tests.rs"]
mod fuzz_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_core::testing;

    fn names(inputs: &[Input]) -> Vec<String> {
        inputs
            .iter()
            .map(|i| match i {
                Input::NodeApplied(n) => format!("+{}", n.name),
                Input::NodeDeleted(n) => format!("-{n}"),
                Input::Synced(w) => format!("synced {w}"),
                Input::Stale(w) => format!("stale {w}"),
                other => format!("{other:?}"),
            })
            .collect()
    }

    fn node(name: &str) -> Read<Node> {
        Read::Object(testing::node(name).capacity("1", "1Gi").api())
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
            out.extend(r.step(e, &Nodes, "nodes"));
        }
        assert_eq!(names(&out), ["+a", "+b", "synced nodes", "+c", "-a"]);
        // The watch breaks; meanwhile b is deleted and d added.
        let mut out = Vec::new();
        for e in [
            Event::Init,
            Event::InitApply(node("c")),
            Event::InitApply(node("d")),
            Event::InitDone,
        ] {
            out.extend(r.step(e, &Nodes, "nodes"));
        }
        assert_eq!(
            names(&out),
            ["stale nodes", "+c", "+d", "-b", "synced nodes"],
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
        assert!(Nodes.applied(&bad).is_err());
        let gauge = Gauge::default();
        let mut r = Relist::new(gauge.clone());
        let mut out = Vec::new();
        for e in [
            Event::Init,
            Event::InitApply(Read::Object(bad.clone())),
            Event::InitDone,
        ] {
            out.extend(r.step(e, &Nodes, "nodes"));
        }
        assert_eq!(names(&out), ["-bad", "synced nodes"]);
        assert_eq!(gauge.get(), 1);
        assert!(r.unreadable["bad"].contains("cpu"), "{:?}", r.unreadable);
        // A relist meets it again: still one.
        for e in [
            Event::Init,
            Event::InitApply(Read::Object(bad)),
            Event::InitDone,
        ] {
            r.step(e, &Nodes, "nodes");
        }
        assert_eq!(gauge.get(), 1);
        out = r.step(Event::Apply(node("bad")), &Nodes, "nodes");
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
            out.extend(r.step(e, &Nodes, "nodes"));
        }
        assert_eq!(names(&out), ["+a", "-b", "synced nodes"]);
        assert_eq!(gauge.get(), 2);
        out = r.step(
            Event::Delete(Read::Unreadable(unreadable(None, "b", "spec: bad"))),
            &Nodes,
            "nodes",
        );
        assert_eq!(names(&out), ["-b"]);
        assert_eq!(gauge.get(), 1);
        for e in [Event::Init, Event::InitApply(node("a")), Event::InitDone] {
            r.step(e, &Nodes, "nodes");
        }
        assert_eq!(gauge.get(), 0, "the nameless one vanished in the relist");
    }

    fn pod_api(name: &str, scheduler: &str) -> Pod {
        let mut p = testing::pod(name).req("cpu", "100m").api();
        p.metadata.uid = Some(format!("uid-{name}"));
        p.spec.as_mut().unwrap().scheduler_name = Some(scheduler.to_string());
        p
    }

    #[test]
    fn a_lean_pod_reads_as_the_whole_pod_does() {
        let json = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "web", "namespace": "shop", "uid": "u1", "resourceVersion": "42",
                "generateName": "web-", "generation": 3, "selfLink": "/x",
                "creationTimestamp": "2024-01-02T03:04:05Z",
                "deletionTimestamp": "2024-01-02T03:05:05Z", "deletionGracePeriodSeconds": 30,
                "labels": {"app": "web"}, "annotations": {"a": "b"}, "finalizers": ["f"],
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "web-1", "uid": "u0", "controller": true}],
                "managedFields": [{"manager": "kubectl", "operation": "Update",
                    "apiVersion": "v1", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:containers": {}}}}]
            },
            "spec": {"nodeName": "n1", "schedulerName": "gantry",
                "containers": [{"name": "app", "image": "app:1",
                    "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "True"}]}
        });
        let lean: LeanPod = serde_json::from_value(json.clone()).unwrap();
        let full: Pod = serde_json::from_value(json).unwrap();
        assert!(full.metadata.managed_fields.is_some());
        let whole = LeanPod::read(&full);
        assert_eq!(lean.read, whole.read);
        assert!(lean.read.is_ok());
        assert_eq!((lean.bound, lean.scheduler_name.as_str()), (true, "gantry"));
        assert_eq!(
            (
                lean.name_any(),
                lean.namespace(),
                lean.uid(),
                lean.resource_version()
            ),
            (
                "web".to_string(),
                Some("shop".to_string()),
                Some("u1".to_string()),
                Some("42".to_string())
            )
        );
        assert_eq!(LeanPod::plural(&()), "pods");
        assert_eq!(
            LeanPod::url_path(&(), Some("shop")),
            "/api/v1/namespaces/shop/pods"
        );
    }

    #[test]
    fn a_budget_is_read_from_policy_v1() {
        assert_eq!(
            PodDisruptionBudget::url_path(&(), Some("shop")),
            "/apis/policy/v1/namespaces/shop/poddisruptionbudgets"
        );
        // As a watch event carries it.
        let budget: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "shop", "resourceVersion": "7"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": 1, "currentHealthy": 3, "desiredHealthy": 2,
                "expectedPods": 3, "observedGeneration": 1,
                "disruptedPods": {"web-0": "2024-01-02T03:04:05Z"}}
        }))
        .unwrap();
        match DisruptionBudgets.applied(&budget).unwrap() {
            Some(Input::DisruptionBudgetApplied(b)) => {
                assert_eq!((b.namespace.as_str(), b.name.as_str()), ("shop", "web"));
                assert_eq!(b.disruptions_allowed, 1);
                assert_eq!(b.disrupted_pods.iter().collect::<Vec<_>>(), ["web-0"]);
                let web = testing::pod("web-1")
                    .namespace("shop")
                    .label("app", "web")
                    .build();
                assert!(b.covers(&web));
            }
            other => panic!("expected DisruptionBudgetApplied, got {other:?}"),
        }
        assert!(matches!(
            Convert::<PodDisruptionBudget>::deleted(&DisruptionBudgets, "shop/web"),
            Some(Input::DisruptionBudgetDeleted { namespace, name }) if namespace == "shop" && name == "web"
        ));
    }

    #[test]
    fn an_unreadable_budget_is_treated_as_absent() {
        let bad: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "bad", "namespace": "shop"},
            "spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "Near"}]}}
        }))
        .unwrap();
        let mut r = Relist::new(Gauge::default());
        let out = r.step(Event::Apply(Read::Object(bad)), &DisruptionBudgets, "pdbs");
        assert!(matches!(
            &out[..],
            [Input::DisruptionBudgetDeleted { namespace, name }] if namespace == "shop" && name == "bad"
        ));
    }

    #[test]
    fn a_pod_group_goes_to_the_scheduler_and_its_status_writer_or_is_treated_as_deleted() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let convert = PodGroups {
            status: Some(StatusFeed(tx)),
        };
        let read = |json: serde_json::Value| -> PodGroup { serde_json::from_value(json).unwrap() };
        let good = read(serde_json::json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": "ml", "resourceVersion": "3"},
            "spec": {"minMember": 3},
            "status": {"phase": "Scheduling", "scheduled": 1}
        }));
        assert_eq!(key_of(&good), "ml/train");
        match convert.applied(&good).unwrap() {
            Some(Input::PodGroupApplied(g)) => {
                assert_eq!((g.full_name(), g.min_member), ("ml/train".to_string(), 3))
            }
            other => panic!("expected PodGroupApplied, got {other:?}"),
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
        let mut r = Relist::new(Gauge::default());
        let out = r.step(Event::Apply(Read::Object(bad)), &convert, "podgroups");
        match &out[..] {
            [
                Input::PodGroupUnreadable {
                    namespace,
                    name,
                    error,
                },
            ] => {
                assert_eq!((namespace.as_str(), name.as_str()), ("ml", "bad"));
                assert!(error.contains("spec.minResources[cpu]"), "{error}");
            }
            other => panic!("expected PodGroupUnreadable, got {other:?}"),
        }
        assert!(matches!(rx.try_recv(), Ok(GroupChange::Deleted { name, .. }) if name == "bad"));
        // One that does not decode at all: the same.
        let raw: Box<serde_json::value::RawValue> = serde_json::from_str(
            r#"{"metadata":{"name":"huge","namespace":"ml"},"spec":{"minMember":2147483648}}"#,
        )
        .unwrap();
        let out = r.step(
            Event::Apply(super::super::lenient::read_json::<PodGroup>(&raw)),
            &convert,
            "podgroups",
        );
        assert!(matches!(
            &out[..],
            [Input::PodGroupUnreadable { name, error, .. }] if name == "huge" && error.starts_with("spec.minMember")
        ));
        assert!(matches!(rx.try_recv(), Ok(GroupChange::Deleted { name, .. }) if name == "huge"));
        assert!(matches!(
            convert.deleted("ml/train"),
            Some(Input::PodGroupDeleted { name, .. }) if name == "train"
        ));
    }

    #[test]
    fn pods_of_other_schedulers_are_ignored_until_bound() {
        let pods = Pods {
            profiles: ["gantry".to_string()].into_iter().collect(),
        };
        assert!(matches!(
            pods.applied(&LeanPod::read(&pod_api("a", "gantry"))),
            Ok(Some(Input::PodApplied(_)))
        ));
        assert!(matches!(
            pods.applied(&LeanPod::read(&pod_api("b", "default-scheduler"))),
            Ok(None)
        ));
        let mut bound = pod_api("c", "default-scheduler");
        bound.spec.as_mut().unwrap().node_name = Some("n1".to_string());
        assert!(
            matches!(pods.applied(&LeanPod::read(&bound)), Ok(Some(Input::PodApplied(p))) if p.node_name.as_deref() == Some("n1"))
        );
    }

    #[test]
    fn a_malformed_pod_is_reported_with_its_field() {
        let pods = Pods {
            profiles: ["gantry".to_string()].into_iter().collect(),
        };
        let mut bad = pod_api("bad", "gantry");
        bad.spec.as_mut().unwrap().containers[0]
            .resources
            .as_mut()
            .unwrap()
            .requests
            .as_mut()
            .unwrap()
            .insert(
                "cpu".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("1x".to_string()),
            );
        match pods.applied(&LeanPod::read(&bad)) {
            Ok(Some(Input::PodInvalid {
                pod,
                scheduler_name,
                message,
            })) => {
                assert_eq!(
                    (pod.namespace.as_str(), pod.name.as_str(), pod.uid.as_str()),
                    ("default", "bad", "uid-bad")
                );
                assert_eq!(scheduler_name, "gantry");
                assert!(
                    message.contains("spec.containers[0].resources.requests[cpu]"),
                    "{message}"
                );
            }
            other => panic!("expected PodInvalid, got {other:?}"),
        }
    }

    #[test]
    fn a_pod_that_does_not_decode_is_refused_when_pending_and_kept_when_bound() {
        let pods = Pods {
            profiles: ["gantry".to_string()].into_iter().collect(),
        };
        let mut u = unreadable(Some("shop"), "web", "spec.containers: invalid type");
        u.uid = Some("u1".to_string());
        assert!(pods.unreadable(&u).is_none(), "its scheduler is not known");
        u.scheduler_name = Some("gantry".to_string());
        match pods.unreadable(&u) {
            Some(Input::PodInvalid { pod, message, .. }) => {
                assert_eq!((pod.name.as_str(), pod.uid.as_str()), ("web", "u1"));
                assert_eq!(
                    message,
                    "the pod cannot be read: spec.containers: invalid type"
                );
            }
            other => panic!("expected PodInvalid, got {other:?}"),
        }
        u.node_name = Some("n1".to_string());
        assert!(
            pods.unreadable(&u).is_none(),
            "a bound pod keeps its last reading"
        );
        u.node_name = None;
        u.scheduler_name = Some("default-scheduler".to_string());
        assert!(pods.unreadable(&u).is_none(), "another scheduler's");
    }
}
