//! Reading a cluster from Kubernetes YAML: several documents, or `List`s such as
//! `kubectl get nodes,pods -A -o yaml` prints.

use std::collections::{BTreeMap, HashMap};

use std::any::{Any, TypeId};
use std::fmt::Debug;
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::Metadata;
use k8s_openapi::api::core::v1 as core;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use gantry_core::config::yaml;
use gantry_core::kinds::{self, Change, Kind, ReadContext, Target, Visitor};
use gantry_core::model::echo::{bound_message, echo, echo_name};

/// Input that cannot be read; names the document and, where it can, the field.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The file could not be read.
    #[error("cannot read {path}: {error}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// A document is not valid YAML, or an object does not match its kind's schema.
    #[error("{source_name}: document {document}: {reason}")]
    Invalid {
        /// File name (or `<embedded>`).
        source_name: String,
        /// 1-based document number in the file.
        document: usize,
        /// What is wrong, with the field path (values it repeats are cut to a bounded size).
        reason: String,
    },
    /// The text is nested deeper than [`yaml::MAX_DEPTH`] levels: refused before it is
    /// parsed, whose cost grows with the square of the depth.
    #[error("{source_name}: {error}")]
    TooDeep {
        /// File name (or `<embedded>`).
        source_name: String,
        /// Where.
        error: yaml::TooDeep,
    },
    /// Two pods with the same namespace and name: the second would silently stand for the
    /// first in the cache and the report.
    #[error("pod {pod} is defined twice: in {first} and in {second}")]
    DuplicatePod {
        /// `namespace/name`.
        pod: String,
        /// Where it was defined first: file, document and list item.
        first: String,
        /// Where it was defined again.
        second: String,
    },
}

/// The objects a simulation reads.
#[derive(Debug, Default)]
pub struct ClusterInput {
    /// Pods: with `spec.nodeName` they are running, without it they are pending, in order.
    /// They are the simulation's workload, read here rather than as a [`Kind`].
    pub pods: Vec<core::Pod>,
    /// The objects of every other kind, by the kind's place in [`kinds::each`].
    objects: BTreeMap<usize, Box<dyn KindObjects>>,
    /// Objects of other kinds, counted by kind; the scheduler does not read them.
    pub ignored: BTreeMap<String, usize>,
    /// Where each pod (namespace, name) was read, to refuse a second one.
    pod_origins: HashMap<(String, String), String>,
}

impl Clone for ClusterInput {
    fn clone(&self) -> Self {
        ClusterInput {
            pods: self.pods.clone(),
            objects: self
                .objects
                .iter()
                .map(|(place, objects)| (*place, objects.clone_box()))
                .collect(),
            ignored: self.ignored.clone(),
            pod_origins: self.pod_origins.clone(),
        }
    }
}

impl ClusterInput {
    /// The objects of kind `K` read, in input order.
    pub fn objects<K: Kind>(&self) -> &[K::Object] {
        self.objects
            .values()
            .find_map(|objects| objects.as_any().downcast_ref::<Of<K>>())
            .map_or(&[], |of| &of.0)
    }

    /// Applies the objects of every kind read to `loader`, kind by kind in
    /// [`kinds::each`]'s order; each object that cannot be read is told to it and left out.
    pub fn apply_objects(&self, loader: &mut dyn Loader, now: Duration) {
        for objects in self.objects.values() {
            objects.apply(loader, now);
        }
    }

    /// Reads a file.
    pub fn from_file(path: &std::path::Path) -> Result<Self, InputError> {
        let text = std::fs::read_to_string(path).map_err(|error| InputError::Read {
            path: path.display().to_string(),
            error,
        })?;
        let mut input = ClusterInput::default();
        input.add_yaml(&text, &path.display().to_string())?;
        Ok(input)
    }

    /// Adds the objects of a YAML text (one or more documents) named `source_name`. A
    /// byte-order mark at the start is accepted; text nested deeper than
    /// [`yaml::MAX_DEPTH`] levels is refused before it is parsed; a pod already read (same
    /// namespace and name, here or in an earlier text) is an error naming both places.
    pub fn add_yaml(&mut self, text: &str, source_name: &str) -> Result<(), InputError> {
        let text = yaml::strip_bom(text);
        yaml::check_depth(text, yaml::MAX_DEPTH).map_err(|error| InputError::TooDeep {
            source_name: source_name.to_string(),
            error,
        })?;
        for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
            let document = i + 1;
            let invalid = |reason: String| InputError::Invalid {
                source_name: source_name.to_string(),
                document,
                reason: bound_message(&reason),
            };
            let value = serde_yaml::Value::deserialize(doc).map_err(|e| invalid(e.to_string()))?;
            if value.is_null() {
                continue;
            }
            let value: serde_json::Value =
                serde_json::to_value(value).map_err(|e| invalid(e.to_string()))?;
            let origin = Origin {
                source_name,
                document,
            };
            self.add_object(value, "", &origin)?;
        }
        Ok(())
    }

    fn add_object(
        &mut self,
        value: serde_json::Value,
        path: &str,
        origin: &Origin<'_>,
    ) -> Result<(), InputError> {
        let invalid = |reason: String| InputError::Invalid {
            source_name: origin.source_name.to_string(),
            document: origin.document,
            reason: bound_message(&reason),
        };
        let kind = value
            .get("kind")
            .and_then(|k| k.as_str())
            .ok_or_else(|| invalid(format!("{path}kind: missing")))?
            .to_string();
        let name = value
            .pointer("/metadata/name")
            .and_then(|n| n.as_str())
            .unwrap_or("")
            .to_string();
        let what = format!("{path}{} {}", echo_name(&kind), echo(&name));
        match kind.as_str() {
            "Pod" => {
                let pod: core::Pod = decode(value, &what).map_err(invalid)?;
                self.check_unique(&pod, origin.describe(path))?;
                self.pods.push(pod);
            }
            k if k == "List" || k.ends_with("List") => {
                let items = value
                    .get("items")
                    .and_then(|i| i.as_array())
                    .cloned()
                    .unwrap_or_default();
                for (i, item) in items.into_iter().enumerate() {
                    self.add_object(item, &format!("{path}items[{i}]: "), origin)?;
                }
            }
            _ => match readers().iter().find(|r| r.kind == kind) {
                Some(reader) => {
                    let objects = self
                        .objects
                        .entry(reader.place)
                        .or_insert_with(reader.empty);
                    (reader.add)(objects.as_mut(), value, &what).map_err(invalid)?;
                }
                None => *self.ignored.entry(kind).or_default() += 1,
            },
        }
        Ok(())
    }

    /// Records where `pod` was read, refusing a second pod of the same namespace and name.
    /// A pod without a name is left to the model's check, which names the field.
    fn check_unique(&mut self, pod: &core::Pod, origin: String) -> Result<(), InputError> {
        let Some(name) = pod.metadata.name.clone().filter(|n| !n.is_empty()) else {
            return Ok(());
        };
        let namespace = pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string());
        let pod_key = format!("{}/{}", echo_name(&namespace), echo_name(&name));
        match self.pod_origins.entry((namespace, name)) {
            std::collections::hash_map::Entry::Occupied(first) => Err(InputError::DuplicatePod {
                pod: pod_key,
                first: first.get().clone(),
                second: origin,
            }),
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(origin);
                Ok(())
            }
        }
    }
}

/// The document an object comes from.
struct Origin<'a> {
    source_name: &'a str,
    document: usize,
}

impl Origin<'_> {
    /// `file: document 3`, with the list item when there is one (`, items[2]`).
    fn describe(&self, path: &str) -> String {
        let item = path.trim_end_matches(": ");
        let mut out = format!("{}: document {}", self.source_name, self.document);
        if !item.is_empty() {
            out.push_str(", ");
            out.push_str(&item.replace(": ", ", "));
        }
        out
    }
}

/// Decodes an object of a known kind, naming the field that does not fit its schema.
fn decode<T: DeserializeOwned>(value: serde_json::Value, what: &str) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        format!("{what}: {path}: {}", e.into_inner())
    })
}

/// What the objects read are applied to: a [`Target`] told also of the objects that cannot
/// be read.
pub trait Loader: Target {
    /// An object that cannot be read, and why (naming it and the field).
    fn invalid(&mut self, error: String);
}

/// The objects of one kind read, in input order.
trait KindObjects: Debug + Send + Sync {
    fn clone_box(&self) -> Box<dyn KindObjects>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
    /// Reads each object into the model and applies it to `target`.
    fn apply(&self, loader: &mut dyn Loader, now: Duration);
}

/// The objects of kind `K`.
struct Of<K: Kind>(Vec<K::Object>);

impl<K: Kind> Debug for Of<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple(K::NAME).field(&self.0).finish()
    }
}

impl<K: Kind> KindObjects for Of<K>
where
    K::Model: Debug,
{
    fn clone_box(&self) -> Box<dyn KindObjects> {
        Box::new(Of::<K>(self.0.clone()))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn apply(&self, loader: &mut dyn Loader, now: Duration) {
        let context = ReadContext::default();
        for object in &self.0 {
            match K::read(object, &context) {
                Ok(Some(model)) => K::apply(Change::Applied(model), loader, now),
                Ok(None) => {}
                Err(e) => loader.invalid(e),
            }
        }
    }
}

/// How the objects of one kind are read from the input.
struct Reader {
    /// `kind`.
    kind: &'static str,
    /// The kind's place in [`kinds::each`].
    place: usize,
    /// None read yet.
    empty: fn() -> Box<dyn KindObjects>,
    /// Decodes one object (`what` names it) and adds it.
    add: fn(&mut dyn KindObjects, serde_json::Value, &str) -> Result<(), String>,
}

/// A reader for every kind but pods (the workload, read on their own).
fn readers() -> &'static [Reader] {
    struct Readers(Vec<Reader>);
    impl Visitor for Readers {
        fn visit<K: Kind>(&mut self)
        where
            K::Model: Debug,
        {
            let place = self.0.len();
            if TypeId::of::<K>() != TypeId::of::<kinds::Pods>() {
                self.0.push(Reader {
                    kind: <K::Object as k8s_openapi::Resource>::KIND,
                    place,
                    empty: || Box::new(Of::<K>(Vec::new())),
                    add: add::<K>,
                });
            }
        }
    }
    static READERS: OnceLock<Vec<Reader>> = OnceLock::new();
    READERS.get_or_init(|| {
        let mut readers = Readers(Vec::new());
        kinds::each(&mut readers);
        readers.0
    })
}

/// Decodes an object of kind `K` into `objects`, which hold that kind's. An `apiVersion`
/// the kind reads as its own ([`Kind::OLDER_VERSIONS`]) is read as the current one; any
/// other than the kind's is refused.
fn add<K: Kind>(
    objects: &mut dyn KindObjects,
    mut value: serde_json::Value,
    what: &str,
) -> Result<(), String>
where
    K::Model: Debug,
{
    let expected = <K::Object as k8s_openapi::Resource>::API_VERSION;
    let version = value.get("apiVersion").and_then(|v| v.as_str());
    if version.is_some_and(|v| K::OLDER_VERSIONS.contains(&v)) {
        // Older versions are still found in saved manifests; k8s-openapi knows only the
        // current one's struct, whose deserializer checks the apiVersion.
        value["apiVersion"] = expected.into();
    } else if version != Some(expected) {
        return Err(format!(
            "{what}: apiVersion: {}, expected {expected}",
            echo(version.unwrap_or(""))
        ));
    }
    let mut object: K::Object = decode(value, what)?;
    let namespaced = TypeId::of::<<K::Object as k8s_openapi::Resource>::Scope>()
        == TypeId::of::<k8s_openapi::NamespaceResourceScope>();
    if namespaced {
        // Hand-written input may leave the namespace out, as kubectl would fill it in.
        object
            .metadata_mut()
            .namespace
            .get_or_insert_with(|| "default".to_string());
    }
    let of = objects
        .as_any_mut()
        .downcast_mut::<Of<K>>()
        .expect("the objects of the reader's kind");
    of.0.push(object);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(namespace: Option<&str>, name: &str) -> String {
        let namespace = namespace.map_or(String::new(), |n| format!("\n  namespace: {n}"));
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}{namespace}\nspec:\n  containers: []\n"
        )
    }

    #[test]
    fn every_kind_but_pods_has_a_reader_in_its_place() {
        // A kind added to `kinds::each` is read from the input with nothing more.
        struct Check(usize);
        impl Visitor for Check {
            fn visit<K: Kind>(&mut self)
            where
                K::Model: Debug,
            {
                let kind = <K::Object as k8s_openapi::Resource>::KIND;
                let reader = readers().iter().find(|r| r.kind == kind);
                if kind == "Pod" {
                    assert!(reader.is_none(), "pods are the workload, read on their own");
                } else {
                    assert_eq!(reader.map(|r| r.place), Some(self.0), "{kind}");
                }
                self.0 += 1;
            }
        }
        kinds::each(&mut Check(0));
    }

    #[test]
    fn disruption_budgets_of_both_versions_are_read() {
        let mut input = ClusterInput::default();
        input
            .add_yaml(
                "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: a}\nspec: {minAvailable: 1}\n---\napiVersion: policy/v1beta1\nkind: PodDisruptionBudget\nmetadata: {name: b}\nspec: {selector: {matchLabels: {app: b}}}\nstatus: {disruptionsAllowed: 2}\n",
                "pdbs.yaml",
            )
            .unwrap();
        let budgets = input.objects::<kinds::DisruptionBudgets>();
        let names: Vec<_> = budgets
            .iter()
            .map(|b| b.metadata.name.as_deref().unwrap())
            .collect();
        assert_eq!(names, ["a", "b"]);
        let status = budgets[1].status.as_ref().unwrap();
        assert_eq!(status.disruptions_allowed, Some(2));
        let e = ClusterInput::default()
            .add_yaml(
                "apiVersion: policy/v2\nkind: PodDisruptionBudget\nmetadata: {name: c}\n",
                "pdbs.yaml",
            )
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "pdbs.yaml: document 1: PodDisruptionBudget \"c\": apiVersion: \"policy/v2\", expected policy/v1"
        );
    }

    #[test]
    fn a_byte_order_mark_is_accepted() {
        let mut input = ClusterInput::default();
        input
            .add_yaml(&format!("\u{feff}{}", pod(None, "a")), "bom.yaml")
            .unwrap();
        assert_eq!(input.pods.len(), 1);
    }

    #[test]
    fn deep_nesting_is_refused_before_parsing() {
        let text = format!("{}\nmetadata: {}", pod(None, "a"), "[".repeat(100_000));
        let e = ClusterInput::default()
            .add_yaml(&text, "deep.yaml")
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "deep.yaml: nested deeper than 128 levels at line 8"
        );
    }

    #[test]
    fn a_pod_defined_twice_names_both_documents() {
        let text = format!(
            "{}---\n{}---\n{}",
            pod(Some("shop"), "web"),
            pod(Some("batch"), "web"),
            pod(Some("shop"), "web")
        );
        let e = ClusterInput::default()
            .add_yaml(&text, "cluster.yaml")
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "pod shop/web is defined twice: in cluster.yaml: document 1 and in cluster.yaml: document 3"
        );
    }

    #[test]
    fn duplicates_are_found_in_lists_and_across_files() {
        let list = "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Pod, metadata: {name: a}}\n- {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: default}}\n";
        let e = ClusterInput::default()
            .add_yaml(list, "list.yaml")
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "pod default/a is defined twice: in list.yaml: document 1, items[0] and in list.yaml: document 1, items[1]"
        );
        let mut input = ClusterInput::default();
        input.add_yaml(&pod(None, "a"), "one.yaml").unwrap();
        let e = input
            .add_yaml(&format!("---\n{}", pod(Some("default"), "a")), "two.yaml")
            .unwrap_err();
        assert!(matches!(e, InputError::DuplicatePod { .. }));
        assert_eq!(
            e.to_string(),
            "pod default/a is defined twice: in one.yaml: document 1 and in two.yaml: document 1"
        );
    }

    #[test]
    fn huge_values_are_cut_in_errors() {
        let name = "n".repeat(100_000);
        let text = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers: \"{}\"\n",
            "c".repeat(100_000)
        );
        let e = ClusterInput::default()
            .add_yaml(&text, "big.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.len() < 400, "{} bytes: {e}", e.len());
        assert!(
            e.starts_with(&format!(
                "big.yaml: document 1: Pod \"{}\"... (100000 bytes)",
                "n".repeat(64)
            )),
            "{e}"
        );
        assert!(e.contains("... (100000 bytes), expected a sequence"), "{e}");
    }
}
