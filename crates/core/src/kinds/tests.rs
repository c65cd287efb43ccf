//! Each kind's reading, on its own.

use super::*;
use crate::testing;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

fn context() -> ReadContext {
    ReadContext {
        profiles: ["gantry".to_string()].into_iter().collect(),
    }
}

fn pod_api(name: &str, scheduler: &str) -> Pod {
    let mut p = testing::pod(name).req("cpu", "100m").api();
    p.metadata.uid = Some(format!("uid-{name}"));
    p.spec.as_mut().unwrap().scheduler_name = Some(scheduler.to_string());
    p
}

fn read_pod(pod: &LeanPod) -> Result<Option<PodReading>, String> {
    Pods::read(pod, &context())
}

fn unreadable(namespace: Option<&str>, name: &str, error: &str) -> Unreadable {
    Unreadable {
        namespace: namespace.map(str::to_string),
        name: name.to_string(),
        error: error.to_string(),
        ..Unreadable::default()
    }
}

#[test]
fn a_lean_pod_reads_as_the_whole_pod_does() {
    let json = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web", "namespace": "shop", "uid": "u1", "resourceVersion": "42",
            "generateName": "web-", "generation": 3, "selfLink": "/x",
            "creationTimestamp": "2024-01-02T03:04:05Z",
            "deletionTimestamp": "2024-01-02T03:05:05Z", "deletionGracePeriodSeconds": 30,
            "labels": {"app": "web"}, "annotations": {"a": "b"}, "finalizers": ["f"],
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "web-1", "uid": "u0", "controller": true}],
            "managedFields": [{"manager": "kubectl", "operation": "Update",
                "apiVersion": "v1", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:containers": {}}}}]
        },
        "spec": {"nodeName": "n1", "schedulerName": "gantry",
            "containers": [{"name": "app", "image": "app:1",
                "resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True"}]}
    });
    let lean: LeanPod = serde_json::from_value(json.clone()).unwrap();
    let full: Pod = serde_json::from_value(json).unwrap();
    assert!(full.metadata.managed_fields.is_some());
    let whole = LeanPod::read(&full);
    assert_eq!(lean.read, whole.read);
    assert!(lean.read.is_ok());
    assert_eq!((lean.bound, lean.scheduler_name.as_str()), (true, "gantry"));
    assert_eq!(
        (
            lean.metadata.name.clone().unwrap_or_default(),
            lean.metadata.namespace.clone(),
            lean.metadata.uid.clone(),
            lean.metadata.resource_version.clone()
        ),
        (
            "web".to_string(),
            Some("shop".to_string()),
            Some("u1".to_string()),
            Some("42".to_string())
        )
    );
    assert_eq!(Pods::NAME, "pods");
}

#[test]
fn a_budget_is_read_from_policy_v1() {
    // As a watch event carries it.
    let budget: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "shop", "resourceVersion": "7"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 1, "currentHealthy": 3, "desiredHealthy": 2,
            "expectedPods": 3, "observedGeneration": 1,
            "disruptedPods": {"web-0": "2024-01-02T03:04:05Z"}}
    }))
    .unwrap();
    match DisruptionBudgets::read(&budget, &context()).unwrap() {
        Some(b) => {
            assert_eq!((b.namespace.as_str(), b.name.as_str()), ("shop", "web"));
            assert_eq!(b.disruptions_allowed, 1);
            assert_eq!(b.disrupted_pods.iter().collect::<Vec<_>>(), ["web-0"]);
            let web = testing::pod("web-1")
                .namespace("shop")
                .label("app", "web")
                .build();
            assert!(b.covers(&web));
        }
        None => panic!("expected the budget"),
    }
}

#[test]
fn pods_of_other_schedulers_are_ignored_until_bound() {
    assert!(matches!(
        read_pod(&LeanPod::read(&pod_api("a", "gantry"))),
        Ok(Some(PodReading::Pod(_)))
    ));
    assert!(matches!(
        read_pod(&LeanPod::read(&pod_api("b", "default-scheduler"))),
        Ok(None)
    ));
    let mut bound = pod_api("c", "default-scheduler");
    bound.spec.as_mut().unwrap().node_name = Some("n1".to_string());
    assert!(
        matches!(read_pod(&LeanPod::read(&bound)), Ok(Some(PodReading::Pod(p))) if p.node_name.as_deref() == Some("n1"))
    );
}

#[test]
fn a_malformed_pod_is_reported_with_its_field() {
    let mut bad = pod_api("bad", "gantry");
    bad.spec.as_mut().unwrap().containers[0]
        .resources
        .as_mut()
        .unwrap()
        .requests
        .as_mut()
        .unwrap()
        .insert(
            "cpu".to_string(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("1x".to_string()),
        );
    match read_pod(&LeanPod::read(&bad)) {
        Ok(Some(PodReading::Refused(pod))) => {
            let RefusedPod {
                scheduler_name,
                message,
                ..
            } = pod.clone();
            assert_eq!(
                (pod.namespace.as_str(), pod.name.as_str(), pod.uid.as_str()),
                ("default", "bad", "uid-bad")
            );
            assert_eq!(scheduler_name, "gantry");
            assert!(
                message.contains("spec.containers[0].resources.requests[cpu]"),
                "{message}"
            );
        }
        other => panic!("expected a refused pod, got {other:?}"),
    }
}

#[test]
fn a_pod_that_does_not_decode_is_refused_when_pending_and_kept_when_bound() {
    let mut u = unreadable(Some("shop"), "web", "spec.containers: invalid type");
    u.uid = Some("u1".to_string());
    assert!(
        Pods::unreadable(&u, &context()).is_none(),
        "its scheduler is not known"
    );
    u.scheduler_name = Some("gantry".to_string());
    match Pods::unreadable(&u, &context()) {
        Some(Change::Applied(PodReading::Refused(RefusedPod {
            name, uid, message, ..
        }))) => {
            assert_eq!((name.as_str(), uid.as_str()), ("web", "u1"));
            assert_eq!(
                message,
                "the pod cannot be read: spec.containers: invalid type"
            );
        }
        other => panic!("expected a refused pod, got {other:?}"),
    }
    u.node_name = Some("n1".to_string());
    assert!(
        Pods::unreadable(&u, &context()).is_none(),
        "a bound pod keeps its last reading"
    );
    u.node_name = None;
    u.scheduler_name = Some("default-scheduler".to_string());
    assert!(
        Pods::unreadable(&u, &context()).is_none(),
        "another scheduler's"
    );
}
