//! The objects a scheduler holds beyond nodes, pods and storage, written back as API objects
//! (see the parent module): namespaces with their labels (namespace selectors of affinity
//! terms), Services and ReplicaSets, StatefulSets and ReplicationControllers with their
//! selectors (system default topology spreading), and PodDisruptionBudgets (preemption).
//! Only what the plugins read is written: a controller has its selector and no pod template.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;

use gantry_core::model::Labels;
use gantry_core::model::disruption_budget::DisruptionBudgetModel;
use gantry_core::model::selector::LabelSelector;

use super::map;

fn meta(namespace: &str, name: &str) -> meta::ObjectMeta {
    meta::ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        ..Default::default()
    }
}

/// A namespace with its labels.
pub(super) fn namespace_object(name: &str, labels: &Labels) -> core::Namespace {
    core::Namespace {
        metadata: meta::ObjectMeta {
            name: Some(name.to_string()),
            labels: map(labels),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A Service with its selector.
pub(super) fn service_object(namespace: &str, name: &str, selector: &Labels) -> core::Service {
    core::Service {
        metadata: meta(namespace, name),
        spec: Some(core::ServiceSpec {
            selector: map(selector),
            ..Default::default()
        }),
        status: None,
    }
}

/// A controller of `kind` (ReplicaSet, StatefulSet or ReplicationController) with its
/// selector, as a JSON value; `None` for a selector its kind cannot hold (the cache holds
/// only selectors read from such objects, so none is left out in practice).
pub(super) fn controller_object(
    kind: &str,
    namespace: &str,
    name: &str,
    selector: &LabelSelector,
) -> Option<Result<serde_json::Value, serde_json::Error>> {
    let metadata = meta(namespace, name);
    Some(match kind {
        "ReplicaSet" => serde_json::to_value(apps::ReplicaSet {
            metadata,
            spec: apps::ReplicaSetSpec {
                selector: selector.to_api()?,
                ..Default::default()
            },
            ..Default::default()
        }),
        "StatefulSet" => serde_json::to_value(apps::StatefulSet {
            metadata,
            spec: apps::StatefulSetSpec {
                selector: selector.to_api()?,
                ..Default::default()
            },
            ..Default::default()
        }),
        "ReplicationController" => serde_json::to_value(core::ReplicationController {
            metadata,
            spec: Some(core::ReplicationControllerSpec {
                selector: Some(selector.to_map()?),
                ..Default::default()
            }),
            status: None,
        }),
        _ => return None,
    })
}

/// A PodDisruptionBudget with its selector and the status preemption reads (the disrupted
/// pods' eviction times are not kept: each is written as the epoch).
pub(super) fn budget_object(b: &DisruptionBudgetModel) -> policy::PodDisruptionBudget {
    let disrupted: BTreeMap<String, meta::Time> = b
        .disrupted_pods
        .iter()
        .map(|p| (p.clone(), meta::Time(Default::default())))
        .collect();
    policy::PodDisruptionBudget {
        metadata: meta(&b.namespace, &b.name),
        spec: Some(policy::PodDisruptionBudgetSpec {
            selector: b.selector.to_api(),
            ..Default::default()
        }),
        status: Some(policy::PodDisruptionBudgetStatus {
            disruptions_allowed: Some(b.disruptions_allowed),
            disrupted_pods: (!disrupted.is_empty()).then_some(disrupted),
            ..Default::default()
        }),
    }
}
