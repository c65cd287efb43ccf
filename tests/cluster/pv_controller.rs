//! The real PersistentVolume controller (kube-controller-manager with only its
//! persistentvolume-binder controller, started by `gantry_test_support::KubeControllerManager`)
//! against a real kube-apiserver, without gantry: the harness the volume tests of `gantry run`
//! stand on does what a cluster does with claims. A claim of immediate binding is bound to a
//! matching volume; a claim of a `WaitForFirstConsumer` class waits, then gets a volume
//! provisioned (host-path provisioner) once a node is selected for it, as a scheduler selects
//! one; and a volume pre-bound to a claim, as kube-scheduler's PreBind does it, gets its claim
//! bound.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use support::*;

/// How long one step may take; the controller takes well under a second for each.
const DEADLINE: Duration = Duration::from_secs(30);
/// Set on a claim by the controller once it has bound the claim.
const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// Set on a volume or claim whose binding the controller made (and may undo).
const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// The node a scheduler chose for a claim's first consumer; it starts delayed provisioning.
const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// Set on a provisioned volume: the provisioner that made it.
const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// Set on a claim by the controller when it asks a provisioner for a volume.
const STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
/// Where the host-path provisioner makes its volumes' directories (no flag chooses it).
const HOST_PATH_PV_DIR: &str = "/tmp/hostpath_pv";

/// The three cases in turn against one control plane and one controller, each in a namespace
/// and with volumes and classes of its own (one controller: two would race for the same claims).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pv_controller_binds_provisions_and_completes_prebinding() {
    let plane = ControlPlane::start();
    let _controller = KubeControllerManager::start(&plane, &[]).unwrap_or_else(|e| panic!("{e}"));
    let client = plane.client().await;
    immediate_claim_binds_to_matching_volume(&client).await;
    delayed_claim_gets_volume_provisioned_on_selected_node(&client).await;
    prebound_volume_gets_its_claim_bound(&client).await;
}

/// (a) A claim without a class (immediate binding) and a matching volume: the controller binds
/// them.
async fn immediate_claim_binds_to_matching_volume(client: &Client) {
    let ns = "immediate";
    create_namespace(client, ns).await;
    create_volume(client, &host_path_volume("immediate-pv", None, "1Gi")).await;
    let created = create_claim(client, &volume_claim(ns, "data", None, "1Gi")).await;
    let claim = bound_claim(client, ns, "data").await;
    assert_eq!(volume_name(&claim), Some("immediate-pv"));
    assert!(
        annotation(&claim.metadata.annotations, BIND_COMPLETED).is_some(),
        "claim bound without {BIND_COMPLETED}: {:?}",
        claim.metadata.annotations
    );
    assert_volume_bound_to(client, "immediate-pv", &created).await;
}

/// (b) A claim of a `WaitForFirstConsumer` class of the host-path provisioner waits for a
/// node; annotated with one (as a scheduler does once it placed the claim's pod), it gets a
/// volume provisioned in a directory of this machine and is bound to it.
async fn delayed_claim_gets_volume_provisioned_on_selected_node(client: &Client) {
    let ns = "provisioned";
    create_namespace(client, ns).await;
    create_node(client, &node("pv-node-1", "pv", "4", "8Gi")).await;
    create_class(
        client,
        &storage_class(
            "host-path-delayed",
            "kubernetes.io/host-path",
            "WaitForFirstConsumer",
        ),
    )
    .await;
    let created = create_claim(
        client,
        &volume_claim(ns, "data", Some("host-path-delayed"), "1Gi"),
    )
    .await;
    waits_for_first_consumer(client, ns, "data").await;
    annotate_claim(client, ns, "data", SELECTED_NODE, "pv-node-1").await;
    let claim = bound_claim(client, ns, "data").await;
    assert!(annotation(&claim.metadata.annotations, BIND_COMPLETED).is_some());
    assert_eq!(
        annotation(&claim.metadata.annotations, STORAGE_PROVISIONER),
        Some("kubernetes.io/host-path")
    );
    let name = volume_name(&claim).expect("bound claim names its volume");
    let volume = assert_volume_bound_to(client, name, &created).await;
    assert_eq!(
        annotation(&volume.metadata.annotations, PROVISIONED_BY),
        Some("kubernetes.io/host-path")
    );
    let spec = volume.spec.as_ref().expect("volume spec");
    assert_eq!(
        spec.storage_class_name.as_deref(),
        Some("host-path-delayed")
    );
    let path = spec
        .host_path
        .as_ref()
        .map(|h| h.path.clone())
        .expect("a host-path volume");
    let dir = Path::new(&path);
    assert!(
        dir.starts_with(HOST_PATH_PV_DIR) && dir.is_dir(),
        "provisioned volume's directory {path} is not a directory under {HOST_PATH_PV_DIR}"
    );
    // Made on this machine, where the controller runs; the volume stays bound (nothing
    // reclaims it), so the test removes the empty directory itself.
    std::fs::remove_dir(dir).unwrap_or_else(|e| panic!("remove {path}: {e}"));
}

/// (c) A claim of a `WaitForFirstConsumer` class without a provisioner waits, although a
/// matching volume is there; once the volume is pre-bound to it (claimRef with the claim's
/// uid, `bound-by-controller`), as kube-scheduler's PreBind does for the node it chose, the
/// controller binds the claim to that volume.
async fn prebound_volume_gets_its_claim_bound(client: &Client) {
    let ns = "prebound";
    create_namespace(client, ns).await;
    create_class(
        client,
        &storage_class(
            "static-delayed",
            "kubernetes.io/no-provisioner",
            "WaitForFirstConsumer",
        ),
    )
    .await;
    create_volume(
        client,
        &host_path_volume("prebound-pv", Some("static-delayed"), "1Gi"),
    )
    .await;
    let created = create_claim(
        client,
        &volume_claim(ns, "data", Some("static-delayed"), "1Gi"),
    )
    .await;
    waits_for_first_consumer(client, ns, "data").await;
    let volumes = Api::<PersistentVolume>::all(client.clone());
    let volume = volumes.get("prebound-pv").await.expect("get volume");
    assert!(
        volume
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .is_none(),
        "a delayed claim's matching volume was bound before any node was chosen"
    );
    let patch = json!({
        "metadata": {"annotations": {BOUND_BY_CONTROLLER: "yes"}},
        "spec": {"claimRef": {
            "namespace": ns,
            "name": "data",
            "uid": created.metadata.uid,
        }}
    });
    volumes
        .patch(
            "prebound-pv",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .expect("pre-bind volume");
    let claim = bound_claim(client, ns, "data").await;
    assert_eq!(volume_name(&claim), Some("prebound-pv"));
    assert!(annotation(&claim.metadata.annotations, BIND_COMPLETED).is_some());
    assert_volume_bound_to(client, "prebound-pv", &created).await;
}

/// Creates a PersistentVolume.
async fn create_volume(client: &Client, volume: &PersistentVolume) {
    Api::<PersistentVolume>::all(client.clone())
        .create(&PostParams::default(), volume)
        .await
        .expect("create volume");
}

/// Creates a StorageClass.
async fn create_class(client: &Client, class: &StorageClass) {
    Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), class)
        .await
        .expect("create storage class");
}

/// Creates a PersistentVolumeClaim; returns it as created (with its uid).
async fn create_claim(client: &Client, claim: &PersistentVolumeClaim) -> PersistentVolumeClaim {
    let ns = claim
        .metadata
        .namespace
        .as_deref()
        .expect("claim namespace");
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), claim)
        .await
        .expect("create claim")
}

/// Sets the annotation `key` of a claim to `value`.
async fn annotate_claim(client: &Client, ns: &str, name: &str, key: &str, value: &str) {
    let patch = json!({"metadata": {"annotations": {key: value}}});
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("annotate claim");
}

/// Waits for the controller's `WaitForFirstConsumer` event about claim `name` (it has seen
/// the claim and left it for a scheduler), then checks that the claim is still unbound.
async fn waits_for_first_consumer(client: &Client, ns: &str, name: &str) {
    eventually(
        DEADLINE,
        &format!("the WaitForFirstConsumer event of claim {ns}/{name}"),
        || async {
            let events = events(client, ns).await;
            (!events_about(&events, name, "WaitForFirstConsumer").is_empty()).then_some(())
        },
    )
    .await;
    let claim = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .expect("get claim");
    assert_eq!(phase(&claim), Some("Pending"));
    assert_eq!(volume_name(&claim), None);
}

/// Waits until claim `name` is Bound; returns it.
async fn bound_claim(client: &Client, ns: &str, name: &str) -> PersistentVolumeClaim {
    let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns);
    eventually(DEADLINE, &format!("claim {ns}/{name} Bound"), || async {
        let claim = claims.get(name).await.expect("get claim");
        (phase(&claim) == Some("Bound")).then_some(claim)
    })
    .await
}

/// Waits until volume `name` is Bound; checks that it is bound to `claim` (namespace, name and
/// uid) and returns it.
async fn assert_volume_bound_to(
    client: &Client,
    name: &str,
    claim: &PersistentVolumeClaim,
) -> PersistentVolume {
    let volumes = Api::<PersistentVolume>::all(client.clone());
    let volume = eventually(DEADLINE, &format!("volume {name} Bound"), || async {
        let volume = volumes.get(name).await.expect("get volume");
        let bound = volume.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
        bound.then_some(volume)
    })
    .await;
    let claim_ref = volume
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .expect("bound volume has a claimRef");
    assert_eq!(claim_ref.namespace, claim.metadata.namespace);
    assert_eq!(claim_ref.name, claim.metadata.name);
    assert_eq!(claim_ref.uid, claim.metadata.uid);
    volume
}

/// A claim's phase.
fn phase(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim.status.as_ref()?.phase.as_deref()
}

/// The volume a claim names.
fn volume_name(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim.spec.as_ref()?.volume_name.as_deref()
}

/// The value of annotation `key`.
fn annotation<'a>(annotations: &'a Option<BTreeMap<String, String>>, key: &str) -> Option<&'a str> {
    annotations.as_ref()?.get(key).map(String::as_str)
}
