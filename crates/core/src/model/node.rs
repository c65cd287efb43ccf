//! The scheduler's view of a node, computed once when the node arrives or changes.

use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;

use super::ModelError;
use super::gpu::NodeGpus;
use super::labels::Labels;
use super::pod::normalized_image_name;
use super::resources::Resources;
use super::taint::Taint;

/// An image present on a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeImage {
    /// Every name the image is known by, normalized to carry a tag.
    pub names: Vec<String>,
    /// Size in bytes.
    pub size: i64,
}

/// Everything the scheduler reads from a Node object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeModel {
    /// Node name.
    pub name: Arc<str>,
    /// A stable hash of the name, to break score ties without touching the string.
    pub name_hash: u64,
    /// Labels.
    pub labels: Labels,
    /// Only the annotations the scheduler reads.
    pub annotations: Labels,
    /// Taints.
    pub taints: Vec<Taint>,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// `status.allocatable`.
    pub allocatable: Resources,
    /// Images present on the node.
    pub images: Vec<NodeImage>,
    /// The node's GPUs.
    pub gpu: NodeGpus,
    /// The features its kubelet declares (`status.declaredFeatures`), sorted.
    pub declared_features: Box<[String]>,
}

impl NodeModel {
    /// Converts an API node; malformed fields are errors naming the node and the field.
    pub fn from_api(node: &core::Node) -> Result<Self, ModelError> {
        let name = node.metadata.name.clone().unwrap_or_default();
        let fail = |reason: String| ModelError::node(&name, &reason);
        if name.is_empty() {
            return Err(fail("metadata.name: must be set".to_string()));
        }
        let spec = node.spec.as_ref();
        let status = node.status.as_ref();
        let taints = spec
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, t)| Taint::from_api(t, &format!("spec.taints[{i}]")))
            .collect::<Result<_, _>>()
            .map_err(fail)?;
        let allocatable = Resources::from_list(
            status
                .and_then(|s| s.allocatable.as_ref())
                .into_iter()
                .flatten()
                .map(|(k, v)| (k, v.0.as_str())),
            "status.allocatable",
        )
        .map_err(|e| fail(e.to_string()))?;
        let images = status
            .and_then(|s| s.images.as_ref())
            .into_iter()
            .flatten()
            .map(|img| NodeImage {
                names: img
                    .names
                    .iter()
                    .flatten()
                    .map(|n| normalized_image_name(n))
                    .collect(),
                size: img.size_bytes.unwrap_or(0),
            })
            .collect();
        let annotations = node
            .metadata
            .annotations
            .iter()
            .flatten()
            .filter(|(k, _)| {
                super::pod::KEPT_ANNOTATION_PREFIXES
                    .iter()
                    .any(|p| k.starts_with(p))
            })
            .collect();
        let labels = node
            .metadata
            .labels
            .as_ref()
            .map(Labels::from)
            .unwrap_or_default();
        Ok(NodeModel {
            gpu: NodeGpus::from_api_node(&labels, &allocatable, node.metadata.annotations.as_ref()),
            labels,
            annotations,
            taints,
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            allocatable,
            images,
            declared_features: declared_features(status),
            name_hash: name_hash(&name),
            name: Arc::from(name.as_str()),
        })
    }

    /// Whether the node declares the feature `name`.
    pub fn declares(&self, name: &str) -> bool {
        self.declared_features
            .binary_search_by(|f| f.as_str().cmp(name))
            .is_ok()
    }
}

/// `status.declaredFeatures`, sorted and without repeats.
fn declared_features(status: Option<&core::NodeStatus>) -> Box<[String]> {
    let mut features: Vec<String> = status
        .and_then(|s| s.declared_features.clone())
        .unwrap_or_default();
    features.sort_unstable();
    features.dedup();
    features.into()
}

/// A hash of a node name that is the same on every run and platform.
pub fn name_hash(name: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = rustc_hash::FxHasher::default();
    name.hash(&mut h);
    h.finish()
}
