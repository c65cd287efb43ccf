//! A CSI driver's external provisioner, played by the test: no CSI driver runs here, so this
//! does what the `external-provisioner` sidecar does for a claim of a class with delayed
//! binding once a scheduler has chosen the node (`volume.kubernetes.io/selected-node`) and
//! the PersistentVolume controller has handed the claim to the driver
//! (`volume.kubernetes.io/storage-provisioner`): it creates a volume of the claim's size,
//! class and access modes, reachable from the selected node, pre-bound to the claim, which
//! the PersistentVolume controller then binds.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use super::ControlPlane;

/// The annotation a scheduler puts on a claim to provision on the node it chose.
const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The annotation the PersistentVolume controller puts on a claim an external provisioner
/// must serve, naming it.
const STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
/// The annotation naming the provisioner of a volume, by which its deletion is handed back.
const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// The node label a provisioned volume's node affinity names.
const HOSTNAME: &str = "kubernetes.io/hostname";
/// How often the claims are looked at.
const POLL: Duration = Duration::from_millis(100);

/// Runs `body` while a provisioner serves the claims of `plane` from another thread; the
/// provisioner stops when `body` returns. Returns what `body` returned, or the first error
/// the provisioner met.
pub fn while_provisioning<T>(plane: &ControlPlane, body: impl FnOnce() -> T) -> Result<T, String> {
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let provisioner = scope.spawn(|| -> Result<(), String> {
            while !stop.load(Ordering::SeqCst) {
                provision_selected_claims(plane)?;
                std::thread::sleep(POLL);
            }
            Ok(())
        });
        let result = body();
        stop.store(true, Ordering::SeqCst);
        match provisioner.join() {
            Ok(Ok(())) => Ok(result),
            Ok(Err(e)) => Err(format!("the test's CSI provisioner: {e}")),
            Err(_) => Err("the test's CSI provisioner panicked".to_string()),
        }
    })
}

/// Provisions a volume for every claim handed to an external provisioner on a selected node
/// that has none yet.
fn provision_selected_claims(plane: &ControlPlane) -> Result<(), String> {
    let claims = plane.try_kubectl_json(&["get", "persistentvolumeclaims", "--all-namespaces"])?;
    for claim in claims["items"].as_array().into_iter().flatten() {
        let annotations = &claim["metadata"]["annotations"];
        let (Some(node), Some(driver)) = (
            annotations[SELECTED_NODE].as_str(),
            annotations[STORAGE_PROVISIONER].as_str(),
        ) else {
            continue;
        };
        let bound = claim["spec"]["volumeName"]
            .as_str()
            .is_some_and(|v| !v.is_empty());
        if bound {
            continue;
        }
        let node = plane.try_kubectl_json(&["get", "node", node])?;
        let volume = volume_for(claim, &node, driver, &reclaim_policy(plane, claim)?);
        match plane.try_kubectl(&["create", "-f", "-"], Some(&volume.to_string())) {
            Err(e) if !e.contains("AlreadyExists") => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// The reclaim policy of the claim's class (Delete where the class sets none).
fn reclaim_policy(plane: &ControlPlane, claim: &Value) -> Result<String, String> {
    let Some(class) = claim["spec"]["storageClassName"].as_str() else {
        return Ok("Delete".to_string());
    };
    let class = plane.try_kubectl_json(&["get", "storageclass", class])?;
    Ok(class["reclaimPolicy"]
        .as_str()
        .unwrap_or("Delete")
        .to_string())
}

/// The volume `driver` provisions for `claim` on `node`, named as the external provisioner
/// names it (`pvc-<claim uid>`) and pre-bound to the claim.
fn volume_for(claim: &Value, node: &Value, driver: &str, reclaim_policy: &str) -> Value {
    let meta = &claim["metadata"];
    let spec = &claim["spec"];
    let name = format!("pvc-{}", meta["uid"].as_str().unwrap_or(""));
    let mut volume = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {PROVISIONED_BY: driver}},
        "spec": {
            "capacity": {"storage": spec["resources"]["requests"]["storage"]},
            "accessModes": spec["accessModes"],
            "storageClassName": spec["storageClassName"],
            "volumeMode": spec["volumeMode"].as_str().unwrap_or("Filesystem"),
            "persistentVolumeReclaimPolicy": reclaim_policy,
            "csi": {"driver": driver, "volumeHandle": name},
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
        },
    });
    if let Some(host) = node["metadata"]["labels"][HOSTNAME].as_str() {
        volume["spec"]["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [host]}]}
        ]}});
    }
    volume
}
