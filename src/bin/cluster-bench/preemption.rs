//! kube-scheduler's own preemption workload, from scheduler_perf in the Kubernetes 1.37.2
//! source (`test/integration/scheduler_perf/default_preemption/performance-config.yaml`,
//! workload `PreemptionBasic`): nodes of `templates/node-default.yaml` (4 cpu, 32Gi, 110
//! pods), init pods of `templates/pod-low-priority.yaml` (900m and 500Mi requested and
//! limited, priority 0, `terminationGracePeriodSeconds: 0`), which fill every node with four
//! of them, then the measured pods of `default_preemption/templates/pod-high-priority.yaml`
//! (3970m and 500Mi, priority 9999999, `terminationGracePeriodSeconds: 0`), each of which fits
//! only where all four low-priority pods of a node are evicted.
//!
//! One deviation, for the real API server: the template's `priority: 9999999` is refused by
//! the Priority admission plugin (a pod may not set its priority itself), so the
//! high-priority pods name the PriorityClass [`HIGH_PRIORITY_CLASS`] of that value instead,
//! and the API server fills in `spec.priority` from it.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use serde_json::{Value, json};

/// The PriorityClass of the high-priority pods.
pub const HIGH_PRIORITY_CLASS: &str = "scheduler-perf-high-priority";
/// Its value: the template's `priority`.
const HIGH_PRIORITY: i32 = 9_999_999;
/// The label that tells the two kinds of pods apart (`low` or `high`).
pub const PRIORITY_LABEL: &str = "cluster-bench/priority";

/// Which of the workload's two sets of pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Set {
    /// The init pods (`pod-low-priority.yaml`), named `low-NNNNN`.
    Low,
    /// The measured pods (`default_preemption/templates/pod-high-priority.yaml`), named
    /// `high-NNNNN`.
    High,
}

/// The PriorityClass that stands for the template's `priority: 9999999`.
pub fn high_priority_class() -> PriorityClass {
    serde_json::from_value(json!({
        "metadata": {"name": HIGH_PRIORITY_CLASS},
        "value": HIGH_PRIORITY,
        "description": "scheduler_perf's default_preemption/templates/pod-high-priority.yaml (priority: 9999999)",
    }))
    .expect("a PriorityClass decodes")
}

/// `count` pods of `set` in `namespace` for `scheduler_name`, numbered in the order they are
/// to be created.
pub fn pods(count: usize, set: Set, namespace: &str, scheduler_name: &str) -> Vec<Pod> {
    let prefix = match set {
        Set::Low => "low",
        Set::High => "high",
    };
    (0..count)
        .map(|i| {
            let mut spec = container_spec(set);
            spec["schedulerName"] = json!(scheduler_name);
            spec["terminationGracePeriodSeconds"] = json!(0);
            if set == Set::High {
                spec["priorityClassName"] = json!(HIGH_PRIORITY_CLASS);
            }
            let pod: Value = json!({
                "metadata": {
                    "name": format!("{prefix}-{i:05}"),
                    "namespace": namespace,
                    "labels": {PRIORITY_LABEL: prefix},
                },
                "spec": spec,
            });
            serde_json::from_value(pod).expect("a scheduler_perf template decodes")
        })
        .collect()
}

/// The pod spec of `set`'s template, its priority aside: one `pause` container, the low
/// priority's with port 80 (the templates differ in their image's release too).
fn container_spec(set: Set) -> Value {
    let (cpu, image) = match set {
        Set::Low => ("900m", "registry.k8s.io/pause:3.10.1"),
        Set::High => ("3970m", "registry.k8s.io/pause:3.10.2"),
    };
    let resources = json!({"cpu": cpu, "memory": "500Mi"});
    let mut container = json!({
        "name": "pause",
        "image": image,
        "resources": {"requests": resources, "limits": resources},
    });
    if set == Set::Low {
        container["ports"] = json!([{"containerPort": 80}]);
    }
    json!({"containers": [container]})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_templates_as_the_real_api_server_takes_them() {
        let low = &pods(2, Set::Low, "ns", "default-scheduler")[1];
        assert_eq!(low.metadata.name.as_deref(), Some("low-00001"));
        let spec = low.spec.as_ref().unwrap();
        assert_eq!(spec.termination_grace_period_seconds, Some(0));
        assert!(spec.priority.is_none() && spec.priority_class_name.is_none());
        let resources = spec.containers[0].resources.as_ref().unwrap();
        assert_eq!(resources.requests, resources.limits);
        assert_eq!(resources.requests.as_ref().unwrap()["cpu"].0, "900m");
        assert_eq!(
            spec.containers[0].ports.as_ref().unwrap()[0].container_port,
            80
        );

        let high = &pods(1, Set::High, "ns", "default-scheduler")[0];
        assert_eq!(
            high.metadata.labels.as_ref().unwrap()[PRIORITY_LABEL],
            "high"
        );
        let spec = high.spec.as_ref().unwrap();
        assert!(spec.priority.is_none(), "the API server fills it in");
        assert_eq!(
            spec.priority_class_name.as_deref(),
            Some(HIGH_PRIORITY_CLASS)
        );
        assert_eq!(spec.termination_grace_period_seconds, Some(0));
        assert!(spec.containers[0].ports.is_none());
        let requests = spec.containers[0].resources.as_ref().unwrap();
        assert_eq!(requests.requests.as_ref().unwrap()["cpu"].0, "3970m");
        assert_eq!(high_priority_class().value, Some(9_999_999));
    }
}
