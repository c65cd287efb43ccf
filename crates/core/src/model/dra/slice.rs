//! ResourceSlices: the devices a driver publishes, in pools, for one node, the nodes a
//! selector picks, all nodes, or each device's own nodes.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1 as api;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{
    Amount, AttributeValue, QualifiedName, api_quantity, object_error, qualified, quantities,
    quantity,
};
use crate::model::selector::NodeSelector;

/// A ResourceSlice.
#[derive(Debug, Clone, PartialEq)]
pub struct SliceModel {
    /// `metadata.name`.
    pub name: String,
    /// `spec.driver`.
    pub driver: String,
    /// `spec.pool`.
    pub pool: Pool,
    /// Where its devices are.
    pub nodes: SliceNodes,
    /// `spec.sharedCounters`: the counters partitionable devices draw on.
    pub shared_counters: Vec<CounterSet>,
    /// `spec.devices`.
    pub devices: Vec<Device>,
}

/// The pool a slice belongs to: a driver's pool is complete when it has as many slices of
/// its newest generation as they say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    /// `name`.
    pub name: String,
    /// `generation`: slices of an older generation are outdated.
    pub generation: i64,
    /// `resourceSliceCount`: the slices of this generation that make the pool.
    pub slice_count: i64,
}

/// Which nodes a slice's devices are reachable from.
#[derive(Debug, Clone, PartialEq)]
pub enum SliceNodes {
    /// `nodeName`: one node's.
    Node(String),
    /// `nodeSelector`: the nodes it selects.
    Selector(NodeSelector),
    /// `allNodes`.
    All,
    /// `perDeviceNodeSelection`: each device says.
    PerDevice,
}

/// A named set of counters.
#[derive(Debug, Clone, PartialEq)]
pub struct CounterSet {
    /// `name`.
    pub name: String,
    /// Each counter's value.
    pub counters: BTreeMap<String, Amount>,
}

/// One device of a slice.
#[derive(Debug, Clone, PartialEq)]
pub struct Device {
    /// `name`, unique in its pool.
    pub name: String,
    /// `attributes`, by qualified name.
    pub attributes: BTreeMap<QualifiedName, AttributeValue>,
    /// `capacity`, by qualified name.
    pub capacity: BTreeMap<QualifiedName, Capacity>,
    /// `consumesCounters`: what allocating it takes from the slice's counter sets.
    pub consumes_counters: Vec<CounterSet>,
    /// For a slice with `perDeviceNodeSelection`: where this device is reachable.
    pub nodes: Option<DeviceNodes>,
    /// `taints`.
    pub taints: Vec<DeviceTaint>,
    /// `bindingConditions`: conditions the claim must reach before the pod is bound.
    pub binding_conditions: Vec<String>,
    /// `bindingFailureConditions`.
    pub binding_failure_conditions: Vec<String>,
    /// `bindsToNode`.
    pub binds_to_node: bool,
    /// `allowMultipleAllocations`: its capacity can be shared among claims.
    pub allow_multiple_allocations: bool,
}

/// Where a device of a `perDeviceNodeSelection` slice is reachable.
#[derive(Debug, Clone, PartialEq)]
pub enum DeviceNodes {
    /// `nodeName`.
    Node(String),
    /// `nodeSelector`.
    Selector(NodeSelector),
    /// `allNodes`.
    All,
}

/// A device's capacity and how requests take from it.
#[derive(Debug, Clone, PartialEq)]
pub struct Capacity {
    /// `value`.
    pub value: Amount,
    /// `requestPolicy`.
    pub policy: Option<RequestPolicy>,
}

/// How a request for consumable capacity is rounded and bounded.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestPolicy {
    /// `default`: taken when the request names no amount.
    pub default: Option<Amount>,
    /// `validValues`, in order.
    pub valid_values: Vec<Amount>,
    /// `validRange`.
    pub valid_range: Option<(Amount, Option<Amount>, Option<Amount>)>,
}

/// A device taint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceTaint {
    /// `key`.
    pub key: String,
    /// `value`.
    pub value: Option<String>,
    /// `effect`: `NoSchedule` or `NoExecute` (or one gantry does not know, which no
    /// toleration it cannot read tolerates).
    pub effect: String,
}

impl SliceModel {
    /// Reads a ResourceSlice; errors name it and the field.
    pub fn from_api(slice: &api::ResourceSlice) -> Result<Self, String> {
        let name = slice.metadata.name.clone().unwrap_or_default();
        let fail = |reason: String| object_error("resourceslice", None, &name, &reason);
        let spec = &slice.spec;
        let nodes = slice_nodes(spec).map_err(fail)?;
        let shared_counters = spec
            .shared_counters
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, c)| counter_set(&c.name, &c.counters, &format!("spec.sharedCounters[{i}]")))
            .collect::<Result<_, _>>()
            .map_err(fail)?;
        let per_device = nodes == SliceNodes::PerDevice;
        let devices = spec
            .devices
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, d)| device(&spec.driver, d, per_device, &format!("spec.devices[{i}]")))
            .collect::<Result<_, _>>()
            .map_err(fail)?;
        Ok(SliceModel {
            name: name.clone(),
            driver: spec.driver.clone(),
            pool: Pool {
                name: spec.pool.name.clone(),
                generation: spec.pool.generation,
                slice_count: spec.pool.resource_slice_count,
            },
            nodes,
            shared_counters,
            devices,
        })
    }

    /// The slice as the API holds it, with what the scheduler reads.
    pub fn to_api(&self) -> api::ResourceSlice {
        let mut spec = api::ResourceSliceSpec {
            driver: self.driver.clone(),
            pool: api::ResourcePool {
                name: self.pool.name.clone(),
                generation: self.pool.generation,
                resource_slice_count: self.pool.slice_count,
            },
            shared_counters: (!self.shared_counters.is_empty()).then(|| {
                self.shared_counters
                    .iter()
                    .map(CounterSet::to_api)
                    .collect()
            }),
            devices: Some(
                self.devices
                    .iter()
                    .map(|d| d.to_api(&self.driver))
                    .collect(),
            ),
            ..Default::default()
        };
        match &self.nodes {
            SliceNodes::Node(n) => spec.node_name = Some(n.clone()),
            SliceNodes::Selector(s) => spec.node_selector = Some(s.to_api()),
            SliceNodes::All => spec.all_nodes = Some(true),
            SliceNodes::PerDevice => spec.per_device_node_selection = Some(true),
        }
        api::ResourceSlice {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                ..Default::default()
            },
            spec,
        }
    }
}

/// Where a slice's devices are: exactly one of its four fields.
fn slice_nodes(spec: &api::ResourceSliceSpec) -> Result<SliceNodes, String> {
    let mut set = Vec::new();
    if let Some(n) = &spec.node_name {
        set.push(SliceNodes::Node(n.clone()));
    }
    if let Some(s) = &spec.node_selector {
        let s = NodeSelector::compile(s, "spec.nodeSelector").map_err(|e| e.to_string())?;
        set.push(SliceNodes::Selector(s));
    }
    if spec.all_nodes == Some(true) {
        set.push(SliceNodes::All);
    }
    if spec.per_device_node_selection == Some(true) {
        set.push(SliceNodes::PerDevice);
    }
    match set.len() {
        1 => Ok(set.remove(0)),
        0 => Err(
            "spec: one of nodeName, nodeSelector, allNodes or perDeviceNodeSelection is required"
                .to_string(),
        ),
        _ => Err(
            "spec: only one of nodeName, nodeSelector, allNodes or perDeviceNodeSelection may be set"
                .to_string(),
        ),
    }
}

/// Where a device of a per-device slice is: exactly one of its three fields; none for a
/// device of any other slice.
fn device_nodes(
    d: &api::Device,
    per_device: bool,
    field: &str,
) -> Result<Option<DeviceNodes>, String> {
    let mut set = Vec::new();
    if let Some(n) = &d.node_name {
        set.push(DeviceNodes::Node(n.clone()));
    }
    if let Some(s) = &d.node_selector {
        let s = NodeSelector::compile(s, &format!("{field}.nodeSelector"))
            .map_err(|e| e.to_string())?;
        set.push(DeviceNodes::Selector(s));
    }
    if d.all_nodes == Some(true) {
        set.push(DeviceNodes::All);
    }
    match (per_device, set.len()) {
        (false, 0) => Ok(None),
        (false, _) => Err(format!(
            "{field}: nodeName, nodeSelector and allNodes are for perDeviceNodeSelection slices"
        )),
        (true, 1) => Ok(Some(set.remove(0))),
        (true, _) => Err(format!(
            "{field}: exactly one of nodeName, nodeSelector or allNodes is required"
        )),
    }
}

fn counter_set(
    name: &str,
    counters: &BTreeMap<String, api::Counter>,
    field: &str,
) -> Result<CounterSet, String> {
    let values = counters
        .iter()
        .map(|(k, c)| (k.clone(), c.value.clone()))
        .collect();
    Ok(CounterSet {
        name: name.to_string(),
        counters: quantities(&values, &format!("{field}.counters"))?,
    })
}

impl CounterSet {
    fn to_api(&self) -> api::CounterSet {
        api::CounterSet {
            name: self.name.clone(),
            counters: self.api_counters(),
        }
    }

    fn api_counters(&self) -> BTreeMap<String, api::Counter> {
        self.counters
            .iter()
            .map(|(k, v)| {
                let counter = api::Counter {
                    value: api_quantity(v),
                };
                (k.clone(), counter)
            })
            .collect()
    }
}

fn device(driver: &str, d: &api::Device, per_device: bool, field: &str) -> Result<Device, String> {
    let attributes = d
        .attributes
        .iter()
        .flatten()
        .map(|(k, a)| {
            let value = AttributeValue::from_api(a, &format!("{field}.attributes[{k}]"))?;
            Ok((qualified(driver, k), value))
        })
        .collect::<Result<_, String>>()?;
    let capacity = d
        .capacity
        .iter()
        .flatten()
        .map(|(k, c)| {
            let at = format!("{field}.capacity[{k}]");
            Ok((qualified(driver, k), capacity(c, &at)?))
        })
        .collect::<Result<_, String>>()?;
    let consumes_counters = d
        .consumes_counters
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| {
            counter_set(
                &c.counter_set,
                &c.counters,
                &format!("{field}.consumesCounters[{i}]"),
            )
        })
        .collect::<Result<_, _>>()?;
    let taints = d
        .taints
        .iter()
        .flatten()
        .map(|t| DeviceTaint {
            key: t.key.clone(),
            value: t.value.clone(),
            effect: t.effect.clone(),
        })
        .collect();
    Ok(Device {
        name: d.name.clone(),
        attributes,
        capacity,
        consumes_counters,
        nodes: device_nodes(d, per_device, field)?,
        taints,
        binding_conditions: d.binding_conditions.clone().unwrap_or_default(),
        binding_failure_conditions: d.binding_failure_conditions.clone().unwrap_or_default(),
        binds_to_node: d.binds_to_node.unwrap_or(false),
        allow_multiple_allocations: d.allow_multiple_allocations.unwrap_or(false),
    })
}

fn capacity(c: &api::DeviceCapacity, field: &str) -> Result<Capacity, String> {
    let policy = c
        .request_policy
        .as_ref()
        .map(|p| -> Result<RequestPolicy, String> {
            let at = |name: &str| format!("{field}.requestPolicy.{name}");
            let default = p
                .default
                .as_ref()
                .map(|q| quantity(q, &at("default")))
                .transpose()?;
            let valid_values = p
                .valid_values
                .iter()
                .flatten()
                .enumerate()
                .map(|(i, q)| quantity(q, &at(&format!("validValues[{i}]"))))
                .collect::<Result<_, _>>()?;
            let valid_range = p
                .valid_range
                .as_ref()
                .map(|r| -> Result<_, String> {
                    let min = quantity(&r.min, &at("validRange.min"))?;
                    let max = r
                        .max
                        .as_ref()
                        .map(|q| quantity(q, &at("validRange.max")))
                        .transpose()?;
                    let step = r
                        .step
                        .as_ref()
                        .map(|q| quantity(q, &at("validRange.step")))
                        .transpose()?;
                    Ok((min, max, step))
                })
                .transpose()?;
            Ok(RequestPolicy {
                default,
                valid_values,
                valid_range,
            })
        })
        .transpose()?;
    Ok(Capacity {
        value: quantity(&c.value, &format!("{field}.value"))?,
        policy,
    })
}

/// The name a slice's map holds for `name`: without the domain when it is the driver's.
fn unqualified<'a>(driver: &str, name: &'a str) -> &'a str {
    name.strip_prefix(driver)
        .and_then(|rest| rest.strip_prefix('/'))
        .unwrap_or(name)
}

impl Device {
    fn to_api(&self, driver: &str) -> api::Device {
        let attributes: BTreeMap<String, api::DeviceAttribute> = self
            .attributes
            .iter()
            .map(|(k, v)| (unqualified(driver, k).to_string(), v.to_api()))
            .collect();
        let capacity: BTreeMap<String, api::DeviceCapacity> = self
            .capacity
            .iter()
            .map(|(k, c)| (unqualified(driver, k).to_string(), c.to_api()))
            .collect();
        let mut d = api::Device {
            name: self.name.clone(),
            attributes: (!attributes.is_empty()).then_some(attributes),
            capacity: (!capacity.is_empty()).then_some(capacity),
            consumes_counters: (!self.consumes_counters.is_empty()).then(|| {
                self.consumes_counters
                    .iter()
                    .map(|c| api::DeviceCounterConsumption {
                        counter_set: c.name.clone(),
                        counters: c.api_counters(),
                        ..Default::default()
                    })
                    .collect()
            }),
            taints: (!self.taints.is_empty()).then(|| {
                self.taints
                    .iter()
                    .map(|t| api::DeviceTaint {
                        key: t.key.clone(),
                        value: t.value.clone(),
                        effect: t.effect.clone(),
                        time_added: None,
                    })
                    .collect()
            }),
            binding_conditions: non_empty(&self.binding_conditions),
            binding_failure_conditions: non_empty(&self.binding_failure_conditions),
            binds_to_node: self.binds_to_node.then_some(true),
            allow_multiple_allocations: self.allow_multiple_allocations.then_some(true),
            ..Default::default()
        };
        match &self.nodes {
            None => {}
            Some(DeviceNodes::Node(n)) => d.node_name = Some(n.clone()),
            Some(DeviceNodes::Selector(s)) => d.node_selector = Some(s.to_api()),
            Some(DeviceNodes::All) => d.all_nodes = Some(true),
        }
        d
    }
}

impl Capacity {
    fn to_api(&self) -> api::DeviceCapacity {
        api::DeviceCapacity {
            value: api_quantity(&self.value),
            request_policy: self.policy.as_ref().map(|p| api::CapacityRequestPolicy {
                default: p.default.as_ref().map(api_quantity),
                valid_values: (!p.valid_values.is_empty())
                    .then(|| p.valid_values.iter().map(api_quantity).collect()),
                valid_range: p.valid_range.as_ref().map(|(min, max, step)| {
                    api::CapacityRequestPolicyRange {
                        min: api_quantity(min),
                        max: max.as_ref().map(api_quantity),
                        step: step.as_ref().map(api_quantity),
                    }
                }),
            }),
        }
    }
}

fn non_empty(v: &[String]) -> Option<Vec<String>> {
    (!v.is_empty()).then(|| v.to_vec())
}
