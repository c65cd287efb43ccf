//! The scenario files of `tests/scenarios/` (a cluster and pods in, placements and diagnoses
//! out), read the same way by the scenario suite (`tests/scenarios.rs`, against the
//! simulator) and by the parity check (`tests/kube_scheduler_parity.rs`, against the real
//! kube-scheduler): one schema for both.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_yaml::Value;

/// One scenario file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Scenario {
    /// What it shows.
    pub description: String,
    /// A KubeSchedulerConfiguration; kube-scheduler's defaults without one. Kept as YAML, in
    /// the file's order, so that errors name the lines the file has.
    #[serde(default)]
    pub config: Option<Value>,
    /// The error the configuration must be refused with, if it must.
    #[serde(default)]
    pub config_error: Option<String>,
    /// The cluster's objects: nodes, pods (bound and pending), namespaces, workloads.
    #[serde(default)]
    pub cluster: Vec<Value>,
    /// Per pod (`name` in the default namespace, or `namespace/name`): where it must go.
    #[serde(default)]
    pub expect: BTreeMap<String, Expect>,
    /// Whether and how the parity check runs it against kube-scheduler.
    #[serde(default)]
    pub kube_scheduler: Option<KubeSchedulerParity>,
}

/// Where a pod must go.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Expect {
    /// On this node.
    Node(String),
    /// On one of some nodes, or pending with a message.
    Detailed(Detailed),
    /// Evicted by a preemption.
    Evicted(Evicted),
}

/// A pod a preemption evicted: `namespace/preemptor on node`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Evicted {
    /// The preemptor and the node, as the simulator reports them.
    pub evicted: String,
}

/// One of some nodes, or pending with a message: exactly one of the two.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Detailed {
    /// The nodes any of which will do.
    #[serde(default)]
    pub one_of: Option<Vec<String>>,
    /// The message the pod must be pending with.
    #[serde(default)]
    pub pending: Option<String>,
    /// With `oneOf`: the HAMi devices the pod must be given, `<UUID> <memory MiB> <cores %>`
    /// each, in order (gantry's alone: kube-scheduler gives none).
    #[serde(default)]
    pub devices: Option<Vec<String>>,
}

/// A scenario's `kubeScheduler` field: whether the parity check runs it, and compares the
/// messages, and if not, why.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubeSchedulerParity {
    /// Run against kube-scheduler.
    #[serde(default = "yes")]
    pub parity: bool,
    /// Compare the pending pods' messages too.
    #[serde(default = "yes")]
    pub messages: bool,
    /// Why not (required when either is false).
    #[serde(default)]
    pub why: Option<String>,
}

impl Default for KubeSchedulerParity {
    fn default() -> Self {
        KubeSchedulerParity {
            parity: true,
            messages: true,
            why: None,
        }
    }
}

fn yes() -> bool {
    true
}

impl Scenario {
    /// The configuration as JSON.
    pub fn config_json(&self) -> Option<serde_json::Value> {
        self.config.as_ref().map(to_json)
    }

    /// The cluster's objects as JSON.
    pub fn cluster_json(&self) -> Vec<serde_json::Value> {
        self.cluster.iter().map(to_json).collect()
    }
}

/// A YAML value as JSON (scenario files hold nothing JSON cannot: the conversion is total).
fn to_json(v: &Value) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or(serde_json::Value::Null)
}

/// Reads a scenario file.
pub fn read(path: &Path) -> Result<Scenario, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_yaml::from_str(&text).map_err(|e| format!("malformed scenario: {e}"))
}

/// The scenario files, sorted.
pub fn files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/scenarios exists")
        .map(|e| e.expect("readable dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}
