//! Builders of the storage objects the volume tests create: StorageClasses, PersistentVolumes
//! and PersistentVolumeClaims, all of one access mode (ReadWriteOnce) and filesystem volumes.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::{Value, json};

/// A StorageClass of `provisioner` with `binding_mode` (`Immediate` or `WaitForFirstConsumer`).
pub fn storage_class(name: &str, provisioner: &str, binding_mode: &str) -> StorageClass {
    serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": binding_mode
    }))
    .expect("storage class")
}

/// An unbound ReadWriteOnce PersistentVolume of `capacity` in `class` (none: a volume only
/// claims without a class can have), a hostPath one since no kubelet ever mounts it.
pub fn host_path_volume(name: &str, class: Option<&str>, capacity: &str) -> PersistentVolume {
    let mut spec = json!({
        "capacity": {"storage": capacity},
        "accessModes": ["ReadWriteOnce"],
        "hostPath": {"path": format!("/volumes/{name}")}
    });
    with_class(&mut spec, class);
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": spec
    }))
    .expect("persistent volume")
}

/// A ReadWriteOnce PersistentVolumeClaim for `request` of storage in `class` (none: the claim
/// has no storageClassName, and only volumes without a class match it while the cluster has
/// no default class).
pub fn volume_claim(
    namespace: &str,
    name: &str,
    class: Option<&str>,
    request: &str,
) -> PersistentVolumeClaim {
    let mut spec = json!({
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": request}}
    });
    with_class(&mut spec, class);
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec
    }))
    .expect("persistent volume claim")
}

/// Sets `storageClassName` in a volume's or claim's `spec` when there is a class.
fn with_class(spec: &mut Value, class: Option<&str>) {
    if let Some(class) = class {
        spec["storageClassName"] = json!(class);
    }
}
