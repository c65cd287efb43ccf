//! The selectors of Services and workload controllers, for kube-scheduler's system default
//! topology spreading, which spreads a pod among the pods of the same Service or controller.

use std::collections::HashMap;

use crate::model::selector::LabelSelector;
use crate::model::{Labels, PodInfo};

/// Services' and controllers' selectors, by namespace and name.
#[derive(Debug, Clone, Default)]
pub struct Workloads {
    /// Service selectors (label maps), by namespace then name.
    services: HashMap<String, HashMap<String, Labels>>,
    /// Controller selectors, by (kind, namespace, name); kinds are `ReplicaSet`,
    /// `StatefulSet` and `ReplicationController`.
    controllers: HashMap<(String, String, String), LabelSelector>,
}

impl Workloads {
    /// Records (or replaces) a Service's selector; an empty selector selects nothing here.
    pub fn set_service(&mut self, namespace: &str, name: &str, selector: Labels) {
        self.services
            .entry(namespace.to_string())
            .or_default()
            .insert(name.to_string(), selector);
    }

    /// Forgets a Service.
    pub fn remove_service(&mut self, namespace: &str, name: &str) {
        if let Some(m) = self.services.get_mut(namespace) {
            m.remove(name);
        }
    }

    /// Records (or replaces) a controller's selector.
    pub fn set_controller(&mut self, kind: &str, namespace: &str, name: &str, sel: LabelSelector) {
        self.controllers.insert(
            (kind.to_string(), namespace.to_string(), name.to_string()),
            sel,
        );
    }

    /// Forgets a controller.
    pub fn remove_controller(&mut self, kind: &str, namespace: &str, name: &str) {
        self.controllers
            .remove(&(kind.to_string(), namespace.to_string(), name.to_string()));
    }

    /// Every Service as (namespace, name, selector), in no particular order.
    pub fn services(&self) -> impl Iterator<Item = (&str, &str, &Labels)> {
        self.services.iter().flat_map(|(namespace, by_name)| {
            by_name
                .iter()
                .map(move |(name, selector)| (namespace.as_str(), name.as_str(), selector))
        })
    }

    /// Every controller as (kind, namespace, name, selector), in no particular order.
    pub fn controllers(&self) -> impl Iterator<Item = (&str, &str, &str, &LabelSelector)> {
        self.controllers.iter().map(|((kind, namespace, name), s)| {
            (kind.as_str(), namespace.as_str(), name.as_str(), s)
        })
    }

    /// The selector kube-scheduler's `DefaultSelector` builds for `pod`: the union of the
    /// selectors of the Services that select it, and of its controlling ReplicaSet,
    /// StatefulSet or ReplicationController. `None` when nothing selects the pod.
    pub fn default_selector(&self, pod: &PodInfo) -> Option<LabelSelector> {
        let mut merged: std::collections::BTreeMap<String, String> = Default::default();
        for sel in self
            .services
            .get(&pod.namespace)
            .into_iter()
            .flat_map(|m| m.values())
        {
            if sel.is_empty() {
                continue;
            }
            if sel.iter().all(|(k, v)| pod.labels.get(k) == Some(v)) {
                merged.extend(sel.iter().map(|(k, v)| (k.to_string(), v.to_string())));
            }
        }
        let mut selector = LabelSelector::from_map(merged.iter());
        let mut found = !merged.is_empty();
        if let Some(owner) = &pod.owner {
            let key = (
                owner.kind.clone(),
                pod.namespace.clone(),
                owner.name.clone(),
            );
            if let Some(controller) = self.controllers.get(&key) {
                selector.extend(controller);
                found = true;
            }
        }
        found.then_some(selector)
    }
}
