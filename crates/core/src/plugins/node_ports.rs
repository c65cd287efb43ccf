//! NodePorts: a pod's host ports must be free on the node.

use std::sync::Arc;

use crate::cache::{NodeInfo, Snapshot};
use crate::framework::{
    ArgsError, CycleState, DefaultPlace, EventHint, FilterPlugin, NODE_CHANGES_AND_POD_DELETES,
    Plugin, PluginSpec, PreFilterPlugin, PreFilterResult, Status,
};
use crate::model::PodInfo;
use crate::model::pod::HostPort;

/// The name used in configuration files.
pub const NAME: &str = "NodePorts";

/// Reason given for a node where a requested host port is taken.
pub const ERR_REASON: &str = "node(s) didn't have free ports for the requested pod ports";

/// Error when Filter runs without this plugin's PreFilter state (kube-scheduler's wording).
pub const ERR_MISSING_STATE: &str = "reading \"PreFilterNodePorts\" from cycleState: not found";

/// The pod's host ports, computed at PreFilter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePortsState {
    /// Host ports the pod binds.
    pub ports: Vec<HostPort>,
}

/// Rejects nodes where one of the pod's host ports is already bound.
#[derive(Debug, Default, Clone, Copy)]
pub struct NodePorts;

impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [EventHint] {
        &NODE_CHANGES_AND_POD_DELETES
    }

    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }

    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for NodePorts {
    /// Records the pod's host ports; a pod without any skips the Filter.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &Snapshot,
    ) -> (PreFilterResult, Status) {
        if pod.host_ports.is_empty() {
            return (PreFilterResult::default(), Status::skip());
        }
        state.insert(NodePortsState {
            ports: pod.host_ports.clone(),
        });
        (PreFilterResult::default(), Status::success())
    }
}

impl FilterPlugin for NodePorts {
    fn filter(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        let Some(wanted) = state.get::<NodePortsState>() else {
            return Status::error(ERR_MISSING_STATE);
        };
        let conflict = wanted
            .ports
            .iter()
            .any(|w| node.used_ports.iter().any(|u| w.conflicts_with(u)));
        if conflict {
            Status::unschedulable(ERR_REASON)
        } else {
            Status::success()
        }
    }
}

/// The plugin for the registry, with its place in kube-scheduler's default profile.
pub const SPEC: PluginSpec = PluginSpec {
    name: NAME,
    factory,
    default: Some(DefaultPlace {
        order: 70,
        weight: None,
    }),
    args: None,
};

/// Builds the plugin; it takes no arguments, and ignores any given (as kube-scheduler does
/// for plugins without an arguments type).
pub fn factory(_args: Option<&serde_json::Value>) -> Result<Arc<dyn Plugin>, ArgsError> {
    Ok(Arc::new(NodePorts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::testing::{PodBuilder, node, pod};

    /// A pod binding `(ip, protocol, port)` host ports.
    fn with_ports(name: &str, ports: &[(&str, &str, i32)]) -> PodBuilder {
        pod(name).with_spec(|s| {
            s.containers[0].ports = Some(
                ports
                    .iter()
                    .map(
                        |(ip, proto, port)| k8s_openapi::api::core::v1::ContainerPort {
                            container_port: *port,
                            host_port: Some(*port),
                            host_ip: (!ip.is_empty()).then(|| ip.to_string()),
                            protocol: Some(proto.to_string()),
                            ..Default::default()
                        },
                    )
                    .collect(),
            )
        })
    }

    fn node_using(ports: &[(&str, &str, i32)]) -> NodeInfo {
        let mut n = NodeInfo::new(Arc::new(node("n").build()));
        n.add_pod(with_ports("running", ports).on("n").build());
        n
    }

    /// Runs PreFilter and Filter as the cycle does.
    fn run(pod: &PodInfo, node: &NodeInfo) -> Status {
        let mut state = CycleState::new();
        let (result, status) = NodePorts.pre_filter(&mut state, pod, &Snapshot::default());
        assert_eq!(result, PreFilterResult::default());
        if status.is_skip() {
            return status;
        }
        assert!(status.is_success());
        NodePorts.filter(&state, pod, node)
    }

    #[test]
    fn pod_without_host_ports_skips() {
        let s = run(&pod("p").build(), &node_using(&[("", "TCP", 80)]));
        assert!(s.is_skip());
        let container_port_only = pod("p")
            .with_spec(|s| {
                s.containers[0].ports = Some(vec![k8s_openapi::api::core::v1::ContainerPort {
                    container_port: 80,
                    ..Default::default()
                }])
            })
            .build();
        assert!(run(&container_port_only, &node_using(&[("", "TCP", 80)])).is_skip());
    }

    #[test]
    fn free_ports_fit() {
        let p = with_ports("p", &[("", "TCP", 8080)]).build();
        assert!(run(&p, &node_using(&[])).is_success());
        assert!(run(&p, &node_using(&[("", "TCP", 8081)])).is_success());
        assert!(
            run(&p, &node_using(&[("", "UDP", 8080)])).is_success(),
            "other protocol"
        );
    }

    #[test]
    fn same_port_and_protocol_conflicts() {
        let p = with_ports("p", &[("", "UDP", 53)]).build();
        let s = run(&p, &node_using(&[("", "UDP", 53)]));
        assert_eq!(s.code(), Code::Unschedulable);
        assert_eq!(
            s.message(),
            "node(s) didn't have free ports for the requested pod ports"
        );
    }

    #[test]
    fn host_ips() {
        let specific = with_ports("p", &[("127.0.0.1", "TCP", 80)]).build();
        let wildcard = with_ports("p", &[("", "TCP", 80)]).build();
        assert!(
            run(&specific, &node_using(&[("127.0.0.2", "TCP", 80)])).is_success(),
            "different specific IPs"
        );
        assert!(run(&specific, &node_using(&[("127.0.0.1", "TCP", 80)])).is_rejected());
        assert!(
            run(&specific, &node_using(&[("0.0.0.0", "TCP", 80)])).is_rejected(),
            "node wildcard"
        );
        assert!(
            run(&wildcard, &node_using(&[("10.0.0.1", "TCP", 80)])).is_rejected(),
            "pod wildcard"
        );
    }

    #[test]
    fn any_one_conflicting_port_rejects() {
        let p = with_ports("p", &[("", "TCP", 80), ("", "TCP", 443)]).build();
        assert!(run(&p, &node_using(&[("", "TCP", 443)])).is_rejected());
        assert!(run(&p, &node_using(&[("", "TCP", 8443)])).is_success());
    }

    #[test]
    fn missing_state_is_an_error() {
        let p = with_ports("p", &[("", "TCP", 80)]).build();
        let s = NodePorts.filter(&CycleState::new(), &p, &node_using(&[]));
        assert_eq!(s.code(), Code::Error);
        assert_eq!(
            s.message(),
            "reading \"PreFilterNodePorts\" from cycleState: not found"
        );
    }

    #[test]
    fn factory_builds_the_named_plugin() {
        let p = factory(None).unwrap();
        assert_eq!(p.name(), "NodePorts");
        assert!(p.as_pre_filter().is_some() && p.as_filter().is_some());
    }
}
