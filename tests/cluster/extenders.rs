//! `gantry run` with scheduler extenders, against a real kube-apiserver and a small extender
//! written here that speaks kube-scheduler's protocol (`ExtenderArgs` in;
//! `ExtenderFilterResult`, `HostPriorityList`, `ExtenderBindingResult` out; Go's field
//! names): filter, prioritize with a weight and bind (over HTTPS, the extender's certificate
//! checked against `tlsConfig.caFile`), preempt, node-cache-capable calls, managed
//! resources, a timeout and an ignorable failure.

use crate::support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use support::*;

/// What the test extender was asked, by verb: the pod's name and the nodes sent.
#[derive(Default)]
struct Calls(Mutex<Vec<(String, String, Vec<String>)>>);

impl Calls {
    fn of(&self, verb: &str) -> Vec<(String, Vec<String>)> {
        let calls = self.0.lock().expect("calls");
        calls
            .iter()
            .filter(|(v, _, _)| v == verb)
            .map(|(_, pod, nodes)| (pod.clone(), nodes.clone()))
            .collect()
    }
}

/// The test extender's state: the API client it binds with, and the calls it saw.
#[derive(Clone)]
struct Extender {
    api: kube::Client,
    calls: Arc<Calls>,
}

/// A JSON answer.
fn answer(value: Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

/// A call's body.
fn args(body: &Bytes) -> Value {
    serde_json::from_slice(body).unwrap_or_default()
}

fn record(ext: &Extender, verb: &str, args: &Value) -> (String, Vec<String>) {
    let pod = args["Pod"]["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // A node-cache-capable extender is sent names only, never Node objects.
    let nodes: Vec<String> = if args["Nodes"].is_null() {
        args["NodeNames"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| n.as_str().map(str::to_string))
            .collect()
    } else {
        vec!["<node objects>".to_string()]
    };
    let mut calls = ext.calls.0.lock().expect("calls");
    calls.push((verb.to_string(), pod.clone(), nodes.clone()));
    (pod, nodes)
}

/// Keeps every node but `ext-a` ("reserved"); for the pod `nowhere`, rejects `ext-b` too
/// and `ext-c` as unresolvable.
async fn filter(State(ext): State<Extender>, body: Bytes) -> Response {
    let (pod, nodes) = record(&ext, "filter", &args(&body));
    let mut failed = BTreeMap::new();
    let mut unresolvable = BTreeMap::new();
    let mut kept = Vec::new();
    for n in nodes {
        match (pod.as_str(), n.as_str()) {
            (_, "ext-a") => {
                failed.insert(n, "node is reserved by the extender".to_string());
            }
            ("nowhere", "ext-c") => {
                unresolvable.insert(n, "node is retired by the extender".to_string());
            }
            ("nowhere", _) => {
                failed.insert(n, "node is reserved by the extender".to_string());
            }
            _ => kept.push(n),
        }
    }
    answer(json!({
        "NodeNames": kept,
        "FailedNodes": failed,
        "FailedAndUnresolvableNodes": unresolvable,
        "Error": "",
    }))
}

/// Prefers `ext-c`.
async fn prioritize(State(ext): State<Extender>, body: Bytes) -> Response {
    let (_, nodes) = record(&ext, "prioritize", &args(&body));
    let list: Vec<Value> = nodes
        .iter()
        .map(|n| json!({"Host": n, "Score": if n == "ext-c" { 10 } else { 0 }}))
        .collect();
    answer(Value::Array(list))
}

/// Binds the pod itself, as a binding extender does.
async fn bind(State(ext): State<Extender>, body: Bytes) -> Response {
    let args = args(&body);
    let text = |k: &str| args[k].as_str().unwrap_or_default().to_string();
    let (name, namespace, node) = (text("PodName"), text("PodNamespace"), text("Node"));
    assert!(
        !text("PodUID").is_empty(),
        "the binding names the pod's uid: {args}"
    );
    ext.calls
        .0
        .lock()
        .expect("calls")
        .push(("bind".to_string(), name.clone(), vec![node.clone()]));
    let error = match support::bind(&ext.api, &namespace, &name, &node).await {
        Ok(()) => String::new(),
        Err(e) => e.to_string(),
    };
    answer(json!({ "Error": error }))
}

/// Answers too late (after three seconds).
async fn slow(State(ext): State<Extender>, body: Bytes) -> Response {
    let (_, nodes) = record(&ext, "slow", &args(&body));
    tokio::time::sleep(Duration::from_secs(3)).await;
    answer(json!({ "NodeNames": nodes }))
}

/// Leaves only the candidate on `ext-pre-2`, with the victims gantry chose there.
async fn preempt(State(ext): State<Extender>, body: Bytes) -> Response {
    let args = args(&body);
    let candidates: Vec<String> = args["NodeNameToMetaVictims"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    let pod = args["Pod"]["metadata"]["name"].as_str().unwrap_or_default();
    ext.calls
        .0
        .lock()
        .expect("calls")
        .push(("preempt".to_string(), pod.to_string(), candidates));
    let kept = &args["NodeNameToMetaVictims"]["ext-pre-2"];
    answer(json!({ "NodeNameToMetaVictims": { "ext-pre-2": kept } }))
}

/// Answers the nodes it was sent, padded to 60 MB with a field no decoder reads.
async fn huge(State(ext): State<Extender>, body: Bytes) -> Response {
    let (_, nodes) = record(&ext, "huge", &args(&body));
    let padding = "x".repeat(60 << 20);
    answer(json!({ "NodeNames": nodes, "Padding": padding }))
}

/// Fails with a 500.
async fn broken(State(ext): State<Extender>, body: Bytes) -> Response {
    record(&ext, "broken", &args(&body));
    (StatusCode::INTERNAL_SERVER_ERROR, "broken").into_response()
}

/// Where the test extender listens: plain HTTP, and HTTPS with a certificate for 127.0.0.1
/// signed by the CA in `ca_file`.
struct Addresses {
    plain: SocketAddr,
    tls: SocketAddr,
    ca_file: std::path::PathBuf,
}

/// A CA (written to `ca_file`) and a serving certificate for 127.0.0.1 it signed: (CA file,
/// certificate PEM, key PEM).
fn certificates(ca_file: std::path::PathBuf) -> (std::path::PathBuf, String, String) {
    let pki = support::tls::test_pki();
    std::fs::write(&ca_file, &pki.ca_pem).expect("write the CA");
    (ca_file, pki.cert_pem, pki.key_pem)
}

/// Serves the test extender on two free loopback ports, one plain, one HTTPS, the CA that
/// signed its certificate written to `ca_file` (one per test: the tests share a directory).
async fn serve(ext: Extender, ca_file: std::path::PathBuf) -> Addresses {
    let app = axum::Router::new()
        .route("/ext/filter", post(filter))
        .route("/ext/prioritize", post(prioritize))
        .route("/ext/bind", post(bind))
        .route("/ext/slow", post(slow))
        .route("/ext/broken", post(broken))
        .route("/ext/huge", post(huge))
        .route("/ext/preempt", post(preempt))
        .with_state(ext);
    let bind = || async {
        tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the extender")
    };
    let listener = bind().await;
    let plain = listener.local_addr().expect("address");
    tokio::spawn({
        let app = app.clone();
        async move { axum::serve(listener, app).await }
    });
    let (ca_file, cert, key) = certificates(ca_file);
    let acceptor = tokio_rustls::TlsAcceptor::from(
        gantry_adapter::serving::tls::server_config(&cert, &key).expect("TLS configuration"),
    );
    let listener = bind().await;
    let tls = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(
                    move |request: hyper::Request<hyper::body::Incoming>| {
                        tower::ServiceExt::oneshot(app.clone(), request)
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Addresses {
        plain,
        tls,
        ca_file,
    }
}

/// One test's world on the shared control plane: its namespace `ns` with `nodes` (of `cpu`
/// cpus each), the test extender, and gantry (profile `gantry-<ns>`) configured with the
/// `extenders` that `extenders_for` writes for the extender's address.
struct World {
    /// Held: the shared control plane lives while a test holds it.
    plane: Arc<ControlPlane>,
    client: kube::Client,
    calls: Arc<Calls>,
    gantry: Gantry,
    profile: String,
}

async fn world(
    ns: &str,
    nodes: &[&str],
    cpu: &str,
    extenders_for: impl Fn(&Addresses) -> String,
) -> World {
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    create_namespace(&client, ns).await;
    create_nodes(&client, nodes, ns, cpu, "8Gi").await;
    let calls = Arc::new(Calls::default());
    let addresses = serve(
        Extender {
            api: client.clone(),
            calls: calls.clone(),
        },
        plane.dir().join(format!("extender-ca-{ns}.crt")),
    )
    .await;
    let profile = format!("gantry-{ns}");
    let mut gantry = Gantry::start(
        plane.dir(),
        ns,
        &config(&profile, ns, None, &extenders_for(&addresses)),
        &plane.kubeconfig(),
    );
    gantry.wait_ready().await;
    World {
        plane,
        client,
        calls,
        gantry,
        profile,
    }
}

fn with_resource(mut p: Pod, resource: &str) -> Pod {
    let container = &mut p.spec.as_mut().expect("spec").containers[0];
    let resources = container.resources.get_or_insert_with(Default::default);
    let quantity = k8s_openapi::apimachinery::pkg::api::resource::Quantity("1".to_string());
    resources
        .requests
        .get_or_insert_with(Default::default)
        .insert(resource.to_string(), quantity.clone());
    resources
        .limits
        .get_or_insert_with(Default::default)
        .insert(resource.to_string(), quantity);
    p
}

/// Filter, prioritize with a weight and bind on one node-cache-capable extender served
/// over HTTPS: pods avoid the node it rejects, land on the node it prefers, are bound by it
/// (not by gantry), and a pod it leaves no node for is unschedulable with its reasons.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extender_filters_scores_and_binds() {
    let ns = "ext";
    let World {
        plane: _plane,
        client,
        calls,
        mut gantry,
        profile,
    } = world(ns, &["ext-a", "ext-b", "ext-c"], "4", |a| {
        format!(
            "extenders:\n- urlPrefix: https://{}/ext\n  filterVerb: filter\n  \
             prioritizeVerb: prioritize\n  weight: 5\n  bindVerb: bind\n  nodeCacheCapable: true\n  \
             tlsConfig: {{caFile: {}}}\n",
            a.tls,
            a.ca_file.display()
        )
    })
    .await;
    let profile = profile.as_str();
    for i in 0..3 {
        create_pod(&client, &pod(ns, &format!("p{i}"), profile, "100m", "64Mi")).await;
    }
    for i in 0..3 {
        let node = wait_bound(&client, ns, &format!("p{i}"), Duration::from_secs(30)).await;
        assert_eq!(
            node,
            "ext-c",
            "the extender's favourite: {}",
            gantry.log_text()
        );
    }
    // Every pod was filtered with names only, scored, and bound by the extender.
    let filtered = calls.of("filter");
    assert!(filtered.len() >= 3, "{filtered:?}");
    for (_, nodes) in &filtered {
        let mut nodes = nodes.clone();
        nodes.sort();
        assert_eq!(nodes, ["ext-a", "ext-b", "ext-c"]);
    }
    for (_, nodes) in calls.of("prioritize") {
        assert!(
            !nodes.contains(&"ext-a".to_string()),
            "scored after filtering"
        );
    }
    let bound: Vec<String> = calls.of("bind").into_iter().map(|(p, _)| p).collect();
    for i in 0..3 {
        assert!(bound.contains(&format!("p{i}")), "{bound:?}");
    }

    // No node left: unschedulable, the extender's reasons in kube-scheduler's message.
    create_pod(&client, &pod(ns, "nowhere", profile, "100m", "64Mi")).await;
    let message = wait_unschedulable(&client, ns, "nowhere", Duration::from_secs(30)).await;
    assert!(
        // Every node of the shared control plane is counted; the other test's by affinity.
        message.starts_with("0/")
            && message.contains("2 node is reserved by the extender")
            && message.contains("1 node is retired by the extender"),
        "{message}"
    );
    assert_eq!(gantry.terminate().code(), Some(0));
}

/// An extender that answers too late fails the attempt of a pod it manages; an ignorable
/// one that answers 500 is skipped; a pod that uses none of an extender's managed
/// resources is not sent to it at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_fail_an_attempt_and_ignorable_failures_are_skipped() {
    let ns = "ext-fail";
    let World {
        plane: _plane,
        client,
        calls,
        mut gantry,
        profile,
    } = world(ns, &["ext-fail-1"], "4", |a| {
        let addr = a.plain;
        format!(
            "extenders:\n\
             - urlPrefix: http://{addr}/ext\n  filterVerb: slow\n  httpTimeout: 1s\n  \
               nodeCacheCapable: true\n  managedResources:\n  \
               - {{name: example.com/slow, ignoredByScheduler: true}}\n\
             - urlPrefix: http://{addr}/ext\n  filterVerb: broken\n  ignorable: true\n  \
               nodeCacheCapable: true\n"
        )
    })
    .await;
    let profile = profile.as_str();
    // Not a managed resource: only the ignorable extender is asked, and its 500 skipped.
    create_pod(&client, &pod(ns, "plain", profile, "100m", "64Mi")).await;
    wait_bound(&client, ns, "plain", Duration::from_secs(30)).await;
    assert!(calls.of("slow").is_empty(), "not the slow extender's pod");
    assert!(
        !calls.of("broken").is_empty(),
        "the ignorable one was asked"
    );
    // A managed resource the node does not have (ignoredByScheduler): the slow extender is
    // asked, times out, and the attempt fails (kube-scheduler's SchedulerError); the pod
    // stays pending and is retried.
    let managed = with_resource(
        pod(ns, "managed", profile, "100m", "64Mi"),
        "example.com/slow",
    );
    create_pod(&client, &managed).await;
    let message = eventually(Duration::from_secs(30), "managed failed", || async {
        pod_scheduled(&get_pod(&client, ns, "managed").await)
            .filter(|c| c.0 == "False" && c.1 == "SchedulerError")
            .map(|c| c.2)
    })
    .await;
    assert!(message.contains("httpTimeout"), "{message}");
    assert_eq!(
        node_of(&get_pod(&client, ns, "managed").await),
        None,
        "never bound"
    );
    assert!(!calls.of("slow").is_empty());
    assert_eq!(gantry.terminate().code(), Some(0));
}

/// Answers of 60 MB about one node, for 30 pods, are refused unread (an answer about one
/// node cannot be that large): gantry's peak memory stays within tens of MB of where it
/// was, the ignorable extender is skipped, and every pod is bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_larger_than_they_can_mean_are_refused_unread() {
    let ns = "ext-huge";
    let World {
        plane: _plane,
        client,
        calls,
        mut gantry,
        profile,
    } = world(ns, &["ext-huge-1"], "64", |a| {
        let addr = a.plain;
        format!(
            "extenders:\n\
             - urlPrefix: http://{addr}/ext\n  filterVerb: huge\n  ignorable: true\n  \
               nodeCacheCapable: true\n"
        )
    })
    .await;
    let before = gantry.peak_rss();
    for i in 0..30 {
        create_pod(&client, &pod(ns, &format!("p-{i}"), &profile, "10m", "8Mi")).await;
    }
    for i in 0..30 {
        wait_bound(&client, ns, &format!("p-{i}"), Duration::from_secs(60)).await;
    }
    let most = gantry.peak_rss();
    // A call may also fail before it reaches the extender (a pooled connection that gantry
    // closed on the answer before): skipped alike, as the extender is ignorable.
    assert!(calls.of("huge").len() >= 20, "{}", calls.of("huge").len());
    assert!(
        most < before + (48 << 20),
        "memory grew from {before} to {most} bytes"
    );
    let log = gantry.log_text();
    assert!(
        log.contains("the answer is larger than") && log.contains("about 1 nodes can hold"),
        "{log}"
    );
    assert_eq!(gantry.terminate().code(), Some(0));
}

/// A preempting extender cuts the candidates: of two nodes where evicting a low-priority
/// pod makes room, the preemptor goes where the extender left it, and only that node's
/// victim is evicted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preempt_extender_chooses_among_the_candidates() {
    let ns = "ext-pre";
    let World {
        plane,
        client,
        calls,
        mut gantry,
        profile,
    } = world(ns, &["ext-pre-1", "ext-pre-2"], "1", |a| {
        let addr = a.plain;
        format!(
            "extenders:\n- urlPrefix: http://{addr}/ext\n  preemptVerb: preempt\n  \
             nodeCacheCapable: true\n"
        )
    })
    .await;
    let profile = profile.as_str();
    plane.apply(
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: ext-high}\nvalue: 1000\n",
    );
    for n in ["ext-pre-1", "ext-pre-2"] {
        let mut low = pod(ns, &format!("low-{n}"), profile, "1", "64Mi");
        let spec = low.spec.as_mut().expect("spec");
        spec.node_name = Some(n.to_string());
        spec.termination_grace_period_seconds = Some(0);
        create_pod(&client, &low).await;
    }
    let mut high = pod(ns, "high", profile, "1", "64Mi");
    high.spec.as_mut().expect("spec").priority_class_name = Some("ext-high".to_string());
    create_pod(&client, &high).await;
    let node = wait_bound(&client, ns, "high", Duration::from_secs(60)).await;
    assert_eq!(node, "ext-pre-2", "{}", gantry.log_text());
    let left: Vec<String> = pods(&client, ns)
        .await
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert!(left.contains(&"low-ext-pre-1".to_string()), "{left:?}");
    assert!(!left.contains(&"low-ext-pre-2".to_string()), "{left:?}");
    let asked = calls.of("preempt");
    let (pod, mut candidates) = asked.first().cloned().expect("the extender was asked");
    candidates.sort();
    assert_eq!(pod, "high");
    assert_eq!(candidates, ["ext-pre-1", "ext-pre-2"]);
    assert_eq!(gantry.terminate().code(), Some(0));
}
