//! ResourceClaims: what a pod (or pods sharing the claim) asks for, and once allocated,
//! which devices it was given and who holds it.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1 as api;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::{Amount, api_quantity, object_error, quantities, selectors_api};
use crate::model::selector::NodeSelector;

/// A ResourceClaim.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceClaimModel {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.resourceVersion`.
    pub resource_version: String,
    /// The uid of the pod that owns it (a claim made from a template for that pod).
    pub owner_pod: Option<String>,
    /// Being deleted: it is not allocated again.
    pub deleting: bool,
    /// `spec.devices.requests`.
    pub requests: Vec<DeviceRequest>,
    /// `spec.devices.constraints`.
    pub constraints: Vec<DeviceConstraint>,
    /// `spec.devices.config`.
    pub config: Vec<api::DeviceClaimConfiguration>,
    /// `status.allocation`.
    pub allocation: Option<Allocation>,
    /// `status.reservedFor`: the pods (or other consumers) it is reserved for.
    pub reserved_for: Vec<Consumer>,
}

/// One request of a claim.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceRequest {
    /// `name`.
    pub name: String,
    /// What it asks for.
    pub kind: RequestKind,
}

/// What a request asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum RequestKind {
    /// `exactly`.
    Exactly(ExactRequest),
    /// `firstAvailable`: the first of these that can be allocated, in order.
    FirstAvailable(Vec<(String, ExactRequest)>),
}

/// Devices of one class, as a request (or a subrequest) asks for them.
#[derive(Debug, Clone, PartialEq)]
pub struct ExactRequest {
    /// `deviceClassName`.
    pub class: String,
    /// `selectors`: CEL expressions each device satisfies.
    pub selectors: Vec<String>,
    /// `allocationMode` and `count`.
    pub mode: AllocationMode,
    /// `adminAccess`.
    pub admin_access: bool,
    /// `tolerations`.
    pub tolerations: Vec<DeviceToleration>,
    /// `capacity.requests`: what of each device's consumable capacity it takes.
    pub capacity: BTreeMap<String, Amount>,
}

/// How many devices a request takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocationMode {
    /// `ExactCount`, with `count`.
    ExactCount(i64),
    /// `All`: every matching device.
    All,
}

/// A toleration of device taints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceToleration {
    /// `key`; none tolerates every key (with `Exists`).
    pub key: Option<String>,
    /// `operator`: `Equal` (the default) or `Exists`.
    pub operator: String,
    /// `value`.
    pub value: Option<String>,
    /// `effect`; none tolerates every effect.
    pub effect: Option<String>,
    /// `tolerationSeconds`.
    pub toleration_seconds: Option<i64>,
}

/// A constraint between the devices of some requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceConstraint {
    /// `requests`: the requests it applies to; empty for all.
    pub requests: Vec<String>,
    /// `matchAttribute`: an attribute all the devices have, with one value.
    pub match_attribute: Option<String>,
    /// `distinctAttribute`: an attribute all the devices have, each with its own value.
    pub distinct_attribute: Option<String>,
}

/// A claim's allocation.
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    /// `devices.results`.
    pub devices: Vec<AllocatedDevice>,
    /// `devices.config`.
    pub config: Vec<api::DeviceAllocationConfiguration>,
    /// `nodeSelector`: the nodes the allocated devices are reachable from.
    pub node_selector: Option<NodeSelector>,
}

/// One device allocated to a request.
#[derive(Debug, Clone, PartialEq)]
pub struct AllocatedDevice {
    /// `request` (`request/subrequest` for a subrequest).
    pub request: String,
    /// `driver`.
    pub driver: String,
    /// `pool`.
    pub pool: String,
    /// `device`.
    pub device: String,
    /// `adminAccess`.
    pub admin_access: bool,
    /// `shareID`: which share of a device allocated many times.
    pub share_id: Option<String>,
    /// `consumedCapacity`.
    pub consumed_capacity: BTreeMap<String, Amount>,
    /// `bindingConditions`.
    pub binding_conditions: Vec<String>,
    /// `bindingFailureConditions`.
    pub binding_failure_conditions: Vec<String>,
}

/// Who a claim is reserved for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumer {
    /// `apiGroup` (empty for the core group).
    pub api_group: String,
    /// `resource`: `pods` for a pod.
    pub resource: String,
    /// `name`.
    pub name: String,
    /// `uid`.
    pub uid: String,
}

impl ResourceClaimModel {
    /// Reads a ResourceClaim; errors name it and the field.
    pub fn from_api(claim: &api::ResourceClaim) -> Result<Self, String> {
        let meta = &claim.metadata;
        let namespace = meta.namespace.clone().unwrap_or_default();
        let name = meta.name.clone().unwrap_or_default();
        let fail = |reason: String| object_error("resourceclaim", Some(&namespace), &name, &reason);
        let devices = claim.spec.as_ref().and_then(|s| s.devices.as_ref());
        let requests = devices
            .and_then(|d| d.requests.as_ref())
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, r)| request(r, &format!("spec.devices.requests[{i}]")))
            .collect::<Result<_, _>>()
            .map_err(fail)?;
        let constraints = devices
            .and_then(|d| d.constraints.as_ref())
            .into_iter()
            .flatten()
            .map(|c| DeviceConstraint {
                requests: c.requests.clone().unwrap_or_default(),
                match_attribute: c.match_attribute.clone(),
                distinct_attribute: c.distinct_attribute.clone(),
            })
            .collect();
        let status = claim.status.as_ref();
        let allocation = status
            .and_then(|s| s.allocation.as_ref())
            .map(|a| allocation(a, "status.allocation"))
            .transpose()
            .map_err(fail)?;
        let reserved_for = status
            .and_then(|s| s.reserved_for.as_ref())
            .into_iter()
            .flatten()
            .map(|r| Consumer {
                api_group: r.api_group.clone().unwrap_or_default(),
                resource: r.resource.clone(),
                name: r.name.clone(),
                uid: r.uid.clone(),
            })
            .collect();
        Ok(ResourceClaimModel {
            namespace: namespace.clone(),
            name: name.clone(),
            uid: meta.uid.clone().unwrap_or_default(),
            resource_version: meta.resource_version.clone().unwrap_or_default(),
            owner_pod: owner_pod(meta.owner_references.as_deref().unwrap_or_default()),
            deleting: meta.deletion_timestamp.is_some(),
            requests,
            constraints,
            config: devices.and_then(|d| d.config.clone()).unwrap_or_default(),
            allocation,
            reserved_for,
        })
    }

    /// The claim as the API holds it, with what the scheduler reads.
    pub fn to_api(&self) -> api::ResourceClaim {
        let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
        let owner = self.owner_pod.as_ref().map(|uid| {
            // Only the owning pod's uid is read.
            vec![OwnerReference {
                api_version: "v1".to_string(),
                kind: "Pod".to_string(),
                uid: uid.clone(),
                controller: Some(true),
                ..Default::default()
            }]
        });
        let status = (self.allocation.is_some() || !self.reserved_for.is_empty()).then(|| {
            api::ResourceClaimStatus {
                allocation: self.allocation.as_ref().map(Allocation::to_api),
                reserved_for: (!self.reserved_for.is_empty())
                    .then(|| self.reserved_for.iter().map(Consumer::to_api).collect()),
                devices: None,
            }
        });
        api::ResourceClaim {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                uid: non_empty(&self.uid),
                resource_version: non_empty(&self.resource_version),
                owner_references: owner,
                ..Default::default()
            },
            spec: Some(api::ResourceClaimSpec {
                devices: Some(api::DeviceClaim {
                    requests: (!self.requests.is_empty())
                        .then(|| self.requests.iter().map(DeviceRequest::to_api).collect()),
                    constraints: (!self.constraints.is_empty()).then(|| {
                        self.constraints
                            .iter()
                            .map(|c| api::DeviceConstraint {
                                requests: (!c.requests.is_empty()).then(|| c.requests.clone()),
                                match_attribute: c.match_attribute.clone(),
                                distinct_attribute: c.distinct_attribute.clone(),
                            })
                            .collect()
                    }),
                    config: (!self.config.is_empty()).then(|| self.config.clone()),
                }),
            }),
            status,
        }
    }
}

/// The uid of the pod a claim's controller reference names, if any.
fn owner_pod(owners: &[OwnerReference]) -> Option<String> {
    owners
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "Pod" && o.api_version == "v1")
        .map(|o| o.uid.clone())
}

fn request(r: &api::DeviceRequest, field: &str) -> Result<DeviceRequest, String> {
    let kind = match (&r.exactly, &r.first_available) {
        (Some(e), None) => {
            let fields = Fields {
                class: &e.device_class_name,
                selectors: e.selectors.as_deref(),
                mode: e.allocation_mode.as_deref(),
                count: e.count,
                tolerations: e.tolerations.as_deref(),
                capacity: e.capacity.as_ref(),
            };
            let admin_access = e.admin_access.unwrap_or(false);
            RequestKind::Exactly(exact(fields, admin_access, &format!("{field}.exactly"))?)
        }
        (None, Some(subs)) => RequestKind::FirstAvailable(
            subs.iter()
                .enumerate()
                .map(|(i, s)| {
                    let at = format!("{field}.firstAvailable[{i}]");
                    let fields = Fields {
                        class: &s.device_class_name,
                        selectors: s.selectors.as_deref(),
                        mode: s.allocation_mode.as_deref(),
                        count: s.count,
                        tolerations: s.tolerations.as_deref(),
                        capacity: s.capacity.as_ref(),
                    };
                    let e = exact(fields, false, &at)?;
                    Ok((s.name.clone(), e))
                })
                .collect::<Result<_, String>>()?,
        ),
        _ => {
            return Err(format!(
                "{field}: exactly one of exactly or firstAvailable is required"
            ));
        }
    };
    Ok(DeviceRequest {
        name: r.name.clone(),
        kind,
    })
}

/// The fields a request and a subrequest share.
struct Fields<'a> {
    class: &'a str,
    selectors: Option<&'a [api::DeviceSelector]>,
    mode: Option<&'a str>,
    count: Option<i64>,
    tolerations: Option<&'a [api::DeviceToleration]>,
    capacity: Option<&'a api::CapacityRequirements>,
}

fn exact(fields: Fields<'_>, admin_access: bool, field: &str) -> Result<ExactRequest, String> {
    let Fields {
        class,
        selectors,
        mode,
        count,
        tolerations,
        capacity,
    } = fields;
    let mode = match mode.unwrap_or("ExactCount") {
        "ExactCount" => AllocationMode::ExactCount(count.unwrap_or(1)),
        "All" => AllocationMode::All,
        other => {
            return Err(format!(
                "{field}.allocationMode: unknown mode {}",
                super::echo(other)
            ));
        }
    };
    let selectors = super::selectors(selectors.unwrap_or_default(), &format!("{field}.selectors"))?;
    let tolerations = tolerations
        .unwrap_or_default()
        .iter()
        .map(|t| DeviceToleration {
            key: t.key.clone(),
            operator: t.operator.clone().unwrap_or_else(|| "Equal".to_string()),
            value: t.value.clone(),
            effect: t.effect.clone(),
            toleration_seconds: t.toleration_seconds,
        })
        .collect();
    let capacity = match capacity.and_then(|c| c.requests.as_ref()) {
        Some(requests) => quantities(requests, &format!("{field}.capacity.requests"))?,
        None => BTreeMap::new(),
    };
    Ok(ExactRequest {
        class: class.to_string(),
        selectors,
        mode,
        admin_access,
        tolerations,
        capacity,
    })
}

fn allocation(a: &api::AllocationResult, field: &str) -> Result<Allocation, String> {
    let devices = a.devices.as_ref();
    let results = devices
        .and_then(|d| d.results.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, r)| {
            let at = format!("{field}.devices.results[{i}].consumedCapacity");
            let consumed_capacity = match &r.consumed_capacity {
                Some(c) => quantities(c, &at)?,
                None => BTreeMap::new(),
            };
            Ok(AllocatedDevice {
                request: r.request.clone(),
                driver: r.driver.clone(),
                pool: r.pool.clone(),
                device: r.device.clone(),
                admin_access: r.admin_access.unwrap_or(false),
                share_id: r.share_id.clone(),
                consumed_capacity,
                binding_conditions: r.binding_conditions.clone().unwrap_or_default(),
                binding_failure_conditions: r
                    .binding_failure_conditions
                    .clone()
                    .unwrap_or_default(),
            })
        })
        .collect::<Result<_, String>>()?;
    let node_selector = a
        .node_selector
        .as_ref()
        .map(|s| NodeSelector::compile(s, &format!("{field}.nodeSelector")))
        .transpose()
        .map_err(|e| e.to_string())?;
    Ok(Allocation {
        devices: results,
        config: devices.and_then(|d| d.config.clone()).unwrap_or_default(),
        node_selector,
    })
}

impl DeviceRequest {
    fn to_api(&self) -> api::DeviceRequest {
        match &self.kind {
            RequestKind::Exactly(e) => api::DeviceRequest {
                name: self.name.clone(),
                exactly: Some(api::ExactDeviceRequest {
                    device_class_name: e.class.clone(),
                    selectors: selectors_api(&e.selectors),
                    allocation_mode: Some(e.mode.label().to_string()),
                    count: e.mode.count(),
                    admin_access: e.admin_access.then_some(true),
                    tolerations: tolerations_api(&e.tolerations),
                    capacity: capacity_api(&e.capacity),
                    ..Default::default()
                }),
                first_available: None,
            },
            RequestKind::FirstAvailable(subs) => api::DeviceRequest {
                name: self.name.clone(),
                exactly: None,
                first_available: Some(
                    subs.iter()
                        .map(|(name, e)| api::DeviceSubRequest {
                            name: name.clone(),
                            device_class_name: e.class.clone(),
                            selectors: selectors_api(&e.selectors),
                            allocation_mode: Some(e.mode.label().to_string()),
                            count: e.mode.count(),
                            tolerations: tolerations_api(&e.tolerations),
                            capacity: capacity_api(&e.capacity),
                            ..Default::default()
                        })
                        .collect(),
                ),
            },
        }
    }
}

impl AllocationMode {
    fn label(self) -> &'static str {
        match self {
            AllocationMode::ExactCount(_) => "ExactCount",
            AllocationMode::All => "All",
        }
    }

    fn count(self) -> Option<i64> {
        match self {
            AllocationMode::ExactCount(n) => Some(n),
            AllocationMode::All => None,
        }
    }
}

fn tolerations_api(tolerations: &[DeviceToleration]) -> Option<Vec<api::DeviceToleration>> {
    (!tolerations.is_empty()).then(|| {
        tolerations
            .iter()
            .map(|t| api::DeviceToleration {
                key: t.key.clone(),
                operator: Some(t.operator.clone()),
                value: t.value.clone(),
                effect: t.effect.clone(),
                toleration_seconds: t.toleration_seconds,
            })
            .collect()
    })
}

fn capacity_api(capacity: &BTreeMap<String, Amount>) -> Option<api::CapacityRequirements> {
    (!capacity.is_empty()).then(|| api::CapacityRequirements {
        requests: Some(
            capacity
                .iter()
                .map(|(k, q)| (k.clone(), api_quantity(q)))
                .collect(),
        ),
    })
}

impl Allocation {
    fn to_api(&self) -> api::AllocationResult {
        api::AllocationResult {
            allocation_timestamp: None,
            devices: Some(api::DeviceAllocationResult {
                results: Some(
                    self.devices
                        .iter()
                        .map(|d| api::DeviceRequestAllocationResult {
                            request: d.request.clone(),
                            driver: d.driver.clone(),
                            pool: d.pool.clone(),
                            device: d.device.clone(),
                            admin_access: d.admin_access.then_some(true),
                            share_id: d.share_id.clone(),
                            consumed_capacity: (!d.consumed_capacity.is_empty()).then(|| {
                                d.consumed_capacity
                                    .iter()
                                    .map(|(k, q)| (k.clone(), api_quantity(q)))
                                    .collect()
                            }),
                            binding_conditions: (!d.binding_conditions.is_empty())
                                .then(|| d.binding_conditions.clone()),
                            binding_failure_conditions: (!d.binding_failure_conditions.is_empty())
                                .then(|| d.binding_failure_conditions.clone()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                config: (!self.config.is_empty()).then(|| self.config.clone()),
            }),
            node_selector: self.node_selector.as_ref().map(NodeSelector::to_api),
        }
    }
}

impl Consumer {
    fn to_api(&self) -> api::ResourceClaimConsumerReference {
        api::ResourceClaimConsumerReference {
            api_group: (!self.api_group.is_empty()).then(|| self.api_group.clone()),
            resource: self.resource.clone(),
            name: self.name.clone(),
            uid: self.uid.clone(),
        }
    }
}

/// One entry of a pod's `spec.resourceClaims`, with the claim it comes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodClaim {
    /// `name`: how the pod's containers refer to it.
    pub name: String,
    /// Where the claim comes from.
    pub source: PodClaimSource,
}

/// Where a pod's claim comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodClaimSource {
    /// `resourceClaimName`: a claim of the pod's namespace, perhaps shared.
    Claim(String),
    /// `resourceClaimTemplateName`: a claim the resourceclaim controller makes for the pod,
    /// named in `status.resourceClaimStatuses`; `made` is that entry (none yet: not made
    /// yet; an entry without a name: none is needed).
    Template {
        /// The template.
        template: String,
        /// The status entry.
        made: Option<Option<String>>,
    },
    /// Neither field is set.
    Unset,
}

impl PodClaim {
    /// The pod's claims, from its spec and its status.
    pub fn of_pod(
        spec: &k8s_openapi::api::core::v1::PodSpec,
        status: Option<&k8s_openapi::api::core::v1::PodStatus>,
    ) -> Box<[PodClaim]> {
        let statuses = status.and_then(|s| s.resource_claim_statuses.as_deref());
        spec.resource_claims
            .iter()
            .flatten()
            .map(|c| {
                let source = match (&c.resource_claim_name, &c.resource_claim_template_name) {
                    (Some(claim), _) => PodClaimSource::Claim(claim.clone()),
                    (None, Some(template)) => PodClaimSource::Template {
                        template: template.clone(),
                        made: statuses
                            .unwrap_or_default()
                            .iter()
                            .find(|s| s.name == c.name)
                            .map(|s| s.resource_claim_name.clone()),
                    },
                    (None, None) => PodClaimSource::Unset,
                };
                PodClaim {
                    name: c.name.clone(),
                    source,
                }
            })
            .collect()
    }

    /// The name of the claim, as kube-scheduler finds it for the pod `namespace/pod`: none
    /// when none is needed; an error, in its words, when it cannot be known yet or at all.
    pub fn claim_name(&self, namespace: &str, pod: &str) -> Result<Option<&str>, String> {
        match &self.source {
            PodClaimSource::Claim(name) => Ok(Some(name)),
            PodClaimSource::Template {
                made: Some(name), ..
            } => Ok(name.as_deref()),
            PodClaimSource::Template { made: None, .. } => Err(format!(
                "pod \"{namespace}/{pod}\": ResourceClaim not created yet"
            )),
            PodClaimSource::Unset => Err(format!(
                "pod \"{namespace}/{pod}\", spec.resourceClaim \"{}\": none of the supported fields are set",
                self.name
            )),
        }
    }

    /// Whether the claim is made for the pod from a template (and so must be owned by it).
    pub fn from_template(&self) -> bool {
        matches!(self.source, PodClaimSource::Template { .. })
    }

    /// The spec's entry, written back.
    pub fn to_api(&self) -> k8s_openapi::api::core::v1::PodResourceClaim {
        let mut c = k8s_openapi::api::core::v1::PodResourceClaim {
            name: self.name.clone(),
            ..Default::default()
        };
        match &self.source {
            PodClaimSource::Claim(name) => c.resource_claim_name = Some(name.clone()),
            PodClaimSource::Template { template, .. } => {
                c.resource_claim_template_name = Some(template.clone());
            }
            PodClaimSource::Unset => {}
        }
        c
    }

    /// The status' entry for a claim from a template, written back.
    pub fn status_api(&self) -> Option<k8s_openapi::api::core::v1::PodResourceClaimStatus> {
        match &self.source {
            PodClaimSource::Template {
                made: Some(name), ..
            } => Some(k8s_openapi::api::core::v1::PodResourceClaimStatus {
                name: self.name.clone(),
                resource_claim_name: name.clone(),
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::model::PodInfo;

    fn pod(json: serde_json::Value) -> PodInfo {
        PodInfo::from_api(&serde_json::from_value(json).expect("a pod")).expect("read")
    }

    #[test]
    fn a_pods_claims_come_to_their_names_as_kube_scheduler_finds_them() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "train-0", "namespace": "ml"},
            "spec": {"containers": [], "resourceClaims": [
                {"name": "shared", "resourceClaimName": "team-gpus"},
                {"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
                {"name": "later", "resourceClaimTemplateName": "one-gpu"},
                {"name": "unneeded", "resourceClaimTemplateName": "maybe"},
                {"name": "odd"}]},
            "status": {"resourceClaimStatuses": [
                {"name": "gpu", "resourceClaimName": "train-0-gpu-x7k2p"},
                {"name": "unneeded"}]}
        }));
        let names: Vec<_> = p
            .resource_claims
            .iter()
            .map(|c| c.claim_name("ml", "train-0"))
            .collect();
        assert_eq!(
            names,
            [
                Ok(Some("team-gpus")),
                Ok(Some("train-0-gpu-x7k2p")),
                Err("pod \"ml/train-0\": ResourceClaim not created yet".to_string()),
                Ok(None),
                Err("pod \"ml/train-0\", spec.resourceClaim \"odd\": none of the supported fields are set".to_string()),
            ]
        );
        assert!(p.resource_claims[1].from_template() && !p.resource_claims[0].from_template());
    }
}
