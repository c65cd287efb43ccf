use super::*;
use crate::testing::{node, pod};
use std::time::Duration;

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
fn pod_counts_follow_assumptions_confirmations_and_removals() {
    let mut cache = Cache::new();
    cache.upsert_node(node("n1").capacity("4", "8Gi").build());
    let counts = |c: &Cache| (c.pod_count(), c.assumed_pod_count());
    cache.assume_pod(pod("a").on("n1").build()).unwrap();
    cache.assume_pod(pod("b").on("n1").build()).unwrap();
    cache.add_bound_pod(pod("c").on("n1").build()).unwrap();
    assert_eq!(counts(&cache), (3, 2));
    cache.add_bound_pod(pod("a").on("n1").build()).unwrap();
    assert_eq!(counts(&cache), (3, 1));
    cache.forget_pod("default", "b").unwrap();
    assert_eq!(counts(&cache), (2, 0));
    cache.remove_pod("default", "c");
    cache.remove_pod("default", "a");
    assert_eq!(counts(&cache), (0, 0));
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
fn the_nodes_with_affinity_pods_follow_pods_coming_and_going() {
    let mut cache = Cache::new();
    for i in 0..6 {
        cache.upsert_node(node(&format!("n{i}")).label("app", "x").build());
    }
    let anti = |name: &str, on: &str| {
        pod(name)
            .on(on)
            .spec_yaml(
                "affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: \
                 [{labelSelector: {matchLabels: {app: x}}, topologyKey: kubernetes.io/hostname}]}}",
            )
            .build()
    };
    let preferring = |name: &str, on: &str| {
        pod(name)
            .on(on)
            .spec_yaml(
                "affinity: {podAffinity: {preferredDuringSchedulingIgnoredDuringExecution: \
                 [{weight: 1, podAffinityTerm: {labelSelector: {matchLabels: {app: x}}, \
                 topologyKey: kubernetes.io/hostname}}]}}",
            )
            .build()
    };
    let mut snap = Snapshot::default();
    cache.update_snapshot(&mut snap);
    let lists = |s: &Snapshot| {
        let names = |it: &mut dyn Iterator<Item = &Arc<NodeInfo>>| -> Vec<String> {
            it.map(|n| n.node.name.to_string()).collect()
        };
        (
            names(&mut s.nodes_with_affinity_pods()),
            names(&mut s.nodes_with_required_anti_affinity_pods()),
        )
    };
    let steps: [&dyn Fn(&mut Cache); 6] = [
        &|c| c.assume_pod(anti("a", "n4")).unwrap(),
        &|c| c.assume_pod(preferring("b", "n1")).unwrap(),
        &|c| c.assume_pod(anti("c", "n1")).unwrap(),
        &|c| c.assume_pod(pod("plain").on("n2").build()).unwrap(),
        &|c| c.forget_pod("default", "a").unwrap(),
        &|c| c.forget_pod("default", "c").unwrap(),
    ];
    for step in steps {
        step(&mut cache);
        cache.update_snapshot(&mut snap);
        let mut fresh = Snapshot::default();
        cache.clone().update_snapshot(&mut fresh);
        assert_eq!(lists(&snap), lists(&fresh));
    }
    assert_eq!(lists(&snap), (vec!["n1".to_string()], Vec::new()));
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
    assert!(cache.remove_pod("default", "p").is_some());
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

fn sample(cpu: f64, taken_at: u64) -> LoadSample {
    LoadSample {
        cpu,
        memory: 0.1,
        taken_at: Duration::from_secs(taken_at),
        reflects_placements_before: Duration::from_secs(taken_at),
        max_age: None,
    }
}

fn recent(cache: &Cache, node: &str) -> Vec<String> {
    cache
        .node(node)
        .and_then(|n| n.load.as_ref())
        .map(|l| l.recent.iter().map(|r| r.pod.name.clone()).collect())
        .unwrap_or_default()
}

#[test]
fn node_load_keeps_the_newest_sample_of_known_nodes() {
    let mut cache = Cache::new();
    assert!(!cache.set_node_load("n1", sample(0.5, 1)), "unknown node");
    cache.upsert_node(node("n1").capacity("4", "8Gi").build());
    assert!(cache.set_node_load("n1", sample(0.5, 10)));
    assert!(!cache.set_node_load("n1", sample(0.9, 9)), "older sample");
    assert!(
        cache.set_node_load("n1", sample(0.7, 10)),
        "same time replaces"
    );
    // A node update keeps the load.
    cache.upsert_node(node("n1").capacity("8", "8Gi").build());
    let load = cache.node("n1").unwrap().load.as_ref().unwrap();
    assert_eq!(load.sample.cpu, 0.7);
    // Snapshots see it, and older snapshots keep what they saw.
    let mut snap = Snapshot::default();
    cache.update_snapshot(&mut snap);
    let before = snap.get("n1").unwrap().clone();
    cache.set_node_load("n1", sample(0.2, 11));
    cache.update_snapshot(&mut snap);
    assert_eq!(before.load.as_ref().unwrap().sample.cpu, 0.7);
    assert_eq!(
        snap.get("n1").unwrap().load.as_ref().unwrap().sample.cpu,
        0.2
    );
}

#[test]
fn recent_placements_follow_the_pods_life() {
    let mut cache = Cache::new();
    cache.upsert_node(node("n1").capacity("4", "8Gi").build());
    cache.upsert_node(node("n2").capacity("4", "8Gi").build());
    // No load data: nothing is noted.
    let early = pod("early").on("n2").build();
    cache.assume_pod(early.clone()).unwrap();
    cache.note_placement(&early, Duration::from_secs(1));
    assert!(cache.node("n2").unwrap().load.is_none());

    cache.set_node_load("n1", sample(0.1, 10));
    for name in ["a", "b", "c"] {
        let p = pod(name).on("n1").build();
        cache.assume_pod(p.clone()).unwrap();
        cache.note_placement(&p, Duration::from_secs(11));
    }
    assert_eq!(recent(&cache, "n1"), ["a", "b", "c"]);
    // Confirmed where it was assumed: still recent (the sample has not seen it).
    cache.add_bound_pod(pod("a").on("n1").build()).unwrap();
    // A failed binding and a deletion forget it.
    cache.forget_pod("default", "b").unwrap();
    cache.remove_pod("default", "c");
    assert_eq!(recent(&cache, "n1"), ["a"]);
    // Bound elsewhere than assumed: not recent on the first node any more.
    let d = pod("d").on("n1").build();
    cache.assume_pod(d.clone()).unwrap();
    cache.note_placement(&d, Duration::from_secs(12));
    cache.add_bound_pod(pod("d").on("n2").build()).unwrap();
    assert_eq!(recent(&cache, "n1"), ["a"]);
    // A sample reflecting placements before 12 s drops a (placed at 11 s).
    cache.set_node_load("n1", sample(0.3, 12));
    assert!(recent(&cache, "n1").is_empty());
}

fn budget(namespace: &str, name: &str) -> DisruptionBudgetModel {
    DisruptionBudgetModel {
        namespace: namespace.to_string(),
        name: name.to_string(),
        selector: LabelSelector::from_map(&std::collections::BTreeMap::from([(
            "app".to_string(),
            name.to_string(),
        )])),
        disruptions_allowed: 1,
        disrupted_pods: Default::default(),
    }
}

#[test]
fn disruption_budgets_are_listed_by_namespace_and_name_and_shared_by_snapshots() {
    let mut cache = Cache::tracking(TrackedSet::of(&[Tracked::DisruptionBudgets]));
    for (ns, name) in [("shop", "web"), ("batch", "jobs"), ("shop", "db")] {
        cache.upsert_disruption_budget(budget(ns, name));
    }
    let mut snap = Snapshot::default();
    cache.update_snapshot(&mut snap);
    let keys = |s: &Snapshot| {
        s.disruption_budgets()
            .map(|b| format!("{}/{}", b.namespace, b.name))
            .collect::<Vec<_>>()
    };
    assert_eq!(keys(&snap), ["batch/jobs", "shop/db", "shop/web"]);
    let before = snap.clone();
    let mut changed = budget("shop", "web");
    changed.disruptions_allowed = 0;
    cache.upsert_disruption_budget(changed);
    cache.remove_disruption_budget("batch", "jobs");
    cache.remove_disruption_budget("batch", "gone");
    cache.update_snapshot(&mut snap);
    assert_eq!(keys(&snap), ["shop/db", "shop/web"]);
    let allowed = |s: &Snapshot| {
        s.disruption_budgets()
            .map(|b| b.disruptions_allowed)
            .collect::<Vec<_>>()
    };
    assert_eq!(allowed(&snap), [1, 0]);
    assert_eq!(
        keys(&before),
        ["batch/jobs", "shop/db", "shop/web"],
        "an older snapshot keeps its budgets"
    );
    assert_eq!(allowed(&before), [1, 1, 1]);
    let db = |s: &Snapshot| {
        s.disruption_budgets()
            .find(|b| b.name == "db")
            .cloned()
            .unwrap()
    };
    assert!(
        Arc::ptr_eq(&db(&before), &db(&snap)),
        "an unchanged budget is shared"
    );
}

#[test]
fn a_cache_keeps_only_the_parts_it_tracks() {
    let mut all = Cache::new();
    let mut bare = Cache::tracking(TrackedSet::NONE);
    for cache in [&mut all, &mut bare] {
        cache.upsert_node(node("n1").capacity("4", "8Gi").image("web:1", 1).build());
        cache
            .assume_pod(
                pod("p")
                    .label("app", "web")
                    .req("cpu", "1")
                    .on("n1")
                    .build(),
            )
            .unwrap();
        cache.set_namespace("shop", Labels::default());
        cache.set_service("default", "web", [("app", "web")].into_iter().collect());
        cache.upsert_disruption_budget(budget("default", "web"));
    }
    let p = pod("q").label("app", "web").build();
    let (mut full, mut lean) = (Snapshot::default(), Snapshot::default());
    all.update_snapshot(&mut full);
    bare.update_snapshot(&mut lean);
    // Nodes and pods are kept either way.
    assert_eq!(lean.get("n1").unwrap().requested.milli_cpu, 1000);
    assert_eq!(lean.get("n1").unwrap().pods.len(), 1);
    let mut web = LabelSelector::everything();
    web.require_equal("app", "web");
    let count = |s: &Snapshot| {
        let mut n = 0;
        assert!(
            s.pods
                .for_each_match(&web, crate::cache::Namespaces::Every, |_| n += 1)
        );
        n
    };
    assert_eq!(count(&full), 1);
    assert_eq!(count(&lean), 0);
    assert_eq!(full.image_nodes.len(), 1);
    assert!(lean.image_nodes.is_empty());
    assert_eq!(full.namespaces.len(), 1);
    assert!(lean.namespaces.is_empty());
    assert!(full.workloads.default_selector(&p).is_some());
    assert!(lean.workloads.default_selector(&p).is_none());
    let sample = crate::model::load::LoadSample {
        cpu: 0.5,
        memory: 0.5,
        taken_at: Duration::ZERO,
        reflects_placements_before: Duration::ZERO,
        max_age: None,
    };
    assert!(all.set_node_load("n1", sample));
    assert!(!bare.set_node_load("n1", sample));
    assert_eq!(full.disruption_budgets.len(), 1);
    assert!(lean.disruption_budgets.is_empty());
    assert!(lean.untracked == TrackedSet::all() && full.untracked == TrackedSet::NONE);
}

#[test]
fn volume_assumptions_hold_until_the_api_reports_a_newer_version() {
    use crate::model::volume::{ClaimModel, VolumeModel};
    let claim: ClaimModel = ClaimModel::from_api(
        &serde_yaml::from_str("{metadata: {name: c, namespace: d, uid: u, resourceVersion: '1'}}")
            .unwrap(),
    )
    .unwrap();
    let pv = |rv: &str| {
        VolumeModel::from_api(
            &serde_yaml::from_str(&format!(
                "{{metadata: {{name: pv, resourceVersion: '{rv}'}}, spec: {{storageClassName: local}}}}"
            ))
            .unwrap(),
        )
        .unwrap()
    };
    let mut cache = Cache::new();
    cache.upsert_claim(claim);
    cache.upsert_volume(pv("1"));
    let bind = [VolumeDecision::Bind {
        claim: ("d".into(), "c".into()),
        claim_uid: "u".into(),
        volume: "pv".into(),
        volume_version: "1".into(),
    }];
    cache.assume_volumes(&bind).unwrap();
    let reserved = |c: &Cache| c.storage().volume("pv").unwrap().claim_ref.is_some();
    assert!(reserved(&cache));
    assert_eq!(cache.storage().volumes_of_class("local").count(), 1);
    // The same version again (a relist) keeps the assumption; a newer one replaces it.
    cache.upsert_volume(pv("1"));
    assert!(reserved(&cache));
    cache.upsert_volume(pv("2"));
    assert!(!reserved(&cache));
    cache.assume_volumes(&bind).unwrap();
    cache.forget_volumes(&bind);
    assert!(!reserved(&cache));
    // A pod's claims count as in use while it is placed.
    cache.upsert_node(node("n1").capacity("4", "8Gi").build());
    let mut p = pod("p").on("n1").build();
    Arc::make_mut(&mut p)
        .volumes
        .claims
        .push(crate::model::volume::ClaimUse {
            name: "c".into(),
            ephemeral: false,
        });
    cache.assume_pod(p).unwrap();
    assert!(cache.storage().claim_in_use("default", "c"));
    cache.forget_pod("default", "p").unwrap();
    assert!(!cache.storage().claim_in_use("default", "c"));
}

#[test]
fn a_clone_is_independent_and_refreshes_a_snapshot_whole() {
    let mut cache = Cache::new();
    for i in 0..3 {
        cache.upsert_node(node(&format!("n{i}")).capacity("4", "8Gi").build());
    }
    let mut snap = Snapshot::default();
    cache.update_snapshot(&mut snap);
    cache
        .assume_pod(pod("p").req("cpu", "1").on("n1").build())
        .unwrap();
    // The change is recorded for the original's snapshot; the clone does not carry the
    // record but rebuilds whatever snapshot it refreshes.
    let mut copy = cache.clone();
    copy.assume_pod(pod("q").req("cpu", "2").on("n2").build())
        .unwrap();
    let mut copy_snap = snap.clone();
    copy.update_snapshot(&mut copy_snap);
    let requested = |s: &Snapshot, n: &str| s.get(n).unwrap().requested.milli_cpu;
    assert_eq!(
        (requested(&copy_snap, "n1"), requested(&copy_snap, "n2")),
        (1000, 2000)
    );
    cache.update_snapshot(&mut snap);
    assert_eq!((requested(&snap, "n1"), requested(&snap, "n2")), (1000, 0));
    assert_eq!(
        (cache.pod_count(), copy.pod_count()),
        (1, 2),
        "the clone's pods are its own"
    );
    assert!(cache.pod_placement("default", "q").is_none());
}

#[test]
fn topology_values_list_the_positions_of_each_value() {
    let mut cache = Cache::new();
    for (name, zone) in [
        ("a", Some("z1")),
        ("b", None),
        ("c", Some("z2")),
        ("d", Some("z1")),
    ] {
        let n = node(name);
        cache.upsert_node(match zone {
            Some(z) => n.label("zone", z).build(),
            None => n.build(),
        });
    }
    let mut snapshot = Snapshot::default();
    cache.update_snapshot(&mut snapshot);
    let values = snapshot.topology_values("zone");
    let positions = |zone: &str| -> Vec<String> {
        let id = values.id_of(zone).expect("a zone some node has");
        values
            .positions_of(id)
            .iter()
            .map(|&p| snapshot.nodes()[p as usize].node.name.to_string())
            .collect()
    };
    let mut z1 = positions("z1");
    z1.sort();
    assert_eq!(z1, ["a", "d"]);
    assert_eq!(positions("z2"), ["c"]);
    assert!(values.positions_of(TopologyValues::NONE).is_empty());
    assert!(values.positions_of(7).is_empty());
    let listed: usize = (0..values.values.len() as u32)
        .map(|id| values.positions_of(id).len())
        .sum();
    assert_eq!(listed, 3, "a node without the key is listed under no value");
}

#[test]
fn volume_counts_and_attach_limits_follow_pods_and_csi_nodes() {
    use crate::model::volume::CsiNodeModel;
    let csi_node = |name: &str, drivers: &[(&str, Option<u32>)]| CsiNodeModel {
        name: name.to_string(),
        drivers: drivers.iter().map(|(d, c)| (d.to_string(), *c)).collect(),
        migrated: Default::default(),
    };
    let mut cache = Cache::new();
    cache.upsert_node(node("a").build());
    cache.upsert_node(node("b").build());
    cache.upsert_csi_node(csi_node(
        "a",
        &[("x", Some(5)), ("y", Some(3)), ("z", None)],
    ));
    cache.upsert_csi_node(csi_node("b", &[("x", None)]));
    let mut snapshot = Snapshot::default();
    cache.update_snapshot(&mut snapshot);
    let (a, b) = (
        snapshot.position("a").unwrap(),
        snapshot.position("b").unwrap(),
    );
    let limits = snapshot.attach_limits();
    assert_eq!((limits[a], limits[b]), (3, u32::MAX));
    assert!(
        Arc::ptr_eq(&limits, &snapshot.attach_limits()),
        "computed once while the CSINodes stay"
    );

    let claims = |name: &str, volumes: &str| {
        pod(name)
            .spec_yaml(&format!("volumes: [{volumes}]"))
            .on("a")
            .build()
    };
    let two = "{name: c, persistentVolumeClaim: {claimName: c}}, {name: d, persistentVolumeClaim: {claimName: d}}";
    cache.add_bound_pod(claims("p", two)).unwrap();
    cache
        .add_bound_pod(claims(
            "q",
            "{name: s, ephemeral: {volumeClaimTemplate: {spec: {}}}}",
        ))
        .unwrap();
    cache.update_snapshot(&mut snapshot);
    let info = cache.node("a").unwrap();
    assert_eq!(
        (info.volumes_named, info.pods_with_ephemeral_volumes),
        (3, 1)
    );
    assert_eq!(
        snapshot.rows()[a].volumes_named,
        u32::MAX,
        "a pod's ephemeral volume leaves the count to the full one"
    );
    cache.remove_pod("default", "q").unwrap();
    cache.update_snapshot(&mut snapshot);
    assert_eq!(snapshot.rows()[a].volumes_named, 2);
    assert_eq!(snapshot.rows()[b].volumes_named, 0);

    cache.upsert_csi_node(csi_node("b", &[("x", Some(7))]));
    cache.update_snapshot(&mut snapshot);
    let limits = snapshot.attach_limits();
    assert_eq!((limits[a], limits[b]), (3, 7));
    cache.remove_csi_node("a");
    cache.update_snapshot(&mut snapshot);
    assert_eq!(snapshot.attach_limits()[a], u32::MAX);
}
