//! Pods and nodes listed and watched as protobuf (`clientConnection.contentType`, the default)
//! are read into the model exactly as the same objects read as JSON, against a real
//! kube-apiserver: every field scheduling reads, on lists and on watch events alike.

use crate::support;

use std::time::Duration;

use gantry_adapter::lenient::Read;
use gantry_adapter::protobuf::node::Node as ProtoNode;
use gantry_adapter::readiness::Watchers;
use gantry_adapter::reflector::{self, Format};
use gantry_adapter::watch::{LeanPod, POD_FIELD_SELECTOR};
use gantry_core::model::NodeModel;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::Event;
use prost::Message;
use support::*;
use tokio::sync::mpsc;

/// A pod using every field the model reads that the API server keeps.
fn rich_pod(namespace: &str, name: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app": "web", "tier": "front"},
            "annotations": {"gantry.io/gpu-share": "1", "ignored": "x"},
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1",
                "uid": "8d0f3a52-5b1c-4a57-9a55-0d1c2b7e0f11", "controller": true
            }],
            "finalizers": ["gantry.io/test-hold"]
        },
        "spec": {
            "schedulerName": "gantry-proto",
            "priorityClassName": "gantry-proto-high",
            "resources": {"requests": {"cpu": "2", "memory": "2Gi"}},
            "resourceClaims": [
                {"name": "gpu", "resourceClaimName": "proto-gpu"},
                {"name": "nic", "resourceClaimTemplateName": "proto-nic"}
            ],
            "nodeSelector": {"disk": "ssd"},
            "initContainers": [{
                "name": "init", "image": "registry.example/init:2",
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}
            }],
            "containers": [
                {
                    "name": "app", "image": "registry.example/app:1",
                    "ports": [{"containerPort": 8080, "hostPort": 18080, "protocol": "TCP",
                               "hostIP": "0.0.0.0"}],
                    "resources": {"requests": {"cpu": "250m", "memory": "64Mi"},
                                  "limits": {"cpu": "500m", "memory": "128Mi",
                                             "example.com/dongle": "2"}}
                },
                {"name": "side", "image": "registry.example/side:latest",
                 "resources": {"limits": {"cpu": "100m", "memory": "32Mi"}}}
            ],
            "tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                 "effect": "NoExecute", "tolerationSeconds": 30}
            ],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In",
                                               "values": ["a", "b"]}]},
                        {"matchFields": [{"key": "metadata.name", "operator": "In",
                                          "values": ["proto-n1"]}]}
                    ]},
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 30, "preference": {"matchExpressions": [
                            {"key": "zone", "operator": "NotIn", "values": ["c"]}]}}
                    ]
                },
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "cache"}},
                         "topologyKey": "zone", "namespaces": [namespace, "other"]}
                    ]
                },
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 100, "podAffinityTerm": {
                            "labelSelector": {"matchExpressions": [
                                {"key": "app", "operator": "In", "values": ["web"]}]},
                            "topologyKey": "kubernetes.io/hostname"}}
                    ]
                }
            },
            "topologySpreadConstraints": [
                {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway",
                 "labelSelector": {"matchLabels": {"app": "web"}}}
            ],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "proto-data"}},
                {"name": "settings", "configMap": {"name": "proto-settings"}}
            ]
        }
    }))
    .expect("pod")
}

/// A node using every field the model reads.
fn rich_node(name: &str) -> Node {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"gantry-test": "proto", "zone": "a", "disk": "ssd"},
            "annotations": {"gantry.io/load": "0.5", "ignored": "x"}
        },
        "spec": {
            "unschedulable": true,
            "taints": [
                {"key": "dedicated", "value": "web", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute",
                 "timeAdded": "2026-01-02T03:04:05Z"}
            ]
        },
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "7500m", "memory": "30Gi", "pods": "110",
                            "nvidia.com/gpu": "4"},
            "conditions": [{"type": "Ready", "status": "True"}],
            "images": [{"names": ["registry.example/app:1", "registry.example/app@sha256:00"],
                        "sizeBytes": 123456789}]
        }
    }))
    .expect("node")
}

/// What one reflector reported, as text to compare (`Debug` of the model).
#[derive(Debug, PartialEq)]
enum Seen {
    Listed(Vec<String>),
    Applied(String),
    Deleted(String),
}

/// Runs a reflector over `api` in `format`, sending what it reports (each object through
/// `show`; one it cannot read as `unreadable <key>: <why>`) until the receiver is gone.
fn reflect<K>(
    client: kube::Client,
    api: Api<K>,
    fields: Option<&'static str>,
    format: Format<K>,
    show: fn(&K) -> Option<String>,
) -> mpsc::UnboundedReceiver<Seen>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel();
    let show = move |read: &Read<K>| match read {
        Read::Object(obj) => show(obj),
        Read::Unreadable(u) => Some(format!("unreadable {}: {}", u.key(), u.error)),
    };
    tokio::spawn(async move {
        let mut listed = Vec::new();
        let watchers = Watchers::default();
        reflector::run(
            client,
            api,
            reflector::Selectors::fields(fields),
            format,
            "test",
            &watchers,
            move |event| {
                let seen = match event {
                    Event::Init => return true,
                    Event::InitApply(obj) => {
                        listed.extend(show(&obj));
                        return true;
                    }
                    Event::InitDone => {
                        listed.sort();
                        Seen::Listed(std::mem::take(&mut listed))
                    }
                    Event::Apply(obj) => match show(&obj) {
                        Some(s) => Seen::Applied(s),
                        None => return true,
                    },
                    Event::Delete(obj) => match show(&obj) {
                        Some(s) => Seen::Deleted(s),
                        None => return true,
                    },
                };
                tx.send(seen).is_ok()
            },
        )
        .await;
    });
    rx
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .expect("an event within 20 s")
        .expect("the reflector runs")
}

fn show_pod(p: &LeanPod) -> Option<String> {
    Some(format!("{p:?}"))
}

fn show_node(n: &Node) -> Option<String> {
    n.metadata
        .name
        .as_deref()
        .is_some_and(|name| name.starts_with("proto-"))
        .then(|| format!("{:?}", NodeModel::from_api(n)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_and_nodes_read_as_protobuf_equal_what_json_gives() {
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let ns = "proto";
    create_pods_and_nodes_of_every_field(&client, ns).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    // Both reflectors list from the watch cache: let it hold the last write first, so that
    // they list the same objects.
    let cached = ListParams::default().match_any();
    eventually(
        Duration::from_secs(20),
        "the watch cache up to date",
        || async {
            let listed = pods.list(&cached).await.ok()?;
            let terminating = listed
                .items
                .iter()
                .any(|p| p.metadata.deletion_timestamp.is_some());
            let bound = listed
                .items
                .iter()
                .any(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()));
            let nodes = Api::<Node>::all(client.clone()).list(&cached).await.ok()?;
            let proto_nodes = nodes
                .items
                .iter()
                .filter(|n| {
                    n.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with("proto-"))
                })
                .count();
            (listed.items.len() == 3 && terminating && bound && proto_nodes == 2).then_some(())
        },
    )
    .await;

    let mut reflectors = Reflectors::start(&plane, ns).await;
    assert_the_lists_agree(&mut reflectors).await;
    assert_the_watch_events_agree(&client, ns, &mut reflectors).await;
}

/// Creates in `ns` the pods the reflectors read (one rich, one plain, one bound and resizing,
/// the rich one then held terminating) and the nodes (one rich, one plain), so that every
/// field scheduling reads is there to compare.
async fn create_pods_and_nodes_of_every_field(client: &kube::Client, ns: &str) {
    create_namespace(client, ns).await;
    let class: k8s_openapi::api::scheduling::v1::PriorityClass =
        serde_json::from_value(serde_json::json!({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": "gantry-proto-high"}, "value": 1000
        }))
        .expect("priority class");
    Api::<k8s_openapi::api::scheduling::v1::PriorityClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
        .expect("create priority class");
    create_node(client, &rich_node("proto-n1")).await;
    create_node(client, &node("proto-n2", "proto", "4", "16Gi")).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    // The priority admission plugin finds the new class once its informer has it.
    eventually(Duration::from_secs(20), "the rich pod admitted", || async {
        pods.create(&PostParams::default(), &rich_pod(ns, "rich"))
            .await
            .ok()
    })
    .await;
    create_pod(client, &pod(ns, "plain", "gantry-proto", "100m", "128Mi")).await;
    create_pod(client, &pod(ns, "bound", "gantry-proto", "1", "1Gi")).await;
    bind(client, ns, "bound", "proto-n2").await.expect("bind");
    // The bound pod's kubelet reports an in-place resize under way, which its requests count.
    pods.patch_status(
        "bound",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"status": {
            "conditions": [{"type": "PodResizeInProgress", "status": "True"}],
            "containerStatuses": [{
                "name": "app", "image": "registry.example/app:1", "imageID": "",
                "ready": false, "restartCount": 0, "state": {"waiting": {}},
                "allocatedResources": {"cpu": "1500m", "memory": "1Gi"},
                "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}
            }]
        }})),
    )
    .await
    .expect("the bound pod's status");
    // A pod being deleted: its finalizer holds it with a deletion timestamp.
    pods.delete("rich", &DeleteParams::default())
        .await
        .expect("delete");
}

/// What the four reflectors report, pods and nodes each read as JSON and as protobuf, to be
/// compared pairwise.
struct Reflectors {
    pods_json: mpsc::UnboundedReceiver<Seen>,
    pods_proto: mpsc::UnboundedReceiver<Seen>,
    nodes_json: mpsc::UnboundedReceiver<Seen>,
    nodes_proto: mpsc::UnboundedReceiver<Seen>,
}

impl Reflectors {
    /// Starts the four reflectors with gantry's own client, the pods' in `ns`, so that they
    /// read exactly as `gantry run` does.
    async fn start(plane: &ControlPlane, ns: &str) -> Reflectors {
        let settings = gantry_core::config::ClientConnection {
            kubeconfig: None,
            qps: 0.0,
            burst: 0,
            content_type: Default::default(),
        };
        let gantry_client = gantry_adapter::connect(Some(&plane.kubeconfig()), &settings, None)
            .await
            .expect("client");
        let pod_api = || Api::<LeanPod>::namespaced(gantry_client.clone(), ns);
        let pods_json = reflect(
            gantry_client.clone(),
            pod_api(),
            Some(POD_FIELD_SELECTOR),
            Format::Json,
            show_pod,
        );
        let pods_proto = reflect(
            gantry_client.clone(),
            pod_api(),
            Some(POD_FIELD_SELECTOR),
            Format::Protobuf(LeanPod::decode),
            show_pod,
        );
        let nodes_json = reflect(
            gantry_client.clone(),
            Api::<Node>::all(gantry_client.clone()),
            None,
            Format::Json,
            show_node,
        );
        let nodes_proto = reflect(
            gantry_client.clone(),
            Api::<Node>::all(gantry_client.clone()),
            None,
            Format::Protobuf(|raw| Ok(ProtoNode::decode(raw)?.into())),
            show_node,
        );
        Reflectors {
            pods_json,
            pods_proto,
            nodes_json,
            nodes_proto,
        }
    }
}

/// Checks that the first lists of pods and of nodes are the same read either way, and that
/// they hold what the rich objects carry.
async fn assert_the_lists_agree(reflectors: &mut Reflectors) {
    let listed = next(&mut reflectors.pods_proto).await;
    assert_eq!(listed, next(&mut reflectors.pods_json).await);
    let Seen::Listed(items) = &listed else {
        panic!("a list first, got {listed:?}");
    };
    assert_eq!(items.len(), 3, "{items:#?}");
    let rich = items.iter().find(|p| p.contains("name: \"rich\"")).unwrap();
    for read in [
        "Ok(PodInfo",
        "terminating: true",
        "priority: 1000",
        "gantry.io/gpu-share",
        "ReplicaSet",
        "18080",
        "tolerations",
        "topology_key: \"zone\"",
        "metadata.name",
        "kubernetes.io/hostname",
        "ClaimUse { name: \"proto-data\"",
        "PodClaim { name: \"gpu\", source: Claim(\"proto-gpu\") }",
        "PodClaim { name: \"nic\", source: Template { template: \"proto-nic\"",
        "requests: Resources { milli_cpu: 2000,",
    ] {
        assert!(rich.contains(read), "{read} missing from {rich}");
    }
    // The pod-level 2 cpu of the rich pod, the 2 cpu its kubelet runs the bound one with.
    let bound = items
        .iter()
        .find(|p| p.contains("name: \"bound\""))
        .unwrap();
    assert!(
        bound.contains("requests: Resources { milli_cpu: 2000,"),
        "{bound}"
    );
    let listed = next(&mut reflectors.nodes_proto).await;
    assert_eq!(listed, next(&mut reflectors.nodes_json).await);
    let Seen::Listed(items) = &listed else {
        panic!("a list first, got {listed:?}");
    };
    assert_eq!(items.len(), 2, "{items:#?}");
    for read in [
        "unschedulable: true",
        "NoExecute",
        "123456789",
        "gantry.io/load",
    ] {
        assert!(items[0].contains(read), "{read} missing from {}", items[0]);
    }
}

/// Changes, binds and deletes pods of `ns` and uncordons a node, and checks that the watch
/// events are the same read either way.
async fn assert_the_watch_events_agree(
    client: &kube::Client,
    ns: &str,
    reflectors: &mut Reflectors,
) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    // Watch events: a change, a binding, a deletion.
    pods.patch(
        "plain",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"labels": {"version": "2"}}})),
    )
    .await
    .expect("label");
    bind(client, ns, "plain", "proto-n2").await.expect("bind");
    pods.patch(
        "rich",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release the finalizer");
    let mut applied = 0;
    loop {
        let seen = next(&mut reflectors.pods_proto).await;
        assert_eq!(seen, next(&mut reflectors.pods_json).await);
        match &seen {
            Seen::Deleted(p) if p.contains("name: \"rich\"") => break,
            Seen::Applied(p) if p.contains("name: \"plain\"") => applied += 1,
            _ => {}
        }
    }
    assert_eq!(applied, 2, "the label and the binding");
    Api::<Node>::all(client.clone())
        .patch(
            "proto-n1",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"unschedulable": false}})),
        )
        .await
        .expect("uncordon");
    let seen = next(&mut reflectors.nodes_proto).await;
    assert_eq!(seen, next(&mut reflectors.nodes_json).await);
    assert!(matches!(&seen, Seen::Applied(n) if n.contains("unschedulable: false")));
}

/// A kind the API server has no protobuf for (a custom resource) comes back as JSON when
/// protobuf is asked for; the reflector reads it as JSON, list and watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_without_protobuf_is_read_as_json() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};

    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.proto.gantry.io"},
        "spec": {
            "group": "proto.gantry.io",
            "scope": "Cluster",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": {"type": "object",
                              "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .expect("crd");
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .expect("create crd");
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("proto.gantry.io", "v1", "Widget"),
        "widgets",
    );
    let widgets: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let widget = |name: &str| {
        serde_json::from_value::<DynamicObject>(serde_json::json!({
            "apiVersion": "proto.gantry.io/v1", "kind": "Widget",
            "metadata": {"name": name}
        }))
        .expect("widget")
    };
    // The resource is served once the CRD is established.
    eventually(
        Duration::from_secs(30),
        "the first widget created",
        || async {
            widgets
                .create(&PostParams::default(), &widget("first"))
                .await
                .ok()
        },
    )
    .await;
    eventually(
        Duration::from_secs(20),
        "the watch cache up to date",
        || async {
            let listed = widgets
                .list(&ListParams::default().match_any())
                .await
                .ok()?;
            (listed.items.len() == 1).then_some(())
        },
    )
    .await;

    let (tx, mut rx) = mpsc::unbounded_channel();
    let gantry_client = plane.client().await;
    let api: Api<DynamicObject> = Api::all_with(gantry_client.clone(), &resource);
    tokio::spawn(async move {
        let watchers = Watchers::default();
        reflector::run(
            gantry_client,
            api,
            reflector::Selectors::default(),
            // Never asked for: widgets have no protobuf reader.
            Format::Protobuf(|_| Err(ProtoNode::decode(&[0xff_u8][..]).expect_err("cut short"))),
            "widgets",
            &watchers,
            move |event| {
                let seen = match event {
                    Event::InitApply(Read::Object(w)) | Event::Apply(Read::Object(w)) => {
                        w.metadata.name
                    }
                    _ => return true,
                };
                tx.send(seen).is_ok()
            },
        )
        .await
    });
    assert_eq!(next_name(&mut rx).await.as_deref(), Some("first"));
    widgets
        .create(&PostParams::default(), &widget("second"))
        .await
        .expect("create widget");
    assert_eq!(next_name(&mut rx).await.as_deref(), Some("second"));
}

async fn next_name(rx: &mut mpsc::UnboundedReceiver<Option<String>>) -> Option<String> {
    tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .expect("an event within 20 s")
        .expect("the reflector runs")
}
