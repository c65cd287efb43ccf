//! Pods: read into the model as they are decoded ([`LeanPod`]), in protobuf when the API
//! server is asked for it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use prost::Message;
use serde::Deserialize;
use serde::de::Deserializer;

use super::objects::pod_object;
use super::{
    Change, Holding, Kind, ProtobufReader, ReadContext, Target, Unreadable, Written, protobuf,
};
use crate::cache::Tracked;
use crate::config::DEFAULT_SCHEDULER_NAME;
use crate::model::PodInfo;

/// Pods that finished hold no resources: the pod watcher leaves them out.
pub const POD_FIELD_SELECTOR: &str = "status.phase!=Succeeded,status.phase!=Failed";

/// Pods. A pending pod of the scheduler's that cannot be read is refused with why; a bound
/// one keeps its last reading (its node's usage still counts it), as does one whose
/// scheduler cannot be told.
pub struct Pods;

/// A pod as read.
#[derive(Debug)]
pub enum PodReading {
    /// Read into the model.
    Pod(Arc<PodInfo>),
    /// A pending pod of the scheduler's that the model cannot read.
    Refused(RefusedPod),
}

/// A pending pod of the scheduler's that the model cannot read, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedPod {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `spec.schedulerName`: the profile that refuses it.
    pub scheduler_name: String,
    /// Why, naming the field.
    pub message: String,
}

impl Kind for Pods {
    type Object = LeanPod;
    type Model = PodReading;
    const TRACKED: Option<Tracked> = None;
    const PROTOBUF: Option<ProtobufReader<LeanPod>> = Some(LeanPod::decode);
    const FIELD_SELECTOR: Option<&'static str> = Some(POD_FIELD_SELECTOR);

    fn read(pod: &LeanPod, context: &ReadContext) -> Result<Option<PodReading>, String> {
        if !pod.bound && !context.profiles.contains(&pod.scheduler_name) {
            return Ok(None); // another scheduler's pending pod
        }
        match &pod.read {
            Ok(info) => Ok(Some(PodReading::Pod(info.clone()))),
            // Unreadable, and given `unreadable`'s reading: its last one.
            Err(e) if pod.bound => Err(e.clone()),
            Err(e) => Ok(Some(PodReading::Refused(RefusedPod {
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                name: pod.metadata.name.clone().unwrap_or_default(),
                uid: pod.metadata.uid.clone().unwrap_or_default(),
                scheduler_name: pod.scheduler_name.clone(),
                message: e.clone(),
            }))),
        }
    }

    fn unreadable(pod: &Unreadable, context: &ReadContext) -> Option<Change<PodReading>> {
        let scheduler_name = pod.scheduler_name.as_ref()?;
        if pod.node_name.is_some() || !context.profiles.contains(scheduler_name) {
            return None;
        }
        Some(Change::Applied(PodReading::Refused(RefusedPod {
            namespace: pod.namespace.clone().unwrap_or_default(),
            name: pod.name.clone(),
            uid: pod.uid.clone().unwrap_or_default(),
            scheduler_name: scheduler_name.clone(),
            message: format!("the pod cannot be read: {}", pod.error),
        })))
    }

    fn apply(change: Change<PodReading>, target: &mut dyn Target, now: Duration) {
        match change {
            Change::Applied(PodReading::Pod(pod)) => {
                let s = target.scheduler();
                if pod.node_name.is_none() && pod.terminating {
                    // kube-scheduler does not schedule pods that are being deleted.
                    s.remove_pod(&pod.namespace, &pod.name, now);
                } else if let Err(e) = s.upsert_pod(pod, now) {
                    tracing::warn!(error = %e, "pod not recorded");
                }
            }
            Change::Applied(PodReading::Refused(pod)) => target.pod_refused(pod, now),
            Change::Deleted(key) => target.pod_deleted(&key.namespace, &key.name, now),
        }
    }

    /// The placed pods, node by node, then the pending ones in queue order.
    fn write(holding: &Holding<'_>, out: &mut Written) {
        for node in holding.cache.nodes() {
            for pod in &node.pods {
                out.push(pod_object(pod));
            }
        }
        for pod in holding.queued {
            out.push(pod_object(pod));
        }
    }
}

/// A pod as the pod watcher decodes it: read into the model at once (or the reason it cannot
/// be), keeping of the API object only the metadata the watcher needs. A list of 10,000 pods
/// from the watch cache arrives in one response; decoded into API objects it would hold
/// 10,000 of them at once (about 40 MiB) until the watcher had handed out the last.
/// `metadata.managedFields`, the server-side apply bookkeeping and the largest part of a
/// pod's JSON, is skipped unread: the scheduler never looks at it.
#[derive(Debug, Clone)]
pub struct LeanPod {
    /// Name, namespace, uid and resourceVersion.
    pub metadata: ObjectMeta,
    /// Whether the pod has a node.
    pub bound: bool,
    /// `spec.schedulerName`, defaulted.
    pub scheduler_name: String,
    /// The pod in the model, or why it cannot be read (naming the field).
    pub read: Result<Arc<PodInfo>, String>,
}

impl LeanPod {
    /// Reads a pod from its protobuf message into the model.
    pub fn decode(raw: &[u8]) -> Result<LeanPod, prost::DecodeError> {
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
                .unwrap_or_else(|| DEFAULT_SCHEDULER_NAME.to_string()),
            read: PodInfo::from_api(pod)
                .map(Arc::new)
                .map_err(|e| e.to_string()),
        }
    }
}

impl k8s_openapi::Resource for LeanPod {
    const API_VERSION: &'static str = <Pod as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <Pod as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <Pod as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <Pod as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = <Pod as k8s_openapi::Resource>::Scope;
}

impl k8s_openapi::Metadata for LeanPod {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
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
