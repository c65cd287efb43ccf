//! Carries out what PreBind plugins asked for before a pod is bound: for VolumeBinding,
//! writes each chosen volume's `claimRef` and each provisioned claim's selected node, then
//! waits until the PV controller has bound every claim of the pod, as kube-scheduler does.
//! Runs off the scheduling thread, one task per pod, so pods waiting on their volumes do not
//! hold back the scheduling or binding of others.

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, GetParams, Patch, PatchParams};
use serde_json::json;

use gantry_core::cache::VolumeDecision;
use gantry_core::framework::{PreBindAction, VolumeBinding};
use gantry_core::model::volume::{
    BIND_COMPLETED_ANNOTATION, BOUND_BY_CONTROLLER_ANNOTATION, SELECTED_NODE_ANNOTATION,
};
use gantry_core::plugins::{gpu_share, volume_binding};

use super::hami_lock;

/// How often the claims are read while waiting for the PV controller (kube-scheduler's).
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Hears about a node's HAMi lock a binding waits for: who holds it when first found held,
/// and `None` once the binding took it.
pub type LockSeen = dyn Fn(&str, Option<&str>) + Send + Sync;

/// Carries out `actions` for the pod `namespace/name` in order; the annotations the binding
/// is to carry besides the plan's. The error is the message kube-scheduler gives.
pub async fn carry_out(
    client: &Client,
    namespace: &str,
    name: &str,
    actions: &[PreBindAction],
    lock_seen: &LockSeen,
) -> Result<Vec<(String, String)>, String> {
    let mut annotations = Vec::new();
    for (done, action) in actions.iter().enumerate() {
        let result = match action {
            PreBindAction::BindVolumes(binding) => {
                bind_volumes(client, binding).await.map_err(|e| {
                    format!(
                        "running PreBind plugin \"{}\": binding volumes: {e}",
                        volume_binding::NAME
                    )
                })
            }
            PreBindAction::LockHamiNode(node) => {
                let seen = |holder: Option<&str>| lock_seen(node, holder);
                hami_lock::lock(client, node, namespace, name, &seen)
                    .await
                    .map(|()| annotations.extend(hami_lock::binding_annotations(Timestamp::now())))
                    .map_err(|e| format!("running PreBind plugin \"{}\": {e}", gpu_share::NAME))
            }
        };
        if let Err(e) = result {
            // No binding follows: what the earlier actions hold is given back.
            release(client, namespace, name, &actions[..done]).await;
            return Err(e);
        }
    }
    Ok(annotations)
}

/// Undoes what `actions` hold once the binding failed: a HAMi node lock no device plugin
/// will release.
pub async fn release(client: &Client, namespace: &str, name: &str, actions: &[PreBindAction]) {
    for action in actions {
        if let PreBindAction::LockHamiNode(node) = action {
            hami_lock::release(client, node, namespace, name).await;
        }
    }
}

async fn bind_volumes(client: &Client, binding: &VolumeBinding) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + binding.timeout;
    for decision in &binding.decisions {
        write(client, decision).await?;
    }
    loop {
        // As kube-scheduler polls: the first look after one interval, none past the deadline.
        let next = tokio::time::Instant::now() + POLL_INTERVAL;
        if next > deadline {
            tokio::time::sleep_until(deadline).await;
            return Err("context deadline exceeded".to_string());
        }
        tokio::time::sleep_until(next).await;
        if all_bound(client, binding).await? {
            return Ok(());
        }
    }
}

/// Writes one decision, on the condition that the object is still the version it was taken
/// on (a merge patch carrying `resourceVersion`): a volume another scheduler or the PV
/// controller took meanwhile is not taken over, the write fails and the pod is retried.
async fn write(client: &Client, decision: &VolumeDecision) -> Result<(), String> {
    match decision {
        VolumeDecision::Bind {
            claim,
            claim_uid,
            volume,
            volume_version,
        } => {
            let patch = json!({
                "metadata": {
                    "resourceVersion": volume_version,
                    "annotations": {BOUND_BY_CONTROLLER_ANNOTATION: "yes"},
                },
                "spec": {"claimRef": {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "namespace": claim.0,
                    "name": claim.1,
                    "uid": claim_uid,
                }},
            });
            Api::<PersistentVolume>::all(client.clone())
                .patch(volume, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
                .map_err(|e| format!("binding persistentvolume \"{volume}\": {e}"))
        }
        VolumeDecision::Provision {
            claim,
            claim_version,
            node,
        } => {
            let patch = json!({"metadata": {
                "resourceVersion": claim_version,
                "annotations": {SELECTED_NODE_ANNOTATION: node},
            }});
            Api::<PersistentVolumeClaim>::namespaced(client.clone(), &claim.0)
                .patch(&claim.1, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
                .map_err(|e| {
                    format!(
                        "selecting node for persistentvolumeclaim \"{}\": {e}",
                        claim.1
                    )
                })
        }
    }
}

/// True once every claim of the pod is bound and the PV controller marked it complete; an
/// error when a claim went away or its provisioning was given up.
async fn all_bound(client: &Client, binding: &VolumeBinding) -> Result<bool, String> {
    let mut done = true;
    for (namespace, name) in &binding.claims {
        let claim = Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace)
            .get_with(name, &GetParams::any())
            .await
            .map_err(|e| format!("failed to check binding: {e}"))?;
        let annotations = claim.metadata.annotations.unwrap_or_default();
        let provisioned_for = binding.decisions.iter().find_map(|d| match d {
            VolumeDecision::Provision { claim, node, .. }
                if claim.0 == *namespace && claim.1 == *name =>
            {
                Some(node)
            }
            _ => None,
        });
        if let Some(node) = provisioned_for {
            match annotations.get(SELECTED_NODE_ANNOTATION) {
                None => return Err(format!("selectedNode annotation reset for PVC \"{name}\"")),
                Some(n) if n != node => {
                    return Err(format!("provisioning failed for PVC \"{name}\""));
                }
                Some(_) => {}
            }
        }
        let volume = claim.spec.and_then(|s| s.volume_name).unwrap_or_default();
        done &= !volume.is_empty() && annotations.contains_key(BIND_COMPLETED_ANNOTATION);
    }
    Ok(done)
}
