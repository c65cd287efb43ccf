//! Reading a cluster from Kubernetes YAML: several documents, or `List`s such as
//! `kubectl get nodes,pods -A -o yaml` prints.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::core::v1 as core;
use serde::Deserialize;
use serde::de::DeserializeOwned;

/// Input that cannot be read; names the document and, where it can, the field.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A document is not valid YAML, or an object does not match its kind's schema.
    #[error("{source_name}: document {document}: {reason}")]
    Invalid {
        /// File name (or `<embedded>`).
        source_name: String,
        /// 1-based document number in the file.
        document: usize,
        /// What is wrong, with the field path.
        reason: String,
    },
}

/// The objects a simulation reads.
#[derive(Debug, Clone, Default)]
pub struct ClusterInput {
    /// Nodes.
    pub nodes: Vec<core::Node>,
    /// Pods: with `spec.nodeName` they are running, without it they are pending, in order.
    pub pods: Vec<core::Pod>,
    /// Namespaces (for their labels).
    pub namespaces: Vec<core::Namespace>,
    /// Services (for default topology spreading).
    pub services: Vec<core::Service>,
    /// ReplicaSets (for default topology spreading).
    pub replica_sets: Vec<apps::ReplicaSet>,
    /// StatefulSets (for default topology spreading).
    pub stateful_sets: Vec<apps::StatefulSet>,
    /// ReplicationControllers (for default topology spreading).
    pub replication_controllers: Vec<core::ReplicationController>,
    /// Objects of other kinds, counted by kind; the scheduler does not read them.
    pub ignored: BTreeMap<String, usize>,
}

impl ClusterInput {
    /// Reads a file.
    pub fn from_file(path: &std::path::Path) -> Result<Self, InputError> {
        let text = std::fs::read_to_string(path).map_err(|source| InputError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let mut input = ClusterInput::default();
        input.add_yaml(&text, &path.display().to_string())?;
        Ok(input)
    }

    /// Adds the objects of a YAML text (one or more documents) named `source_name`.
    pub fn add_yaml(&mut self, text: &str, source_name: &str) -> Result<(), InputError> {
        for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
            let document = i + 1;
            let invalid = |reason: String| InputError::Invalid {
                source_name: source_name.to_string(),
                document,
                reason,
            };
            let value = serde_yaml::Value::deserialize(doc).map_err(|e| invalid(e.to_string()))?;
            if value.is_null() {
                continue;
            }
            let value: serde_json::Value =
                serde_json::to_value(value).map_err(|e| invalid(e.to_string()))?;
            self.add_object(value, "").map_err(invalid)?;
        }
        Ok(())
    }

    fn add_object(&mut self, value: serde_json::Value, path: &str) -> Result<(), String> {
        let kind = value
            .get("kind")
            .and_then(|k| k.as_str())
            .ok_or_else(|| format!("{path}kind: missing"))?
            .to_string();
        let name = value
            .pointer("/metadata/name")
            .and_then(|n| n.as_str())
            .unwrap_or("")
            .to_string();
        let what = format!("{path}{kind} {name:?}");
        match kind.as_str() {
            "Node" => self.nodes.push(decode(value, &what)?),
            "Pod" => self.pods.push(decode(value, &what)?),
            "Namespace" => self.namespaces.push(decode(value, &what)?),
            "Service" => self.services.push(decode(value, &what)?),
            "ReplicaSet" => self.replica_sets.push(decode(value, &what)?),
            "StatefulSet" => self.stateful_sets.push(decode(value, &what)?),
            "ReplicationController" => self.replication_controllers.push(decode(value, &what)?),
            k if k == "List" || k.ends_with("List") => {
                let items = value
                    .get("items")
                    .and_then(|i| i.as_array())
                    .cloned()
                    .unwrap_or_default();
                for (i, item) in items.into_iter().enumerate() {
                    self.add_object(item, &format!("{path}items[{i}]: "))?;
                }
            }
            _ => *self.ignored.entry(kind).or_default() += 1,
        }
        Ok(())
    }
}

/// Decodes an object of a known kind, naming the field that does not fit its schema.
fn decode<T: DeserializeOwned>(value: serde_json::Value, what: &str) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        format!("{what}: {path}: {}", e.into_inner())
    })
}
