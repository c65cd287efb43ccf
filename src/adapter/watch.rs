//! Watchers: one per kind the scheduler reads (listed and watched by [`super::reflector`]),
//! each converting objects into the compact model as they arrive and sending them to the
//! scheduling thread. No full object is kept; a watcher remembers only the keys of the
//! objects it has reported, so that after a relist (an expired resource version) it can
//! report the objects that vanished meanwhile as deleted.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::mpsc::Sender;

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, ReplicationController, Service,
};
use k8s_openapi::api::core::v1::{PodSpec, PodStatus};
use k8s_openapi::api::policy::v1::{
    PodDisruptionBudget, PodDisruptionBudgetSpec, PodDisruptionBudgetStatus,
};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::api::Api;
use kube::runtime::watcher::Event;
use kube::{Client, Resource, ResourceExt};
use prost::Message;
use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer};

use super::driver::{Input, StorageInput};
use super::events::PodRef;
use super::pod_group_status::{GroupChange, StatusFeed};
use super::protobuf::{self, ProtoError};
use super::reflector::{self, Format, Selectors};
use crate::cache::{Tracked, TrackedSet};
use crate::config::ContentType;
use crate::model::disruption_budget::DisruptionBudgetModel;
use crate::model::pod_group::{self, PodGroup, PodGroupModel};
use crate::model::selector::LabelSelector;
use crate::model::volume::{
    ClaimModel, CsiDriverModel, CsiNodeModel, StorageCapacityModel, StorageClassModel, VolumeModel,
};
use crate::model::{Labels, NodeModel, PodInfo};

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
                .unwrap_or_else(|| crate::config::DEFAULT_SCHEDULER_NAME.to_string()),
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

/// A PodDisruptionBudget of `policy/v1beta1`, read into the `policy/v1` struct. Kubernetes
/// serves `policy/v1` from 1.21 (and `policy/v1beta1` up to 1.24), so against a 1.20 API
/// server the beta version is the only one; k8s-openapi has no type for it any more, but the
/// fields gantry reads (`spec.selector`, `status.disruptionsAllowed`,
/// `status.disruptedPods`) have the same schema in both versions. The beta object is
/// deserialized field by field (metadata, spec, status), so that its `apiVersion`, which the
/// v1 struct's own deserializer would refuse, is not read at all.
///
/// A newtype rather than [`kube::api::DynamicObject`] with a serde conversion: it is listed
/// and watched through the same typed reflector as every other kind (which has no dynamic
/// type to carry), and decoded straight into the v1 struct instead of into a JSON tree that
/// is converted afterwards.
#[derive(Debug, Clone, Default)]
pub struct PodDisruptionBudgetV1beta1(pub PodDisruptionBudget);

/// The parts of a PodDisruptionBudget that both versions share, `apiVersion` and `kind` left
/// unread.
#[derive(Deserialize)]
struct RawDisruptionBudget {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<PodDisruptionBudgetSpec>,
    #[serde(default)]
    status: Option<PodDisruptionBudgetStatus>,
}

impl<'de> Deserialize<'de> for PodDisruptionBudgetV1beta1 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let RawDisruptionBudget {
            metadata,
            spec,
            status,
        } = RawDisruptionBudget::deserialize(deserializer)?;
        Ok(PodDisruptionBudgetV1beta1(PodDisruptionBudget {
            metadata,
            spec,
            status,
        }))
    }
}

impl Resource for PodDisruptionBudgetV1beta1 {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        PodDisruptionBudget::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        PodDisruptionBudget::group(dt)
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1beta1")
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        PodDisruptionBudget::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

/// PodGroups (`scheduling.x-k8s.io/v1alpha1`, a custom resource) through the typed
/// reflector like every other kind: the model's serde struct, whose `spec` and `status` are
/// all gantry reads and writes, named here by the CRD's group, version and plural.
impl Resource for PodGroup {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("PodGroup")
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("scheduling.x-k8s.io")
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1alpha1")
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("podgroups")
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Pods that finished hold no resources: the pod watcher leaves them out.
pub const POD_FIELD_SELECTOR: &str = "status.phase!=Succeeded,status.phase!=Failed";

/// Turns one kind of object into inputs for the scheduling thread.
trait Convert<K>: Send + 'static {
    /// The input for an added or changed object, if the scheduler cares.
    fn applied(&self, obj: &K) -> Option<Input>;
    /// The input for a deleted object, from its key.
    fn deleted(&self, key: &str) -> Option<Input>;
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

/// Starts the watchers: nodes and pods always, the other kinds only when the cache keeps
/// what they feed (`tracked`). Each sends its inputs (and [`Input::Synced`] after its first
/// list) to `inputs`; returned with their names, which must all finish their first list
/// before scheduling starts. `profiles` are the scheduler names served: other schedulers'
/// pending pods are not reported. Pods and nodes travel as `content_type` says; the other
/// kinds, few and rarely changing, as JSON. PodGroups also go to `status`, their status
/// writer (see [`super::pod_group_status`]), when there is one.
pub fn spawn_all(
    client: &Client,
    profiles: BTreeSet<String>,
    tracked: TrackedSet,
    content_type: ContentType,
    status: Option<StatusFeed>,
    inputs: &Sender<Input>,
) -> (Vec<tokio::task::JoinHandle<()>>, Vec<&'static str>) {
    let (node_format, pod_format) = match content_type {
        ContentType::Protobuf => (
            Format::Protobuf(decode_node as fn(&[u8]) -> _),
            Format::Protobuf(LeanPod::decode as fn(&[u8]) -> _),
        ),
        ContentType::Json => (Format::Json, Format::Json),
    };
    let mut tasks = vec![
        spawn(client, None, node_format, "nodes", Nodes, inputs),
        spawn(
            client,
            Some(POD_FIELD_SELECTOR),
            pod_format,
            "pods",
            Pods { profiles },
            inputs,
        ),
    ];
    let mut names = vec!["nodes", "pods"];
    if tracked.contains(Tracked::NamespaceLabels) {
        tasks.push(spawn::<Namespace, _>(
            client,
            None,
            Format::Json,
            "namespaces",
            Namespaces,
            inputs,
        ));
        names.push("namespaces");
    }
    if tracked.contains(Tracked::Workloads) {
        tasks.extend([
            spawn::<Service, _>(client, None, Format::Json, "services", Services, inputs),
            spawn::<ReplicaSet, _>(
                client,
                None,
                Format::Json,
                "replicasets",
                Controllers("ReplicaSet"),
                inputs,
            ),
            spawn::<StatefulSet, _>(
                client,
                None,
                Format::Json,
                "statefulsets",
                Controllers("StatefulSet"),
                inputs,
            ),
            spawn::<ReplicationController, _>(
                client,
                None,
                Format::Json,
                "replicationcontrollers",
                Controllers("ReplicationController"),
                inputs,
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
                client,
                None,
                Format::Json,
                "persistentvolumeclaims",
                Claims,
                inputs,
            ),
            spawn::<PersistentVolume, _>(
                client,
                None,
                Format::Json,
                "persistentvolumes",
                Volumes,
                inputs,
            ),
            spawn::<StorageClass, _>(
                client,
                None,
                Format::Json,
                "storageclasses",
                StorageClasses,
                inputs,
            ),
            spawn::<CSINode, _>(client, None, Format::Json, "csinodes", CsiNodes, inputs),
            spawn::<CSIDriver, _>(client, None, Format::Json, "csidrivers", CsiDrivers, inputs),
            spawn_if_served::<CSIStorageCapacity, _>(
                client,
                "csistoragecapacities",
                Capacities,
                StorageInput::CapacitiesNotServed,
                inputs,
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
        tasks.push(spawn_disruption_budgets(client, inputs));
        names.push(DISRUPTION_BUDGETS);
    }
    if tracked.contains(Tracked::PodGroups) {
        tasks.push(spawn_pod_groups(client, status, inputs));
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
    client: &Client,
    fields: Option<&'static str>,
    format: Format<K>,
    name: &'static str,
    convert: C,
    inputs: &Sender<Input>,
) -> tokio::task::JoinHandle<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
    C: Convert<K>,
{
    let inputs = inputs.clone();
    let client = client.clone();
    tokio::spawn(async move {
        let api = Api::<K>::all(client.clone());
        let mut state = Relist::default();
        reflector::run(
            client,
            api,
            Selectors::fields(fields),
            format,
            name,
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
    client: &Client,
    name: &'static str,
    convert: C,
    not_served: StorageInput,
    inputs: &Sender<Input>,
) -> tokio::task::JoinHandle<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
    C: Convert<K>,
{
    let inputs = inputs.clone();
    let client = client.clone();
    tokio::spawn(async move {
        if served::<K>(&client, name).await {
            let _ = spawn::<K, C>(&client, None, Format::Json, name, convert, &inputs).await;
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

/// The PodDisruptionBudget watcher: `policy/v1` where the API server serves it (Kubernetes
/// 1.21 and later), else `policy/v1beta1` (through [`PodDisruptionBudgetV1beta1`]), chosen
/// once by API discovery at start. A server that serves neither has no budgets: the watcher
/// says so once and reports itself synced with none.
fn spawn_disruption_budgets(
    client: &Client,
    inputs: &Sender<Input>,
) -> tokio::task::JoinHandle<()> {
    let inputs = inputs.clone();
    let client = client.clone();
    let name = DISRUPTION_BUDGETS;
    tokio::spawn(async move {
        if served::<PodDisruptionBudget>(&client, name).await {
            let _ = spawn::<PodDisruptionBudget, _>(
                &client,
                None,
                Format::Json,
                name,
                DisruptionBudgets,
                &inputs,
            )
            .await;
        } else if served::<PodDisruptionBudgetV1beta1>(&client, name).await {
            tracing::info!(
                watcher = name,
                "the API server does not serve policy/v1 PodDisruptionBudgets: reading policy/v1beta1"
            );
            let _ = spawn::<PodDisruptionBudgetV1beta1, _>(
                &client,
                None,
                Format::Json,
                name,
                DisruptionBudgets,
                &inputs,
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
    client: &Client,
    status: Option<StatusFeed>,
    inputs: &Sender<Input>,
) -> tokio::task::JoinHandle<()> {
    let inputs = inputs.clone();
    let client = client.clone();
    let name = POD_GROUPS;
    tokio::spawn(async move {
        let mut absent = false;
        while !served::<PodGroup>(&client, name).await {
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
        let _ = spawn::<PodGroup, _>(&client, None, Format::Json, name, convert, &inputs).await;
    })
}

/// True when the API server serves `K` (API discovery of its group version; a group
/// version not found is not served). Other failures are retried with a backoff, logged as
/// `watcher`'s.
async fn served<K: Resource<DynamicType = ()>>(client: &Client, watcher: &'static str) -> bool {
    let group_version = K::api_version(&());
    let plural = K::plural(&());
    let mut delay = std::time::Duration::from_millis(200);
    loop {
        match client.list_api_group_resources(&group_version).await {
            Ok(list) => return list.resources.iter().any(|r| r.name == plural),
            Err(kube::Error::Api(e)) if e.code == 404 => return false,
            Err(e) => {
                tracing::warn!(watcher, error = %e, "API discovery failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(std::time::Duration::from_secs(10));
            }
        }
    }
}

/// The keys a watcher reported, to turn a relist into deletions.
#[derive(Debug, Default)]
struct Relist {
    known: HashSet<String>,
    relisting: Option<HashSet<String>>,
    synced: bool,
}

impl Relist {
    fn step<K: Resource, C: Convert<K>>(
        &mut self,
        event: Event<K>,
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
                let key = key_of(&obj);
                if let Some(fresh) = &mut self.relisting {
                    fresh.insert(key.clone());
                }
                self.known.insert(key);
                out.extend(convert.applied(&obj));
            }
            Event::InitDone => {
                if let Some(fresh) = self.relisting.take() {
                    let gone: Vec<&String> = self.known.difference(&fresh).collect();
                    if !gone.is_empty() {
                        tracing::info!(watcher = name, vanished = gone.len(), "relisted");
                    }
                    out.extend(gone.into_iter().filter_map(|k| convert.deleted(k)));
                    self.known = fresh;
                }
                if !self.synced {
                    self.synced = true;
                    tracing::info!(watcher = name, objects = self.known.len(), "listed");
                }
                out.push(Input::Synced(name));
            }
            Event::Apply(obj) => {
                self.known.insert(key_of(&obj));
                out.extend(convert.applied(&obj));
            }
            Event::Delete(obj) => {
                let key = key_of(&obj);
                self.known.remove(&key);
                out.extend(convert.deleted(&key));
            }
        }
        out
    }
}

struct Nodes;

impl Convert<Node> for Nodes {
    fn applied(&self, node: &Node) -> Option<Input> {
        match NodeModel::from_api(node) {
            Ok(n) => Some(Input::NodeApplied(n)),
            Err(e) => {
                tracing::warn!(error = %e, "node skipped: it cannot be read");
                node.metadata.name.clone().map(Input::NodeDeleted)
            }
        }
    }

    fn deleted(&self, key: &str) -> Option<Input> {
        Some(Input::NodeDeleted(key.to_string()))
    }
}

struct Pods {
    profiles: BTreeSet<String>,
}

impl Convert<LeanPod> for Pods {
    fn applied(&self, pod: &LeanPod) -> Option<Input> {
        if !pod.bound && !self.profiles.contains(&pod.scheduler_name) {
            return None; // another scheduler's pending pod
        }
        match &pod.read {
            Ok(info) => Some(Input::PodApplied(info.clone())),
            Err(e) if pod.bound => {
                tracing::warn!(error = %e, "bound pod cannot be read; its node's usage leaves it out");
                let (namespace, name) = split_key(&key_of(pod));
                Some(Input::PodDeleted { namespace, name })
            }
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
        }
    }

    fn deleted(&self, key: &str) -> Option<Input> {
        let (namespace, name) = split_key(key);
        Some(Input::PodDeleted { namespace, name })
    }
}

struct Namespaces;

impl Convert<Namespace> for Namespaces {
    fn applied(&self, ns: &Namespace) -> Option<Input> {
        let labels = ns
            .metadata
            .labels
            .as_ref()
            .map(Labels::from)
            .unwrap_or_default();
        Some(Input::NamespaceApplied(ns.name_any(), labels))
    }

    fn deleted(&self, key: &str) -> Option<Input> {
        Some(Input::NamespaceDeleted(key.to_string()))
    }
}

/// A storage object that cannot be read (the API server validates these, so only a field
/// gantry reads more strictly than Kubernetes): logged, and treated as absent, so that a pod
/// using it gets the message for a missing object rather than a wrong placement.
fn unreadable(kind: &str, key: &str, error: &str, absent: StorageInput) -> Option<Input> {
    tracing::warn!(kind, object = %key, %error, "cannot read; treated as absent");
    Some(Input::Storage(absent))
}

struct Claims;

impl Convert<PersistentVolumeClaim> for Claims {
    fn applied(&self, c: &PersistentVolumeClaim) -> Option<Input> {
        match ClaimModel::from_api(c) {
            Ok(c) => Some(Input::Storage(StorageInput::Claim(c))),
            Err(e) => {
                let (namespace, name) = split_key(&key_of(c));
                let absent = StorageInput::ClaimDeleted { namespace, name };
                unreadable("persistentvolumeclaim", &key_of(c), &e, absent)
            }
        }
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
    fn applied(&self, v: &PersistentVolume) -> Option<Input> {
        match VolumeModel::from_api(v) {
            Ok(v) => Some(Input::Storage(StorageInput::Volume(v))),
            Err(e) => unreadable(
                "persistentvolume",
                &key_of(v),
                &e,
                StorageInput::VolumeDeleted(key_of(v)),
            ),
        }
    }

    fn deleted(&self, key: &str) -> Option<Input> {
        Some(Input::Storage(StorageInput::VolumeDeleted(key.to_string())))
    }
}

struct StorageClasses;

impl Convert<StorageClass> for StorageClasses {
    fn applied(&self, c: &StorageClass) -> Option<Input> {
        match StorageClassModel::from_api(c) {
            Ok(c) => Some(Input::Storage(StorageInput::Class(c))),
            Err(e) => unreadable(
                "storageclass",
                &key_of(c),
                &e,
                StorageInput::ClassDeleted(key_of(c)),
            ),
        }
    }

    fn deleted(&self, key: &str) -> Option<Input> {
        Some(Input::Storage(StorageInput::ClassDeleted(key.to_string())))
    }
}

struct CsiNodes;

impl Convert<CSINode> for CsiNodes {
    fn applied(&self, n: &CSINode) -> Option<Input> {
        Some(Input::Storage(StorageInput::CsiNode(
            CsiNodeModel::from_api(n),
        )))
    }

    fn deleted(&self, key: &str) -> Option<Input> {
        Some(Input::Storage(StorageInput::CsiNodeDeleted(
            key.to_string(),
        )))
    }
}

struct CsiDrivers;

impl Convert<CSIDriver> for CsiDrivers {
    fn applied(&self, d: &CSIDriver) -> Option<Input> {
        Some(Input::Storage(StorageInput::CsiDriver(
            CsiDriverModel::from_api(d),
        )))
    }

    fn deleted(&self, key: &str) -> Option<Input> {
        Some(Input::Storage(StorageInput::CsiDriverDeleted(
            key.to_string(),
        )))
    }
}

struct Capacities;

impl Convert<CSIStorageCapacity> for Capacities {
    fn applied(&self, c: &CSIStorageCapacity) -> Option<Input> {
        let (namespace, name) = split_key(&key_of(c));
        match StorageCapacityModel::from_api(c) {
            Ok(c) => Some(Input::Storage(StorageInput::Capacity(c))),
            Err(e) => unreadable(
                "csistoragecapacity",
                &key_of(c),
                &e,
                StorageInput::CapacityDeleted { namespace, name },
            ),
        }
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
    fn applied(&self, pdb: &PodDisruptionBudget) -> Option<Input> {
        match DisruptionBudgetModel::from_api(pdb) {
            Ok(b) => Some(Input::DisruptionBudgetApplied(b)),
            Err(error) => {
                let key = key_of(pdb);
                tracing::warn!(
                    kind = "poddisruptionbudget",
                    object = %key,
                    %error,
                    "cannot read; treated as absent"
                );
                let (namespace, name) = split_key(&key);
                Some(Input::DisruptionBudgetDeleted { namespace, name })
            }
        }
    }

    fn deleted(&self, key: &str) -> Option<Input> {
        let (namespace, name) = split_key(key);
        Some(Input::DisruptionBudgetDeleted { namespace, name })
    }
}

impl Convert<PodDisruptionBudgetV1beta1> for DisruptionBudgets {
    fn applied(&self, pdb: &PodDisruptionBudgetV1beta1) -> Option<Input> {
        Convert::<PodDisruptionBudget>::applied(self, &pdb.0)
    }

    fn deleted(&self, key: &str) -> Option<Input> {
        Convert::<PodDisruptionBudget>::deleted(self, key)
    }
}

/// PodGroups, to the scheduling thread and to their status writer. One that cannot be read
/// (a quantity of `spec.minResources` that does not parse, which the CRD's schema lets
/// through) is logged with its name and the field, and treated as deleted: its pods are
/// refused at Permit, and its status is left alone.
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
    fn applied(&self, pg: &PodGroup) -> Option<Input> {
        let (namespace, name) = split_key(&key_of(pg));
        match PodGroupModel::from_api(pg) {
            Ok(model) => {
                self.tell_status(GroupChange::Applied {
                    namespace,
                    name,
                    min_member: model.min_member,
                    status: pg.status.clone().unwrap_or_default(),
                });
                Some(Input::PodGroupApplied(model))
            }
            Err(error) => {
                tracing::warn!(kind = "podgroup", object = %key_of(pg), %error, "cannot read; treated as absent");
                self.tell_status(GroupChange::Deleted {
                    namespace: namespace.clone(),
                    name: name.clone(),
                });
                Some(Input::PodGroupDeleted { namespace, name })
            }
        }
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
    fn applied(&self, svc: &Service) -> Option<Input> {
        let (namespace, name) = split_key(&key_of(svc));
        let selector = svc
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .map(Labels::from)
            .unwrap_or_default();
        Some(Input::ServiceApplied {
            namespace,
            name,
            selector,
        })
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
    fn applied(&self, obj: &K) -> Option<Input> {
        let (namespace, name) = split_key(&key_of(obj));
        match obj.selector() {
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
        }
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
mod tests {
    use super::*;
    use crate::testing;

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

    fn node(name: &str) -> Node {
        testing::node(name).capacity("1", "1Gi").api()
    }

    #[test]
    fn a_relist_reports_what_vanished() {
        let mut r = Relist::default();
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
    fn a_malformed_node_is_skipped_and_forgotten() {
        let mut bad = node("bad");
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
        let input = Nodes.applied(&bad);
        assert!(matches!(input, Some(Input::NodeDeleted(n)) if n == "bad"));
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
    fn a_v1beta1_budget_is_read_at_its_own_url_into_the_v1_struct() {
        assert_eq!(
            PodDisruptionBudgetV1beta1::api_version(&()),
            "policy/v1beta1"
        );
        assert_eq!(PodDisruptionBudgetV1beta1::kind(&()), "PodDisruptionBudget");
        assert_eq!(
            PodDisruptionBudgetV1beta1::url_path(&(), None),
            "/apis/policy/v1beta1/poddisruptionbudgets"
        );
        assert_eq!(
            PodDisruptionBudgetV1beta1::url_path(&(), Some("shop")),
            "/apis/policy/v1beta1/namespaces/shop/poddisruptionbudgets"
        );
        assert_eq!(
            PodDisruptionBudget::url_path(&(), None),
            "/apis/policy/v1/poddisruptionbudgets"
        );
        // As a watch event carries it, with its apiVersion.
        let json = serde_json::json!({
            "apiVersion": "policy/v1beta1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "shop", "resourceVersion": "7",
                "managedFields": [{"manager": "kubectl", "operation": "Update"}]},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": 1, "currentHealthy": 3, "desiredHealthy": 2,
                "expectedPods": 3, "observedGeneration": 1,
                "disruptedPods": {"web-0": "2024-01-02T03:04:05Z"}}
        });
        assert!(
            serde_json::from_value::<PodDisruptionBudget>(json.clone()).is_err(),
            "the v1 struct refuses the beta apiVersion"
        );
        let beta: PodDisruptionBudgetV1beta1 = serde_json::from_value(json).unwrap();
        assert_eq!(
            (beta.name_any(), beta.namespace(), beta.resource_version()),
            (
                "web".to_string(),
                Some("shop".to_string()),
                Some("7".to_string())
            )
        );
        match DisruptionBudgets.applied(&beta) {
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
            Convert::<PodDisruptionBudgetV1beta1>::deleted(&DisruptionBudgets, "shop/web"),
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
        assert!(matches!(
            DisruptionBudgets.applied(&bad),
            Some(Input::DisruptionBudgetDeleted { namespace, name }) if namespace == "shop" && name == "bad"
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
        match convert.applied(&good) {
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
        assert!(matches!(
            convert.applied(&bad),
            Some(Input::PodGroupDeleted { namespace, name }) if namespace == "ml" && name == "bad"
        ));
        assert!(matches!(rx.try_recv(), Ok(GroupChange::Deleted { name, .. }) if name == "bad"));
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
            Some(Input::PodApplied(_))
        ));
        assert!(
            pods.applied(&LeanPod::read(&pod_api("b", "default-scheduler")))
                .is_none()
        );
        let mut bound = pod_api("c", "default-scheduler");
        bound.spec.as_mut().unwrap().node_name = Some("n1".to_string());
        assert!(
            matches!(pods.applied(&LeanPod::read(&bound)), Some(Input::PodApplied(p)) if p.node_name.as_deref() == Some("n1"))
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
            Some(Input::PodInvalid {
                pod,
                scheduler_name,
                message,
            }) => {
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
}
