//! DynamicResources, as far as gantry goes before it allocates devices (issue 52): a pod with
//! resource claims (`spec.resourceClaims`) stays pending and says why (see
//! [`resource_claims`]). The plugin has kube-scheduler's name and place so that
//! kube-scheduler's own configurations load.
//!
//! A pod that asks, as an extended resource, for devices a DeviceClass maps (1.37's
//! DRAExtendedResource) needs no check here: without a device plugin no node has that
//! resource allocatable, so NodeResourcesFit leaves the pod pending.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cache::Snapshot;
use crate::framework::resource_claims;
use crate::framework::{
    ArgsError, CycleState, DefaultPlace, Plugin, PluginArgs, PluginSpec, PreFilterPlugin,
    PreFilterResult, Status, decode_args,
};
use crate::model::PodInfo;
use crate::model::duration::parse_go_duration;

/// The name used in configuration files.
pub const NAME: &str = resource_claims::PLUGIN;

/// What is logged at start for each profile that enables the plugin.
pub const START_WARNING: &str = "gantry does not allocate devices (Dynamic Resource Allocation) \
     yet: pods with resource claims stay pending";

/// Refuses pods with resource claims at PreFilter.
#[derive(Debug, Default, Clone, Copy)]
pub struct DynamicResources;

impl Plugin for DynamicResources {
    fn name(&self) -> &'static str {
        NAME
    }

    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for DynamicResources {
    /// Unresolvable for a pod with claims; every other pod skips the plugin.
    fn pre_filter(
        &self,
        _: &mut CycleState,
        pod: &PodInfo,
        _: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let status = resource_claims::refusal(pod).unwrap_or_else(Status::skip);
        (PreFilterResult::default(), status)
    }
}

/// `DynamicResourcesArgs`: how long the Filter of one node and the wait for a device's
/// binding conditions may take. They bound work gantry does not do yet; they are read and
/// validated as kube-scheduler 1.37 reads them (its gates for both are on by default), so
/// that a configuration it refuses is refused here too.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct DynamicResourcesArgs {
    /// At least zero (0 turns the limit off); `10s` by default.
    pub filter_timeout: String,
    /// At least a second; `10m0s` by default.
    pub binding_timeout: String,
}

impl Default for DynamicResourcesArgs {
    fn default() -> Self {
        DynamicResourcesArgs {
            filter_timeout: "10s".to_string(),
            binding_timeout: "10m0s".to_string(),
        }
    }
}

impl PluginArgs for DynamicResourcesArgs {
    const KIND: &'static str = "DynamicResourcesArgs";

    fn validate(&self) -> Result<(), ArgsError> {
        parse_go_duration(&self.filter_timeout)
            .map_err(|e| ArgsError::new("filterTimeout", format!("Invalid value: {e}")))?;
        let binding = parse_go_duration(&self.binding_timeout)
            .map_err(|e| ArgsError::new("bindingTimeout", format!("Invalid value: {e}")))?;
        if binding < Duration::from_secs(1) {
            return Err(ArgsError::new(
                "bindingTimeout",
                format!(
                    "Invalid value: {:?}: must be at least 1 second",
                    self.binding_timeout
                ),
            ));
        }
        Ok(())
    }
}

/// The plugin for the registry, with its place in kube-scheduler's default profile (before
/// DefaultPreemption).
pub const SPEC: PluginSpec = PluginSpec {
    name: NAME,
    factory,
    default: Some(DefaultPlace {
        order: 102,
        weight: None,
    }),
    args: Some(crate::framework::resolved_args::<DynamicResourcesArgs>),
};

/// Builds the plugin from its arguments, validated and otherwise unused.
pub fn factory(args: Option<&serde_json::Value>) -> Result<Arc<dyn Plugin>, ArgsError> {
    let _: DynamicResourcesArgs = decode_args(args)?;
    Ok(Arc::new(DynamicResources))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::testing::pod;
    use k8s_openapi::api::core::v1::PodResourceClaim;

    fn with_claims(names: &[&str]) -> Arc<PodInfo> {
        pod("p")
            .with_spec(|s| {
                s.resource_claims = Some(
                    names
                        .iter()
                        .map(|n| PodResourceClaim {
                            name: n.to_string(),
                            resource_claim_template_name: Some("gpu-template".into()),
                            ..Default::default()
                        })
                        .collect(),
                )
            })
            .build()
    }

    #[test]
    fn a_pod_with_claims_is_refused_for_every_node() {
        let (_, status) = DynamicResources.pre_filter(
            &mut CycleState::new(),
            &with_claims(&["gpu", "nic"]),
            &Snapshot::default(),
        );
        assert_eq!(status.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(
            status.message(),
            "pod has resource claims [gpu nic], which gantry does not allocate yet"
        );
        assert_eq!(status.plugin(), Some(NAME));
    }

    #[test]
    fn arguments_are_validated_as_kube_scheduler_does() {
        let dump = serde_json::json!({
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "DynamicResourcesArgs",
            "bindingTimeout": "10m0s", "filterTimeout": "10s"
        });
        assert_eq!(
            decode_args::<DynamicResourcesArgs>(Some(&dump)),
            Ok(DynamicResourcesArgs::default())
        );
        let off = serde_json::json!({"filterTimeout": "0s"});
        assert!(decode_args::<DynamicResourcesArgs>(Some(&off)).is_ok());
        let short = serde_json::json!({"bindingTimeout": "500ms"});
        let e = decode_args::<DynamicResourcesArgs>(Some(&short)).unwrap_err();
        assert_eq!(e.field, "bindingTimeout");
        let negative = serde_json::json!({"filterTimeout": "-1s"});
        let e = decode_args::<DynamicResourcesArgs>(Some(&negative)).unwrap_err();
        assert_eq!(e.field, "filterTimeout");
        let unknown = serde_json::json!({"filterTimeoutSeconds": 3});
        assert!(decode_args::<DynamicResourcesArgs>(Some(&unknown)).is_err());
    }

    #[test]
    fn a_pod_without_claims_skips_the_plugin() {
        let (_, status) = DynamicResources.pre_filter(
            &mut CycleState::new(),
            &pod("p").build(),
            &Snapshot::default(),
        );
        assert_eq!(status.code(), Code::Skip);
    }
}
