//! Namespaces (their labels, for namespace selectors), Services and the workload
//! controllers (their selectors, for the system default topology spreading), and
//! PodDisruptionBudgets (for preemption's choice of victims).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;

use super::objects::map;
use super::{Change, Holding, Kind, ObjectKey, ReadContext, Target, Written, labels_of};
use crate::cache::Tracked;
use crate::model::Labels;
use crate::model::disruption_budget::DisruptionBudgetModel;
use crate::model::selector::LabelSelector;

/// Namespaces, for the labels namespace selectors match.
pub struct Namespaces;

impl Kind for Namespaces {
    type Object = core::Namespace;
    /// The name and the labels.
    type Model = (String, Labels);
    const TRACKED: Option<Tracked> = Some(Tracked::NamespaceLabels);

    fn read(ns: &core::Namespace, _: &ReadContext) -> Result<Option<Self::Model>, String> {
        let name = ns.metadata.name.clone().unwrap_or_default();
        Ok(Some((name, labels_of(&ns.metadata))))
    }

    fn apply(change: Change<Self::Model>, target: &mut dyn Target, now: Duration) {
        let s = target.scheduler();
        match change {
            Change::Applied((name, labels)) => {
                s.cache_mut().set_namespace(&name, labels);
                s.notify(now);
            }
            Change::Deleted(key) => s.cache_mut().remove_namespace(&key.name),
        }
    }

    fn write(holding: &Holding<'_>, out: &mut Written) {
        let mut namespaces: Vec<_> = holding.cache.namespaces().iter().collect();
        namespaces.sort_by_key(|(name, _)| *name);
        for (name, labels) in namespaces {
            out.push(core::Namespace {
                metadata: meta::ObjectMeta {
                    name: Some(name.to_string()),
                    labels: map(labels),
                    ..Default::default()
                },
                ..Default::default()
            });
        }
    }
}

/// Services, whose selectors the default topology spreading reads.
pub struct Services;

impl Kind for Services {
    type Object = core::Service;
    /// The Service and its selector.
    type Model = (ObjectKey, Labels);
    const TRACKED: Option<Tracked> = Some(Tracked::Workloads);

    fn read(svc: &core::Service, _: &ReadContext) -> Result<Option<Self::Model>, String> {
        let selector = svc
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .map(Labels::from)
            .unwrap_or_default();
        Ok(Some((ObjectKey::of(&svc.metadata), selector)))
    }

    fn apply(change: Change<Self::Model>, target: &mut dyn Target, now: Duration) {
        let s = target.scheduler();
        match change {
            Change::Applied((key, selector)) => {
                s.cache_mut()
                    .set_service(&key.namespace, &key.name, selector);
            }
            Change::Deleted(key) => s.cache_mut().remove_service(&key.namespace, &key.name),
        }
        s.notify(now);
    }

    fn write(holding: &Holding<'_>, out: &mut Written) {
        let mut services: Vec<_> = holding.cache.workloads().services().collect();
        services.sort_by_key(|(namespace, name, _)| (*namespace, *name));
        for (namespace, name, selector) in services {
            out.push(core::Service {
                metadata: object_meta(namespace, name),
                spec: Some(core::ServiceSpec {
                    selector: map(selector),
                    ..Default::default()
                }),
                status: None,
            });
        }
    }
}

/// A workload controller kind whose selector the default topology spreading reads.
trait Controller: k8s_openapi::Resource {
    /// The selector, compiled; `None` when there is none or it does not compile.
    fn selector(&self) -> Option<LabelSelector>;
    /// A controller with `selector`, and nothing else the scheduler does not read.
    fn with_selector(metadata: meta::ObjectMeta, selector: &LabelSelector) -> Option<Self>
    where
        Self: Sized;
}

impl Controller for apps::ReplicaSet {
    fn selector(&self) -> Option<LabelSelector> {
        LabelSelector::compile(Some(&self.spec.selector), "spec.selector").ok()
    }

    fn with_selector(metadata: meta::ObjectMeta, selector: &LabelSelector) -> Option<Self> {
        Some(apps::ReplicaSet {
            metadata,
            spec: apps::ReplicaSetSpec {
                selector: selector.to_api()?,
                ..Default::default()
            },
            ..Default::default()
        })
    }
}

impl Controller for apps::StatefulSet {
    fn selector(&self) -> Option<LabelSelector> {
        LabelSelector::compile(Some(&self.spec.selector), "spec.selector").ok()
    }

    fn with_selector(metadata: meta::ObjectMeta, selector: &LabelSelector) -> Option<Self> {
        Some(apps::StatefulSet {
            metadata,
            spec: apps::StatefulSetSpec {
                selector: selector.to_api()?,
                ..Default::default()
            },
            ..Default::default()
        })
    }
}

impl Controller for core::ReplicationController {
    fn selector(&self) -> Option<LabelSelector> {
        let selector = self.spec.as_ref()?.selector.as_ref()?;
        Some(LabelSelector::from_map(selector))
    }

    fn with_selector(metadata: meta::ObjectMeta, selector: &LabelSelector) -> Option<Self> {
        Some(core::ReplicationController {
            metadata,
            spec: Some(core::ReplicationControllerSpec {
                selector: Some(selector.to_map()?),
                ..Default::default()
            }),
            status: None,
        })
    }
}

/// Declares the [`Kind`] of a workload controller: one with no selector the cache can keep
/// is as good as absent.
macro_rules! controller_kind {
    ($(#[$doc:meta])* $kind:ident, $object:ty) => {
        $(#[$doc])*
        pub struct $kind;

        impl Kind for $kind {
            type Object = $object;
            /// The controller and its selector (`None`: none the cache can keep).
            type Model = (ObjectKey, Option<LabelSelector>);
            const TRACKED: Option<Tracked> = Some(Tracked::Workloads);

            fn read(object: &$object, _: &ReadContext) -> Result<Option<Self::Model>, String> {
                Ok(Some((ObjectKey::of(&object.metadata), object.selector())))
            }

            fn apply(change: Change<Self::Model>, target: &mut dyn Target, now: Duration) {
                apply_controller::<$object>(change, target, now);
            }

            fn write(holding: &Holding<'_>, out: &mut Written) {
                write_controllers::<$object>(holding, out);
            }
        }
    };
}

controller_kind!(
    /// ReplicaSets.
    ReplicaSets,
    apps::ReplicaSet
);
controller_kind!(
    /// StatefulSets.
    StatefulSets,
    apps::StatefulSet
);
controller_kind!(
    /// ReplicationControllers.
    ReplicationControllers,
    core::ReplicationController
);

fn apply_controller<C: Controller>(
    change: Change<(ObjectKey, Option<LabelSelector>)>,
    target: &mut dyn Target,
    now: Duration,
) {
    let s = target.scheduler();
    let (key, selector) = match change {
        Change::Applied((key, selector)) => (key, selector),
        Change::Deleted(key) => (key, None),
    };
    match selector {
        Some(selector) => {
            s.cache_mut()
                .set_controller(C::KIND, &key.namespace, &key.name, selector)
        }
        None => s
            .cache_mut()
            .remove_controller(C::KIND, &key.namespace, &key.name),
    }
    s.notify(now);
}

fn write_controllers<C: Controller + serde::Serialize>(holding: &Holding<'_>, out: &mut Written) {
    let mut controllers: Vec<_> = holding
        .cache
        .workloads()
        .controllers()
        .filter(|(kind, ..)| *kind == C::KIND)
        .collect();
    controllers.sort_by_key(|(_, namespace, name, _)| (*namespace, *name));
    for (_, namespace, name, selector) in controllers {
        // The cache holds only selectors read from such objects: none is left out.
        if let Some(object) = C::with_selector(object_meta(namespace, name), selector) {
            out.push(object);
        }
    }
}

/// PodDisruptionBudgets of `policy/v1` (and `policy/v1beta1`, the same schema for what
/// preemption reads). One that cannot be read (a selector that does not compile, which the
/// API server's validation should never let through) is absent, so it covers no pod, as
/// kube-scheduler skips a budget whose selector does not compile.
pub struct DisruptionBudgets;

impl Kind for DisruptionBudgets {
    type Object = policy::PodDisruptionBudget;
    type Model = DisruptionBudgetModel;
    const TRACKED: Option<Tracked> = Some(Tracked::DisruptionBudgets);
    const SERVING: super::Serving = super::Serving::Discovered;
    const OLDER_VERSIONS: &'static [&'static str] = &["policy/v1beta1"];

    fn read(pdb: &Self::Object, _: &ReadContext) -> Result<Option<Self::Model>, String> {
        DisruptionBudgetModel::from_api(pdb).map(Some)
    }

    fn apply(change: Change<Self::Model>, target: &mut dyn Target, _now: Duration) {
        let s = target.scheduler();
        match change {
            Change::Applied(budget) => s.upsert_disruption_budget(budget),
            Change::Deleted(key) => s.remove_disruption_budget(&key.namespace, &key.name),
        }
    }

    /// The budgets with their selectors and the status preemption reads (the disrupted
    /// pods' eviction times are not kept: each is written as the epoch).
    fn write(holding: &Holding<'_>, out: &mut Written) {
        for b in holding.cache.disruption_budgets() {
            let disrupted: BTreeMap<String, meta::Time> = b
                .disrupted_pods
                .iter()
                .map(|p| (p.clone(), meta::Time(Default::default())))
                .collect();
            out.push(policy::PodDisruptionBudget {
                metadata: object_meta(&b.namespace, &b.name),
                spec: Some(policy::PodDisruptionBudgetSpec {
                    selector: b.selector.to_api(),
                    ..Default::default()
                }),
                status: Some(policy::PodDisruptionBudgetStatus {
                    disruptions_allowed: Some(b.disruptions_allowed),
                    disrupted_pods: (!disrupted.is_empty()).then_some(disrupted),
                    ..Default::default()
                }),
            });
        }
    }
}

/// The metadata of a namespaced object written back.
pub(super) fn object_meta(namespace: &str, name: &str) -> meta::ObjectMeta {
    meta::ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        ..Default::default()
    }
}
