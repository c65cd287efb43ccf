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

/// Reads `json` as `K`'s object into its model, applies it to a cache that keeps
/// everything, writes the kind back and reads that again: the same model.
fn written_back_alike<K: Kind>(json: serde_json::Value) -> K::Model
where
    K::Model: std::fmt::Debug + PartialEq,
{
    let object: K::Object = serde_json::from_value(json).expect("the object decodes");
    let model = K::read(&object, &context()).expect("read").expect("kept");
    let config = crate::config::Config::default_with(&crate::plugins::registry()).expect("config");
    let mut scheduler = crate::scheduler::Scheduler::new(config, None);
    *scheduler.cache_mut() = crate::cache::Cache::new();
    let again = K::read(&object, &context()).expect("read").expect("kept");
    K::apply(
        Change::Applied(again),
        &mut scheduler,
        std::time::Duration::ZERO,
    );
    let mut out = Written::default();
    K::write(
        &Holding {
            cache: scheduler.cache(),
            queued: &[],
        },
        &mut out,
    );
    let items = out.finish().expect("written");
    assert_eq!(items.len(), 1, "{items:?}");
    let written: K::Object = serde_json::from_value(items[0].clone()).expect("written decodes");
    let reread = K::read(&written, &context()).expect("read").expect("kept");
    assert_eq!(reread, model);
    model
}

#[test]
fn dra_objects_are_read_and_written_back_as_the_same_models() {
    let class = written_back_alike::<DeviceClasses>(serde_json::json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}],
            "extendedResourceName": "nvidia.com/gpu"}
    }));
    assert_eq!(class.selectors, ["device.driver == 'gpu.nvidia.com'"]);
    let slice = written_back_alike::<ResourceSlices>(serde_json::json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": "n1-gpu"},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": "n1",
            "pool": {"name": "n1", "generation": 2, "resourceSliceCount": 1},
            "sharedCounters": [{"name": "gpu-0-counters",
                "counters": {"memory": {"value": "40Gi"}, "multiprocessors": {"value": "98"}}}],
            "devices": [{"name": "gpu-0-mig-1g.5gb-0",
                "attributes": {"profile": {"string": "1g.5gb"},
                    "driverVersion": {"version": "580.65.6"},
                    "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"}},
                "capacity": {"memory": {"value": "5Gi",
                    "requestPolicy": {"default": "1Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}}},
                "consumesCounters": [{"counterSet": "gpu-0-counters",
                    "counters": {"memory": {"value": "5Gi"}, "multiprocessors": {"value": "14"}}}],
                "taints": [{"key": "maintenance", "effect": "NoSchedule"}],
                "allowMultipleAllocations": true}]}
    }));
    let device = &slice.devices[0];
    assert_eq!(
        device.attributes.keys().collect::<Vec<_>>(),
        [
            "gpu.nvidia.com/driverVersion",
            "gpu.nvidia.com/profile",
            "resource.kubernetes.io/pcieRoot"
        ],
        "a name without a domain is the driver's"
    );
    assert_eq!(
        device.capacity["gpu.nvidia.com/memory"].value.units(),
        5 << 30
    );
    let claim = written_back_alike::<ResourceClaims>(serde_json::json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "train-gpu", "namespace": "ml", "uid": "c1",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "train-0",
                "uid": "p1", "controller": true}]},
        "spec": {"devices": {
            "requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2,
                    "tolerations": [{"key": "maintenance", "operator": "Exists"}]}},
                {"name": "mig", "firstAvailable": [
                    {"name": "small", "deviceClassName": "mig.nvidia.com", "allocationMode": "All"},
                    {"name": "big", "deviceClassName": "gpu.nvidia.com",
                        "capacity": {"requests": {"memory": "10Gi"}}}]}],
            "constraints": [{"requests": ["gpu"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}]}},
        "status": {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}]}},
            "reservedFor": [{"resource": "pods", "name": "train-0", "uid": "p1"}]}
    }));
    assert_eq!(claim.owner_pod.as_deref(), Some("p1"));
    assert_eq!(claim.requests.len(), 2);
    let e = ResourceClaims::read(
        &serde_json::from_value(serde_json::json!({
            "metadata": {"name": "bad", "namespace": "ml"},
            "spec": {"devices": {"requests": [{"name": "gpu"}]}}
        }))
        .unwrap(),
        &context(),
    )
    .unwrap_err();
    assert_eq!(
        e,
        "resourceclaim ml/bad: spec.devices.requests[0]: exactly one of exactly or firstAvailable is required"
    );
}
