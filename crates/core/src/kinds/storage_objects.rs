//! The storage objects a scheduler holds, written back as API objects (see
//! [`super::Kind::write`]): PersistentVolumeClaims and PersistentVolumes as the scheduler's cycles see them
//! (with what it assumed over the API's objects: a volume reserved for a claim, a node
//! selected for a claim to provision), StorageClasses, CSINodes, CSIDrivers and
//! CSIStorageCapacities. Only the fields the volume plugins read are written.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::storage::v1 as storage;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;

use crate::cache::Storage;
use crate::model::volume::{
    BIND_COMPLETED_ANNOTATION, BindingMode, ClaimModel, CsiDriverModel, CsiNodeModel,
    MIGRATED_PLUGINS_ANNOTATION, SELECTED_NODE_ANNOTATION, StorageCapacityModel, StorageClassModel,
    VolumeModel,
};

use super::objects::map;

/// `Some(value)` unless it is empty.
fn non_empty(value: &str) -> Option<String> {
    (!value.is_empty()).then(|| value.to_string())
}

/// A list of access modes, `None` when empty.
fn modes(m: crate::model::volume::AccessModes) -> Option<Vec<String>> {
    let modes = m.to_api();
    (!modes.is_empty()).then_some(modes)
}

/// A claim as the API would hold it.
pub(super) fn claim_object(c: &ClaimModel) -> core::PersistentVolumeClaim {
    let mut annotations = BTreeMap::new();
    if c.bind_completed {
        annotations.insert(BIND_COMPLETED_ANNOTATION.to_string(), "yes".to_string());
    }
    if let Some(node) = &c.selected_node {
        annotations.insert(SELECTED_NODE_ANNOTATION.to_string(), node.clone());
    }
    let owner = c.controller_uid.as_ref().map(|uid| {
        // Only the controller's uid is read (a generic ephemeral volume's claim is its
        // pod's): the model keeps nothing else of the reference.
        vec![meta::OwnerReference {
            uid: uid.clone(),
            controller: Some(true),
            ..Default::default()
        }]
    });
    let requests = c
        .storage_requested
        .then(|| BTreeMap::from([("storage".to_string(), Quantity(c.request.to_string()))]));
    core::PersistentVolumeClaim {
        metadata: meta::ObjectMeta {
            name: Some(c.name.clone()),
            namespace: Some(c.namespace.clone()),
            uid: non_empty(&c.uid),
            resource_version: non_empty(&c.resource_version),
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: owner,
            deletion_timestamp: c.deleting.then(|| meta::Time(Default::default())),
            ..Default::default()
        },
        spec: Some(core::PersistentVolumeClaimSpec {
            access_modes: modes(c.access_modes),
            resources: requests.map(|requests| core::VolumeResourceRequirements {
                requests: Some(requests),
                limits: None,
            }),
            selector: c.selector.as_ref().and_then(|s| s.to_api()),
            storage_class_name: non_empty(&c.class),
            volume_mode: c.block.then(|| "Block".to_string()),
            volume_name: non_empty(&c.volume_name),
            ..Default::default()
        }),
        status: c.lost.then(|| core::PersistentVolumeClaimStatus {
            phase: Some("Lost".to_string()),
            ..Default::default()
        }),
    }
}

/// Sets the in-tree source of a volume of `plugin` whose handle (as its CSI driver knows
/// it) is `handle`, as the model read it.
fn in_tree_source(spec: &mut core::PersistentVolumeSpec, plugin: &str, handle: &str) {
    let last = handle.rsplit('/').next().unwrap_or_default().to_string();
    match plugin {
        "kubernetes.io/aws-ebs" => {
            spec.aws_elastic_block_store = Some(core::AWSElasticBlockStoreVolumeSource {
                volume_id: handle.to_string(),
                ..Default::default()
            })
        }
        "kubernetes.io/gce-pd" => {
            spec.gce_persistent_disk = Some(core::GCEPersistentDiskVolumeSource {
                pd_name: last,
                ..Default::default()
            })
        }
        "kubernetes.io/azure-disk" => {
            spec.azure_disk = Some(core::AzureDiskVolumeSource {
                disk_name: last,
                disk_uri: handle.to_string(),
                ..Default::default()
            })
        }
        "kubernetes.io/cinder" => {
            spec.cinder = Some(core::CinderPersistentVolumeSource {
                volume_id: handle.to_string(),
                ..Default::default()
            })
        }
        "kubernetes.io/vsphere-volume" => {
            spec.vsphere_volume = Some(core::VsphereVirtualDiskVolumeSource {
                volume_path: handle.to_string(),
                ..Default::default()
            })
        }
        "kubernetes.io/portworx-volume" => {
            spec.portworx_volume = Some(core::PortworxVolumeSource {
                volume_id: handle.to_string(),
                ..Default::default()
            })
        }
        _ => {}
    }
}

/// A volume as the API would hold it.
pub(super) fn volume_object(v: &VolumeModel) -> core::PersistentVolume {
    let mut spec = core::PersistentVolumeSpec {
        access_modes: modes(v.access_modes),
        capacity: Some(BTreeMap::from([(
            "storage".to_string(),
            Quantity(v.capacity.to_string()),
        )])),
        claim_ref: v.claim_ref.as_ref().map(|r| core::ObjectReference {
            namespace: Some(r.namespace.clone()),
            name: Some(r.name.clone()),
            uid: non_empty(&r.uid),
            ..Default::default()
        }),
        node_affinity: v.node_affinity.as_ref().map(|a| core::VolumeNodeAffinity {
            required: Some(a.to_api()),
        }),
        storage_class_name: non_empty(&v.class),
        volume_mode: v.block.then(|| "Block".to_string()),
        ..Default::default()
    };
    match (v.in_tree_plugin, &v.attachable) {
        (Some(plugin), a) => in_tree_source(
            &mut spec,
            plugin,
            a.as_ref().map_or("", |a| a.handle.as_str()),
        ),
        (None, Some(a)) => {
            spec.csi = Some(core::CSIPersistentVolumeSource {
                driver: a.driver.clone(),
                volume_handle: a.handle.clone(),
                ..Default::default()
            })
        }
        (None, None) => {}
    }
    core::PersistentVolume {
        metadata: meta::ObjectMeta {
            name: Some(v.name.clone()),
            resource_version: non_empty(&v.resource_version),
            labels: map(&v.labels),
            deletion_timestamp: v.deleting.then(|| meta::Time(Default::default())),
            ..Default::default()
        },
        spec: Some(spec),
        status: v.available.then(|| core::PersistentVolumeStatus {
            phase: Some("Available".to_string()),
            ..Default::default()
        }),
    }
}

/// A storage class as the API would hold it.
pub(super) fn class_object(c: &StorageClassModel) -> storage::StorageClass {
    storage::StorageClass {
        metadata: meta::ObjectMeta {
            name: Some(c.name.clone()),
            ..Default::default()
        },
        provisioner: c.provisioner.clone(),
        volume_binding_mode: c.binding_mode.map(|m| {
            match m {
                BindingMode::Immediate => "Immediate",
                BindingMode::WaitForFirstConsumer => "WaitForFirstConsumer",
            }
            .to_string()
        }),
        allowed_topologies: (!c.allowed_topologies.is_empty()).then(|| {
            c.allowed_topologies
                .iter()
                .map(|t| core::TopologySelectorTerm {
                    match_label_expressions: Some(
                        t.expressions
                            .iter()
                            .map(|r| core::TopologySelectorLabelRequirement {
                                key: r.key.clone(),
                                values: r.values.clone(),
                            })
                            .collect(),
                    ),
                })
                .collect()
        }),
        ..Default::default()
    }
}

/// A CSINode as the API would hold it (each driver's node id is left empty: the scheduler
/// does not read it).
pub(super) fn csi_node_object(n: &CsiNodeModel) -> storage::CSINode {
    let migrated = n.migrated.iter().cloned().collect::<Vec<_>>().join(",");
    storage::CSINode {
        metadata: meta::ObjectMeta {
            name: Some(n.name.clone()),
            annotations: (!migrated.is_empty())
                .then(|| BTreeMap::from([(MIGRATED_PLUGINS_ANNOTATION.to_string(), migrated)])),
            ..Default::default()
        },
        spec: storage::CSINodeSpec {
            drivers: n
                .drivers
                .iter()
                .map(|(name, count)| storage::CSINodeDriver {
                    name: name.clone(),
                    allocatable: count.map(|c| storage::VolumeNodeResources {
                        count: i32::try_from(c).ok(),
                    }),
                    ..Default::default()
                })
                .collect(),
        },
        ..Default::default()
    }
}

/// A CSIDriver as the API would hold it. `storageCapacity` says whether provisioning
/// through it is held to capacity reports: false also when the API server did not serve
/// them (before Kubernetes 1.24), so that the snapshot reads back as the scheduler judged.
pub(super) fn csi_driver_object(d: &CsiDriverModel, storage: &Storage) -> storage::CSIDriver {
    storage::CSIDriver {
        metadata: meta::ObjectMeta {
            name: Some(d.name.clone()),
            ..Default::default()
        },
        spec: storage::CSIDriverSpec {
            storage_capacity: Some(storage.reports_capacity(&d.name)),
            ..Default::default()
        },
    }
}

/// A CSIStorageCapacity as the API would hold it: its limit as `maximumVolumeSize`.
pub(super) fn capacity_object(c: &StorageCapacityModel) -> storage::CSIStorageCapacity {
    storage::CSIStorageCapacity {
        metadata: meta::ObjectMeta {
            name: Some(c.name.clone()),
            namespace: Some(c.namespace.clone()),
            ..Default::default()
        },
        storage_class_name: c.class.clone(),
        node_topology: c.topology.to_api(),
        maximum_volume_size: c.limit.map(|l| Quantity(l.to_string())),
        capacity: None,
    }
}
