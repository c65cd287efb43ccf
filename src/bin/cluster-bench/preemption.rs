//! kube-scheduler's own preemption workload, from scheduler_perf in the Kubernetes 1.20.2
//! source (`test/integration/scheduler_perf/config`, workload `Preemption`): nodes of
//! `node-default.yaml` (4 cpu, 32Gi, 110 pods), init pods of `pod-low-priority.yaml` (900m and
//! 500Mi requested and limited, priority 0, `terminationGracePeriodSeconds: 0`), which fill
//! every node with four of them, then the measured pods of `pod-high-priority.yaml` (3000m and
//! 500Mi, priority 10), each of which fits only where three low-priority pods are evicted.
//!
//! One deviation, for the real API server: the template's `priority: 10` is refused by the
//! Priority admission plugin (a pod may not set its priority itself), so the high-priority
//! pods name the PriorityClass [`HIGH_PRIORITY_CLASS`] of value 10 instead, and the API server
//! fills in `spec.priority: 10` from it.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use serde_json::{Value, json};

/// The PriorityClass of the high-priority pods.
pub const HIGH_PRIORITY_CLASS: &str = "scheduler-perf-high-priority";
/// Its value: the template's `priority`.
const HIGH_PRIORITY: i32 = 10;
/// The label that tells the two kinds of pods apart (`low` or `high`).
pub const PRIORITY_LABEL: &str = "cluster-bench/priority";

/// Which of the workload's two sets of pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Set {
    /// The init pods (`pod-low-priority.yaml`), named `low-NNNNN`.
    Low,
    /// The measured pods (`pod-high-priority.yaml`), named `high-NNNNN`.
    High,
}

/// The PriorityClass of value 10 that stands for the template's `priority: 10`.
pub fn high_priority_class() -> PriorityClass {
    serde_json::from_value(json!({
        "metadata": {"name": HIGH_PRIORITY_CLASS},
        "value": HIGH_PRIORITY,
        "description": "scheduler_perf's pod-high-priority.yaml (priority: 10)",
    }))
    .expect("a PriorityClass decodes")
}

/// `count` pods of `set` in `namespace` for `scheduler_name`, numbered in the order they are
/// to be created.
pub fn pods(count: usize, set: Set, namespace: &str, scheduler_name: &str) -> Vec<Pod> {
    let (prefix, cpu) = match set {
        Set::Low => ("low", "900m"),
        Set::High => ("high", "3000m"),
    };
    (0..count)
        .map(|i| {
            let resources = json!({"cpu": cpu, "memory": "500Mi"});
            let mut spec = json!({
                "schedulerName": scheduler_name,
                "containers": [{
                    "name": "pause",
                    "image": "k8s.gcr.io/pause:3.2",
                    "ports": [{"containerPort": 80}],
                    "resources": {"requests": resources, "limits": resources},
                }],
            });
            match set {
                Set::Low => spec["terminationGracePeriodSeconds"] = json!(0),
                Set::High => spec["priorityClassName"] = json!(HIGH_PRIORITY_CLASS),
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
        assert!(spec.termination_grace_period_seconds.is_none());
        let requests = spec.containers[0].resources.as_ref().unwrap();
        assert_eq!(requests.requests.as_ref().unwrap()["cpu"].0, "3000m");
        assert_eq!(high_priority_class().value, Some(10));
    }
}
