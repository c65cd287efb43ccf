use super::*;
use crate::ClusterInput;
use gantry_core::plugins;

const CLUSTER: &str = r#"
{apiVersion: v1, kind: Node, metadata: {name: small, labels: {kubernetes.io/hostname: small}}, status: {allocatable: {cpu: '2', memory: 4Gi, pods: '10'}}}
---
{apiVersion: v1, kind: Node, metadata: {name: big, labels: {kubernetes.io/hostname: big}}, status: {allocatable: {cpu: '4', memory: 8Gi, pods: '10'}}}
---
{apiVersion: v1, kind: Pod, metadata: {name: old, namespace: batch}, spec: {nodeName: big, priority: 0, containers: [{name: c, image: i, resources: {requests: {cpu: '3'}}}]}}
---
{apiVersion: v1, kind: Pod, metadata: {name: waiting, namespace: batch}, spec: {containers: [{name: c, image: i, resources: {requests: {cpu: '1'}}}]}}
"#;

fn config_text(text: Option<&str>) -> impl Fn() -> Result<Config, String> {
    move || match text {
        Some(t) => Config::parse(t, &plugins::registry()).map_err(|e| e.to_string()),
        None => Config::default_with(&plugins::registry()).map_err(|e| e.to_string()),
    }
}

fn view(cluster: &str, config: &dyn Fn() -> Result<Config, String>) -> ClusterView {
    let mut input = ClusterInput::default();
    input.add_yaml(cluster, "cluster").expect("cluster");
    let (view, invalid) = view_of_snapshot(&input, config().expect("config"));
    assert!(invalid.is_empty(), "{invalid:?}");
    view
}

fn question(yaml: &str) -> Question {
    Question {
        objects: serde_yaml::Deserializer::from_str(yaml)
            .map(|d| serde::Deserialize::deserialize(d).expect("yaml"))
            .collect(),
        ..Question::default()
    }
}

fn pod(name: &str, cpu: &str, priority: i32) -> String {
    format!(
        "{{apiVersion: v1, kind: Pod, metadata: {{name: {name}, namespace: shop}}, spec: {{priority: {priority}, containers: [{{name: c, image: i, resources: {{requests: {{cpu: '{cpu}'}}}}}}]}}}}\n---\n"
    )
}

#[test]
fn pods_are_placed_one_after_the_other_on_a_copy() {
    let config = config_text(None);
    let view = view(CLUSTER, &config);
    let q = question(&format!(
        "{}{}{}",
        pod("a", "2", 0),
        pod("b", "1", 0),
        pod("c", "2", 0)
    ));
    let answer = ask(&config, &view, &q).expect("an answer");
    assert_eq!((answer.nodes, answer.placed_pods), (2, 1));
    let placed: Vec<(&str, Option<&str>)> = answer
        .pods
        .iter()
        .map(|p| (p.name.as_str(), p.node.as_deref()))
        .collect();
    // a takes all of small; b the last cpu of big; nothing is left for c.
    assert_eq!(
        placed,
        [("a", Some("small")), ("b", Some("big")), ("c", None)]
    );
    let c = &answer.pods[2];
    assert_eq!(
        c.message.as_deref(),
        Some(
            "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
        )
    );
    let record = &c.attempts[0];
    assert!(!record.suggestions.is_empty(), "{record:?}");
    assert_eq!(answer.pods[0].attempts[0].node.as_deref(), Some("small"));
    // The view, and so the scheduler that took it, is unchanged.
    assert_eq!(view.cache().pod_count(), 1);
    let table = answer.to_table();
    assert!(
        table.contains("shop       c    Pod/c     (pending)"),
        "{table}"
    );
    assert!(
        table.contains("What single change would let it fit"),
        "{table}"
    );
}

#[test]
fn a_pod_of_higher_priority_says_whom_it_preempts() {
    let config = config_text(None);
    let view = view(CLUSTER, &config);
    let q = question(&format!(
        "{}{}",
        pod("filler", "2", 0),
        pod("vip", "3", 1000)
    ));
    let answer = ask(&config, &view, &q).expect("an answer");
    let vip = &answer.pods[1];
    assert_eq!(vip.node.as_deref(), Some("big"), "{vip:?}");
    assert_eq!(vip.preempts, ["batch/old"]);
    assert_eq!(vip.attempts.len(), 2, "nominated, then bound: {vip:?}");
    assert!(answer.to_table().contains("Would preempt: batch/old"));
}

#[test]
fn max_counts_the_replicas_that_fit_and_says_what_stops_the_next() {
    let config = config_text(None);
    let view = view(CLUSTER, &config);
    let mut q = question(
        "{apiVersion: apps/v1, kind: Deployment, metadata: {name: web, namespace: shop}, spec: {replicas: 1, selector: {matchLabels: {app: web}}, template: {metadata: {labels: {app: web}}, spec: {containers: [{name: c, image: i, resources: {requests: {cpu: 500m}}}]}}}}",
    );
    q.max = true;
    let answer = ask(&config, &view, &q).expect("an answer");
    let web = &answer.capacity[0];
    // 2 cpu free on small, 1 on big: six half-cpu replicas.
    assert_eq!((web.workload.as_str(), web.fits), ("Deployment/web", 6));
    assert!(!web.limit_reached);
    assert_eq!(
        web.stopped_by.as_deref(),
        Some(
            "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
        )
    );
    assert!(web.next.as_ref().is_some_and(|r| !r.suggestions.is_empty()));
    q.max_limit = Some(4);
    let answer = ask(&config, &view, &q).expect("an answer");
    assert_eq!(
        (answer.capacity[0].fits, answer.capacity[0].limit_reached),
        (4, true)
    );
}

#[test]
fn nodes_needed_is_the_fewest_template_nodes_that_fit_everything() {
    let config = config_text(None);
    let view = view(CLUSTER, &config);
    let mut q = question(
        "{apiVersion: apps/v1, kind: StatefulSet, metadata: {name: db, namespace: shop}, spec: {replicas: 7, selector: {matchLabels: {app: db}}, template: {metadata: {labels: {app: db}}, spec: {containers: [{name: c, image: i, resources: {requests: {cpu: '1'}}}]}}}}",
    );
    q.add_nodes = Some(10);
    q.node_template = Some(serde_json::json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "m5"},
        "status": {"allocatable": {"cpu": "2", "memory": "8Gi", "pods": "10"}}
    }));
    let answer = ask(&config, &view, &q).expect("an answer");
    // 3 cpu free in the cluster, 7 asked: two nodes of 2 cpu.
    let needed = answer.nodes_needed.as_ref().expect("nodes needed");
    assert_eq!(needed.needed, Some(2), "{needed:?}");
    assert!(
        needed
            .short_by_one
            .as_deref()
            .is_some_and(|s| s.contains("Insufficient cpu")),
        "{needed:?}"
    );
    assert!(
        answer.pods.iter().all(|p| p.node.is_some()),
        "{:?}",
        answer.pods
    );
    assert!(
        answer
            .pods
            .iter()
            .any(|p| p.node.as_deref() == Some("m5-2"))
    );
    q.add_nodes = Some(1);
    let answer = ask(&config, &view, &q).expect("an answer");
    assert_eq!(answer.nodes_needed.as_ref().and_then(|n| n.needed), None);
    assert!(
        answer
            .to_table()
            .contains("Even 1 nodes of template m5 are not enough.")
    );
}

#[test]
fn a_gang_that_cannot_complete_says_so() {
    let text = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
                profiles:\n- plugins:\n    multiPoint:\n      enabled: [{name: Coscheduling}]\n      disabled: [{name: PrioritySort}]\n";
    let config = config_text(Some(text));
    let view = view(CLUSTER, &config);
    let gang = |min: u32| {
        question(&format!(
            "{{apiVersion: scheduling.x-k8s.io/v1alpha1, kind: PodGroup, metadata: {{name: train, namespace: shop}}, spec: {{minMember: {min}}}}}\n---\n\
             {{apiVersion: batch/v1, kind: Job, metadata: {{name: train, namespace: shop}}, spec: {{parallelism: 3, template: {{metadata: {{labels: {{scheduling.x-k8s.io/pod-group: train}}}}, spec: {{containers: [{{name: c, image: i, resources: {{requests: {{cpu: '1'}}}}}}]}}}}}}}}\n"
        ))
    };
    let answer = ask(&config, &view, &gang(3)).expect("an answer");
    assert_eq!(answer.groups.len(), 1);
    assert!(answer.groups[0].complete, "{:?}", answer.groups);
    let answer = ask(&config, &view, &gang(3)).expect("an answer");
    assert_eq!(answer.pods.iter().filter(|p| p.node.is_some()).count(), 3);
    let mut big = gang(4);
    big.objects[1]["spec"]["parallelism"] = 4.into();
    let answer = ask(&config, &view, &big).expect("an answer");
    let group = &answer.groups[0];
    assert!(!group.complete, "{group:?}");
    assert_eq!(group.placed, 0);
    assert!(answer.pods.iter().all(|p| p.node.is_none()));
}

#[test]
fn a_pod_already_in_the_cluster_is_refused() {
    let config = config_text(None);
    let view = view(CLUSTER, &config);
    let q = question(
        "{apiVersion: v1, kind: Pod, metadata: {name: old, namespace: batch}, spec: {containers: []}}",
    );
    let answer = ask(&config, &view, &q).expect("an answer");
    assert_eq!(
        answer.pods[0].message.as_deref(),
        Some("a pod batch/old is already in the cluster, on node big")
    );
}

#[test]
fn views_are_shared_while_recent_and_taken_anew_after_a_change() {
    use gantry_core::scheduler::Views;
    let config = config_text(None);
    let mut input = ClusterInput::default();
    input.add_yaml(CLUSTER, "cluster").expect("cluster");
    let mut sched = sim::load(&input, config().expect("config"), None).scheduler;
    let mut views = Views::new(Duration::from_millis(100));
    let ms = Duration::from_millis;
    let first = views.get(&sched, ms(0));
    assert!(
        Arc::ptr_eq(&first, &views.get(&sched, ms(500))),
        "unchanged: shared"
    );
    sched.remove_pod("batch", "old", ms(500));
    let recent = views.get(&sched, ms(520));
    assert_eq!(
        recent.cache().pod_count(),
        0,
        "changed and 520 ms old: taken anew"
    );
    sched.remove_node("small");
    assert!(
        Arc::ptr_eq(&recent, &views.get(&sched, ms(600))),
        "changed, but 80 ms old: shared"
    );
    let taken = views.get(&sched, ms(700));
    assert!(
        !Arc::ptr_eq(&recent, &taken),
        "changed and 180 ms old: taken anew"
    );
    let held = Arc::downgrade(&taken);
    drop(taken);
    assert!(
        held.upgrade().is_none(),
        "the views keep no view alive: the last question to hold one frees it"
    );
}

fn deployment(replicas: u64) -> String {
    format!(
        "{{apiVersion: apps/v1, kind: Deployment, metadata: {{name: web, namespace: shop}}, spec: {{replicas: {replicas}, selector: {{matchLabels: {{app: web}}}}, template: {{metadata: {{labels: {{app: web}}}}, spec: {{containers: [{{name: c, image: i, resources: {{requests: {{cpu: 1m}}}}}}]}}}}}}}}"
    )
}

#[test]
fn a_question_beyond_its_limits_is_refused_before_it_runs() {
    let config = config_text(None);
    let view = view(CLUSTER, &config);
    let limits = Limits {
        pods: 100,
        ..Limits::default()
    };
    let never = || -> Option<String> { panic!("a refused question never runs") };
    let flood = question(&deployment(1_000_000_000));
    let e = ask_within(&config, &view, &flood, &limits, &never).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the question places 1000000000 pods; at most 100 are answered"
    );
    let mut counting = question(&deployment(1));
    counting.max = true;
    counting.max_limit = Some(101);
    let e = ask_within(&config, &view, &counting, &limits, &never).unwrap_err();
    assert_eq!(
        e.to_string(),
        "maxLimit 101 is more than the 100 replicas counted at most"
    );
    let mut adding = question(&deployment(1));
    adding.add_nodes = Some(11);
    let e = ask_within(
        &config,
        &view,
        &adding,
        &Limits {
            added_nodes: 10,
            ..limits
        },
        &never,
    )
    .unwrap_err();
    assert!(matches!(e, WhatIfError::TooLarge(_)), "{e}");
}

#[test]
fn a_question_stops_between_two_cycles_when_told_or_over_its_memory() {
    let config = config_text(None);
    let view = view(CLUSTER, &config);
    let cycles = std::sync::atomic::AtomicUsize::new(0);
    let after_five = || {
        let n = cycles.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        (n >= 5).then(|| "its asker went away".to_string())
    };
    let mut counting = question(&deployment(1));
    counting.max = true;
    counting.max_limit = Some(10);
    let e = ask_within(&config, &view, &counting, &Limits::default(), &after_five).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the question was stopped: its asker went away"
    );
    let placing = question(&deployment(10));
    cycles.store(0, std::sync::atomic::Ordering::Relaxed);
    let e = ask_within(&config, &view, &placing, &Limits::default(), &after_five).unwrap_err();
    assert!(matches!(e, WhatIfError::Stopped(_)), "{e}");
    // The library's tests count memory as the binary does: a tiny budget is spent at once.
    let tiny = Limits {
        memory: 1024,
        ..Limits::default()
    };
    let e = ask_within(&config, &view, &placing, &tiny, &|| None).unwrap_err();
    assert!(
        e.to_string()
            .contains("more than its memory budget of 1024 bytes"),
        "{e}"
    );
    // Within bounds, answered in full.
    let answer = ask_within(&config, &view, &placing, &Limits::default(), &|| None).unwrap();
    assert_eq!(answer.pods.len(), 10);
}
