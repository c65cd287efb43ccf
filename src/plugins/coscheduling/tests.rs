use std::time::Duration;

use super::*;
use crate::config::Config;
use crate::model::pod_group::{PodGroup, PodGroupModel};
use crate::plugins::registry;
use crate::scheduler::{Attempt, Scheduler};
use crate::testing::{node, pod};

fn scheduler(args: &str) -> Scheduler {
    let yaml = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled: [{{name: Coscheduling}}]
      disabled: [{{name: PrioritySort}}, {{name: DefaultPreemption}}]
  pluginConfig:
  - name: Coscheduling
    args: {args}
"
    );
    let config = Config::parse(&yaml, &registry()).expect("config");
    let mut s = Scheduler::new(config, None);
    s.upsert_node(node("n1").capacity("4", "8Gi").build(), Duration::ZERO);
    s.upsert_node(node("n2").capacity("4", "8Gi").build(), Duration::ZERO);
    s
}

fn group(s: &mut Scheduler, yaml: &str) {
    let pg: PodGroup = serde_yaml::from_str(yaml).expect("yaml");
    s.upsert_pod_group(PodGroupModel::from_api(&pg).expect("group"), Duration::ZERO);
}

fn member(name: &str, group: &str, cpu: &str) -> Arc<PodInfo> {
    pod(name)
        .req("cpu", cpu)
        .label(POD_GROUP_LABEL, group)
        .build()
}

fn add(s: &mut Scheduler, pods: impl IntoIterator<Item = Arc<PodInfo>>) {
    for p in pods {
        s.upsert_pod(p, Duration::ZERO).expect("pending");
    }
}

/// The attempt's outcome in a word, with the pod.
fn next(s: &mut Scheduler, now: Duration) -> Option<(String, String)> {
    Some(match s.schedule_next(now)? {
        Attempt::Scheduled(task, _) => {
            s.binding_succeeded(&task, now).expect("bound");
            (task.assumed.name.clone(), "bound".to_string())
        }
        Attempt::Permitted { task, .. } => {
            s.binding_succeeded(&task, now).expect("bound");
            (task.assumed.name.clone(), "bound".to_string())
        }
        Attempt::Waiting { pod, .. } => (pod.name.clone(), "waiting".to_string()),
        Attempt::Rejected { pod, status, .. } => (pod.name.clone(), status.message()),
        Attempt::Unschedulable { pod, message, .. } => (pod.name.clone(), message),
        Attempt::Failed { pod, status, .. } => (pod.name.clone(), format!("error: {status}")),
    })
}

fn run(s: &mut Scheduler, now: Duration) -> Vec<(String, String)> {
    std::iter::from_fn(|| next(s, now)).collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn a_group_that_fits_waits_for_its_last_pod_then_is_bound_entirely() {
    let mut s = scheduler("{}");
    group(
        &mut s,
        "metadata: {name: g, namespace: default}\nspec: {minMember: 3}",
    );
    add(&mut s, (0..3).map(|i| member(&format!("p{i}"), "g", "2")));
    assert_eq!(
        run(&mut s, Duration::ZERO),
        pairs(&[
            ("p0", "waiting"),
            ("p1", "waiting"),
            ("p2", "bound"),
            ("p0", "bound"),
            ("p1", "bound"),
        ])
    );
    assert!(s.waiting_pods().is_empty());
}

#[test]
fn a_group_short_of_min_member_is_refused_before_any_node_is_tried() {
    let mut s = scheduler("{}");
    group(
        &mut s,
        "metadata: {name: g, namespace: default}\nspec: {minMember: 3}",
    );
    add(&mut s, (0..2).map(|i| member(&format!("p{i}"), "g", "1")));
    let out = run(&mut s, Duration::ZERO);
    assert_eq!(
        out[0].1,
        "0/2 nodes are available: pre-filter pod p0 cannot find enough sibling pods, current pods number: 2, minMember of group: 3. PodGroup default/g gets rejected due to Pod p0 is unschedulable even after PostFilter"
    );
    // The third pod arriving wakes the others, parked by Coscheduling.
    add(&mut s, [member("p2", "g", "1")]);
    let later = Duration::from_secs(20);
    let bound = run(&mut s, later)
        .into_iter()
        .filter(|(_, r)| r == "bound")
        .count();
    assert_eq!(bound, 3);
}

#[test]
fn gated_pods_do_not_count_toward_the_quorum() {
    let mut s = scheduler("{}");
    group(
        &mut s,
        "metadata: {name: g, namespace: default}\nspec: {minMember: 2}",
    );
    let gated = pod("p1")
        .label(POD_GROUP_LABEL, "g")
        .with_spec(|spec| {
            spec.scheduling_gates = Some(vec![k8s_openapi::api::core::v1::PodSchedulingGate {
                name: "wait".to_string(),
            }])
        })
        .build();
    add(&mut s, [member("p0", "g", "1"), gated]);
    assert_eq!(
        next(&mut s, Duration::ZERO).unwrap().1,
        "0/2 nodes are available: pre-filter pod p0 cannot proceed due to gated pods in the same PodGroup. PodGroup default/g gets rejected due to Pod p0 is unschedulable even after PostFilter"
    );
}

#[test]
fn min_resources_the_cluster_cannot_hold_refuse_the_group_and_its_own_pods_count_as_free() {
    let mut s = scheduler("{}");
    group(
        &mut s,
        "metadata: {name: g, namespace: default}\nspec: {minMember: 1, minResources: {cpu: '10'}}",
    );
    add(&mut s, [member("p0", "g", "1")]);
    assert_eq!(
        next(&mut s, Duration::ZERO).unwrap().1,
        "0/2 nodes are available: resource gap: cpu 2000m. PodGroup default/g gets rejected due to Pod p0 is unschedulable even after PostFilter"
    );
    // 8 cpu in all, 3 of them taken by another pod: 5 free, with the group's own pod
    // counted free as well.
    let mut s = scheduler("{}");
    group(
        &mut s,
        "metadata: {name: g, namespace: default}\nspec: {minMember: 2, minResources: {cpu: '6'}}",
    );
    s.upsert_pod(
        pod("other").req("cpu", "3").on("n1").build(),
        Duration::ZERO,
    )
    .unwrap();
    s.upsert_pod(
        pod("p0")
            .req("cpu", "1")
            .label(POD_GROUP_LABEL, "g")
            .on("n2")
            .build(),
        Duration::ZERO,
    )
    .unwrap();
    add(&mut s, [member("p1", "g", "1")]);
    assert_eq!(
        next(&mut s, Duration::ZERO).unwrap().1,
        "0/2 nodes are available: resource gap: cpu 1000m. PodGroup default/g gets rejected due to Pod p1 is unschedulable even after PostFilter"
    );
}

#[test]
fn a_wait_that_runs_out_releases_the_whole_group() {
    // PostFilter never rejects here (100%): the waits run out instead.
    let mut s = scheduler("{podGroupRejectPercentage: 100}");
    group(
        &mut s,
        "metadata: {name: g, namespace: default}\nspec: {minMember: 3, scheduleTimeoutSeconds: 5}",
    );
    add(&mut s, [member("p0", "g", "2"), member("p1", "g", "2")]);
    add(&mut s, [member("p2", "g", "8")]);
    let out = run(&mut s, Duration::ZERO);
    assert_eq!(out[0], ("p0".to_string(), "waiting".to_string()));
    assert_eq!(out[1], ("p1".to_string(), "waiting".to_string()));
    assert!(out[2].1.contains("Insufficient cpu"), "{out:?}");
    assert_eq!(s.next_wakeup(), Some(Duration::from_secs(5)));
    let timeout = "rejected due to timeout after waiting 5s at plugin Coscheduling";
    let released = run(&mut s, Duration::from_secs(5));
    assert_eq!(&released[..2], pairs(&[("p0", timeout), ("p1", timeout)]));
    assert!(s.cache().node("n1").unwrap().pods.is_empty());
    assert!(s.cache().node("n2").unwrap().pods.is_empty());
}

#[test]
fn a_pod_that_fits_nowhere_takes_its_waiting_group_with_it() {
    let mut s = scheduler("{}");
    group(
        &mut s,
        "metadata: {name: g, namespace: default}\nspec: {minMember: 2}",
    );
    add(&mut s, [member("p0", "g", "2"), member("p1", "g", "8")]);
    let out = run(&mut s, Duration::ZERO);
    assert_eq!(out[0].1, "waiting");
    assert_eq!(
        out[1].1,
        "0/2 nodes are available: 2 Insufficient cpu. PodGroup default/g gets rejected due to Pod p1 is unschedulable even after PostFilter"
    );
    assert_eq!(
        out[2],
        (
            "p0".to_string(),
            "optimistic rejection in PostFilter".to_string()
        )
    );
    assert!(s.waiting_pods().is_empty());
}

#[test]
fn a_pod_of_a_group_that_does_not_exist_is_refused_at_permit() {
    let mut s = scheduler("{}");
    add(&mut s, [member("p0", "missing", "1")]);
    assert_eq!(
        next(&mut s, Duration::ZERO).unwrap().1,
        "PodGroup not found"
    );
    assert_eq!(
        s.cache().node("n1").unwrap().pods.len() + s.cache().node("n2").unwrap().pods.len(),
        0
    );
}

#[test]
fn pods_without_a_group_are_scheduled_as_usual() {
    let mut s = scheduler("{}");
    add(&mut s, [pod("plain").req("cpu", "1").build()]);
    assert_eq!(run(&mut s, Duration::ZERO), pairs(&[("plain", "bound")]));
}

#[test]
fn a_groups_pods_are_taken_together_whatever_came_between_them() {
    let mut s = scheduler("{}");
    group(
        &mut s,
        "metadata: {name: g, namespace: default}\nspec: {minMember: 2}",
    );
    add(
        &mut s,
        [
            member("g-b", "g", "1"),
            pod("plain").req("cpu", "1").build(),
            member("g-a", "g", "1"),
        ],
    );
    let order: Vec<String> = run(&mut s, Duration::ZERO)
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    // The group arrived first; its pods by name, then the plain pod, then the released one.
    assert_eq!(order, ["g-a", "g-b", "g-a", "plain"]);
}

#[test]
fn arguments_are_checked_as_scheduler_plugins_checks_them() {
    let parse = |args: &str| {
        let yaml = format!(
            "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled: [{{name: Coscheduling}}]
      disabled: [{{name: PrioritySort}}]
  pluginConfig:
  - name: Coscheduling
    args: {args}
"
        );
        Config::parse(&yaml, &registry())
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    assert!(parse("{permitWaitingTimeSeconds: 10, podGroupBackoffSeconds: 5}").is_ok());
    let e = parse("{podGroupRejectPercentage: 101}").unwrap_err();
    assert!(
        e.contains("podGroupRejectPercentage") && e.contains("between 0 and 100"),
        "{e}"
    );
    let e = parse("{permitWaitingTimeSeconds: -1}").unwrap_err();
    assert!(e.contains("permitWaitingTimeSeconds"), "{e}");
    let e = parse("{waitSeconds: 1}").unwrap_err();
    assert!(e.contains("waitSeconds"), "{e}");
}

#[test]
fn a_preemption_rejects_a_waiting_member_at_permit_rather_than_deleting_it() {
    let yaml = "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled: [{name: Coscheduling}]
      disabled: [{name: PrioritySort}]
";
    let config = Config::parse(yaml, &registry()).expect("config");
    let mut s = Scheduler::new(config, None);
    s.upsert_node(node("n1").capacity("4", "8Gi").build(), Duration::ZERO);
    group(
        &mut s,
        "metadata: {name: g, namespace: default}\nspec: {minMember: 2}",
    );
    // Two pods of 4 cpu on one node of 4: the first waits for the second, which does not
    // fit while the first holds the node.
    add(
        &mut s,
        [member("low-0", "g", "4"), member("low-1", "g", "4")],
    );
    assert_eq!(
        next(&mut s, Duration::ZERO).unwrap(),
        ("low-0".into(), "waiting".into())
    );
    s.upsert_pod(
        pod("urgent").req("cpu", "4").priority(100).build(),
        Duration::ZERO,
    )
    .unwrap();
    match s.schedule_next(Duration::ZERO) {
        Some(Attempt::Unschedulable { pod, diagnosis, .. }) => {
            assert_eq!(pod.name, "urgent");
            let p = diagnosis
                .post_filter
                .preemption
                .as_ref()
                .expect("a preemption");
            assert!(p.victims.is_empty(), "nothing to delete: {:?}", p.victims);
            assert_eq!(p.released.len(), 1);
            assert_eq!(p.released[0].name, "low-0");
        }
        other => panic!("expected urgent to preempt, got {other:?}"),
    }
    assert_eq!(
        next(&mut s, Duration::ZERO).unwrap(),
        ("low-0".into(), "preempted".into())
    );
    assert!(
        s.cache().node("n1").unwrap().pods.is_empty(),
        "its room is free"
    );
}
