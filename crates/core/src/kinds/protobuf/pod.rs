//! `core/v1` Pod, as far as scheduling reads it: metadata, the spec's volumes, containers,
//! overhead, placement rules, priority and preemption policy, and of the status what
//! preemption reads (start time, nominated node, conditions). Tags are those of
//! `k8s.io/api`'s `core/v1/generated.proto`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as api;

use super::meta::{
    LabelSelector, ObjectMeta, Quantity, Requirement, Time, quantities, some_map, some_vec, text,
};
use super::volume::Volume;

/// `Pod`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Pod {
    /// `metadata`.
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
    /// `spec`.
    #[prost(message, optional, tag = "2")]
    pub spec: Option<PodSpec>,
    /// `status`.
    #[prost(message, optional, tag = "3")]
    pub status: Option<PodStatus>,
}

impl From<Pod> for api::Pod {
    fn from(p: Pod) -> Self {
        api::Pod {
            metadata: p.metadata.map(Into::into).unwrap_or_default(),
            spec: p.spec.map(Into::into),
            status: p.status.map(Into::into),
        }
    }
}

/// `PodStatus`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodStatus {
    /// `conditions`.
    #[prost(message, repeated, tag = "2")]
    pub conditions: Vec<PodCondition>,
    /// `startTime`.
    #[prost(message, optional, tag = "7")]
    pub start_time: Option<Time>,
    /// `containerStatuses`.
    #[prost(message, repeated, tag = "8")]
    pub container_statuses: Vec<ContainerStatus>,
    /// `initContainerStatuses`.
    #[prost(message, repeated, tag = "10")]
    pub init_container_statuses: Vec<ContainerStatus>,
    /// `nominatedNodeName`.
    #[prost(string, optional, tag = "11")]
    pub nominated_node_name: Option<String>,
    /// `resourceClaimStatuses`: the claims made for the pod from its templates.
    #[prost(message, repeated, tag = "15")]
    pub resource_claim_statuses: Vec<PodResourceClaimStatus>,
    /// `allocatedResources`: what the kubelet allocated to the pod (pod-level resize).
    #[prost(btree_map = "string, message", tag = "19")]
    pub allocated_resources: BTreeMap<String, Quantity>,
    /// `resources`: what the pod runs with (pod-level resize).
    #[prost(message, optional, tag = "20")]
    pub resources: Option<ResourceRequirements>,
}

impl From<PodStatus> for api::PodStatus {
    fn from(s: PodStatus) -> Self {
        api::PodStatus {
            conditions: some_vec(s.conditions),
            start_time: s.start_time.and_then(Time::into_api),
            container_statuses: some_vec(s.container_statuses),
            init_container_statuses: some_vec(s.init_container_statuses),
            nominated_node_name: text(s.nominated_node_name),
            resource_claim_statuses: some_vec(s.resource_claim_statuses),
            allocated_resources: quantities(s.allocated_resources),
            resources: s.resources.map(Into::into),
            ..Default::default()
        }
    }
}

/// `ContainerStatus`, as far as an in-place resize goes: what the kubelet allocated to the
/// container and what it runs with.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerStatus {
    /// `name`.
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    /// `allocatedResources`.
    #[prost(btree_map = "string, message", tag = "10")]
    pub allocated_resources: BTreeMap<String, Quantity>,
    /// `resources`.
    #[prost(message, optional, tag = "11")]
    pub resources: Option<ResourceRequirements>,
}

impl From<ContainerStatus> for api::ContainerStatus {
    fn from(c: ContainerStatus) -> Self {
        api::ContainerStatus {
            name: c.name.unwrap_or_default(),
            allocated_resources: quantities(c.allocated_resources),
            resources: c.resources.map(Into::into),
            ..Default::default()
        }
    }
}

/// `PodCondition`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodCondition {
    /// `type`.
    #[prost(string, optional, tag = "1")]
    pub type_: Option<String>,
    /// `status`.
    #[prost(string, optional, tag = "2")]
    pub status: Option<String>,
    /// `reason`.
    #[prost(string, optional, tag = "5")]
    pub reason: Option<String>,
}

impl From<PodCondition> for api::PodCondition {
    fn from(c: PodCondition) -> Self {
        api::PodCondition {
            type_: c.type_.unwrap_or_default(),
            status: c.status.unwrap_or_default(),
            reason: text(c.reason),
            ..Default::default()
        }
    }
}

/// `PodSpec`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSpec {
    /// `volumes`.
    #[prost(message, repeated, tag = "1")]
    pub volumes: Vec<Volume>,
    /// `containers`.
    #[prost(message, repeated, tag = "2")]
    pub containers: Vec<Container>,
    /// `nodeSelector`.
    #[prost(btree_map = "string, string", tag = "7")]
    pub node_selector: BTreeMap<String, String>,
    /// `nodeName`.
    #[prost(string, optional, tag = "10")]
    pub node_name: Option<String>,
    /// `hostNetwork`.
    #[prost(bool, optional, tag = "11")]
    pub host_network: Option<bool>,
    /// `affinity`.
    #[prost(message, optional, tag = "18")]
    pub affinity: Option<Affinity>,
    /// `schedulerName`.
    #[prost(string, optional, tag = "19")]
    pub scheduler_name: Option<String>,
    /// `initContainers`.
    #[prost(message, repeated, tag = "20")]
    pub init_containers: Vec<Container>,
    /// `tolerations`.
    #[prost(message, repeated, tag = "22")]
    pub tolerations: Vec<Toleration>,
    /// `priorityClassName`.
    #[prost(string, optional, tag = "24")]
    pub priority_class_name: Option<String>,
    /// `priority`.
    #[prost(int32, optional, tag = "25")]
    pub priority: Option<i32>,
    /// `preemptionPolicy`.
    #[prost(string, optional, tag = "31")]
    pub preemption_policy: Option<String>,
    /// `overhead`.
    #[prost(btree_map = "string, message", tag = "32")]
    pub overhead: BTreeMap<String, Quantity>,
    /// `topologySpreadConstraints`.
    #[prost(message, repeated, tag = "33")]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    /// `hostUsers`.
    #[prost(bool, optional, tag = "37")]
    pub host_users: Option<bool>,
    /// `schedulingGates`.
    #[prost(message, repeated, tag = "38")]
    pub scheduling_gates: Vec<PodSchedulingGate>,
    /// `resourceClaims`.
    #[prost(message, repeated, tag = "39")]
    pub resource_claims: Vec<PodResourceClaim>,
    /// `resources`: the pod-level requests and limits.
    #[prost(message, optional, tag = "40")]
    pub resources: Option<ResourceRequirements>,
}

impl From<PodSpec> for api::PodSpec {
    fn from(s: PodSpec) -> Self {
        api::PodSpec {
            volumes: some_vec(s.volumes),
            containers: s.containers.into_iter().map(Into::into).collect(),
            node_selector: some_map(s.node_selector),
            node_name: text(s.node_name),
            host_network: s.host_network,
            host_users: s.host_users,
            affinity: s.affinity.map(Into::into),
            scheduler_name: text(s.scheduler_name),
            init_containers: some_vec(s.init_containers),
            tolerations: some_vec(s.tolerations),
            priority_class_name: text(s.priority_class_name),
            priority: s.priority,
            preemption_policy: text(s.preemption_policy),
            overhead: quantities(s.overhead),
            topology_spread_constraints: some_vec(s.topology_spread_constraints),
            scheduling_gates: some_vec(s.scheduling_gates),
            resource_claims: some_vec(s.resource_claims),
            resources: s.resources.map(Into::into),
            ..Default::default()
        }
    }
}

/// `Container`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Container {
    /// `name`.
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    /// `image`.
    #[prost(string, optional, tag = "2")]
    pub image: Option<String>,
    /// `ports`.
    #[prost(message, repeated, tag = "6")]
    pub ports: Vec<ContainerPort>,
    /// `resources`.
    #[prost(message, optional, tag = "8")]
    pub resources: Option<ResourceRequirements>,
    /// `restartPolicy` (`Always` makes an init container a sidecar).
    #[prost(string, optional, tag = "24")]
    pub restart_policy: Option<String>,
    /// `restartPolicyRules`.
    #[prost(message, repeated, tag = "25")]
    pub restart_policy_rules: Vec<ContainerRestartRule>,
}

impl From<Container> for api::Container {
    fn from(c: Container) -> Self {
        api::Container {
            name: c.name.unwrap_or_default(),
            image: text(c.image),
            ports: some_vec(c.ports),
            resources: c.resources.map(Into::into),
            restart_policy: text(c.restart_policy),
            restart_policy_rules: some_vec(c.restart_policy_rules),
            ..Default::default()
        }
    }
}

/// `ContainerRestartRule`: its action (the exit codes it applies to are not read).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerRestartRule {
    /// `action`.
    #[prost(string, optional, tag = "1")]
    pub action: Option<String>,
}

impl From<ContainerRestartRule> for api::ContainerRestartRule {
    fn from(r: ContainerRestartRule) -> Self {
        api::ContainerRestartRule {
            action: r.action.unwrap_or_default(),
            exit_codes: None,
        }
    }
}

/// `ContainerPort`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerPort {
    /// `hostPort`.
    #[prost(int32, optional, tag = "2")]
    pub host_port: Option<i32>,
    /// `containerPort`.
    #[prost(int32, optional, tag = "3")]
    pub container_port: Option<i32>,
    /// `protocol`.
    #[prost(string, optional, tag = "4")]
    pub protocol: Option<String>,
    /// `hostIP`.
    #[prost(string, optional, tag = "5")]
    pub host_ip: Option<String>,
}

impl From<ContainerPort> for api::ContainerPort {
    fn from(p: ContainerPort) -> Self {
        api::ContainerPort {
            host_port: p.host_port.filter(|p| *p != 0),
            container_port: p.container_port.unwrap_or(0),
            protocol: text(p.protocol),
            host_ip: text(p.host_ip),
            name: None,
        }
    }
}

/// `ResourceRequirements`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ResourceRequirements {
    /// `limits`.
    #[prost(btree_map = "string, message", tag = "1")]
    pub limits: BTreeMap<String, Quantity>,
    /// `requests`.
    #[prost(btree_map = "string, message", tag = "2")]
    pub requests: BTreeMap<String, Quantity>,
}

impl From<ResourceRequirements> for api::ResourceRequirements {
    fn from(r: ResourceRequirements) -> Self {
        api::ResourceRequirements {
            limits: quantities(r.limits),
            requests: quantities(r.requests),
            claims: None,
        }
    }
}

/// `Toleration`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Toleration {
    /// `key`.
    #[prost(string, optional, tag = "1")]
    pub key: Option<String>,
    /// `operator`.
    #[prost(string, optional, tag = "2")]
    pub operator: Option<String>,
    /// `value`.
    #[prost(string, optional, tag = "3")]
    pub value: Option<String>,
    /// `effect`.
    #[prost(string, optional, tag = "4")]
    pub effect: Option<String>,
    /// `tolerationSeconds`.
    #[prost(int64, optional, tag = "5")]
    pub toleration_seconds: Option<i64>,
}

impl From<Toleration> for api::Toleration {
    fn from(t: Toleration) -> Self {
        api::Toleration {
            key: text(t.key),
            operator: text(t.operator),
            value: text(t.value),
            effect: text(t.effect),
            toleration_seconds: t.toleration_seconds,
        }
    }
}

/// `Affinity`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Affinity {
    /// `nodeAffinity`.
    #[prost(message, optional, tag = "1")]
    pub node_affinity: Option<NodeAffinity>,
    /// `podAffinity`.
    #[prost(message, optional, tag = "2")]
    pub pod_affinity: Option<PodAffinityRules>,
    /// `podAntiAffinity` (the same shape as `podAffinity`).
    #[prost(message, optional, tag = "3")]
    pub pod_anti_affinity: Option<PodAffinityRules>,
}

impl From<Affinity> for api::Affinity {
    fn from(a: Affinity) -> Self {
        api::Affinity {
            node_affinity: a.node_affinity.map(Into::into),
            pod_affinity: a.pod_affinity.map(|p| api::PodAffinity {
                required_during_scheduling_ignored_during_execution: some_vec(p.required),
                preferred_during_scheduling_ignored_during_execution: some_vec(p.preferred),
            }),
            pod_anti_affinity: a.pod_anti_affinity.map(|p| api::PodAntiAffinity {
                required_during_scheduling_ignored_during_execution: some_vec(p.required),
                preferred_during_scheduling_ignored_during_execution: some_vec(p.preferred),
            }),
        }
    }
}

/// `NodeAffinity`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeAffinity {
    /// `requiredDuringSchedulingIgnoredDuringExecution`.
    #[prost(message, optional, tag = "1")]
    pub required: Option<NodeSelector>,
    /// `preferredDuringSchedulingIgnoredDuringExecution`.
    #[prost(message, repeated, tag = "2")]
    pub preferred: Vec<PreferredSchedulingTerm>,
}

impl From<NodeAffinity> for api::NodeAffinity {
    fn from(n: NodeAffinity) -> Self {
        api::NodeAffinity {
            required_during_scheduling_ignored_during_execution: n.required.map(Into::into),
            preferred_during_scheduling_ignored_during_execution: some_vec(n.preferred),
        }
    }
}

/// `NodeSelector`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeSelector {
    /// `nodeSelectorTerms`.
    #[prost(message, repeated, tag = "1")]
    pub node_selector_terms: Vec<NodeSelectorTerm>,
}

impl From<NodeSelector> for api::NodeSelector {
    fn from(n: NodeSelector) -> Self {
        api::NodeSelector {
            node_selector_terms: n.node_selector_terms.into_iter().map(Into::into).collect(),
        }
    }
}

/// `NodeSelectorTerm`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeSelectorTerm {
    /// `matchExpressions`.
    #[prost(message, repeated, tag = "1")]
    pub match_expressions: Vec<Requirement>,
    /// `matchFields`.
    #[prost(message, repeated, tag = "2")]
    pub match_fields: Vec<Requirement>,
}

impl From<NodeSelectorTerm> for api::NodeSelectorTerm {
    fn from(t: NodeSelectorTerm) -> Self {
        api::NodeSelectorTerm {
            match_expressions: some_vec(t.match_expressions),
            match_fields: some_vec(t.match_fields),
        }
    }
}

/// `PreferredSchedulingTerm`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PreferredSchedulingTerm {
    /// `weight`.
    #[prost(int32, optional, tag = "1")]
    pub weight: Option<i32>,
    /// `preference`.
    #[prost(message, optional, tag = "2")]
    pub preference: Option<NodeSelectorTerm>,
}

impl From<PreferredSchedulingTerm> for api::PreferredSchedulingTerm {
    fn from(p: PreferredSchedulingTerm) -> Self {
        api::PreferredSchedulingTerm {
            weight: p.weight.unwrap_or(0),
            preference: p.preference.map(Into::into).unwrap_or_default(),
        }
    }
}

/// `PodAffinity` and `PodAntiAffinity`, which share their fields.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodAffinityRules {
    /// `requiredDuringSchedulingIgnoredDuringExecution`.
    #[prost(message, repeated, tag = "1")]
    pub required: Vec<PodAffinityTerm>,
    /// `preferredDuringSchedulingIgnoredDuringExecution`.
    #[prost(message, repeated, tag = "2")]
    pub preferred: Vec<WeightedPodAffinityTerm>,
}

/// `PodAffinityTerm`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodAffinityTerm {
    /// `labelSelector`.
    #[prost(message, optional, tag = "1")]
    pub label_selector: Option<LabelSelector>,
    /// `namespaces`.
    #[prost(string, repeated, tag = "2")]
    pub namespaces: Vec<String>,
    /// `topologyKey`.
    #[prost(string, optional, tag = "3")]
    pub topology_key: Option<String>,
    /// `namespaceSelector`.
    #[prost(message, optional, tag = "4")]
    pub namespace_selector: Option<LabelSelector>,
    /// `matchLabelKeys`.
    #[prost(string, repeated, tag = "5")]
    pub match_label_keys: Vec<String>,
    /// `mismatchLabelKeys`.
    #[prost(string, repeated, tag = "6")]
    pub mismatch_label_keys: Vec<String>,
}

impl From<PodAffinityTerm> for api::PodAffinityTerm {
    fn from(t: PodAffinityTerm) -> Self {
        api::PodAffinityTerm {
            label_selector: t.label_selector.map(Into::into),
            namespaces: some_vec(t.namespaces),
            topology_key: t.topology_key.unwrap_or_default(),
            namespace_selector: t.namespace_selector.map(Into::into),
            match_label_keys: some_vec(t.match_label_keys),
            mismatch_label_keys: some_vec(t.mismatch_label_keys),
        }
    }
}

/// `WeightedPodAffinityTerm`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WeightedPodAffinityTerm {
    /// `weight`.
    #[prost(int32, optional, tag = "1")]
    pub weight: Option<i32>,
    /// `podAffinityTerm`.
    #[prost(message, optional, tag = "2")]
    pub pod_affinity_term: Option<PodAffinityTerm>,
}

impl From<WeightedPodAffinityTerm> for api::WeightedPodAffinityTerm {
    fn from(w: WeightedPodAffinityTerm) -> Self {
        api::WeightedPodAffinityTerm {
            weight: w.weight.unwrap_or(0),
            pod_affinity_term: w.pod_affinity_term.map(Into::into).unwrap_or_default(),
        }
    }
}

/// `TopologySpreadConstraint`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TopologySpreadConstraint {
    /// `maxSkew`.
    #[prost(int32, optional, tag = "1")]
    pub max_skew: Option<i32>,
    /// `topologyKey`.
    #[prost(string, optional, tag = "2")]
    pub topology_key: Option<String>,
    /// `whenUnsatisfiable`.
    #[prost(string, optional, tag = "3")]
    pub when_unsatisfiable: Option<String>,
    /// `labelSelector`.
    #[prost(message, optional, tag = "4")]
    pub label_selector: Option<LabelSelector>,
    /// `minDomains`.
    #[prost(int32, optional, tag = "5")]
    pub min_domains: Option<i32>,
    /// `nodeAffinityPolicy`.
    #[prost(string, optional, tag = "6")]
    pub node_affinity_policy: Option<String>,
    /// `nodeTaintsPolicy`.
    #[prost(string, optional, tag = "7")]
    pub node_taints_policy: Option<String>,
    /// `matchLabelKeys`.
    #[prost(string, repeated, tag = "8")]
    pub match_label_keys: Vec<String>,
}

impl From<TopologySpreadConstraint> for api::TopologySpreadConstraint {
    fn from(c: TopologySpreadConstraint) -> Self {
        api::TopologySpreadConstraint {
            max_skew: c.max_skew.unwrap_or(0),
            topology_key: c.topology_key.unwrap_or_default(),
            when_unsatisfiable: c.when_unsatisfiable.unwrap_or_default(),
            label_selector: c.label_selector.map(Into::into),
            min_domains: c.min_domains,
            node_affinity_policy: text(c.node_affinity_policy),
            node_taints_policy: text(c.node_taints_policy),
            match_label_keys: some_vec(c.match_label_keys),
        }
    }
}

/// `PodSchedulingGate`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSchedulingGate {
    /// `name`.
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
}

impl From<PodSchedulingGate> for api::PodSchedulingGate {
    fn from(g: PodSchedulingGate) -> Self {
        api::PodSchedulingGate {
            name: g.name.unwrap_or_default(),
        }
    }
}

/// `PodResourceClaim`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodResourceClaim {
    /// `name`.
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    /// `resourceClaimName`.
    #[prost(string, optional, tag = "3")]
    pub resource_claim_name: Option<String>,
    /// `resourceClaimTemplateName`.
    #[prost(string, optional, tag = "4")]
    pub resource_claim_template_name: Option<String>,
}

impl From<PodResourceClaim> for api::PodResourceClaim {
    fn from(c: PodResourceClaim) -> Self {
        api::PodResourceClaim {
            name: c.name.unwrap_or_default(),
            resource_claim_name: text(c.resource_claim_name),
            resource_claim_template_name: text(c.resource_claim_template_name),
        }
    }
}

/// `PodResourceClaimStatus`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodResourceClaimStatus {
    /// `name`: the pod's claim.
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    /// `resourceClaimName`: the claim made for it (none: none is needed).
    #[prost(string, optional, tag = "2")]
    pub resource_claim_name: Option<String>,
}

impl From<PodResourceClaimStatus> for api::PodResourceClaimStatus {
    fn from(c: PodResourceClaimStatus) -> Self {
        api::PodResourceClaimStatus {
            name: c.name.unwrap_or_default(),
            resource_claim_name: text(c.resource_claim_name),
        }
    }
}

/// A pod as the PodGroup status writer reads it: its metadata (labels included), whether it
/// has a node, and its phase; every other field is skipped undecoded.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodMembership {
    /// `metadata`.
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
    /// `spec`, of which `nodeName` only.
    #[prost(message, optional, tag = "2")]
    pub spec: Option<MembershipSpec>,
    /// `status`, of which `phase` only.
    #[prost(message, optional, tag = "3")]
    pub status: Option<MembershipStatus>,
}

/// `PodSpec`, as far as [`PodMembership`] reads it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MembershipSpec {
    /// `nodeName`.
    #[prost(string, optional, tag = "10")]
    pub node_name: Option<String>,
}

/// `PodStatus`, as far as [`PodMembership`] reads it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MembershipStatus {
    /// `phase`.
    #[prost(string, optional, tag = "1")]
    pub phase: Option<String>,
}
