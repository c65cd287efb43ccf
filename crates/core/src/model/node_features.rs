//! Node declared features (`status.declaredFeatures`, GA in Kubernetes 1.37): what a node's
//! kubelet says it supports, and what a pod needs of its node, inferred from the pod's spec
//! as kube-scheduler's NodeDeclaredFeatures plugin infers it (component-helpers'
//! `nodedeclaredfeatures` registry). A feature whose use the API server drops under its
//! default feature gates (VolumeBindMountOptions, alpha) is not inferred.

use k8s_openapi::api::core::v1::PodSpec;

/// A container restart rule that restarts every container of the pod.
pub const RESTART_ALL_CONTAINERS: &str = "RestartAllContainersOnContainerExits";

/// User namespaces together with the host's network.
pub const USER_NAMESPACES_HOST_NETWORK: &str = "UserNamespacesHostNetworkSupport";

/// The restart rule action that needs [`RESTART_ALL_CONTAINERS`].
pub const RESTART_ALL_ACTION: &str = "RestartAllContainers";

/// The features a node must declare to run a pod with `spec`, in the registry's order.
pub fn required_by(spec: &PodSpec) -> Vec<&'static str> {
    let mut required = Vec::new();
    let restarts_all = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .flat_map(|c| c.restart_policy_rules.iter().flatten())
        .any(|rule| rule.action == RESTART_ALL_ACTION);
    if restarts_all {
        required.push(RESTART_ALL_CONTAINERS);
    }
    if spec.host_network == Some(true) && spec.host_users == Some(false) {
        required.push(USER_NAMESPACES_HOST_NETWORK);
    }
    required
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, ContainerRestartRule};

    fn with_rule(action: &str) -> Container {
        Container {
            name: "main".into(),
            restart_policy_rules: Some(vec![ContainerRestartRule {
                action: action.into(),
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn a_plain_pod_needs_nothing() {
        let spec = PodSpec {
            containers: vec![Container::default()],
            host_network: Some(true),
            ..Default::default()
        };
        assert!(required_by(&spec).is_empty());
    }

    #[test]
    fn restart_all_rules_and_user_namespaces_on_the_host_network_are_needed() {
        let spec = PodSpec {
            containers: vec![with_rule("Restart")],
            init_containers: Some(vec![with_rule(RESTART_ALL_ACTION)]),
            host_network: Some(true),
            host_users: Some(false),
            ..Default::default()
        };
        assert_eq!(
            required_by(&spec),
            [RESTART_ALL_CONTAINERS, USER_NAMESPACES_HOST_NETWORK]
        );
    }
}
