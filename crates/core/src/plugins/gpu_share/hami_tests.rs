//! GpuShare on HAMi nodes, through the scheduler: the devices chosen and written as HAMi's
//! scheduler writes them, HAMi's limits in memory, compute and shares, its annotations, and
//! the device state read back from HAMi's allocations.

use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;
use crate::model::PodInfo;
use crate::model::gpu::GPU_RESOURCE;
use crate::model::hami;
use crate::plugins::gpu_share::hami::{LOCK_AVOIDANCE, LOCK_HELD};
use crate::scheduler::{Attempt, BindTask, Scheduler};
use crate::testing::{node, pod};

/// Two V100s of 32 GiB, ten shares each, as HAMi's device plugin registers them.
const TWO_V100: &str = r#"[{"id":"GPU-a","index":0,"count":10,"devmem":32768,"devcore":100,"type":"NVIDIA-Tesla V100-PCIE-32GB","numa":0,"health":true},{"id":"GPU-b","index":1,"count":10,"devmem":32768,"devcore":100,"type":"NVIDIA-Tesla V100-PCIE-32GB","numa":0,"health":true}]"#;

fn hami_node(name: &str) -> crate::model::NodeModel {
    node(name)
        .capacity("32", "128Gi")
        .alloc(GPU_RESOURCE, "20")
        .annotation(hami::REGISTER_ANNOTATION, TWO_V100)
        .build()
}

fn scheduler(policy: &str) -> Scheduler {
    let yaml = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
         profiles:\n- plugins:\n    multiPoint:\n      enabled: [{{name: GpuShare}}]\n  \
         pluginConfig:\n  - name: GpuShare\n    args: {{scoringStrategy: {policy}}}\n"
    );
    Scheduler::new(
        Config::parse(&yaml, &crate::plugins::registry()).unwrap(),
        None,
    )
}

fn share(name: &str, count: &str, mib: &str, cores: &str) -> crate::testing::PodBuilder {
    pod(name)
        .req("cpu", "1")
        .req(GPU_RESOURCE, count)
        .req(hami::MEMORY_RESOURCE, mib)
        .req(hami::CORES_RESOURCE, cores)
}

fn annotation(task: &BindTask, key: &str) -> Option<String> {
    task.plan
        .annotations
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
}

/// Schedules `p`; the binding task, or the unschedulable message.
fn attempt(s: &mut Scheduler, p: Arc<PodInfo>) -> Result<Box<BindTask>, String> {
    s.upsert_pod(p, Duration::ZERO).unwrap();
    match s.schedule_next(Duration::ZERO) {
        Some(Attempt::Scheduled(task, _)) => {
            s.binding_succeeded(&task, Duration::ZERO).unwrap();
            Ok(task)
        }
        Some(Attempt::Unschedulable { message, .. }) => Err(message),
        other => panic!("expected a decision, got {other:?}"),
    }
}

#[test]
fn a_share_is_written_as_hamis_scheduler_writes_it_and_packs() {
    let mut s = scheduler("BestFit");
    s.upsert_node(hami_node("n"), Duration::ZERO);
    let a = attempt(&mut s, share("a", "1", "8000", "30").build()).unwrap();
    let to_allocate = annotation(&a, hami::TO_ALLOCATE_ANNOTATION).unwrap();
    assert_eq!(to_allocate, "GPU-a,NVIDIA,8000,30:;");
    assert_eq!(
        annotation(&a, hami::ALLOCATED_ANNOTATION).as_deref(),
        Some(to_allocate.as_str())
    );
    assert_eq!(
        annotation(&a, hami::ASSIGNED_NODE_ANNOTATION).as_deref(),
        Some("n")
    );
    // BestFit packs: the next share joins the first device.
    let b = attempt(&mut s, share("b", "1", "8000", "30").build()).unwrap();
    assert_eq!(
        annotation(&b, hami::TO_ALLOCATE_ANNOTATION).as_deref(),
        Some("GPU-a,NVIDIA,8000,30:;")
    );
    let used = &s.cache().node("n").unwrap().gpu_hami_used;
    assert_eq!(
        (used[0].memory_mib, used[0].cores, used[0].shares),
        (16000, 60, 2)
    );
    // HAMi's GPU policy annotation: spread takes the emptier device.
    let c = attempt(
        &mut s,
        share("c", "1", "1000", "10")
            .annotation(hami::GPU_POLICY_ANNOTATION, "spread")
            .build(),
    )
    .unwrap();
    assert_eq!(
        annotation(&c, hami::TO_ALLOCATE_ANNOTATION).as_deref(),
        Some("GPU-b,NVIDIA,1000,10:;")
    );
}

#[test]
fn never_more_memory_compute_or_shares_than_a_device_has() {
    let mut s = scheduler("Gantry");
    s.upsert_node(hami_node("n"), Duration::ZERO);
    let mut placed = 0;
    let message = loop {
        match attempt(
            &mut s,
            share(&format!("p{placed}"), "1", "12000", "20").build(),
        ) {
            Ok(_) => placed += 1,
            Err(message) => break message,
        }
        assert!(placed <= 10, "placed more than memory allows");
    };
    // 32768 MiB holds two shares of 12000 per device.
    assert_eq!(placed, 4);
    assert!(
        message.starts_with("0/1 nodes are available: 1 node(s) didn't have enough GPUs with the requested memory, compute and share free."),
        "{message}"
    );
    let info = s.cache().node("n").unwrap();
    for (device, used) in info
        .node
        .gpu
        .hami_devices()
        .unwrap()
        .iter()
        .zip(&info.gpu_hami_used)
    {
        assert!(used.memory_mib <= device.memory_mib && used.cores <= device.cores);
        assert!(used.shares <= device.shares);
    }
    // Compute bounds as well: 60 of 100 left on each device.
    let mut s = scheduler("BestFit");
    s.upsert_node(hami_node("n"), Duration::ZERO);
    attempt(&mut s, share("x", "1", "100", "60").build()).unwrap();
    attempt(&mut s, share("y", "1", "100", "60").build()).unwrap();
    let err = attempt(&mut s, share("z", "1", "100", "60").build()).unwrap_err();
    assert!(err.contains("memory, compute and share"), "{err}");
}

#[test]
fn several_gpus_are_distinct_devices_and_whole_gpus_are_whole() {
    let mut s = scheduler("BestFit");
    s.upsert_node(hami_node("n"), Duration::ZERO);
    let two = attempt(&mut s, share("two", "2", "4000", "0").build()).unwrap();
    assert_eq!(
        annotation(&two, hami::TO_ALLOCATE_ANNOTATION).as_deref(),
        Some("GPU-a,NVIDIA,4000,0:GPU-b,NVIDIA,4000,0:;")
    );
    // nvidia.com/gpu alone: a whole GPU, all its memory and compute; none is left whole.
    let err = attempt(
        &mut s,
        pod("whole").req("cpu", "1").req(GPU_RESOURCE, "1").build(),
    )
    .unwrap_err();
    assert!(err.contains("memory, compute and share"), "{err}");
    let mut s = scheduler("BestFit");
    s.upsert_node(hami_node("n"), Duration::ZERO);
    let whole = attempt(
        &mut s,
        pod("whole").req("cpu", "1").req(GPU_RESOURCE, "1").build(),
    )
    .unwrap();
    assert_eq!(
        annotation(&whole, hami::TO_ALLOCATE_ANNOTATION).as_deref(),
        Some("GPU-a,NVIDIA,32768,100:;")
    );
}

#[test]
fn type_and_uuid_annotations_choose_the_devices() {
    let mut s = scheduler("BestFit");
    s.upsert_node(hami_node("n"), Duration::ZERO);
    let b = attempt(
        &mut s,
        share("b", "1", "1000", "10")
            .annotation(hami::USE_UUID_ANNOTATION, "GPU-b")
            .build(),
    )
    .unwrap();
    assert_eq!(
        annotation(&b, hami::TO_ALLOCATE_ANNOTATION).as_deref(),
        Some("GPU-b,NVIDIA,1000,10:;")
    );
    let err = attempt(
        &mut s,
        share("t4", "1", "1000", "10")
            .annotation(hami::USE_TYPE_ANNOTATION, "T4")
            .build(),
    )
    .unwrap_err();
    assert!(err.contains("memory, compute and share"), "{err}");
    attempt(
        &mut s,
        share("v100", "1", "1000", "10")
            .annotation(hami::USE_TYPE_ANNOTATION, "v100")
            .annotation(hami::NOUSE_TYPE_ANNOTATION, "A100")
            .build(),
    )
    .unwrap();
}

#[test]
fn hami_requests_need_hami_nodes_and_hamis_allocations_are_read_back() {
    let mut s = scheduler("BestFit");
    s.upsert_node(
        node("plain")
            .capacity("32", "128Gi")
            .alloc(GPU_RESOURCE, "2")
            .build(),
        Duration::ZERO,
    );
    let err = attempt(&mut s, share("p", "1", "1000", "10").build()).unwrap_err();
    assert!(
        err.starts_with(
            "0/1 nodes are available: 1 node(s) had no GPU registered by HAMi's device plugin."
        ),
        "{err}"
    );

    // A pod HAMi's own scheduler placed holds what its allocation says.
    let mut s = scheduler("BestFit");
    s.upsert_node(hami_node("n"), Duration::ZERO);
    s.upsert_pod(
        share("old", "1", "30000", "0")
            .annotation(hami::ALLOCATED_ANNOTATION, "GPU-a,NVIDIA,30000,0:;")
            .on("n")
            .build(),
        Duration::ZERO,
    )
    .unwrap();
    let next = attempt(&mut s, share("next", "1", "8000", "10").build()).unwrap();
    assert_eq!(
        annotation(&next, hami::TO_ALLOCATE_ANNOTATION).as_deref(),
        Some("GPU-b,NVIDIA,8000,10:;"),
        "GPU-a has 2768 MiB left"
    );
}

#[test]
fn hamis_resources_are_left_to_gpu_share_only_where_it_is_enabled() {
    // Without GpuShare, HAMi's memory is an extended resource no node offers, as in
    // kube-scheduler without HAMi's extender.
    let mut plain = Scheduler::new(
        Config::default_with(&crate::plugins::registry()).unwrap(),
        None,
    );
    plain.upsert_node(hami_node("n"), Duration::ZERO);
    let err = attempt(&mut plain, share("p", "1", "1000", "10").build()).unwrap_err();
    assert!(err.contains("Insufficient nvidia.com/gpumem"), "{err}");
    // With it, a NodeResourcesFit list of the user's keeps its entries besides HAMi's.
    let yaml = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
                profiles:\n- plugins:\n    multiPoint:\n      enabled: [{name: GpuShare}]\n  \
                pluginConfig:\n  - name: NodeResourcesFit\n    args: {ignoredResources: [example.com/dongle]}\n";
    let mut s = Scheduler::new(
        Config::parse(yaml, &crate::plugins::registry()).unwrap(),
        None,
    );
    s.upsert_node(hami_node("n"), Duration::ZERO);
    attempt(
        &mut s,
        share("p", "1", "1000", "10")
            .req("example.com/dongle", "1")
            .req(hami::PRIORITY_RESOURCE, "1")
            .build(),
    )
    .unwrap();
}

#[test]
fn a_node_whose_lock_is_held_elsewhere_is_avoided_for_a_while() {
    let mut s = scheduler("BestFit");
    s.upsert_node(hami_node("a"), Duration::ZERO);
    s.upsert_node(hami_node("b"), Duration::ZERO);
    let first = attempt(&mut s, share("first", "1", "8000", "30").build()).unwrap();
    let locked = first.plan.node.clone();
    let other = if &*locked == "a" { "b" } else { "a" };
    s.hami_lock_held(&locked, "ns/holder", Duration::ZERO);
    // BestFit would pack the next share beside the first: it goes elsewhere instead.
    let second = attempt(&mut s, share("second", "1", "8000", "30").build()).unwrap();
    assert_eq!(&*second.plan.node, other);
    // Pods without HAMi devices take no lock and do not avoid the node.
    s.upsert_pod(pod("plain").req("cpu", "1").build(), Duration::ZERO)
        .unwrap();
    assert!(matches!(
        s.schedule_next(Duration::ZERO),
        Some(Attempt::Scheduled(..))
    ));

    // With the other node avoided too, a share waits, and says why.
    s.hami_lock_held(other, "ns/holder", Duration::from_secs(1));
    let err = attempt(&mut s, share("third", "1", "8000", "30").build()).unwrap_err();
    assert!(
        err.starts_with(&format!("0/2 nodes are available: 2 {}.", LOCK_HELD)),
        "{err}"
    );
    // It is tried again when the first avoidance ends, and placed there.
    let end = LOCK_AVOIDANCE;
    assert_eq!(s.next_wakeup(), Some(end));
    match s.schedule_next(end) {
        Some(Attempt::Scheduled(task, _)) => assert_eq!(task.plan.node, locked),
        other => panic!("expected the share placed, got {other:?}"),
    }
    // Taking the lock ends the avoidance at once.
    s.hami_lock_taken(other, end);
    assert!(s.cache().node(other).unwrap().hami_lock_holder.is_none());
    assert_eq!(s.next_wakeup(), None);
}
