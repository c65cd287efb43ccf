//! The objects of Dynamic Resource Allocation the cache holds: DeviceClasses,
//! ResourceSlices and ResourceClaims, each by name in a persistent map, so that a snapshot
//! shares them and a change copies only the path to one entry.

use std::sync::Arc;

use imbl::OrdMap;

use crate::model::dra::claim::ResourceClaimModel;
use crate::model::dra::class::DeviceClassModel;
use crate::model::dra::slice::SliceModel;

/// DeviceClasses, ResourceSlices and ResourceClaims.
#[derive(Debug, Clone, Default)]
pub struct DynamicResources {
    classes: OrdMap<String, Arc<DeviceClassModel>>,
    slices: OrdMap<String, Arc<SliceModel>>,
    claims: OrdMap<(String, String), Arc<ResourceClaimModel>>,
}

impl DynamicResources {
    /// The DeviceClasses, by name.
    pub fn classes(&self) -> impl Iterator<Item = &Arc<DeviceClassModel>> {
        self.classes.values()
    }

    /// The DeviceClass `name`.
    pub fn class(&self, name: &str) -> Option<&Arc<DeviceClassModel>> {
        self.classes.get(name)
    }

    /// The ResourceSlices, by name.
    pub fn slices(&self) -> impl Iterator<Item = &Arc<SliceModel>> {
        self.slices.values()
    }

    /// The ResourceClaims, by namespace and name.
    pub fn claims(&self) -> impl Iterator<Item = &Arc<ResourceClaimModel>> {
        self.claims.values()
    }

    /// The ResourceClaim `namespace/name`.
    pub fn claim(&self, namespace: &str, name: &str) -> Option<&Arc<ResourceClaimModel>> {
        self.claims.get(&(namespace.to_string(), name.to_string()))
    }

    pub(super) fn upsert_class(&mut self, class: DeviceClassModel) {
        self.classes.insert(class.name.clone(), Arc::new(class));
    }

    pub(super) fn remove_class(&mut self, name: &str) {
        self.classes.remove(name);
    }

    pub(super) fn upsert_slice(&mut self, slice: SliceModel) {
        self.slices.insert(slice.name.clone(), Arc::new(slice));
    }

    pub(super) fn remove_slice(&mut self, name: &str) {
        self.slices.remove(name);
    }

    pub(super) fn upsert_claim(&mut self, claim: ResourceClaimModel) {
        let key = (claim.namespace.clone(), claim.name.clone());
        self.claims.insert(key, Arc::new(claim));
    }

    pub(super) fn remove_claim(&mut self, namespace: &str, name: &str) {
        self.claims
            .remove(&(namespace.to_string(), name.to_string()));
    }
}
