//! GpuShare: filtering, scoring, device choice, and the whole path through the scheduler.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::cache::NodeInfo;
use crate::config::Config;
use crate::framework::{Code, NodeScore};
use crate::model::gpu::{GPU_MEMORY_LABEL, GPU_PRODUCT_LABEL, GPU_RESOURCE};
use crate::scheduler::{Attempt, Scheduler};
use crate::testing::{node, pod};

fn gpu_node(name: &str, gpus: &str, model: &str) -> crate::testing::NodeBuilder {
    node(name)
        .capacity("32", "128Gi")
        .alloc(GPU_RESOURCE, gpus)
        .label(GPU_PRODUCT_LABEL, model)
}

fn info(n: crate::testing::NodeBuilder, pods: &[Arc<PodInfo>]) -> NodeInfo {
    let mut i = NodeInfo::new(Arc::new(n.build()));
    for p in pods {
        i.add_pod(p.clone());
    }
    i
}

fn share(name: &str, milli: u32) -> crate::testing::PodBuilder {
    pod(name)
        .req("cpu", "1")
        .annotation("gantry.io/gpu-milli", &milli.to_string())
}

fn held(name: &str, milli: u32, device: u16) -> Arc<PodInfo> {
    share(name, milli)
        .annotation("gantry.io/gpu-assignment", &format!("{device}:{milli}"))
        .on("n")
        .build()
}

fn plugin(args: serde_json::Value) -> GpuShare {
    GpuShare::new(&decode_args::<GpuShareArgs>(Some(&args)).unwrap())
}

fn filter(p: &GpuShare, pod: &PodInfo, node: &NodeInfo) -> Status {
    let mut state = CycleState::new();
    let (_, s) = p.pre_filter(&mut state, pod, &Snapshot::default());
    if s.is_skip() {
        return Status::success();
    }
    assert!(s.is_success(), "{s}");
    p.filter(&state, pod, node)
}

#[test]
fn filter_reasons_and_codes() {
    let p = plugin(json!({"scoringStrategy": "BestFit"}));
    let half = share("p", 500).build();
    let cpu_node = info(node("n").capacity("8", "8Gi"), &[]);
    let s = filter(&p, &half, &cpu_node);
    assert_eq!(
        (s.code(), s.message().as_str()),
        (Code::UnschedulableAndUnresolvable, NO_GPU)
    );

    let full = info(
        gpu_node("n", "2", "T4"),
        &[held("a", 600, 0), held("b", 600, 1)],
    );
    let s = filter(&p, &half, &full);
    assert_eq!(
        (s.code(), s.message().as_str()),
        (Code::Unschedulable, INSUFFICIENT_GPU_SHARE)
    );
    assert!(
        filter(&p, &share("p", 400).build(), &full).is_success(),
        "400 fits next to 600"
    );

    let two = pod("w").req("nvidia.com/gpu", "2").build();
    let one_used = info(gpu_node("n", "2", "T4"), &[held("a", 1, 0)]);
    let s = filter(&p, &two, &one_used);
    assert_eq!(
        (s.code(), s.message().as_str()),
        (Code::Unschedulable, INSUFFICIENT_GPU)
    );
    let s = filter(&p, &pod("w").req("nvidia.com/gpu", "3").build(), &one_used);
    assert_eq!(
        s.code(),
        Code::UnschedulableAndUnresolvable,
        "more GPUs than the node has"
    );
    assert!(filter(&p, &two, &info(gpu_node("n", "2", "T4"), &[])).is_success());

    let v100 = share("p", 100).annotation("gantry.io/gpu-model", "V100M16|V100M32");
    let s = filter(
        &p,
        &v100.clone().build(),
        &info(gpu_node("n", "1", "T4"), &[]),
    );
    assert_eq!(
        (s.code(), s.message().as_str()),
        (Code::UnschedulableAndUnresolvable, MODEL_MISMATCH)
    );
    assert!(filter(&p, &v100.build(), &info(gpu_node("n", "1", "V100M32"), &[])).is_success());
}

#[test]
fn memory_shares_need_the_memory_label() {
    let p = plugin(json!({"scoringStrategy": "BestFit"}));
    let by_mem = pod("m").annotation("gantry.io/gpu-memory", "8192").build();
    let s = filter(&p, &by_mem, &info(gpu_node("n", "1", "T4"), &[]));
    assert_eq!(
        (s.code(), s.message().as_str()),
        (Code::UnschedulableAndUnresolvable, GPU_MEMORY_UNKNOWN)
    );
    let labelled = gpu_node("n", "1", "T4").label(GPU_MEMORY_LABEL, "16384");
    assert!(filter(&p, &by_mem, &info(labelled.clone(), &[])).is_success());
    // 8 GiB of 16 is 500 milli: it does not fit next to 600.
    let s = filter(&p, &by_mem, &info(labelled, &[held("a", 600, 0)]));
    assert_eq!(s.message(), INSUFFICIENT_GPU_SHARE);
}

#[test]
fn malformed_annotations_reject_the_pod_with_the_reason() {
    let p = plugin(json!({}));
    let bad = pod("p").annotation("gantry.io/gpu-milli", "lots").build();
    let mut state = CycleState::new();
    let (_, s) = p.pre_filter(&mut state, &bad, &Snapshot::default());
    assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(
        s.message(),
        "annotation gantry.io/gpu-milli: \"lots\" is not an integer in 1..=1000"
    );
}

#[test]
fn pods_without_gpu_skip_the_filter() {
    let p = plugin(json!({}));
    let mut state = CycleState::new();
    let (_, s) = p.pre_filter(
        &mut state,
        &pod("c").req("cpu", "1").build(),
        &Snapshot::default(),
    );
    assert!(s.is_skip());
}

fn reserve(p: &GpuShare, pod: &PodInfo, node: &NodeInfo) -> (Status, Option<String>) {
    let mut state = CycleState::new();
    let (_, s) = p.pre_filter(&mut state, pod, &Snapshot::default());
    assert!(s.is_success() || s.is_skip());
    let status = p.reserve(&mut state, pod, node);
    let ann = state.get::<ReservedAnnotations>().and_then(|r| {
        r.0.iter()
            .find(|(k, _)| k == GPU_ASSIGNMENT_ANNOTATION)
            .map(|(_, v)| v.clone())
    });
    (status, ann)
}

#[test]
fn device_choice_by_policy() {
    // Device 0 has 700 free, device 1 has 400, devices 2 and 3 are free.
    let n = info(
        gpu_node("n", "4", "T4"),
        &[held("a", 300, 0), held("b", 600, 1)],
    );
    let p300 = share("p", 300).build();
    let best = plugin(json!({"scoringStrategy": "BestFit"}));
    assert_eq!(
        reserve(&best, &p300, &n).1.as_deref(),
        Some("1:300"),
        "tightest"
    );
    let spread = plugin(json!({"scoringStrategy": "Spread"}));
    assert_eq!(
        reserve(&spread, &p300, &n).1.as_deref(),
        Some("2:300"),
        "emptiest, lowest index"
    );
    let whole = pod("w").req("nvidia.com/gpu", "2").build();
    assert_eq!(
        reserve(&best, &whole, &n).1.as_deref(),
        Some("2:1000,3:1000")
    );
    let cpu = pod("c").req("cpu", "1").build();
    assert_eq!(reserve(&best, &cpu, &n), (Status::success(), None));
    let too_big = share("p", 800).build();
    let (s, a) = reserve(
        &best,
        &too_big,
        &info(gpu_node("n", "1", "T4"), &[held("a", 300, 0)]),
    );
    assert_eq!((s.code(), a), (Code::Unschedulable, None));
}

#[test]
fn fgd_puts_a_share_where_fragmentation_grows_least() {
    // The typical pods: 0.5 GPU shares. A 0.5 share fills a half-used GPU exactly, which
    // leaves no piece too small for the next typical pod; on a free GPU it leaves 500, still
    // usable. Both keep fragmentation; but 0.3 on the half-used GPU strands 200.
    let p = plugin(json!({
        "scoringStrategy": "FGD",
        "typicalPods": [{"cpuMilli": 1000, "gpuCount": 1, "gpuMilli": 500, "weight": 1}]
    }));
    let n = info(gpu_node("n", "2", "T4"), &[held("a", 500, 0)]);
    assert_eq!(
        reserve(&p, &share("p", 300).build(), &n).1.as_deref(),
        Some("1:300")
    );
    assert_eq!(
        reserve(&p, &share("p", 500).build(), &n).1.as_deref(),
        Some("0:500")
    );
}

#[test]
fn fgd_scores_and_quantization() {
    assert_eq!(policy::fgd_quantize(0.0), 50);
    assert_eq!(
        policy::fgd_quantize(39.0),
        50,
        "less than one point of sigmoid"
    );
    assert_eq!(policy::fgd_quantize(41.0), 51);
    assert_eq!(policy::fgd_quantize(-1.0), 49);
    assert_eq!(policy::fgd_quantize(1e9), 100);
    assert_eq!(policy::fgd_quantize(-1e9), 0);
    let p = plugin(json!({
        "scoringStrategy": "FGD",
        "typicalPods": [{"cpuMilli": 1000, "gpuCount": 1, "gpuMilli": 1000, "weight": 1}]
    }));
    let whole = pod("w").req("cpu", "1").req("nvidia.com/gpu", "1").build();
    // On a node with one GPU half used, the free GPU is the only place the typical whole
    // pod fits: taking it strands the half GPU (fragment 500 -> 500) and removes the free
    // GPU (fragment 500 before, all 500 after): no change. On an empty 2-GPU node, nothing
    // is fragment before or after.
    let used = info(gpu_node("a", "2", "T4"), &[held("x", 500, 0)]);
    let empty = info(gpu_node("b", "2", "T4"), &[]);
    let scores = score_all(&p, &whole, &[&used, &empty]);
    assert_eq!(scores, vec![50, 50]);
    // A 0.5 share: on the used node it fills the half GPU (fragment 500 -> 0: +500 decrease);
    // on the empty node it breaks a GPU (fragment 0 -> 500).
    let half = share("h", 500).build();
    assert_eq!(
        score_all(&p, &half, &[&used, &empty]),
        vec![policy::fgd_quantize(500.0), policy::fgd_quantize(-500.0)]
    );
}

fn score_all(p: &GpuShare, pod: &PodInfo, nodes: &[&NodeInfo]) -> Vec<i64> {
    let mut state = CycleState::new();
    let _ = p.pre_filter(&mut state, pod, &Snapshot::default());
    assert!(
        p.pre_score(&mut state, pod, &Snapshot::default(), nodes)
            .is_success()
    );
    let mut scores: Vec<NodeScore> = nodes
        .iter()
        .enumerate()
        .map(|(index, n)| NodeScore {
            index,
            score: p.score(&state, pod, n).unwrap(),
        })
        .collect();
    assert!(p.normalize(&state, pod, &mut scores).is_success());
    scores.iter().map(|s| s.score).collect()
}

#[test]
fn gantry_keeps_cpu_for_the_gpus_that_need_it() {
    // Typical pods: one whole GPU with 8 cpus. Node a has 8 free GPUs but only 16 cpus;
    // node b has no GPU free and plenty of cpu. For FGD an 8-cpu pod without GPU changes
    // nothing on either node (the typical pod still fits on a); gantry sees that a's cpu
    // already feeds only 2 of its 8 GPUs and that the pod would strand one more.
    let typical = json!([{"cpuMilli": 8000, "gpuCount": 1, "gpuMilli": 1000, "weight": 1}]);
    let fgd = plugin(json!({"scoringStrategy": "FGD", "typicalPods": typical}));
    let gantry = plugin(json!({"scoringStrategy": "Gantry", "typicalPods": typical}));
    let a = info(
        node("a").capacity("16", "64Gi").alloc(GPU_RESOURCE, "8"),
        &[],
    );
    let full: Vec<Arc<PodInfo>> = (0..8)
        .map(|d| {
            pod(&format!("w{d}"))
                .req("nvidia.com/gpu", "1")
                .annotation("gantry.io/gpu-assignment", &format!("{d}:1000"))
                .on("b")
                .build()
        })
        .collect();
    let b = info(
        node("b").capacity("64", "64Gi").alloc(GPU_RESOURCE, "8"),
        &full,
    );
    let cpu_pod = pod("c").req("cpu", "8").build();
    assert_eq!(score_all(&fgd, &cpu_pod, &[&a, &b]), vec![50, 50]);
    // On a: stranded 8000 - 16000 * 1/8 = 6000 before, 7000 after: 1000 more waste.
    assert_eq!(
        score_all(&gantry, &cpu_pod, &[&a, &b]),
        vec![policy::fgd_quantize(-1000.0), 50]
    );
    assert!(gantry.fixed_tie_order());
}

#[test]
fn gantry_takes_the_tightest_of_equally_good_gpus() {
    // No typical shape cares about pieces under 600: a 300 share on the 700 or the 1000 GPU
    // leaves the same fragmentation; gantry takes the tighter, FGD the first.
    let typical = json!([{"cpuMilli": 0, "gpuCount": 1, "gpuMilli": 300, "weight": 1}]);
    let n = info(gpu_node("n", "2", "T4"), &[held("a", 300, 1)]);
    let gantry = plugin(json!({"scoringStrategy": "Gantry", "typicalPods": typical}));
    assert_eq!(
        reserve(&gantry, &share("p", 300).build(), &n).1.as_deref(),
        Some("1:300")
    );
}

#[test]
fn best_fit_prefers_the_fullest_node_and_rescales() {
    let p = plugin(json!({"scoringStrategy": "BestFit"}));
    let whole = pod("w").req("cpu", "1").req("nvidia.com/gpu", "1").build();
    let busy = info(gpu_node("a", "2", "T4"), &[held("x", 1000, 0)]);
    let idle = info(gpu_node("b", "2", "T4"), &[]);
    let scores = score_all(&p, &whole, &[&busy, &idle]);
    assert_eq!(scores, vec![100, 0]);
    let mut equal = vec![
        NodeScore { index: 0, score: 7 },
        NodeScore { index: 1, score: 7 },
    ];
    policy::min_max_normalize(&mut equal);
    assert_eq!(
        equal.iter().map(|s| s.score).collect::<Vec<_>>(),
        vec![0, 0]
    );
    let mut spread = vec![
        NodeScore {
            index: 0,
            score: 10,
        },
        NodeScore {
            index: 1,
            score: 13,
        },
        NodeScore {
            index: 2,
            score: 12,
        },
    ];
    policy::min_max_normalize(&mut spread);
    assert_eq!(
        spread.iter().map(|s| s.score).collect::<Vec<_>>(),
        vec![0, 100, 66]
    );
}

#[test]
fn packing_tiers_and_spread() {
    let p300 = share("p", 300).build();
    let whole = pod("w").req("nvidia.com/gpu", "1").build();
    let empty = info(gpu_node("a", "8", "G2"), &[]);
    let shared = info(gpu_node("b", "8", "G2"), &[held("x", 600, 0)]);
    let take = |p: &PodInfo, n: &NodeInfo| policy::Take::on(p.gpu.request, n).unwrap();
    // An empty node: 33 - 8 free GPUs.
    assert_eq!(policy::gpu_packing_score(&empty, take(&p300, &empty)), 25);
    // A share on the used GPU (400 free): 100 - 40/10.
    assert_eq!(policy::gpu_packing_score(&shared, take(&p300, &shared)), 96);
    // A whole GPU on a used node: 50 - 1.
    assert_eq!(
        policy::gpu_packing_score(&shared, take(&whole, &shared)),
        49
    );
    assert_eq!(policy::gpu_packing_score(&shared, policy::Take::Nothing), 0);
    // Spread: share of the GPU milli left free.
    assert_eq!(
        policy::spread_score(&shared, take(&p300, &shared)),
        (8000 - 600 - 300) * 100 / 8000
    );
    assert_eq!(policy::spread_score(&empty, policy::Take::Nothing), 0);
}

#[test]
fn args_validation() {
    let err = |v: serde_json::Value| {
        decode_args::<GpuShareArgs>(Some(&v))
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        err(json!({"learningWindow": 0})),
        "learningWindow: Invalid value: 0: must be at least 1"
    );
    assert_eq!(
        err(json!({"coveragePercent": 101})),
        "coveragePercent: Invalid value: 101: not in valid range [1, 100]"
    );
    assert!(
        err(json!({"scoringStrategy": "Fastest"}))
            .starts_with("scoringStrategy: unknown variant `Fastest`")
    );
    assert_eq!(
        err(json!({"typicalPods": [{"weight": 0}]})),
        "typicalPods[0].weight: Invalid value: 0: must be positive"
    );
    assert_eq!(
        err(json!({"typicalPods": [{"weight": 1, "gpuMilli": 1001, "gpuCount": 1}]})),
        "typicalPods[0].gpuMilli: Invalid value: 1001: not in valid range [0, 1000]"
    );
    assert_eq!(
        err(json!({"typicalPods": [{"weight": 1, "gpuCount": 1}]})),
        "typicalPods[0].gpuCount: Invalid value: gpuCount and one of gpuMilli or gpuMemoryMib go together"
    );
    assert_eq!(
        err(json!({"typicalPods": [{"weight": 1, "gpuCount": 2, "gpuMilli": 500}]})),
        "typicalPods[0].gpuMilli: Invalid value: only a single GPU can be shared"
    );
    assert_eq!(
        err(
            json!({"typicalPods": [{"weight": 1, "gpuCount": 1, "gpuMilli": 5, "gpuMemoryMib": 5}]})
        ),
        "typicalPods[0].gpuMemoryMib: Invalid value: gpuMilli and gpuMemoryMib cannot both be set"
    );
    assert!(err(json!({"typicalPods": [{"weight": 1, "cpu": 5}]})).contains("unknown field `cpu`"));
    assert_eq!(
        err(json!({"typicalPods": [{"weight": 1e308}, {"weight": 1e308}]})),
        "typicalPods: Invalid value: the weights' sum is not a finite number"
    );
    assert_eq!(
        err(json!({"typicalPods": [{"weight": 1, "gpuCount": 1, "gpuMemoryMib": 4294967296u64}]})),
        "typicalPods[0].gpuMemoryMib: Invalid value: 4294967296: more memory than any GPU has (at most 4294967295)"
    );
    assert_eq!(
        decode_args::<GpuShareArgs>(None).unwrap(),
        GpuShareArgs::default()
    );
}

fn gpu_scheduler(policy: &str) -> Scheduler {
    let yaml = format!(
        r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled: [{{name: GpuShare}}]
  pluginConfig:
  - name: GpuShare
    args: {{scoringStrategy: {policy}}}
"#
    );
    let config = Config::parse(&yaml, &crate::plugins::registry()).unwrap();
    Scheduler::new(config, None)
}

fn schedule(s: &mut Scheduler, p: Arc<PodInfo>) -> Box<crate::scheduler::BindTask> {
    s.upsert_pod(p, Duration::ZERO).unwrap();
    match s.schedule_next(Duration::ZERO) {
        Some(Attempt::Scheduled(task, _)) => {
            s.binding_succeeded(&task, Duration::ZERO).unwrap();
            task
        }
        other => panic!("expected a placement, got {other:?}"),
    }
}

#[test]
fn two_half_gpu_pods_share_one_gpu_and_a_restart_sees_it() {
    let mut s = gpu_scheduler("BestFit");
    s.upsert_node(gpu_node("n", "2", "T4").build(), Duration::ZERO);
    let a = schedule(&mut s, share("a", 500).build());
    let b = schedule(&mut s, share("b", 500).build());
    let assignment = |t: &crate::scheduler::BindTask| {
        t.plan
            .annotations
            .iter()
            .find(|(k, _)| k == GPU_ASSIGNMENT_ANNOTATION)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(assignment(&a).as_deref(), Some("0:500"));
    assert_eq!(
        assignment(&b).as_deref(),
        Some("0:500"),
        "the second half joins the first"
    );
    assert_eq!(
        a.assumed.annotations.get(GPU_ASSIGNMENT_ANNOTATION),
        Some("0:500"),
        "the assumed pod carries its devices"
    );
    assert_eq!(s.cache().node("n").unwrap().gpu_used, vec![1000, 0]);

    // A restarted scheduler reads the bound pods, annotations included.
    let mut restarted = gpu_scheduler("BestFit");
    restarted.upsert_node(gpu_node("n", "2", "T4").build(), Duration::ZERO);
    for (name, task) in [("a", &a), ("b", &b)] {
        let mut p = share(name, 500).on("n");
        for (k, v) in &task.plan.annotations {
            p = p.annotation(k, v);
        }
        restarted.upsert_pod(p.build(), Duration::ZERO).unwrap();
    }
    assert_eq!(restarted.cache().node("n").unwrap().gpu_used, vec![1000, 0]);
    let whole = schedule(&mut restarted, pod("w").req("nvidia.com/gpu", "1").build());
    assert_eq!(assignment(&whole).as_deref(), Some("1:1000"));
    let full = share("c", 100).build();
    restarted.upsert_pod(full, Duration::ZERO).unwrap();
    match restarted.schedule_next(Duration::ZERO) {
        Some(Attempt::Unschedulable { message, .. }) => assert_eq!(
            message,
            "0/1 nodes are available: 1 node(s) didn't have a GPU with enough free share. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
        ),
        other => panic!("expected no room, got {other:?}"),
    }
}

#[test]
fn a_failed_binding_frees_the_devices() {
    let mut s = gpu_scheduler("BestFit");
    s.upsert_node(gpu_node("n", "1", "T4").build(), Duration::ZERO);
    s.upsert_pod(share("a", 700).build(), Duration::ZERO)
        .unwrap();
    let Some(Attempt::Scheduled(task, _)) = s.schedule_next(Duration::ZERO) else {
        panic!("expected a placement");
    };
    assert_eq!(s.cache().node("n").unwrap().gpu_used, vec![700]);
    s.binding_failed(*task, Duration::ZERO);
    assert_eq!(s.cache().node("n").unwrap().gpu_used, vec![0]);
}

#[test]
fn packing_policies_break_ties_in_one_node_order() {
    assert!(plugin(json!({"scoringStrategy": "FGD"})).fixed_tie_order());
    assert!(plugin(json!({"scoringStrategy": "BestFit"})).fixed_tie_order());
    assert!(!plugin(json!({"scoringStrategy": "Spread"})).fixed_tie_order());
}
