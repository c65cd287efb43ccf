//! NodeUnschedulable: cordoned nodes (`spec.unschedulable`) take only pods that tolerate the
//! `node.kubernetes.io/unschedulable:NoSchedule` taint.

use std::sync::{Arc, LazyLock};

use crate::cache::{NodeInfo, Snapshot};
use crate::framework::{
    ArgsError, ClusterChange, ClusterEvent, CycleState, DefaultPlace, EventHint, FilterPlugin,
    Plugin, PluginSpec, QueueingHint, Status,
};
use crate::model::PodInfo;
use crate::model::taint::{Taint, TaintEffect};

/// The name used in configuration files.
pub const NAME: &str = "NodeUnschedulable";

/// Reason given for a cordoned node the pod does not tolerate.
pub const ERR_REASON_UNSCHEDULABLE: &str = "node(s) were unschedulable";

/// Key of the taint that stands for a cordoned node.
pub const TAINT_NODE_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// The taint a pod must tolerate to be placed on a cordoned node; built once so that
/// filtering allocates nothing.
static UNSCHEDULABLE_TAINT: LazyLock<Taint> = LazyLock::new(|| Taint {
    key: TAINT_NODE_UNSCHEDULABLE.to_string(),
    value: String::new(),
    effect: TaintEffect::NoSchedule,
});

/// Rejects cordoned nodes unless the pod tolerates them.
#[derive(Debug, Default, Clone, Copy)]
pub struct NodeUnschedulable;

/// A node that appears or changes helps only if it is not cordoned.
const EVENTS: [EventHint; 2] = [
    EventHint::when(ClusterEvent::NodeAdd, open_node),
    EventHint::when(ClusterEvent::NodeUpdate, open_node),
];

fn open_node(change: &ClusterChange<'_>, _: &PodInfo) -> QueueingHint {
    match change.node() {
        Some(node) if node.unschedulable => QueueingHint::Skip,
        _ => QueueingHint::Queue,
    }
}

impl Plugin for NodeUnschedulable {
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

impl FilterPlugin for NodeUnschedulable {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if node.node.unschedulable
            && !pod
                .tolerations
                .iter()
                .any(|t| t.tolerates(&UNSCHEDULABLE_TAINT))
        {
            return Status::unresolvable(ERR_REASON_UNSCHEDULABLE);
        }
        Status::success()
    }

    /// Most clusters have no cordoned node.
    fn passes_all(&self, _: &CycleState, _: &PodInfo, snapshot: &Snapshot) -> bool {
        snapshot.node_traits().cordoned == 0
    }

    /// Most nodes are not cordoned.
    fn passes_outright(&self, node: &NodeInfo) -> bool {
        !node.node.unschedulable
    }
}

/// The plugin for the registry, with its place in kube-scheduler's default profile.
pub const SPEC: PluginSpec = PluginSpec {
    name: NAME,
    factory,
    default: Some(DefaultPlace {
        order: 40,
        weight: None,
    }),
    args: None,
};

/// Builds the plugin; it takes no arguments, and ignores any given (as kube-scheduler does
/// for plugins without an arguments type).
pub fn factory(_args: Option<&serde_json::Value>) -> Result<Arc<dyn Plugin>, ArgsError> {
    Ok(Arc::new(NodeUnschedulable))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::{Code, NodeBlock};
    use crate::testing::{PodBuilder, node, pod};

    fn cordoned() -> NodeInfo {
        NodeInfo::new(Arc::new(node("n").unschedulable().build()))
    }

    fn filter(pod: PodBuilder, node: &NodeInfo) -> Status {
        NodeUnschedulable.filter(&CycleState::new(), &pod.build(), node)
    }

    #[test]
    fn a_block_of_nodes_gets_each_node_s_verdict() {
        let nodes = [
            NodeInfo::new(Arc::new(node("open").build())),
            cordoned(),
            cordoned(),
        ];
        let refs: Vec<&NodeInfo> = nodes.iter().collect();
        let positions: Vec<usize> = (0..refs.len()).collect();
        for (p, rejected) in [
            (pod("p").build(), 1),
            (
                pod("t")
                    .toleration(TAINT_NODE_UNSCHEDULABLE, "Exists", "", "NoSchedule")
                    .build(),
                0,
            ),
        ] {
            let state = CycleState::new();
            let mut statuses = vec![Status::success(); 3];
            // A node another filter already rejected keeps that verdict.
            statuses[2] = Status::unschedulable("Insufficient cpu");
            assert_eq!(
                NodeUnschedulable.filter_nodes(
                    &state,
                    &p,
                    NodeBlock::new(&refs, &positions),
                    &mut statuses
                ),
                rejected
            );
            for (n, s) in nodes[..2].iter().zip(&statuses) {
                assert_eq!(s, &NodeUnschedulable.filter(&state, &p, n));
            }
            assert_eq!(statuses[2].message(), "Insufficient cpu");
        }
    }

    #[test]
    fn schedulable_node_fits_any_pod() {
        let n = NodeInfo::new(Arc::new(node("n").build()));
        assert!(filter(pod("p"), &n).is_success());
    }

    #[test]
    fn cordoned_node_rejects_a_pod_without_toleration() {
        let s = filter(pod("p"), &cordoned());
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(s.message(), "node(s) were unschedulable");
    }

    #[test]
    fn tolerations_that_cover_the_unschedulable_taint() {
        let key = TAINT_NODE_UNSCHEDULABLE;
        for p in [
            pod("p").toleration(key, "Exists", "", "NoSchedule"),
            pod("p").toleration(key, "Exists", "", ""),
            pod("p").toleration(key, "Equal", "", "NoSchedule"),
            pod("p").toleration("", "Exists", "", ""),
            pod("p").toleration("", "Exists", "", "NoSchedule"),
        ] {
            assert!(filter(p, &cordoned()).is_success());
        }
    }

    #[test]
    fn tolerations_that_do_not() {
        let key = TAINT_NODE_UNSCHEDULABLE;
        for p in [
            pod("p").toleration(key, "Exists", "", "NoExecute"),
            pod("p").toleration(key, "Exists", "", "PreferNoSchedule"),
            pod("p").toleration(key, "Equal", "true", "NoSchedule"),
            pod("p").toleration("node.kubernetes.io/not-ready", "Exists", "", ""),
        ] {
            assert!(filter(p, &cordoned()).is_rejected());
        }
    }

    #[test]
    fn a_real_unschedulable_taint_is_not_this_plugins_business() {
        let n = NodeInfo::new(Arc::new(
            node("n")
                .taint(TAINT_NODE_UNSCHEDULABLE, "", "NoSchedule")
                .build(),
        ));
        assert!(filter(pod("p"), &n).is_success());
    }

    #[test]
    fn factory_builds_the_named_plugin() {
        let p = factory(None).unwrap();
        assert_eq!(p.name(), "NodeUnschedulable");
        assert!(p.as_filter().is_some());
    }
}
