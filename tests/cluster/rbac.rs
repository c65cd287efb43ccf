//! gantry with only the permissions of its own RBAC role (deploy/10-rbac.yaml) and its own
//! configuration (deploy/20-configmap.yaml, with DefaultPreemption enabled), running as a user
//! bound to that role: it lists and watches, binds (a pod with a claim to bind too: it writes
//! the volume and reads the claim back), records events and conditions, preempts (marks and
//! deletes its victims, reports them, nominates the preemptor), and holds and releases its
//! lease, without a single request refused. Under the same role, gantry's PodDisruptionBudget watcher (which no
//! plugin of the deployed configuration needs yet, so it is run from the library) lists the
//! `policy/v1` budgets, and hears one change and another go; its PodGroup watcher finds the PodGroup CRD not installed and
//! reports itself synced with none.

use crate::support;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use gantry_adapter::driver::Input;
use gantry_adapter::watch;
use gantry_core::cache::{Tracked, TrackedSet};
use gantry_core::config::{Config, ContentType};
use gantry_core::scheduler::Scheduler;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, Patch, PatchParams};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deployed_role_is_all_gantry_needs() {
    let plane = ControlPlane::start();
    let client = plane.client().await;
    let deploy = repo().join("deploy");
    let config = deployed_config_with_preemption(&deploy);

    // Without the role, the user "gantry" can do nothing: gantry never gets ready.
    let mut denied = Gantry::start(plane.dir(), "denied", &config, &plane.gantry_kubeconfig());
    eventually(Duration::from_secs(20), "list refused", || async {
        denied.log_text().contains("forbidden").then_some(())
    })
    .await;
    assert_eq!(denied.get("/readyz").map(|r| r.0), Some(503));
    denied.kill();

    bind_the_user_to_the_deployed_role(&plane, &deploy);
    let ns = "apps";
    create_the_cluster_gantry_reads(&plane, &client, ns).await;
    the_budget_watcher_reads_budgets_under_the_role(&plane, &client, ns).await;

    let mut gantry = Gantry::start(plane.dir(), "rbac", &config, &plane.gantry_kubeconfig());
    gantry.wait_ready().await;
    bind_small_pods_and_reject_a_big_one(&client, ns).await;
    // A pod with a claim to bind: gantry writes the chosen volume's claimRef and reads the
    // claim back until the PV controller (admin credentials) has bound it.
    let _controller = KubeControllerManager::start(&plane, &[]).unwrap_or_else(|e| panic!("{e}"));
    bind_a_pod_with_a_claim(&plane, &client, ns).await;
    // A pod of higher priority that fits nowhere: some of the 500m pods are evicted for it.
    plane
        .try_kubectl(
            &["apply", "-f", "-"],
            Some("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: rbac-high}\nvalue: 1000\n"),
        )
        .unwrap_or_else(|e| panic!("kubectl apply: {e}"));
    let mut vip = pod(ns, "vip", "gantry", "1500m", "128Mi");
    vip.spec.as_mut().expect("spec").priority_class_name = Some("rbac-high".to_string());
    let nominations = Nominations::watch(&client, ns);
    create_pod(&client, &vip).await;
    wait_preemptor_bound_where_nominated(&client, ns, &nominations).await;

    assert_the_lease_held_then_released(&client, &mut gantry).await;
}

/// The configuration of deploy/20-configmap.yaml with DefaultPreemption enabled, so that the
/// role is tested with every request gantry may make.
fn deployed_config_with_preemption(deploy: &Path) -> String {
    let configmap: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(deploy.join("20-configmap.yaml"))
            .expect("deploy/20-configmap.yaml"),
    )
    .expect("ConfigMap YAML");
    let deployed = configmap["data"]["config.yaml"]
        .as_str()
        .expect("data.config.yaml");
    // The deployed profile, preempting too (not in the default profile yet).
    let profile = "- schedulerName: gantry\n";
    assert!(deployed.ends_with(profile), "{deployed}");
    format!("{deployed}  plugins:\n    multiPoint:\n      enabled: [{{name: DefaultPreemption}}]\n")
}

/// Applies deploy/'s namespace and RBAC manifests and binds the user "gantry" to its roles,
/// so that gantry runs with those permissions alone.
fn bind_the_user_to_the_deployed_role(plane: &ControlPlane, deploy: &Path) {
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
}

/// Creates `ns` with two nodes, a Service and two PodDisruptionBudgets, so that gantry lists
/// and watches every kind it reads.
async fn create_the_cluster_gantry_reads(plane: &ControlPlane, client: &kube::Client, ns: &str) {
    create_namespace(client, ns).await;
    create_node(client, &node("rbac-1", ns, "2", "4Gi")).await;
    create_node(client, &node("rbac-2", ns, "2", "4Gi")).await;
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

    // PodDisruptionBudgets (there while gantry runs below, too).
    plane
        .try_kubectl(
            &["apply", "-f", "-"],
            Some(
                "apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: apps}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: web}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: gone, namespace: apps}
spec:
  maxUnavailable: 1
  selector: {matchExpressions: [{key: app, operator: In, values: [db]}]}
",
            ),
        )
        .unwrap_or_else(|e| panic!("kubectl apply: {e}"));
}

/// Creates pods that fit and one too big for any node, and waits until gantry has bound
/// those and rejected that one, with their events, so that binding and reporting are
/// exercised under the role.
async fn bind_small_pods_and_reject_a_big_one(client: &kube::Client, ns: &str) {
    for i in 0..6 {
        let mut p = pod(ns, &format!("w{i}"), "gantry", "500m", "128Mi");
        // Deleted at once when preempted below (no kubelet stops them).
        p.spec
            .as_mut()
            .expect("spec")
            .termination_grace_period_seconds = Some(0);
        create_pod(client, &p).await;
    }
    create_pod(client, &pod(ns, "too-big", "gantry", "3", "128Mi")).await;
    eventually(
        Duration::from_secs(20),
        "6 bound, 1 rejected, with events",
        || async {
            let ps = pods(client, ns).await;
            let evs = events(client, ns).await;
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
}

/// Creates a local volume, a claim waiting for its first consumer and a pod using it, and
/// waits until gantry has bound the pod to the volume's node, so that volume binding is
/// exercised under the role.
async fn bind_a_pod_with_a_claim(plane: &ControlPlane, client: &kube::Client, ns: &str) {
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
            let p = get_pod(client, ns, "stateful").await;
            (node_of(&p) == Some("rbac-2")).then_some(())
        },
    )
    .await;
}

/// Waits until the preemptor `vip` is bound where `nominations` saw it nominated and its
/// victims are gone and reported, so that preemption is exercised under the role.
async fn wait_preemptor_bound_where_nominated(
    client: &kube::Client,
    ns: &str,
    nominations: &Nominations,
) {
    eventually(
        Duration::from_secs(30),
        "the preemptor bound where it was nominated, its victims gone and reported",
        || async {
            let p = get_pod(client, ns, "vip").await;
            let node = node_of(&p)?;
            // Seen before the API server cleared it at the binding.
            let nominated = nominations.of("vip");
            let victims: BTreeSet<String> = events(client, ns)
                .await
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some("Preempted"))
                .filter_map(|e| e.regarding?.name)
                .collect();
            let names: BTreeSet<String> = pods(client, ns)
                .await
                .into_iter()
                .filter_map(|p| p.metadata.name)
                .collect();
            let gone = !victims.is_empty() && victims.iter().all(|v| !names.contains(v));
            (nominated.as_deref() == Some(node) && gone).then_some(())
        },
    )
    .await;
}

/// Checks that `gantry` holds its lease, then terminates it and checks that it exited
/// cleanly, was refused nothing and released the lease.
async fn assert_the_lease_held_then_released(client: &kube::Client, gantry: &mut Gantry) {
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

/// Runs gantry's watchers with [`Tracked::DisruptionBudgets`] and [`Tracked::PodGroups`] as
/// the user `gantry` (bound to the deployed role): the budgets of `namespace` (`web` and
/// `gone`) are listed, a change of `web`'s status is heard, and
/// `gone`'s deletion; the PodGroup watcher, without the CRD, is synced with none.
async fn the_budget_watcher_reads_budgets_under_the_role(
    plane: &ControlPlane,
    admin: &kube::Client,
    namespace: &str,
) {
    let as_gantry = client_for(&plane.gantry_kubeconfig()).await;
    let (sender, inputs) = std::sync::mpsc::channel();
    let watching = watch::Watching {
        client: as_gantry,
        inputs: sender,
        watchers: Default::default(),
        metrics: Default::default(),
    };
    let (tasks, names) = watch::spawn_all(
        &watching,
        BTreeSet::from(["gantry".to_string()]),
        TrackedSet::of(&[Tracked::DisruptionBudgets, Tracked::PodGroups]),
        ContentType::Json,
        None,
    );
    assert_eq!(
        names,
        ["poddisruptionbudgets", "podgroups", "nodes", "pods"]
    );

    let mut heard = Heard::new();
    heard
        .until(&inputs, "the budgets listed, no PodGroups", |h| {
            h.synced.contains("poddisruptionbudgets") && h.synced.contains("podgroups")
        })
        .await;
    assert_eq!(
        heard.budgets(),
        [
            (namespace.to_string(), "gone".to_string(), 0, Vec::new()),
            (namespace.to_string(), "web".to_string(), 0, Vec::new())
        ]
    );

    // The disruption controller is not running: the admin writes the status it would.
    let budgets = Api::<PodDisruptionBudget>::namespaced(admin.clone(), namespace);
    let patched = budgets
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {
                "disruptionsAllowed": 2,
                "disruptedPods": {"w9": "2024-01-02T03:04:05Z"},
                "currentHealthy": 3, "desiredHealthy": 1, "expectedPods": 3,
                "observedGeneration": 1
            }})),
        )
        .await
        .expect("patch the budget's status");
    assert_eq!(patched.status.and_then(|s| s.disruptions_allowed), Some(2));
    heard
        .until(&inputs, "the status change heard", |h| {
            h.budgets().iter().any(|(_, name, allowed, disrupted)| {
                name == "web" && *allowed == 2 && disrupted == &["w9".to_string()]
            })
        })
        .await;

    plane.kubectl(&[
        "delete",
        "poddisruptionbudget",
        "gone",
        "--namespace",
        namespace,
    ]);
    heard
        .until(&inputs, "the deletion heard", |h| {
            h.budgets().iter().all(|(_, name, ..)| name != "gone")
        })
        .await;
    drop(inputs);
    for task in tasks {
        task.abort();
    }
}

/// What the watchers' inputs did to a scheduler (of the default configuration, which keeps
/// PodDisruptionBudgets), and the watchers that have listed.
struct Heard {
    scheduler: Scheduler,
    synced: BTreeSet<&'static str>,
}

impl Heard {
    fn new() -> Heard {
        let config = Config::default_with(&gantry_core::plugins::registry()).expect("defaults");
        Heard {
            scheduler: Scheduler::new(config, None),
            synced: BTreeSet::new(),
        }
    }

    /// The budgets held: namespace, name, disruptions allowed, the disrupted pods; by name.
    fn budgets(&self) -> Vec<(String, String, i32, Vec<String>)> {
        let mut budgets: Vec<_> = self
            .scheduler
            .cache()
            .disruption_budgets()
            .map(|b| {
                let disrupted = b.disrupted_pods.iter().cloned().collect();
                (
                    b.namespace.clone(),
                    b.name.clone(),
                    b.disruptions_allowed,
                    disrupted,
                )
            })
            .collect();
        budgets.sort();
        budgets
    }

    /// Applies the watchers' inputs to the scheduler until `done` holds; panics after 20 s.
    async fn until(&mut self, inputs: &Receiver<Input>, what: &str, done: impl Fn(&Heard) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            while let Ok(input) = inputs.try_recv() {
                match input {
                    Input::Object(change) => change.apply(&mut self.scheduler, Duration::ZERO),
                    Input::Synced(watcher) => {
                        self.synced.insert(watcher);
                    }
                    _ => {}
                }
            }
            if done(self) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: only {:?}",
                self.budgets()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
