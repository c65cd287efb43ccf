//! VolumeBinding: a pod's PersistentVolumeClaims must exist and be usable on the node. Bound
//! claims pin the pod to where their volumes can be reached; a claim of a
//! `WaitForFirstConsumer` class is matched, on each node, to the smallest available volume
//! that fits, or provisioned for the node where its class allows. Reserve keeps the choice
//! (assumed in the cache, so the next pod cannot take the same volume), and PreBind asks the
//! front end to write it and wait for the PV controller to complete the bindings.
//!
//! A claim to provision whose class's CSI driver reports storage capacity
//! (`CSIDriver.spec.storageCapacity`) needs, on the node, a CSIStorageCapacity of the class
//! with room for its request and a topology that selects the node.
//!
//! Score, as kube-scheduler 1.37's storage capacity scoring (on by default): for a pod with
//! claims that wait for their first consumer, how full the storage it would use on the node
//! is, per storage class, through a shape (emptiest best by default). In-tree volumes are not
//! translated to their CSI driver's topology before their node affinity is checked.

mod args;
mod matching;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::cache::NodeInfo;
use crate::cache::{Snapshot, Storage, Tracked};
use crate::framework::events::is_a_claim_of_the_pod;
use crate::framework::{
    ArgsError, ClusterChange, ClusterEvent, CycleState, DefaultPlace, EventHint, FilterPlugin,
    Plugin, PluginSpec, PreBindAction, PreBindPlugin, PreFilterPlugin, PreFilterResult,
    QueueingHint, ReservePlugin, ReservedVolumes, ScorePlugin, Status, VolumeBinding as Binding,
    decode_args,
};
use crate::model::PodInfo;
use crate::model::volume::{BindingMode, ClaimModel, StorageCapacityModel, StorageClassModel};
use crate::plugins::node_resources_fit::utilization;
use crate::plugins::shape::{broken_linear, scaled_to_node_scores};

pub use args::{DEFAULT_BIND_TIMEOUT_SECONDS, DEFAULT_SHAPE, VolumeBindingArgs};
pub use matching::{
    BoundClaim, ClassUse, DelayedClaim, ERR_BIND_CONFLICT, ERR_NODE_CONFLICT, ERR_NOT_ENOUGH_SPACE,
    ERR_PV_NOT_EXIST, NodeVolumes, PodClaims, StorageUse, find_matching_volume,
};

/// The name used in configuration files.
pub const NAME: &str = "VolumeBinding";

/// A pod with a claim that is not bound and whose class binds at once: the PV controller
/// must bind it first.
pub const ERR_UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";

/// Error when Filter runs without this plugin's PreFilter state.
pub const ERR_MISSING_STATE: &str = "reading \"PreFilterVolumeBinding\" from cycleState: not found";

/// The pod's claims as PreFilter sorted them, for Filter and Reserve.
#[derive(Debug, Clone)]
struct VolumeBindingState {
    claims: PodClaims,
    /// Every claim of the pod, for PreBind to wait on.
    keys: Vec<(String, String)>,
}

/// The VolumeBinding plugin.
#[derive(Debug, Clone)]
pub struct VolumeBinding {
    timeout: Duration,
    /// The scoring shape, scores scaled to node scores.
    shape: Vec<(i64, i64)>,
}

impl VolumeBinding {
    /// The plugin with `args`.
    pub fn new(args: &VolumeBindingArgs) -> Self {
        VolumeBinding {
            timeout: args.bind_timeout(),
            shape: scaled_to_node_scores(args.effective_shape()),
        }
    }

    /// kube-scheduler's score of the storage `used`: per class, the shape at the share of
    /// it the claims request (volumes bound here when there are any, else capacities
    /// provisioned from), averaged over the classes and rounded; 0 with none.
    fn storage_score(&self, used: &StorageUse) -> i64 {
        let mut classes: BTreeMap<&str, (i64, i64)> = BTreeMap::new();
        if used.bound.is_empty() {
            for u in &used.provisioned {
                let c = classes.entry(&u.class).or_default();
                c.0 = c.0.saturating_add(u.requested);
                // One capacity serves every claim of its class: not summed.
                c.1 = u.capacity;
            }
        } else {
            for u in &used.bound {
                let c = classes.entry(&u.class).or_default();
                c.0 = c.0.saturating_add(u.requested);
                c.1 = c.1.saturating_add(u.capacity);
            }
        }
        if classes.is_empty() {
            return 0;
        }
        let total: i64 = classes
            .values()
            .map(|&(requested, capacity)| {
                broken_linear(&self.shape, utilization(requested, capacity))
            })
            .sum();
        (total as f64 / classes.len() as f64).round() as i64
    }
}

fn allowed_topologies_changed(change: &ClusterChange<'_>, _: &PodInfo) -> QueueingHint {
    match change {
        ClusterChange::StorageClass {
            old: Some(old),
            new,
        } if old.allowed_topologies == new.allowed_topologies => QueueingHint::Skip,
        _ => QueueingHint::Queue,
    }
}

fn migrated_plugins_changed(change: &ClusterChange<'_>, _: &PodInfo) -> QueueingHint {
    match change {
        ClusterChange::CsiNode {
            old: Some(old),
            new,
        } if old.migrated == new.migrated => QueueingHint::Skip,
        _ => QueueingHint::Queue,
    }
}

/// A CSIDriver that stopped reporting capacity: provisioning is no longer held to it.
/// kube-scheduler asks this only for pods with an inline CSI volume of the driver; any pod
/// this plugin rejected may have been rejected for want of reported space, so gantry asks
/// it of all.
fn capacity_reporting_stopped(change: &ClusterChange<'_>, _: &PodInfo) -> QueueingHint {
    match change {
        ClusterChange::CsiDriver {
            old: Some(old),
            new,
        } if old.storage_capacity && !new.storage_capacity => QueueingHint::Queue,
        _ => QueueingHint::Skip,
    }
}

/// A CSIStorageCapacity that grew (or gained a size at all) may now have room.
fn capacity_grew(change: &ClusterChange<'_>, _: &PodInfo) -> QueueingHint {
    match change {
        ClusterChange::StorageCapacity {
            old: Some(old),
            new,
        } => match (old.limit, new.limit) {
            (_, None) => QueueingHint::Skip,
            (None, Some(_)) => QueueingHint::Queue,
            (Some(o), Some(n)) if n > o => QueueingHint::Queue,
            _ => QueueingHint::Skip,
        },
        _ => QueueingHint::Queue,
    }
}

/// kube-scheduler's registrations for VolumeBinding.
const EVENTS: [EventHint; 13] = [
    EventHint::any(ClusterEvent::StorageClassAdd),
    EventHint::when(ClusterEvent::StorageClassUpdate, allowed_topologies_changed),
    EventHint::when(ClusterEvent::ClaimAdd, is_a_claim_of_the_pod),
    EventHint::when(ClusterEvent::ClaimUpdate, is_a_claim_of_the_pod),
    EventHint::any(ClusterEvent::VolumeAdd),
    EventHint::any(ClusterEvent::VolumeUpdate),
    EventHint::any(ClusterEvent::NodeAdd),
    EventHint::any(ClusterEvent::NodeUpdate),
    EventHint::any(ClusterEvent::CsiNodeAdd),
    EventHint::when(ClusterEvent::CsiNodeUpdate, migrated_plugins_changed),
    EventHint::when(ClusterEvent::CsiDriverUpdate, capacity_reporting_stopped),
    EventHint::any(ClusterEvent::StorageCapacityAdd),
    EventHint::when(ClusterEvent::StorageCapacityUpdate, capacity_grew),
];

impl Plugin for VolumeBinding {
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

    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }

    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }

    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        Some(self)
    }

    fn as_pre_bind(&self) -> Option<&dyn PreBindPlugin> {
        Some(self)
    }
}

/// The CSIStorageCapacities of the claim's class with room for it, when provisioning it
/// is checked against reported capacity at all: the claim requests storage and its class's
/// provisioner is a CSIDriver that reports capacity (and the reports can be read).
fn capacities_with_room(
    claim: &ClaimModel,
    class: &StorageClassModel,
    storage: &Storage,
) -> Option<Vec<Arc<StorageCapacityModel>>> {
    (claim.storage_requested && storage.reports_capacity(&class.provisioner)).then(|| {
        storage
            .capacities_of_class(&class.name)
            .filter(|c| c.fits(claim.request))
            .cloned()
            .collect()
    })
}

/// Sorts the pod's claims out, or says why the pod cannot be scheduled anywhere.
fn sort_claims(pod: &PodInfo, storage: &Storage) -> Result<PodClaims, Status> {
    let mut claims = PodClaims::default();
    let mut unbound_immediate = false;
    for used in &pod.volumes.claims {
        let Some(claim) = storage.claim(&pod.namespace, &used.name) else {
            return Err(Status::unresolvable(if used.ephemeral {
                format!(
                    "waiting for ephemeral volume controller to create the persistentvolumeclaim \"{}\"",
                    used.name
                )
            } else {
                format!("persistentvolumeclaim \"{}\" not found", used.name)
            }));
        };
        if claim.lost {
            return Err(Status::unresolvable(format!(
                "persistentvolumeclaim \"{}\" bound to non-existent persistentvolume \"{}\"",
                claim.name, claim.volume_name
            )));
        }
        if claim.deleting {
            return Err(Status::unresolvable(format!(
                "persistentvolumeclaim \"{}\" is being deleted",
                claim.name
            )));
        }
        if used.ephemeral && claim.controller_uid.as_deref() != Some(pod.uid.as_str()) {
            return Err(Status::unresolvable(format!(
                "PVC {}/{} was not created for pod {}/{} (pod is not owner)",
                claim.namespace, claim.name, pod.namespace, pod.name
            )));
        }
        if claim.is_bound() {
            claims.bound.push(BoundClaim {
                volume: storage.volume(&claim.volume_name).cloned(),
                claim: claim.clone(),
            });
            continue;
        }
        let class = (!claim.class.is_empty())
            .then(|| storage.class(&claim.class))
            .flatten();
        match class {
            Some(c) if c.binding_mode.is_none() => {
                return Err(Status::error(format!(
                    "VolumeBindingMode not set for StorageClass \"{}\"",
                    c.name
                )));
            }
            Some(c)
                if c.binding_mode == Some(BindingMode::WaitForFirstConsumer)
                    && claim.volume_name.is_empty() =>
            {
                claims.delayed.push(DelayedClaim {
                    claim: claim.clone(),
                    class: c.clone(),
                    candidates: storage.volumes_of_class(&c.name).cloned().collect(),
                    capacities: capacities_with_room(claim, c, storage),
                });
            }
            _ => unbound_immediate = true,
        }
    }
    if unbound_immediate {
        return Err(Status::unresolvable(ERR_UNBOUND_IMMEDIATE));
    }
    claims.delayed.sort_by_key(|d| d.claim.request);
    Ok(claims)
}

impl PreFilterPlugin for VolumeBinding {
    /// Sorts the pod's claims out: a claim missing, lost, being deleted, or not bound while
    /// its class binds at once, rejects the pod on every node; a pod without claims skips
    /// the Filter.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        if pod.volumes.claims.is_empty() {
            return (PreFilterResult::default(), Status::skip());
        }
        match sort_claims(pod, snapshot.storage()) {
            Ok(claims) => {
                let keys = pod
                    .volumes
                    .claims
                    .iter()
                    .map(|c| (pod.namespace.clone(), c.name.clone()))
                    .collect();
                state.insert(VolumeBindingState { claims, keys });
                (PreFilterResult::default(), Status::success())
            }
            Err(status) => (PreFilterResult::default(), status),
        }
    }
}

impl FilterPlugin for VolumeBinding {
    /// Every node passes when each claim of the pod is bound to a known volume without node
    /// affinity.
    fn passes_all(&self, state: &CycleState, _pod: &PodInfo, _snapshot: &Snapshot) -> bool {
        state
            .get::<VolumeBindingState>()
            .is_some_and(|s| s.claims.fit_every_node())
    }

    fn filter(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.get::<VolumeBindingState>() else {
            return Status::error(ERR_MISSING_STATE);
        };
        match s.claims.check(&node.node.name, &node.node.labels) {
            NodeVolumes::Fits(..) => Status::success(),
            NodeVolumes::Rejected(reasons) => Status::with_reasons(
                crate::framework::Code::UnschedulableAndUnresolvable,
                reasons.into_iter().map(Into::into).collect(),
            ),
        }
    }
}

impl ScorePlugin for VolumeBinding {
    fn score(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(s) = state.get::<VolumeBindingState>() else {
            return Ok(0);
        };
        Ok(match s.claims.check(&node.node.name, &node.node.labels) {
            NodeVolumes::Fits(_, used) => self.storage_score(&used),
            NodeVolumes::Rejected(_) => 0,
        })
    }

    /// Only claims waiting for their first consumer use storage a node chooses: without
    /// them, every node scores 0.
    fn uniform_score(&self, state: &CycleState, _: &PodInfo, _: &Snapshot) -> Option<i64> {
        let waiting = state
            .get::<VolumeBindingState>()
            .is_some_and(|s| !s.claims.delayed.is_empty());
        (!waiting).then_some(0)
    }

    /// kube-scheduler does not normalize these scores.
    fn normalizes(&self) -> bool {
        false
    }
}

impl ReservePlugin for VolumeBinding {
    /// Keeps the volumes chosen on `node` (and the claims to provision there) in the cycle
    /// state; the scheduler assumes them in the cache with the pod.
    fn reserve(&self, state: &mut CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.get::<VolumeBindingState>() else {
            // No claims: PreFilter skipped the plugin.
            return Status::success();
        };
        match s.claims.check(&node.node.name, &node.node.labels) {
            NodeVolumes::Fits(decisions, _) => {
                if !decisions.is_empty() {
                    state.insert(ReservedVolumes(decisions));
                }
                Status::success()
            }
            NodeVolumes::Rejected(reasons) => Status::error(format!(
                "volumes no longer fit node {}: {}",
                node.node.name,
                reasons.join(", ")
            )),
        }
    }

    fn unreserve(&self, state: &mut CycleState, _: &PodInfo, _: &str) {
        state.remove::<ReservedVolumes>();
    }
}

impl PreBindPlugin for VolumeBinding {
    /// Asks for the chosen volumes and provisionings to be written, then for a wait until
    /// every claim of the pod is bound; nothing when all were bound already.
    fn pre_bind(
        &self,
        state: &CycleState,
        _: &PodInfo,
        _: &str,
    ) -> Result<Option<PreBindAction>, Status> {
        let Some(s) = state.get::<VolumeBindingState>() else {
            return Ok(None);
        };
        let decisions = state
            .get::<ReservedVolumes>()
            .map(|r| r.0.clone())
            .unwrap_or_default();
        if decisions.is_empty() {
            return Ok(None);
        }
        Ok(Some(PreBindAction::BindVolumes(Binding {
            decisions,
            claims: s.keys.clone(),
            timeout: self.timeout,
        })))
    }
}

/// The plugin for the registry, with its place in kube-scheduler's default profile.
pub const SPEC: PluginSpec = PluginSpec {
    name: NAME,
    factory,
    default: Some(DefaultPlace {
        order: 86,
        weight: None,
    }),
    args: Some(crate::framework::resolved_args::<VolumeBindingArgs>),
};

/// Builds the plugin from its arguments.
pub fn factory(args: Option<&serde_json::Value>) -> Result<Arc<dyn Plugin>, ArgsError> {
    let args: VolumeBindingArgs = decode_args(args)?;
    Ok(Arc::new(VolumeBinding::new(&args)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reported_capacity_changes_requeue_the_pods_they_may_help() {
        use crate::model::volume::{CsiDriverModel, StorageCapacityModel};
        let driver = |reports| CsiDriverModel {
            name: "csi.example.com".into(),
            storage_capacity: reports,
        };
        let capacity = |limit| StorageCapacityModel {
            namespace: "kube-system".into(),
            name: "cap".into(),
            class: "capped".into(),
            topology: crate::model::selector::LabelSelector::everything(),
            limit,
            capacity: limit,
        };
        let pod = crate::testing::pod("web-0").build();
        let (on, off) = (driver(true), driver(false));
        assert_eq!(
            capacity_reporting_stopped(
                &ClusterChange::CsiDriver {
                    old: Some(&on),
                    new: &off
                },
                &pod
            ),
            QueueingHint::Queue
        );
        assert_eq!(
            capacity_reporting_stopped(
                &ClusterChange::CsiDriver {
                    old: Some(&off),
                    new: &on
                },
                &pod
            ),
            QueueingHint::Skip
        );
        let grew = |old, new| {
            let (old, new) = (capacity(old), capacity(new));
            capacity_grew(
                &ClusterChange::StorageCapacity {
                    old: Some(&old),
                    new: &new,
                },
                &pod,
            )
        };
        assert_eq!(grew(Some(1), Some(2)), QueueingHint::Queue);
        assert_eq!(grew(None, Some(1)), QueueingHint::Queue);
        assert_eq!(grew(Some(2), Some(1)), QueueingHint::Skip);
        assert_eq!(grew(Some(2), None), QueueingHint::Skip);
    }
}
