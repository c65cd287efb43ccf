use std::sync::Arc;

use crate::{ClusterInput, Report, simulate};
use gantry_core::config::Config;
use gantry_core::plugins::default_preemption::*;

/// The default profile with DefaultPreemption enabled, as kube-scheduler's default is.
const CONFIG: &str = r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- plugins:
    multiPoint:
      enabled: [{name: DefaultPreemption}]
"#;

fn node(name: &str, cpu: &str, extra: &str) -> String {
    format!(
        r#"
- apiVersion: v1
  kind: Node
  metadata: {{name: {name}, labels: {{kubernetes.io/hostname: {name}}}}}
  spec: {{{extra}}}
  status: {{allocatable: {{cpu: "{cpu}", memory: 16Gi, pods: "10"}}}}
"#
    )
}

fn running(name: &str, node: &str, cpu: &str, priority: i32, started: &str) -> String {
    format!(
        r#"
- apiVersion: v1
  kind: Pod
  metadata: {{name: {name}, namespace: default, labels: {{app: {name}}}}}
  spec:
    nodeName: {node}
    priority: {priority}
    containers: [{{name: c, image: app:1, resources: {{requests: {{cpu: "{cpu}"}}}}}}]
  status: {{phase: Running, startTime: "{started}"}}
"#
    )
}

fn pending(name: &str, cpu: &str, priority: i32, extra: &str) -> String {
    format!(
        r#"
- apiVersion: v1
  kind: Pod
  metadata: {{name: {name}, namespace: default}}
  spec:
    priority: {priority}
    {extra}
    containers: [{{name: c, image: app:1, resources: {{requests: {{cpu: "{cpu}"}}}}}}]
"#
    )
}

fn run(objects: &[String]) -> Report {
    run_with(CONFIG, objects)
}

fn outcome<'a>(report: &'a Report, pod: &str) -> &'a crate::PodOutcome {
    report
        .pods
        .iter()
        .find(|p| p.name == pod)
        .expect("pod in report")
}

#[test]
fn candidates_wanted_follow_kube_schedulers_bounds() {
    let p = DefaultPreemption::new(DefaultPreemptionArgs::default());
    assert_eq!(p.candidates_wanted(50), 50, "never more than there are");
    assert_eq!(
        p.candidates_wanted(500),
        100,
        "at least the absolute number"
    );
    assert_eq!(p.candidates_wanted(5000), 500, "else the percentage");
}

#[test]
fn the_latest_started_victim_of_the_lowest_priority_is_evicted_and_the_pod_placed() {
    let report = run(&[
        node("n1", "4", ""),
        running("old", "n1", "2", 0, "2026-01-01T00:00:00Z"),
        running("new", "n1", "2", 0, "2026-06-01T00:00:00Z"),
        pending("important", "2", 1000, ""),
    ]);
    assert_eq!(outcome(&report, "important").node.as_deref(), Some("n1"));
    assert_eq!(report.preemptions.len(), 1);
    assert_eq!(report.preemptions[0].victims, ["default/new"]);
    assert_eq!(
        outcome(&report, "new").evicted.as_deref(),
        Some("default/important on n1")
    );
    assert_eq!(outcome(&report, "old").node.as_deref(), Some("n1"));
}

#[test]
fn a_pod_that_never_preempts_waits() {
    let report = run(&[
        node("n1", "4", ""),
        running("low", "n1", "4", 0, "2026-01-01T00:00:00Z"),
        pending("polite", "2", 1000, "preemptionPolicy: Never"),
    ]);
    assert!(report.preemptions.is_empty());
    assert_eq!(
        outcome(&report, "polite").message.as_deref(),
        Some(
            "0/1 nodes are available: 1 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never."
        )
    );
}

#[test]
fn no_victims_and_unhelpful_nodes_are_told_apart() {
    let report = run(&[
        node("n1", "4", ""),
        node(
            "n2",
            "4",
            "taints: [{key: dedicated, value: gpu, effect: NoSchedule}]",
        ),
        running("peer", "n1", "4", 1000, "2026-01-01T00:00:00Z"),
        pending("important", "2", 1000, ""),
    ]);
    assert!(report.preemptions.is_empty());
    assert_eq!(
        outcome(&report, "important").message.as_deref(),
        Some(
            "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint(s). preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling."
        )
    );
}

#[test]
fn the_node_whose_most_important_victim_matters_least_is_chosen() {
    let report = run(&[
        node("n1", "4", ""),
        node("n2", "4", ""),
        running("a", "n1", "4", 10, "2026-01-01T00:00:00Z"),
        running("b", "n2", "4", 5, "2026-01-01T00:00:00Z"),
        pending("important", "2", 1000, ""),
    ]);
    assert_eq!(report.preemptions.len(), 1);
    let p = &report.preemptions[0];
    assert_eq!(
        (p.node.as_str(), p.victims.as_slice()),
        ("n2", &["default/b".to_string()][..])
    );
    assert_eq!(p.reason, "lowest priority of its most important victim");
    assert_eq!(outcome(&report, "important").node.as_deref(), Some("n2"));
}

#[test]
fn fewer_victims_win_when_priorities_tie() {
    let report = run(&[
        node("n1", "4", ""),
        node("n2", "4", ""),
        running("a1", "n1", "2", 5, "2026-01-01T00:00:00Z"),
        running("a2", "n1", "2", 5, "2026-01-01T00:00:00Z"),
        running("b", "n2", "4", 5, "2026-01-01T00:00:00Z"),
        pending("important", "3", 1000, ""),
    ]);
    let p = &report.preemptions[0];
    assert_eq!(p.node, "n2");
    assert_eq!(p.reason, "smallest sum of victim priorities");
}

fn budget(name: &str, app: &str, allowed: i32) -> String {
    format!(
        r#"
- apiVersion: policy/v1
  kind: PodDisruptionBudget
  metadata: {{name: {name}, namespace: default}}
  spec: {{selector: {{matchLabels: {{app: {app}}}}}}}
  status: {{disruptionsAllowed: {allowed}, currentHealthy: 1, desiredHealthy: 1, expectedPods: 1}}
"#
    )
}

#[test]
fn a_pod_protected_by_a_budget_is_spared_when_another_victim_will_do() {
    let report = run(&[
        node("n1", "4", ""),
        node("n2", "4", ""),
        running("guarded", "n1", "4", 0, "2026-06-01T00:00:00Z"),
        running("free", "n2", "4", 0, "2026-01-01T00:00:00Z"),
        budget("keep", "guarded", 0),
        pending("important", "2", 1000, ""),
    ]);
    let p = &report.preemptions[0];
    assert_eq!(p.victims, ["default/free"]);
    assert_eq!(p.reason, "fewest PodDisruptionBudget violations");
}

#[test]
fn a_budget_does_not_stop_the_only_preemption_that_helps() {
    let report = run(&[
        node("n1", "4", ""),
        running("guarded", "n1", "4", 0, "2026-06-01T00:00:00Z"),
        budget("keep", "guarded", 0),
        pending("important", "2", 1000, ""),
    ]);
    assert_eq!(report.preemptions[0].victims, ["default/guarded"]);
    assert_eq!(outcome(&report, "important").node.as_deref(), Some("n1"));
}

#[test]
fn room_made_for_a_nominated_pod_is_kept_from_pods_of_lower_priority() {
    let nominated = r#"
- apiVersion: v1
  kind: Pod
  metadata: {name: waiting, namespace: default}
  spec:
    priority: 1000
    schedulingGates: [{name: example.com/hold}]
    containers: [{name: c, image: app:1, resources: {requests: {cpu: "2"}}}]
  status: {nominatedNodeName: n1}
"#;
    let report = run(&[
        node("n1", "2", ""),
        nominated.to_string(),
        pending("low", "2", 0, ""),
    ]);
    assert_eq!(outcome(&report, "low").node, None);
    assert_eq!(
        outcome(&report, "low").message.as_deref(),
        Some(
            "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
        )
    );
    let report = run(&[
        node("n1", "2", ""),
        nominated.to_string(),
        pending("higher", "2", 2000, ""),
    ]);
    assert_eq!(
        outcome(&report, "higher").node.as_deref(),
        Some("n1"),
        "a pod of higher priority need not leave the room"
    );
}

fn input_of(objects: &[String]) -> ClusterInput {
    let mut input = ClusterInput::default();
    input
        .add_yaml(
            &format!("apiVersion: v1\nkind: List\nitems:{}", objects.concat()),
            "test",
        )
        .expect("valid input");
    input
}

fn run_with(config: &str, objects: &[String]) -> Report {
    let input = input_of(objects);
    let config = Config::parse(config, &gantry_core::plugins::registry()).expect("valid config");
    let report = simulate(&input, config, None);
    assert!(report.invalid.is_empty(), "{:?}", report.invalid);
    report
}

fn gpu_node(name: &str) -> String {
    format!(
        r#"
- apiVersion: v1
  kind: Node
  metadata: {{name: {name}, labels: {{kubernetes.io/hostname: {name}}}}}
  status: {{allocatable: {{cpu: "16", memory: 64Gi, pods: "10", nvidia.com/gpu: "1"}}}}
"#
    )
}

#[test]
fn gpu_shares_are_taken_from_pods_of_lower_priority() {
    const GPU_CONFIG: &str = r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- plugins:
    multiPoint:
      enabled: [{name: GpuShare}, {name: DefaultPreemption}]
"#;
    let share = |name: &str, priority: i32, milli: u32, held: bool| {
        let (node, status, assignment) = if held {
            (
                "nodeName: g1",
                "status: {phase: Running, startTime: \"2026-01-01T00:00:00Z\"}",
                format!(", gantry.io/gpu-assignment: \"0:{milli}\""),
            )
        } else {
            ("", "", String::new())
        };
        format!(
            r#"
- apiVersion: v1
  kind: Pod
  metadata: {{name: {name}, namespace: default, annotations: {{gantry.io/gpu-milli: "{milli}"{assignment}}}}}
  spec:
    {node}
    priority: {priority}
    containers: [{{name: c, image: app:1, resources: {{requests: {{cpu: "1"}}}}}}]
  {status}
"#
        )
    };
    let report = run_with(
        GPU_CONFIG,
        &[
            gpu_node("g1"),
            share("notebook-a", 0, 400, true),
            share("notebook-b", 0, 400, true),
            share("training", 1000, 600, false),
        ],
    );
    assert_eq!(outcome(&report, "training").node.as_deref(), Some("g1"));
    assert_eq!(report.preemptions.len(), 1);
    assert_eq!(
        report.preemptions[0].victims.len(),
        1,
        "one share is enough: {:?}",
        report.preemptions[0]
    );
}

#[test]
fn a_pod_whose_anti_affinity_keeps_the_preemptor_out_is_a_victim() {
    let guard = r#"
- apiVersion: v1
  kind: Pod
  metadata: {name: loner, namespace: default, labels: {app: loner}}
  spec:
    nodeName: n1
    priority: 0
    affinity:
      podAntiAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
        - labelSelector: {matchLabels: {app: web}}
          topologyKey: kubernetes.io/hostname
    containers: [{name: c, image: app:1, resources: {requests: {cpu: 100m}}}]
  status: {phase: Running, startTime: "2026-01-01T00:00:00Z"}
- apiVersion: v1
  kind: Pod
  metadata: {name: web, namespace: default, labels: {app: web}}
  spec:
    priority: 1000
    containers: [{name: c, image: app:1, resources: {requests: {cpu: 100m}}}]
"#;
    let report = run(&[node("n1", "4", ""), guard.to_string()]);
    assert_eq!(outcome(&report, "web").node.as_deref(), Some("n1"));
    assert_eq!(report.preemptions[0].victims, ["default/loner"]);
}

#[test]
fn the_dry_run_on_the_pool_decides_as_one_node_at_a_time() {
    // 600 nodes: the search wants 100 candidates, tried in batches on the pool's threads.
    // Victims differ by priority and start time from node to node, some nodes have nothing
    // to evict, and each preemptor finds the nodes its predecessors were nominated to.
    let mut objects = Vec::new();
    for i in 0..600 {
        let name = format!("n{i:03}");
        objects.push(node(&name, "4", ""));
        for j in 0..4 {
            let priority = if i % 7 == 0 { 200 } else { (i * 3 + j) % 5 };
            let started = format!("2026-01-01T00:{:02}:{:02}Z", (i * 7 + j) % 60, j * 11);
            objects.push(running(
                &format!("p{i:03}-{j}"),
                &name,
                "1",
                priority,
                &started,
            ));
        }
    }
    for k in 0..30 {
        objects.push(pending(&format!("high-{k:02}"), "3", 100, ""));
    }
    objects.push(pending("too-big", "8", 100, ""));
    let config = Config::parse(CONFIG, &gantry_core::plugins::registry()).expect("valid config");
    let input = input_of(&objects);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .expect("thread pool");
    let alone = simulate(&input, config.clone(), None);
    let pooled = simulate(&input, config, Some(Arc::new(pool)));
    assert_eq!(alone.preemptions.len(), 30, "every preemptor preempts");
    assert_eq!(
        serde_json::to_value(&alone).expect("report serializes"),
        serde_json::to_value(&pooled).expect("report serializes"),
    );
    let message = outcome(&alone, "too-big").message.as_deref().unwrap_or("");
    assert!(
        message.contains("preemption: 0/600 nodes are available"),
        "{message}"
    );
}
