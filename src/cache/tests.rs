use super::*;
use crate::testing::{node, pod};

#[test]
fn assume_confirm_forget() {
    let mut cache = Cache::new();
    cache.upsert_node(node("n1").capacity("4", "8Gi").build());
    let p = pod("p").req("cpu", "1").on("n1").build();
    cache.assume_pod(p.clone()).unwrap();
    assert_eq!(cache.node("n1").unwrap().requested.milli_cpu, 1000);
    assert!(matches!(
        cache.assume_pod(p.clone()),
        Err(CacheError::AlreadyPlaced(..))
    ));
    cache.forget_pod("default", "p").unwrap();
    assert_eq!(cache.node("n1").unwrap().requested.milli_cpu, 0);
    cache.assume_pod(p.clone()).unwrap();
    cache.add_bound_pod(p).unwrap();
    assert_eq!(
        cache.pod_placement("default", "p").map(|(_, a)| a),
        Some(false)
    );
    assert!(
        cache.forget_pod("default", "p").is_err(),
        "confirmed pods are not forgotten"
    );
    assert_eq!(cache.node("n1").unwrap().pods.len(), 1);
}

#[test]
fn snapshot_is_incremental_and_isolated() {
    let mut cache = Cache::new();
    for i in 0..3 {
        cache.upsert_node(node(&format!("n{i}")).capacity("4", "8Gi").build());
    }
    let mut snap = Snapshot::default();
    cache.update_snapshot(&mut snap);
    assert_eq!(snap.len(), 3);
    let before = snap.clone();
    cache
        .assume_pod(pod("p").req("cpu", "1").on("n1").build())
        .unwrap();
    assert_eq!(before.get("n1").unwrap().requested.milli_cpu, 0);
    cache.update_snapshot(&mut snap);
    assert_eq!(snap.get("n1").unwrap().requested.milli_cpu, 1000);
    assert!(Arc::ptr_eq(
        snap.get("n0").unwrap(),
        before.get("n0").unwrap()
    ));
}

#[test]
fn pods_on_unknown_nodes_wait_for_them() {
    let mut cache = Cache::new();
    cache
        .add_bound_pod(pod("p").req("cpu", "1").on("late").build())
        .unwrap();
    let mut snap = Snapshot::default();
    cache.update_snapshot(&mut snap);
    assert!(snap.is_empty());
    cache.upsert_node(node("late").capacity("4", "8Gi").build());
    cache.update_snapshot(&mut snap);
    assert_eq!(snap.get("late").unwrap().requested.milli_cpu, 1000);
    cache.remove_node("late");
    cache.update_snapshot(&mut snap);
    assert!(snap.is_empty());
    assert!(cache.remove_pod("default", "p"));
}

#[test]
fn zones_are_interleaved() {
    let mut cache = Cache::new();
    for (n, z) in [
        ("a1", "a"),
        ("a2", "a"),
        ("b1", "b"),
        ("a3", "a"),
        ("c1", "c"),
    ] {
        cache.upsert_node(node(n).label(ZONE_LABEL, z).build());
    }
    let mut snap = Snapshot::default();
    cache.update_snapshot(&mut snap);
    let names: Vec<&str> = snap.nodes().iter().map(|n| &*n.node.name).collect();
    assert_eq!(names, ["a1", "b1", "c1", "a2", "a3"]);
}

#[test]
fn image_counts() {
    let mut cache = Cache::new();
    cache.upsert_node(node("n1").image("nginx", 100).build());
    cache.upsert_node(node("n2").image("nginx:latest", 100).build());
    let mut snap = Snapshot::default();
    cache.update_snapshot(&mut snap);
    assert_eq!(snap.nodes_with_image("nginx:latest"), 2);
    cache.remove_node("n1");
    cache.update_snapshot(&mut snap);
    assert_eq!(snap.nodes_with_image("nginx:latest"), 1);
}
