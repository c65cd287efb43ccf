//! `gantry what-if` against a running `gantry run` on a real kube-apiserver, then the same
//! pods created for real: every pod lands where what-if said, the one it said would stay
//! pending stays pending, and `--max` is exact (of `--max` + 1 replicas, exactly one stays
//! pending). `gantry snapshot` writes the running state, and what-if on that file gives the
//! same answers, storage included. Nothing what-if does is seen by the cluster.

use crate::support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use support::*;

const NS: &str = "whatif";
const PROFILE: &str = "gantry-whatif";

fn cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args(args)
        .output()
        .expect("run gantry")
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "gantry failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The answer's pods: name to node (none when pending).
fn placements(answer: &serde_json::Value) -> BTreeMap<String, Option<String>> {
    answer["pods"]
        .as_array()
        .expect("pods")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().expect("name").to_string(),
                p["node"].as_str().map(str::to_string),
            )
        })
        .collect()
}

fn write_yaml(path: &Path, objects: &[serde_json::Value]) {
    let docs: Vec<String> = objects
        .iter()
        .map(|o| serde_yaml::to_string(o).expect("yaml"))
        .collect();
    std::fs::write(path, docs.join("---\n")).expect("write the question");
}

fn stateful_set(replicas: i32) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": NS},
        "spec": {
            "replicas": replicas,
            "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}},
                "spec": {
                    "schedulerName": PROFILE,
                    "containers": [{
                        "name": "db",
                        "image": "registry.example/db:1",
                        "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}
                    }]
                }
            }
        }
    })
}

/// The pod the StatefulSet controller would create as replica `i` of `set` (created by the
/// test: without kubelets, the controller would wait for `db-0` to be ready before `db-1`).
fn stateful_pod(set: &StatefulSet, i: usize) -> Pod {
    let name = format!("db-{i}");
    let template = set.spec.template.clone();
    let mut metadata = template.metadata.unwrap_or_default();
    metadata.name = Some(name.clone());
    metadata.namespace = Some(NS.to_string());
    metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("statefulset.kubernetes.io/pod-name".to_string(), name);
    metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "apps/v1".to_string(),
            kind: "StatefulSet".to_string(),
            name: "db".to_string(),
            uid: set.metadata.uid.clone().expect("uid"),
            controller: Some(true),
            block_owner_deletion: Some(true),
        },
    ]);
    Pod {
        metadata,
        spec: template.spec,
        status: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_if_agrees_with_what_the_scheduler_then_does() {
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    create_namespace(&client, NS).await;
    create_nodes_in_two_zones(&client).await;
    let config = config(PROFILE, NS, None, "");
    let config_file = plane.dir().join("whatif-config.yaml");
    std::fs::write(&config_file, &config).expect("config");
    let running = Gantry::start_ready(plane.dir(), NS, &config, &plane.kubeconfig()).await;
    let server = format!("http://{}", running.addr);
    // Some pods already running.
    create_pod(&client, &pod(NS, "running-1", PROFILE, "1500m", "1Gi")).await;
    create_pod(&client, &pod(NS, "running-2", PROFILE, "1", "512Mi")).await;
    wait_bound(&client, NS, "running-1", Duration::from_secs(30)).await;
    wait_bound(&client, NS, "running-2", Duration::from_secs(30)).await;

    // A batch of bare pods with fixed names, one too big for any node, and a StatefulSet.
    let bare: Vec<Pod> = [
        ("p-1", "700m"),
        ("p-2", "1200m"),
        ("p-3", "300m"),
        ("p-4", "9"),
        ("p-5", "1"),
        ("p-6", "600m"),
    ]
    .iter()
    .map(|(name, cpu)| pod(NS, name, PROFILE, cpu, "128Mi"))
    .collect();
    let mut objects: Vec<serde_json::Value> = bare
        .iter()
        .map(|p| {
            let mut v = serde_json::to_value(p).expect("pod");
            v["apiVersion"] = "v1".into();
            v["kind"] = "Pod".into();
            v
        })
        .collect();
    objects.push(stateful_set(3));
    let question = plane.dir().join("whatif-batch.yaml");
    write_yaml(&question, &objects);
    let q = question.display().to_string();
    let predicted = ask_the_batch_question(&q, &server);
    // Nothing was created or bound by the question.
    assert_eq!(pods(&client, NS).await.len(), 2);

    assert_the_snapshot_answers_the_same(&plane, &q, &server, &config_file, &predicted);
    create_the_batch_and_check_it_lands_as_predicted(&client, &bare, &predicted).await;
    assert_max_is_exact(&plane, &client, &server).await;
}

/// Creates the test's nodes, of unequal sizes in two zones, so that where a pod goes depends
/// on both its size and the spreading of its set.
async fn create_nodes_in_two_zones(client: &kube::Client) {
    for (name, cpu) in [("wi-a", "4"), ("wi-b", "4"), ("wi-c", "2"), ("wi-d", "3")] {
        create_node(
            client,
            &labelled_node(
                name,
                NS,
                cpu,
                "8Gi",
                &[(
                    "topology.kubernetes.io/zone",
                    if name < "wi-c" { "z1" } else { "z2" },
                )],
            ),
        )
        .await;
    }
}

/// Asks the running gantry at `server` the batch question in the file `q`, as JSON and as a
/// table, checks that only the pod too big for any node is left pending, and returns the
/// placements it predicts.
fn ask_the_batch_question(q: &str, server: &str) -> BTreeMap<String, Option<String>> {
    let answer: serde_json::Value = serde_json::from_str(&stdout(&cli(&[
        "what-if", q, "--server", server, "--output", "json",
    ])))
    .expect("a JSON answer");
    let predicted = placements(&answer);
    assert_eq!(predicted.len(), 9, "{answer}");
    assert_eq!(predicted["p-4"], None, "9 cpu fits no node: {answer}");
    assert!(
        predicted
            .iter()
            .filter(|(n, _)| *n != "p-4")
            .all(|(_, node)| node.is_some()),
        "{answer}"
    );
    // The table says the same, with the reason for the pending one.
    let table = stdout(&cli(&["what-if", q, "--server", server]));
    assert!(
        table
            .lines()
            .any(|l| l.contains(" p-4 ") && l.ends_with("(pending)")),
        "{table}"
    );
    assert!(
        table.contains("What single change would let it fit:"),
        "{table}"
    );
    predicted
}

/// Writes the state of the gantry at `server` as a snapshot file and checks that the
/// question in the file `q`, asked of that file with the same configuration, gets the
/// `predicted` answer.
fn assert_the_snapshot_answers_the_same(
    plane: &ControlPlane,
    q: &str,
    server: &str,
    config_file: &Path,
    predicted: &BTreeMap<String, Option<String>>,
) {
    // The state as a snapshot file, and the same question asked of it.
    let snapshot = plane.dir().join("whatif-snapshot.yaml");
    stdout(&cli(&[
        "snapshot",
        "--server",
        server,
        "-f",
        &snapshot.display().to_string(),
    ]));
    let offline: serde_json::Value = serde_json::from_str(&stdout(&cli(&[
        "what-if",
        q,
        "--snapshot",
        &snapshot.display().to_string(),
        "--config",
        &config_file.display().to_string(),
        "--output",
        "json",
    ])))
    .expect("a JSON answer");
    assert_eq!(&placements(&offline), predicted, "offline: {offline}");
}

/// Creates the `bare` pods and the StatefulSet with its pods for real, in the question's
/// order, and checks that each pod lands where `predicted` said, or stays pending.
async fn create_the_batch_and_check_it_lands_as_predicted(
    client: &kube::Client,
    bare: &[Pod],
    predicted: &BTreeMap<String, Option<String>>,
) {
    // Now for real, in the same order.
    for p in bare {
        create_pod(client, p).await;
    }
    let set: StatefulSet = Api::namespaced(client.clone(), NS)
        .create(
            &PostParams::default(),
            &serde_json::from_value(stateful_set(3)).expect("StatefulSet"),
        )
        .await
        .expect("create the StatefulSet");
    // gantry hears of the StatefulSet (its selector spreads the pods) before its pods.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for i in 0..3 {
        create_pod(client, &stateful_pod(&set, i)).await;
    }
    for (name, node) in predicted {
        match node {
            Some(node) => {
                let bound = wait_bound(client, NS, name, Duration::from_secs(30)).await;
                assert_eq!(&bound, node, "{name} landed elsewhere than predicted");
            }
            None => {
                wait_unschedulable(client, NS, name, Duration::from_secs(30)).await;
            }
        }
    }
}

/// Asks the gantry at `server` how many more filler pods fit, creates one more than that,
/// and checks that exactly one stays pending while every other pod is bound.
async fn assert_max_is_exact(plane: &ControlPlane, client: &kube::Client, server: &str) {
    // --max: how many more 700m pods fit now; one more than that stays pending.
    let filler = {
        let mut v = serde_json::to_value(pod(NS, "filler", PROFILE, "700m", "64Mi")).expect("pod");
        v["apiVersion"] = "v1".into();
        v["kind"] = "Pod".into();
        v
    };
    let max_question = plane.dir().join("whatif-max.yaml");
    write_yaml(&max_question, &[filler]);
    let mq = max_question.display().to_string();
    let answer: serde_json::Value = serde_json::from_str(&stdout(&cli(&[
        "what-if", &mq, "--server", server, "--max", "--output", "json",
    ])))
    .expect("a JSON answer");
    let fits = answer["capacity"][0]["fits"].as_u64().expect("fits") as usize;
    assert!(fits > 0, "{answer}");
    assert!(
        answer["capacity"][0]["stoppedBy"]
            .as_str()
            .is_some_and(|s| s.contains("Insufficient cpu")),
        "{answer}"
    );
    let names: Vec<String> = (0..=fits)
        .map(|i| {
            if i == 0 {
                "filler".to_string()
            } else {
                format!("filler-{i}")
            }
        })
        .collect();
    for name in &names {
        create_pod(client, &pod(NS, name, PROFILE, "700m", "64Mi")).await;
    }
    let mut pending = 0;
    for name in &names {
        let done = eventually(Duration::from_secs(30), "filler decided", || async {
            let p = get_pod(client, NS, name).await;
            if node_of(&p).is_some() {
                return Some(false);
            }
            pod_scheduled(&p)
                .filter(|c| c.0 == "False" && c.1 == "Unschedulable")
                .map(|_| true)
        })
        .await;
        pending += usize::from(done);
    }
    assert_eq!(
        pending,
        1,
        "of {} replicas, exactly one stays pending",
        fits + 1
    );
    let all = bound_pods(client, NS).await;
    assert_eq!(all.len(), 2 + 8 + fits, "every other pod is bound");
}

/// A question whose answer depends on storage gets the same answer from the running gantry
/// and from its snapshot, and the snapshot holds the storage objects as the API server has
/// them: a pod whose claim only a local volume on one node can take goes to that node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_carries_the_volumes_a_question_needs() {
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let ns = "whatif-volumes";
    create_namespace(&client, ns).await;
    for name in ["wiv-a", "wiv-b", "wiv-c"] {
        create_node(&client, &node(name, ns, "4", "8Gi")).await;
    }
    plane
        .try_kubectl(
            &["apply", "-f", "-"],
            Some(&format!(
                "apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {{name: whatif-local}}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: whatif-local-b}}
spec:
  storageClassName: whatif-local
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  local: {{path: /mnt/whatif}}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{{key: kubernetes.io/hostname, operator: In, values: [wiv-b]}}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: data, namespace: {ns}}}
spec:
  storageClassName: whatif-local
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 1Gi}}}}
"
            )),
        )
        .unwrap_or_else(|e| panic!("kubectl apply: {e}"));
    // What the PV controller (not running here) would write: kube-scheduler matches
    // available volumes only.
    Api::<PersistentVolume>::all(client.clone())
        .patch_status(
            "whatif-local-b",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"phase": "Available"}})),
        )
        .await
        .expect("the volume available");
    let profile = "gantry-whatif-volumes";
    let config = config(profile, ns, None, "");
    let config_file = plane.dir().join("whatif-volumes-config.yaml");
    std::fs::write(&config_file, &config).expect("config");
    let running = Gantry::start_ready(plane.dir(), ns, &config, &plane.kubeconfig()).await;
    let server = format!("http://{}", running.addr);

    let question = plane.dir().join("whatif-volumes.yaml");
    write_yaml(
        &question,
        &[serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "uses-data", "namespace": ns},
            "spec": {
                "schedulerName": profile,
                "containers": [{"name": "app", "image": "registry.example/app:1"}],
                "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]
            }
        })],
    );
    let q = question.display().to_string();
    let live: serde_json::Value = serde_json::from_str(&stdout(&cli(&[
        "what-if", &q, "--server", &server, "--output", "json",
    ])))
    .expect("a JSON answer");
    let expected = BTreeMap::from([("uses-data".to_string(), Some("wiv-b".to_string()))]);
    assert_eq!(placements(&live), expected, "live: {live}");

    let snapshot = plane.dir().join("whatif-volumes-snapshot.yaml");
    stdout(&cli(&[
        "snapshot",
        "--server",
        &server,
        "-f",
        &snapshot.display().to_string(),
    ]));
    let objects: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(
        &std::fs::read_to_string(&snapshot).expect("read the snapshot"),
    )
    .map(|d| serde::Deserialize::deserialize(d).expect("a YAML document"))
    .flat_map(|d: serde_yaml::Value| match d["items"].as_sequence() {
        Some(items) if d["kind"] == "List" => items.clone(),
        _ => vec![d],
    })
    .collect();
    for (kind, name) in [
        ("StorageClass", "whatif-local"),
        ("PersistentVolume", "whatif-local-b"),
        ("PersistentVolumeClaim", "data"),
    ] {
        assert!(
            objects
                .iter()
                .any(|o| o["kind"] == kind && o["metadata"]["name"] == name),
            "the snapshot has no {kind} {name}"
        );
    }
    let offline: serde_json::Value = serde_json::from_str(&stdout(&cli(&[
        "what-if",
        &q,
        "--snapshot",
        &snapshot.display().to_string(),
        "--config",
        &config_file.display().to_string(),
        "--output",
        "json",
    ])))
    .expect("a JSON answer");
    assert_eq!(placements(&offline), expected, "offline: {offline}");

    // The questions bound nothing.
    let claim = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .get("data")
        .await
        .expect("get the claim");
    assert_eq!(claim.spec.and_then(|s| s.volume_name), None);
    assert!(
        claim
            .metadata
            .annotations
            .unwrap_or_default()
            .keys()
            .all(|k| k != "volume.kubernetes.io/selected-node"),
        "a question selected a node for the claim"
    );
}

/// The user's token in a kubeconfig of the control plane.
fn token_of(kubeconfig: &Path) -> String {
    let text = std::fs::read_to_string(kubeconfig).expect("kubeconfig");
    let config: serde_yaml::Value = serde_yaml::from_str(&text).expect("kubeconfig YAML");
    config["users"][0]["user"]["token"]
        .as_str()
        .expect("a token")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secure_port_asks_for_a_token_allowed_the_path() {
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let ns = "whatif-secure";
    create_namespace(&client, ns).await;
    create_node(&client, &node("wis-a", ns, "2", "4Gi")).await;
    let profile = "gantry-whatif-secure";
    let config_file = plane.dir().join("whatif-secure-config.yaml");
    std::fs::write(&config_file, config(profile, ns, None, "")).expect("config");
    let port = free_port();
    let admin = plane.kubeconfig().display().to_string();
    let log = plane.dir().join("gantry-whatif-secure.log");
    let _gantry = Killed(
        Command::new(env!("CARGO_BIN_EXE_gantry"))
            .arg("run")
            .arg(format!("--config={}", config_file.display()))
            .arg(format!("--kubeconfig={admin}"))
            .arg(format!("--authentication-kubeconfig={admin}"))
            .arg(format!("--authorization-kubeconfig={admin}"))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={port}"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("start gantry"),
    );
    let server = format!("https://127.0.0.1:{port}");
    let question = plane.dir().join("whatif-secure.yaml");
    let mut p = serde_json::to_value(pod(ns, "asked", profile, "1", "64Mi")).expect("pod");
    p["apiVersion"] = "v1".into();
    p["kind"] = "Pod".into();
    write_yaml(&question, &[p]);
    let q = question.display().to_string();
    let ask = |token: Option<&str>| {
        let mut args = vec![
            "what-if",
            &q,
            "--server",
            &server,
            "--insecure-skip-tls-verify",
        ];
        if let Some(t) = token {
            args.extend(["--token", t]);
        }
        args.extend(["--output", "json"]);
        cli(&args)
    };
    let admin_token = plane.var("ADMIN_TOKEN");
    let answer = eventually(
        Duration::from_secs(60),
        "an answer on the secure port",
        || {
            let out = ask(Some(&admin_token));
            async move { out.status.success().then(|| stdout(&out)) }
        },
    )
    .await;
    let answer: serde_json::Value = serde_json::from_str(&answer).expect("JSON");
    assert_eq!(
        placements(&answer)["asked"].as_deref(),
        Some("wis-a"),
        "{answer}"
    );

    let out = ask(None);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("answered 401: Unauthorized"), "{err}");
    // The user `gantry`, bound to no role, is refused; bound to deploy/'s gantry-what-if
    // role, it is answered.
    let user = token_of(&plane.gantry_kubeconfig());
    let out = ask(Some(&user));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "answered 403: forbidden: User \"gantry\" cannot create path \"/debug/whatif\""
        ),
        "{err}"
    );
    let rbac = std::fs::read_to_string(repo().join("deploy/10-rbac.yaml")).expect("deploy RBAC");
    let role = rbac
        .split("\n---\n")
        .find(|d| d.contains("name: gantry-what-if"))
        .expect("the gantry-what-if role");
    let role_file = plane.dir().join("whatif-role.yaml");
    std::fs::write(&role_file, role).expect("role");
    plane.kubectl(&["apply", "-f", &role_file.display().to_string()]);
    plane.kubectl(&[
        "create",
        "clusterrolebinding",
        "whatif-gantry",
        "--clusterrole=gantry-what-if",
        "--user=gantry",
    ]);
    eventually(Duration::from_secs(30), "the bound user answered", || {
        let out = ask(Some(&user));
        async move { out.status.success().then_some(()) }
    })
    .await;
    let snapshot = cli(&[
        "snapshot",
        "--server",
        &server,
        "--insecure-skip-tls-verify",
        "--token",
        &user,
    ]);
    assert!(stdout(&snapshot).contains("name: wis-a"));
}

/// A child process killed when the test ends, however it ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A question as `POST /debug/whatif` takes it: `objects`, and `max` with `maxLimit`.
fn question_body(objects: &[serde_json::Value], max_limit: Option<usize>) -> String {
    let mut q = serde_json::json!({ "objects": objects });
    if let Some(limit) = max_limit {
        q["max"] = true.into();
        q["maxLimit"] = limit.into();
    }
    q.to_string()
}

/// A Deployment of `replicas` tiny pods of `profile` in `ns`.
fn deployment(ns: &str, profile: &str, replicas: u64) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "flood", "namespace": ns},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "flood"}},
            "template": {"metadata": {"labels": {"app": "flood"}},
                "spec": {"schedulerName": profile, "containers": [{"name": "c", "image": "i",
                    "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}}]}}}
    })
}

/// Questions an adversary asks are bounded: a billion replicas, or a `maxLimit` beyond the
/// limit, are refused at once (400) and gantry's memory does not grow; beyond
/// `--whatif-concurrent` questions at once the rest are refused (429); a question whose
/// asker went away stops (its place is free again within a second); one that runs past
/// `--whatif-timeout` is stopped (503); and SIGTERM ends gantry within seconds while
/// questions run. The plain port serves no question without `--address-serves-debug`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_questions_are_bounded() {
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let ns = "whatif-hostile";
    create_namespace(&client, ns).await;
    create_nodes_with_room_for_many_pods(&client, ns).await;
    let profile = "gantry-whatif-hostile";
    let args: Vec<String> = [
        "--whatif-concurrent=2",
        "--whatif-timeout=20s",
        "--whatif-max-pods=5000",
    ]
    .map(String::from)
    .to_vec();
    let mut gantry = Gantry::start_with_args(
        plane.dir(),
        ns,
        &config(profile, ns, None, ""),
        &plane.kubeconfig(),
        &args,
    );
    gantry.wait_ready().await;
    let addr = gantry.addr;
    let rss_before = gantry.peak_rss();
    let wait = Duration::from_secs(60);

    // Too large: refused before anything is placed.
    let flood = [deployment(ns, profile, 1_000_000_000)];
    let (code, body) =
        http_post(addr, "/debug/whatif", &question_body(&flood, None), wait).expect("an answer");
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("the question places 1000000000 pods; at most 5000 are answered"),
        "{body}"
    );
    let one = [deployment(ns, profile, 1)];
    let (code, body) = http_post(
        addr,
        "/debug/whatif",
        &question_body(&one, Some(1_000_000_000)),
        wait,
    )
    .expect("an answer");
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("maxLimit 1000000000 is more than the 5000"),
        "{body}"
    );
    assert!(
        gantry.peak_rss() < rss_before + (64 << 20),
        "memory grew from {rss_before} to {}",
        gantry.peak_rss()
    );

    // Long questions: `--max` counting 5,000 replicas, one cycle each.
    let long = question_body(&one, Some(5_000));
    let quick = question_body(&one, Some(1));
    assert_abandoned_questions_stop(&gantry, &long, &quick, wait).await;
    assert_questions_beyond_the_concurrency_refused(addr, &long, wait);

    // Past its deadline: stopped, with why.
    let mut late = Gantry::start_with_args(
        plane.dir(),
        "whatif-late",
        &config(profile, ns, None, ""),
        &plane.kubeconfig(),
        &["--whatif-timeout=1s".to_string()],
    );
    late.wait_ready().await;
    let started = Instant::now();
    let (code, body) = http_post(
        late.addr,
        "/debug/whatif",
        &question_body(&one, Some(10_000)),
        wait,
    )
    .expect("an answer");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("ran past its deadline of 1s"), "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );

    // SIGTERM while two questions run: gantry ends within its grace.
    for _ in 0..2 {
        let long = question_body(&one, Some(10_000));
        std::thread::spawn(move || http_post(addr, "/debug/whatif", &long, wait));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stopping = Instant::now();
    gantry.terminate();
    assert!(
        stopping.elapsed() < Duration::from_secs(10),
        "took {:?} to stop",
        stopping.elapsed()
    );

    // Without --address-serves-debug, the plain port answers no question.
    let mut plain = Gantry::start_without_debug(
        plane.dir(),
        "whatif-plain",
        &config(profile, ns, None, ""),
        &plane.kubeconfig(),
    );
    plain.wait_ready().await;
    let (code, _) = http_post(plain.addr, "/debug/whatif", &quick, wait).expect("an answer");
    assert_eq!(code, 404);
    assert_eq!(plain.get("/debug/snapshot").map(|(c, _)| c), Some(404));
    assert_eq!(plain.get("/metrics").map(|(c, _)| c), Some(200));
}

/// Creates nodes in `ns` with room for far more tiny pods than a question may count, so that
/// `--max` counts to its limit.
async fn create_nodes_with_room_for_many_pods(client: &kube::Client, ns: &str) {
    // Room for far more tiny pods than a question may count: `--max` counts to its limit.
    for i in 0..20 {
        let mut n = node(&format!("wih-{i}"), ns, "64", "256Gi");
        n.status
            .as_mut()
            .expect("status")
            .allocatable
            .as_mut()
            .expect("allocatable")
            .insert(
                "pods".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("1000".to_string()),
            );
        create_node(client, &n).await;
    }
}

/// Sends `gantry` `long` questions until its places are taken and checks that a `quick` one
/// is refused, then that once their askers go away the questions stop and a place is soon
/// free again.
async fn assert_abandoned_questions_stop(gantry: &Gantry, long: &str, quick: &str, wait: Duration) {
    let addr = gantry.addr;
    // Two askers go away while their questions run (the places are taken: a third is
    // refused): the questions stop, long before they would end, and the places are free.
    let mut askers = Vec::new();
    for _ in 0..2 {
        askers.push(send_post(addr, "/debug/whatif", long).expect("sent"));
        // Its question under way before the next comes.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (code, body) = http_post(addr, "/debug/whatif", quick, wait).expect("an answer");
    assert_eq!(code, 429, "{body}");
    assert!(
        body.contains("2 what-if questions are being answered, the most at once"),
        "{body}"
    );
    let gone = Instant::now();
    drop(askers);
    let answered = eventually(Duration::from_secs(5), "a place free again", || async {
        http_post(addr, "/debug/whatif", quick, wait).filter(|(code, _)| *code == 200)
    })
    .await;
    assert!(answered.1.contains("\"fits\":1"), "{}", answered.1);
    assert!(
        gone.elapsed() < Duration::from_secs(3),
        "{:?}",
        gone.elapsed()
    );
    // One place free is enough for the question above: the other stop may come a moment later.
    eventually(Duration::from_secs(3), "both questions stopped", || async {
        let stops = gantry
            .log_text()
            .matches("what-if question stopped why=its asker went away")
            .count();
        (stops == 2).then_some(())
    })
    .await;
}

/// Asks the gantry at `addr` more `long` questions at once than it may answer together, and
/// checks that one is answered and one refused.
fn assert_questions_beyond_the_concurrency_refused(addr: SocketAddr, long: &str, wait: Duration) {
    // Three at once: two are answered (or stopped at their deadline), the third refused.
    let askers: Vec<_> = (0..3)
        .map(|_| {
            let long = long.to_string();
            std::thread::spawn(move || http_post(addr, "/debug/whatif", &long, wait))
        })
        .collect();
    let mut codes: Vec<u16> = askers
        .into_iter()
        .map(|a| a.join().expect("asker").map_or(0, |(code, _)| code))
        .collect();
    codes.sort_unstable();
    assert_eq!(codes[0], 200, "{codes:?}");
    assert_eq!(codes[2], 429, "{codes:?}");
}
