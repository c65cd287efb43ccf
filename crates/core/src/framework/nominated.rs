//! Pending pods nominated to nodes, which the pods filtered there after them must leave room
//! for.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::model::PodInfo;

/// Pending pods with a nominated node (a preemption made room for them there), by node, in
/// the order they were nominated there. While nominated, a pod is counted on its node when
/// pods of no higher priority are filtered there (see [`nominated_ahead`]), so that the room
/// it made is not taken by them. Looked up for every node a pod is filtered on once any pod
/// is nominated, hence the fast (Fx) hash.
#[derive(Debug, Clone, Default)]
pub struct NominatedPods {
    by_node: FxHashMap<Arc<str>, Vec<Arc<PodInfo>>>,
    node_of: FxHashMap<(String, String), Arc<str>>,
}

impl NominatedPods {
    /// Nominates `pod` to `node`, replacing an earlier nomination of the pod; a pod nominated
    /// to the same node again keeps its place among the pods nominated there.
    pub fn nominate(&mut self, pod: Arc<PodInfo>, node: Arc<str>) {
        let key = (pod.namespace.clone(), pod.name.clone());
        if self.node_of.get(&key) == Some(&node)
            && let Some(place) = self.by_node.get_mut(&node).and_then(|pods| {
                pods.iter_mut()
                    .find(|p| p.namespace == pod.namespace && p.name == pod.name)
            })
        {
            *place = pod;
            return;
        }
        self.remove(&pod.namespace, &pod.name);
        self.node_of.insert(key, node.clone());
        self.by_node.entry(node).or_default().push(pod);
    }

    /// Drops the nomination of `namespace/name`; returns the node it was nominated to.
    pub fn remove(&mut self, namespace: &str, name: &str) -> Option<Arc<str>> {
        let node = self
            .node_of
            .remove(&(namespace.to_string(), name.to_string()))?;
        if let Some(pods) = self.by_node.get_mut(&node) {
            pods.retain(|p| !(p.namespace == namespace && p.name == name));
            if pods.is_empty() {
                self.by_node.remove(&node);
            }
        }
        Some(node)
    }

    /// The node `namespace/name` is nominated to.
    pub fn node_of(&self, namespace: &str, name: &str) -> Option<&Arc<str>> {
        self.node_of.get(&(namespace.to_string(), name.to_string()))
    }

    /// The pods nominated to `node`.
    pub fn on(&self, node: &str) -> &[Arc<PodInfo>] {
        self.by_node.get(node).map_or(&[], Vec::as_slice)
    }

    /// True when no pod is nominated anywhere.
    pub fn is_empty(&self) -> bool {
        self.by_node.is_empty()
    }
}
