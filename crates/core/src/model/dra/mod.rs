//! Dynamic Resource Allocation (`resource.k8s.io/v1`), as the scheduler reads it: the
//! devices drivers publish ([`slice`]), the classes that select among them ([`class`]),
//! and the claims pods make on them ([`claim`]). Selectors stay CEL source here; the plugin
//! that allocates compiles them. Attribute and capacity names are qualified with their
//! domain as Kubernetes' allocator qualifies them: a name without a domain is the driver's.

pub mod cel;
pub mod claim;
pub mod class;
pub mod slice;

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1 as api;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

use super::echo::{echo, echo_name};
use super::quantity::Quantity;

/// The API group of DRA's kinds.
pub const API_GROUP: &str = "resource.k8s.io";

/// A device attribute's name with its domain: `gpu.nvidia.com/model`.
pub type QualifiedName = String;

/// `name` qualified with `driver` when it has no domain of its own.
pub fn qualified(driver: &str, name: &str) -> QualifiedName {
    if name.contains('/') {
        name.to_string()
    } else {
        format!("{driver}/{name}")
    }
}

/// The value of a device attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttributeValue {
    /// `int`.
    Int(i64),
    /// `bool`.
    Bool(bool),
    /// `string`.
    String(String),
    /// `version`: a semantic version, as written.
    Version(String),
}

impl AttributeValue {
    /// Reads an attribute, which holds exactly one of its value fields; `field` names it.
    fn from_api(a: &api::DeviceAttribute, field: &str) -> Result<Self, String> {
        let values = [
            a.int.map(AttributeValue::Int),
            a.bool.map(AttributeValue::Bool),
            a.string.clone().map(AttributeValue::String),
            a.version.clone().map(AttributeValue::Version),
        ];
        let mut set = values.into_iter().flatten();
        match (set.next(), set.next()) {
            (Some(value), None) => Ok(value),
            (None, _) => Err(format!(
                "{field}: one of int, bool, string or version is required"
            )),
            (Some(_), Some(_)) => Err(format!(
                "{field}: only one of int, bool, string or version may be set"
            )),
        }
    }

    /// The API's attribute.
    fn to_api(&self) -> api::DeviceAttribute {
        let mut a = api::DeviceAttribute::default();
        match self {
            AttributeValue::Int(v) => a.int = Some(*v),
            AttributeValue::Bool(v) => a.bool = Some(*v),
            AttributeValue::String(v) => a.string = Some(v.clone()),
            AttributeValue::Version(v) => a.version = Some(v.clone()),
        }
        a
    }
}

/// An amount of a device's capacity or counter, in thousandths of its unit, as
/// Kubernetes compares quantities (saturating beyond the i64 range, which no device
/// reaches).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Amount(pub i64);

impl Amount {
    /// The amount in whole units, rounded up.
    pub fn units(self) -> i64 {
        self.0.div_euclid(1000) + i64::from(self.0.rem_euclid(1000) != 0)
    }
}

/// A quantity of a DRA object; `field` names it in the error.
fn quantity(q: &ApiQuantity, field: &str) -> Result<Amount, String> {
    Quantity::parse(&q.0)
        .map(|q| Amount(q.milli_value()))
        .map_err(|e| format!("{field}: {}: {}", echo(&q.0), e.reason))
}

/// An amount written back: in whole units when it has no fraction of one.
fn api_quantity(a: &Amount) -> ApiQuantity {
    if a.0 % 1000 == 0 {
        ApiQuantity((a.0 / 1000).to_string())
    } else {
        ApiQuantity(format!("{}m", a.0))
    }
}

/// A map of quantities (counters, requests), read with their field's path.
fn quantities(
    map: &BTreeMap<String, ApiQuantity>,
    field: &str,
) -> Result<BTreeMap<String, Amount>, String> {
    map.iter()
        .map(|(k, v)| Ok((k.clone(), quantity(v, &format!("{field}[{k}]"))?)))
        .collect()
}

/// The CEL expressions of `selectors` (a class's or a request's, at `field`); each must be
/// one.
fn selectors(selectors: &[api::DeviceSelector], field: &str) -> Result<Vec<String>, String> {
    selectors
        .iter()
        .enumerate()
        .map(|(i, s)| {
            s.cel
                .as_ref()
                .map(|c| c.expression.clone())
                .ok_or_else(|| format!("{field}[{i}]: cel is required"))
        })
        .collect()
}

/// Selectors written back; `None` when there are none.
fn selectors_api(expressions: &[String]) -> Option<Vec<api::DeviceSelector>> {
    (!expressions.is_empty()).then(|| {
        expressions
            .iter()
            .map(|e| api::DeviceSelector {
                cel: Some(api::CELDeviceSelector {
                    expression: e.clone(),
                }),
            })
            .collect()
    })
}

/// `kind name: reason`, naming an object of DRA in an error.
fn object_error(kind: &str, namespace: Option<&str>, name: &str, reason: &str) -> String {
    match namespace {
        Some(ns) => format!("{kind} {}/{}: {reason}", echo_name(ns), echo_name(name)),
        None => format!("{kind} {}: {reason}", echo_name(name)),
    }
}
