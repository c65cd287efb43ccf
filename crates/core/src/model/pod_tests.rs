//! Request computation and conversion errors, checked against Kubernetes' rules.

use k8s_openapi::api::core::v1::Pod;

use super::PodInfo;

fn pod(yaml: &str) -> Result<PodInfo, super::ModelError> {
    let p: Pod = serde_yaml::from_str(yaml).expect("test yaml");
    PodInfo::from_api(&p)
}

#[test]
fn sums_containers_and_takes_max_of_init() {
    let p = pod(r#"
metadata: {name: p, namespace: ns}
spec:
  initContainers:
  - {name: i1, resources: {requests: {cpu: "3", memory: 1Gi}}}
  - {name: i2, resources: {requests: {cpu: 500m, memory: 4Gi}}}
  containers:
  - {name: a, resources: {requests: {cpu: "1", memory: 1Gi}}}
  - {name: b, resources: {requests: {cpu: 500m, memory: 512Mi}}}
"#)
    .unwrap();
    assert_eq!(p.requests.milli_cpu, 3000, "init max wins for cpu");
    assert_eq!(p.requests.memory, 4 << 30, "init max wins for memory");
    assert_eq!(p.non_zero_milli_cpu, 3000);
}

#[test]
fn sidecars_add_to_the_sum_and_to_later_init_containers() {
    let p = pod(r#"
metadata: {name: p}
spec:
  initContainers:
  - {name: sidecar, restartPolicy: Always, resources: {requests: {cpu: "1"}}}
  - {name: init, resources: {requests: {cpu: "2"}}}
  containers:
  - {name: a, resources: {requests: {cpu: "1"}}}
"#)
    .unwrap();
    // Sum: 1 (a) + 1 (sidecar) = 2; init phase: 2 (init) + 1 (sidecar started before) = 3.
    assert_eq!(p.requests.milli_cpu, 3000);
    let q = pod(r#"
metadata: {name: p}
spec:
  initContainers:
  - {name: init, resources: {requests: {cpu: "2"}}}
  - {name: sidecar, restartPolicy: Always, resources: {requests: {cpu: "1"}}}
  containers:
  - {name: a, resources: {requests: {cpu: "2"}}}
"#)
    .unwrap();
    // Sum: 2 + 1 = 3; init phase: 2 (sidecar not started yet).
    assert_eq!(q.requests.milli_cpu, 3000);
}

#[test]
fn overhead_and_limits_defaulting() {
    let p = pod(r#"
metadata: {name: p}
spec:
  overhead: {cpu: 250m, memory: 120Mi}
  containers:
  - {name: a, resources: {limits: {cpu: "1", memory: 1Gi, nvidia.com/gpu: "1"}}}
"#)
    .unwrap();
    assert_eq!(p.requests.milli_cpu, 1250);
    assert_eq!(p.requests.memory, (1 << 30) + (120 << 20));
    assert_eq!(p.requests.scalar("nvidia.com/gpu"), 1);
}

#[test]
fn non_zero_defaults_for_scoring() {
    let p = pod(r#"
metadata: {name: p}
spec:
  containers:
  - {name: a}
  - {name: b, resources: {requests: {cpu: "0"}}}
"#)
    .unwrap();
    assert_eq!(p.requests.milli_cpu, 0);
    assert_eq!(
        p.non_zero_milli_cpu, 100,
        "explicit zero stays zero, missing gets 100m"
    );
    assert_eq!(p.non_zero_memory, 2 * 200 * 1024 * 1024);
}

#[test]
fn errors_name_the_pod_and_the_field() {
    let e = pod(r#"
metadata: {name: bad, namespace: ns}
spec:
  containers:
  - {name: a, resources: {requests: {cpu: "a lot"}}}
"#)
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "pod ns/bad: spec.containers[0].resources.requests[cpu]: invalid quantity \"a lot\": must start with a number"
    );
    let e = pod(r#"
metadata: {name: bad}
spec:
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions: [{key: zone, operator: Near, values: [a]}]
  containers: [{name: a}]
"#)
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "pod default/bad: spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]: unsupported operator \"Near\""
    );
}

#[test]
fn affinity_namespaces_default_to_own() {
    let p = pod(r#"
metadata: {name: p, namespace: team, labels: {app: web, rev: "2"}}
spec:
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - labelSelector: {matchLabels: {app: web}}
        matchLabelKeys: [rev]
        topologyKey: kubernetes.io/hostname
  containers: [{name: a}]
"#)
    .unwrap();
    let t = &p.affinity.required_anti[0];
    assert_eq!(t.namespaces, vec!["team".to_string()]);
    let same_rev: super::Labels = [("app", "web"), ("rev", "2")].into_iter().collect();
    let other_rev: super::Labels = [("app", "web"), ("rev", "1")].into_iter().collect();
    let ns = super::Labels::default();
    assert!(t.matches("team", &same_rev, &ns));
    assert!(!t.matches("team", &other_rev, &ns));
    assert!(!t.matches("other", &same_rev, &ns));
}

#[test]
fn images_are_normalized_and_every_container_is_counted() {
    let p = pod(r#"
metadata: {name: p}
spec:
  initContainers:
  - {name: init, image: "busybox"}
  containers:
  - {name: a, image: "gcr.io:5000/app:v1"}
  - {name: b}
"#)
    .unwrap();
    assert_eq!(p.images, ["busybox:latest", "gcr.io:5000/app:v1"]);
    assert_eq!(
        p.num_containers, 3,
        "the container without an image counts too"
    );
}

fn qos(containers: &str) -> super::pod::QosClass {
    pod(&format!("metadata: {{name: p}}\nspec:\n{containers}"))
        .unwrap()
        .qos_class
}

#[test]
fn qos_class_follows_kubernetes_rules() {
    use super::pod::QosClass::*;
    // No cpu or memory anywhere; other resources do not count.
    assert_eq!(qos("  containers: [{name: a}]"), BestEffort);
    assert_eq!(
        qos(
            "  containers: [{name: a, resources: {requests: {nvidia.com/gpu: 1}, limits: {nvidia.com/gpu: 1}}}]"
        ),
        BestEffort
    );
    // Zero amounts count as unset.
    assert_eq!(
        qos("  containers: [{name: a, resources: {requests: {cpu: '0'}}}]"),
        BestEffort
    );
    assert_eq!(
        qos("  containers: [{name: a, resources: {requests: {cpu: 100m}}}]"),
        Burstable
    );
    // Limits equal to requests for both, in every container.
    let both = "{requests: {cpu: 500m, memory: 1Gi}, limits: {cpu: 500m, memory: 1Gi}}";
    assert_eq!(
        qos(&format!("  containers: [{{name: a, resources: {both}}}]")),
        Guaranteed
    );
    // Limits alone: requests default to them.
    assert_eq!(
        qos("  containers: [{name: a, resources: {limits: {cpu: '1', memory: 1Gi}}}]"),
        Guaranteed
    );
    // A request below its limit, a missing memory limit, an init container without limits.
    assert_eq!(
        qos(
            "  containers: [{name: a, resources: {requests: {cpu: 250m, memory: 1Gi}, limits: {cpu: 500m, memory: 1Gi}}}]"
        ),
        Burstable
    );
    assert_eq!(
        qos("  containers: [{name: a, resources: {limits: {cpu: '1'}}}]"),
        Burstable
    );
    assert_eq!(
        qos(&format!(
            "  initContainers: [{{name: i}}]\n  containers: [{{name: a, resources: {both}}}]"
        )),
        Burstable
    );
    // An explicit zero request under a limit is not the limit.
    assert_eq!(
        qos(
            "  containers: [{name: a, resources: {requests: {cpu: '0', memory: 1Gi}, limits: {cpu: '1', memory: 1Gi}}}]"
        ),
        Burstable
    );
}

#[test]
fn qos_class_names_a_malformed_limit() {
    let err = pod(
        "metadata: {name: p, namespace: ns}\nspec:\n  containers: [{name: a, resources: {requests: {cpu: '1'}, limits: {cpu: lots}}}]",
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("pod ns/p: spec.containers[0].resources.limits[cpu]: invalid quantity"),
        "{err}"
    );
}

#[test]
fn priority_class_name_is_kept() {
    let p = pod(
        "metadata: {name: p}\nspec:\n  priorityClassName: batch-low\n  containers: [{name: a}]",
    )
    .unwrap();
    assert_eq!(p.priority_class_name, "batch-low");
}

#[test]
fn errors_cut_the_values_they_repeat() {
    let huge = "9".repeat(1_000_000);
    let name = "n".repeat(1000);
    let e = pod(&format!(
        "metadata: {{name: {name}, namespace: ns}}\nspec:\n  containers:\n  - {{name: a, resources: {{requests: {{cpu: \"{huge}x\"}}}}}}\n"
    ))
    .unwrap_err()
    .to_string();
    assert_eq!(
        e,
        format!(
            "pod ns/{}... (1000 bytes): spec.containers[0].resources.requests[cpu]: invalid quantity \"{}\"... (1000001 bytes): unknown suffix",
            "n".repeat(64),
            "9".repeat(64)
        )
    );
}

#[test]
fn limits_beyond_the_range_add_up_without_overflow() {
    // Found by fuzz_sim_structured_clusters_fit: the QoS sums of two containers' limits
    // overflowed.
    let p = pod(r#"
metadata: {name: p, namespace: ns}
spec:
  containers:
  - {name: a, resources: {requests: {memory: 1Gi}, limits: {memory: "8e18"}}}
  - {name: b, resources: {requests: {memory: 1Gi}, limits: {memory: "8e18"}}}
"#)
    .unwrap();
    assert_eq!(p.qos_class, super::pod::QosClass::Burstable);
    assert_eq!(p.requests.memory, 2 << 30);
}

#[test]
fn pod_level_requests_replace_the_containers_sum_of_their_resources() {
    // 12 cpu at pod level over containers of 1 cpu: the pod asks 12, plus its overhead.
    let p = pod(r#"
metadata: {name: p}
spec:
  overhead: {cpu: 100m}
  resources: {requests: {cpu: "12", hugepages-2Mi: 4Mi}, limits: {cpu: "12"}}
  initContainers:
  - {name: sidecar, restartPolicy: Always, resources: {requests: {cpu: "1", memory: 1Gi}}}
  containers:
  - {name: a, resources: {requests: {cpu: "1", memory: 1Gi, nvidia.com/gpu: "1"}}}
"#)
    .unwrap();
    assert_eq!(p.requests.milli_cpu, 12_100);
    assert_eq!(
        p.non_zero_milli_cpu, 12_100,
        "scoring reads the pod level too"
    );
    // Memory is not set at pod level: the containers' sum stands.
    assert_eq!(p.requests.memory, 2 << 30);
    assert_eq!(p.requests.scalar("hugepages-2Mi"), 4 << 20);
    // Resources Kubernetes does not manage at pod level stay the containers'.
    assert_eq!(p.requests.scalar("nvidia.com/gpu"), 1);

    // Pod-level memory over containers asking none: scoring takes it, not the default.
    let q = pod(r#"
metadata: {name: q}
spec:
  resources: {requests: {memory: 64Mi}}
  containers:
  - {name: a}
"#)
    .unwrap();
    assert_eq!(q.requests.memory, 64 << 20);
    assert_eq!(q.non_zero_memory, 64 << 20);
    assert_eq!(
        q.non_zero_milli_cpu, 100,
        "cpu keeps the containers' default"
    );

    let bad = pod(r#"
metadata: {name: bad}
spec:
  resources: {requests: {cpu: lots}}
  containers:
  - {name: a}
"#)
    .unwrap_err()
    .to_string();
    assert!(bad.contains("spec.resources.requests[cpu]"), "{bad}");
}

/// A running pod of one container asking `spec_cpu`, whose kubelet reports `status`.
fn resized(spec_cpu: &str, status: &str) -> PodInfo {
    pod(&format!(
        r#"
metadata: {{name: r}}
spec:
  nodeName: n1
  containers:
  - {{name: a, resources: {{requests: {{cpu: "{spec_cpu}", memory: 1Gi}}}}}}
status:
{status}
"#
    ))
    .unwrap()
}

#[test]
fn a_resize_counts_the_most_of_spec_allocated_and_actuated() {
    // Shrinking from 2 cpu: the container still runs with 2.
    let shrinking = resized(
        "1",
        "  containerStatuses:\n  - {name: a, allocatedResources: {cpu: \"1\"}, resources: {requests: {cpu: \"2\"}}}",
    );
    assert_eq!(shrinking.requests.milli_cpu, 2000);
    assert_eq!(shrinking.non_zero_milli_cpu, 2000);
    assert_eq!(
        shrinking.requests.memory,
        1 << 30,
        "memory as the spec says"
    );
    // Growing to 3 cpu, not yet allocated: the spec's 3 count already.
    let growing = resized(
        "3",
        "  containerStatuses:\n  - {name: a, allocatedResources: {cpu: \"1\"}, resources: {requests: {cpu: \"1\"}}}",
    );
    assert_eq!(growing.requests.milli_cpu, 3000);
    // Growing to 8 cpu, found infeasible: what runs counts, not the spec.
    let infeasible = resized(
        "8",
        "  conditions:\n  - {type: PodResizePending, status: \"True\", reason: Infeasible}\n  containerStatuses:\n  - {name: a, allocatedResources: {cpu: \"1\", memory: 1Gi}, resources: {requests: {cpu: \"1\", memory: 1Gi}}}",
    );
    assert_eq!(infeasible.requests.milli_cpu, 1000);
    assert_eq!(infeasible.requests.memory, 1 << 30);
    // A pod that reports no resources counts its spec.
    let plain = resized("4", "  phase: Running");
    assert_eq!(plain.requests.milli_cpu, 4000);
}

#[test]
fn a_resize_of_pod_level_resources_counts_the_most_reported() {
    let p = pod(r#"
metadata: {name: p}
spec:
  nodeName: n1
  resources: {requests: {cpu: "2"}}
  containers:
  - {name: a, resources: {requests: {cpu: "1"}}}
status:
  allocatedResources: {cpu: "2"}
  resources: {requests: {cpu: "3"}}
"#)
    .unwrap();
    assert_eq!(p.requests.milli_cpu, 3000);
    let bad = pod(r#"
metadata: {name: bad}
spec:
  containers:
  - {name: a}
status:
  containerStatuses:
  - {name: a, allocatedResources: {cpu: lots}}
"#)
    .unwrap_err()
    .to_string();
    assert!(
        bad.contains("status.containerStatuses[0].allocatedResources"),
        "{bad}"
    );
}

#[test]
fn pod_level_resources_decide_the_qos_class() {
    use super::pod::QosClass;
    let with = |resources: &str| {
        pod(&format!(
            "metadata: {{name: p}}\nspec:\n  resources: {resources}\n  containers:\n  - {{name: a, resources: {{requests: {{cpu: 100m}}}}}}\n"
        ))
        .unwrap()
        .qos_class
    };
    assert_eq!(
        with("{requests: {cpu: \"2\", memory: 1Gi}, limits: {cpu: \"2\", memory: 1Gi}}"),
        QosClass::Guaranteed,
        "the containers' own requests do not count"
    );
    assert_eq!(with("{requests: {cpu: \"2\"}}"), QosClass::Burstable);
    assert_eq!(
        with("{requests: {nvidia.com/gpu: \"1\"}}"),
        QosClass::Burstable,
        "no pod-level resource set: the containers decide"
    );
}
