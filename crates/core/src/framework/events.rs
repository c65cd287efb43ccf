//! Cluster events and queueing hints: what a plugin declares about the changes that can make a
//! pod it rejected schedulable (kube-scheduler's `EnqueueExtensions`), so that the queue moves
//! a parked pod back only when one of the plugins that rejected it says the change may help.

use crate::model::pod_group::PodGroupModel;
use crate::model::volume::{
    ClaimModel, CsiDriverModel, CsiNodeModel, StorageCapacityModel, StorageClassModel, VolumeModel,
};
use crate::model::{NodeModel, PodInfo};

/// The kind of a cluster change, as plugins declare it and metrics label it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClusterEvent {
    /// A node appeared.
    NodeAdd,
    /// A node changed (labels, taints, allocatable, cordon).
    NodeUpdate,
    /// A placed pod went away (deleted, finished, or its binding undone), freeing what it
    /// held.
    PodDelete,
    /// A pod was placed on a node.
    PodAdd,
    /// A placed pod changed (its labels).
    PodUpdate,
    /// Nodes' measured load changed (a metrics source reported).
    NodeLoadChange,
    /// A node gantry avoided because its HAMi lock was held for another pod is no longer
    /// avoided.
    NodeLockFree,
    /// A PersistentVolumeClaim appeared.
    ClaimAdd,
    /// A PersistentVolumeClaim changed.
    ClaimUpdate,
    /// A PersistentVolume appeared.
    VolumeAdd,
    /// A PersistentVolume changed.
    VolumeUpdate,
    /// A StorageClass appeared.
    StorageClassAdd,
    /// A StorageClass changed.
    StorageClassUpdate,
    /// A CSINode appeared.
    CsiNodeAdd,
    /// A CSINode changed.
    CsiNodeUpdate,
    /// A CSIDriver appeared.
    CsiDriverAdd,
    /// A CSIDriver changed.
    CsiDriverUpdate,
    /// A CSIStorageCapacity appeared.
    StorageCapacityAdd,
    /// A CSIStorageCapacity changed.
    StorageCapacityUpdate,
    /// A pending pod appeared (delivered only when some plugin registers it: a pending pod
    /// frees nothing, but can complete a group).
    PendingPodAdd,
    /// A PodGroup appeared.
    PodGroupAdd,
    /// A PodGroup changed.
    PodGroupUpdate,
    /// Something else that selectors read: a namespace's labels, a workload's selector.
    Other,
}

impl ClusterEvent {
    /// The event label today's kube-scheduler's `scheduler_queue_incoming_pods_total{event}`
    /// uses: the resource (group-qualified outside the core group) and the action, as its
    /// `ClusterEvent.Label()` writes them; node and assigned-pod changes of every kind are
    /// its general `Update`, and the events kube-scheduler does not have keep gantry's names.
    pub fn label(self) -> &'static str {
        match self {
            ClusterEvent::NodeAdd => "NodeAdd",
            ClusterEvent::NodeUpdate => "NodeUpdate",
            ClusterEvent::PodDelete => "AssignedPodDelete",
            ClusterEvent::PodAdd => "AssignedPodAdd",
            ClusterEvent::PodUpdate => "AssignedPodUpdate",
            ClusterEvent::Other => "*All",
            ClusterEvent::NodeLoadChange => "NodeLoadChange",
            ClusterEvent::NodeLockFree => "NodeLockFree",
            ClusterEvent::ClaimAdd => "PersistentVolumeClaimAdd",
            ClusterEvent::ClaimUpdate => "PersistentVolumeClaimUpdate",
            ClusterEvent::VolumeAdd => "PersistentVolumeAdd",
            ClusterEvent::VolumeUpdate => "PersistentVolumeUpdate",
            ClusterEvent::StorageClassAdd => "storage.k8s.io/StorageClassAdd",
            ClusterEvent::StorageClassUpdate => "storage.k8s.io/StorageClassUpdate",
            ClusterEvent::CsiNodeAdd => "storage.k8s.io/CSINodeAdd",
            ClusterEvent::CsiNodeUpdate => "storage.k8s.io/CSINodeUpdate",
            ClusterEvent::CsiDriverAdd => "storage.k8s.io/CSIDriverAdd",
            ClusterEvent::CsiDriverUpdate => "storage.k8s.io/CSIDriverUpdate",
            ClusterEvent::StorageCapacityAdd => "storage.k8s.io/CSIStorageCapacityAdd",
            ClusterEvent::StorageCapacityUpdate => "storage.k8s.io/CSIStorageCapacityUpdate",
            ClusterEvent::PendingPodAdd => "UnschedulablePodAdd",
            ClusterEvent::PodGroupAdd => "PodGroupAdd",
            ClusterEvent::PodGroupUpdate => "PodGroupUpdate",
        }
    }
}

/// A change of the cluster, with the objects it is about, for queueing hints to look at.
#[derive(Debug, Clone, Copy)]
pub enum ClusterChange<'a> {
    /// A node appeared.
    NodeAdded(&'a NodeModel),
    /// A node changed.
    NodeUpdated {
        /// As it was.
        old: &'a NodeModel,
        /// As it is.
        new: &'a NodeModel,
    },
    /// A pod was placed on a node (bound, or assumed by this scheduler).
    PodAdded(&'a PodInfo),
    /// A placed pod changed; as it is now.
    PodUpdated(&'a PodInfo),
    /// A placed pod went away; as it was.
    PodRemoved(&'a PodInfo),
    /// A pending pod appeared.
    PendingPodAdded(&'a PodInfo),
    /// A PodGroup appeared (`old` none) or changed.
    PodGroup {
        /// As it was.
        old: Option<&'a PodGroupModel>,
        /// As it is.
        new: &'a PodGroupModel,
    },
    /// Nodes' measured load changed.
    NodeLoadChanged,
    /// A node is no longer avoided for its HAMi lock.
    NodeLockFreed,
    /// A PersistentVolumeClaim appeared (`old` none) or changed.
    Claim {
        /// As it was.
        old: Option<&'a ClaimModel>,
        /// As it is.
        new: &'a ClaimModel,
    },
    /// A PersistentVolume appeared (`old` none) or changed.
    Volume {
        /// As it was.
        old: Option<&'a VolumeModel>,
        /// As it is.
        new: &'a VolumeModel,
    },
    /// A StorageClass appeared (`old` none) or changed.
    StorageClass {
        /// As it was.
        old: Option<&'a StorageClassModel>,
        /// As it is.
        new: &'a StorageClassModel,
    },
    /// A CSINode appeared (`old` none) or changed.
    CsiNode {
        /// As it was.
        old: Option<&'a CsiNodeModel>,
        /// As it is.
        new: &'a CsiNodeModel,
    },
    /// A CSIDriver appeared (`old` none) or changed.
    CsiDriver {
        /// As it was.
        old: Option<&'a CsiDriverModel>,
        /// As it is.
        new: &'a CsiDriverModel,
    },
    /// A CSIStorageCapacity appeared (`old` none) or changed.
    StorageCapacity {
        /// As it was.
        old: Option<&'a StorageCapacityModel>,
        /// As it is.
        new: &'a StorageCapacityModel,
    },
    /// A namespace's labels or a workload's selector changed.
    Other,
}

impl ClusterChange<'_> {
    /// The kind of the change.
    pub fn event(&self) -> ClusterEvent {
        match self {
            ClusterChange::NodeAdded(_) => ClusterEvent::NodeAdd,
            ClusterChange::NodeUpdated { .. } => ClusterEvent::NodeUpdate,
            ClusterChange::PodAdded(_) => ClusterEvent::PodAdd,
            ClusterChange::PodUpdated(_) => ClusterEvent::PodUpdate,
            ClusterChange::PodRemoved(_) => ClusterEvent::PodDelete,
            ClusterChange::PendingPodAdded(_) => ClusterEvent::PendingPodAdd,
            ClusterChange::PodGroup { old: None, .. } => ClusterEvent::PodGroupAdd,
            ClusterChange::PodGroup { .. } => ClusterEvent::PodGroupUpdate,
            ClusterChange::NodeLoadChanged => ClusterEvent::NodeLoadChange,
            ClusterChange::NodeLockFreed => ClusterEvent::NodeLockFree,
            ClusterChange::Claim { old: None, .. } => ClusterEvent::ClaimAdd,
            ClusterChange::Claim { .. } => ClusterEvent::ClaimUpdate,
            ClusterChange::Volume { old: None, .. } => ClusterEvent::VolumeAdd,
            ClusterChange::Volume { .. } => ClusterEvent::VolumeUpdate,
            ClusterChange::StorageClass { old: None, .. } => ClusterEvent::StorageClassAdd,
            ClusterChange::StorageClass { .. } => ClusterEvent::StorageClassUpdate,
            ClusterChange::CsiNode { old: None, .. } => ClusterEvent::CsiNodeAdd,
            ClusterChange::CsiNode { .. } => ClusterEvent::CsiNodeUpdate,
            ClusterChange::CsiDriver { old: None, .. } => ClusterEvent::CsiDriverAdd,
            ClusterChange::CsiDriver { .. } => ClusterEvent::CsiDriverUpdate,
            ClusterChange::StorageCapacity { old: None, .. } => ClusterEvent::StorageCapacityAdd,
            ClusterChange::StorageCapacity { .. } => ClusterEvent::StorageCapacityUpdate,
            ClusterChange::Other => ClusterEvent::Other,
        }
    }

    /// The node as it is now, for node changes.
    pub fn node(&self) -> Option<&NodeModel> {
        match self {
            ClusterChange::NodeAdded(n) | ClusterChange::NodeUpdated { new: n, .. } => Some(n),
            _ => None,
        }
    }
}

/// A plugin's verdict on one change for one pod it rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueingHint {
    /// The change may make the pod schedulable: retry it.
    Queue,
    /// The change cannot help the pod: leave it parked.
    Skip,
}

/// Looks at one change and one pod the plugin rejected.
pub type HintFn = fn(&ClusterChange<'_>, &PodInfo) -> QueueingHint;

/// A kind of change that can make a pod the plugin rejected schedulable, with the hint that
/// tells, for one change of that kind, whether it may (none: every such change may).
#[derive(Debug, Clone, Copy)]
pub struct EventHint {
    /// The kind of change.
    pub event: ClusterEvent,
    /// Whether one change of the kind may help one pod.
    pub hint: Option<HintFn>,
}

impl EventHint {
    /// Every change of `event` may help.
    pub const fn any(event: ClusterEvent) -> Self {
        EventHint { event, hint: None }
    }

    /// The changes of `event` for which `hint` says so.
    pub const fn when(event: ClusterEvent, hint: HintFn) -> Self {
        EventHint {
            event,
            hint: Some(hint),
        }
    }
}

/// Whether `change` may help `pod`, by the hints a plugin declared.
pub fn may_help(hints: &[EventHint], change: &ClusterChange<'_>, pod: &PodInfo) -> bool {
    let event = change.event();
    hints
        .iter()
        .any(|h| h.event == event && h.hint.is_none_or(|f| f(change, pod) == QueueingHint::Queue))
}

/// A hint for claim changes: queue the pod when the claim is one of its own (named in a
/// `persistentVolumeClaim` volume, or made for one of its ephemeral volumes).
pub fn is_a_claim_of_the_pod(change: &ClusterChange<'_>, pod: &PodInfo) -> QueueingHint {
    claim_hint(change, pod, true)
}

/// A hint for claim changes: queue the pod when the claim is one its `persistentVolumeClaim`
/// volumes name (the claims of ephemeral volumes left out, as kube-scheduler's VolumeZone and
/// VolumeRestrictions leave them).
pub fn is_a_named_claim_of_the_pod(change: &ClusterChange<'_>, pod: &PodInfo) -> QueueingHint {
    claim_hint(change, pod, false)
}

fn claim_hint(change: &ClusterChange<'_>, pod: &PodInfo, ephemeral: bool) -> QueueingHint {
    let ClusterChange::Claim { new, .. } = change else {
        return QueueingHint::Queue;
    };
    let uses = pod
        .volumes
        .claims
        .iter()
        .any(|c| (ephemeral || !c.ephemeral) && c.name == new.name);
    if new.namespace == pod.namespace && uses {
        QueueingHint::Queue
    } else {
        QueueingHint::Skip
    }
}

/// Node additions and updates: what a plugin that reads only the node's object declares.
pub const NODE_CHANGES: [EventHint; 2] = [
    EventHint::any(ClusterEvent::NodeAdd),
    EventHint::any(ClusterEvent::NodeUpdate),
];

/// Node additions and updates, and placed pods going away: what a plugin that counts what
/// the pods on a node hold declares.
pub const NODE_CHANGES_AND_POD_DELETES: [EventHint; 3] = [
    EventHint::any(ClusterEvent::NodeAdd),
    EventHint::any(ClusterEvent::NodeUpdate),
    EventHint::any(ClusterEvent::PodDelete),
];

/// Every change to placed pods, nodes, namespaces and workload selectors: what a plugin that
/// counts placed pods by their labels over a topology declares (pods placed, changed or gone
/// change the counts; nodes appearing or relabelled change the topology; namespaces and
/// workload selectors change which pods its terms select).
pub const POD_AND_NODE_CHANGES: [EventHint; 6] = [
    EventHint::any(ClusterEvent::PodAdd),
    EventHint::any(ClusterEvent::PodUpdate),
    EventHint::any(ClusterEvent::PodDelete),
    EventHint::any(ClusterEvent::NodeAdd),
    EventHint::any(ClusterEvent::NodeUpdate),
    EventHint::any(ClusterEvent::Other),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pod};

    fn cordoned_only(change: &ClusterChange<'_>, _: &PodInfo) -> QueueingHint {
        match change.node() {
            Some(n) if !n.unschedulable => QueueingHint::Queue,
            _ => QueueingHint::Skip,
        }
    }

    #[test]
    fn a_change_helps_when_a_hint_of_its_kind_says_so() {
        let hints = [
            EventHint::when(ClusterEvent::NodeUpdate, cordoned_only),
            EventHint::any(ClusterEvent::PodDelete),
        ];
        let p = pod("a").build();
        let open = node("n").build();
        let cordoned = node("n").unschedulable().build();
        let update = |new| ClusterChange::NodeUpdated { old: &open, new };
        assert!(may_help(&hints, &update(&open), &p));
        assert!(!may_help(&hints, &update(&cordoned), &p));
        assert!(may_help(&hints, &ClusterChange::PodRemoved(&p), &p));
        assert!(!may_help(&hints, &ClusterChange::PodAdded(&p), &p));
        assert!(!may_help(&hints, &ClusterChange::NodeAdded(&open), &p));
    }

    /// The labels are today's kube-scheduler's (`<resource><action>`, the resource
    /// group-qualified outside the core group), which dashboards and alerts match on.
    #[test]
    fn labels_are_todays_kube_schedulers() {
        for (event, label) in [
            (ClusterEvent::PodDelete, "AssignedPodDelete"),
            (ClusterEvent::PendingPodAdd, "UnschedulablePodAdd"),
            (ClusterEvent::ClaimAdd, "PersistentVolumeClaimAdd"),
            (ClusterEvent::VolumeUpdate, "PersistentVolumeUpdate"),
            (
                ClusterEvent::StorageClassAdd,
                "storage.k8s.io/StorageClassAdd",
            ),
            (ClusterEvent::CsiNodeUpdate, "storage.k8s.io/CSINodeUpdate"),
            (
                ClusterEvent::StorageCapacityAdd,
                "storage.k8s.io/CSIStorageCapacityAdd",
            ),
            (ClusterEvent::Other, "*All"),
        ] {
            assert_eq!(event.label(), label, "{event:?}");
        }
    }
}
