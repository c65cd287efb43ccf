//! The parts of the cluster state that only some plugins read. The cache keeps one only when
//! a plugin of some profile declares it (the framework's `Plugin::cache_state`), and the
//! adapter watches what feeds it only then: a profile without pod affinity or spreading pays
//! for no pod label index, one without namespace selectors watches no namespaces, one
//! without preemption no PodDisruptionBudgets.

use std::fmt;

/// One part of the cluster state that the cache keeps only on request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tracked {
    /// Placed pods indexed by label, and the nodes running pods with affinity terms
    /// ([`crate::cache::Snapshot::pod_index`], `for_each_match`,
    /// `nodes_with_affinity_pods`): pod affinity and topology spreading.
    PodLabels,
    /// On how many nodes each image is ([`crate::cache::Snapshot::nodes_with_image`]).
    ImageSpread,
    /// Namespaces' labels, for namespace selectors
    /// ([`crate::cache::Snapshot::namespace_labels`]).
    NamespaceLabels,
    /// Services' and controllers' selectors, for default topology spreading
    /// ([`crate::cache::Snapshot::workloads`]).
    Workloads,
    /// Nodes' measured load ([`crate::cache::NodeInfo::load`]).
    NodeLoad,
    /// Claims, volumes, storage classes and CSI nodes, and the claims placed pods use
    /// ([`crate::cache::Snapshot::storage`]).
    Volumes,
    /// PodDisruptionBudgets, for preemption's choice of victims
    /// ([`crate::cache::Snapshot::disruption_budgets`]).
    DisruptionBudgets,
    /// PodGroups and the pods naming each, for gang scheduling
    /// ([`crate::cache::Snapshot::pod_groups`]).
    PodGroups,
    /// DeviceClasses, ResourceSlices and ResourceClaims, for Dynamic Resource Allocation
    /// ([`crate::cache::Cache::dynamic_resources`]).
    DynamicResources,
}

impl Tracked {
    /// Every part, in declaration order.
    pub const ALL: [Tracked; 9] = [
        Tracked::PodLabels,
        Tracked::ImageSpread,
        Tracked::NamespaceLabels,
        Tracked::Workloads,
        Tracked::NodeLoad,
        Tracked::Volumes,
        Tracked::DisruptionBudgets,
        Tracked::PodGroups,
        Tracked::DynamicResources,
    ];

    fn bit(self) -> u16 {
        1 << self as u16
    }
}

impl fmt::Display for Tracked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Tracked::PodLabels => "pods by label",
            Tracked::ImageSpread => "image spread",
            Tracked::NamespaceLabels => "namespace labels",
            Tracked::Workloads => "workload selectors",
            Tracked::NodeLoad => "node load",
            Tracked::Volumes => "storage",
            Tracked::DisruptionBudgets => "disruption budgets",
            Tracked::PodGroups => "pod groups",
            Tracked::DynamicResources => "dynamic resources",
        })
    }
}

/// A set of [`Tracked`] parts.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct TrackedSet(u16);

impl TrackedSet {
    /// No part: the cache keeps nodes, pods and their requests only.
    pub const NONE: TrackedSet = TrackedSet(0);

    /// Every part.
    pub fn all() -> TrackedSet {
        Self::of(&Tracked::ALL)
    }

    /// The set of `parts`.
    pub fn of(parts: &[Tracked]) -> TrackedSet {
        TrackedSet(parts.iter().fold(0, |bits, t| bits | t.bit()))
    }

    /// True when `part` is in the set.
    pub fn contains(self, part: Tracked) -> bool {
        self.0 & part.bit() != 0
    }

    /// Both sets' parts.
    pub fn union(self, other: TrackedSet) -> TrackedSet {
        TrackedSet(self.0 | other.0)
    }

    /// The parts not in the set.
    pub fn complement(self) -> TrackedSet {
        TrackedSet(!self.0 & TrackedSet::all().0)
    }

    /// The parts in the set, in declaration order.
    pub fn iter(self) -> impl Iterator<Item = Tracked> {
        Tracked::ALL.into_iter().filter(move |t| self.contains(*t))
    }
}

impl fmt::Debug for TrackedSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl FromIterator<TrackedSet> for TrackedSet {
    fn from_iter<I: IntoIterator<Item = TrackedSet>>(iter: I) -> Self {
        iter.into_iter().fold(TrackedSet::NONE, TrackedSet::union)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_hold_what_they_were_built_of() {
        let s = TrackedSet::of(&[Tracked::ImageSpread, Tracked::NodeLoad]);
        assert!(s.contains(Tracked::ImageSpread) && s.contains(Tracked::NodeLoad));
        assert!(!s.contains(Tracked::PodLabels));
        assert_eq!(
            s.iter().collect::<Vec<_>>(),
            [Tracked::ImageSpread, Tracked::NodeLoad]
        );
        let u: TrackedSet = [s, TrackedSet::of(&[Tracked::Workloads])]
            .into_iter()
            .collect();
        assert_eq!(u.iter().count(), 3);
        assert_eq!(TrackedSet::all().iter().collect::<Vec<_>>(), Tracked::ALL);
        assert_eq!(TrackedSet::NONE.iter().count(), 0);
        assert_eq!(s.complement().union(s), TrackedSet::all());
        assert_eq!(TrackedSet::all().complement(), TrackedSet::NONE);
    }
}
