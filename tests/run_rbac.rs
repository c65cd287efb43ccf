//! gantry with only the permissions of its own RBAC role (deploy/10-rbac.yaml) and its own
//! configuration (deploy/20-configmap.yaml), running as a user bound to that role: it lists and
//! watches, binds (a pod with a claim to bind too: it writes the volume and reads the claim
//! back), records events and conditions, and holds and releases its lease, without a single
//! request refused.

mod support;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deployed_role_is_all_gantry_needs() {
    let plane = ControlPlane::start();
    let client = plane.client().await;
    let deploy = repo().join("deploy");
    let configmap: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(deploy.join("20-configmap.yaml"))
            .expect("deploy/20-configmap.yaml"),
    )
    .expect("ConfigMap YAML");
    let config = configmap["data"]["config.yaml"]
        .as_str()
        .expect("data.config.yaml")
        .to_string();

    // Without the role, the user "gantry" can do nothing: gantry never gets ready.
    let mut denied = Gantry::start(plane.dir(), "denied", &config, &plane.gantry_kubeconfig());
    eventually(Duration::from_secs(20), "list refused", || async {
        denied.log_text().contains("forbidden").then_some(())
    })
    .await;
    assert_eq!(denied.get("/readyz").map(|r| r.0), Some(503));
    denied.kill();

    plane.kubectl(&[
        "apply",
        "-f",
        &deploy.join("00-namespace.yaml").display().to_string(),
        "-f",
        &deploy.join("10-rbac.yaml").display().to_string(),
    ]);
    plane.kubectl(&[
        "create",
        "clusterrolebinding",
        "gantry-user",
        "--clusterrole=gantry",
        "--user=gantry",
    ]);
    plane.kubectl(&[
        "create",
        "rolebinding",
        "gantry-user",
        "--namespace=gantry-system",
        "--role=gantry-leader-election",
        "--user=gantry",
    ]);
    let ns = "apps";
    create_namespace(&client, ns).await;
    create_node(&client, &node("rbac-1", ns, "2", "4Gi")).await;
    create_node(&client, &node("rbac-2", ns, "2", "4Gi")).await;
    // A Service, whose selector the default topology spreading reads.
    plane.kubectl(&[
        "create",
        "service",
        "clusterip",
        "web",
        "--tcp=80:8080",
        "--namespace",
        ns,
    ]);

    let mut gantry = Gantry::start(plane.dir(), "rbac", &config, &plane.gantry_kubeconfig());
    gantry.wait_ready().await;
    for i in 0..6 {
        create_pod(
            &client,
            &pod(ns, &format!("w{i}"), "gantry", "500m", "128Mi"),
        )
        .await;
    }
    create_pod(&client, &pod(ns, "too-big", "gantry", "3", "128Mi")).await;
    eventually(
        Duration::from_secs(20),
        "6 bound, 1 rejected, with events",
        || async {
            let ps = pods(&client, ns).await;
            let evs = events(&client, ns).await;
            let bound = ps.iter().filter(|p| node_of(p).is_some()).count();
            let rejected = pod_scheduled(
                ps.iter()
                    .find(|p| p.metadata.name.as_deref() == Some("too-big"))?,
            )
            .filter(|c| c.0 == "False" && c.1 == "Unschedulable")
            .is_some();
            let scheduled_events = evs
                .iter()
                .filter(|e| e.reason.as_deref() == Some("Scheduled"))
                .count();
            let failed_events = events_about(&evs, "too-big", "FailedScheduling").len();
            (bound == 6 && rejected && scheduled_events == 6 && failed_events == 1).then_some(())
        },
    )
    .await;
    // A pod with a claim to bind: gantry writes the chosen volume's claimRef and reads the
    // claim back until the PV controller (admin credentials) has bound it.
    let _controller = KubeControllerManager::start(&plane, &[]).unwrap_or_else(|e| panic!("{e}"));
    plane
        .try_kubectl(
            &["apply", "-f", "-"],
            Some(
                "apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: local}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: rbac-local}
spec:
  storageClassName: local
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  local: {path: /mnt/rbac}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [rbac-2]}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: apps}
spec:
  storageClassName: local
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: stateful, namespace: apps}
spec:
  schedulerName: gantry
  containers: [{name: app, image: registry.example/app:1}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
",
            ),
        )
        .unwrap_or_else(|e| panic!("kubectl apply: {e}"));
    eventually(
        Duration::from_secs(30),
        "the pod with a claim bound",
        || async {
            let p = get_pod(&client, ns, "stateful").await;
            (node_of(&p) == Some("rbac-2")).then_some(())
        },
    )
    .await;
    let leases = Api::<Lease>::namespaced(client.clone(), "gantry-system");
    let lease = leases.get("gantry").await.expect("lease");
    let holder = lease.spec.and_then(|s| s.holder_identity);
    assert_eq!(holder, gantry.identity());

    assert_eq!(gantry.terminate().code(), Some(0));
    let log = gantry.log_text();
    assert!(
        !log.to_lowercase().contains("forbidden"),
        "a request was refused:\n{log}"
    );
    assert!(log.contains("lease released"), "{log}");
    let lease = leases.get("gantry").await.expect("lease");
    assert_eq!(lease.spec.and_then(|s| s.holder_identity), None);
}
