//! Objects read one at a time, each on its own: an object of a list or a watch that does not
//! decode (a number out of its type's range, a string where a number belongs, a schemaless
//! custom resource holding anything at all) becomes an [`Unreadable`] naming the object and
//! the field, instead of an error that fails the whole list or watch. The API server stores
//! what its validation lets through, which for a custom resource is far more than gantry can
//! read: one such object must never stop the reading of all the others.

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use super::protobuf::{self, ProtoError};
pub use gantry_core::kinds::Unreadable;
use gantry_core::model::echo::{at_path, bound_message};

/// An object as a watcher read it.
#[derive(Debug, Clone)]
pub enum Read<K> {
    /// The object, decoded.
    Object(K),
    /// An object that does not decode, and what is known of it.
    Unreadable(Unreadable),
}

/// The names of the JSON object `raw` (what of them can be read) with `error`.
fn unreadable_json(raw: &str, error: String) -> Unreadable {
    let names: Names = serde_json::from_str(raw).unwrap_or_default();
    let meta = names.metadata.and_then(Lax::get).unwrap_or_default();
    let spec = names.spec.and_then(Lax::get).unwrap_or_default();
    Unreadable {
        namespace: meta.namespace.and_then(Lax::get),
        name: meta.name.and_then(Lax::get).unwrap_or_default(),
        uid: meta.uid.and_then(Lax::get),
        resource_version: meta.resource_version.and_then(Lax::get),
        node_name: spec.node_name.and_then(Lax::get),
        scheduler_name: spec.scheduler_name.and_then(Lax::get),
        error,
    }
}

/// The names of the protobuf object `object` (what of them can be read) with `error`.
fn unreadable_protobuf(object: &[u8], error: &ProtoError) -> Unreadable {
    let (namespace, name) = protobuf::object_names(object);
    Unreadable {
        namespace,
        name: name.unwrap_or_default(),
        resource_version: protobuf::resource_version(object).ok().flatten(),
        error: bound_message(&error.to_string()),
        ..Unreadable::default()
    }
}

/// The few fields [`Unreadable`] keeps, each read on its own so that one of the wrong type
/// leaves the others readable.
#[derive(Deserialize, Default)]
struct Names {
    #[serde(default)]
    metadata: Option<Lax<NameFields>>,
    #[serde(default)]
    spec: Option<Lax<PodFields>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct NameFields {
    #[serde(default)]
    namespace: Option<Lax<String>>,
    #[serde(default)]
    name: Option<Lax<String>>,
    #[serde(default)]
    uid: Option<Lax<String>>,
    #[serde(default)]
    resource_version: Option<Lax<String>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct PodFields {
    #[serde(default)]
    node_name: Option<Lax<String>>,
    #[serde(default)]
    scheduler_name: Option<Lax<String>>,
}

/// A field that may hold any JSON: kept when it reads as `T`, passed over otherwise.
#[derive(Deserialize)]
#[serde(untagged)]
enum Lax<T> {
    Read(T),
    Other(serde::de::IgnoredAny),
}

impl<T> Lax<T> {
    fn get(self) -> Option<T> {
        match self {
            Lax::Read(t) => Some(t),
            Lax::Other(_) => None,
        }
    }
}

/// Reads the JSON object `raw` as `K`; one that does not decode is [`Read::Unreadable`], its
/// error naming the field by its path (`spec.minMember: invalid value: integer
/// 2147483648, expected i32`), with quoted values cut (see [`bound_message`]).
pub fn read_json<K: DeserializeOwned>(raw: &RawValue) -> Read<K> {
    let mut de = serde_json::Deserializer::from_str(raw.get());
    match serde_path_to_error::deserialize::<_, K>(&mut de) {
        Ok(obj) => Read::Object(obj),
        Err(e) => {
            let path = e.path().to_string();
            let error = bound_message(&at_path(&path, &e.into_inner().to_string()));
            Read::Unreadable(unreadable_json(raw.get(), error))
        }
    }
}

/// Reads the protobuf object `object` with `decode`; one that does not decode is
/// [`Read::Unreadable`].
pub fn read_protobuf<K>(
    object: &[u8],
    decode: fn(&[u8]) -> Result<K, prost::DecodeError>,
) -> Read<K> {
    match decode(object) {
        Ok(obj) => Read::Object(obj),
        Err(e) => Read::Unreadable(unreadable_protobuf(object, &ProtoError::Decode(e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_core::model::pod_group::PodGroup;

    fn read<K: DeserializeOwned>(json: &str) -> Read<K> {
        let raw: Box<RawValue> = serde_json::from_str(json).expect("JSON");
        read_json(&raw)
    }

    fn unreadable<K: DeserializeOwned + std::fmt::Debug>(json: &str) -> Unreadable {
        match read::<K>(json) {
            Read::Unreadable(u) => u,
            Read::Object(o) => panic!("read {o:?}"),
        }
    }

    #[test]
    fn a_number_out_of_range_names_the_object_and_the_field() {
        let u = unreadable::<PodGroup>(
            r#"{"metadata":{"name":"bad","namespace":"ml","resourceVersion":"7","uid":"u1"},
                "spec":{"minMember":2147483648}}"#,
        );
        assert_eq!(u.key().to_string(), "ml/bad");
        assert_eq!(u.resource_version.as_deref(), Some("7"));
        assert_eq!(u.uid.as_deref(), Some("u1"));
        assert_eq!(
            u.error,
            "spec.minMember: invalid value: integer `2147483648`, expected i32"
        );
    }

    #[test]
    fn a_wrong_type_anywhere_is_unreadable_and_a_good_object_reads() {
        for spec in [
            r#"{"minMember":2.5}"#,
            r#"{"minMember":"abc"}"#,
            r#"{"scheduleTimeoutSeconds":1000000000000000000}"#,
            r#"{"minResources":7}"#,
            r#""everything""#,
        ] {
            let json = format!(r#"{{"metadata":{{"name":"g","namespace":"ns"}},"spec":{spec}}}"#);
            let u = unreadable::<PodGroup>(&json);
            assert_eq!(u.key().to_string(), "ns/g", "{spec}");
            assert!(u.error.starts_with("spec"), "{spec}: {}", u.error);
        }
        let good = r#"{"metadata":{"name":"g","namespace":"ns"},"spec":{"minMember":3}}"#;
        assert!(matches!(read::<PodGroup>(good), Read::Object(g) if g.spec.min_member == Some(3)));
    }

    #[test]
    fn names_of_the_wrong_type_are_left_out_and_long_values_cut() {
        let u = unreadable::<PodGroup>(r#"{"metadata":{"name":7,"namespace":"ns"},"spec":[]}"#);
        assert_eq!((u.namespace.as_deref(), u.name.as_str()), (Some("ns"), ""));
        let long = "x".repeat(100_000);
        let json = format!(r#"{{"metadata":{{"name":"g"}},"spec":{{"minMember":"{long}"}}}}"#);
        let u = unreadable::<PodGroup>(&json);
        assert!(u.error.len() < 300, "{}", u.error);
        assert!(u.error.contains("(100000 bytes)"), "{}", u.error);
    }

    #[test]
    fn a_pod_keeps_its_node_and_scheduler_names() {
        let u = unreadable::<k8s_openapi::api::core::v1::Pod>(
            r#"{"metadata":{"name":"p","namespace":"ns"},
                "spec":{"nodeName":"n1","schedulerName":"gantry","containers":7}}"#,
        );
        assert_eq!(u.node_name.as_deref(), Some("n1"));
        assert_eq!(u.scheduler_name.as_deref(), Some("gantry"));
        assert!(u.error.starts_with("spec.containers"), "{}", u.error);
    }
}
