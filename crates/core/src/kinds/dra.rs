//! The kinds of Dynamic Resource Allocation (`resource.k8s.io/v1`, served from Kubernetes
//! 1.34): DeviceClasses, ResourceSlices and ResourceClaims. What the scheduler does with
//! them is the DynamicResources plugin's; the queue events they raise come with it (issue
//! 52).

use std::time::Duration;

use k8s_openapi::api::resource::v1 as api;

use super::{Change, Holding, Kind, ReadContext, Serving, Target, Written};
use crate::cache::Tracked;
use crate::model::dra::claim::ResourceClaimModel;
use crate::model::dra::class::DeviceClassModel;
use crate::model::dra::slice::SliceModel;

/// DeviceClasses.
pub struct DeviceClasses;

impl Kind for DeviceClasses {
    type Object = api::DeviceClass;
    type Model = DeviceClassModel;
    const TRACKED: Option<Tracked> = Some(Tracked::DynamicResources);
    const SERVING: Serving = Serving::Discovered;

    fn read(class: &api::DeviceClass, _: &ReadContext) -> Result<Option<DeviceClassModel>, String> {
        DeviceClassModel::from_api(class).map(Some)
    }

    fn apply(change: Change<DeviceClassModel>, target: &mut dyn Target, _now: Duration) {
        let cache = target.scheduler().cache_mut();
        match change {
            Change::Applied(class) => cache.upsert_device_class(class),
            Change::Deleted(key) => cache.remove_device_class(&key.name),
        }
    }

    fn write(holding: &Holding<'_>, out: &mut Written) {
        for class in holding.cache.dynamic_resources().classes() {
            out.push(class.to_api());
        }
    }
}

/// ResourceSlices. One that cannot be read is absent: its devices are not allocated.
pub struct ResourceSlices;

impl Kind for ResourceSlices {
    type Object = api::ResourceSlice;
    type Model = SliceModel;
    const TRACKED: Option<Tracked> = Some(Tracked::DynamicResources);
    const SERVING: Serving = Serving::Discovered;

    fn read(slice: &api::ResourceSlice, _: &ReadContext) -> Result<Option<SliceModel>, String> {
        SliceModel::from_api(slice).map(Some)
    }

    fn apply(change: Change<SliceModel>, target: &mut dyn Target, _now: Duration) {
        let cache = target.scheduler().cache_mut();
        match change {
            Change::Applied(slice) => cache.upsert_resource_slice(slice),
            Change::Deleted(key) => cache.remove_resource_slice(&key.name),
        }
    }

    fn write(holding: &Holding<'_>, out: &mut Written) {
        for slice in holding.cache.dynamic_resources().slices() {
            out.push(slice.to_api());
        }
    }
}

/// ResourceClaims, those made from templates by the resourceclaim controller among them.
pub struct ResourceClaims;

impl Kind for ResourceClaims {
    type Object = api::ResourceClaim;
    type Model = ResourceClaimModel;
    const TRACKED: Option<Tracked> = Some(Tracked::DynamicResources);
    const SERVING: Serving = Serving::Discovered;

    fn read(
        claim: &api::ResourceClaim,
        _: &ReadContext,
    ) -> Result<Option<ResourceClaimModel>, String> {
        ResourceClaimModel::from_api(claim).map(Some)
    }

    fn apply(change: Change<ResourceClaimModel>, target: &mut dyn Target, _now: Duration) {
        let cache = target.scheduler().cache_mut();
        match change {
            Change::Applied(claim) => cache.upsert_resource_claim(claim),
            Change::Deleted(key) => cache.remove_resource_claim(&key.namespace, &key.name),
        }
    }

    fn write(holding: &Holding<'_>, out: &mut Written) {
        for claim in holding.cache.dynamic_resources().claims() {
            out.push(claim.to_api());
        }
    }
}
