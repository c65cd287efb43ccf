//! kube-scheduler's extender protocol (`k8s.io/kube-scheduler/extender/v1`): one JSON POST
//! per call to `<urlPrefix>/<verb>`, answered with JSON. Its Go types carry no JSON tags, so
//! keys are the Go field names (`Pod`, `NodeNames`, `FailedNodes`, ...); Go reads them
//! without regard to case, and so do the decoders here.

use std::collections::BTreeMap;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::model::NodeModel;
use crate::model::echo::at_path;
use crate::model::resources::Resources;

/// The body of a filter or prioritize call (`ExtenderArgs`).
#[derive(Debug, Clone, Serialize)]
pub struct ExtenderArgs {
    /// The pod being scheduled, as the API server has it.
    #[serde(rename = "Pod")]
    pub pod: Value,
    /// The candidate nodes, as Node objects: for an extender that is not node-cache
    /// capable (`null` otherwise).
    #[serde(rename = "Nodes")]
    pub nodes: Option<NodeList>,
    /// The candidate nodes' names: for a node-cache-capable extender (`null` otherwise).
    #[serde(rename = "NodeNames")]
    pub node_names: Option<Vec<String>>,
}

/// A `NodeList` of [`node_object`]s.
#[derive(Debug, Clone, Serialize)]
pub struct NodeList {
    /// The nodes.
    pub items: Vec<Value>,
}

/// The body of a bind call (`ExtenderBindingArgs`).
#[derive(Debug, Clone, Serialize)]
pub struct BindingArgs {
    /// The pod's name.
    #[serde(rename = "PodName")]
    pub pod_name: String,
    /// The pod's namespace.
    #[serde(rename = "PodNamespace")]
    pub pod_namespace: String,
    /// The pod's uid.
    #[serde(rename = "PodUID")]
    pub pod_uid: String,
    /// The node chosen.
    #[serde(rename = "Node")]
    pub node: String,
}

/// The body of a preempt call (`ExtenderPreemptionArgs`): the candidates, by node, with
/// full pods for an extender that is not node-cache capable, with uids only otherwise.
#[derive(Debug, Clone, Serialize)]
pub struct PreemptionArgs {
    /// The preemptor.
    #[serde(rename = "Pod")]
    pub pod: Value,
    /// Victims as Pod objects (`null` for a node-cache-capable extender).
    #[serde(rename = "NodeNameToVictims")]
    pub node_name_to_victims: Option<BTreeMap<String, Victims>>,
    /// Victims by uid (`null` for an extender that is not node-cache capable).
    #[serde(rename = "NodeNameToMetaVictims")]
    pub node_name_to_meta_victims: Option<BTreeMap<String, MetaVictims>>,
}

/// `Victims`: the pods to evict on a node, as objects.
#[derive(Debug, Clone, Serialize)]
pub struct Victims {
    /// The pods.
    #[serde(rename = "Pods")]
    pub pods: Vec<Value>,
    /// PodDisruptionBudgets their eviction violates.
    #[serde(rename = "NumPDBViolations")]
    pub num_pdb_violations: i64,
}

/// `MetaVictims`: the pods to evict on a node, by uid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MetaVictims {
    /// The pods' uids.
    #[serde(rename = "Pods")]
    pub pods: Vec<MetaPod>,
    /// PodDisruptionBudgets their eviction violates.
    #[serde(rename = "NumPDBViolations")]
    pub num_pdb_violations: i64,
}

/// `MetaPod`: a pod by uid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MetaPod {
    /// The uid.
    #[serde(rename = "UID")]
    pub uid: String,
}

/// A filter call's answer (`ExtenderFilterResult`), reduced to node names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FilterResult {
    /// The names of the nodes returned as Node objects (`Nodes`), if any were.
    pub nodes: Option<Vec<String>>,
    /// The node names returned (`NodeNames`), if any were.
    pub node_names: Option<Vec<String>>,
    /// Nodes rejected, with why (`FailedNodes`).
    pub failed_nodes: BTreeMap<String, String>,
    /// Nodes rejected where preemption cannot help, with why; these take precedence over
    /// `failed_nodes` (`FailedAndUnresolvableNodes`).
    pub failed_and_unresolvable_nodes: BTreeMap<String, String>,
    /// The extender's error, if it reported one (`Error`).
    pub error: String,
}

/// One entry of a prioritize call's answer (`HostPriority`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPriority {
    /// The node.
    pub host: String,
    /// Its score, in `0..=10` by the protocol (not enforced, as kube-scheduler does not).
    pub score: i64,
}

/// A body that is not the JSON the protocol expects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("undecodable answer: {0}")]
pub struct DecodeError(pub String);

fn parse(body: &[u8]) -> Result<Value, DecodeError> {
    serde_json::from_slice(body).map_err(|e| DecodeError(e.to_string()))
}

/// The value of `key` in `object`, matched as Go's decoder matches struct fields: the exact
/// key first, else one equal but for case.
fn field<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    object
        .get(key)
        .or_else(|| {
            object
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| v)
        })
        .filter(|v| !v.is_null())
}

fn object<'a>(value: &'a Value, what: &str) -> Result<&'a Map<String, Value>, DecodeError> {
    value
        .as_object()
        .ok_or_else(|| DecodeError(format!("{what}: expected an object")))
}

fn string(value: &Value, what: &str) -> Result<String, DecodeError> {
    value
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| DecodeError(format!("{what}: expected a string")))
}

fn integer(value: &Value, what: &str) -> Result<i64, DecodeError> {
    value
        .as_i64()
        .ok_or_else(|| DecodeError(format!("{what}: expected an integer")))
}

fn array<'a>(value: &'a Value, what: &str) -> Result<&'a Vec<Value>, DecodeError> {
    value
        .as_array()
        .ok_or_else(|| DecodeError(format!("{what}: expected a list")))
}

/// Decodes a filter call's answer, streaming: of the Node objects in `Nodes` only the names
/// are kept, everything else (and every field gantry does not read) is skipped unread, so
/// that an answer costs about its own size to read, not several times it.
pub fn decode_filter_result(body: &[u8]) -> Result<FilterResult, DecodeError> {
    decode_streaming(body, FilterVisitor)
}

/// Decodes a prioritize call's answer (`HostPriorityList`; `null` is empty), streaming.
pub fn decode_host_priorities(body: &[u8]) -> Result<Vec<HostPriority>, DecodeError> {
    let list: Option<Vec<GoStruct<HostPriority>>> = decode_streaming(body, OptionalList)?;
    Ok(list.unwrap_or_default().into_iter().map(|h| h.0).collect())
}

/// `body` read with `seed`, the field at fault named by its path.
fn decode_streaming<'de, S: DeserializeSeed<'de>>(
    body: &'de [u8],
    seed: S,
) -> Result<S::Value, DecodeError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let mut track = serde_path_to_error::Track::new();
    let value = seed
        .deserialize(serde_path_to_error::Deserializer::new(&mut de, &mut track))
        .map_err(|e| DecodeError(at_path(&track.path().to_string(), &e.to_string())))?;
    de.end().map_err(|e| DecodeError(e.to_string()))?;
    Ok(value)
}

/// Which of `fields` `key` names, matched as Go's decoder matches a struct's fields:
/// regardless of case.
fn field_index(key: &str, fields: &[&str]) -> Option<usize> {
    fields.iter().position(|f| f.eq_ignore_ascii_case(key))
}

/// A map key, read as the index of the field it names among `fields` (none for another).
struct Key(&'static [&'static str]);

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for Key {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<Self::Value, E> {
        Ok(field_index(key, self.0))
    }
}

/// The fields of `ExtenderFilterResult`, in Go's spelling.
const FILTER_FIELDS: &[&str] = &[
    "Nodes",
    "NodeNames",
    "FailedNodes",
    "FailedAndUnresolvableNodes",
    "Error",
];

/// Reads an `ExtenderFilterResult` (a later key naming the same field wins, as in Go).
struct FilterVisitor;

impl<'de> DeserializeSeed<'de> for FilterVisitor {
    type Value = FilterResult;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<FilterResult, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for FilterVisitor {
    type Value = FilterResult;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an ExtenderFilterResult object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FilterResult, A::Error> {
        let mut r = FilterResult::default();
        while let Some(field) = map.next_key_seed(Key(FILTER_FIELDS))? {
            match field {
                Some(0) => {
                    r.nodes = map
                        .next_value::<Option<NamedNodeList>>()?
                        .map(|list| list.names())
                }
                Some(1) => r.node_names = map.next_value()?,
                Some(2) => r.failed_nodes = map.next_value::<Option<_>>()?.unwrap_or_default(),
                Some(3) => {
                    r.failed_and_unresolvable_nodes =
                        map.next_value::<Option<_>>()?.unwrap_or_default()
                }
                Some(_) => r.error = map.next_value::<Option<String>>()?.unwrap_or_default(),
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(r)
    }
}

/// A `NodeList` of which only the items' names are read.
#[derive(Deserialize)]
struct NamedNodeList {
    #[serde(default)]
    items: Option<Vec<NamedNode>>,
}

#[derive(Deserialize)]
struct NamedNode {
    metadata: NodeName,
}

#[derive(Deserialize)]
struct NodeName {
    name: String,
}

impl NamedNodeList {
    fn names(self) -> Vec<String> {
        self.items
            .into_iter()
            .flatten()
            .map(|n| n.metadata.name)
            .collect()
    }
}

/// A list, or `null` for none.
struct OptionalList;

impl<'de> DeserializeSeed<'de> for OptionalList {
    type Value = Option<Vec<GoStruct<HostPriority>>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        Option::<Vec<GoStruct<HostPriority>>>::deserialize(deserializer)
    }
}

/// A Go struct read with Go's rules for its keys (see [`field_index`]).
struct GoStruct<T>(T);

/// The fields of `HostPriority`, in Go's spelling.
const HOST_PRIORITY_FIELDS: &[&str] = &["Host", "Score"];

impl<'de> Deserialize<'de> for GoStruct<HostPriority> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = GoStruct<HostPriority>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a HostPriority object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut h = HostPriority {
                    host: String::new(),
                    score: 0,
                };
                while let Some(field) = map.next_key_seed(Key(HOST_PRIORITY_FIELDS))? {
                    match field {
                        Some(0) => h.host = map.next_value::<Option<String>>()?.unwrap_or_default(),
                        Some(_) => h.score = map.next_value::<Option<i64>>()?.unwrap_or_default(),
                        None => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(GoStruct(h))
            }
        }
        deserializer.deserialize_map(V)
    }
}

/// Decodes a bind call's answer (`ExtenderBindingResult`) into its error, empty when the
/// binding succeeded.
pub fn decode_binding_result(body: &[u8]) -> Result<String, DecodeError> {
    let value = parse(body)?;
    let top = object(&value, "ExtenderBindingResult")?;
    Ok(field(top, "Error")
        .map(|e| string(e, "Error"))
        .transpose()?
        .unwrap_or_default())
}

/// Decodes a preempt call's answer (`ExtenderPreemptionResult`): the candidates the
/// extender keeps, by node, with their victims by uid.
pub fn decode_preemption_result(body: &[u8]) -> Result<BTreeMap<String, MetaVictims>, DecodeError> {
    let value = parse(body)?;
    let top = object(&value, "ExtenderPreemptionResult")?;
    let Some(map) = field(top, "NodeNameToMetaVictims") else {
        return Ok(BTreeMap::new());
    };
    object(map, "NodeNameToMetaVictims")?
        .iter()
        .map(|(node, victims)| {
            let what = format!("NodeNameToMetaVictims[{node}]");
            if victims.is_null() {
                return Ok((
                    node.clone(),
                    MetaVictims {
                        pods: Vec::new(),
                        num_pdb_violations: 0,
                    },
                ));
            }
            let victims = object(victims, &what)?;
            let pods = field(victims, "Pods")
                .map(|pods| array(pods, &format!("{what}.Pods")))
                .transpose()?
                .into_iter()
                .flatten()
                .enumerate()
                .map(|(i, pod)| {
                    let what = format!("{what}.Pods[{i}]");
                    let pod = object(pod, &what)?;
                    Ok(MetaPod {
                        uid: field(pod, "UID")
                            .map(|u| string(u, &format!("{what}.UID")))
                            .transpose()?
                            .unwrap_or_default(),
                    })
                })
                .collect::<Result<Vec<_>, DecodeError>>()?;
            let num_pdb_violations = field(victims, "NumPDBViolations")
                .map(|n| integer(n, &format!("{what}.NumPDBViolations")))
                .transpose()?
                .unwrap_or_default();
            Ok((
                node.clone(),
                MetaVictims {
                    pods,
                    num_pdb_violations,
                },
            ))
        })
        .collect()
}

/// A Node object for an extender that is not node-cache capable, built from what gantry
/// keeps of a node (it keeps no full Node objects): its name, labels, the annotations kept,
/// taints, `unschedulable`, and allocatable resources, which are also given as capacity
/// (gantry does not keep a node's capacity apart).
pub fn node_object(node: &NodeModel) -> Value {
    let labels: Map<String, Value> = node
        .labels
        .iter()
        .map(|(k, v)| (k.to_string(), Value::from(v)))
        .collect();
    let annotations: Map<String, Value> = node
        .annotations
        .iter()
        .map(|(k, v)| (k.to_string(), Value::from(v)))
        .collect();
    let taints: Vec<Value> = node
        .taints
        .iter()
        .map(|t| {
            let mut taint = Map::new();
            taint.insert("key".into(), Value::from(t.key.as_str()));
            if !t.value.is_empty() {
                taint.insert("value".into(), Value::from(t.value.as_str()));
            }
            taint.insert("effect".into(), Value::from(t.effect.as_str()));
            Value::Object(taint)
        })
        .collect();
    let resources = resource_list(&node.allocatable);
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": &*node.name, "labels": labels, "annotations": annotations},
        "spec": {"taints": taints, "unschedulable": node.unschedulable},
        "status": {"capacity": resources.clone(), "allocatable": resources},
    })
}

/// `resources` as a `ResourceList`: cpu in millicores, the others in their base units.
fn resource_list(resources: &Resources) -> Value {
    let mut list = Map::new();
    list.insert(
        "cpu".into(),
        Value::from(format!("{}m", resources.milli_cpu)),
    );
    list.insert("memory".into(), Value::from(resources.memory.to_string()));
    if resources.ephemeral_storage != 0 {
        list.insert(
            "ephemeral-storage".into(),
            Value::from(resources.ephemeral_storage.to_string()),
        );
    }
    list.insert(
        "pods".into(),
        Value::from(resources.allowed_pods.to_string()),
    );
    for (name, amount) in &resources.scalar {
        list.insert(name.to_string(), Value::from(amount.to_string()));
    }
    Value::Object(list)
}
