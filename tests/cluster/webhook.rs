//! `gantry webhook` called by a real kube-apiserver over TLS: the test makes a CA and a serving
//! certificate for 127.0.0.1, starts the webhook, registers a MutatingWebhookConfiguration
//! (failurePolicy Ignore) pointing at it, then checks the sticky split of 1,000 pods from 50
//! owners, the annotation precedence, pods left alone, the metrics, and that pod creation
//! goes on when the webhook is down.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use gantry_webhook::config::RolloutConfig;
use gantry_webhook::decision::Workload;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;

use support::*;

/// The share of the test's configuration.
const SHARE_PERCENT: u64 = 30;
/// Owners and pods per owner of the split.
const OWNERS: usize = 50;
const PODS_PER_OWNER: usize = 20;

/// A CA and a serving certificate for 127.0.0.1 signed by it, written to `dir` as
/// `<name>-ca.crt`, `<name>.crt` and `<name>.key`: (CA PEM, certificate file, key file).
fn certificates(dir: &Path, name: &str) -> (String, PathBuf, PathBuf) {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    };
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "gantry webhook test CA");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key).expect("CA certificate");
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().expect("serving key");
    let mut serving =
        CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .expect("serving params");
    serving
        .distinguished_name
        .push(DnType::CommonName, "gantry-webhook");
    let cert = serving
        .signed_by(&key, &issuer)
        .expect("serving certificate");
    let (cert_file, key_file) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&cert_file, cert.pem()).expect("write certificate");
    std::fs::write(&key_file, key.serialize_pem()).expect("write key");
    let ca_file = dir.join(format!("{name}-ca.crt"));
    std::fs::write(&ca_file, ca_cert.pem()).expect("write CA");
    (ca_cert.pem(), cert_file, key_file)
}

/// A `gantry webhook` process.
struct Webhook {
    child: Option<Child>,
    log: PathBuf,
    port: u16,
    ca_file: PathBuf,
}

impl Webhook {
    fn start(
        plane: &ControlPlane,
        config: &str,
        cert: &Path,
        key: &Path,
        kubeconfig: &Path,
    ) -> Webhook {
        let dir = plane.dir();
        let config_file = dir.join("rollout.yaml");
        std::fs::write(&config_file, config).expect("write config");
        let log = dir.join("gantry-webhook.log");
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_gantry"))
            .arg("webhook")
            .arg("--config")
            .arg(&config_file)
            .arg("--tls-cert-file")
            .arg(cert)
            .arg("--tls-private-key-file")
            .arg(key)
            .args(["--bind-address", "127.0.0.1", "--port", &port.to_string()])
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args([
                "--log",
                "info,gantry=debug",
                "--tls-reload-interval",
                "200ms",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("start gantry webhook");
        Webhook {
            child: Some(child),
            log,
            port,
            ca_file: dir.join("webhook-ca.crt"),
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// GET over HTTPS, verifying the server against the test CA: (status, body).
    fn get(&self, path: &str) -> Option<(u16, String)> {
        self.get_verified_by(path, &self.ca_file)
    }

    /// GET over HTTPS, verifying the server against the CA in `ca_file`.
    fn get_verified_by(&self, path: &str, ca_file: &Path) -> Option<(u16, String)> {
        let out = Command::new("curl")
            .args(["-s", "--max-time", "5", "-w", "\n%{http_code}", "--cacert"])
            .arg(ca_file)
            .arg(format!("https://127.0.0.1:{}{path}", self.port))
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n')?;
        let code: u16 = code.trim().parse().ok()?;
        (code != 0).then(|| (code, body.to_string()))
    }

    fn metric(&self, series: &str) -> f64 {
        metric_value(
            &self.get("/metrics").map(|r| r.1).unwrap_or_default(),
            series,
        )
    }

    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.get("/readyz").map(|r| r.0) != Some(200) {
            let running = self
                .child
                .as_mut()
                .is_some_and(|c| matches!(c.try_wait(), Ok(None)));
            assert!(running, "gantry webhook exited:\n{}", self.log_text());
            assert!(
                Instant::now() < deadline,
                "gantry webhook not ready after 60 s:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGTERM, then the exit status.
    fn terminate(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("gantry webhook ignored SIGTERM:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!("---- log of gantry webhook ----\n{}", self.log_text());
        }
    }
}

/// Registers the webhook at `https://127.0.0.1:<port>/mutate` with `ca` as its CA bundle;
/// failurePolicy Ignore and a 2 s timeout; kube-system excluded.
async fn register(client: &Client, port: u16, ca: &str) {
    let mut config: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "gantry-rollout"},
        "webhooks": [{
            "name": "rollout.gantry.io",
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/mutate")},
            "rules": [{
                "operations": ["CREATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
                "scope": "Namespaced"
            }],
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 2,
            "namespaceSelector": {"matchExpressions": [{
                "key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]
            }]}
        }]
    }))
    .expect("webhook configuration");
    if let Some(w) = config.webhooks.as_mut().and_then(|w| w.first_mut()) {
        w.client_config.ca_bundle = Some(ByteString(ca.as_bytes().to_vec()));
    }
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &config)
        .await
        .expect("create MutatingWebhookConfiguration");
}

async fn annotated_namespace(client: &Client, name: &str, annotations: &[(&str, &str)]) {
    let ns: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "annotations": annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>()
        }
    }))
    .expect("namespace");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
}

/// A pod, optionally with a controller owner `(kind, name)`, labels and annotations.
fn test_pod(
    namespace: &str,
    name: &str,
    owner: Option<(&str, &str)>,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
    scheduler: Option<&str>,
) -> Pod {
    let map = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>()
    };
    let mut p = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": map(labels),
            "annotations": map(annotations),
        },
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]}
    });
    if let Some((kind, owner)) = owner {
        p["metadata"]["ownerReferences"] = json!([{
            "apiVersion": if kind == "Job" { "batch/v1" } else { "apps/v1" },
            "kind": kind,
            "name": owner,
            "uid": format!("00000000-0000-0000-0000-{:012}", owner.len()),
            "controller": true
        }]);
    }
    if let Some(s) = scheduler {
        p["spec"]["schedulerName"] = json!(s);
    }
    serde_json::from_value(p).expect("pod")
}

/// A precedence case: namespace, pod annotations, the pod's schedulerName, the expected
/// schedulerName.
type Case = (
    &'static str,
    &'static [(&'static str, &'static str)],
    Option<&'static str>,
    &'static str,
);

/// Creates a pod and returns the stored pod's schedulerName.
async fn create(client: &Client, pod: &Pod) -> String {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let created: Pod = Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), pod)
        .await
        .unwrap_or_else(|e| panic!("create pod {:?}: {e}", pod.metadata.name));
    scheduler_of(&created)
}

fn scheduler_of(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduler_name.clone())
        .unwrap_or_default()
}

/// Creates pods 16 at a time; returns their schedulerNames in order.
async fn create_all(client: &Client, pods: &[Pod]) -> Vec<String> {
    futures::stream::iter(pods.iter().map(|p| create(client, p)))
        .buffered(16)
        .collect()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_a_sticky_share_of_workloads_and_never_blocks_pod_creation() {
    let plane = ControlPlane::start();
    let client = plane.client().await;
    let (ca, cert, key) = certificates(plane.dir(), "webhook");
    let mut webhook = start_webhook_as_the_deployed_user(&plane, &cert, &key).await;
    register(&client, webhook.port, &ca).await;
    wait_until_the_webhook_is_called(&client).await;
    assert_a_sticky_split_of_owners(&client, &webhook).await;
    assert_the_annotation_precedence(&client, &webhook).await;

    assert!(
        !webhook.log_text().contains("forbidden"),
        "a request was refused:\n{}",
        webhook.log_text()
    );

    assert_a_renewed_certificate_served(&plane, &webhook, &cert, &key).await;
    assert_pods_created_with_the_webhook_down(&client, &mut webhook).await;
    assert_a_hung_webhook_delays_creation_at_most_its_timeout(&client, webhook.port).await;
}

/// Starts the webhook with the test's rollout configuration as the user "gantry", bound to
/// deploy/'s role for the webhook only, so that its permissions are the deployed ones.
async fn start_webhook_as_the_deployed_user(
    plane: &ControlPlane,
    cert: &Path,
    key: &Path,
) -> Webhook {
    let config = format!(
        "apiVersion: gantry.io/v1alpha1
kind: RolloutConfiguration
share: \"{SHARE_PERCENT}%\"
schedulerName: gantry
excludedNamespaces: [kube-system, wh-excluded]
"
    );
    // The webhook runs as the user "gantry" bound to deploy/'s role for the webhook only.
    let deploy = repo().join("deploy");
    let file = |name: &str| deploy.join(name).display().to_string();
    plane.kubectl(&[
        "apply",
        "-f",
        &file("00-namespace.yaml"),
        "-f",
        &file("50-webhook-rbac.yaml"),
    ]);
    plane.kubectl(&[
        "create",
        "clusterrolebinding",
        "gantry-webhook-user",
        "--clusterrole=gantry-webhook",
        "--user=gantry",
    ]);
    let mut webhook = Webhook::start(plane, &config, cert, key, &plane.gantry_kubeconfig());
    webhook.wait_ready().await;
    webhook
}

/// Creates probe pods in a namespace routed entirely to gantry until one is, since the API
/// server picks a new registration up asynchronously.
async fn wait_until_the_webhook_is_called(client: &Client) {
    // The API server picks the configuration up asynchronously: wait until a pod is routed.
    annotated_namespace(client, "wh-probe", &[("gantry.io/rollout", "100%")]).await;
    let mut probes = 0;
    eventually(Duration::from_secs(30), "the webhook to be called", || {
        probes += 1;
        let pod = test_pod("wh-probe", &format!("probe-{probes}"), None, &[], &[], None);
        let client = client.clone();
        async move { (create(&client, &pod).await == "gantry").then_some(()) }
    })
    .await;
}

/// The pods of the split in `ns`, owner after owner, with the index of each one's owner:
/// Deployments whose pods come from two ReplicaSets, StatefulSets and Jobs in turn.
fn split_pods(ns: &str) -> (Vec<Pod>, Vec<usize>) {
    let mut pods = Vec::new();
    let mut owner_of = Vec::new();
    for o in 0..OWNERS {
        for i in 0..PODS_PER_OWNER {
            let name = format!("o{o:02}-p{i:02}");
            let pod = match o % 3 {
                0 => {
                    let hash = if i < PODS_PER_OWNER / 2 {
                        "5d8f7c9b4"
                    } else {
                        "7b9c6d5f8"
                    };
                    let rs = format!("web{o:02}-{hash}");
                    test_pod(
                        ns,
                        &name,
                        Some(("ReplicaSet", &rs)),
                        &[("pod-template-hash", hash)],
                        &[],
                        None,
                    )
                }
                1 => test_pod(
                    ns,
                    &name,
                    Some(("StatefulSet", &format!("db{o:02}"))),
                    &[],
                    &[],
                    None,
                ),
                _ => test_pod(
                    ns,
                    &name,
                    Some(("Job", &format!("batch{o:02}"))),
                    &[],
                    &[],
                    None,
                ),
            };
            pods.push(pod);
            owner_of.push(o);
        }
    }
    (pods, owner_of)
}

/// Creates the pods of many owners and checks that each owner's pods all go one way, the
/// way the documented hash says, that the share routed to gantry is near the configured one,
/// and that the metrics count them.
async fn assert_a_sticky_split_of_owners(client: &Client, webhook: &Webhook) {
    // The split: 1,000 pods of 50 owners at 30%. A third of the owners are Deployments whose
    // pods come from two ReplicaSets (before and after a rollout).
    let ns = "wh-split";
    create_namespace(client, ns).await;
    let (pods, owner_of) = split_pods(ns);
    let started = Instant::now();
    let schedulers = create_all(client, &pods).await;
    let took = started.elapsed();
    let mut sides: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
    for (o, s) in owner_of.iter().zip(&schedulers) {
        sides.entry(*o).or_default().push(s.as_str());
    }
    let mut to_gantry = 0;
    for (o, side) in &sides {
        let first = side[0];
        assert!(
            side.iter().all(|s| *s == first),
            "owner {o} split across schedulers: {side:?}"
        );
        assert!(
            first == "gantry" || first == "default-scheduler",
            "owner {o}: {first}"
        );
        // The side is the documented hash's.
        let pod = &pods[o * PODS_PER_OWNER];
        let expected = Workload::of(pod, ns).bucket() < (SHARE_PERCENT * 100) as u16;
        assert_eq!(first == "gantry", expected, "owner {o}");
        to_gantry += usize::from(first == "gantry");
    }
    // 50 owners each going to gantry with probability 0.3: mean 15, standard deviation
    // sqrt(50 * 0.3 * 0.7) = 3.24; within 3 sigma: 6..=24.
    assert!(
        (6..=24).contains(&to_gantry),
        "{to_gantry} of {OWNERS} owners routed to gantry at {SHARE_PERCENT}%"
    );
    eprintln!(
        "{to_gantry} of {OWNERS} owners to gantry; {} pods created in {took:?}",
        pods.len()
    );
    let gantry_pods = schedulers.iter().filter(|s| *s == "gantry").count();
    assert_eq!(gantry_pods, to_gantry * PODS_PER_OWNER);
    assert_eq!(
        webhook.metric("gantry_webhook_pods_routed_total{scheduler=\"gantry\",source=\"config\"}"),
        gantry_pods as f64
    );
    assert_eq!(
        webhook.metric("gantry_webhook_pods_routed_total{scheduler=\"default\",source=\"config\"}"),
        (pods.len() - gantry_pods) as f64
    );
}

/// Creates pods annotated every way in namespaces annotated every way, and checks that
/// the namespace's annotation overrides the configuration and the pod's the namespace's,
/// that an invalid one is ignored and logged, and that the metrics count each source.
async fn assert_the_annotation_precedence(client: &Client, webhook: &Webhook) {
    // Precedence: the namespace annotation overrides the configuration, a pod annotation
    // (either name) overrides the namespace; an invalid pod annotation falls back to the
    // namespace's. Twenty owners per case, so that the configuration's 30% cannot pass.
    annotated_namespace(client, "wh-all", &[("gantry.io/rollout", "100%")]).await;
    annotated_namespace(
        client,
        "wh-none",
        &[("scheduler.alpha.kubernetes.io/use-new-scheduler", "0%")],
    )
    .await;
    create_namespace(client, "wh-excluded").await;
    let cases: [Case; 8] = [
        ("wh-all", &[], None, "gantry"),
        ("wh-none", &[], None, "default-scheduler"),
        ("wh-none", &[("gantry.io/rollout", "100%")], None, "gantry"),
        (
            "wh-none",
            &[("scheduler.alpha.kubernetes.io/use-new-scheduler", "100%")],
            None,
            "gantry",
        ),
        (
            "wh-all",
            &[("gantry.io/rollout", "0%")],
            None,
            "default-scheduler",
        ),
        ("wh-all", &[("gantry.io/rollout", "130%")], None, "gantry"),
        ("wh-all", &[], Some("other-scheduler"), "other-scheduler"),
        (
            "wh-excluded",
            &[("gantry.io/rollout", "100%")],
            None,
            "default-scheduler",
        ),
    ];
    let mut pods = Vec::new();
    let mut expected = Vec::new();
    for (c, (ns, annotations, scheduler, want)) in cases.iter().enumerate() {
        for o in 0..20 {
            let owner = format!("case{c}-{o:02}");
            let name = format!("{owner}-0");
            pods.push(test_pod(
                ns,
                &name,
                Some(("StatefulSet", &owner)),
                &[],
                annotations,
                *scheduler,
            ));
            expected.push((c, *want));
        }
    }
    let schedulers = create_all(client, &pods).await;
    for ((c, want), got) in expected.iter().zip(&schedulers) {
        assert_eq!(got, want, "case {c}: {:?}", cases[*c]);
    }
    for (series, value) in [
        // The probe that found the webhook active counts too.
        (
            "gantry_webhook_pods_routed_total{scheduler=\"gantry\",source=\"namespace\"}",
            41.0,
        ),
        (
            "gantry_webhook_pods_routed_total{scheduler=\"default\",source=\"namespace\"}",
            20.0,
        ),
        (
            "gantry_webhook_pods_routed_total{scheduler=\"gantry\",source=\"pod\"}",
            40.0,
        ),
        (
            "gantry_webhook_pods_routed_total{scheduler=\"default\",source=\"pod\"}",
            20.0,
        ),
        (
            "gantry_webhook_invalid_annotations_total{level=\"pod\",annotation=\"gantry.io/rollout\"}",
            20.0,
        ),
        (
            "gantry_webhook_pods_skipped_total{reason=\"other_scheduler\"}",
            20.0,
        ),
        (
            "gantry_webhook_pods_skipped_total{reason=\"excluded_namespace\"}",
            20.0,
        ),
    ] {
        assert_eq!(webhook.metric(series), value, "{series}");
    }
    assert!(
        webhook
            .log_text()
            .contains("ignoring pod annotation gantry.io/rollout: invalid share \"130%\""),
        "no log line for the invalid annotation"
    );
}

/// Replaces the serving certificate and key with ones of another CA and waits until the
/// webhook serves them, since a renewal must need no restart.
async fn assert_a_renewed_certificate_served(
    plane: &ControlPlane,
    webhook: &Webhook,
    cert: &Path,
    key: &Path,
) {
    // A renewed certificate (here from another CA) is served without a restart.
    let (_, renewed_cert, renewed_key) = certificates(plane.dir(), "renewed");
    let renewed_ca = plane.dir().join("renewed-ca.crt");
    assert_eq!(webhook.get_verified_by("/healthz", &renewed_ca), None);
    std::fs::rename(&renewed_key, key).expect("replace the key");
    std::fs::rename(&renewed_cert, cert).expect("replace the certificate");
    eventually(
        Duration::from_secs(10),
        "the renewed certificate",
        || async {
            webhook
                .get_verified_by("/healthz", &renewed_ca)
                .filter(|r| r.0 == 200)
        },
    )
    .await;
    assert!(webhook.log_text().contains("TLS certificate reloaded"));
}

/// Stops the webhook and checks that a pod is still created at once, left to the default
/// scheduler, as failurePolicy Ignore promises.
async fn assert_pods_created_with_the_webhook_down(client: &Client, webhook: &mut Webhook) {
    // The webhook down: pods are still created (failurePolicy Ignore), left to the default
    // scheduler.
    assert_eq!(webhook.terminate(), Some(0), "{}", webhook.log_text());
    let started = Instant::now();
    let pod = test_pod("wh-all", "after-outage", None, &[], &[], None);
    assert_eq!(create(client, &pod).await, "default-scheduler");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "pod creation took {:?} with the webhook down",
        started.elapsed()
    );
    let stored = Api::<Pod>::namespaced(client.clone(), "wh-all")
        .get("after-outage")
        .await
        .expect("the pod exists");
    assert_eq!(scheduler_of(&stored), "default-scheduler");
}

/// Listens on the webhook's `port` without ever answering and checks that a pod is created
/// all the same, delayed by no more than the registration's timeout.
async fn assert_a_hung_webhook_delays_creation_at_most_its_timeout(client: &Client, port: u16) {
    // A hung webhook (accepts connections, never answers) delays pod creation by at most the
    // registration's timeoutSeconds (2 s).
    let hung = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind the port");
    let held = std::thread::spawn(move || {
        if let Ok((connection, _)) = hung.accept() {
            std::thread::sleep(Duration::from_secs(5));
            drop(connection);
        }
    });
    let started = Instant::now();
    let pod = test_pod("wh-all", "webhook-hung", None, &[], &[], None);
    assert_eq!(create(client, &pod).await, "default-scheduler");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(5),
        "pod creation took {took:?} with the webhook hung"
    );
    let _ = held.join();
}

/// The manifests of deploy/ for the webhook are accepted by the API server (server-side dry
/// run; the PodDisruptionBudget is policy/v1, newer than the test's API server), and the
/// ConfigMap holds a valid configuration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deployed_manifests_are_valid() {
    let plane = ControlPlane::start();
    let deploy = repo().join("deploy");
    let file = |name: &str| deploy.join(name).display().to_string();
    plane.kubectl(&["apply", "-f", &file("00-namespace.yaml")]);
    let out = plane.kubectl(&[
        "apply",
        "--dry-run=server",
        "-f",
        &file("50-webhook-rbac.yaml"),
        "-f",
        &file("60-webhook-configmap.yaml"),
        "-f",
        &file("70-webhook-deployment.yaml"),
        "-f",
        &file("80-webhook-configuration.yaml"),
    ]);
    for object in [
        "serviceaccount/gantry-webhook",
        "clusterrole.rbac.authorization.k8s.io/gantry-webhook",
        "configmap/gantry-webhook-config",
        "deployment.apps/gantry-webhook",
        "service/gantry-webhook",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/gantry-rollout",
    ] {
        assert!(out.contains(object), "{object} not in\n{out}");
    }
    let configmap: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(deploy.join("60-webhook-configmap.yaml"))
            .expect("deploy/60-webhook-configmap.yaml"),
    )
    .expect("ConfigMap YAML");
    let config = RolloutConfig::parse(
        configmap["data"]["rollout.yaml"]
            .as_str()
            .expect("data.rollout.yaml"),
    )
    .expect("valid configuration");
    assert_eq!(config.scheduler_name, "gantry");
    let registration: MutatingWebhookConfiguration = serde_yaml::from_str(
        &std::fs::read_to_string(deploy.join("80-webhook-configuration.yaml"))
            .expect("deploy/80-webhook-configuration.yaml"),
    )
    .expect("MutatingWebhookConfiguration");
    let webhook = &registration.webhooks.expect("webhooks")[0];
    assert_eq!(webhook.failure_policy.as_deref(), Some("Ignore"));
    assert_eq!(webhook.side_effects, "None");
    assert_eq!(webhook.admission_review_versions, ["v1"]);
}
