//! SchedulingGates: keeps a pod out of the active queue while it carries
//! `spec.schedulingGates` (kube-scheduler's PreEnqueue plugin of that name).

use std::sync::Arc;

use crate::framework::{ArgsError, DefaultPlace, Plugin, PluginSpec, PreEnqueuePlugin, Status};
use crate::model::PodInfo;

/// The name used in configuration files.
pub const NAME: &str = "SchedulingGates";

/// Start of the rejection message; the gate names follow in brackets, separated by spaces
/// (Go's `%v` of a string slice): `waiting for scheduling gates: [gate-a gate-b]`.
pub const ERR_REASON_PREFIX: &str = "waiting for scheduling gates: ";

/// The message of the `PodScheduled=False` condition (reason `SchedulingGated`) that the API
/// server gives a pod created with gates: what a gated pod says while it waits, since
/// kube-scheduler writes no condition for a pod it never tried.
pub const GATED_CONDITION_MESSAGE: &str = "Scheduling is blocked due to non-empty scheduling gates";

/// Parks gated pods; they are enqueued once every gate has been removed.
#[derive(Debug, Default, Clone, Copy)]
pub struct SchedulingGates;

impl Plugin for SchedulingGates {
    fn name(&self) -> &'static str {
        NAME
    }

    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        Some(self)
    }
}

impl PreEnqueuePlugin for SchedulingGates {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        if pod.scheduling_gates.is_empty() {
            return Status::success();
        }
        Status::unresolvable(format!(
            "{ERR_REASON_PREFIX}[{}]",
            pod.scheduling_gates.join(" ")
        ))
    }
}

/// The plugin for the registry, with its place in kube-scheduler's default profile.
pub const SPEC: PluginSpec = PluginSpec {
    name: NAME,
    factory,
    default: Some(DefaultPlace {
        order: 10,
        weight: None,
    }),
    args: None,
};

/// Builds the plugin; it takes no arguments, and ignores any given (as kube-scheduler does
/// for plugins without an arguments type).
pub fn factory(_args: Option<&serde_json::Value>) -> Result<Arc<dyn Plugin>, ArgsError> {
    Ok(Arc::new(SchedulingGates))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::testing::pod;

    fn gated(gates: &[&str]) -> Arc<PodInfo> {
        pod("p")
            .with_spec(|s| {
                s.scheduling_gates = Some(
                    gates
                        .iter()
                        .map(|g| k8s_openapi::api::core::v1::PodSchedulingGate {
                            name: g.to_string(),
                        })
                        .collect(),
                )
            })
            .build()
    }

    #[test]
    fn ungated_pods_are_enqueued() {
        assert!(SchedulingGates.pre_enqueue(&pod("p").build()).is_success());
        assert!(SchedulingGates.pre_enqueue(&gated(&[])).is_success());
    }

    #[test]
    fn one_gate() {
        let s = SchedulingGates.pre_enqueue(&gated(&["example.com/quota"]));
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(
            s.message(),
            "waiting for scheduling gates: [example.com/quota]"
        );
    }

    #[test]
    fn several_gates_in_spec_order_space_separated() {
        let s = SchedulingGates.pre_enqueue(&gated(&["gate-b", "gate-a"]));
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(s.reasons().len(), 1);
        assert_eq!(s.message(), "waiting for scheduling gates: [gate-b gate-a]");
    }

    #[test]
    fn factory_builds_the_named_plugin() {
        let p = factory(None).unwrap();
        assert_eq!(p.name(), "SchedulingGates");
        assert!(p.as_pre_enqueue().is_some());
    }
}
