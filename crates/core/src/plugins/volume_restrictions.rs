//! VolumeRestrictions: volumes that two pods cannot share. An inline disk (GCE PD, AWS EBS,
//! RBD, iSCSI) may not be mounted by two pods of one node against its rules (see
//! [`InlineDisk::conflicts_with`]), and a claim with the `ReadWriteOncePod` access mode may
//! be used by one placed pod only, wherever it runs.
//!
//! A claim counts as in use when a placed pod (bound or assumed) names it; gantry's cache
//! also counts the claims of generic ephemeral volumes there, which kube-scheduler leaves
//! out. The two differ only for a pod that names another pod's ephemeral claim in a
//! `persistentVolumeClaim` volume.

use std::sync::Arc;

use crate::cache::{NodeInfo, Snapshot, Tracked};
use crate::framework::events::is_a_named_claim_of_the_pod;
use crate::framework::{
    ArgsError, ClusterChange, ClusterEvent, CycleState, DefaultPlace, EventHint, FilterPlugin,
    Plugin, PluginSpec, PreFilterExtensions, PreFilterPlugin, PreFilterResult, QueueingHint,
    Status,
};
use crate::model::PodInfo;
use crate::model::volume::{AccessModes, InlineDisk};

/// The name used in configuration files.
pub const NAME: &str = "VolumeRestrictions";

/// Reason given for a node where another pod mounts one of the pod's inline disks in a way
/// that conflicts.
pub const ERR_REASON_DISK_CONFLICT: &str = "node(s) had no available disk";

/// Reason given, on every node, while a `ReadWriteOncePod` claim of the pod is used by a
/// placed pod. `Unschedulable`: removing that pod would help.
pub const ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT: &str = "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod";

/// Error when Filter runs without this plugin's PreFilter state (kube-scheduler's wording).
pub const ERR_MISSING_STATE: &str = "cannot read \"PreFilterVolumeRestrictions\" from cycleState";

/// What PreFilter found for Filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeRestrictionsState {
    /// How many references placed pods hold to the pod's `ReadWriteOncePod` claims.
    pub claims_in_use: usize,
    /// The pod's `ReadWriteOncePod` claims.
    pub read_write_once_pod: Vec<String>,
}

impl VolumeRestrictionsState {
    /// The references `other` holds to the pod's `ReadWriteOncePod` claims (kube-scheduler
    /// counts a claim name in any namespace; a claim is namespaced, so gantry counts only
    /// the pod's own namespace).
    fn references(&self, pod: &PodInfo, other: &PodInfo) -> usize {
        if other.namespace != pod.namespace {
            return 0;
        }
        other
            .volumes
            .claims
            .iter()
            .filter(|c| !c.ephemeral && self.read_write_once_pod.contains(&c.name))
            .count()
    }
}

/// Rejects nodes where the pod's inline disks conflict with another pod's, and every node
/// while one of its `ReadWriteOncePod` claims is in use.
#[derive(Debug, Default, Clone, Copy)]
pub struct VolumeRestrictions;

/// A placed pod that goes away may free a disk or a claim; a new claim may be the one the
/// pod lacked; a new node has no pods whose disks conflict.
const EVENTS: [EventHint; 3] = [
    EventHint::when(ClusterEvent::PodDelete, frees_a_disk_or_claim),
    EventHint::any(ClusterEvent::NodeAdd),
    EventHint::when(ClusterEvent::ClaimAdd, is_a_named_claim_of_the_pod),
];

/// The names of the claims a pod names in `persistentVolumeClaim` volumes (not those of
/// its ephemeral volumes).
fn named_claims(pod: &PodInfo) -> impl Iterator<Item = &str> {
    pod.volumes
        .claims
        .iter()
        .filter(|c| !c.ephemeral)
        .map(|c| c.name.as_str())
}

/// True when some inline disk of `a` conflicts with one of `b`.
fn disks_conflict(a: &[InlineDisk], b: &[InlineDisk]) -> bool {
    a.iter().any(|d| b.iter().any(|e| d.conflicts_with(e)))
}

fn frees_a_disk_or_claim(change: &ClusterChange<'_>, pod: &PodInfo) -> QueueingHint {
    let ClusterChange::PodRemoved(gone) = change else {
        return QueueingHint::Queue;
    };
    if gone.namespace != pod.namespace {
        return QueueingHint::Skip;
    }
    let shares_a_claim = named_claims(gone).any(|g| named_claims(pod).any(|c| c == g));
    if disks_conflict(&pod.volumes.disks, &gone.volumes.disks) || shares_a_claim {
        QueueingHint::Queue
    } else {
        QueueingHint::Skip
    }
}

impl Plugin for VolumeRestrictions {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [EventHint] {
        &EVENTS
    }

    fn cache_state(&self) -> &'static [Tracked] {
        &[Tracked::Volumes]
    }

    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }

    fn as_pre_filter_extensions(&self) -> Option<&dyn PreFilterExtensions> {
        Some(self)
    }

    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl PreFilterExtensions for VolumeRestrictions {
    fn add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        added: &PodInfo,
        _: &NodeInfo,
    ) -> Status {
        if let Some(s) = state.get_mut::<VolumeRestrictionsState>() {
            s.claims_in_use += s.references(pod, added);
        }
        Status::success()
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        removed: &PodInfo,
        _: &NodeInfo,
    ) -> Status {
        if let Some(s) = state.get_mut::<VolumeRestrictionsState>() {
            s.claims_in_use = s.claims_in_use.saturating_sub(s.references(pod, removed));
        }
        Status::success()
    }
}

impl PreFilterPlugin for VolumeRestrictions {
    /// Reads every claim the pod names (a missing one rejects the pod: nothing can run it
    /// until the claim exists) and counts its `ReadWriteOncePod` claims in use; skips the
    /// Filter when the pod has no inline disk and no such claim in use.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let storage = snapshot.storage();
        let mut once_pod: Vec<&str> = Vec::new();
        for name in named_claims(pod) {
            let Some(claim) = storage.claim(&pod.namespace, name) else {
                return (
                    PreFilterResult::default(),
                    Status::unresolvable(format!("persistentvolumeclaim \"{name}\" not found")),
                );
            };
            if claim
                .access_modes
                .contains(AccessModes::READ_WRITE_ONCE_POD)
                && !once_pod.contains(&name)
            {
                once_pod.push(name);
            }
        }
        let claims_in_use = once_pod
            .iter()
            .filter(|name| storage.claim_in_use(&pod.namespace, name))
            .count();
        if pod.volumes.disks.is_empty() && claims_in_use == 0 {
            return (PreFilterResult::default(), Status::skip());
        }
        state.insert(VolumeRestrictionsState {
            claims_in_use,
            read_write_once_pod: once_pod.iter().map(|n| n.to_string()).collect(),
        });
        (PreFilterResult::default(), Status::success())
    }
}

impl FilterPlugin for VolumeRestrictions {
    /// Every node passes, whatever it holds, when the pod has no inline disk and no other
    /// pod uses its `ReadWriteOncePod` claims.
    fn passes_all(&self, state: &CycleState, pod: &PodInfo, _snapshot: &Snapshot) -> bool {
        pod.volumes.disks.is_empty()
            && state
                .get::<VolumeRestrictionsState>()
                .is_some_and(|found| found.claims_in_use == 0)
    }

    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(found) = state.get::<VolumeRestrictionsState>() else {
            return Status::error(ERR_MISSING_STATE);
        };
        if !pod.volumes.disks.is_empty()
            && node
                .pods
                .iter()
                .any(|p| disks_conflict(&pod.volumes.disks, &p.volumes.disks))
        {
            return Status::unschedulable(ERR_REASON_DISK_CONFLICT);
        }
        if found.claims_in_use > 0 {
            return Status::unschedulable(ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT);
        }
        Status::success()
    }
}

/// The plugin for the registry, with its place in kube-scheduler's default profile.
pub const SPEC: PluginSpec = PluginSpec {
    name: NAME,
    factory,
    default: Some(DefaultPlace {
        order: 82,
        weight: None,
    }),
    args: None,
};

/// Builds the plugin; it takes no arguments, and ignores any given (as kube-scheduler does
/// for plugins without an arguments type).
pub fn factory(_args: Option<&serde_json::Value>) -> Result<Arc<dyn Plugin>, ArgsError> {
    Ok(Arc::new(VolumeRestrictions))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1 as core;

    use super::*;
    use crate::cache::Cache;
    use crate::framework::{Code, may_help};
    use crate::model::volume::ClaimModel;
    use crate::testing::{PodBuilder, node, node_info, pod};

    /// A claim `name` in the default namespace with `modes`.
    fn claim(name: &str, modes: &str) -> ClaimModel {
        let c: core::PersistentVolumeClaim = serde_yaml::from_str(&format!(
            "{{metadata: {{name: {name}, namespace: default}}, spec: {{accessModes: [{modes}]}}}}"
        ))
        .expect("valid claim");
        ClaimModel::from_api(&c).expect("valid claim")
    }

    /// A pod with the given `spec.volumes` (YAML).
    fn with_volumes(name: &str, volumes: &str) -> PodBuilder {
        pod(name).spec_yaml(&format!("volumes: {volumes}"))
    }

    /// A snapshot with `claims`, and `placed` pods bound to node `n`.
    fn snapshot(claims: Vec<ClaimModel>, placed: &[Arc<PodInfo>]) -> Snapshot {
        let mut cache = Cache::new();
        cache.upsert_node(node("n").build());
        for c in claims {
            cache.upsert_claim(c);
        }
        for p in placed {
            cache.add_bound_pod(p.clone()).unwrap();
        }
        let mut snap = Snapshot::default();
        cache.update_snapshot(&mut snap);
        snap
    }

    /// PreFilter, then Filter on `node` unless PreFilter decided.
    fn run(p: &PodInfo, snap: &Snapshot, node: &NodeInfo) -> Status {
        let mut state = CycleState::new();
        let (result, status) = VolumeRestrictions.pre_filter(&mut state, p, snap);
        assert_eq!(result, PreFilterResult::default());
        if !status.is_success() {
            return status;
        }
        VolumeRestrictions.filter(&state, p, node)
    }

    const PD: &str = "[{name: d, gcePersistentDisk: {pdName: disk-1}}]";
    const PD_READ_ONLY: &str = "[{name: d, gcePersistentDisk: {pdName: disk-1, readOnly: true}}]";

    #[test]
    fn a_pod_without_disks_or_claims_skips() {
        let s = run(
            &pod("p").build(),
            &snapshot(vec![], &[]),
            &node_info(node("n").build(), &[]),
        );
        assert!(s.is_skip());
        let scratch = with_volumes("p", "[{name: s, emptyDir: {}}]").build();
        assert!(
            run(
                &scratch,
                &snapshot(vec![], &[]),
                &node_info(node("n").build(), &[])
            )
            .is_skip()
        );
    }

    #[test]
    fn an_inline_disk_mounted_by_another_pod_of_the_node_conflicts() {
        let running = with_volumes("running", PD).on("n").build();
        let n = node_info(node("n").build(), std::slice::from_ref(&running));
        let snap = snapshot(vec![], &[]);
        let s = run(&with_volumes("p", PD).build(), &snap, &n);
        assert_eq!(s.code(), Code::Unschedulable);
        assert_eq!(s.message(), "node(s) had no available disk");
        assert!(
            run(
                &with_volumes("p", PD).build(),
                &snap,
                &node_info(node("n").build(), &[])
            )
            .is_success()
        );
        let read_only = node_info(
            node("n").build(),
            &[with_volumes("running", PD_READ_ONLY).on("n").build()],
        );
        assert!(
            run(&with_volumes("p", PD_READ_ONLY).build(), &snap, &read_only).is_success(),
            "two read-only mounts of a GCE PD are fine"
        );
        let ebs = "[{name: d, awsElasticBlockStore: {volumeID: vol-1, readOnly: true}}]";
        let with_ebs = node_info(
            node("n").build(),
            &[with_volumes("running", ebs).on("n").build()],
        );
        assert!(
            run(&with_volumes("p", ebs).build(), &snap, &with_ebs).is_rejected(),
            "an EBS volume conflicts even read-only"
        );
    }

    #[test]
    fn a_missing_claim_rejects_the_pod_at_pre_filter() {
        let p = with_volumes("p", "[{name: d, persistentVolumeClaim: {claimName: data}}]").build();
        let s = run(
            &p,
            &snapshot(vec![], &[]),
            &node_info(node("n").build(), &[]),
        );
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(s.message(), "persistentvolumeclaim \"data\" not found");
        let ephemeral = with_volumes(
            "p",
            "[{name: s, ephemeral: {volumeClaimTemplate: {spec: {accessModes: [ReadWriteOnce]}}}}]",
        )
        .build();
        assert!(
            run(
                &ephemeral,
                &snapshot(vec![], &[]),
                &node_info(node("n").build(), &[])
            )
            .is_skip(),
            "ephemeral claims are not looked up"
        );
    }

    #[test]
    fn a_read_write_once_pod_claim_in_use_rejects_every_node() {
        let volumes = "[{name: d, persistentVolumeClaim: {claimName: data}}]";
        let user = with_volumes("user", volumes).on("n").build();
        let snap = snapshot(
            vec![claim("data", "ReadWriteOncePod")],
            std::slice::from_ref(&user),
        );
        let p = with_volumes("p", volumes).build();
        let s = run(&p, &snap, &node_info(node("other").build(), &[]));
        assert_eq!(s.code(), Code::Unschedulable);
        assert_eq!(
            s.message(),
            "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod"
        );
        let free = snapshot(vec![claim("data", "ReadWriteOncePod")], &[]);
        assert!(run(&p, &free, &node_info(node("n").build(), &[])).is_skip());
        let shared = snapshot(vec![claim("data", "ReadWriteOnce")], &[user]);
        assert!(
            run(&p, &shared, &node_info(node("n").build(), &[])).is_skip(),
            "ReadWriteOnce claims may be shared"
        );
    }

    #[test]
    fn the_disk_conflict_is_reported_before_the_claim_in_use() {
        let volumes = "[{name: d, gcePersistentDisk: {pdName: disk-1}}, {name: c, persistentVolumeClaim: {claimName: data}}]";
        let user = with_volumes("user", volumes).on("n").build();
        let snap = snapshot(
            vec![claim("data", "ReadWriteOncePod")],
            std::slice::from_ref(&user),
        );
        let n = node_info(node("n").build(), &[user]);
        let s = run(&with_volumes("p", volumes).build(), &snap, &n);
        assert_eq!(s.message(), "node(s) had no available disk");
    }

    #[test]
    fn missing_state_is_an_error() {
        let p = with_volumes("p", PD).build();
        let s =
            VolumeRestrictions.filter(&CycleState::new(), &p, &node_info(node("n").build(), &[]));
        assert_eq!(s.code(), Code::Error);
        assert_eq!(
            s.message(),
            "cannot read \"PreFilterVolumeRestrictions\" from cycleState"
        );
    }

    #[test]
    fn hints() {
        let events = VolumeRestrictions.events();
        let data = "[{name: d, persistentVolumeClaim: {claimName: data}}]";
        let p = with_volumes(
            "p",
            "[{name: d, gcePersistentDisk: {pdName: disk-1}}, {name: c, persistentVolumeClaim: {claimName: data}}]",
        )
        .build();
        let gone = |b: PodBuilder| {
            let gone = b.on("n").build();
            may_help(events, &ClusterChange::PodRemoved(&gone), &p)
        };
        assert!(gone(with_volumes("a", PD)));
        assert!(gone(with_volumes("a", data)));
        assert!(
            gone(with_volumes("a", PD_READ_ONLY)),
            "the pod's own mount is not read-only"
        );
        assert!(!gone(with_volumes(
            "a",
            "[{name: d, gcePersistentDisk: {pdName: disk-2}}]"
        )));
        assert!(!gone(with_volumes("a", data).namespace("other")));
        assert!(!gone(pod("a")));
        let new = claim("data", "ReadWriteOncePod");
        assert!(may_help(
            events,
            &ClusterChange::Claim {
                old: None,
                new: &new
            },
            &p
        ));
        let other = claim("logs", "ReadWriteOncePod");
        assert!(!may_help(
            events,
            &ClusterChange::Claim {
                old: None,
                new: &other
            },
            &p
        ));
        assert!(
            !may_help(
                events,
                &ClusterChange::Claim {
                    old: Some(&new),
                    new: &new
                },
                &p
            ),
            "claim updates are not registered"
        );
        let n = node("n").build();
        assert!(may_help(events, &ClusterChange::NodeAdded(&n), &p));
    }

    #[test]
    fn factory_builds_the_named_plugin() {
        let p = factory(None).unwrap();
        assert_eq!(p.name(), "VolumeRestrictions");
        assert!(p.as_pre_filter().is_some() && p.as_filter().is_some());
        assert_eq!(p.cache_state(), [Tracked::Volumes]);
    }
}
