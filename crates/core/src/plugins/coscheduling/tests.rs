use std::time::Duration;

use super::*;
use crate::config::Config;
use crate::model::gpu::{
    GPU_ASSIGNMENT_ANNOTATION, GPU_MILLI_ANNOTATION, GPU_MODEL_ANNOTATION, GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
};
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
        Attempt::Extending(r) => (r.pod.name.clone(), "extending".to_string()),
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

// With GpuShare: gang members get their devices from GpuShare's Reserve, by its policy,
// and hold them while they wait at Permit like any other reservation. Shares of a GPU
// (`gantry.io/gpu-milli`) are GpuShare's alone to count: NodeResourcesFit sees no
// `nvidia.com/gpu` request in them.

/// Coscheduling (with `args`) and GpuShare with `policy`, without preemption; one node
/// `gpu` of `gpus` T4s.
fn gpu_scheduler(policy: &str, gpus: &str, args: &str) -> Scheduler {
    let yaml = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled: [{{name: Coscheduling}}, {{name: GpuShare}}]
      disabled: [{{name: PrioritySort}}, {{name: DefaultPreemption}}]
  pluginConfig:
  - name: Coscheduling
    args: {args}
  - name: GpuShare
    args: {{scoringStrategy: {policy}}}
"
    );
    let config = Config::parse(&yaml, &registry()).expect("config");
    let mut s = Scheduler::new(config, None);
    s.upsert_node(
        node("gpu")
            .capacity("32", "128Gi")
            .alloc(GPU_RESOURCE, gpus)
            .label(GPU_PRODUCT_LABEL, "T4")
            .build(),
        Duration::ZERO,
    );
    s
}

/// A pod asking for `milli` thousandths of one GPU, in `group` if given.
fn gpu_share(name: &str, group: Option<&str>, milli: u32) -> Arc<PodInfo> {
    let p = pod(name)
        .req("cpu", "1")
        .annotation(GPU_MILLI_ANNOTATION, &milli.to_string());
    match group {
        Some(g) => p.label(POD_GROUP_LABEL, g),
        None => p,
    }
    .build()
}

/// The devices a bound or assumed pod was given.
fn devices(p: &PodInfo) -> Option<String> {
    p.annotations
        .get(GPU_ASSIGNMENT_ANNOTATION)
        .map(str::to_string)
}

/// Runs the queue; returns each attempt in a word, with the pod and, for a binding, the
/// devices it writes (its plan's `gantry.io/gpu-assignment`, also on the assumed pod).
fn run_gpu(s: &mut Scheduler, now: Duration) -> Vec<(String, String)> {
    let mut out = Vec::new();
    while let Some(a) = s.schedule_next(now) {
        out.push(match a {
            Attempt::Scheduled(task, _) | Attempt::Permitted { task, .. } => {
                let planned = task
                    .plan
                    .annotations
                    .iter()
                    .find(|(k, _)| k == GPU_ASSIGNMENT_ANNOTATION)
                    .map(|(_, v)| v.clone());
                assert_eq!(planned, devices(&task.assumed), "{}", task.assumed.name);
                s.binding_succeeded(&task, now).expect("bound");
                let d = planned.unwrap_or_default();
                (task.assumed.name.clone(), format!("bound {d}"))
            }
            Attempt::Extending(r) => (r.pod.name.clone(), "extending".to_string()),
            Attempt::Waiting { pod, .. } => {
                let d = devices(&pod).unwrap_or_default();
                (pod.name.clone(), format!("waiting {d}"))
            }
            Attempt::Rejected { pod, status, .. } => (pod.name.clone(), status.message()),
            Attempt::Unschedulable { pod, message, .. } => (pod.name.clone(), message),
            Attempt::Failed { pod, status, .. } => (pod.name.clone(), format!("error: {status}")),
        });
    }
    out
}

/// What each GPU of node `gpu` has taken, in thousandths.
fn gpu_used(s: &Scheduler) -> Vec<u32> {
    s.cache().node("gpu").expect("node").gpu_used.clone()
}

/// A gang `g` of three on two GPUs under `policy`: 600 and 400 of a GPU, then a whole one.
fn shares_and_a_whole_gpu(policy: &str) -> Scheduler {
    let mut s = gpu_scheduler(policy, "2", "{}");
    group(
        &mut s,
        "metadata: {name: g, namespace: default}\nspec: {minMember: 3}",
    );
    let whole = pod("m2")
        .req("cpu", "1")
        .req(GPU_RESOURCE, "1")
        .label(POD_GROUP_LABEL, "g")
        .build();
    add(
        &mut s,
        [
            gpu_share("m0", Some("g"), 600),
            gpu_share("m1", Some("g"), 400),
            whole,
        ],
    );
    s
}

#[test]
fn a_gang_of_gpu_shares_that_fits_is_bound_whole_with_the_devices_of_gpu_shares_policy() {
    // 600 and 400 of a GPU, then a whole one, on two GPUs: BestFit puts the 400 beside the
    // 600 (the tightest GPU), which leaves the second GPU whole for the third member.
    let mut s = shares_and_a_whole_gpu("BestFit");
    assert_eq!(
        run_gpu(&mut s, Duration::ZERO),
        pairs(&[
            ("m0", "waiting 0:600"),
            ("m1", "waiting 0:400"),
            ("m2", "bound 1:1000"),
            ("m0", "bound 0:600"),
            ("m1", "bound 0:400"),
        ])
    );
    assert_eq!(gpu_used(&s), vec![1000, 1000]);
    for name in ["m0", "m1", "m2"] {
        let placed = s
            .cache()
            .node("gpu")
            .unwrap()
            .pods
            .iter()
            .any(|p| p.name == name && devices(p).is_some());
        assert!(placed, "{name} bound with its devices");
    }

    // Spread puts the 400 on the empty GPU instead: the whole GPU then fits nowhere, and the
    // gang, missing a third, is released whole.
    let mut s = shares_and_a_whole_gpu("Spread");
    let out = run_gpu(&mut s, Duration::ZERO);
    assert_eq!(
        &out[..2],
        pairs(&[("m0", "waiting 0:600"), ("m1", "waiting 1:400")])
    );
    assert_eq!(
        out[2].1,
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. PodGroup default/g gets rejected due to Pod m2 is unschedulable even after PostFilter"
    );
    assert_eq!(gpu_used(&s), vec![0, 0], "{out:?}");
}

#[test]
fn a_gang_of_gpu_shares_that_does_not_fit_holds_no_gpu_once_rejected() {
    // Three shares of 700 on two GPUs: the first two take one GPU each and wait; the third
    // fits on neither (GpuShare counts the waiting ones' shares), and the gang is released.
    let mut s = gpu_scheduler("BestFit", "2", "{}");
    group(
        &mut s,
        "metadata: {name: g, namespace: default}\nspec: {minMember: 3}",
    );
    add(
        &mut s,
        (0..3).map(|i| gpu_share(&format!("m{i}"), Some("g"), 700)),
    );
    assert_eq!(
        next(&mut s, Duration::ZERO).unwrap(),
        ("m0".into(), "waiting".into())
    );
    assert_eq!(
        next(&mut s, Duration::ZERO).unwrap(),
        ("m1".into(), "waiting".into())
    );
    assert_eq!(
        gpu_used(&s),
        vec![700, 700],
        "the waiting members hold their shares"
    );
    let rejected = "optimistic rejection in PostFilter";
    assert_eq!(
        run(&mut s, Duration::ZERO),
        pairs(&[
            (
                "m2",
                "0/1 nodes are available: 1 node(s) didn't have a GPU with enough free share. PodGroup default/g gets rejected due to Pod m2 is unschedulable even after PostFilter"
            ),
            ("m0", rejected),
            ("m1", rejected),
        ])
    );
    assert!(s.waiting_pods().is_empty());
    assert_eq!(gpu_used(&s), vec![0, 0], "no GPU held after the rejection");
    assert!(s.cache().node("gpu").unwrap().pods.is_empty());
    // The members wait for their retry as they came, without devices.
    let queued: Vec<_> = s
        .waiting()
        .map(|(q, _)| (q.pod.name.clone(), devices(&q.pod)))
        .collect();
    assert_eq!(queued.len(), 3, "{queued:?}");
    assert!(queued.iter().all(|(_, d)| d.is_none()), "{queued:?}");
    // Both GPUs whole again: a pod of two takes them.
    add(
        &mut s,
        [pod("pair").req("cpu", "1").req(GPU_RESOURCE, "2").build()],
    );
    assert_eq!(
        run_gpu(&mut s, Duration::ZERO),
        pairs(&[("pair", "bound 0:1000,1:1000")])
    );
}

#[test]
fn gpu_shares_of_members_waiting_at_permit_are_not_given_to_another_pod() {
    // m0 waits on GPU 0 for m1, which fits nowhere yet (no GPU of its model) and does not
    // release it (podGroupRejectPercentage 100). A pod of 600 then takes GPU 1 (without m0's
    // share held, both GPUs would be free and it would take GPU 0, the first of equals), and
    // a second finds no room until m0's wait runs out.
    let mut s = gpu_scheduler("BestFit", "2", "{podGroupRejectPercentage: 100}");
    group(
        &mut s,
        "metadata: {name: g, namespace: default}\nspec: {minMember: 2, scheduleTimeoutSeconds: 30}",
    );
    let v100 = pod("m1")
        .req("cpu", "1")
        .annotation(GPU_MILLI_ANNOTATION, "600")
        .annotation(GPU_MODEL_ANNOTATION, "V100M32")
        .label(POD_GROUP_LABEL, "g")
        .build();
    add(&mut s, [gpu_share("m0", Some("g"), 600), v100]);
    let out = run_gpu(&mut s, Duration::ZERO);
    assert_eq!(out[0], ("m0".to_string(), "waiting 0:600".to_string()));
    assert!(
        out[1].1.contains("didn't have the requested GPU model"),
        "{out:?}"
    );
    assert_eq!(gpu_used(&s), vec![600, 0]);

    add(&mut s, [gpu_share("other", None, 600)]);
    assert_eq!(
        run_gpu(&mut s, Duration::ZERO),
        pairs(&[("other", "bound 1:600")])
    );
    add(&mut s, [gpu_share("third", None, 600)]);
    assert_eq!(
        run_gpu(&mut s, Duration::ZERO),
        pairs(&[(
            "third",
            "0/1 nodes are available: 1 node(s) didn't have a GPU with enough free share."
        )])
    );
    assert_eq!(gpu_used(&s), vec![600, 600]);

    // The wait runs out: GPU 0's share is given back, and the pod left waiting takes it.
    let later = Duration::from_secs(30);
    let out = run_gpu(&mut s, later);
    assert_eq!(
        out[0],
        (
            "m0".to_string(),
            "rejected due to timeout after waiting 30s at plugin Coscheduling".to_string()
        )
    );
    assert!(
        out.contains(&("third".to_string(), "bound 0:600".to_string())),
        "{out:?}"
    );
}

/// Two jobs of three 600 shares each (no two fit one GPU) on four GPUs, their pods
/// interleaved, scheduled at time 0 with Coscheduling's `args`.
fn two_gpu_gangs(args: &str) -> (Scheduler, Vec<(String, String)>) {
    let mut s = gpu_scheduler("BestFit", "4", args);
    for g in ["a", "b"] {
        group(
            &mut s,
            &format!(
                "metadata: {{name: {g}, namespace: default}}\nspec: {{minMember: 3, scheduleTimeoutSeconds: 10}}"
            ),
        );
    }
    for i in 0..3 {
        add(
            &mut s,
            ["a", "b"].map(|g| gpu_share(&format!("{g}-{i}"), Some(g), 600)),
        );
    }
    let out = run_gpu(&mut s, Duration::ZERO);
    (s, out)
}

#[test]
fn of_two_gpu_gangs_that_cannot_both_fit_one_is_bound_and_the_other_holds_nothing() {
    // Job a is taken first and bound on three GPUs; job b's first member takes the fourth
    // and waits, its second fits nowhere, and PostFilter releases the first; backed off,
    // job b's third is refused before it takes a GPU.
    let (mut s, out) = two_gpu_gangs("{podGroupBackoffSeconds: 30}");
    let rejected =
        "PodGroup default/b gets rejected due to Pod b-1 is unschedulable even after PostFilter";
    assert_eq!(
        out,
        pairs(&[
            ("a-0", "waiting 0:600"),
            ("a-1", "waiting 1:600"),
            ("a-2", "bound 2:600"),
            ("a-0", "bound 0:600"),
            ("a-1", "bound 1:600"),
            ("b-0", "waiting 3:600"),
            (
                "b-1",
                &format!(
                    "0/1 nodes are available: 1 node(s) didn't have a GPU with enough free share. {rejected}"
                )
            ),
            ("b-0", "optimistic rejection in PostFilter"),
            (
                "b-2",
                "0/1 nodes are available: podGroup default/b failed recently. PodGroup default/b gets rejected due to Pod b-2 is unschedulable even after PostFilter"
            ),
        ])
    );
    assert!(s.waiting_pods().is_empty());
    assert_eq!(gpu_used(&s), vec![600, 600, 600, 0], "job b holds nothing");
    // The GPU job b gave back is whole.
    add(
        &mut s,
        [pod("w").req("cpu", "1").req(GPU_RESOURCE, "1").build()],
    );
    assert_eq!(
        run_gpu(&mut s, Duration::ZERO),
        pairs(&[("w", "bound 3:1000")])
    );
}

#[test]
fn a_member_of_a_gang_that_cannot_complete_holds_its_gpu_until_its_wait_runs_out() {
    // Without a backoff, job b's third member is tried after the rejection (as in
    // scheduler-plugins), takes the GPU its sibling gave back and waits: its share is held
    // like any reservation, until its wait runs out.
    let (mut s, out) = two_gpu_gangs("{}");
    assert_eq!(
        &out[5..],
        pairs(&[
            ("b-0", "waiting 3:600"),
            (
                "b-1",
                "0/1 nodes are available: 1 node(s) didn't have a GPU with enough free share. PodGroup default/b gets rejected due to Pod b-1 is unschedulable even after PostFilter"
            ),
            ("b-0", "optimistic rejection in PostFilter"),
            ("b-2", "waiting 3:600"),
        ])
    );
    assert_eq!(gpu_used(&s), vec![600, 600, 600, 600]);
    add(
        &mut s,
        [pod("w").req("cpu", "1").req(GPU_RESOURCE, "1").build()],
    );
    assert_eq!(
        run_gpu(&mut s, Duration::ZERO),
        pairs(&[(
            "w",
            "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
        )])
    );
    let out = run_gpu(&mut s, Duration::from_secs(10));
    assert_eq!(
        out[0],
        (
            "b-2".to_string(),
            "rejected due to timeout after waiting 10s at plugin Coscheduling".to_string()
        )
    );
    assert!(
        out.contains(&("w".to_string(), "bound 3:1000".to_string())),
        "{out:?}"
    );
}

#[test]
fn a_deleted_or_unreadable_group_releases_its_waiting_pods_at_once() {
    for unreadable in [false, true] {
        let mut s = scheduler("{podGroupRejectPercentage: 100}");
        group(
            &mut s,
            "metadata: {name: g, namespace: default}\nspec: {minMember: 3, scheduleTimeoutSeconds: 600}",
        );
        // The third fits nowhere: the first two wait for it (PostFilter never rejects).
        add(&mut s, [member("p0", "g", "2"), member("p1", "g", "2")]);
        add(&mut s, [member("p2", "g", "8")]);
        let out = run(&mut s, Duration::ZERO);
        assert_eq!(&out[..2], pairs(&[("p0", "waiting"), ("p1", "waiting")]));
        assert_eq!(s.waiting_pods().len(), 2);
        if unreadable {
            s.pod_group_unreadable(
                "default",
                "g",
                "spec.minMember: out of range",
                Duration::ZERO,
            );
        } else {
            s.remove_pod_group("default", "g");
        }
        let gone = "PodGroup default/g is gone";
        let released = run(&mut s, Duration::from_secs(1));
        assert_eq!(&released[..2], pairs(&[("p0", gone), ("p1", gone)]));
        assert!(s.waiting_pods().is_empty());
        assert!(s.cache().node("n1").unwrap().pods.is_empty());
        assert!(s.cache().node("n2").unwrap().pods.is_empty());
    }
}

#[test]
fn a_pod_of_an_unreadable_group_is_told_why_until_the_group_reads() {
    let mut s = scheduler("{}");
    s.pod_group_unreadable(
        "default",
        "g",
        "spec.minMember: invalid value",
        Duration::ZERO,
    );
    add(&mut s, [member("p0", "g", "1")]);
    let (_, message) = next(&mut s, Duration::ZERO).unwrap();
    assert!(
        message.contains("PodGroup default/g cannot be read: spec.minMember: invalid value"),
        "{message}"
    );
    group(
        &mut s,
        "metadata: {name: g, namespace: default}\nspec: {minMember: 1}",
    );
    assert_eq!(
        run(&mut s, Duration::from_secs(20)),
        pairs(&[("p0", "bound")])
    );
}

#[test]
fn a_pod_parked_before_its_group_turns_out_unreadable_is_told_why() {
    let mut s = scheduler("{}");
    add(&mut s, [member("p0", "g", "1")]);
    let (_, message) = next(&mut s, Duration::ZERO).unwrap();
    assert!(message.contains("PodGroup not found"), "{message}");
    s.pod_group_unreadable("default", "g", "spec: invalid type", Duration::from_secs(1));
    let (_, message) = next(&mut s, Duration::from_secs(2)).expect("tried again");
    assert!(
        message.contains("PodGroup default/g cannot be read: spec: invalid type"),
        "{message}"
    );
}
