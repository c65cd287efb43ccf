//! PodGroups and the pods that name each (by
//! [`crate::model::pod_group::POD_GROUP_LABEL`]), for gang scheduling: how
//! many pods a group has, how many of them are gated, and how many are placed (bound, or
//! assumed by this scheduler: waiting at Permit counts). Persistent maps, so that a snapshot
//! shares them and a change copies only the path to one entry.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::model::PodInfo;
use crate::model::pod_group::PodGroupModel;

/// How far a group has got, for the decision log: its pods, how many are placed (bound
/// or assumed), and how many of those wait at Permit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupProgress {
    /// `namespace/name`.
    pub group: String,
    /// `minMember`.
    pub min_member: u32,
    /// Pods naming the group.
    pub pods: usize,
    /// Of them, placed on a node (waiting at Permit included).
    pub placed: usize,
    /// Of those, waiting at Permit for the rest.
    pub waiting: usize,
}

/// A pod of a group, as the group counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Member {
    /// Bound to a node, or assumed there.
    pub placed: bool,
    /// Held by scheduling gates.
    pub gated: bool,
}

/// The pods naming one group, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Members {
    pods: imbl::OrdMap<String, Member>,
}

impl Members {
    /// Pods naming the group, whatever their state.
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    /// True when no pod names the group.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// Of them, placed on a node.
    pub fn placed(&self) -> usize {
        self.pods.values().filter(|m| m.placed).count()
    }

    /// Of them, held by scheduling gates.
    pub fn gated(&self) -> usize {
        self.pods.values().filter(|m| m.gated).count()
    }

    /// The pods not placed yet, by name.
    pub fn pending(&self) -> impl Iterator<Item = &str> {
        self.pods
            .iter()
            .filter(|(_, m)| !m.placed)
            .map(|(n, _)| n.as_str())
    }
}

/// PodGroups by (namespace, name), and the pods of each.
#[derive(Debug, Clone, Default)]
pub struct PodGroups {
    groups: imbl::OrdMap<(String, String), Arc<PodGroupModel>>,
    members: imbl::OrdMap<(String, String), Members>,
    /// PodGroups that exist but cannot be read, with why.
    unreadable: imbl::OrdMap<(String, String), Arc<str>>,
}

impl PodGroups {
    /// The PodGroup `namespace/name`, if it exists.
    pub fn group(&self, namespace: &str, name: &str) -> Option<&Arc<PodGroupModel>> {
        self.groups.get(&(namespace.to_string(), name.to_string()))
    }

    /// Every PodGroup, ordered by namespace and name.
    pub fn groups(&self) -> impl Iterator<Item = &Arc<PodGroupModel>> {
        self.groups.values()
    }

    /// The pods naming group `namespace/name` (empty when none does).
    pub fn members(&self, namespace: &str, name: &str) -> Members {
        self.members
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
            .unwrap_or_default()
    }

    /// Why the PodGroup `namespace/name` cannot be read, when it exists but cannot be.
    pub fn unreadable(&self, namespace: &str, name: &str) -> Option<&str> {
        self.unreadable
            .get(&(namespace.to_string(), name.to_string()))
            .map(|e| &**e)
    }

    pub(super) fn upsert_group(&mut self, group: PodGroupModel) {
        let key = (group.namespace.clone(), group.name.clone());
        self.unreadable.remove(&key);
        self.groups.insert(key, Arc::new(group));
    }

    pub(super) fn remove_group(&mut self, namespace: &str, name: &str) -> bool {
        let key = (namespace.to_string(), name.to_string());
        let unreadable = self.unreadable.remove(&key).is_some();
        self.groups.remove(&key).is_some() || unreadable
    }

    /// The PodGroup `namespace/name` exists but cannot be read (`error`): absent, with why.
    pub(super) fn set_unreadable(&mut self, namespace: &str, name: &str, error: &str) {
        let key = (namespace.to_string(), name.to_string());
        self.groups.remove(&key);
        self.unreadable.insert(key, Arc::from(error));
    }

    /// Records `pod` as a member of `group` with `member`'s state.
    pub(super) fn set_member(&mut self, pod: &PodInfo, group: &str, member: Member) {
        let key = (pod.namespace.clone(), group.to_string());
        self.members
            .entry(key)
            .or_default()
            .pods
            .insert(pod.name.clone(), member);
    }

    /// The state `pod` has in `group`, if it is recorded there.
    pub(super) fn member(&self, pod: &PodInfo, group: &str) -> Option<Member> {
        self.members
            .get(&(pod.namespace.clone(), group.to_string()))?
            .pods
            .get(&pod.name)
            .copied()
    }

    /// Forgets the pod `namespace/name` of `group`.
    pub(super) fn remove_member(&mut self, namespace: &str, name: &str, group: &str) {
        let key = (namespace.to_string(), group.to_string());
        let now_empty = match self.members.get_mut(&key) {
            Some(m) => {
                m.pods.remove(name);
                m.pods.is_empty()
            }
            None => false,
        };
        if now_empty {
            self.members.remove(&key);
        }
    }
}
