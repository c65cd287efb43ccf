//! `core/v1` Node, as far as scheduling reads it: metadata, taints, whether it is
//! cordoned, its allocatable resources and its images. Tags are those of `k8s.io/api`'s
//! `core/v1/generated.proto`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as api;

use super::meta::{ObjectMeta, Quantity, Time, quantities, some_vec, text};

/// `Node`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Node {
    /// `metadata`.
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
    /// `spec`.
    #[prost(message, optional, tag = "2")]
    pub spec: Option<NodeSpec>,
    /// `status`.
    #[prost(message, optional, tag = "3")]
    pub status: Option<NodeStatus>,
}

impl From<Node> for api::Node {
    fn from(n: Node) -> Self {
        api::Node {
            metadata: n.metadata.map(Into::into).unwrap_or_default(),
            spec: n.spec.map(|s| api::NodeSpec {
                unschedulable: s.unschedulable.filter(|u| *u),
                taints: some_vec(s.taints),
                ..Default::default()
            }),
            status: n.status.map(|s| api::NodeStatus {
                allocatable: quantities(s.allocatable),
                images: some_vec(s.images),
                declared_features: some_vec(s.declared_features),
                ..Default::default()
            }),
        }
    }
}

/// `NodeSpec`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeSpec {
    /// `unschedulable`.
    #[prost(bool, optional, tag = "4")]
    pub unschedulable: Option<bool>,
    /// `taints`.
    #[prost(message, repeated, tag = "5")]
    pub taints: Vec<Taint>,
}

/// `NodeStatus`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeStatus {
    /// `allocatable`.
    #[prost(btree_map = "string, message", tag = "2")]
    pub allocatable: BTreeMap<String, Quantity>,
    /// `images`.
    #[prost(message, repeated, tag = "8")]
    pub images: Vec<ContainerImage>,
    /// `declaredFeatures`.
    #[prost(string, repeated, tag = "14")]
    pub declared_features: Vec<String>,
}

/// `ContainerImage`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerImage {
    /// `names`.
    #[prost(string, repeated, tag = "1")]
    pub names: Vec<String>,
    /// `sizeBytes`.
    #[prost(int64, optional, tag = "2")]
    pub size_bytes: Option<i64>,
}

impl From<ContainerImage> for api::ContainerImage {
    fn from(i: ContainerImage) -> Self {
        api::ContainerImage {
            names: some_vec(i.names),
            size_bytes: i.size_bytes.filter(|s| *s != 0),
        }
    }
}

/// `Taint`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Taint {
    /// `key`.
    #[prost(string, optional, tag = "1")]
    pub key: Option<String>,
    /// `value`.
    #[prost(string, optional, tag = "2")]
    pub value: Option<String>,
    /// `effect`.
    #[prost(string, optional, tag = "3")]
    pub effect: Option<String>,
    /// `timeAdded`.
    #[prost(message, optional, tag = "4")]
    pub time_added: Option<Time>,
}

impl From<Taint> for api::Taint {
    fn from(t: Taint) -> Self {
        api::Taint {
            key: t.key.unwrap_or_default(),
            value: text(t.value),
            effect: t.effect.unwrap_or_default(),
            time_added: t.time_added.and_then(Time::into_api),
        }
    }
}
