//! `k8s.io/apimachinery` messages: object and list metadata, label selectors, times,
//! and quantities. Only the fields gantry reads
//! are declared; the decoder skips the others (`managedFields` above all) without allocating.
//! Tags are those of `k8s.io/apimachinery`'s `generated.proto`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource as api_resource;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as api_meta;

/// `metav1.ObjectMeta`, without `managedFields` and the rest of the bookkeeping.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ObjectMeta {
    /// `name`.
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    /// `namespace`.
    #[prost(string, optional, tag = "3")]
    pub namespace: Option<String>,
    /// `uid`.
    #[prost(string, optional, tag = "5")]
    pub uid: Option<String>,
    /// `resourceVersion`.
    #[prost(string, optional, tag = "6")]
    pub resource_version: Option<String>,
    /// `creationTimestamp`.
    #[prost(message, optional, tag = "8")]
    pub creation_timestamp: Option<Time>,
    /// `deletionTimestamp`.
    #[prost(message, optional, tag = "9")]
    pub deletion_timestamp: Option<Time>,
    /// `labels`.
    #[prost(btree_map = "string, string", tag = "11")]
    pub labels: BTreeMap<String, String>,
    /// `annotations`.
    #[prost(btree_map = "string, string", tag = "12")]
    pub annotations: BTreeMap<String, String>,
    /// `ownerReferences`.
    #[prost(message, repeated, tag = "13")]
    pub owner_references: Vec<OwnerReference>,
}

impl From<ObjectMeta> for api_meta::ObjectMeta {
    fn from(m: ObjectMeta) -> Self {
        api_meta::ObjectMeta {
            name: text(m.name),
            namespace: text(m.namespace),
            uid: text(m.uid),
            resource_version: text(m.resource_version),
            creation_timestamp: m.creation_timestamp.and_then(Time::into_api),
            deletion_timestamp: m.deletion_timestamp.and_then(Time::into_api),
            labels: some_map(m.labels),
            annotations: some_map(m.annotations),
            owner_references: some_vec(m.owner_references),
            ..Default::default()
        }
    }
}

/// `metav1.OwnerReference`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OwnerReference {
    /// `kind`.
    #[prost(string, optional, tag = "1")]
    pub kind: Option<String>,
    /// `name`.
    #[prost(string, optional, tag = "3")]
    pub name: Option<String>,
    /// `uid`.
    #[prost(string, optional, tag = "4")]
    pub uid: Option<String>,
    /// `apiVersion`.
    #[prost(string, optional, tag = "5")]
    pub api_version: Option<String>,
    /// `controller`.
    #[prost(bool, optional, tag = "6")]
    pub controller: Option<bool>,
}

impl From<OwnerReference> for api_meta::OwnerReference {
    fn from(o: OwnerReference) -> Self {
        api_meta::OwnerReference {
            api_version: o.api_version.unwrap_or_default(),
            kind: o.kind.unwrap_or_default(),
            name: o.name.unwrap_or_default(),
            uid: o.uid.unwrap_or_default(),
            controller: o.controller,
            block_owner_deletion: None,
        }
    }
}

/// `metav1.Time`: seconds and nanoseconds since the epoch.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Time {
    /// `seconds`.
    #[prost(int64, optional, tag = "1")]
    pub seconds: Option<i64>,
    /// `nanos`.
    #[prost(int32, optional, tag = "2")]
    pub nanos: Option<i32>,
}

impl Time {
    /// The API's time; none for Go's zero time (an empty message, which JSON writes as
    /// null) or one out of range (no real object carries one).
    pub fn into_api(self) -> Option<api_meta::Time> {
        if self.seconds.is_none() && self.nanos.is_none() {
            return None;
        }
        k8s_openapi::jiff::Timestamp::new(self.seconds.unwrap_or(0), self.nanos.unwrap_or(0))
            .ok()
            .map(api_meta::Time)
    }
}

/// `resource.Quantity`, as its canonical string.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Quantity {
    /// `string`.
    #[prost(string, optional, tag = "1")]
    pub string: Option<String>,
}

/// A map of quantities (requests, limits, allocatable), as the API has it.
pub fn quantities(
    map: BTreeMap<String, Quantity>,
) -> Option<BTreeMap<String, api_resource::Quantity>> {
    some_map(
        map.into_iter()
            .map(|(k, q)| (k, api_resource::Quantity(q.string.unwrap_or_default())))
            .collect(),
    )
}

/// `metav1.LabelSelector`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LabelSelector {
    /// `matchLabels`.
    #[prost(btree_map = "string, string", tag = "1")]
    pub match_labels: BTreeMap<String, String>,
    /// `matchExpressions`.
    #[prost(message, repeated, tag = "2")]
    pub match_expressions: Vec<Requirement>,
}

impl From<LabelSelector> for api_meta::LabelSelector {
    fn from(s: LabelSelector) -> Self {
        api_meta::LabelSelector {
            match_labels: some_map(s.match_labels),
            match_expressions: some_vec(s.match_expressions),
        }
    }
}

/// `metav1.LabelSelectorRequirement`, and core/v1's `NodeSelectorRequirement`, which has the
/// same fields under the same tags.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Requirement {
    /// `key`.
    #[prost(string, optional, tag = "1")]
    pub key: Option<String>,
    /// `operator`.
    #[prost(string, optional, tag = "2")]
    pub operator: Option<String>,
    /// `values`.
    #[prost(string, repeated, tag = "3")]
    pub values: Vec<String>,
}

impl From<Requirement> for api_meta::LabelSelectorRequirement {
    fn from(r: Requirement) -> Self {
        api_meta::LabelSelectorRequirement {
            key: r.key.unwrap_or_default(),
            operator: r.operator.unwrap_or_default(),
            values: some_vec(r.values),
        }
    }
}

impl From<Requirement> for k8s_openapi::api::core::v1::NodeSelectorRequirement {
    fn from(r: Requirement) -> Self {
        k8s_openapi::api::core::v1::NodeSelectorRequirement {
            key: r.key.unwrap_or_default(),
            operator: r.operator.unwrap_or_default(),
            values: some_vec(r.values),
        }
    }
}

/// `metav1.ListMeta`: the list's version.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListMeta {
    /// `resourceVersion`.
    #[prost(string, optional, tag = "2")]
    pub resource_version: Option<String>,
}

/// An object of any kind, read for its metadata alone (a bookmark's version).
#[derive(Clone, PartialEq, prost::Message)]
pub struct MetadataOnly {
    /// `metadata`.
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
}

/// `metav1.Status`: what an error says.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Status {
    /// `message`.
    #[prost(string, optional, tag = "3")]
    pub message: Option<String>,
    /// `reason`.
    #[prost(string, optional, tag = "4")]
    pub reason: Option<String>,
    /// `code`.
    #[prost(int32, optional, tag = "6")]
    pub code: Option<i32>,
}

/// An absent string for an empty one. Go's API types hold most strings as plain values,
/// which protobuf always carries and JSON leaves out when empty (`omitempty`); read this way
/// they mean what the JSON means (an unbound pod has no `nodeName`, not an empty one).
pub fn text(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

/// An absent map, as the API has it, for an empty one.
pub fn some_map<K: Ord, V>(map: BTreeMap<K, V>) -> Option<BTreeMap<K, V>> {
    (!map.is_empty()).then_some(map)
}

/// An absent list, as the API has it, for an empty one; items converted.
pub fn some_vec<T, U: From<T>>(items: Vec<T>) -> Option<Vec<U>> {
    (!items.is_empty()).then(|| items.into_iter().map(U::from).collect())
}
