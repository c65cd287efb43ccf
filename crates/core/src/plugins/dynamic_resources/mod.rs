//! DynamicResources, as far as gantry goes before it writes allocations (issue 52): a pod
//! with resource claims (`spec.resourceClaims`) is refused with kube-scheduler 1.37's
//! messages where it would refuse it (a claim not made yet, not found, being deleted, not
//! the pod's, of a class that does not exist; on a node, `cannot allocate all claims` where
//! the structured [`allocator`] finds no devices for the claims, and `resourceclaim not
//! available on the node` for a claim allocated elsewhere), and on the nodes where its
//! claims could be allocated it stays pending and says why (see [`resource_claims`]). The
//! plugin has kube-scheduler's name and place so that kube-scheduler's own configurations
//! load.
//!
//! A pod that asks, as an extended resource, for devices a DeviceClass maps (1.37's
//! DRAExtendedResource) needs no check here: without a device plugin no node has that
//! resource allocatable, so NodeResourcesFit leaves the pod pending.

pub mod allocator;

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cache::{DynamicResources as Objects, NodeInfo, Snapshot, Tracked};
use crate::framework::resource_claims;
use crate::framework::{
    ArgsError, CycleState, DefaultPlace, FilterPlugin, Plugin, PluginArgs, PluginSpec,
    PreFilterPlugin, PreFilterResult, Status, decode_args,
};
use crate::model::PodInfo;
use crate::model::dra::claim::{RequestKind, ResourceClaimModel};
use crate::model::duration::parse_go_duration;
use allocator::{Allocated, Allocator, Node, Selectors};

/// The name used in configuration files.
pub const NAME: &str = resource_claims::PLUGIN;

/// What is logged at start for each profile that enables the plugin.
pub const START_WARNING: &str = "gantry does not allocate devices (Dynamic Resource Allocation) \
     yet: pods with resource claims stay pending";

/// kube-scheduler's reason for a node on which the claims cannot all be allocated.
pub const ERR_CANNOT_ALLOCATE: &str = "cannot allocate all claims";

/// kube-scheduler's reason for a node an allocated claim's devices do not reach.
pub const ERR_NOT_AVAILABLE: &str = "resourceclaim not available on the node";

/// Checks pods with resource claims at PreFilter and Filter, and refuses them.
#[derive(Debug, Default)]
pub struct DynamicResources {
    /// The device selectors compiled so far.
    selectors: Arc<Selectors>,
}

/// What PreFilter found of the pod's claims, for Filter.
#[derive(Clone)]
struct PodClaims {
    /// The DRA objects of the cycle's snapshot.
    objects: Objects,
    /// The devices in use.
    allocated: Arc<Allocated>,
    /// The pod's claims allocated already.
    allocated_claims: Vec<Arc<ResourceClaimModel>>,
    /// The pod's claims to allocate, in the pod's order.
    to_allocate: Vec<Arc<ResourceClaimModel>>,
    /// The plugin's compiled selectors.
    selectors: Arc<Selectors>,
}

impl Plugin for DynamicResources {
    fn name(&self) -> &'static str {
        NAME
    }

    fn cache_state(&self) -> &'static [Tracked] {
        &[Tracked::DynamicResources]
    }

    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }

    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for DynamicResources {
    /// Finds the pod's claims, as kube-scheduler 1.37 does, and refuses the pod outright
    /// where it would; a pod without claims skips the plugin.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        if pod.resource_claims.is_empty() {
            return (PreFilterResult::default(), Status::skip());
        }
        let objects = snapshot.dynamic_resources();
        let status = match pod_claims(pod, objects, &self.selectors) {
            Ok(Some(claims)) => {
                state.insert(claims);
                Status::success()
            }
            Ok(None) => Status::skip(),
            Err(reason) => Status::unresolvable(reason),
        };
        (PreFilterResult::default(), status)
    }
}

/// The pod's claims, found and checked; `None` when none is needed.
fn pod_claims(
    pod: &PodInfo,
    objects: &Objects,
    selectors: &Arc<Selectors>,
) -> Result<Option<PodClaims>, String> {
    let (namespace, name) = (&pod.namespace, &pod.name);
    let mut allocated_claims = Vec::new();
    let mut to_allocate = Vec::new();
    for pod_claim in pod.resource_claims.iter() {
        let Some(claim_name) = pod_claim.claim_name(namespace, name)? else {
            continue;
        };
        let claim = objects
            .claim(namespace, claim_name)
            .ok_or_else(|| format!("could not find ResourceClaim \"{namespace}/{claim_name}\""))?;
        if claim.deleting {
            return Err(format!("resourceclaim \"{claim_name}\" is being deleted"));
        }
        if pod_claim.from_template() && claim.owner_pod.as_deref() != Some(pod.uid.as_str()) {
            return Err(format!(
                "ResourceClaim {namespace}/{claim_name} was not created for Pod {namespace}/{name} (Pod is not owner)"
            ));
        }
        if claim.allocation.is_some() {
            allocated_claims.push(claim.clone());
        } else {
            check_classes(claim, objects)?;
            to_allocate.push(claim.clone());
        }
    }
    if allocated_claims.is_empty() && to_allocate.is_empty() {
        return Ok(None);
    }
    Ok(Some(PodClaims {
        objects: objects.clone(),
        allocated: Arc::new(Allocated::of(objects, [])),
        allocated_claims,
        to_allocate,
        selectors: selectors.clone(),
    }))
}

/// Every class the claim's requests name exists.
fn check_classes(claim: &ResourceClaimModel, objects: &Objects) -> Result<(), String> {
    for request in &claim.requests {
        let classes: Vec<(String, &str)> = match &request.kind {
            RequestKind::Exactly(e) => vec![(request.name.clone(), &e.class)],
            RequestKind::FirstAvailable(subs) => subs
                .iter()
                .map(|(sub, e)| (format!("{}/{sub}", request.name), e.class.as_str()))
                .collect(),
        };
        for (name, class) in classes {
            if objects.class(class).is_none() {
                return Err(format!(
                    "request {name}: device class {class} does not exist"
                ));
            }
        }
    }
    Ok(())
}

impl FilterPlugin for DynamicResources {
    /// Whether the pod's allocated claims reach the node and the others can be allocated on
    /// it; where they can, the pod is still refused, since gantry does not write
    /// allocations yet.
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(claims) = state.get::<PodClaims>() else {
            return Status::success();
        };
        let name = node.name();
        let node = Node {
            name,
            labels: &node.node.labels,
        };
        if !claims.to_allocate.is_empty() {
            let to_allocate: Vec<&ResourceClaimModel> =
                claims.to_allocate.iter().map(|c| &**c).collect();
            let found = Allocator::new(
                &claims.objects,
                &to_allocate,
                &claims.allocated,
                &claims.selectors,
            )
            .and_then(|allocator| allocator.allocate(node));
            match found {
                Err(e) => return Status::error(e),
                Ok(None) => return Status::unresolvable(ERR_CANNOT_ALLOCATE),
                Ok(Some(_)) => {}
            }
        }
        let unavailable = claims.allocated_claims.iter().any(|c| {
            c.allocation
                .as_ref()
                .and_then(|a| a.node_selector.as_ref())
                .is_some_and(|s| !s.matches(name, node.labels))
        });
        if unavailable {
            return Status::unresolvable(ERR_NOT_AVAILABLE);
        }
        resource_claims::refusal(pod).unwrap_or_else(Status::success)
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
    Ok(Arc::new(DynamicResources::default()))
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
    fn a_claim_not_made_yet_keeps_the_pod_pending_with_kube_schedulers_message() {
        let (_, status) = DynamicResources::default().pre_filter(
            &mut CycleState::new(),
            &with_claims(&["gpu", "nic"]),
            &Snapshot::default(),
        );
        assert_eq!(status.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(
            status.message(),
            "pod \"default/p\": ResourceClaim not created yet"
        );
    }

    /// A cache with a GPU class, one GPU on `n1`, and the claim `default/p-gpu` made for the
    /// pod `p` (uid `uid-p`) from a template.
    fn cluster() -> crate::cache::Cache {
        fn read<T: serde::de::DeserializeOwned>(json: serde_json::Value) -> T {
            serde_json::from_value(json).expect("the object")
        }
        let mut cache = crate::cache::Cache::new();
        cache.upsert_device_class(
            crate::model::dra::class::DeviceClassModel::from_api(&read(serde_json::json!({
                "metadata": {"name": "gpu"},
                "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]}
            })))
            .unwrap(),
        );
        cache.upsert_resource_slice(
            crate::model::dra::slice::SliceModel::from_api(&read(serde_json::json!({
                "metadata": {"name": "n1"},
                "spec": {"driver": "gpu.example.com", "nodeName": "n1",
                    "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": "gpu-0"}]}
            })))
            .unwrap(),
        );
        cache.upsert_resource_claim(
            ResourceClaimModel::from_api(&read(serde_json::json!({
                "metadata": {"name": "p-gpu", "namespace": "default",
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p",
                        "uid": "uid-p", "controller": true}]},
                "spec": {"devices": {"requests": [{"name": "gpu",
                    "exactly": {"deviceClassName": "gpu"}}]}}
            })))
            .unwrap(),
        );
        for n in ["n1", "n2"] {
            cache.upsert_node(crate::testing::node(n).capacity("4", "8Gi").build());
        }
        cache
    }

    /// The pod `p` of uid `uid`, whose claim `gpu` was made from a template as `p-gpu`.
    fn made_for(uid: &str) -> Arc<PodInfo> {
        let mut api = pod("p")
            .with_spec(|s| {
                s.resource_claims = Some(vec![PodResourceClaim {
                    name: "gpu".to_string(),
                    resource_claim_template_name: Some("one-gpu".into()),
                    ..Default::default()
                }])
            })
            .api();
        api.metadata.uid = Some(uid.to_string());
        api.status
            .get_or_insert_with(Default::default)
            .resource_claim_statuses =
            Some(vec![k8s_openapi::api::core::v1::PodResourceClaimStatus {
                name: "gpu".to_string(),
                resource_claim_name: Some("p-gpu".to_string()),
            }]);
        Arc::new(PodInfo::from_api(&api).expect("a pod"))
    }

    #[test]
    fn a_node_without_the_devices_cannot_allocate_and_one_with_them_still_refuses() {
        let mut cache = cluster();
        let mut snapshot = Snapshot::default();
        cache.update_snapshot(&mut snapshot);
        let mut state = CycleState::new();
        let (_, status) =
            DynamicResources::default().pre_filter(&mut state, &made_for("uid-p"), &snapshot);
        assert!(status.is_success(), "{status:?}");
        let on = |node: &str| {
            let info = snapshot
                .nodes()
                .iter()
                .find(|n| &**n.name() == node)
                .unwrap();
            DynamicResources::default().filter(&state, &made_for("uid-p"), info)
        };
        let n2 = on("n2");
        assert_eq!(
            (n2.code(), n2.message()),
            (
                Code::UnschedulableAndUnresolvable,
                ERR_CANNOT_ALLOCATE.to_string()
            )
        );
        assert_eq!(
            on("n1").message(),
            "pod has resource claims [gpu], which gantry does not allocate yet"
        );
        // A claim made from a template for another pod is not this pod's.
        let (_, status) = DynamicResources::default().pre_filter(
            &mut CycleState::new(),
            &made_for("uid-q"),
            &snapshot,
        );
        assert_eq!(
            status.message(),
            "ResourceClaim default/p-gpu was not created for Pod default/p (Pod is not owner)"
        );
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
        let (_, status) = DynamicResources::default().pre_filter(
            &mut CycleState::new(),
            &pod("p").build(),
            &Snapshot::default(),
        );
        assert_eq!(status.code(), Code::Skip);
    }
}
