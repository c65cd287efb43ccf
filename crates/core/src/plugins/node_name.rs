//! NodeName: a pod whose `spec.nodeName` names a node can only go to that node.

use std::sync::Arc;

use crate::cache::{NodeInfo, Snapshot};
use crate::framework::{
    ArgsError, ClusterEvent, CycleState, DefaultPlace, EventHint, FilterPlugin, Plugin, PluginSpec,
    QueueingHint, Status,
};
use crate::model::PodInfo;

/// The name used in configuration files.
pub const NAME: &str = "NodeName";

/// Reason given for every node other than the requested one.
pub const ERR_REASON: &str = "node(s) didn't match the requested node name";

/// Rejects every node but the one the pod's `spec.nodeName` requests.
#[derive(Debug, Default, Clone, Copy)]
pub struct NodeName;

/// Only the node the pod asks for can help it, when it appears.
const EVENTS: [EventHint; 1] = [EventHint::when(
    ClusterEvent::NodeAdd,
    |change, pod| match (change.node(), &pod.node_name) {
        (Some(node), Some(wanted)) if *node.name != **wanted => QueueingHint::Skip,
        _ => QueueingHint::Queue,
    },
)];

impl Plugin for NodeName {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [EventHint] {
        &EVENTS
    }

    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl FilterPlugin for NodeName {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match &pod.node_name {
            Some(wanted) if wanted != node.name() => Status::unresolvable(ERR_REASON),
            _ => Status::success(),
        }
    }

    /// Most pods name no node.
    fn passes_all(&self, _: &CycleState, pod: &PodInfo, _: &Snapshot) -> bool {
        pod.node_name.is_none()
    }
}

/// The plugin for the registry, with its place in kube-scheduler's default profile.
pub const SPEC: PluginSpec = PluginSpec {
    name: NAME,
    factory,
    default: Some(DefaultPlace {
        order: 30,
        weight: None,
    }),
    args: None,
};

/// Builds the plugin; it takes no arguments, and ignores any given (as kube-scheduler does
/// for plugins without an arguments type).
pub fn factory(_args: Option<&serde_json::Value>) -> Result<Arc<dyn Plugin>, ArgsError> {
    Ok(Arc::new(NodeName))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::testing::{node, pod};

    fn filter(pod: &PodInfo, node_name: &str) -> Status {
        let n = NodeInfo::new(Arc::new(node(node_name).build()));
        NodeName.filter(&CycleState::new(), pod, &n)
    }

    #[test]
    fn no_node_name_fits_every_node() {
        assert!(filter(&pod("p").build(), "a").is_success());
    }

    #[test]
    fn requested_node_fits() {
        assert!(filter(&pod("p").on("a").build(), "a").is_success());
    }

    #[test]
    fn other_nodes_are_unresolvable() {
        let s = filter(&pod("p").on("a").build(), "b");
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(s.message(), "node(s) didn't match the requested node name");
        let s = filter(&pod("p").on("a").build(), "a2");
        assert!(s.is_rejected(), "a prefix is not a match");
    }

    #[test]
    fn factory_builds_the_named_plugin() {
        let p = factory(None).unwrap();
        assert_eq!(p.name(), "NodeName");
        assert!(p.as_filter().is_some());
    }
}
