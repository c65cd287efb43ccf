//! PodGroups (`scheduling.x-k8s.io/v1alpha1`, the custom resource of scheduler-plugins'
//! Coscheduling) as gang scheduling reads them: a pod joins the group named by its
//! [`POD_GROUP_LABEL`] in its namespace, and the group is scheduled all or nothing once
//! `minMember` of its pods can be placed.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::PodInfo;
use super::echo::echo_name;
use super::resources::Resources;

/// The label by which a pod names its group (scheduler-plugins' `PodGroupLabel`).
pub const POD_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";

/// The API group and version of PodGroups.
pub const API_VERSION: &str = "scheduling.x-k8s.io/v1alpha1";

/// The group `pod` belongs to by its label, if any.
pub fn group_of(pod: &PodInfo) -> Option<&str> {
    pod.labels.get(POD_GROUP_LABEL).filter(|g| !g.is_empty())
}

/// A PodGroup object as the API serves it (the fields gantry reads and writes).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroup {
    /// `scheduling.x-k8s.io/v1alpha1`.
    #[serde(default)]
    pub api_version: String,
    /// `PodGroup`.
    #[serde(default)]
    pub kind: String,
    /// The object's metadata.
    #[serde(default)]
    pub metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    /// What the group needs.
    #[serde(default)]
    pub spec: PodGroupSpec,
    /// What was observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodGroupStatus>,
}

/// The CRD's group, version, kind and plural, so that a Kubernetes client reads and writes
/// PodGroups through its typed API like any built-in kind (kube's `Resource` follows from
/// these two traits).
impl k8s_openapi::Resource for PodGroup {
    const API_VERSION: &'static str = "scheduling.x-k8s.io/v1alpha1";
    const GROUP: &'static str = "scheduling.x-k8s.io";
    const KIND: &'static str = "PodGroup";
    const VERSION: &'static str = "v1alpha1";
    const URL_PATH_SEGMENT: &'static str = "podgroups";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for PodGroup {
    type Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn metadata(&self) -> &Self::Ty {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut Self::Ty {
        &mut self.metadata
    }
}

/// `spec` of a PodGroup.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSpec {
    /// How many pods must have a place before any is bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_member: Option<i32>,
    /// What the cluster must have free for the group, checked before its pods are tried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_resources: Option<BTreeMap<String, serde_json::Value>>,
    /// How long the placed pods wait for the rest before all are released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_timeout_seconds: Option<i32>,
}

/// `status` of a PodGroup, as scheduler-plugins' controller keeps it, with `scheduled` (how
/// many of its pods are bound), which its older versions kept.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupStatus {
    /// `Pending`, `Scheduling`, `Scheduled`, `Running`, `Finished` or `Failed`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// Pods bound to a node.
    #[serde(default)]
    pub scheduled: i32,
    /// Pods running.
    #[serde(default)]
    pub running: i32,
    /// Pods that succeeded.
    #[serde(default)]
    pub succeeded: i32,
    /// Pods that failed.
    #[serde(default)]
    pub failed: i32,
    /// When the group's pods began to be scheduled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_start_time: Option<String>,
}

/// One PodGroup, compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodGroupModel {
    /// Namespace: only pods of the same namespace join it.
    pub namespace: String,
    /// Name, which its pods' [`POD_GROUP_LABEL`] gives.
    pub name: String,
    /// `spec.minMember` (at least 1, as the CRD's schema requires; 1 when absent: a group of
    /// one is a pod scheduled alone).
    pub min_member: u32,
    /// `spec.minResources`, with `pods` set to `minMember` as Coscheduling checks it; none
    /// when not given.
    pub min_resources: Option<Resources>,
    /// `spec.scheduleTimeoutSeconds` when positive: the wait at Permit (else the plugin's
    /// `permitWaitingTimeSeconds`).
    pub schedule_timeout: Option<Duration>,
}

impl PodGroupModel {
    /// Reads a PodGroup; a quantity that does not parse, or a negative `minMember`, is an
    /// error naming the group and the field.
    pub fn from_api(pg: &PodGroup) -> Result<Self, String> {
        let namespace = pg.metadata.namespace.clone().unwrap_or_default();
        let name = pg.metadata.name.clone().unwrap_or_default();
        let what = |e: String| {
            format!(
                "podgroup {}/{}: {e}",
                echo_name(&namespace),
                echo_name(&name)
            )
        };
        let min_member = match pg.spec.min_member {
            None => 1,
            Some(m) if m < 0 => {
                return Err(what(format!("spec.minMember: {m} is negative")));
            }
            Some(m) => u32::try_from(m).unwrap_or(0).max(1),
        };
        let min_resources = match &pg.spec.min_resources {
            None => None,
            Some(list) => {
                let mut texts = Vec::with_capacity(list.len());
                for (k, v) in list {
                    let text = match v {
                        serde_json::Value::String(s) => s.clone(),
                        serde_json::Value::Number(n) => n.to_string(),
                        other => {
                            return Err(what(format!(
                                "spec.minResources[{}]: {other} is not a quantity",
                                echo_name(k)
                            )));
                        }
                    };
                    texts.push((k.clone(), text));
                }
                let mut r = Resources::from_list(
                    texts.iter().map(|(k, v)| (k, v.as_str())),
                    "spec.minResources",
                )
                .map_err(|e| what(e.to_string()))?;
                r.allowed_pods = i64::from(min_member);
                Some(r)
            }
        };
        let schedule_timeout = pg
            .spec
            .schedule_timeout_seconds
            .filter(|s| *s > 0)
            .map(|s| Duration::from_secs(u64::from(s.unsigned_abs())));
        Ok(PodGroupModel {
            namespace,
            name,
            min_member,
            min_resources,
            schedule_timeout,
        })
    }

    /// `namespace/name`, as scheduler-plugins names a group in its messages.
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(yaml: &str) -> Result<PodGroupModel, String> {
        let pg: PodGroup = serde_yaml::from_str(yaml).expect("yaml");
        PodGroupModel::from_api(&pg)
    }

    #[test]
    fn a_group_reads_its_quorum_resources_and_timeout() {
        let g = read(
            "apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {name: train, namespace: ml}
spec: {minMember: 8, minResources: {cpu: '64', nvidia.com/gpu: 64}, scheduleTimeoutSeconds: 30}",
        )
        .unwrap();
        assert_eq!((g.full_name().as_str(), g.min_member), ("ml/train", 8));
        let r = g.min_resources.unwrap();
        assert_eq!(
            (r.milli_cpu, r.scalar("nvidia.com/gpu"), r.allowed_pods),
            (64_000, 64, 8)
        );
        assert_eq!(g.schedule_timeout, Some(Duration::from_secs(30)));
    }

    #[test]
    fn an_unset_or_zero_timeout_leaves_the_plugins_default() {
        let g =
            read("metadata: {name: a, namespace: ns}\nspec: {scheduleTimeoutSeconds: 0}").unwrap();
        assert_eq!(
            (g.min_member, g.schedule_timeout, g.min_resources),
            (1, None, None)
        );
    }

    #[test]
    fn a_bad_quantity_names_the_group_and_the_field() {
        let e = read("metadata: {name: a, namespace: ns}\nspec: {minResources: {cpu: lots}}")
            .unwrap_err();
        assert!(
            e.starts_with("podgroup ns/a: spec.minResources[cpu]"),
            "{e}"
        );
        let e = read("metadata: {name: a, namespace: ns}\nspec: {minMember: -2}").unwrap_err();
        assert_eq!(e, "podgroup ns/a: spec.minMember: -2 is negative");
    }
}
