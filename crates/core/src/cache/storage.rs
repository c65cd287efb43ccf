//! Claims, volumes, storage classes, CSI nodes, CSI drivers and storage capacities, as the
//! volume plugins read them, with the
//! scheduler's assumptions over them (a volume it chose for a claim, a node it chose for a
//! claim to be provisioned) until the API reflects them.
//!
//! Persistent maps: a snapshot shares them, and a change copies only a path, so a cluster
//! with thousands of volumes pays nothing per cycle for a volume that changed.

use std::sync::Arc;

use imbl::OrdSet;

use super::SharedMap;

use crate::model::volume::{
    ClaimModel, ClaimRef, CsiDriverModel, CsiNodeModel, StorageCapacityModel, StorageClassModel,
    VolumeModel,
};

/// A claim's `namespace` and `name`.
pub type ClaimKey = (String, String);

/// What the scheduler decided for one claim of a pod it placed, until the PV controller
/// completes it. Each carries what the write needs: the uid it names and the version of the
/// object it was decided on (the write's precondition, so a volume taken meanwhile by
/// someone else is not taken over).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeDecision {
    /// Bind the claim to this existing volume (its `claimRef` is set to the claim).
    Bind {
        /// The claim.
        claim: ClaimKey,
        /// The claim's uid.
        claim_uid: String,
        /// The volume.
        volume: String,
        /// The volume's resourceVersion.
        volume_version: String,
    },
    /// Provision a volume for the claim on this node (its `selected-node` annotation).
    Provision {
        /// The claim.
        claim: ClaimKey,
        /// The claim's resourceVersion.
        claim_version: String,
        /// The node.
        node: String,
    },
}

/// CSINodes by node name.
pub(super) type CsiNodes = SharedMap<String, Arc<CsiNodeModel>>;

/// The storage objects the cache holds.
#[derive(Debug, Clone, Default)]
pub struct Storage {
    claims: SharedMap<ClaimKey, Arc<ClaimModel>>,
    volumes: SharedMap<String, Arc<VolumeModel>>,
    classes: SharedMap<String, Arc<StorageClassModel>>,
    csi_nodes: CsiNodes,
    /// How many of `csi_nodes` set an attach limit for some driver.
    limited_csi_nodes: usize,
    csi_drivers: SharedMap<String, Arc<CsiDriverModel>>,
    /// CSIStorageCapacities by storage class, then by namespace and name.
    capacities: SharedMap<String, SharedMap<(String, String), Arc<StorageCapacityModel>>>,
    /// The API server does not serve CSIStorageCapacity: no capacity is known to check.
    capacities_not_served: bool,
    /// Volume names by storage class, for matching claims to volumes.
    volumes_by_class: SharedMap<String, OrdSet<String>>,
    /// Claims used by placed (bound or assumed) pods, with the number of such pods.
    claims_in_use: SharedMap<ClaimKey, u32>,
    /// Volumes as the scheduler assumed them (reserved for a claim), over the API's.
    assumed_volumes: SharedMap<String, Arc<VolumeModel>>,
    /// Claims as the scheduler assumed them (a node selected), over the API's.
    assumed_claims: SharedMap<ClaimKey, Arc<ClaimModel>>,
}

impl Storage {
    /// The claim `namespace/name`, as assumed if the scheduler assumed something for it.
    pub fn claim(&self, namespace: &str, name: &str) -> Option<&Arc<ClaimModel>> {
        let key = (namespace.to_string(), name.to_string());
        self.assumed_claims
            .get(&key)
            .or_else(|| self.claims.get(&key))
    }

    /// The volume `name`, as assumed if the scheduler reserved it.
    pub fn volume(&self, name: &str) -> Option<&Arc<VolumeModel>> {
        self.assumed_volumes
            .get(name)
            .or_else(|| self.volumes.get(name))
    }

    /// The volume `name` as the API last reported it.
    pub fn api_volume(&self, name: &str) -> Option<&Arc<VolumeModel>> {
        self.volumes.get(name)
    }

    /// The claim `namespace/name` as the API last reported it.
    pub fn api_claim(&self, namespace: &str, name: &str) -> Option<&Arc<ClaimModel>> {
        self.claims.get(&(namespace.to_string(), name.to_string()))
    }

    /// The storage class `name`.
    pub fn class(&self, name: &str) -> Option<&Arc<StorageClassModel>> {
        self.classes.get(name)
    }

    /// The CSINode of node `name`.
    pub fn csi_node(&self, name: &str) -> Option<&Arc<CsiNodeModel>> {
        self.csi_nodes.get(name)
    }

    /// The CSINodes, for a snapshot to tell whether they changed.
    pub(super) fn csi_node_map(&self) -> &CsiNodes {
        &self.csi_nodes
    }

    /// True when some CSINode sets an attach limit: without one, no node limits the
    /// volumes it attaches.
    pub fn any_attach_limit(&self) -> bool {
        self.limited_csi_nodes > 0
    }

    /// The CSIDriver `name`.
    pub fn csi_driver(&self, name: &str) -> Option<&Arc<CsiDriverModel>> {
        self.csi_drivers.get(name)
    }

    /// True when the CSI driver `name` reports the capacity it has and the reports can be
    /// read: provisioning through it is then held to them.
    pub fn reports_capacity(&self, driver: &str) -> bool {
        !self.capacities_not_served
            && self
                .csi_drivers
                .get(driver)
                .is_some_and(|d| d.storage_capacity)
    }

    /// The CSIStorageCapacities of storage class `class`.
    pub fn capacities_of_class<'a>(
        &'a self,
        class: &str,
    ) -> impl Iterator<Item = &'a Arc<StorageCapacityModel>> {
        self.capacities
            .get(class)
            .into_iter()
            .flat_map(|c| c.values())
    }

    /// The CSIStorageCapacity `namespace/name`.
    pub fn capacity(&self, namespace: &str, name: &str) -> Option<&Arc<StorageCapacityModel>> {
        let key = (namespace.to_string(), name.to_string());
        self.capacities.values().find_map(|c| c.get(&key))
    }

    /// The volumes of storage class `class` (as assumed), in name order.
    pub fn volumes_of_class<'a>(
        &'a self,
        class: &str,
    ) -> impl Iterator<Item = &'a Arc<VolumeModel>> {
        self.volumes_by_class
            .get(class)
            .into_iter()
            .flat_map(|names| names.iter())
            .filter_map(|n| self.volume(n))
    }

    /// True when a placed pod uses the claim `namespace/name`.
    pub fn claim_in_use(&self, namespace: &str, name: &str) -> bool {
        self.claims_in_use
            .contains_key(&(namespace.to_string(), name.to_string()))
    }

    /// Every claim, as assumed where the scheduler assumed something for it, in no
    /// particular order (for writing the state out).
    pub fn claims(&self) -> impl Iterator<Item = &Arc<ClaimModel>> {
        self.claims
            .iter()
            .map(|(key, c)| self.assumed_claims.get(key).unwrap_or(c))
    }

    /// Every volume, as assumed where the scheduler reserved it, in no particular order.
    pub fn volumes(&self) -> impl Iterator<Item = &Arc<VolumeModel>> {
        self.volumes
            .iter()
            .map(|(name, v)| self.assumed_volumes.get(name).unwrap_or(v))
    }

    /// Every storage class, in no particular order.
    pub fn classes(&self) -> impl Iterator<Item = &Arc<StorageClassModel>> {
        self.classes.values()
    }

    /// Every CSINode, in no particular order.
    pub fn csi_nodes(&self) -> impl Iterator<Item = &Arc<CsiNodeModel>> {
        self.csi_nodes.values()
    }

    /// Every CSIDriver, in no particular order.
    pub fn csi_drivers(&self) -> impl Iterator<Item = &Arc<CsiDriverModel>> {
        self.csi_drivers.values()
    }

    /// Every CSIStorageCapacity, in no particular order.
    pub fn capacities(&self) -> impl Iterator<Item = &Arc<StorageCapacityModel>> {
        self.capacities.values().flat_map(|c| c.values())
    }

    /// Number of claims known.
    pub fn claim_count(&self) -> usize {
        self.claims.len()
    }

    /// Number of volumes known.
    pub fn volume_count(&self) -> usize {
        self.volumes.len()
    }

    pub(super) fn upsert_claim(&mut self, claim: ClaimModel) {
        let key = (claim.namespace.clone(), claim.name.clone());
        // A newer version from the API supersedes what was assumed over the older one.
        if self
            .assumed_claims
            .get(&key)
            .is_some_and(|a| a.resource_version != claim.resource_version)
        {
            self.assumed_claims.remove(&key);
        }
        self.claims.insert(key, Arc::new(claim));
    }

    pub(super) fn remove_claim(&mut self, namespace: &str, name: &str) {
        let key = (namespace.to_string(), name.to_string());
        self.claims.remove(&key);
        self.assumed_claims.remove(&key);
    }

    pub(super) fn upsert_volume(&mut self, volume: VolumeModel) {
        let name = volume.name.clone();
        if let Some(old) = self.volumes.get(&name)
            && old.class != volume.class
        {
            self.unindex(&old.class.clone(), &name);
        }
        if self
            .assumed_volumes
            .get(&name)
            .is_some_and(|a| a.resource_version != volume.resource_version)
        {
            self.assumed_volumes.remove(&name);
        }
        self.volumes_by_class
            .entry(volume.class.clone())
            .or_default()
            .insert(name.clone());
        self.volumes.insert(name, Arc::new(volume));
    }

    pub(super) fn remove_volume(&mut self, name: &str) {
        if let Some(old) = self.volumes.remove(name) {
            self.unindex(&old.class, name);
        }
        self.assumed_volumes.remove(name);
    }

    fn unindex(&mut self, class: &str, name: &str) {
        if let Some(set) = self.volumes_by_class.get_mut(class) {
            set.remove(name);
            if set.is_empty() {
                self.volumes_by_class.remove(class);
            }
        }
    }

    pub(super) fn upsert_class(&mut self, class: StorageClassModel) {
        self.classes.insert(class.name.clone(), Arc::new(class));
    }

    pub(super) fn remove_class(&mut self, name: &str) {
        self.classes.remove(name);
    }

    pub(super) fn upsert_csi_node(&mut self, node: CsiNodeModel) {
        self.limited_csi_nodes += usize::from(node.has_limit());
        if let Some(old) = self.csi_nodes.insert(node.name.clone(), Arc::new(node)) {
            self.limited_csi_nodes -= usize::from(old.has_limit());
        }
    }

    pub(super) fn remove_csi_node(&mut self, name: &str) {
        if let Some(old) = self.csi_nodes.remove(name) {
            self.limited_csi_nodes -= usize::from(old.has_limit());
        }
    }

    pub(super) fn upsert_csi_driver(&mut self, driver: CsiDriverModel) {
        self.csi_drivers
            .insert(driver.name.clone(), Arc::new(driver));
    }

    pub(super) fn remove_csi_driver(&mut self, name: &str) {
        self.csi_drivers.remove(name);
    }

    pub(super) fn set_capacities_not_served(&mut self) {
        self.capacities_not_served = true;
    }

    pub(super) fn upsert_capacity(&mut self, capacity: StorageCapacityModel) {
        let key = (capacity.namespace.clone(), capacity.name.clone());
        self.remove_capacity(&key.0, &key.1);
        self.capacities
            .entry(capacity.class.clone())
            .or_default()
            .insert(key, Arc::new(capacity));
    }

    pub(super) fn remove_capacity(&mut self, namespace: &str, name: &str) {
        let key = (namespace.to_string(), name.to_string());
        let class = self
            .capacities
            .iter()
            .find(|(_, c)| c.contains_key(&key))
            .map(|(class, _)| class.clone());
        if let Some(class) = class
            && let Some(c) = self.capacities.get_mut(&class)
        {
            c.remove(&key);
            if c.is_empty() {
                self.capacities.remove(&class);
            }
        }
    }

    /// Counts the claims of a pod placed (`delta` 1) or removed (-1) in `namespace`.
    pub(super) fn count_claims<'a>(
        &mut self,
        namespace: &str,
        claims: impl Iterator<Item = &'a str>,
        placed: bool,
    ) {
        for name in claims {
            let key = (namespace.to_string(), name.to_string());
            match (placed, self.claims_in_use.get_mut(&key)) {
                (true, Some(n)) => *n += 1,
                (true, None) => {
                    self.claims_in_use.insert(key, 1);
                }
                (false, Some(n)) if *n > 1 => *n -= 1,
                (false, Some(_)) => {
                    self.claims_in_use.remove(&key);
                }
                (false, None) => {}
            }
        }
    }

    /// Assumes `decisions`: each chosen volume is reserved for its claim, each claim to
    /// provision gets its node. Returns the decisions it could not assume (a volume or
    /// claim gone, or a volume reserved for another claim meanwhile): the caller gives up
    /// the attempt and reverts the rest.
    pub(super) fn assume(&mut self, decisions: &[VolumeDecision]) -> Result<(), String> {
        for d in decisions {
            match d {
                VolumeDecision::Bind { claim, volume, .. } => {
                    let Some(c) = self.claim(&claim.0, &claim.1).cloned() else {
                        return Err(format!("persistentvolumeclaim \"{}\" not found", claim.1));
                    };
                    let Some(v) = self.volume(volume).cloned() else {
                        return Err(format!("persistentvolume \"{volume}\" not found"));
                    };
                    match &v.claim_ref {
                        Some(r) if r.is_to(&c) => continue,
                        Some(_) => {
                            return Err(format!(
                                "persistentvolume \"{volume}\" is reserved for another claim"
                            ));
                        }
                        None => {}
                    }
                    let mut assumed = (*v).clone();
                    assumed.claim_ref = Some(ClaimRef {
                        namespace: c.namespace.clone(),
                        name: c.name.clone(),
                        uid: c.uid.clone(),
                    });
                    self.assumed_volumes
                        .insert(volume.clone(), Arc::new(assumed));
                }
                VolumeDecision::Provision { claim, node, .. } => {
                    let Some(c) = self.claim(&claim.0, &claim.1).cloned() else {
                        return Err(format!("persistentvolumeclaim \"{}\" not found", claim.1));
                    };
                    let mut assumed = (*c).clone();
                    assumed.selected_node = Some(node.clone());
                    self.assumed_claims.insert(claim.clone(), Arc::new(assumed));
                }
            }
        }
        Ok(())
    }

    /// Drops what was assumed for `decisions` (the binding failed, or the pod went away):
    /// the API's objects count again.
    pub(super) fn revert(&mut self, decisions: &[VolumeDecision]) {
        for d in decisions {
            match d {
                VolumeDecision::Bind { volume, .. } => {
                    self.assumed_volumes.remove(volume);
                }
                VolumeDecision::Provision { claim, .. } => {
                    self.assumed_claims.remove(claim);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::selector::LabelSelector;

    fn capacity(name: &str, class: &str) -> StorageCapacityModel {
        StorageCapacityModel {
            namespace: "kube-system".into(),
            name: name.into(),
            class: class.into(),
            topology: LabelSelector::everything(),
            limit: Some(1),
            capacity: Some(1),
        }
    }

    #[test]
    fn capacities_are_found_by_class_and_follow_a_change_of_class() {
        let mut s = Storage::default();
        s.upsert_capacity(capacity("a", "fast"));
        s.upsert_capacity(capacity("b", "fast"));
        s.upsert_capacity(capacity("a", "slow"));
        let names = |s: &Storage, class| {
            let mut n: Vec<String> = s
                .capacities_of_class(class)
                .map(|c| c.name.clone())
                .collect();
            n.sort();
            n
        };
        assert_eq!(names(&s, "fast"), ["b"]);
        assert_eq!(names(&s, "slow"), ["a"]);
        s.remove_capacity("kube-system", "b");
        assert!(names(&s, "fast").is_empty());
        assert_eq!(
            s.capacity("kube-system", "a").map(|c| c.class.as_str()),
            Some("slow")
        );
    }

    #[test]
    fn capacity_reports_count_only_where_they_can_be_read() {
        let mut s = Storage::default();
        s.upsert_csi_driver(CsiDriverModel {
            name: "d".into(),
            storage_capacity: true,
        });
        assert!(s.reports_capacity("d") && !s.reports_capacity("other"));
        s.set_capacities_not_served();
        assert!(!s.reports_capacity("d"));
    }
}
