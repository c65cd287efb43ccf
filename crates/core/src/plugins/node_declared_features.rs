//! NodeDeclaredFeatures: a pod goes only to nodes whose kubelet declares every feature the pod
//! needs (`status.declaredFeatures`, GA in Kubernetes 1.37), such as restarting all of a pod's
//! containers when one exits. What a pod needs is inferred from its spec when it is read (see
//! [`crate::model::node_features`]).

use std::sync::Arc;

use crate::cache::{NodeInfo, Snapshot};
use crate::framework::{
    ArgsError, CycleState, DefaultPlace, EventHint, FilterPlugin, NODE_CHANGES, Plugin, PluginSpec,
    PreFilterPlugin, PreFilterResult, Status,
};
use crate::model::PodInfo;

/// The name used in configuration files.
pub const NAME: &str = "NodeDeclaredFeatures";

/// The rejection reason (kube-scheduler's wording).
pub const ERR_REASON_UNSATISFIED: &str = "node(s) didn't match Pod's required features";

/// Filters out nodes that lack a feature the pod needs.
#[derive(Debug, Default, Clone, Copy)]
pub struct NodeDeclaredFeatures;

impl Plugin for NodeDeclaredFeatures {
    fn name(&self) -> &'static str {
        NAME
    }

    /// A node that declares a feature, or a new node, may now take the pod.
    fn events(&self) -> &'static [EventHint] {
        &NODE_CHANGES
    }

    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }

    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for NodeDeclaredFeatures {
    /// Skips the Filter for the many pods that need no feature.
    fn pre_filter(
        &self,
        _: &mut CycleState,
        pod: &PodInfo,
        _: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let status = if pod.required_node_features.is_empty() {
            Status::skip()
        } else {
            Status::success()
        };
        (PreFilterResult::default(), status)
    }
}

impl FilterPlugin for NodeDeclaredFeatures {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if pod
            .required_node_features
            .iter()
            .all(|f| node.node.declares(f))
        {
            Status::success()
        } else {
            Status::unresolvable(ERR_REASON_UNSATISFIED)
        }
    }
}

/// The plugin for the registry, with its place in kube-scheduler's default profile (last).
pub const SPEC: PluginSpec = PluginSpec {
    name: NAME,
    factory,
    default: Some(DefaultPlace {
        order: 140,
        weight: None,
    }),
    args: None,
};

/// Builds the plugin; it takes no arguments.
pub fn factory(_args: Option<&serde_json::Value>) -> Result<Arc<dyn Plugin>, ArgsError> {
    Ok(Arc::new(NodeDeclaredFeatures))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::model::node_features::RESTART_ALL_CONTAINERS;
    use crate::testing::{node, pod};
    use k8s_openapi::api::core::v1::ContainerRestartRule;

    fn restarting_all() -> Arc<PodInfo> {
        pod("p")
            .with_spec(|s| {
                s.containers[0].restart_policy_rules = Some(vec![ContainerRestartRule {
                    action: "RestartAllContainers".into(),
                    exit_codes: None,
                }])
            })
            .build()
    }

    fn node_declaring(features: &[&str]) -> NodeInfo {
        let mut n = node("n").api();
        n.status
            .get_or_insert_with(Default::default)
            .declared_features = Some(features.iter().map(|f| f.to_string()).collect());
        NodeInfo::new(Arc::new(
            crate::model::NodeModel::from_api(&n).expect("node"),
        ))
    }

    #[test]
    fn a_pod_needing_nothing_skips_the_filter() {
        let (_, status) = NodeDeclaredFeatures.pre_filter(
            &mut CycleState::new(),
            &pod("p").build(),
            &Snapshot::default(),
        );
        assert_eq!(status.code(), Code::Skip);
    }

    #[test]
    fn only_nodes_declaring_the_feature_pass() {
        let p = restarting_all();
        assert_eq!(p.required_node_features.as_ref(), [RESTART_ALL_CONTAINERS]);
        let state = CycleState::new();
        assert!(
            NodeDeclaredFeatures
                .filter(
                    &state,
                    &p,
                    &node_declaring(&["Other", RESTART_ALL_CONTAINERS])
                )
                .is_success()
        );
        let refused = NodeDeclaredFeatures.filter(&state, &p, &node_declaring(&["Other"]));
        assert_eq!(refused.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(refused.message(), ERR_REASON_UNSATISFIED);
    }
}
