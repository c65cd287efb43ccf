//! The scheduler's view of a pod, computed once when the pod arrives.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::ModelError;
use super::echo::echo;
use super::gpu::PodGpu;
use super::labels::Labels;
use super::quantity::Quantity;
use super::resources::{
    DEFAULT_MEMORY_REQUEST, DEFAULT_MILLI_CPU_REQUEST, ResourceError, ResourceName, Resources,
    is_extended_resource,
};
use super::selector::{LabelSelector, NodeSelector, NodeSelectorTerm, SelectorError};
use super::taint::Toleration;
use super::volume::PodVolumes;

/// Annotation prefixes the scheduler keeps; every other annotation is dropped at the edge.
pub const KEPT_ANNOTATION_PREFIXES: &[&str] = &["gantry.io/", "scheduler.alpha.kubernetes.io/"];
/// Prefixes of the pod annotations HAMi reads and writes (its requests' restrictions and
/// policies, and the devices allocated), kept on pods besides the above.
pub const HAMI_ANNOTATION_PREFIXES: &[&str] = &["hami.io/", "nvidia.com/"];

/// A host port a container binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// The host IP; `0.0.0.0` (unspecified) when empty.
    pub ip: std::net::IpAddr,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: Protocol,
    /// The port number.
    pub port: u16,
}

/// Transport protocol of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// TCP, the default.
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl HostPort {
    /// True when the two ports cannot both be bound on one node: same protocol and number,
    /// and the same IP or either one `0.0.0.0` (which kube-scheduler, unlike `::`, treats as
    /// every address).
    pub fn conflicts_with(&self, other: &HostPort) -> bool {
        let any = std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || self.ip == any || other.ip == any)
    }
}

/// A compiled pod (anti-)affinity term.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AffinityTerm {
    /// Namespaces listed by the term (the pod's own when neither list nor selector is given).
    pub namespaces: Vec<String>,
    /// Namespaces chosen by their labels; matches nothing when absent.
    pub namespace_selector: LabelSelector,
    /// Which pods the term is about (with `matchLabelKeys`/`mismatchLabelKeys` merged in).
    pub selector: LabelSelector,
    /// The node label that defines the topology domain.
    pub topology_key: String,
}

impl AffinityTerm {
    /// True when a pod in `namespace` (whose namespace has `namespace_labels`) with `labels`
    /// is one this term is about.
    pub fn matches(&self, namespace: &str, labels: &Labels, namespace_labels: &Labels) -> bool {
        (self.namespaces.iter().any(|n| n == namespace)
            || self.namespace_selector.matches(namespace_labels))
            && self.selector.matches(labels)
    }
}

/// A preferred affinity term with its weight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightedAffinityTerm {
    /// 1..=100.
    pub weight: i32,
    /// The term.
    pub term: AffinityTerm,
}

/// A pod's inter-pod affinity and anti-affinity.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodAffinity {
    /// Required affinity: every term must be satisfied.
    pub required: Vec<AffinityTerm>,
    /// Preferred affinity.
    pub preferred: Vec<WeightedAffinityTerm>,
    /// Required anti-affinity.
    pub required_anti: Vec<AffinityTerm>,
    /// Preferred anti-affinity.
    pub preferred_anti: Vec<WeightedAffinityTerm>,
}

impl PodAffinity {
    /// True when the pod has any affinity or anti-affinity term.
    pub fn is_empty(&self) -> bool {
        self.required.is_empty()
            && self.preferred.is_empty()
            && self.required_anti.is_empty()
            && self.preferred_anti.is_empty()
    }
}

/// What to do when a topology spread constraint cannot be satisfied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenUnsatisfiable {
    /// Hard constraint: filter nodes out.
    DoNotSchedule,
    /// Soft constraint: score nodes.
    ScheduleAnyway,
}

/// Whether a node inclusion policy honours or ignores the pod's node affinity or taints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InclusionPolicy {
    /// Count only nodes that pass.
    Honor,
    /// Count all nodes.
    Ignore,
}

/// A compiled topology spread constraint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologySpreadConstraint {
    /// Largest allowed difference between domains' matching pod counts.
    pub max_skew: i32,
    /// The node label that defines the domains.
    pub topology_key: String,
    /// Hard or soft.
    pub when_unsatisfiable: WhenUnsatisfiable,
    /// Which pods are counted (with `matchLabelKeys` merged in).
    pub selector: LabelSelector,
    /// Minimum number of eligible domains, for hard constraints.
    pub min_domains: Option<i32>,
    /// Whether node affinity restricts the counted nodes (default Honor).
    pub node_affinity_policy: InclusionPolicy,
    /// Whether taints restrict the counted nodes (default Ignore).
    pub node_taints_policy: InclusionPolicy,
}

/// A pod's quality-of-service class, from its containers' cpu and memory requests and limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QosClass {
    /// Every container limits cpu and memory, and requests exactly its limits.
    Guaranteed,
    /// Neither Guaranteed nor BestEffort.
    Burstable,
    /// No container requests or limits cpu or memory.
    BestEffort,
}

/// The controller that owns a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRef {
    /// `ReplicaSet`, `StatefulSet`, `Job`, ...
    pub kind: String,
    /// The owner's name.
    pub name: String,
    /// The owner's uid.
    pub uid: String,
}

/// `spec.preemptionPolicy` of a pod that never preempts.
pub const PREEMPT_NEVER: &str = "Never";
/// The pod condition a scheduler sets on a pod it evicts to make room for another.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";
/// The reason of the `DisruptionTarget` condition when the scheduler preempts the pod.
pub const PREEMPTION_BY_SCHEDULER: &str = "PreemptionByScheduler";

/// Everything the scheduler reads from a pod, computed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodInfo {
    /// The pod's uid (empty in hand-written simulator input, where `namespace/name` is used).
    pub uid: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: Labels,
    /// Only the annotations the scheduler reads (see [`KEPT_ANNOTATION_PREFIXES`]).
    pub annotations: Labels,
    /// `spec.priority`, 0 when unset.
    pub priority: i32,
    /// `spec.priorityClassName`, empty when unset.
    pub priority_class_name: String,
    /// The quality-of-service class Kubernetes gives the pod.
    pub qos_class: QosClass,
    /// `spec.schedulerName`, `default-scheduler` when unset.
    pub scheduler_name: String,
    /// `spec.nodeName`: the node the pod is bound to, if any.
    pub node_name: Option<Arc<str>>,
    /// The pod's effective requests, by Kubernetes' rules.
    pub requests: Resources,
    /// cpu used for scoring: requests with a default for containers that set none.
    pub non_zero_milli_cpu: i64,
    /// Memory used for scoring: requests with a default for containers that set none.
    pub non_zero_memory: i64,
    /// Host ports bound by the pod's containers.
    pub host_ports: Vec<HostPort>,
    /// `spec.nodeSelector`.
    pub node_selector: Labels,
    /// Required node affinity.
    pub required_node_affinity: Option<NodeSelector>,
    /// Preferred node affinity terms with weights.
    pub preferred_node_affinity: Vec<(i32, NodeSelectorTerm)>,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
    /// Topology spread constraints.
    pub topology_spread: Vec<TopologySpreadConstraint>,
    /// Inter-pod affinity and anti-affinity.
    pub affinity: PodAffinity,
    /// Scheduling gates still present.
    pub scheduling_gates: Vec<String>,
    /// The pod's resource claims (`spec.resourceClaims`, with the claims made for it from
    /// templates): devices that only Dynamic Resource Allocation can give.
    pub resource_claims: Box<[super::dra::claim::PodClaim]>,
    /// The features its node must declare (`status.declaredFeatures`), by
    /// [`super::node_features::required_by`].
    pub required_node_features: Box<[&'static str]>,
    /// Images of all containers (init ones included), normalized to carry a tag.
    pub images: Vec<String>,
    /// Number of containers, init ones included, with or without an image (ImageLocality
    /// scales its score range by it).
    pub num_containers: usize,
    /// The controller owning the pod.
    pub owner: Option<OwnerRef>,
    /// True once the pod has a deletion timestamp.
    pub terminating: bool,
    /// The pod's GPU request and, once placed, the devices it holds.
    pub gpu: PodGpu,
    /// The pod's volumes, as the volume plugins read them.
    pub volumes: PodVolumes,
    /// `spec.preemptionPolicy` is `Never`: the pod waits instead of evicting others.
    pub never_preempts: bool,
    /// `status.startTime` as (seconds, nanoseconds) since the epoch; preemption spares
    /// the pods that started first among those of equal priority.
    pub start_time: Option<(i64, u32)>,
    /// `status.nominatedNodeName`: the node a preemption made room on for the pod.
    pub nominated_node: Option<Arc<str>>,
    /// The pod has the `DisruptionTarget` condition a scheduler sets on a victim it
    /// preempts (status `True`, reason `PreemptionByScheduler`).
    pub preempted_by_scheduler: bool,
    /// The extended resources (`nvidia.com/gpu`, ...) any container or init container
    /// requests or limits, zero amounts included, sorted: what decides whether a scheduler
    /// extender that manages resources is interested in the pod. Empty for most pods.
    pub extended_resource_names: Vec<ResourceName>,
}

/// A pod's `namespace/name`: how the queue keys pods and how logs, events and the decision
/// log name them. Written out only when displayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodKey<'a> {
    /// The namespace.
    pub namespace: &'a str,
    /// The name.
    pub name: &'a str,
}

impl<'a> PodKey<'a> {
    /// The key of pod `name` in `namespace`.
    pub fn new(namespace: &'a str, name: &'a str) -> Self {
        PodKey { namespace, name }
    }

    /// `namespace/name`, as the display writes it, without the formatting machinery: the
    /// queue builds one for every watch event of a pod.
    pub fn text(&self) -> String {
        let mut key = String::with_capacity(self.namespace.len() + 1 + self.name.len());
        key.push_str(self.namespace);
        key.push('/');
        key.push_str(self.name);
        key
    }
}

impl std::fmt::Display for PodKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl PodInfo {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        PodKey::new(&self.namespace, &self.name).text()
    }

    /// Sets annotations (e.g. those a Reserve plugin writes with the binding), keeping what
    /// is derived from them up to date.
    pub fn set_annotations<'a>(&mut self, set: impl IntoIterator<Item = (&'a str, &'a str)>) {
        let mut map: std::collections::BTreeMap<String, String> = self
            .annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        map.extend(set.into_iter().map(|(k, v)| (k.to_string(), v.to_string())));
        self.annotations = Labels::from(&map);
        self.gpu = PodGpu::from_pod(&self.requests, &self.annotations, self.gpu.containers);
    }

    /// Converts an API pod. Every malformed field is an error naming the pod and the field.
    pub fn from_api(pod: &core::Pod) -> Result<Self, ModelError> {
        let meta = &pod.metadata;
        let namespace = meta
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string());
        let name = meta.name.clone().unwrap_or_default();
        let fail = |field: String| ModelError::pod(&namespace, &name, &field);
        if name.is_empty() {
            return Err(fail("metadata.name: must be set".to_string()));
        }
        let status = pod.status.as_ref();
        let empty_spec = core::PodSpec::default();
        let spec = pod.spec.as_ref().unwrap_or(&empty_spec);
        let labels = meta.labels.as_ref().map(Labels::from).unwrap_or_default();
        let (requests, non_zero) = pod_requests(spec, status).map_err(|e| fail(e.to_string()))?;
        let host_ports = host_ports(spec).map_err(fail)?;
        let qos_class = qos_class(spec).map_err(fail)?;
        let tolerations = spec
            .tolerations
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, t)| Toleration::from_api(t, &format!("spec.tolerations[{i}]")))
            .collect::<Result<_, _>>()
            .map_err(fail)?;
        let (required_node_affinity, preferred_node_affinity) =
            node_affinity(spec).map_err(|e| fail(e.to_string()))?;
        let affinity = pod_affinity(spec, &namespace, &labels).map_err(|e| fail(e.to_string()))?;
        let topology_spread = topology_spread(spec, &labels).map_err(|e| fail(e.to_string()))?;
        let images = spec
            .init_containers
            .iter()
            .flatten()
            .chain(spec.containers.iter())
            .filter_map(|c| c.image.as_deref())
            .map(normalized_image_name)
            .collect();
        let owner = controller(meta);
        let annotations = kept_annotations(meta);
        let gpu = PodGpu::from_pod(&requests, &annotations, gpu_containers(spec));
        let volumes = PodVolumes::from_api(&name, spec.volumes.as_ref()).map_err(fail)?;
        let extended_resource_names = extended_resource_names(spec);
        Ok(PodInfo {
            uid: meta.uid.clone().unwrap_or_default(),
            labels,
            annotations,
            priority: spec.priority.unwrap_or(0),
            priority_class_name: spec.priority_class_name.clone().unwrap_or_default(),
            qos_class,
            scheduler_name: spec
                .scheduler_name
                .clone()
                .unwrap_or_else(|| "default-scheduler".to_string()),
            node_name: spec
                .node_name
                .as_deref()
                .filter(|n| !n.is_empty())
                .map(Arc::from),
            requests,
            non_zero_milli_cpu: non_zero.0,
            non_zero_memory: non_zero.1,
            host_ports,
            node_selector: spec
                .node_selector
                .as_ref()
                .map(Labels::from)
                .unwrap_or_default(),
            required_node_affinity,
            preferred_node_affinity,
            tolerations,
            topology_spread,
            affinity,
            scheduling_gates: spec
                .scheduling_gates
                .iter()
                .flatten()
                .map(|g| g.name.clone())
                .collect(),
            resource_claims: super::dra::claim::PodClaim::of_pod(spec, status),
            required_node_features: super::node_features::required_by(spec).into(),
            images,
            num_containers: spec.init_containers.as_ref().map_or(0, Vec::len)
                + spec.containers.len(),
            owner,
            terminating: meta.deletion_timestamp.is_some(),
            gpu,
            volumes,
            never_preempts: spec.preemption_policy.as_deref() == Some(PREEMPT_NEVER),
            start_time: status
                .and_then(|s| s.start_time.as_ref())
                .map(|t| (t.0.as_second(), t.0.subsec_nanosecond().unsigned_abs())),
            nominated_node: status
                .and_then(|s| s.nominated_node_name.as_deref())
                .filter(|n| !n.is_empty())
                .map(Arc::from),
            preempted_by_scheduler: status.is_some_and(preempted_by_scheduler),
            extended_resource_names,
            namespace,
            name,
        })
    }
}

/// A pod's required node affinity and its preferred terms with their weights.
type NodeAffinity = (Option<NodeSelector>, Vec<(i32, NodeSelectorTerm)>);

/// Compiles `spec.affinity.nodeAffinity`, naming the field of an error.
fn node_affinity(spec: &core::PodSpec) -> Result<NodeAffinity, SelectorError> {
    let node_affinity = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref());
    let required = node_affinity
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|sel| {
            NodeSelector::compile(
                sel,
                "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
            )
        })
        .transpose()?;
    let preferred = node_affinity
        .and_then(|na| {
            na.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, p)| {
            let field = format!(
                "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
            );
            check_weight(p.weight, &field)?;
            let term = NodeSelectorTerm::compile(&p.preference, &format!("{field}.preference"))?;
            Ok((p.weight, term))
        })
        .collect::<Result<_, SelectorError>>()?;
    Ok((required, preferred))
}

/// The pod's controller (the owner reference marked `controller`), if any.
fn controller(meta: &ObjectMeta) -> Option<OwnerRef> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| OwnerRef {
            kind: o.kind.clone(),
            name: o.name.clone(),
            uid: o.uid.clone(),
        })
}

/// The annotations gantry reads (its own and HAMi's); the others are not kept.
fn kept_annotations(meta: &ObjectMeta) -> Labels {
    meta.annotations
        .iter()
        .flatten()
        .filter(|(k, _)| {
            KEPT_ANNOTATION_PREFIXES
                .iter()
                .chain(HAMI_ANNOTATION_PREFIXES)
                .any(|p| k.starts_with(p))
        })
        .collect()
}

/// True when the pod's status says kube-scheduler (or gantry) preempted it: a true
/// `DisruptionTarget` condition with reason `PreemptionByScheduler`.
fn preempted_by_scheduler(status: &core::PodStatus) -> bool {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == DISRUPTION_TARGET)
        .is_some_and(|c| c.status == "True" && c.reason.as_deref() == Some(PREEMPTION_BY_SCHEDULER))
}

fn check_weight(weight: i32, field: &str) -> Result<(), SelectorError> {
    if (1..=100).contains(&weight) {
        Ok(())
    } else {
        Err(SelectorError {
            field: format!("{field}.weight"),
            reason: format!("must be in the range 1-100, got {weight}"),
        })
    }
}

/// A container's requests, with requests defaulted from limits as the API server does.
fn container_requests(c: &core::Container, field: &str) -> Result<Resources, ResourceError> {
    let res = c.resources.as_ref();
    let requests = res.and_then(|r| r.requests.as_ref());
    let limits = res.and_then(|r| r.limits.as_ref());
    let defaulted = limits
        .into_iter()
        .flatten()
        .filter(|(k, _)| !requests.is_some_and(|r| r.contains_key(*k)));
    Resources::from_list(
        requests
            .into_iter()
            .flatten()
            .chain(defaulted)
            .map(|(k, v)| (k, v.0.as_str())),
        &format!("{field}.resources.requests"),
    )
}

/// The extended resources the pod's containers and init containers name in their requests
/// or limits, sorted and without repeats.
fn extended_resource_names(spec: &core::PodSpec) -> Vec<ResourceName> {
    let mut names: Vec<ResourceName> = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .filter_map(|c| c.resources.as_ref())
        .flat_map(|r| r.requests.iter().chain(r.limits.iter()))
        .flat_map(|list| list.keys())
        .filter(|name| is_extended_resource(name))
        .map(|name| ResourceName::from(name.as_str()))
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// Containers (init containers included) that name a GPU resource, `nvidia.com/gpu` or one of
/// HAMi's (at most 255 counted).
fn gpu_containers(spec: &core::PodSpec) -> u8 {
    let gpu_names = [
        crate::model::gpu::GPU_RESOURCE,
        crate::model::hami::MEMORY_RESOURCE,
        crate::model::hami::MEMORY_PERCENTAGE_RESOURCE,
        crate::model::hami::CORES_RESOURCE,
    ];
    let count = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .filter(|c| gpu_names.iter().any(|n| mentions(c, n)))
        .count();
    u8::try_from(count).unwrap_or(u8::MAX)
}

/// True when the container names `name` among requests or limits (for the scoring defaults,
/// which apply only to resources a container does not mention).
fn mentions(c: &core::Container, name: &str) -> bool {
    c.resources.as_ref().is_some_and(|r| {
        r.requests.as_ref().is_some_and(|m| m.contains_key(name))
            || r.limits.as_ref().is_some_and(|m| m.contains_key(name))
    })
}

/// What one container asks: its requests, and whether cpu and memory are named at all (a
/// container that names neither is scored as asking kube-scheduler's defaults).
struct Ask {
    requests: Resources,
    names_cpu: bool,
    names_memory: bool,
}

impl Ask {
    /// The container's spec: its requests, defaulted from its limits.
    fn spec(c: &core::Container, field: &str) -> Result<Ask, ResourceError> {
        Ok(Ask {
            requests: container_requests(c, field)?,
            names_cpu: mentions(c, "cpu"),
            names_memory: mentions(c, "memory"),
        })
    }

    /// A resource list the kubelet reports.
    fn reported(list: &BTreeMap<String, ApiQuantity>, field: &str) -> Result<Ask, ResourceError> {
        Ok(Ask {
            requests: Resources::from_list(list.iter().map(|(k, v)| (k, v.0.as_str())), field)?,
            names_cpu: list.contains_key("cpu"),
            names_memory: list.contains_key("memory"),
        })
    }

    /// Nothing at all (a container whose resize is infeasible and reported no resources):
    /// scored as asking kube-scheduler's defaults.
    fn nothing() -> Ask {
        Ask {
            requests: Resources::default(),
            names_cpu: false,
            names_memory: false,
        }
    }

    /// Cpu and memory with kube-scheduler's defaults for the unnamed, for scoring.
    fn non_zero(&self) -> (i64, i64) {
        (
            if self.names_cpu {
                self.requests.milli_cpu
            } else {
                DEFAULT_MILLI_CPU_REQUEST
            },
            if self.names_memory {
                self.requests.memory
            } else {
                DEFAULT_MEMORY_REQUEST
            },
        )
    }
}

/// Requests and the non-zero cpu and memory scored with them.
type Requests = (Resources, (i64, i64));

/// The larger of each amount.
fn max_requests(mut a: Requests, b: &Requests) -> Requests {
    a.0.max_with(&b.0);
    a.1 = (a.1.0.max(b.1.0), a.1.1.max(b.1.1));
    a
}

/// What the containers need together, each asking what `ask` says.
///
/// Kubernetes' rules: regular containers are summed; each init container runs alone, so the
/// init phase needs the largest of them, plus the restartable (sidecar) init containers
/// started before it; sidecars keep running, so they also add to the sum.
fn containers_need(
    spec: &core::PodSpec,
    ask: impl Fn(&core::Container, &str) -> Result<Ask, ResourceError>,
) -> Result<Requests, ResourceError> {
    let add = |a: (i64, i64), b: (i64, i64)| (a.0 + b.0, a.1 + b.1);
    let mut sum = Resources::default();
    let mut non_zero_sum = (0i64, 0i64);
    for (i, c) in spec.containers.iter().enumerate() {
        let a = ask(c, &format!("spec.containers[{i}]"))?;
        non_zero_sum = add(non_zero_sum, a.non_zero());
        sum.add(&a.requests);
    }
    let mut init_max = Resources::default();
    let mut non_zero_init_max = (0i64, 0i64);
    let mut sidecars = Resources::default();
    let mut non_zero_sidecars = (0i64, 0i64);
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let a = ask(c, &format!("spec.initContainers[{i}]"))?;
        let nz = a.non_zero();
        let (phase, nz_phase) = if c.restart_policy.as_deref() == Some("Always") {
            sum.add(&a.requests);
            non_zero_sum = add(non_zero_sum, nz);
            sidecars.add(&a.requests);
            non_zero_sidecars = add(non_zero_sidecars, nz);
            (sidecars.clone(), non_zero_sidecars)
        } else {
            let mut phase = a.requests;
            phase.add(&sidecars);
            (phase, add(nz, non_zero_sidecars))
        };
        init_max.max_with(&phase);
        non_zero_init_max = (
            non_zero_init_max.0.max(nz_phase.0),
            non_zero_init_max.1.max(nz_phase.1),
        );
    }
    Ok(max_requests(
        (sum, non_zero_sum),
        &(init_max, non_zero_init_max),
    ))
}

/// The pod's effective requests and its non-zero cpu and memory for scoring, as
/// kube-scheduler 1.37's `PodRequests` counts them: the containers' (see [`containers_need`]),
/// at least what an in-place resize has allocated or actuated (see [`Resize`]), replaced by
/// the pod-level requests where the pod has them, overhead added last.
fn pod_requests(
    spec: &core::PodSpec,
    status: Option<&core::PodStatus>,
) -> Result<Requests, ResourceError> {
    let mut need = containers_need(spec, Ask::spec)?;
    let resize = status.and_then(Resize::of);
    if let Some(resize) = &resize {
        need = resize.apply(spec, need)?;
    }
    apply_pod_level_requests(spec, resize.as_ref(), &mut need)?;
    let (mut sum, mut non_zero_sum) = need;
    if let Some(overhead) = &spec.overhead {
        let o = Resources::from_list(
            overhead.iter().map(|(k, v)| (k, v.0.as_str())),
            "spec.overhead",
        )?;
        sum.add(&o);
        non_zero_sum = (non_zero_sum.0 + o.milli_cpu, non_zero_sum.1 + o.memory);
    }
    Ok((sum, non_zero_sum))
}

/// What the kubelet reports of a pod's in-place resize (GA in 1.35): the resources it has
/// allocated and those it has actuated, per container or for the pod. A pod counts the most
/// of its spec, the allocated and the actuated resources, for a resize may be under way in
/// either direction; the spec is left out when the resize was found infeasible.
struct Resize<'a> {
    status: &'a core::PodStatus,
    /// `PodResizePending` with reason `Infeasible`.
    infeasible: bool,
}

impl<'a> Resize<'a> {
    /// The resize `status` reports, if it reports resources at all (a pod not yet running
    /// reports none, and counts its spec alone).
    fn of(status: &'a core::PodStatus) -> Option<Resize<'a>> {
        let mut containers = status
            .container_statuses
            .iter()
            .flatten()
            .chain(status.init_container_statuses.iter().flatten());
        let reported = status.allocated_resources.is_some()
            || status.resources.is_some()
            || containers.any(|cs| cs.allocated_resources.is_some() || cs.resources.is_some());
        let infeasible =
            status.conditions.iter().flatten().any(|c| {
                c.type_ == "PodResizePending" && c.reason.as_deref() == Some("Infeasible")
            });
        reported.then_some(Resize { status, infeasible })
    }

    /// The status of the container `name`, with its path (`status.containerStatuses[0]`).
    fn container(&self, name: &str) -> Option<(String, &'a core::ContainerStatus)> {
        let s = self.status;
        let find = |list: Option<&'a Vec<core::ContainerStatus>>, field: &str| {
            let (i, cs) = list?.iter().enumerate().find(|(_, cs)| cs.name == name)?;
            Some((format!("status.{field}[{i}]"), cs))
        };
        find(s.container_statuses.as_ref(), "containerStatuses")
            .or_else(|| find(s.init_container_statuses.as_ref(), "initContainerStatuses"))
    }

    /// `spec_need` (the containers' spec) raised to what the resize allocated and actuated,
    /// or, for an infeasible resize, just those.
    fn apply(&self, spec: &core::PodSpec, spec_need: Requests) -> Result<Requests, ResourceError> {
        let (allocated, actuated) = match self.pod_level_status() {
            Some(both) => both?,
            None => (
                containers_need(spec, |c, field| self.allocated(c, field))?,
                containers_need(spec, |c, field| self.actuated(c, field))?,
            ),
        };
        let reported = max_requests(allocated, &actuated);
        Ok(if self.infeasible {
            reported
        } else {
            max_requests(spec_need, &reported)
        })
    }

    /// The pod-level allocated and actuated requests, when the kubelet reports both (1.36's
    /// in-place resize of pod-level resources): they already add the containers up.
    fn pod_level_status(&self) -> Option<Result<(Requests, Requests), ResourceError>> {
        let allocated = self.status.allocated_resources.as_ref()?;
        let actuated = self.status.resources.as_ref()?.requests.as_ref()?;
        let read = |list, field| {
            Ask::reported(list, field).map(|a| {
                let nz = a.non_zero();
                (a.requests, nz)
            })
        };
        Some(
            read(allocated, "status.allocatedResources")
                .and_then(|a| Ok((a, read(actuated, "status.resources.requests")?))),
        )
    }

    /// What the container was allocated: the kubelet's report, else its spec (nothing when the
    /// resize is infeasible).
    fn allocated(&self, c: &core::Container, field: &str) -> Result<Ask, ResourceError> {
        let reported = self
            .container(&c.name)
            .and_then(|(at, cs)| Some((at, cs.allocated_resources.as_ref()?)));
        match reported {
            Some((at, list)) => Ask::reported(list, &format!("{at}.allocatedResources")),
            None if self.infeasible => Ok(Ask::nothing()),
            None => Ask::spec(c, field),
        }
    }

    /// What the container runs with: the kubelet's report of its requests, else what it was
    /// allocated.
    fn actuated(&self, c: &core::Container, field: &str) -> Result<Ask, ResourceError> {
        let reported = self
            .container(&c.name)
            .and_then(|(at, cs)| Some((at, cs.resources.as_ref()?.requests.as_ref()?)));
        match reported {
            Some((at, list)) => Ask::reported(list, &format!("{at}.resources.requests")),
            None => self.allocated(c, field),
        }
    }
}

/// Pod-level requests (`spec.resources.requests`, on by default since Kubernetes 1.34) of the
/// resources Kubernetes manages at pod level (cpu, memory, hugepages) replace what the
/// containers add up to, for fitting and for scoring alike (kube-scheduler's `PodRequests`);
/// other resources stay the containers'. While a resize of them is reported, each is the most
/// of the spec (unless the resize is infeasible), the actuated and the allocated amounts.
fn apply_pod_level_requests(
    spec: &core::PodSpec,
    resize: Option<&Resize<'_>>,
    (sum, non_zero): &mut Requests,
) -> Result<(), ResourceError> {
    let Some(requests) = spec.resources.as_ref().and_then(|r| r.requests.as_ref()) else {
        return Ok(());
    };
    let read = |list: &BTreeMap<String, ApiQuantity>, field: &str| {
        Resources::from_list(
            list.iter()
                .filter(|(name, _)| is_pod_level_resource(name))
                .map(|(k, v)| (k, v.0.as_str())),
            field,
        )
    };
    let mut pod_level = read(requests, "spec.resources.requests")?;
    let mut names: BTreeSet<&String> = requests.keys().collect();
    if let Some(r) = resize.filter(|r| r.status.resources.is_some()) {
        if r.infeasible {
            pod_level = Resources::default();
            names.clear();
        }
        let status = r.status;
        let actuated = status.resources.as_ref().and_then(|x| x.requests.as_ref());
        for (list, field) in [
            (actuated, "status.resources.requests"),
            (
                status.allocated_resources.as_ref(),
                "status.allocatedResources",
            ),
        ] {
            if let Some(list) = list {
                pod_level.max_with(&read(list, field)?);
                names.extend(list.keys());
            }
        }
    }
    for name in names.into_iter().filter(|n| is_pod_level_resource(n)) {
        match name.as_str() {
            "cpu" => {
                sum.milli_cpu = pod_level.milli_cpu;
                non_zero.0 = pod_level.milli_cpu;
            }
            "memory" => {
                sum.memory = pod_level.memory;
                non_zero.1 = pod_level.memory;
            }
            _ => sum.set_scalar(name, pod_level.scalar(name)),
        }
    }
    Ok(())
}

/// A resource Kubernetes manages at pod level (its `IsSupportedPodLevelResource`).
fn is_pod_level_resource(name: &str) -> bool {
    matches!(name, "cpu" | "memory") || name.starts_with("hugepages-")
}

/// Kubernetes' QoS rule: from the pod-level resources where the pod has them (see
/// [`pod_level_qos`]), else over every container, init ones included: only cpu and memory count,
/// a missing request defaults to the limit (as the API server defaults it), and zero amounts
/// count as unset.
fn qos_class(spec: &core::PodSpec) -> Result<QosClass, String> {
    if let Some(pod_level) = pod_level_qos(spec) {
        return pod_level;
    }
    const NAMES: [&str; 2] = ["cpu", "memory"];
    let mut requests = [0i64; 2];
    let mut limits = [0i64; 2];
    let mut requested = [false; 2];
    let mut limited = [false; 2];
    let mut guaranteed = true;
    let init = spec.init_containers.iter().flatten().enumerate();
    let containers = init
        .map(|(i, c)| (format!("spec.initContainers[{i}]"), c))
        .chain(
            spec.containers
                .iter()
                .enumerate()
                .map(|(i, c)| (format!("spec.containers[{i}]"), c)),
        );
    for (field, c) in containers {
        let res = c.resources.as_ref();
        let requests_list = res.and_then(|r| r.requests.as_ref());
        let limits_list = res.and_then(|r| r.limits.as_ref());
        let mut has_limit = [false; 2];
        for (i, name) in NAMES.iter().enumerate() {
            let limit = milli_amount(limits_list, name, &field, "limits")?;
            let request = match milli_amount(requests_list, name, &field, "requests")? {
                Some(r) => r,
                None => limit.unwrap_or(0),
            };
            if request > 0 {
                requests[i] = requests[i].saturating_add(request);
                requested[i] = true;
            }
            if let Some(l) = limit.filter(|l| *l > 0) {
                limits[i] = limits[i].saturating_add(l);
                limited[i] = true;
                has_limit[i] = true;
            }
        }
        guaranteed &= has_limit[0] && has_limit[1];
    }
    if requested == [false; 2] && limited == [false; 2] {
        return Ok(QosClass::BestEffort);
    }
    if guaranteed && requested == limited && requests == limits {
        return Ok(QosClass::Guaranteed);
    }
    Ok(QosClass::Burstable)
}

/// The QoS class of a pod with pod-level resources (any request or limit of cpu, memory or
/// hugepages in `spec.resources`), which kube-scheduler 1.37 takes from them alone: per cpu
/// and memory, equal non-zero request and limit is Guaranteed, both unset BestEffort,
/// anything else Burstable; the classes must agree, else the pod is Burstable.
fn pod_level_qos(spec: &core::PodSpec) -> Option<Result<QosClass, String>> {
    let r = spec.resources.as_ref()?;
    let set = |list: Option<&BTreeMap<String, ApiQuantity>>| {
        list.is_some_and(|l| l.keys().any(|k| is_pod_level_resource(k)))
    };
    if !set(r.requests.as_ref()) && !set(r.limits.as_ref()) {
        return None;
    }
    Some(pod_level_qos_of(r))
}

/// [`pod_level_qos`] of the pod-level `resources`.
fn pod_level_qos_of(r: &core::ResourceRequirements) -> Result<QosClass, String> {
    let class_of = |name: &str| -> Result<QosClass, String> {
        let request = milli_amount(r.requests.as_ref(), name, "spec", "requests")?.unwrap_or(0);
        let limit = milli_amount(r.limits.as_ref(), name, "spec", "limits")?.unwrap_or(0);
        Ok(match (request == limit, request) {
            (false, _) => QosClass::Burstable,
            (true, 0) => QosClass::BestEffort,
            (true, _) => QosClass::Guaranteed,
        })
    };
    let (cpu, memory) = (class_of("cpu")?, class_of("memory")?);
    Ok(if cpu == memory {
        cpu
    } else {
        QosClass::Burstable
    })
}

/// The amount of `name` in a container's `requests` or `limits` (`kind`), in thousandths;
/// `container` is the container's field path, for errors.
fn milli_amount(
    list: Option<&std::collections::BTreeMap<String, ApiQuantity>>,
    name: &str,
    container: &str,
    kind: &str,
) -> Result<Option<i64>, String> {
    list.and_then(|l| l.get(name))
        .map(|q| {
            Quantity::parse(&q.0)
                .map(|q| q.milli_value())
                .map_err(|e| format!("{container}.resources.{kind}[{name}]: {e}"))
        })
        .transpose()
}

fn host_ports(spec: &core::PodSpec) -> Result<Vec<HostPort>, String> {
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    let mut out = Vec::new();
    for (i, c) in spec.containers.iter().chain(sidecars).enumerate() {
        for (j, p) in c.ports.iter().flatten().enumerate() {
            let Some(port) = p.host_port.filter(|p| *p > 0) else {
                continue;
            };
            let field = format!("spec.containers[{i}].ports[{j}]");
            let port = u16::try_from(port)
                .map_err(|_| format!("{field}.hostPort: {port} is not a valid port number"))?;
            let protocol = match p.protocol.as_deref() {
                None | Some("") | Some("TCP") => Protocol::Tcp,
                Some("UDP") => Protocol::Udp,
                Some("SCTP") => Protocol::Sctp,
                Some(other) => {
                    return Err(format!(
                        "{field}.protocol: unknown protocol {}",
                        echo(other)
                    ));
                }
            };
            let ip = match p.host_ip.as_deref() {
                None | Some("") => std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
                Some(ip) => ip
                    .parse()
                    .map_err(|_| format!("{field}.hostIP: {} is not an IP address", echo(ip)))?,
            };
            out.push(HostPort { ip, protocol, port });
        }
    }
    Ok(out)
}

fn affinity_term(
    t: &core::PodAffinityTerm,
    namespace: &str,
    labels: &Labels,
    field: &str,
) -> Result<AffinityTerm, SelectorError> {
    let mut selector =
        LabelSelector::compile(t.label_selector.as_ref(), &format!("{field}.labelSelector"))?;
    // matchLabelKeys / mismatchLabelKeys only narrow a selector that exists.
    if t.label_selector.is_some() {
        for key in t.match_label_keys.iter().flatten() {
            if let Some(v) = labels.get(key) {
                selector.require_equal(key, v);
            }
        }
        for key in t.mismatch_label_keys.iter().flatten() {
            if let Some(v) = labels.get(key) {
                selector.require_not_equal(key, v);
            }
        }
    }
    let namespaces = t.namespaces.clone().unwrap_or_default();
    let namespaces = if namespaces.is_empty() && t.namespace_selector.is_none() {
        vec![namespace.to_string()]
    } else {
        namespaces
    };
    if t.topology_key.is_empty() {
        return Err(SelectorError {
            field: format!("{field}.topologyKey"),
            reason: "must be non-empty".to_string(),
        });
    }
    Ok(AffinityTerm {
        namespaces,
        namespace_selector: LabelSelector::compile(
            t.namespace_selector.as_ref(),
            &format!("{field}.namespaceSelector"),
        )?,
        selector,
        topology_key: t.topology_key.clone(),
    })
}

fn affinity_terms(
    required: Option<&Vec<core::PodAffinityTerm>>,
    preferred: Option<&Vec<core::WeightedPodAffinityTerm>>,
    namespace: &str,
    labels: &Labels,
    field: &str,
) -> Result<(Vec<AffinityTerm>, Vec<WeightedAffinityTerm>), SelectorError> {
    let required = required
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, t)| {
            affinity_term(
                t,
                namespace,
                labels,
                &format!("{field}.requiredDuringSchedulingIgnoredDuringExecution[{i}]"),
            )
        })
        .collect::<Result<_, _>>()?;
    let preferred = preferred
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, w)| {
            let f = format!("{field}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
            check_weight(w.weight, &f)?;
            Ok(WeightedAffinityTerm {
                weight: w.weight,
                term: affinity_term(
                    &w.pod_affinity_term,
                    namespace,
                    labels,
                    &format!("{f}.podAffinityTerm"),
                )?,
            })
        })
        .collect::<Result<_, _>>()?;
    Ok((required, preferred))
}

fn pod_affinity(
    spec: &core::PodSpec,
    namespace: &str,
    labels: &Labels,
) -> Result<PodAffinity, SelectorError> {
    let Some(a) = spec.affinity.as_ref() else {
        return Ok(PodAffinity::default());
    };
    let (required, preferred) = match &a.pod_affinity {
        Some(p) => affinity_terms(
            p.required_during_scheduling_ignored_during_execution
                .as_ref(),
            p.preferred_during_scheduling_ignored_during_execution
                .as_ref(),
            namespace,
            labels,
            "spec.affinity.podAffinity",
        )?,
        None => Default::default(),
    };
    let (required_anti, preferred_anti) = match &a.pod_anti_affinity {
        Some(p) => affinity_terms(
            p.required_during_scheduling_ignored_during_execution
                .as_ref(),
            p.preferred_during_scheduling_ignored_during_execution
                .as_ref(),
            namespace,
            labels,
            "spec.affinity.podAntiAffinity",
        )?,
        None => Default::default(),
    };
    Ok(PodAffinity {
        required,
        preferred,
        required_anti,
        preferred_anti,
    })
}

fn topology_spread(
    spec: &core::PodSpec,
    labels: &Labels,
) -> Result<Vec<TopologySpreadConstraint>, SelectorError> {
    let mut out = Vec::new();
    for (i, c) in spec
        .topology_spread_constraints
        .iter()
        .flatten()
        .enumerate()
    {
        let field = format!("spec.topologySpreadConstraints[{i}]");
        let err = |f: &str, reason: String| SelectorError {
            field: format!("{field}.{f}"),
            reason,
        };
        if c.max_skew < 1 {
            return Err(err(
                "maxSkew",
                format!("must be greater than zero, got {}", c.max_skew),
            ));
        }
        if c.topology_key.is_empty() {
            return Err(err("topologyKey", "must be non-empty".to_string()));
        }
        let when_unsatisfiable = match c.when_unsatisfiable.as_str() {
            "DoNotSchedule" => WhenUnsatisfiable::DoNotSchedule,
            "ScheduleAnyway" => WhenUnsatisfiable::ScheduleAnyway,
            other => {
                return Err(err(
                    "whenUnsatisfiable",
                    format!("unsupported value {}", echo(other)),
                ));
            }
        };
        if let Some(m) = c.min_domains {
            if m < 1 {
                return Err(err(
                    "minDomains",
                    format!("must be greater than zero, got {m}"),
                ));
            }
            if when_unsatisfiable != WhenUnsatisfiable::DoNotSchedule {
                return Err(err(
                    "minDomains",
                    "can only be set with whenUnsatisfiable: DoNotSchedule".to_string(),
                ));
            }
        }
        let policy = |v: Option<&str>, default: InclusionPolicy, f: &str| match v {
            None => Ok(default),
            Some("Honor") => Ok(InclusionPolicy::Honor),
            Some("Ignore") => Ok(InclusionPolicy::Ignore),
            Some(other) => Err(err(f, format!("unsupported value {}", echo(other)))),
        };
        let mut selector =
            LabelSelector::compile(c.label_selector.as_ref(), &format!("{field}.labelSelector"))?;
        if c.label_selector.is_some() {
            for key in c.match_label_keys.iter().flatten() {
                if let Some(v) = labels.get(key) {
                    selector.require_equal(key, v);
                }
            }
        }
        out.push(TopologySpreadConstraint {
            max_skew: c.max_skew,
            topology_key: c.topology_key.clone(),
            when_unsatisfiable,
            selector,
            min_domains: c.min_domains,
            node_affinity_policy: policy(
                c.node_affinity_policy.as_deref(),
                InclusionPolicy::Honor,
                "nodeAffinityPolicy",
            )?,
            node_taints_policy: policy(
                c.node_taints_policy.as_deref(),
                InclusionPolicy::Ignore,
                "nodeTaintsPolicy",
            )?,
        });
    }
    Ok(out)
}

/// Adds `:latest` to an image reference without a tag or digest, as the kubelet reports them.
pub fn normalized_image_name(name: &str) -> String {
    let last_colon = name.rfind(':');
    let last_slash = name.rfind('/');
    let has_tag = match (last_colon, last_slash) {
        (Some(c), Some(s)) => c > s,
        (Some(_), None) => true,
        (None, _) => false,
    };
    if has_tag || name.contains('@') {
        name.to_string()
    } else {
        format!("{name}:latest")
    }
}
