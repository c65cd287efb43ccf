//! Properties of the AdmissionReview handler: whatever the body, it never panics; a body it
//! answers gets `allowed: true`, its own uid back, and either no patch or one well-formed
//! JSONPatch operation, which applies to the pod and sets `spec.schedulerName` to gantry's
//! profile, only on a pod creation that may be routed. Bodies are arbitrary bytes, arbitrary JSON, AdmissionReviews
//! built from the API's structure (annotations valid and not, owners of every kind,
//! excluded namespaces, dry runs, other operations), and those mutated.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::PartialObjectMetaExt;
use kube::runtime::{reflector, watcher};
use proptest::prelude::*;
use serde_json::{Value, json};

use super::config::{RolloutConfig, Share};
use super::server::{Namespaces, Webhook};
use gantry_test_support::fuzz;

/// Gantry's profile in the tests' configuration.
const GANTRY: &str = "gantry";
const NAMESPACES: &[&str] = &["apps", "shop", "kube-system", "gantry-system", ""];
const ANNOTATIONS: &[&str] = &[
    "gantry.io/rollout",
    "scheduler.alpha.kubernetes.io/use-new-scheduler",
];

fn share_text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[0-9]{1,3}(\\.[0-9]{1,2})?%",
        1 => fuzz::text(),
    ]
}

fn annotations() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(
        prop_oneof![4 => prop::sample::select(ANNOTATIONS).prop_map(str::to_string), 1 => fuzz::text()],
        share_text(),
        0..3,
    )
    .prop_map(|m| json!(m))
}

/// A webhook at `share`, with `kube-system` and `gantry-system` excluded, whose namespace
/// cache holds `apps` and `shop` with these annotations.
fn webhook(share: Share, apps: &Value, shop: &Value) -> Webhook {
    let (store, mut writer) = reflector::store();
    for (name, annotations) in [("apps", apps), ("shop", shop)] {
        let meta = ObjectMeta {
            name: Some(name.to_string()),
            annotations: serde_json::from_value(annotations.clone()).ok(),
            ..Default::default()
        };
        writer.apply_watcher_event(&watcher::Event::Apply(meta.into_request_partial()));
    }
    Webhook::new(
        RolloutConfig {
            share,
            scheduler_name: GANTRY.to_string(),
            excluded_namespaces: vec!["kube-system".to_string(), "gantry-system".to_string()],
        },
        Namespaces { store, api: None },
    )
}

fn owner() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(&["ReplicaSet", "StatefulSet", "Job", "DaemonSet", "Node", ""][..]),
        prop_oneof!["web-[a-z0-9]{1,10}", "web", fuzz::text()],
        prop::option::of(any::<bool>()),
    )
        .prop_map(|(kind, name, controller)| {
            json!({"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": "1",
                   "controller": controller})
        })
}

fn pod() -> impl Strategy<Value = Value> {
    (
        prop::option::of(prop_oneof!["[a-z0-9-]{1,12}", fuzz::text()]),
        prop::option::of(prop_oneof!["web-[a-z0-9]{1,10}-", fuzz::text()]),
        prop::option::of(prop_oneof!["[a-z0-9]{1,10}", fuzz::text()]),
        annotations(),
        prop::collection::vec(owner(), 0..3),
        prop::option::of(prop_oneof![
            Just(String::new()),
            Just("default-scheduler".to_string()),
            Just(GANTRY.to_string()),
            fuzz::text(),
        ]),
    )
        .prop_map(
            |(name, generate_name, hash, annotations, owners, scheduler)| {
                let mut spec = json!({"containers": [{"name": "app", "image": "app"}]});
                if let Some(s) = scheduler {
                    spec["schedulerName"] = json!(s);
                }
                let mut labels = json!({});
                if let Some(h) = hash {
                    labels["pod-template-hash"] = json!(h);
                }
                json!({
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": name, "generateName": generate_name, "labels": labels,
                        "annotations": annotations, "ownerReferences": owners},
                    "spec": spec,
                })
            },
        )
}

/// An AdmissionReview of the API's shape, most often a pod creation.
fn review() -> impl Strategy<Value = Value> {
    (
        "[a-f0-9-]{1,36}",
        prop::sample::select(NAMESPACES),
        prop_oneof![6 => Just("CREATE"), 1 => Just("UPDATE"), 1 => Just("DELETE"), 1 => Just("CONNECT")],
        prop_oneof![6 => Just(("", "Pod")), 1 => Just(("apps", "Deployment")), 1 => Just(("", "Node"))],
        prop::option::of(prop_oneof![Just(""), Just("status"), Just("binding")]),
        any::<bool>(),
        prop::option::of(pod()),
    )
        .prop_map(|(uid, namespace, operation, (group, kind), sub, dry_run, object)| {
            json!({
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "uid": uid,
                    "kind": {"group": group, "version": "v1", "kind": kind},
                    "resource": {"group": group, "version": "v1", "resource": "pods"},
                    "subResource": sub,
                    "namespace": namespace,
                    "operation": operation,
                    "userInfo": {"username": "admin"},
                    "object": object,
                    "oldObject": null,
                    "dryRun": dry_run
                }
            })
        })
}

fn share() -> impl Strategy<Value = Share> {
    (0u64..=100).prop_map(|p| Share::from_percent(p).unwrap_or(Share::ALL))
}

/// Checks an answer to `request` (the body as JSON, when it is JSON): allowed, the uid
/// back, and no patch or the one patch of `spec.schedulerName`. Returns whether it patched.
fn well_formed(answer: &Value, request: Option<&Value>) -> Result<bool, TestCaseError> {
    prop_assert_eq!(&answer["apiVersion"], "admission.k8s.io/v1");
    prop_assert_eq!(&answer["kind"], "AdmissionReview");
    let response = &answer["response"];
    prop_assert_eq!(&response["allowed"], true);
    if let Some(uid) = request.and_then(|r| r.pointer("/request/uid")) {
        prop_assert_eq!(&response["uid"], uid);
    }
    let Some(patch) = response.get("patch").filter(|p| !p.is_null()) else {
        prop_assert!(response.get("patchType").is_none_or(Value::is_null));
        return Ok(false);
    };
    prop_assert_eq!(&response["patchType"], "JSONPatch");
    let bytes: Vec<u8> = serde_json::from_value(patch.clone())
        .map_err(|e| TestCaseError::fail(format!("patch bytes: {e}")))?;
    let ops: json_patch::Patch = serde_json::from_slice(&bytes)
        .map_err(|e| TestCaseError::fail(format!("a JSONPatch: {e}")))?;
    prop_assert_eq!(ops.0.len(), 1);
    let op = serde_json::to_value(&ops.0[0]).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert!(
        (op["path"] == "/spec/schedulerName" && op["value"] == GANTRY)
            || (op["path"] == "/spec" && op["value"] == json!({"schedulerName": GANTRY})),
        "{op}"
    );
    if let Some(object) = request.and_then(|r| r.pointer("/request/object")) {
        let named = object
            .pointer("/spec/schedulerName")
            .is_some_and(|n| !n.is_null());
        prop_assert_eq!(&op["op"], if named { "replace" } else { "add" });
        let mut patched = object.clone();
        json_patch::patch(&mut patched, &ops).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&patched["spec"]["schedulerName"], GANTRY);
    }
    Ok(true)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
}

#[test]
fn fuzz_webhook_any_body() {
    let rt = runtime();
    let body = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        fuzz::any_json().prop_map(|v| v.to_string().into_bytes()),
        fuzz::any_json().prop_map(|v| json!({"apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview", "request": v})
        .to_string()
        .into_bytes()),
    ];
    proptest!(|(body in body, share in share())| {
        let w = webhook(share, &json!({}), &json!({}));
        if let Ok(answer) = rt.block_on(w.review(&body)) {
            let answer = serde_json::to_value(answer).map_err(|e| TestCaseError::fail(e.to_string()))?;
            well_formed(&answer, serde_json::from_slice(&body).ok().as_ref())?;
        }
    });
}

#[test]
fn fuzz_webhook_structured_reviews() {
    let rt = runtime();
    proptest!(|(request in review(), share in share(), apps in annotations(), shop in annotations())| {
        let w = webhook(share, &apps, &shop);
        let body = request.to_string();
        let answer = rt
            .block_on(w.review(body.as_bytes()))
            .map_err(|e| TestCaseError::fail(format!("{e}: {body}")))?;
        let answer = serde_json::to_value(answer).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let patched = well_formed(&answer, Some(&request))?;
        let r = &request["request"];
        let namespace = r["namespace"].as_str().unwrap_or_default();
        let scheduler = r.pointer("/object/spec/schedulerName").and_then(Value::as_str);
        let routable = r["operation"] == "CREATE"
            && r["kind"]["kind"] == "Pod"
            && r["kind"]["group"] == ""
            && r["subResource"].as_str().is_none_or(str::is_empty)
            && !r["object"].is_null()
            && !["kube-system", "gantry-system"].contains(&namespace)
            && scheduler.is_none_or(|s| s.is_empty() || s == "default-scheduler");
        prop_assert!(routable || !patched, "patched a request that is not to be routed");
        let annotated = r.pointer("/object/metadata/annotations").is_some_and(|a| a != &json!({}))
            || (namespace == "apps" && apps != json!({}))
            || (namespace == "shop" && shop != json!({}));
        if routable && !annotated {
            if share == Share::NONE {
                prop_assert!(!patched, "0% routed a pod");
            }
            if share == Share::ALL {
                prop_assert!(patched, "100% left a pod");
            }
        }
    });
}

#[test]
fn fuzz_webhook_mutated_reviews() {
    let rt = runtime();
    let mutated = review().prop_flat_map(|r| fuzz::mutated(vec![r]));
    proptest!(|(request in mutated, share in share())| {
        let w = webhook(share, &json!({"gantry.io/rollout": "50%"}), &json!({}));
        let body = request.to_string();
        if let Ok(answer) = rt.block_on(w.review(body.as_bytes())) {
            let answer = serde_json::to_value(answer).map_err(|e| TestCaseError::fail(e.to_string()))?;
            well_formed(&answer, Some(&request))?;
        }
    });
}
