//! `gantry run` with pods that use PersistentVolumeClaims, against a real kube-apiserver and
//! the real PV controller (kube-controller-manager, its persistentvolume-binder and
//! statefulset controllers): gantry binds the volumes it chooses and the controller completes
//! them, as with kube-scheduler.

use crate::support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use support::*;

/// How long a step may take: a binding waits for the controller's next look (a second).
const DEADLINE: Duration = Duration::from_secs(60);

async fn wait_for<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn apply(plane: &ControlPlane, yaml: &str) {
    plane
        .try_kubectl(&["apply", "-f", "-"], Some(yaml))
        .unwrap_or_else(|e| panic!("kubectl apply: {e}\n{yaml}"));
}

async fn claim(client: &Client, ns: &str, name: &str) -> Option<PersistentVolumeClaim> {
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .expect("get claim")
}

fn is_bound(c: &PersistentVolumeClaim) -> bool {
    c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
}

/// A local volume of class `class` on node `node`.
fn local_volume(name: &str, class: &str, node: &str) -> String {
    format!(
        "apiVersion: v1
kind: PersistentVolume
metadata: {{name: {name}}}
spec:
  storageClassName: {class}
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  local: {{path: /mnt/{name}}}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{{key: kubernetes.io/hostname, operator: In, values: [{node}]}}]
"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_are_bound_as_kube_scheduler_binds_them() {
    let plane = ControlPlane::start();
    let client = plane.client().await;
    let (profile, label) = ("gantry", "volumes");
    for (n, zone) in [("vol-1", "a"), ("vol-2", "b"), ("vol-3", "c")] {
        let labels = [("topology.kubernetes.io/zone", zone)];
        create_node(&client, &labelled_node(n, label, "4", "8Gi", &labels)).await;
    }
    let config = config(profile, label, None, "");

    // No PV controller yet: the first gantry writes its choice and waits, and dies waiting.
    let mut first = Gantry::start(plane.dir(), "gantry-1", &config, &plane.kubeconfig());
    first.wait_ready().await;
    a_crash_while_waiting_on_the_pv_controller_loses_nothing(&plane, &client, &mut first).await;

    let _controller = KubeControllerManager::start(
        &plane,
        &["--controllers=persistentvolume-binder,statefulset"],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut gantry = Gantry::start(plane.dir(), "gantry-2", &config, &plane.kubeconfig());
    gantry.wait_ready().await;
    let pod = wait_for("the pod of the crashed binding bound", async || {
        let p = get_pod(&client, "crash", "app").await;
        node_of(&p).is_some().then_some(p)
    })
    .await;
    assert_eq!(
        node_of(&pod),
        Some("vol-1"),
        "where the volume it was given is"
    );
    let c = wait_for("its claim bound", async || {
        claim(&client, "crash", "crash-data").await.filter(is_bound)
    })
    .await;
    assert_eq!(
        c.spec.and_then(|s| s.volume_name).as_deref(),
        Some("crash-1")
    );

    statefulset_replicas_get_the_nodes_of_their_volumes(&plane, &client).await;
    a_missing_claim_holds_the_pod_until_it_is_created(&plane, &client).await;
    a_claim_to_provision_gets_the_node_of_its_pod(&plane, &client).await;
    a_zonal_volume_takes_its_pod_to_its_zone(&plane, &client).await;
    the_attach_limit_of_a_csi_driver_holds(&plane, &client).await;
    assert!(gantry.is_running(), "gantry exited:\n{}", gantry.log_text());
}

/// gantry killed after it wrote a volume's claimRef and while it waits for the PV controller:
/// the volume is promised to the claim, and the pod is left unbound; the next gantry (with
/// the controller running now) binds the pod where that volume is.
async fn a_crash_while_waiting_on_the_pv_controller_loses_nothing(
    plane: &ControlPlane,
    client: &Client,
    gantry: &mut Gantry,
) {
    create_namespace(client, "crash").await;
    apply(
        plane,
        "apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: local}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
",
    );
    apply(plane, &local_volume("crash-1", "local", "vol-1"));
    // A volume is Available once the controller has seen it; none runs yet, so the phase is
    // set here as the controller would.
    Api::<PersistentVolume>::all(client.clone())
        .patch_status(
            "crash-1",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"phase": "Available"}})),
        )
        .await
        .expect("volume status");
    apply(
        plane,
        "apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: crash-data, namespace: crash}
spec:
  storageClassName: local
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: app, namespace: crash}
spec:
  schedulerName: gantry
  containers: [{name: app, image: registry.example/app:1}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: crash-data}}]
",
    );
    let volumes = Api::<PersistentVolume>::all(client.clone());
    wait_for("the volume promised to the claim", async || {
        let pv = volumes.get("crash-1").await.ok()?;
        let claim_ref = pv.spec?.claim_ref?;
        (claim_ref.name.as_deref() == Some("crash-data")).then_some(())
    })
    .await;
    gantry.kill();
    let pod = get_pod(client, "crash", "app").await;
    assert_eq!(node_of(&pod), None, "not bound before its claim is");
}

/// Three replicas of a StatefulSet on local volumes of a `WaitForFirstConsumer` class, with
/// volumes on two nodes only: two replicas land where their volumes are, each volume given
/// once; the third waits, and gets the third node once a volume appears there.
async fn statefulset_replicas_get_the_nodes_of_their_volumes(
    plane: &ControlPlane,
    client: &Client,
) {
    let ns = "shop";
    create_namespace(client, ns).await;
    apply(
        plane,
        "apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: local}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
",
    );
    apply(plane, &local_volume("local-1", "local", "vol-1"));
    apply(plane, &local_volume("local-2", "local", "vol-2"));
    apply(
        plane,
        "apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: shop}
spec:
  serviceName: db
  replicas: 3
  podManagementPolicy: Parallel
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      schedulerName: gantry
      containers: [{name: db, image: registry.example/db:1, resources: {requests: {cpu: 100m}}}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      storageClassName: local
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
",
    );
    let placed = wait_for("two replicas bound", async || {
        let bound: Vec<Pod> = pods(client, ns)
            .await
            .into_iter()
            .filter(|p| node_of(p).is_some())
            .collect();
        (bound.len() >= 2).then_some(bound)
    })
    .await;
    assert_eq!(placed.len(), 2, "only two volumes exist");
    let volumes = Api::<PersistentVolume>::all(client.clone());
    for pod in &placed {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let claim_name = format!("data-{name}");
        let c = wait_for("the claim bound", async || {
            claim(client, ns, &claim_name).await.filter(is_bound)
        })
        .await;
        let volume = c.spec.and_then(|s| s.volume_name).unwrap_or_default();
        let pv = volumes.get(&volume).await.expect("volume");
        let node = pv
            .spec
            .and_then(|s| s.node_affinity)
            .and_then(|a| a.required)
            .and_then(|r| r.node_selector_terms.into_iter().next())
            .and_then(|t| t.match_expressions)
            .and_then(|e| e.into_iter().next())
            .and_then(|e| e.values)
            .and_then(|v| v.into_iter().next());
        assert_eq!(
            node.as_deref(),
            node_of(pod),
            "{name} is on its volume's node"
        );
    }
    let waiting = pods(client, ns)
        .await
        .into_iter()
        .find(|p| node_of(p).is_none())
        .expect("the third replica waits");
    let name = waiting.metadata.name.clone().unwrap_or_default();
    apply(plane, &local_volume("local-3", "local", "vol-3"));
    let pod = wait_for("the third replica bound", async || {
        let p = get_pod(client, ns, &name).await;
        node_of(&p).is_some().then_some(p)
    })
    .await;
    assert_eq!(node_of(&pod), Some("vol-3"));
}

/// A pod whose claim does not exist stays pending with kube-scheduler's message; once the
/// claim (and a volume for it) exists, the pod is bound within seconds.
async fn a_missing_claim_holds_the_pod_until_it_is_created(plane: &ControlPlane, client: &Client) {
    let ns = "late";
    create_namespace(client, ns).await;
    apply(
        plane,
        "apiVersion: v1
kind: Pod
metadata: {name: app, namespace: late}
spec:
  schedulerName: gantry
  containers: [{name: app, image: registry.example/app:1}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: late-data}}]
",
    );
    wait_for("the FailedScheduling event", async || {
        let events = events(client, ns).await;
        events_about(&events, "app", "FailedScheduling")
            .iter()
            .find(|e| {
                e.note
                    .as_deref()
                    .is_some_and(|n| n.contains("persistentvolumeclaim \"late-data\" not found"))
            })
            .map(|_| ())
    })
    .await;
    apply(plane, &local_volume("late-1", "local", "vol-2"));
    let created = Instant::now();
    apply(
        plane,
        "apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: late-data, namespace: late}
spec:
  storageClassName: local
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
",
    );
    let pod = wait_for("the pod bound", async || {
        let p = get_pod(client, ns, "app").await;
        node_of(&p).is_some().then_some(p)
    })
    .await;
    assert_eq!(node_of(&pod), Some("vol-2"), "where its volume is");
    assert!(
        created.elapsed() < Duration::from_secs(20),
        "bound {:?} after the claim appeared",
        created.elapsed()
    );
}

/// A claim of a class that provisions: gantry selects the node of its pod on the claim, the
/// controller provisions a volume, and the pod is bound once the claim is.
async fn a_claim_to_provision_gets_the_node_of_its_pod(plane: &ControlPlane, client: &Client) {
    let ns = "provisioned";
    create_namespace(client, ns).await;
    apply(
        plane,
        "apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: host-path}
provisioner: kubernetes.io/host-path
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: scratch, namespace: provisioned}
spec:
  storageClassName: host-path
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: job, namespace: provisioned}
spec:
  schedulerName: gantry
  containers: [{name: job, image: registry.example/job:1}]
  volumes: [{name: scratch, persistentVolumeClaim: {claimName: scratch}}]
",
    );
    let pod = wait_for("the pod bound", async || {
        let p = get_pod(client, ns, "job").await;
        node_of(&p).is_some().then_some(p)
    })
    .await;
    let c = claim(client, ns, "scratch").await.expect("claim");
    let selected = c
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("volume.kubernetes.io/selected-node"))
        .cloned();
    assert_eq!(selected.as_deref(), node_of(&pod));
    assert!(is_bound(&c), "bound before the pod is");
    let volume = c.spec.and_then(|s| s.volume_name).unwrap_or_default();
    let provisioned = Api::<PersistentVolume>::all(client.clone())
        .get(&volume)
        .await
        .expect("the provisioned volume");
    // The host-path provisioner made a directory on this machine; the volume is retained,
    // so the directory is removed here.
    if let Some(path) = provisioned.spec.and_then(|s| s.host_path).map(|h| h.path) {
        let _ = std::fs::remove_dir_all(path);
    }
    let others = Api::<PersistentVolumeClaim>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("claims");
    assert!(others.items.iter().all(is_bound), "every claim is bound");
}

/// A claim bound to a volume whose node affinity names zone b: the pod goes to zone b.
async fn a_zonal_volume_takes_its_pod_to_its_zone(plane: &ControlPlane, client: &Client) {
    let ns = "zonal";
    create_namespace(client, ns).await;
    apply(
        plane,
        "apiVersion: v1
kind: PersistentVolume
metadata: {name: zonal-b}
spec:
  storageClassName: \"\"
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  hostPath: {path: /tmp/zonal-b}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [b]}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: zonal-data, namespace: zonal}
spec:
  storageClassName: \"\"
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
",
    );
    wait_for("the zonal claim bound", async || {
        claim(client, ns, "zonal-data").await.filter(is_bound)
    })
    .await;
    apply(
        plane,
        "apiVersion: v1
kind: Pod
metadata: {name: app, namespace: zonal}
spec:
  schedulerName: gantry
  containers: [{name: app, image: registry.example/app:1}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: zonal-data}}]
",
    );
    let pod = wait_for("the zonal pod bound", async || {
        let p = get_pod(client, ns, "app").await;
        node_of(&p).is_some().then_some(p)
    })
    .await;
    assert_eq!(node_of(&pod), Some("vol-2"), "the node of zone b");
}

/// A CSI driver that may attach one volume to node vol-3: a second pod there with another of
/// its volumes waits, with kube-scheduler's message.
async fn the_attach_limit_of_a_csi_driver_holds(plane: &ControlPlane, client: &Client) {
    let ns = "limits";
    create_namespace(client, ns).await;
    let mut objects = String::from(
        "apiVersion: storage.k8s.io/v1
kind: CSINode
metadata: {name: vol-3}
spec:
  drivers: [{name: csi.example.com, nodeID: vol-3, allocatable: {count: 1}}]
",
    );
    for i in 1..=2 {
        objects.push_str(&format!(
            "---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: csi-{i}}}
spec:
  storageClassName: \"\"
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  csi: {{driver: csi.example.com, volumeHandle: disk-{i}}}
  claimRef: {{namespace: limits, name: disk-{i}}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: disk-{i}, namespace: limits}}
spec:
  storageClassName: \"\"
  volumeName: csi-{i}
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 1Gi}}}}
"
        ));
    }
    apply(plane, &objects);
    for i in 1..=2 {
        let name = format!("disk-{i}");
        wait_for("the CSI claims bound", async || {
            claim(client, ns, &name).await.filter(is_bound)
        })
        .await;
    }
    for i in 1..=2 {
        apply(
            plane,
            &format!(
                "apiVersion: v1
kind: Pod
metadata: {{name: user-{i}, namespace: limits}}
spec:
  schedulerName: gantry
  nodeSelector: {{kubernetes.io/hostname: vol-3}}
  containers: [{{name: app, image: registry.example/app:1}}]
  volumes: [{{name: data, persistentVolumeClaim: {{claimName: disk-{i}}}}}]
"
            ),
        );
        if i == 1 {
            wait_for("the first user bound", async || {
                node_of(&get_pod(client, ns, "user-1").await).map(|_| ())
            })
            .await;
        }
    }
    wait_for("the second user refused", async || {
        let events = events(client, ns).await;
        events_about(&events, "user-2", "FailedScheduling")
            .iter()
            .find(|e| {
                e.note
                    .as_deref()
                    .is_some_and(|n| n.contains("1 node(s) exceed max volume count"))
            })
            .map(|_| ())
    })
    .await;
    assert_eq!(node_of(&get_pod(client, ns, "user-2").await), None);
}

/// With no PV controller to complete it, a binding of volumes times out after
/// `bindTimeoutSeconds`: the pod is not bound, it gets kube-scheduler's message, and it is
/// tried again after its backoff (the volume stays promised to its claim, as kube-scheduler
/// leaves it, so the next try waits on the same volume).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_binding_that_times_out_leaves_the_pod_unbound_and_retried() {
    let plane = ControlPlane::start();
    let client = plane.client().await;
    create_node(&client, &node("slow-1", "slow", "4", "8Gi")).await;
    let config = config("gantry", "slow", None, "").replace(
        "  pluginConfig:\n",
        "  pluginConfig:\n  - name: VolumeBinding\n    args: {bindTimeoutSeconds: 2}\n",
    );
    let mut gantry = Gantry::start(plane.dir(), "gantry", &config, &plane.kubeconfig());
    gantry.wait_ready().await;
    let ns = "slow";
    create_namespace(&client, ns).await;
    apply(
        &plane,
        "apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: local}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
",
    );
    apply(&plane, &local_volume("slow-pv", "local", "slow-1"));
    Api::<PersistentVolume>::all(client.clone())
        .patch_status(
            "slow-pv",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"phase": "Available"}})),
        )
        .await
        .expect("volume status");
    apply(
        &plane,
        "apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: slow}
spec:
  storageClassName: local
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: app, namespace: slow}
spec:
  schedulerName: gantry
  containers: [{name: app, image: registry.example/app:1}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
",
    );
    let timed_out =
        "running PreBind plugin \"VolumeBinding\": binding volumes: context deadline exceeded";
    wait_for("the timeout's event", async || {
        let events = events(&client, ns).await;
        events_about(&events, "app", "FailedScheduling")
            .iter()
            .find(|e| e.note.as_deref().is_some_and(|n| n.contains(timed_out)))
            .map(|_| ())
    })
    .await;
    wait_for("a second try, timed out too", async || {
        let log = gantry.log_text();
        (log.matches("binding failed; retrying after backoff")
            .count()
            >= 2)
            .then_some(())
    })
    .await;
    assert_eq!(node_of(&get_pod(&client, ns, "app").await), None);
    assert!(gantry.is_running(), "gantry exited:\n{}", gantry.log_text());
}
