//! The storage objects the volume plugins read: PersistentVolumeClaims, PersistentVolumes,
//! StorageClasses, CSINodes, CSIDrivers and CSIStorageCapacities. One that cannot be read
//! (the API server validates these, so only a field gantry reads more strictly than
//! Kubernetes) is absent, so that a pod using it gets the message for a missing object
//! rather than a wrong placement.

use std::time::Duration;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::storage::v1 as storage;

use super::storage_objects::{
    capacity_object, claim_object, class_object, csi_driver_object, csi_node_object, volume_object,
};
use super::{Change, Holding, Kind, ReadContext, Serving, Target, Written};
use crate::cache::Tracked;
use crate::model::volume::{
    ClaimModel, CsiDriverModel, CsiNodeModel, StorageCapacityModel, StorageClassModel, VolumeModel,
};

/// PersistentVolumeClaims.
pub struct PersistentVolumeClaims;

impl Kind for PersistentVolumeClaims {
    type Object = core::PersistentVolumeClaim;
    type Model = ClaimModel;
    const TRACKED: Option<Tracked> = Some(Tracked::Volumes);

    fn read(claim: &Self::Object, _: &ReadContext) -> Result<Option<ClaimModel>, String> {
        ClaimModel::from_api(claim).map(Some)
    }

    fn apply(change: Change<ClaimModel>, target: &mut dyn Target, now: Duration) {
        let s = target.scheduler();
        match change {
            Change::Applied(claim) => s.upsert_claim(claim, now),
            Change::Deleted(key) => s.remove_claim(&key.namespace, &key.name),
        }
    }

    fn write(holding: &Holding<'_>, out: &mut Written) {
        let mut claims: Vec<_> = holding.cache.storage().claims().collect();
        claims.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        for claim in claims {
            out.push(claim_object(claim));
        }
    }
}

/// PersistentVolumes.
pub struct PersistentVolumes;

impl Kind for PersistentVolumes {
    type Object = core::PersistentVolume;
    type Model = VolumeModel;
    const TRACKED: Option<Tracked> = Some(Tracked::Volumes);

    fn read(volume: &Self::Object, _: &ReadContext) -> Result<Option<VolumeModel>, String> {
        VolumeModel::from_api(volume).map(Some)
    }

    fn apply(change: Change<VolumeModel>, target: &mut dyn Target, now: Duration) {
        let s = target.scheduler();
        match change {
            Change::Applied(volume) => s.upsert_volume(volume, now),
            Change::Deleted(key) => s.remove_volume(&key.name),
        }
    }

    fn write(holding: &Holding<'_>, out: &mut Written) {
        let mut volumes: Vec<_> = holding.cache.storage().volumes().collect();
        volumes.sort_by(|a, b| a.name.cmp(&b.name));
        for volume in volumes {
            out.push(volume_object(volume));
        }
    }
}

/// StorageClasses.
pub struct StorageClasses;

impl Kind for StorageClasses {
    type Object = storage::StorageClass;
    type Model = StorageClassModel;
    const TRACKED: Option<Tracked> = Some(Tracked::Volumes);

    fn read(class: &Self::Object, _: &ReadContext) -> Result<Option<StorageClassModel>, String> {
        StorageClassModel::from_api(class).map(Some)
    }

    fn apply(change: Change<StorageClassModel>, target: &mut dyn Target, now: Duration) {
        let s = target.scheduler();
        match change {
            Change::Applied(class) => s.upsert_storage_class(class, now),
            Change::Deleted(key) => s.remove_storage_class(&key.name),
        }
    }

    fn write(holding: &Holding<'_>, out: &mut Written) {
        let mut classes: Vec<_> = holding.cache.storage().classes().collect();
        classes.sort_by(|a, b| a.name.cmp(&b.name));
        for class in classes {
            out.push(class_object(class));
        }
    }
}

/// CSINodes: the CSI drivers of each node and how many volumes each may attach.
pub struct CsiNodes;

impl Kind for CsiNodes {
    type Object = storage::CSINode;
    type Model = CsiNodeModel;
    const TRACKED: Option<Tracked> = Some(Tracked::Volumes);

    fn read(node: &Self::Object, _: &ReadContext) -> Result<Option<CsiNodeModel>, String> {
        Ok(Some(CsiNodeModel::from_api(node)))
    }

    fn apply(change: Change<CsiNodeModel>, target: &mut dyn Target, now: Duration) {
        let s = target.scheduler();
        match change {
            Change::Applied(node) => s.upsert_csi_node(node, now),
            Change::Deleted(key) => s.remove_csi_node(&key.name),
        }
    }

    fn write(holding: &Holding<'_>, out: &mut Written) {
        let mut nodes: Vec<_> = holding.cache.storage().csi_nodes().collect();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        for node in nodes {
            out.push(csi_node_object(node));
        }
    }
}

/// CSIDrivers: whether provisioning through each is held to capacity reports.
pub struct CsiDrivers;

impl Kind for CsiDrivers {
    type Object = storage::CSIDriver;
    type Model = CsiDriverModel;
    const TRACKED: Option<Tracked> = Some(Tracked::Volumes);

    fn read(driver: &Self::Object, _: &ReadContext) -> Result<Option<CsiDriverModel>, String> {
        Ok(Some(CsiDriverModel::from_api(driver)))
    }

    fn apply(change: Change<CsiDriverModel>, target: &mut dyn Target, now: Duration) {
        let s = target.scheduler();
        match change {
            Change::Applied(driver) => s.upsert_csi_driver(driver, now),
            Change::Deleted(key) => s.remove_csi_driver(&key.name),
        }
    }

    fn write(holding: &Holding<'_>, out: &mut Written) {
        let storage = holding.cache.storage();
        let mut drivers: Vec<_> = storage.csi_drivers().collect();
        drivers.sort_by(|a, b| a.name.cmp(&b.name));
        for driver in drivers {
            out.push(csi_driver_object(driver, storage));
        }
    }
}

/// CSIStorageCapacities, served in `storage.k8s.io/v1` from Kubernetes 1.24: where the API
/// server does not serve them, no capacity is known to check.
pub struct Capacities;

impl Kind for Capacities {
    type Object = storage::CSIStorageCapacity;
    type Model = StorageCapacityModel;
    const TRACKED: Option<Tracked> = Some(Tracked::Volumes);
    const SERVING: Serving = Serving::Discovered;

    fn read(capacity: &Self::Object, _: &ReadContext) -> Result<Option<Self::Model>, String> {
        StorageCapacityModel::from_api(capacity).map(Some)
    }

    fn apply(change: Change<StorageCapacityModel>, target: &mut dyn Target, now: Duration) {
        let s = target.scheduler();
        match change {
            Change::Applied(capacity) => s.upsert_capacity(capacity, now),
            Change::Deleted(key) => s.remove_capacity(&key.namespace, &key.name),
        }
    }

    fn not_served(target: &mut dyn Target) {
        target.scheduler().cache_mut().set_capacities_not_served();
    }

    fn write(holding: &Holding<'_>, out: &mut Written) {
        let mut capacities: Vec<_> = holding.cache.storage().capacities().collect();
        capacities.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        for capacity in capacities {
            out.push(capacity_object(capacity));
        }
    }
}
