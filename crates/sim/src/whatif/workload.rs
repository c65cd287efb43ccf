//! The objects a what-if question names, expanded into the pods their controllers would
//! create: a Pod is itself; a Deployment, ReplicaSet, StatefulSet or Job is its pod template
//! times its replicas (a Job's parallelism), each pod named `<name>-<i>` and owned by the
//! controller, whose selector is known to the scheduler as the real controller's would be
//! (default topology spreading reads it). PodGroups are carried along for gangs.

use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::batch::v1 as batch;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use serde::de::DeserializeOwned;

use gantry_core::model::echo::{bound_message, echo, echo_name};
use gantry_core::model::pod_group::{self, PodGroup};
use gantry_core::model::selector::LabelSelector;

use super::WhatIfError;

/// Label the StatefulSet controller gives each pod, naming it.
const STATEFUL_SET_POD_NAME: &str = "statefulset.kubernetes.io/pod-name";
/// Label the Job controller gives each pod, naming its Job.
const JOB_NAME: &str = "job-name";

/// One object of the question and the pods it stands for.
#[derive(Debug, Clone)]
pub struct Workload {
    /// `Pod`, `Deployment`, `ReplicaSet`, `StatefulSet` or `Job`.
    pub kind: &'static str,
    /// Its namespace (`default` when unset).
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// How many pods it creates as given (1 for a Pod).
    pub replicas: usize,
    /// The pod of a Pod, the template of a controller (named after the controller).
    template: core::Pod,
    /// The controller the scheduler sees owning the pods, with its selector: the kind and
    /// name its pods' owner reference names.
    pub controller: Option<(&'static str, String, LabelSelector)>,
}

impl Workload {
    /// `Kind/name`, as the answer names the workload.
    pub fn label(&self) -> String {
        format!("{}/{}", self.kind, self.name)
    }

    /// The `i`-th pod (0-based): a Pod itself for `i == 0`, otherwise `<name>-<i>`.
    pub fn pod(&self, i: usize) -> core::Pod {
        let mut pod = self.template.clone();
        if self.kind == "Pod" && i == 0 {
            return pod;
        }
        let name = format!("{}-{i}", self.name);
        if self.kind == "StatefulSet" {
            pod.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert(STATEFUL_SET_POD_NAME.to_string(), name.clone());
        }
        pod.metadata.name = Some(name);
        pod
    }

    /// The pods as given: `replicas` of them.
    pub fn pods(&self) -> impl Iterator<Item = core::Pod> + '_ {
        (0..self.replicas).map(|i| self.pod(i))
    }
}

/// The objects of a question, read.
#[derive(Debug, Clone, Default)]
pub struct Expanded {
    /// The workloads, in the order given.
    pub workloads: Vec<Workload>,
    /// The PodGroups given.
    pub pod_groups: Vec<PodGroup>,
}

/// Reads `objects` (Kubernetes objects as JSON; `List`s are read item by item, nulls
/// skipped). An object
/// of another kind, or one that does not match its kind's schema, is an error naming it and
/// the field.
pub fn expand(objects: &[serde_json::Value]) -> Result<Expanded, WhatIfError> {
    let mut out = Expanded::default();
    for (i, object) in objects.iter().enumerate() {
        add(&mut out, object, &format!("objects[{i}]"))?;
    }
    Ok(out)
}

fn add(out: &mut Expanded, object: &serde_json::Value, at: &str) -> Result<(), WhatIfError> {
    if object.is_null() {
        // An empty YAML document.
        return Ok(());
    }
    let invalid = |reason: String| WhatIfError::Invalid {
        at: at.to_string(),
        reason: bound_message(&reason),
    };
    let kind = object
        .get("kind")
        .and_then(|k| k.as_str())
        .ok_or_else(|| invalid("kind: missing".to_string()))?;
    let name = object
        .pointer("/metadata/name")
        .and_then(|n| n.as_str())
        .unwrap_or("");
    let what = format!("{} {}", echo_name(kind), echo(name));
    match kind {
        "Pod" => {
            let pod: core::Pod = decode(object, &what).map_err(invalid)?;
            let (namespace, name) = named(&pod.metadata).map_err(invalid)?;
            out.workloads.push(Workload {
                kind: "Pod",
                namespace,
                name,
                replicas: 1,
                template: pod,
                controller: None,
            });
        }
        "Deployment" => {
            let d: apps::Deployment = decode(object, &what).map_err(invalid)?;
            let spec = d.spec;
            let replicas = count(spec.replicas, 1, "spec.replicas").map_err(invalid)?;
            let w = controlled(
                &d.metadata,
                spec.template,
                &spec.selector,
                replicas,
                "ReplicaSet",
            )
            .map_err(invalid)?;
            out.workloads.push(Workload {
                kind: "Deployment",
                ..w
            });
        }
        "ReplicaSet" => {
            let r: apps::ReplicaSet = decode(object, &what).map_err(invalid)?;
            let spec = r.spec;
            let replicas = count(spec.replicas, 1, "spec.replicas").map_err(invalid)?;
            let template = spec.template.unwrap_or_default();
            let w = controlled(
                &r.metadata,
                template,
                &spec.selector,
                replicas,
                "ReplicaSet",
            )
            .map_err(invalid)?;
            out.workloads.push(w);
        }
        "StatefulSet" => {
            let s: apps::StatefulSet = decode(object, &what).map_err(invalid)?;
            let spec = s.spec;
            let replicas = count(spec.replicas, 1, "spec.replicas").map_err(invalid)?;
            let w = controlled(
                &s.metadata,
                spec.template,
                &spec.selector,
                replicas,
                "StatefulSet",
            )
            .map_err(invalid)?;
            out.workloads.push(w);
        }
        "Job" => {
            let j: batch::Job = decode(object, &what).map_err(invalid)?;
            let spec = j.spec.unwrap_or_default();
            let parallelism = count(spec.parallelism, 1, "spec.parallelism").map_err(invalid)?;
            let completions =
                count(spec.completions, parallelism, "spec.completions").map_err(invalid)?;
            let mut template = spec.template;
            template
                .metadata
                .get_or_insert_with(Default::default)
                .labels
                .get_or_insert_with(Default::default)
                .insert(JOB_NAME.to_string(), name.to_string());
            let selector = spec.selector.unwrap_or_else(|| meta::LabelSelector {
                match_labels: Some([(JOB_NAME.to_string(), name.to_string())].into()),
                ..Default::default()
            });
            let mut w = controlled(
                &j.metadata,
                template,
                &selector,
                parallelism.min(completions),
                "Job",
            )
            .map_err(invalid)?;
            // Default spreading knows no Job: its pods are owned, not selected.
            w.controller = None;
            out.workloads.push(Workload { kind: "Job", ..w });
        }
        "PodGroup" => {
            let version = object.get("apiVersion").and_then(|v| v.as_str());
            if version != Some(pod_group::API_VERSION) {
                return Err(invalid(format!(
                    "apiVersion: {}, expected {}",
                    echo(version.unwrap_or("")),
                    pod_group::API_VERSION
                )));
            }
            let mut group: PodGroup = decode(object, &what).map_err(invalid)?;
            group
                .metadata
                .namespace
                .get_or_insert_with(|| "default".to_string());
            out.pod_groups.push(group);
        }
        k if k == "List" || k.ends_with("List") => {
            let items = object.get("items").and_then(|i| i.as_array());
            for (i, item) in items.into_iter().flatten().enumerate() {
                add(out, item, &format!("{at}.items[{i}]"))?;
            }
        }
        other => {
            return Err(invalid(format!(
                "{}: a what-if question takes Pods, Deployments, ReplicaSets, StatefulSets, \
                 Jobs and PodGroups",
                echo_name(other)
            )));
        }
    }
    Ok(())
}

/// The namespace (`default` when unset) and the name (required) of an object.
fn named(meta: &meta::ObjectMeta) -> Result<(String, String), String> {
    let name = meta.name.clone().filter(|n| !n.is_empty());
    let name = name.ok_or_else(|| "metadata.name: must be set".to_string())?;
    let namespace = meta
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_string());
    Ok((namespace, name))
}

/// A count field: `default` when unset, refused when negative.
fn count(value: Option<i32>, default: usize, field: &str) -> Result<usize, String> {
    match value {
        None => Ok(default),
        Some(n) => usize::try_from(n).map_err(|_| format!("{field}: {n} is negative")),
    }
}

/// A workload whose pods a controller of `owner_kind` creates from `template`.
fn controlled(
    meta: &meta::ObjectMeta,
    template: core::PodTemplateSpec,
    selector: &meta::LabelSelector,
    replicas: usize,
    owner_kind: &'static str,
) -> Result<Workload, String> {
    let (namespace, name) = named(meta)?;
    let selector =
        LabelSelector::compile(Some(selector), "spec.selector").map_err(|e| e.to_string())?;
    let mut metadata = template.metadata.unwrap_or_default();
    metadata.name = Some(name.clone());
    metadata.namespace = Some(namespace.clone());
    let owner_api_version = if owner_kind == "Job" {
        "batch/v1"
    } else {
        "apps/v1"
    };
    metadata.owner_references = Some(vec![meta::OwnerReference {
        api_version: owner_api_version.to_string(),
        kind: owner_kind.to_string(),
        name: name.clone(),
        uid: String::new(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    let template = core::Pod {
        metadata,
        spec: template.spec,
        status: None,
    };
    if template.spec.is_none() {
        return Err("spec.template.spec: must be set".to_string());
    }
    Ok(Workload {
        kind: owner_kind,
        namespace,
        controller: Some((owner_kind, name.clone(), selector)),
        name,
        replicas,
        template,
    })
}

/// Decodes an object of a known kind, naming the field that does not fit its schema.
fn decode<T: DeserializeOwned>(value: &serde_json::Value, what: &str) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        format!("{what}: {path}: {}", e.into_inner())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objects(yaml: &str) -> Vec<serde_json::Value> {
        serde_yaml::Deserializer::from_str(yaml)
            .map(|d| serde::Deserialize::deserialize(d).expect("yaml"))
            .collect()
    }

    #[test]
    fn controllers_expand_into_named_owned_pods() {
        let e = expand(&objects(
            "{apiVersion: apps/v1, kind: StatefulSet, metadata: {name: db, namespace: shop}, spec: {replicas: 3, selector: {matchLabels: {app: db}}, template: {metadata: {labels: {app: db}}, spec: {containers: [{name: c, image: i}]}}}}
---
{apiVersion: batch/v1, kind: Job, metadata: {name: etl}, spec: {parallelism: 4, completions: 2, template: {spec: {containers: [{name: c, image: i}]}}}}
---
{apiVersion: v1, kind: List, items: [{apiVersion: v1, kind: Pod, metadata: {name: solo}, spec: {containers: []}}]}
",
        ))
        .expect("valid objects");
        let db = &e.workloads[0];
        assert_eq!((db.label(), db.replicas), ("StatefulSet/db".to_string(), 3));
        let pods: Vec<core::Pod> = db.pods().collect();
        assert_eq!(pods[2].metadata.name.as_deref(), Some("db-2"));
        assert_eq!(pods[2].metadata.namespace.as_deref(), Some("shop"));
        let labels = pods[2].metadata.labels.as_ref().expect("labels");
        assert_eq!(
            labels.get(STATEFUL_SET_POD_NAME).map(String::as_str),
            Some("db-2")
        );
        let owner = &pods[2].metadata.owner_references.as_ref().expect("owner")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("StatefulSet", "db")
        );
        assert!(db.controller.is_some());
        let etl = &e.workloads[1];
        assert_eq!((etl.label(), etl.replicas), ("Job/etl".to_string(), 2));
        assert!(etl.controller.is_none());
        let solo = &e.workloads[2];
        assert_eq!(solo.pod(0).metadata.name.as_deref(), Some("solo"));
        assert_eq!(solo.pod(3).metadata.name.as_deref(), Some("solo-3"));
        assert_eq!(solo.namespace, "default");
    }

    #[test]
    fn errors_name_the_object_and_the_field() {
        let e = expand(&objects(
            "{apiVersion: apps/v1, kind: Deployment, metadata: {name: web}, spec: {replicas: -1, selector: {}, template: {spec: {containers: []}}}}",
        ))
        .unwrap_err();
        assert_eq!(e.to_string(), "objects[0]: spec.replicas: -1 is negative");
        let e = expand(&objects(
            "{apiVersion: v1, kind: Service, metadata: {name: s}}",
        ))
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("objects[0]: Service: a what-if question takes"),
            "{e}"
        );
        let e = expand(&objects(
            "{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: 3}}",
        ))
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("objects[0]: Pod \"p\": spec.containers:"),
            "{e}"
        );
    }
}
