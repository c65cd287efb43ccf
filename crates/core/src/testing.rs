//! Builders for nodes and pods, for tests, benchmarks and synthetic clusters. They build the
//! API objects and convert them through the same code the adapter and the simulator use.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::cache::NodeInfo;
use crate::framework::{DomainVerdict, Status};
use crate::model::{NodeModel, PodInfo};

/// Builds a Node object.
#[derive(Debug, Clone)]
pub struct NodeBuilder {
    node: core::Node,
}

/// Starts a node named `name` with no resources.
pub fn node(name: &str) -> NodeBuilder {
    let mut node = core::Node::default();
    node.metadata.name = Some(name.to_string());
    node.spec = Some(core::NodeSpec::default());
    node.status = Some(core::NodeStatus::default());
    NodeBuilder { node }
}

impl NodeBuilder {
    /// Sets an allocatable resource (`cpu`, `memory`, `pods`, `nvidia.com/gpu`, ...).
    pub fn alloc(mut self, resource: &str, quantity: &str) -> Self {
        let status = self.node.status.get_or_insert_with(Default::default);
        status
            .allocatable
            .get_or_insert_with(BTreeMap::new)
            .insert(resource.to_string(), Quantity(quantity.to_string()));
        self
    }

    /// Sets cpu, memory and a pod capacity of 110.
    pub fn capacity(self, cpu: &str, memory: &str) -> Self {
        self.alloc("cpu", cpu)
            .alloc("memory", memory)
            .alloc("pods", "110")
    }

    /// Adds a label.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.node
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_string(), value.to_string());
        self
    }

    /// Adds an annotation.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.node
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_string(), value.to_string());
        self
    }

    /// Adds a taint (`effect` as the API spells it).
    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        let spec = self.node.spec.get_or_insert_with(Default::default);
        spec.taints.get_or_insert_with(Vec::new).push(core::Taint {
            key: key.to_string(),
            value: (!value.is_empty()).then(|| value.to_string()),
            effect: effect.to_string(),
            time_added: None,
        });
        self
    }

    /// Marks the node unschedulable (cordoned).
    pub fn unschedulable(mut self) -> Self {
        self.node
            .spec
            .get_or_insert_with(Default::default)
            .unschedulable = Some(true);
        self
    }

    /// Adds an image present on the node.
    pub fn image(mut self, name: &str, size_bytes: i64) -> Self {
        let status = self.node.status.get_or_insert_with(Default::default);
        status
            .images
            .get_or_insert_with(Vec::new)
            .push(core::ContainerImage {
                names: Some(vec![name.to_string()]),
                size_bytes: Some(size_bytes),
            });
        self
    }

    /// The API object.
    pub fn api(self) -> core::Node {
        self.node
    }

    /// The converted model; panics on malformed input (tests only build valid nodes).
    pub fn build(self) -> NodeModel {
        NodeModel::from_api(&self.node).expect("test node is valid")
    }
}

/// Builds a Pod object.
#[derive(Debug, Clone)]
pub struct PodBuilder {
    pod: core::Pod,
}

/// Starts a pod `name` in namespace `default` with one container requesting nothing.
pub fn pod(name: &str) -> PodBuilder {
    let mut pod = core::Pod::default();
    pod.metadata.name = Some(name.to_string());
    pod.metadata.namespace = Some("default".to_string());
    pod.metadata.uid = Some(format!("uid-{name}"));
    pod.spec = Some(core::PodSpec {
        containers: vec![core::Container {
            name: "main".to_string(),
            ..Default::default()
        }],
        ..Default::default()
    });
    PodBuilder { pod }
}

impl PodBuilder {
    fn spec(&mut self) -> &mut core::PodSpec {
        self.pod.spec.get_or_insert_with(Default::default)
    }

    /// Sets the namespace.
    pub fn namespace(mut self, ns: &str) -> Self {
        self.pod.metadata.namespace = Some(ns.to_string());
        self
    }

    /// Adds a request to the first container.
    pub fn req(mut self, resource: &str, quantity: &str) -> Self {
        let c = &mut self.spec().containers[0];
        c.resources
            .get_or_insert_with(Default::default)
            .requests
            .get_or_insert_with(BTreeMap::new)
            .insert(resource.to_string(), Quantity(quantity.to_string()));
        self
    }

    /// Adds a label.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.pod
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_string(), value.to_string());
        self
    }

    /// Adds an annotation.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.pod
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_string(), value.to_string());
        self
    }

    /// Binds the pod to a node.
    pub fn on(mut self, node: &str) -> Self {
        self.spec().node_name = Some(node.to_string());
        self
    }

    /// Sets the priority.
    pub fn priority(mut self, p: i32) -> Self {
        self.spec().priority = Some(p);
        self
    }

    /// Adds a host port (TCP, any IP) to the first container.
    pub fn host_port(mut self, port: i32) -> Self {
        let c = &mut self.spec().containers[0];
        c.ports
            .get_or_insert_with(Vec::new)
            .push(core::ContainerPort {
                container_port: port,
                host_port: Some(port),
                ..Default::default()
            });
        self
    }

    /// Sets the image of the first container.
    pub fn image(mut self, image: &str) -> Self {
        self.spec().containers[0].image = Some(image.to_string());
        self
    }

    /// Adds a nodeSelector entry.
    pub fn node_selector(mut self, key: &str, value: &str) -> Self {
        self.spec()
            .node_selector
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_string(), value.to_string());
        self
    }

    /// Adds a toleration (`operator` `Equal` or `Exists`; `effect` may be empty).
    pub fn toleration(mut self, key: &str, operator: &str, value: &str, effect: &str) -> Self {
        self.spec()
            .tolerations
            .get_or_insert_with(Vec::new)
            .push(core::Toleration {
                key: (!key.is_empty()).then(|| key.to_string()),
                operator: Some(operator.to_string()),
                value: (!value.is_empty()).then(|| value.to_string()),
                effect: (!effect.is_empty()).then(|| effect.to_string()),
                toleration_seconds: None,
            });
        self
    }

    /// Edits the spec directly, for fields without a builder method (affinity, spread, ...).
    pub fn with_spec(mut self, f: impl FnOnce(&mut core::PodSpec)) -> Self {
        f(self.spec());
        self
    }

    /// Sets the spec's fields from YAML (a fragment of a PodSpec, e.g. an `affinity:` block);
    /// panics on invalid YAML (tests only).
    pub fn spec_yaml(mut self, yaml: &str) -> Self {
        let mut base = serde_json::to_value(self.spec().clone()).expect("spec serializes");
        let extra: serde_json::Value = serde_yaml::from_str(yaml).expect("valid test yaml");
        if let (Some(b), serde_json::Value::Object(e)) = (base.as_object_mut(), extra) {
            b.extend(e);
        }
        *self.spec() = serde_json::from_value(base).expect("valid pod spec fragment");
        self
    }

    /// The API object.
    pub fn api(self) -> core::Pod {
        self.pod
    }

    /// The converted model; panics on malformed input (tests only build valid pods).
    pub fn build(self) -> Arc<PodInfo> {
        Arc::new(PodInfo::from_api(&self.pod).expect("test pod is valid"))
    }
}

/// A node with `pods` placed on it.
pub fn node_info(node: NodeModel, pods: &[Arc<PodInfo>]) -> NodeInfo {
    let mut info = NodeInfo::new(Arc::new(node));
    for p in pods {
        info.add_pod(p.clone());
    }
    info
}

/// What a Filter plugin's verdicts by domain say of the node at `position`: the first
/// rejection among the checks, in order, or success.
pub fn status_by_domain(verdicts: &[DomainVerdict], position: usize) -> Status {
    verdicts
        .iter()
        .find_map(|v| match v.code(position) {
            0 => None,
            code => Some(v.rejections[usize::from(code) - 1].clone()),
        })
        .unwrap_or_else(Status::success)
}
