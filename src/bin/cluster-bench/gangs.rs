//! The gang workload: the plain workload's pods (the same requests, drawn with the same seed)
//! in groups of consecutive pods, each group a PodGroup (`scheduling.x-k8s.io/v1alpha1`,
//! Coscheduling's) that its pods name by label, so that scheduling the same pods as gangs can
//! be compared with scheduling them one by one. Each PodGroup's `minMember` is the group's
//! size (all or none) and its `minResources` the sum of its pods' requests, as a training
//! operator writes them; `populate` creates the PodGroups before their pods. The check after
//! a run: every group bound whole or not at all.

use std::collections::BTreeMap;

use gantry_core::model::pod_group::{API_VERSION, POD_GROUP_LABEL, PodGroup, PodGroupSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use crate::check::{self, Amounts};

/// Pods per group, unless `--gang-size` says otherwise (issue 21: 1,000 gangs of 8).
pub const DEFAULT_GANG_SIZE: usize = 8;

/// The name of the `index`-th group.
fn group_name(index: usize) -> String {
    format!("gang-{index:05}")
}

/// Puts `pods` in groups of `size` consecutive pods (the last one smaller when `size` does
/// not divide their number): labels each pod with its group and returns the groups'
/// PodGroups in `namespace`, each with `minMember` its number of pods and `minResources`
/// their requests.
pub fn group(pods: &mut [Pod], size: usize, namespace: &str) -> Result<Vec<PodGroup>, String> {
    let size = size.max(1);
    let mut groups = Vec::with_capacity(pods.len().div_ceil(size));
    for (index, members) in pods.chunks_mut(size).enumerate() {
        let name = group_name(index);
        let mut total = Amounts::default();
        for p in members.iter_mut() {
            p.metadata
                .labels
                .get_or_insert_with(BTreeMap::new)
                .insert(POD_GROUP_LABEL.to_string(), name.clone());
            let r = check::pod_requests(p)?;
            total.cpu += r.cpu;
            total.memory += r.memory;
        }
        let min_resources = BTreeMap::from([
            ("cpu".to_string(), format!("{}m", total.cpu).into()),
            ("memory".to_string(), total.memory.to_string().into()),
        ]);
        groups.push(PodGroup {
            api_version: API_VERSION.to_string(),
            kind: "PodGroup".to_string(),
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(namespace.to_string()),
                ..ObjectMeta::default()
            },
            spec: PodGroupSpec {
                min_member: Some(i32::try_from(members.len()).map_err(|e| e.to_string())?),
                min_resources: Some(min_resources),
                schedule_timeout_seconds: None,
            },
            status: None,
        });
    }
    Ok(groups)
}

/// What the gang check found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GangFindings {
    /// Groups the pods name.
    pub groups: usize,
    /// Of those, every pod bound.
    pub whole: usize,
    /// Of those, no pod bound.
    pub none: usize,
    /// The first group with some of its pods bound and not all, and how many of how many.
    pub first_partial: Option<String>,
}

impl GangFindings {
    /// Every group bound whole or not at all.
    pub fn ok(&self) -> bool {
        self.whole + self.none == self.groups
    }
}

/// Checks that every group of `pods` (by their group label) is bound whole or not at all;
/// `None` when no pod names a group.
pub fn check(pods: &[Pod]) -> Option<GangFindings> {
    // Per group: (pods, bound).
    let mut groups: BTreeMap<(&str, &str), (usize, usize)> = BTreeMap::new();
    for p in pods {
        let Some(group) = p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(POD_GROUP_LABEL))
        else {
            continue;
        };
        let namespace = p.metadata.namespace.as_deref().unwrap_or_default();
        let counts = groups.entry((namespace, group)).or_default();
        counts.0 += 1;
        if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
            counts.1 += 1;
        }
    }
    if groups.is_empty() {
        return None;
    }
    let mut findings = GangFindings {
        groups: groups.len(),
        ..GangFindings::default()
    };
    for ((namespace, name), (members, bound)) in groups {
        if bound == members {
            findings.whole += 1;
        } else if bound == 0 {
            findings.none += 1;
        } else {
            findings
                .first_partial
                .get_or_insert_with(|| format!("{namespace}/{name}: {bound} of {members} bound"));
        }
    }
    Some(findings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods(n: usize) -> Vec<Pod> {
        let mut pods = gantry_core::synthetic::pods(
            n,
            gantry_core::synthetic::Workload::Plain,
            "default-scheduler",
            gantry_core::synthetic::DEFAULT_SEED,
        );
        for p in &mut pods {
            p.metadata.namespace = Some("ns".to_string());
        }
        pods
    }

    fn label(p: &Pod) -> Option<&str> {
        p.metadata
            .labels
            .as_ref()?
            .get(POD_GROUP_LABEL)
            .map(String::as_str)
    }

    #[test]
    fn consecutive_pods_share_a_group_whose_quorum_is_its_size_and_resources_its_requests() {
        let plain = pods(20);
        let mut pods = plain.clone();
        let groups = group(&mut pods, 8, "ns").unwrap();
        assert_eq!(groups.len(), 3);
        let names: Vec<_> = pods.iter().map(|p| label(p).unwrap()).collect();
        assert_eq!(names[0], "gang-00000");
        assert_eq!(names[7], "gang-00000");
        assert_eq!(names[8], "gang-00001");
        assert_eq!(names[19], "gang-00002");
        let min: Vec<_> = groups.iter().map(|g| g.spec.min_member).collect();
        assert_eq!(min, [Some(8), Some(8), Some(4)]);
        let cpu: i64 = plain[..8]
            .iter()
            .map(|p| check::pod_requests(p).unwrap().cpu)
            .sum();
        let resources = groups[0].spec.min_resources.as_ref().unwrap();
        assert_eq!(resources["cpu"], format!("{cpu}m"));
        assert_eq!(groups[0].metadata.namespace.as_deref(), Some("ns"));
        // Every group reads as the scheduler reads it.
        for g in &groups {
            gantry_core::model::pod_group::PodGroupModel::from_api(g).unwrap();
        }
        // The pods are the plain workload's otherwise.
        for (a, b) in plain.iter().zip(&pods) {
            assert_eq!(a.spec, b.spec);
            assert_eq!(a.metadata.name, b.metadata.name);
        }
    }

    #[test]
    fn groups_bound_whole_or_not_at_all_pass_and_a_partial_one_is_named() {
        let mut pods = pods(12);
        group(&mut pods, 4, "ns").unwrap();
        for p in &mut pods[..8] {
            p.spec.as_mut().unwrap().node_name = Some("n1".to_string());
        }
        let f = check(&pods).unwrap();
        assert_eq!((f.groups, f.whole, f.none), (3, 2, 1));
        assert!(f.ok());
        pods[8].spec.as_mut().unwrap().node_name = Some("n1".to_string());
        let f = check(&pods).unwrap();
        assert!(!f.ok());
        assert_eq!(
            f.first_partial.as_deref(),
            Some("ns/gang-00002: 1 of 4 bound")
        );
    }

    #[test]
    fn pods_without_groups_have_no_gang_findings() {
        assert_eq!(check(&pods(3)), None);
    }
}
