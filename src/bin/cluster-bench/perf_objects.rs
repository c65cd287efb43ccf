//! The objects of a scheduler_perf workload, made from its templates as scheduler_perf makes
//! them: nodes named from the template's `generateName` with the `kubernetes.io/hostname` label,
//! the op's prepare strategy applied; pods with the `signature` label per pod; templates
//! rendered with `.Index`, `.Count` and the op's `templateParams`.
//!
//! Names are made here rather than by the API server (`generateName`), numbered in creation
//! order, so that a run can be followed by name. One deviation, for the real API server: a
//! template that sets `spec.priority` itself (such as `pod-high-priority-large-cpu.yaml`'s
//! `priority: 10`) is refused by the Priority admission plugin, so the pod names a
//! PriorityClass of that value instead ([`priority_class`]) and the admission fills it in.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use serde_json::{Value, json};

use crate::perf_config::{CreateNodes, CreatePods};

/// The label every node gets, valued with its name, as scheduler_perf's node preparer sets it.
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// The label scheduler_perf puts on every pod made from a template, one value per pod.
const SIGNATURE_LABEL: &str = "signature";

/// A template file's YAML with `{{.Name}}` replaced by `env`'s values; any other template
/// action is refused (the workloads replayed use none).
pub fn render(path: &Path, env: &BTreeMap<String, serde_yaml::Value>) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the template {}", path.display()))?;
    let rendered = substitute(&text, env).with_context(|| format!("{}", path.display()))?;
    serde_yaml::from_str(&rendered).with_context(|| format!("{} is not YAML", path.display()))
}

/// `text` with every `{{.Name}}` replaced by `env[Name]`.
fn substitute(text: &str, env: &BTreeMap<String, serde_yaml::Value>) -> anyhow::Result<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let end = rest[start..]
            .find("}}")
            .context("a template action without its closing }}")?;
        let action = rest[start + 2..start + end].trim();
        let name = action
            .strip_prefix('.')
            .filter(|n| n.chars().all(|c| c.is_ascii_alphanumeric()))
            .with_context(|| format!("template action {{{{{action}}}}} not supported"))?;
        let value = env
            .get(name)
            .with_context(|| format!("template parameter {name} not given"))?;
        out.push_str(&scalar(value));
        rest = &rest[start + end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A template parameter as text.
fn scalar(value: &serde_yaml::Value) -> String {
    match value {
        serde_yaml::Value::String(s) => s.clone(),
        other => serde_yaml::to_string(other)
            .unwrap_or_default()
            .trim()
            .to_string(),
    }
}

/// The environment of object `index` of `count`: the op's template parameters, `Index` and
/// `Count`.
fn env(
    params: &BTreeMap<String, serde_yaml::Value>,
    index: usize,
    count: usize,
) -> BTreeMap<String, serde_yaml::Value> {
    let mut env = params.clone();
    env.insert("Index".to_string(), serde_yaml::Value::from(index));
    env.insert("Count".to_string(), serde_yaml::Value::from(count));
    env
}

/// scheduler_perf's base node (`makeBaseNode`), for a createNodes op without a template.
fn base_node(op_index: usize) -> Value {
    let resources = json!({"pods": "110", "cpu": "4", "memory": "32Gi"});
    json!({
        "metadata": {"generateName": format!("node-{op_index}-")},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    })
}

/// scheduler_perf's base pod (`makeBasePod`), for a createPods op without a template.
fn base_pod() -> Value {
    let resources = json!({"cpu": "100m", "memory": "500Mi"});
    json!({
        "metadata": {"generateName": "pod-"},
        "spec": {"containers": [{
            "name": "pause",
            "image": "registry.k8s.io/pause:3.10.2",
            "ports": [{"containerPort": 80}],
            "resources": {"requests": resources, "limits": resources},
        }]},
    })
}

/// The nodes of createNodes op `op_index`, numbered on from `first` (the nodes earlier ops
/// made), with the op's strategy applied.
pub fn nodes(op: &CreateNodes, op_index: usize, first: usize) -> anyhow::Result<Vec<Node>> {
    (0..op.count)
        .map(|i| {
            let mut node = match &op.node_template_path {
                Some(path) => render(path, &env(&op.template_params, i, op.count))?,
                None => base_node(op_index),
            };
            let name = object_name(&node, op.count, &format!("{:05}", first + i))?;
            node["metadata"]["name"] = json!(name);
            node["metadata"]["labels"][HOSTNAME_LABEL] = json!(name);
            prepare_node(&mut node, op, i, &name);
            serde_json::from_value(node).context("the node template is not a Node")
        })
        .collect()
}

/// The name of object `suffix` of `count` made from `template`: its `metadata.name` if it has
/// one (then it must be the only one), else its `generateName` followed by `suffix`.
fn object_name(template: &Value, count: usize, suffix: &str) -> anyhow::Result<String> {
    let metadata = &template["metadata"];
    if let Some(name) = metadata["name"].as_str() {
        anyhow::ensure!(count <= 1, "{count} objects of the one name {name}");
        return Ok(name.to_string());
    }
    match metadata["generateName"].as_str() {
        Some(prefix) => Ok(format!("{prefix}{suffix}")),
        None => bail!("the template has neither name nor generateName"),
    }
}

/// Applies the op's prepare strategy to node `index` named `name`: a label round-robin, a
/// label of its own, or allocatable quantities (on top of its capacity, which the API server
/// would otherwise copy into an allocatable left empty).
fn prepare_node(node: &mut Value, op: &CreateNodes, index: usize, name: &str) {
    if let Some(strategy) = &op.node_allocatable_strategy {
        let status = &mut node["status"];
        if status["allocatable"].is_null() {
            status["allocatable"] = status["capacity"].clone();
        }
        for (resource, quantity) in &strategy.node_allocatable {
            status["allocatable"][resource] = json!(quantity);
        }
    } else if let Some(strategy) = &op.label_node_prepare_strategy {
        if !strategy.label_values.is_empty() {
            let value = &strategy.label_values[index % strategy.label_values.len()];
            node["metadata"]["labels"][&strategy.label_key] = json!(value);
        }
    } else if let Some(strategy) = &op.unique_node_label_strategy {
        node["metadata"]["labels"][&strategy.label_key] = json!(name);
    }
}

/// The pods of createPods op `op_index` in its namespace, and the PriorityClasses they name.
pub fn pods(op: &CreatePods, op_index: usize) -> anyhow::Result<(Vec<Pod>, Vec<PriorityClass>)> {
    let namespace = op.namespace.clone().unwrap_or_default();
    let mut classes = BTreeMap::new();
    let pods = (0..op.count)
        .map(|i| {
            let mut pod = match &op.pod_template_path {
                Some(path) => {
                    let mut pod = render(path, &env(&op.template_params, i, op.count))?;
                    pod["metadata"]["labels"][SIGNATURE_LABEL] =
                        json!(format!("signature-label-{i}"));
                    pod
                }
                None => base_pod(),
            };
            let name = object_name(&pod, op.count, &format!("{op_index}-{i:05}"))?;
            pod["metadata"]["name"] = json!(name);
            pod["metadata"]["namespace"] = json!(namespace);
            if let Some(class) = priority_class(&mut pod) {
                classes.insert(class.metadata.name.clone(), class);
            }
            serde_json::from_value(pod).context("the pod template is not a Pod")
        })
        .collect::<anyhow::Result<Vec<Pod>>>()?;
    Ok((pods, classes.into_values().collect()))
}

/// When `pod` sets `spec.priority` itself, replaces it by the name of a PriorityClass of that
/// value, and returns that class.
pub fn priority_class(pod: &mut Value) -> Option<PriorityClass> {
    let priority = pod["spec"].as_object_mut()?.remove("priority")?.as_i64()?;
    let name = format!("scheduler-perf-priority-{priority}");
    pod["spec"]["priorityClassName"] = json!(name);
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "value": priority,
        "description": "a scheduler_perf pod template's spec.priority, which the Priority admission refuses in the pod",
    }))
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf_config::LabelStrategy;

    fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn template_actions_are_substituted_or_refused() {
        let env = env(&BTreeMap::from([("size".to_string(), "2Gi".into())]), 3, 7);
        assert_eq!(
            substitute("a: {{.Index}}/{{ .Count }} {{.size}}", &env).unwrap(),
            "a: 3/7 2Gi"
        );
        assert!(substitute("{{if .Index}}x{{end}}", &env).is_err());
        assert!(substitute("{{.Missing}}", &env).is_err());
    }

    #[test]
    fn nodes_are_named_labelled_and_round_robin() {
        let dir = tempfile::tempdir().unwrap();
        let template = write(
            dir.path(),
            "node.yaml",
            "metadata:\n  generateName: scheduler-perf-\nstatus:\n  capacity: {cpu: \"4\"}\n",
        );
        let op = CreateNodes {
            count: 3,
            node_template_path: Some(template),
            label_node_prepare_strategy: Some(LabelStrategy {
                label_key: "zone".to_string(),
                label_values: vec!["a".to_string(), "b".to_string()],
            }),
            unique_node_label_strategy: None,
            node_allocatable_strategy: None,
            template_params: BTreeMap::new(),
        };
        let nodes = nodes(&op, 0, 10).unwrap();
        let labels = |i: usize| nodes[i].metadata.labels.clone().unwrap();
        assert_eq!(
            nodes[2].metadata.name.as_deref(),
            Some("scheduler-perf-00012")
        );
        assert_eq!(labels(2)[HOSTNAME_LABEL], "scheduler-perf-00012");
        assert_eq!(
            (labels(0)["zone"].as_str(), labels(1)["zone"].as_str()),
            ("a", "b")
        );
        assert_eq!(labels(2)["zone"], "a");
    }

    #[test]
    fn pods_get_signatures_and_priority_classes() {
        let dir = tempfile::tempdir().unwrap();
        let template = write(
            dir.path(),
            "pod.yaml",
            "metadata:\n  generateName: pod-h-\nspec:\n  priority: 10\n  containers: [{name: pause, image: pause}]\n",
        );
        let op = CreatePods {
            count: 2,
            namespace: Some("namespace-2".to_string()),
            pod_template_path: Some(template),
            collect_metrics: false,
            skip_wait_to_completion: false,
            steady_state: false,
            template_params: BTreeMap::new(),
        };
        let (pods, classes) = pods(&op, 2).unwrap();
        assert_eq!(pods[1].metadata.name.as_deref(), Some("pod-h-2-00001"));
        assert_eq!(pods[1].metadata.namespace.as_deref(), Some("namespace-2"));
        assert_eq!(
            pods[1].metadata.labels.as_ref().unwrap()[SIGNATURE_LABEL],
            "signature-label-1"
        );
        let spec = pods[0].spec.as_ref().unwrap();
        assert_eq!(spec.priority, None);
        assert_eq!(
            spec.priority_class_name.as_deref(),
            Some("scheduler-perf-priority-10")
        );
        assert_eq!(classes.len(), 1);
        assert_eq!(classes[0].value, Some(10));
    }
}
