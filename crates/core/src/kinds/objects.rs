//! The API objects the scheduler's nodes, pods and PodGroups are written back as, with what
//! the scheduler reads of them (see [`super::Kind::write`]). A pod's containers become one
//! container holding the pod's effective requests (with limits equal to them for a
//! Guaranteed pod) and its host ports, followed by one container per further image; only
//! the annotations the scheduler keeps are written; a generic ephemeral volume is written
//! as the claim it stands for. Read back, every node and pod is the model it was, except
//! that a pod with several containers of which some request no cpu or memory is scored as
//! if one did not.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;

use crate::model::node_features;
use crate::model::pod::{
    AffinityTerm, InclusionPolicy, Protocol, QosClass, WeightedAffinityTerm, WhenUnsatisfiable,
};
use crate::model::pod_group::{self, PodGroup, PodGroupModel, PodGroupSpec};
use crate::model::selector::NodeSelector;
use crate::model::taint::{TaintEffect, TolerationOperator};
use crate::model::{Labels, NodeModel, PodInfo, Resources};

/// Labels as an API object's map; `None` when there are none.
pub(super) fn map(labels: &Labels) -> Option<BTreeMap<String, String>> {
    let map: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    (!map.is_empty()).then_some(map)
}

/// Resources as a resource list: cpu in millicores, the rest in units.
fn resource_list(r: &Resources, with_pods: bool) -> BTreeMap<String, Quantity> {
    let mut list = BTreeMap::new();
    let mut put = |name: &str, value: String| {
        list.insert(name.to_string(), Quantity(value));
    };
    if r.milli_cpu != 0 {
        put("cpu", format!("{}m", r.milli_cpu));
    }
    if r.memory != 0 {
        put("memory", r.memory.to_string());
    }
    if r.ephemeral_storage != 0 {
        put("ephemeral-storage", r.ephemeral_storage.to_string());
    }
    if with_pods {
        put("pods", r.allowed_pods.to_string());
    }
    for (name, amount) in &r.scalar {
        put(name, amount.to_string());
    }
    list
}

fn effect(e: TaintEffect) -> String {
    match e {
        TaintEffect::NoSchedule => "NoSchedule",
        TaintEffect::PreferNoSchedule => "PreferNoSchedule",
        TaintEffect::NoExecute => "NoExecute",
    }
    .to_string()
}

/// A node as the API would hold it, with what the scheduler reads.
pub(super) fn node_object(n: &NodeModel) -> core::Node {
    core::Node {
        metadata: meta::ObjectMeta {
            name: Some(n.name.to_string()),
            labels: map(&n.labels),
            annotations: map(&n.annotations),
            ..Default::default()
        },
        spec: Some(core::NodeSpec {
            unschedulable: n.unschedulable.then_some(true),
            taints: (!n.taints.is_empty()).then(|| {
                n.taints
                    .iter()
                    .map(|t| core::Taint {
                        key: t.key.clone(),
                        value: (!t.value.is_empty()).then(|| t.value.clone()),
                        effect: effect(t.effect),
                        time_added: None,
                    })
                    .collect()
            }),
            ..Default::default()
        }),
        status: Some(core::NodeStatus {
            allocatable: Some(resource_list(&n.allocatable, true)),
            images: (!n.images.is_empty()).then(|| {
                n.images
                    .iter()
                    .map(|i| core::ContainerImage {
                        names: Some(i.names.clone()),
                        size_bytes: Some(i.size),
                    })
                    .collect()
            }),
            declared_features: (!n.declared_features.is_empty())
                .then(|| n.declared_features.to_vec()),
            ..Default::default()
        }),
    }
}

fn affinity_term(t: &AffinityTerm) -> core::PodAffinityTerm {
    core::PodAffinityTerm {
        label_selector: t.selector.to_api(),
        namespaces: (!t.namespaces.is_empty()).then(|| t.namespaces.clone()),
        namespace_selector: t.namespace_selector.to_api(),
        topology_key: t.topology_key.clone(),
        ..Default::default()
    }
}

fn weighted(terms: &[WeightedAffinityTerm]) -> Option<Vec<core::WeightedPodAffinityTerm>> {
    (!terms.is_empty()).then(|| {
        terms
            .iter()
            .map(|w| core::WeightedPodAffinityTerm {
                weight: w.weight,
                pod_affinity_term: affinity_term(&w.term),
            })
            .collect()
    })
}

fn terms(terms: &[AffinityTerm]) -> Option<Vec<core::PodAffinityTerm>> {
    (!terms.is_empty()).then(|| terms.iter().map(affinity_term).collect())
}

fn affinity(p: &PodInfo) -> Option<core::Affinity> {
    let node =
        (p.required_node_affinity.is_some() || !p.preferred_node_affinity.is_empty()).then(|| {
            core::NodeAffinity {
                required_during_scheduling_ignored_during_execution: p
                    .required_node_affinity
                    .as_ref()
                    .map(NodeSelector::to_api),
                preferred_during_scheduling_ignored_during_execution: (!p
                    .preferred_node_affinity
                    .is_empty())
                .then(|| {
                    p.preferred_node_affinity
                        .iter()
                        .map(|(weight, term)| core::PreferredSchedulingTerm {
                            weight: *weight,
                            preference: term.to_api(),
                        })
                        .collect()
                }),
            }
        });
    let a = &p.affinity;
    let pod_affinity =
        (!a.required.is_empty() || !a.preferred.is_empty()).then(|| core::PodAffinity {
            required_during_scheduling_ignored_during_execution: terms(&a.required),
            preferred_during_scheduling_ignored_during_execution: weighted(&a.preferred),
        });
    let anti = (!a.required_anti.is_empty() || !a.preferred_anti.is_empty()).then(|| {
        core::PodAntiAffinity {
            required_during_scheduling_ignored_during_execution: terms(&a.required_anti),
            preferred_during_scheduling_ignored_during_execution: weighted(&a.preferred_anti),
        }
    });
    (node.is_some() || pod_affinity.is_some() || anti.is_some()).then_some(core::Affinity {
        node_affinity: node,
        pod_affinity,
        pod_anti_affinity: anti,
    })
}

fn policy(p: InclusionPolicy) -> String {
    match p {
        InclusionPolicy::Honor => "Honor",
        InclusionPolicy::Ignore => "Ignore",
    }
    .to_string()
}

/// The container holding the pod's requests (and host ports), and one per further image.
fn containers(p: &PodInfo) -> Vec<core::Container> {
    let requests = resource_list(&p.requests, false);
    let mut requests = requests;
    // A pod whose containers request no cpu (memory) is scored with a default: leaving the
    // resource out, not writing 0, keeps it so.
    if p.requests.milli_cpu == 0 && p.non_zero_milli_cpu == 0 {
        requests.insert("cpu".to_string(), Quantity("0".to_string()));
    }
    if p.requests.memory == 0 && p.non_zero_memory == 0 {
        requests.insert("memory".to_string(), Quantity("0".to_string()));
    }
    let limits: BTreeMap<String, Quantity> = match p.qos_class {
        QosClass::Guaranteed => requests.clone(),
        _ => requests
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "cpu" | "memory" | "ephemeral-storage"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    };
    let ports: Vec<core::ContainerPort> = p
        .host_ports
        .iter()
        .map(|h| core::ContainerPort {
            container_port: i32::from(h.port),
            host_port: Some(i32::from(h.port)),
            host_ip: (!h.ip.is_unspecified()).then(|| h.ip.to_string()),
            protocol: Some(
                match h.protocol {
                    Protocol::Tcp => "TCP",
                    Protocol::Udp => "UDP",
                    Protocol::Sctp => "SCTP",
                }
                .to_string(),
            ),
            ..Default::default()
        })
        .collect();
    let count = p.num_containers.max(1);
    (0..count)
        .map(|i| core::Container {
            name: format!("c{i}"),
            image: p.images.get(i).cloned(),
            resources: (i == 0 && (!requests.is_empty() || !limits.is_empty())).then(|| {
                core::ResourceRequirements {
                    requests: (!requests.is_empty()).then(|| requests.clone()),
                    limits: (!limits.is_empty()).then(|| limits.clone()),
                    ..Default::default()
                }
            }),
            ports: (i == 0 && !ports.is_empty()).then(|| ports.clone()),
            restart_policy_rules: (i == 0
                && p.required_node_features
                    .contains(&node_features::RESTART_ALL_CONTAINERS))
            .then(|| {
                vec![core::ContainerRestartRule {
                    action: node_features::RESTART_ALL_ACTION.to_string(),
                    exit_codes: None,
                }]
            }),
            ..Default::default()
        })
        .collect()
}

/// A pod as the API would hold it, with what the scheduler reads.
pub(super) fn pod_object(p: &PodInfo) -> core::Pod {
    let user_namespaces_on_host = p
        .required_node_features
        .contains(&node_features::USER_NAMESPACES_HOST_NETWORK);
    let owner = p.owner.as_ref().map(|o| {
        vec![meta::OwnerReference {
            api_version: String::new(),
            kind: o.kind.clone(),
            name: o.name.clone(),
            uid: o.uid.clone(),
            controller: Some(true),
            block_owner_deletion: None,
        }]
    });
    let volumes: Vec<core::Volume> = p
        .volumes
        .claims
        .iter()
        .map(|c| core::Volume {
            name: c.name.clone(),
            persistent_volume_claim: Some(core::PersistentVolumeClaimVolumeSource {
                claim_name: c.name.clone(),
                read_only: None,
            }),
            ..Default::default()
        })
        .collect();
    let spread: Vec<core::TopologySpreadConstraint> = p
        .topology_spread
        .iter()
        .map(|c| core::TopologySpreadConstraint {
            max_skew: c.max_skew,
            topology_key: c.topology_key.clone(),
            when_unsatisfiable: match c.when_unsatisfiable {
                WhenUnsatisfiable::DoNotSchedule => "DoNotSchedule",
                WhenUnsatisfiable::ScheduleAnyway => "ScheduleAnyway",
            }
            .to_string(),
            label_selector: c.selector.to_api(),
            min_domains: c.min_domains,
            node_affinity_policy: Some(policy(c.node_affinity_policy)),
            node_taints_policy: Some(policy(c.node_taints_policy)),
            match_label_keys: None,
        })
        .collect();
    let mut conditions = Vec::new();
    if p.preempted_by_scheduler {
        conditions.push(core::PodCondition {
            type_: crate::model::pod::DISRUPTION_TARGET.to_string(),
            status: "True".to_string(),
            reason: Some("PreemptionByScheduler".to_string()),
            ..Default::default()
        });
    }
    core::Pod {
        metadata: meta::ObjectMeta {
            name: Some(p.name.clone()),
            namespace: Some(p.namespace.clone()),
            uid: (!p.uid.is_empty()).then(|| p.uid.clone()),
            labels: map(&p.labels),
            annotations: map(&p.annotations),
            owner_references: owner,
            deletion_timestamp: p.terminating.then(|| meta::Time(Default::default())),
            ..Default::default()
        },
        spec: Some(core::PodSpec {
            containers: containers(p),
            scheduler_name: Some(p.scheduler_name.clone()),
            node_name: p.node_name.as_ref().map(|n| n.to_string()),
            priority: Some(p.priority),
            priority_class_name: (!p.priority_class_name.is_empty())
                .then(|| p.priority_class_name.clone()),
            preemption_policy: p
                .never_preempts
                .then(|| crate::model::pod::PREEMPT_NEVER.to_string()),
            node_selector: map(&p.node_selector),
            affinity: affinity(p),
            tolerations: (!p.tolerations.is_empty()).then(|| {
                p.tolerations
                    .iter()
                    .map(|t| core::Toleration {
                        key: (!t.key.is_empty()).then(|| t.key.clone()),
                        operator: Some(
                            match t.operator {
                                TolerationOperator::Equal => "Equal",
                                TolerationOperator::Exists => "Exists",
                            }
                            .to_string(),
                        ),
                        value: (!t.value.is_empty()).then(|| t.value.clone()),
                        effect: t.effect.map(effect),
                        toleration_seconds: None,
                    })
                    .collect()
            }),
            topology_spread_constraints: (!spread.is_empty()).then_some(spread),
            scheduling_gates: (!p.scheduling_gates.is_empty()).then(|| {
                p.scheduling_gates
                    .iter()
                    .map(|g| core::PodSchedulingGate { name: g.clone() })
                    .collect()
            }),
            host_network: user_namespaces_on_host.then_some(true),
            host_users: user_namespaces_on_host.then_some(false),
            resource_claims: (!p.resource_claims.is_empty())
                .then(|| p.resource_claims.iter().map(|c| c.to_api()).collect()),
            volumes: (!volumes.is_empty()).then_some(volumes),
            ..Default::default()
        }),
        status: Some(core::PodStatus {
            nominated_node_name: p.nominated_node.as_ref().map(|n| n.to_string()),
            start_time: p.start_time.and_then(|(secs, nanos)| {
                k8s_openapi::jiff::Timestamp::new(secs, nanos as i32)
                    .ok()
                    .map(meta::Time)
            }),
            conditions: (!conditions.is_empty()).then_some(conditions),
            resource_claim_statuses: claim_statuses(p),
            ..Default::default()
        }),
    }
}

pub(super) fn pod_group_object(g: &PodGroupModel) -> PodGroup {
    PodGroup {
        api_version: pod_group::API_VERSION.to_string(),
        kind: "PodGroup".to_string(),
        metadata: meta::ObjectMeta {
            name: Some(g.name.clone()),
            namespace: Some(g.namespace.clone()),
            ..Default::default()
        },
        spec: PodGroupSpec {
            min_member: i32::try_from(g.min_member).ok(),
            min_resources: g.min_resources.as_ref().map(|r| {
                resource_list(r, false)
                    .into_iter()
                    .map(|(k, v)| (k, serde_json::Value::String(v.0)))
                    .collect()
            }),
            schedule_timeout_seconds: g
                .schedule_timeout
                .and_then(|t| i32::try_from(t.as_secs()).ok()),
        },
        ..Default::default()
    }
}

/// The claims made for the pod from templates, as its status names them.
fn claim_statuses(p: &PodInfo) -> Option<Vec<core::PodResourceClaimStatus>> {
    let statuses: Vec<_> = p
        .resource_claims
        .iter()
        .filter_map(|c| c.status_api())
        .collect();
    (!statuses.is_empty()).then_some(statuses)
}
