//! The plugin's rules at their edges, with expectations worked out by hand from
//! kube-scheduler's semantics.

use std::sync::Arc;

use super::*;
use crate::cache::{Cache, NodeInfo};
use crate::cycle::{CycleError, CycleMemory, CycleOptions, schedule_one};
use crate::framework::{Code, CycleState, NodeScore, PreFilterResult, Profile, Status};
use crate::model::NodeModel;
use crate::testing::{node, pod, status_by_domain};

const ZONE: &str = "topology.kubernetes.io/zone";
const HOST: &str = "kubernetes.io/hostname";

/// A node with a hostname label and, when `zone` is not empty, a zone label.
fn n(name: &str, zone: &str) -> NodeModel {
    let b = node(name).label(HOST, name);
    if zone.is_empty() {
        b.build()
    } else {
        b.label(ZONE, zone).build()
    }
}

/// A pod labelled `app=<app>` bound to `node`.
fn placed(name: &str, app: &str, node: &str) -> Arc<PodInfo> {
    pod(name).label("app", app).on(node).build()
}

fn snapshot(
    nodes: Vec<NodeModel>,
    pods: Vec<Arc<PodInfo>>,
    namespaces: &[(&str, &[(&str, &str)])],
) -> Snapshot {
    let mut cache = Cache::new();
    for n in nodes {
        cache.upsert_node(n);
    }
    for p in pods {
        cache.add_bound_pod(p).unwrap();
    }
    for (name, labels) in namespaces {
        cache.set_namespace(name, labels.iter().copied().collect());
    }
    let mut snap = Snapshot::default();
    cache.update_snapshot(&mut snap);
    snap
}

fn plugin() -> InterPodAffinity {
    InterPodAffinity::default()
}

/// Each node's Filter verdict, sorted by node name: `(node, code, reason)`; `None` when
/// PreFilter skips the plugin.
fn filter(
    pl: &InterPodAffinity,
    pod: &PodInfo,
    snap: &Snapshot,
) -> Option<Vec<(String, Code, String)>> {
    let mut state = CycleState::new();
    let (result, status) = pl.pre_filter(&mut state, pod, snap);
    assert_eq!(result, PreFilterResult::default());
    if status.is_skip() {
        return None;
    }
    assert!(status.is_success(), "{status}");
    let mut out: Vec<_> = snap
        .nodes()
        .iter()
        .map(|n| {
            let s = pl.filter(&state, pod, n);
            (n.node.name.to_string(), s.code(), s.message())
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Some(out)
}

fn ok(node: &str) -> (String, Code, String) {
    (node.to_string(), Code::Success, String::new())
}

fn rejected(node: &str, code: Code, reason: &str) -> (String, Code, String) {
    (node.to_string(), code, reason.to_string())
}

fn affinity_miss(node: &str) -> (String, Code, String) {
    rejected(
        node,
        Code::UnschedulableAndUnresolvable,
        ERR_REASON_AFFINITY_RULES_NOT_MATCH,
    )
}

fn anti_miss(node: &str) -> (String, Code, String) {
    rejected(
        node,
        Code::Unschedulable,
        ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH,
    )
}

fn existing_miss(node: &str) -> (String, Code, String) {
    rejected(
        node,
        Code::Unschedulable,
        ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH,
    )
}

/// `(node, score)` pairs sorted by node name.
type NodeScores = Vec<(String, i64)>;

/// Raw and normalized scores of every node, sorted by node name; `None` when PreScore skips.
fn score(
    pl: &InterPodAffinity,
    pod: &PodInfo,
    snap: &Snapshot,
) -> Option<(NodeScores, NodeScores)> {
    let mut state = CycleState::new();
    let feasible: Vec<&NodeInfo> = snap.nodes().iter().map(|n| &**n).collect();
    let status = pl.pre_score(&mut state, pod, snap, &feasible);
    if status.is_skip() {
        return None;
    }
    assert!(status.is_success(), "{status}");
    let raw: Vec<i64> = feasible
        .iter()
        .map(|n| pl.score(&state, pod, n).unwrap())
        .collect();
    let mut scores: Vec<NodeScore> = raw
        .iter()
        .enumerate()
        .map(|(index, &score)| NodeScore { index, score })
        .collect();
    assert!(pl.normalize(&state, pod, &mut scores).is_success());
    // By domain, as the cycle reads it: the same raw scores by position, and normalizing
    // the distinct raw scores once gives each node its score.
    let by_domain = pl
        .score_by_domain(&state, pod, snap)
        .expect("PreScore's sums answer by domain");
    let mut distinct = raw.clone();
    distinct.sort_unstable();
    distinct.dedup();
    let mut once: Vec<NodeScore> = distinct
        .iter()
        .enumerate()
        .map(|(index, &score)| NodeScore { index, score })
        .collect();
    assert!(pl.normalize(&state, pod, &mut once).is_success());
    for (position, (&r, s)) in raw.iter().zip(&scores).enumerate() {
        assert_eq!(by_domain.at(position), r);
        let k = distinct.binary_search(&r).unwrap();
        assert_eq!(once[k].score, s.score);
    }
    let mut listed = Vec::new();
    by_domain.listed_positions(&mut listed);
    for (position, &r) in raw.iter().enumerate() {
        assert!(r == 0 || listed.binary_search(&position).is_ok());
    }
    let name = |i: usize| feasible[i].node.name.to_string();
    let mut raw: Vec<_> = raw.iter().enumerate().map(|(i, &s)| (name(i), s)).collect();
    let mut norm: Vec<_> = scores.iter().map(|s| (name(s.index), s.score)).collect();
    raw.sort();
    norm.sort();
    Some((raw, norm))
}

fn named(pairs: &[(&str, i64)]) -> NodeScores {
    pairs.iter().map(|(n, s)| (n.to_string(), *s)).collect()
}

// ---- arguments ----

#[test]
fn args_defaults_and_decoding() {
    let a: InterPodAffinityArgs = decode_args(None).unwrap();
    assert_eq!(a.hard_pod_affinity_weight, 1);
    assert!(!a.ignore_preferred_terms_of_existing_pods);
    let v = serde_json::json!({
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "InterPodAffinityArgs",
        "hardPodAffinityWeight": 100,
        "ignorePreferredTermsOfExistingPods": true,
    });
    let a: InterPodAffinityArgs = decode_args(Some(&v)).unwrap();
    assert_eq!(
        a,
        InterPodAffinityArgs {
            hard_pod_affinity_weight: 100,
            ignore_preferred_terms_of_existing_pods: true,
        }
    );
    let a: InterPodAffinityArgs =
        decode_args(Some(&serde_json::json!({"hardPodAffinityWeight": 0}))).unwrap();
    assert_eq!(a.hard_pod_affinity_weight, 0);
    assert!(!a.ignore_preferred_terms_of_existing_pods);
}

#[test]
fn args_validation_names_the_field() {
    for (w, shown) in [(101, "101"), (-1, "-1")] {
        let e = decode_args::<InterPodAffinityArgs>(Some(
            &serde_json::json!({"hardPodAffinityWeight": w}),
        ))
        .unwrap_err();
        assert_eq!(e.field, "hardPodAffinityWeight");
        assert_eq!(
            e.reason,
            format!("Invalid value: {shown}: not in valid range [0, 100]")
        );
    }
    let e =
        decode_args::<InterPodAffinityArgs>(Some(&serde_json::json!({"weight": 1}))).unwrap_err();
    assert!(e.reason.contains("unknown field"), "{e}");
    let e =
        decode_args::<InterPodAffinityArgs>(Some(&serde_json::json!({"kind": "NodeAffinityArgs"})))
            .unwrap_err();
    assert_eq!(e.field, "kind");
}

#[test]
fn registered_with_every_extension_point() {
    let r = crate::plugins::registry();
    let p = r.get(NAME).expect("registered")(None).unwrap();
    assert_eq!(p.name(), "InterPodAffinity");
    assert!(p.as_pre_filter().is_some());
    assert!(p.as_filter().is_some());
    assert!(p.as_pre_score().is_some());
    assert!(p.as_score().is_some());
    assert!(
        r.get(NAME).unwrap()(Some(&serde_json::json!({"hardPodAffinityWeight": 101}))).is_err()
    );
}

// ---- PreFilter / Filter ----

const AFFINITY_DB_ZONE: &str = r#"
affinity:
  podAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - labelSelector: {matchLabels: {app: db}}
      topologyKey: topology.kubernetes.io/zone
"#;

const ANTI_WEB_HOST: &str = r#"
affinity:
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - labelSelector: {matchLabels: {app: web}}
      topologyKey: kubernetes.io/hostname
"#;

#[test]
fn prefilter_skips_without_required_terms_anywhere() {
    // An existing pod with required anti-affinity that does not match the incoming pod
    // counts nothing: still skipped, as kube-scheduler checks the counts, not the pods.
    let guard = pod("guard")
        .label("app", "guard")
        .on("n1")
        .spec_yaml(ANTI_WEB_HOST)
        .build();
    let snap = snapshot(vec![n("n1", "a"), n("n2", "b")], vec![guard], &[]);
    assert_eq!(
        filter(&plugin(), &pod("p").label("app", "api").build(), &snap),
        None
    );
    // Preferred terms alone do not make Filter run.
    let preferred = pod("p")
        .spec_yaml(
            r#"
affinity:
  podAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 10
      podAffinityTerm:
        labelSelector: {matchLabels: {app: db}}
        topologyKey: kubernetes.io/hostname
"#,
        )
        .build();
    assert_eq!(filter(&plugin(), &preferred, &snap), None);
}

#[test]
fn required_affinity_follows_the_domain_of_matching_pods() {
    let snap = snapshot(
        vec![n("n1", "a"), n("n2", "a"), n("n3", "b"), n("n4", "")],
        vec![placed("db", "db", "n1"), placed("other", "web", "n3")],
        &[],
    );
    let p = pod("p").spec_yaml(AFFINITY_DB_ZONE).build();
    assert_eq!(
        filter(&plugin(), &p, &snap).unwrap(),
        vec![ok("n1"), ok("n2"), affinity_miss("n3"), affinity_miss("n4")]
    );
}

#[test]
fn required_affinity_needs_every_topology_key_on_the_node() {
    // Two terms: a db pod in the zone and on the host. Nodes lacking either key are out,
    // even where the other term's domain holds the pod.
    let nodes = vec![
        n("n1", "a"),
        node("n2").label(ZONE, "a").build(),
        node("n3").label(HOST, "n1").build(),
    ];
    let snap = snapshot(nodes, vec![placed("db", "db", "n1")], &[]);
    let p = pod("p")
        .spec_yaml(
            r#"
affinity:
  podAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - labelSelector: {matchLabels: {app: db}}
      topologyKey: topology.kubernetes.io/zone
    - labelSelector: {matchLabels: {app: db}}
      topologyKey: kubernetes.io/hostname
"#,
        )
        .build();
    assert_eq!(
        filter(&plugin(), &p, &snap).unwrap(),
        vec![ok("n1"), affinity_miss("n2"), affinity_miss("n3")]
    );
}

#[test]
fn first_pod_of_a_self_affine_group_may_start_it() {
    // The pod wants a zone with app=cache pods and is app=cache itself; none exist yet.
    let self_affine = r#"
affinity:
  podAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - labelSelector: {matchLabels: {app: cache}}
      topologyKey: topology.kubernetes.io/zone
"#;
    let nodes = || vec![n("n1", "a"), n("n2", "b"), n("n3", "")];
    let snap = snapshot(nodes(), vec![placed("web", "web", "n1")], &[]);
    let first = pod("p")
        .label("app", "cache")
        .spec_yaml(self_affine)
        .build();
    assert_eq!(
        filter(&plugin(), &first, &snap).unwrap(),
        vec![ok("n1"), ok("n2"), affinity_miss("n3")],
        "any node with the topology key"
    );
    // A pod that does not match its own terms gets no exception.
    let stranger = pod("p").label("app", "api").spec_yaml(self_affine).build();
    assert_eq!(
        filter(&plugin(), &stranger, &snap).unwrap(),
        vec![
            affinity_miss("n1"),
            affinity_miss("n2"),
            affinity_miss("n3")
        ]
    );
    // Once a member exists, it pins the group to its zone.
    let snap = snapshot(nodes(), vec![placed("c1", "cache", "n2")], &[]);
    assert_eq!(
        filter(&plugin(), &first, &snap).unwrap(),
        vec![affinity_miss("n1"), ok("n2"), affinity_miss("n3")]
    );
    // A member on a node without the topology key is not counted anywhere, so the
    // exception still applies (kube-scheduler counts pairs, not pods).
    let snap = snapshot(nodes(), vec![placed("c1", "cache", "n3")], &[]);
    assert_eq!(
        filter(&plugin(), &first, &snap).unwrap(),
        vec![ok("n1"), ok("n2"), affinity_miss("n3")]
    );
}

#[test]
fn affinity_counts_only_pods_matching_all_terms() {
    // Terms: app=db in the zone, tier=gold in the zone. One pod matches each, none both:
    // nothing is counted, and the pod (matching neither) is rejected everywhere.
    let terms = r#"
affinity:
  podAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - labelSelector: {matchLabels: {app: db}}
      topologyKey: topology.kubernetes.io/zone
    - labelSelector: {matchLabels: {tier: gold}}
      topologyKey: topology.kubernetes.io/zone
"#;
    let gold = pod("gold").label("tier", "gold").on("n2").build();
    let snap = snapshot(
        vec![n("n1", "a"), n("n2", "b")],
        vec![placed("db", "db", "n1"), gold],
        &[],
    );
    let p = pod("p").spec_yaml(terms).build();
    assert_eq!(
        filter(&plugin(), &p, &snap).unwrap(),
        vec![affinity_miss("n1"), affinity_miss("n2")]
    );
    let both = pod("both")
        .label("app", "db")
        .label("tier", "gold")
        .on("n2")
        .build();
    let snap = snapshot(vec![n("n1", "a"), n("n2", "b")], vec![both], &[]);
    assert_eq!(
        filter(&plugin(), &p, &snap).unwrap(),
        vec![affinity_miss("n1"), ok("n2")]
    );
}

#[test]
fn required_anti_affinity_rejects_the_domain_of_matching_pods() {
    let snap = snapshot(
        vec![n("n1", "a"), n("n2", "a"), n("n3", "")],
        vec![placed("web1", "web", "n1"), placed("db", "db", "n2")],
        &[],
    );
    let p = pod("p")
        .label("app", "web")
        .spec_yaml(ANTI_WEB_HOST)
        .build();
    assert_eq!(
        filter(&plugin(), &p, &snap).unwrap(),
        vec![anti_miss("n1"), ok("n2"), ok("n3")]
    );
    // Zone-wide anti-affinity: a node without the zone label is not in any domain.
    let zone_anti = pod("p")
        .spec_yaml(
            r#"
affinity:
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - labelSelector: {matchLabels: {app: web}}
      topologyKey: topology.kubernetes.io/zone
"#,
        )
        .build();
    assert_eq!(
        filter(&plugin(), &zone_anti, &snap).unwrap(),
        vec![anti_miss("n1"), anti_miss("n2"), ok("n3")]
    );
}

#[test]
fn existing_pods_anti_affinity_is_symmetric() {
    // The guard refuses app=web pods in its zone; the incoming web pod has no terms at all.
    let guard = pod("guard")
        .label("app", "guard")
        .on("n1")
        .spec_yaml(
            r#"
affinity:
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - labelSelector: {matchLabels: {app: web}}
      topologyKey: topology.kubernetes.io/zone
"#,
        )
        .build();
    let snap = snapshot(
        vec![n("n1", "a"), n("n2", "a"), n("n3", "b"), n("n4", "")],
        vec![guard],
        &[],
    );
    let web = pod("p").label("app", "web").build();
    assert_eq!(
        filter(&plugin(), &web, &snap).unwrap(),
        vec![existing_miss("n1"), existing_miss("n2"), ok("n3"), ok("n4")]
    );
    // A pod the guard does not select: nothing counted, the plugin skips.
    assert_eq!(
        filter(&plugin(), &pod("p").label("app", "api").build(), &snap),
        None
    );
}

#[test]
fn reasons_come_in_kube_order() {
    // Zone a = {n1, n2, n3} holds the guard (refusing app=web per zone) and web pods on n1
    // and n2; the only db pod is on n4 in zone b. With the affinity term, n1 and n2 fail all
    // three checks and n3 two of them: the affinity reason wins.
    let guard = pod("guard")
        .label("app", "guard")
        .on("n2")
        .spec_yaml(
            r#"
affinity:
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - labelSelector: {matchLabels: {app: web}}
      topologyKey: topology.kubernetes.io/zone
"#,
        )
        .build();
    let snap = snapshot(
        vec![n("n1", "a"), n("n2", "a"), n("n3", "a"), n("n4", "b")],
        vec![
            guard,
            placed("web1", "web", "n1"),
            placed("web2", "web", "n2"),
            placed("db", "db", "n4"),
        ],
        &[],
    );
    let p = pod("p")
        .label("app", "web")
        .spec_yaml(
            r#"
affinity:
  podAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - labelSelector: {matchLabels: {app: db}}
      topologyKey: kubernetes.io/hostname
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - labelSelector: {matchLabels: {app: web}}
      topologyKey: kubernetes.io/hostname
"#,
        )
        .build();
    assert_eq!(
        filter(&plugin(), &p, &snap).unwrap(),
        vec![
            affinity_miss("n1"),
            affinity_miss("n2"),
            affinity_miss("n3"),
            ok("n4")
        ]
    );
    // Without the affinity term, anti-affinity (n1, n2) comes before the existing pods'
    // rules (n3).
    let p = pod("p")
        .label("app", "web")
        .spec_yaml(ANTI_WEB_HOST)
        .build();
    assert_eq!(
        filter(&plugin(), &p, &snap).unwrap(),
        vec![
            anti_miss("n1"),
            anti_miss("n2"),
            existing_miss("n3"),
            ok("n4")
        ]
    );
}

#[test]
fn terms_default_to_the_pods_own_namespace() {
    let snap = snapshot(
        vec![n("n1", "a"), n("n2", "b")],
        vec![
            placed("db", "db", "n1"),
            pod("db2")
                .namespace("other")
                .label("app", "db")
                .on("n2")
                .build(),
        ],
        &[],
    );
    let p = pod("p").spec_yaml(AFFINITY_DB_ZONE).build();
    assert_eq!(
        filter(&plugin(), &p, &snap).unwrap(),
        vec![ok("n1"), affinity_miss("n2")]
    );
    let listed = pod("p")
        .spec_yaml(
            r#"
affinity:
  podAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - labelSelector: {matchLabels: {app: db}}
      namespaces: [other]
      topologyKey: topology.kubernetes.io/zone
"#,
        )
        .build();
    assert_eq!(
        filter(&plugin(), &listed, &snap).unwrap(),
        vec![affinity_miss("n1"), ok("n2")]
    );
}

#[test]
fn namespace_selectors_of_the_incoming_pod() {
    let db = |name: &str, ns: &str, node: &str| {
        pod(name).namespace(ns).label("app", "db").on(node).build()
    };
    let snap = snapshot(
        vec![n("n1", "a"), n("n2", "b"), n("n3", "c"), n("n4", "d")],
        vec![
            db("db1", "prod", "n1"),
            db("db2", "dev", "n2"),
            db("db3", "ghost", "n3"),
        ],
        &[("prod", &[("env", "prod")]), ("dev", &[("env", "dev")])],
    );
    let with_selector = |selector: &str| {
        pod("p")
            .spec_yaml(&format!(
                r#"
affinity:
  podAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - labelSelector: {{matchLabels: {{app: db}}}}
      namespaceSelector: {selector}
      topologyKey: topology.kubernetes.io/zone
"#
            ))
            .build()
    };
    // Selected by labels: only the prod namespace.
    assert_eq!(
        filter(
            &plugin(),
            &with_selector("{matchLabels: {env: prod}}"),
            &snap
        )
        .unwrap(),
        vec![
            ok("n1"),
            affinity_miss("n2"),
            affinity_miss("n3"),
            affinity_miss("n4")
        ]
    );
    // An empty selector is every namespace, known or not.
    assert_eq!(
        filter(&plugin(), &with_selector("{}"), &snap).unwrap(),
        vec![ok("n1"), ok("n2"), ok("n3"), affinity_miss("n4")]
    );
    // A selector is resolved against the known namespaces: `ghost` is unknown, so even a
    // selector its (absent) labels would satisfy does not reach it.
    assert_eq!(
        filter(
            &plugin(),
            &with_selector("{matchExpressions: [{key: env, operator: NotIn, values: [prod]}]}"),
            &snap
        )
        .unwrap(),
        vec![
            affinity_miss("n1"),
            ok("n2"),
            affinity_miss("n3"),
            affinity_miss("n4")
        ]
    );
    // Listed namespaces and a selector add up.
    let both = pod("p")
        .spec_yaml(
            r#"
affinity:
  podAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - labelSelector: {matchLabels: {app: db}}
      namespaces: [ghost]
      namespaceSelector: {matchLabels: {env: dev}}
      topologyKey: topology.kubernetes.io/zone
"#,
        )
        .build();
    assert_eq!(
        filter(&plugin(), &both, &snap).unwrap(),
        vec![affinity_miss("n1"), ok("n2"), ok("n3"), affinity_miss("n4")]
    );
}

#[test]
fn existing_pods_namespace_selector_reads_the_incoming_pods_namespace_labels() {
    let guard = pod("guard")
        .label("app", "guard")
        .on("n1")
        .spec_yaml(
            r#"
affinity:
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - labelSelector: {matchLabels: {app: web}}
      namespaceSelector: {matchLabels: {team: red}}
      topologyKey: kubernetes.io/hostname
"#,
        )
        .build();
    let snap = snapshot(
        vec![n("n1", "a"), n("n2", "a")],
        vec![guard],
        &[
            ("red-ns", &[("team", "red")]),
            ("blue-ns", &[("team", "blue")]),
        ],
    );
    let web = |ns: &str| pod("p").namespace(ns).label("app", "web").build();
    assert_eq!(
        filter(&plugin(), &web("red-ns"), &snap).unwrap(),
        vec![existing_miss("n1"), ok("n2")]
    );
    assert_eq!(filter(&plugin(), &web("blue-ns"), &snap), None);
    assert_eq!(
        filter(&plugin(), &web("default"), &snap),
        None,
        "the guard's own namespace is not listed once a selector is given"
    );
}

#[test]
fn filter_without_prefilter_state_is_an_error() {
    let snap = snapshot(vec![n("n1", "a")], vec![], &[]);
    let s = plugin().filter(&CycleState::new(), &pod("p").build(), &snap.nodes()[0]);
    assert_eq!(s.code(), Code::Error);
    assert_eq!(
        s.message(),
        "error reading \"PreFilterInterPodAffinity\" from cycleState: not found"
    );
}

#[test]
fn diagnosis_message_through_the_cycle() {
    let pl: Arc<dyn Plugin> = Arc::new(plugin());
    let profile = Profile {
        scheduler_name: "test".into(),
        percentage_of_nodes_to_score: None,
        queue_sort: pl.clone(),
        pre_enqueue: vec![],
        pre_filter: vec![pl.clone()],
        filter: vec![pl.clone()],
        post_filter: vec![],
        pre_score: vec![pl.clone()],
        score: vec![(pl, 2)],
        reserve: vec![],
        permit: vec![],
        pre_bind: vec![],
        bind: vec![],
        post_bind: vec![],
        observer: Arc::new(crate::framework::Unobserved),
    };
    let snap = snapshot(
        vec![n("n1", "a"), n("n2", "b"), n("n3", "b")],
        vec![placed("db", "db", "n2"), placed("web", "web", "n2")],
        &[],
    );
    let p = pod("p")
        .label("app", "web")
        .spec_yaml(
            r#"
affinity:
  podAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - labelSelector: {matchLabels: {app: db}}
      topologyKey: topology.kubernetes.io/zone
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - labelSelector: {matchLabels: {app: web}}
      topologyKey: topology.kubernetes.io/zone
"#,
        )
        .build();
    let opts = CycleOptions {
        pool: None,
        percentage_of_nodes_to_score: 0,
        top_scores: 3,
        nominated: None,
        waiting: None,
        preempt_extenders: false,
        preemption_running: false,
    };
    let err = schedule_one(&profile, &snap, &p, &mut CycleMemory::default(), &opts).unwrap_err();
    assert_eq!(
        err.to_string(),
        "0/3 nodes are available: 1 node(s) didn't match pod affinity rules, 2 node(s) didn't match pod anti-affinity rules."
    );
    let CycleError::Unschedulable(d) = err else {
        panic!("expected unschedulable")
    };
    assert!(d.unschedulable_plugins.contains(&NAME));
    // A plain pod is scheduled: PreFilter and PreScore skip the plugin.
    let placement = schedule_one(
        &profile,
        &snap,
        &pod("q").build(),
        &mut CycleMemory::default(),
        &opts,
    )
    .unwrap();
    assert!(placement.score_plugins.is_empty());
}

// ---- PreScore / Score / NormalizeScore ----

#[test]
fn scoring_arithmetic_with_negative_totals() {
    // Zones a = {n1, n2}, b = {n3, n4}. The incoming pod (app=web):
    //   preferred affinity    5 to app=db  per zone,
    //   preferred anti       10 to app=web per host.
    // Existing: db on n3; web on n1 and n3; on n2 a pod whose preferred anti-affinity
    // (weight 7, per zone) selects app=web; on n4 a pod whose required affinity (per host)
    // selects app=web, at hardPodAffinityWeight 3.
    //   n1: zone a -7, host n1 -10 = -17
    //   n2: zone a -7              =  -7
    //   n3: zone b +5, host n3 -10 =  -5
    //   n4: zone b +5, host n4 +3  =   8
    // Normalized over [-17, 8] (range 25): 0, 100*10/25=40, 100*12/25=48, 100.
    let repeller = pod("repeller")
        .label("app", "repeller")
        .on("n2")
        .spec_yaml(
            r#"
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 7
      podAffinityTerm:
        labelSelector: {matchLabels: {app: web}}
        topologyKey: topology.kubernetes.io/zone
"#,
        )
        .build();
    let attractor = pod("attractor")
        .label("app", "attractor")
        .on("n4")
        .spec_yaml(
            r#"
affinity:
  podAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - labelSelector: {matchLabels: {app: web}}
      topologyKey: kubernetes.io/hostname
"#,
        )
        .build();
    let snap = snapshot(
        vec![n("n1", "a"), n("n2", "a"), n("n3", "b"), n("n4", "b")],
        vec![
            placed("db", "db", "n3"),
            placed("web1", "web", "n1"),
            placed("web3", "web", "n3"),
            repeller,
            attractor,
        ],
        &[],
    );
    let p = pod("p")
        .label("app", "web")
        .spec_yaml(
            r#"
affinity:
  podAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 5
      podAffinityTerm:
        labelSelector: {matchLabels: {app: db}}
        topologyKey: topology.kubernetes.io/zone
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 10
      podAffinityTerm:
        labelSelector: {matchLabels: {app: web}}
        topologyKey: kubernetes.io/hostname
"#,
        )
        .build();
    let pl = InterPodAffinity::new(InterPodAffinityArgs {
        hard_pod_affinity_weight: 3,
        ignore_preferred_terms_of_existing_pods: false,
    });
    let (raw, norm) = score(&pl, &p, &snap).unwrap();
    assert_eq!(
        raw,
        named(&[("n1", -17), ("n2", -7), ("n3", -5), ("n4", 8)])
    );
    assert_eq!(
        norm,
        named(&[("n1", 0), ("n2", 40), ("n3", 48), ("n4", 100)])
    );
    // With the default hardPodAffinityWeight of 1, n4 gets 6: [-17, 6], range 23:
    // n2 = 100*10/23 = 43.47 -> 43, n3 = 100*12/23 = 52.17 -> 52.
    let (raw, norm) = score(&plugin(), &p, &snap).unwrap();
    assert_eq!(
        raw,
        named(&[("n1", -17), ("n2", -7), ("n3", -5), ("n4", 6)])
    );
    assert_eq!(
        norm,
        named(&[("n1", 0), ("n2", 43), ("n3", 52), ("n4", 100)])
    );
}

#[test]
fn all_negative_scores_span_the_whole_range() {
    // Anti-affinity 10 per zone to app=web: one web pod in zone a, two in zone b.
    // Raw: a = -10, b = -20; the least bad zone gets 100, not 50.
    let snap = snapshot(
        vec![n("n1", "a"), n("n2", "b"), n("n3", "b")],
        vec![
            placed("w1", "web", "n1"),
            placed("w2", "web", "n2"),
            placed("w3", "web", "n3"),
        ],
        &[],
    );
    let p = pod("p")
        .spec_yaml(
            r#"
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 10
      podAffinityTerm:
        labelSelector: {matchLabels: {app: web}}
        topologyKey: topology.kubernetes.io/zone
"#,
        )
        .build();
    let (raw, norm) = score(&plugin(), &p, &snap).unwrap();
    assert_eq!(raw, named(&[("n1", -10), ("n2", -20), ("n3", -20)]));
    assert_eq!(norm, named(&[("n1", 100), ("n2", 0), ("n3", 0)]));
}

#[test]
fn existing_pods_preferred_terms_and_equal_scores() {
    // An existing pod on n1 prefers app=web pods on its host (weight 4); another on n2
    // prefers them away from its host (weight 4).
    let pref = |name: &str, node: &str, kind: &str| {
        pod(name)
            .on(node)
            .spec_yaml(&format!(
                r#"
affinity:
  {kind}:
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 4
      podAffinityTerm:
        labelSelector: {{matchLabels: {{app: web}}}}
        topologyKey: kubernetes.io/hostname
"#
            ))
            .build()
    };
    let snap = snapshot(
        vec![n("n1", "a"), n("n2", "a"), n("n3", "a")],
        vec![
            pref("likes", "n1", "podAffinity"),
            pref("dislikes", "n2", "podAntiAffinity"),
        ],
        &[],
    );
    let web = pod("p").label("app", "web").build();
    let (raw, norm) = score(&plugin(), &web, &snap).unwrap();
    assert_eq!(raw, named(&[("n1", 4), ("n2", -4), ("n3", 0)]));
    assert_eq!(norm, named(&[("n1", 100), ("n2", 0), ("n3", 50)]));
    // Terms that match but cancel out on one host: counted, so not skipped; every node
    // scores the same, which normalizes to 0.
    let snap = snapshot(
        vec![n("n1", "a"), n("n2", "a")],
        vec![
            pref("likes", "n1", "podAffinity"),
            pref("dislikes", "n1", "podAntiAffinity"),
        ],
        &[],
    );
    let (raw, norm) = score(&plugin(), &web, &snap).unwrap();
    assert_eq!(raw, named(&[("n1", 0), ("n2", 0)]));
    assert_eq!(norm, named(&[("n1", 0), ("n2", 0)]));
    // A pod the terms do not select: nothing to score.
    assert_eq!(
        score(&plugin(), &pod("p").label("app", "api").build(), &snap),
        None
    );
}

#[test]
fn hard_pod_affinity_weight_scores_existing_required_affinity() {
    let attractor = pod("attractor")
        .on("n1")
        .spec_yaml(
            r#"
affinity:
  podAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - labelSelector: {matchLabels: {app: web}}
      topologyKey: topology.kubernetes.io/zone
"#,
        )
        .build();
    let snap = snapshot(
        vec![n("n1", "a"), n("n2", "a"), n("n3", "b")],
        vec![attractor],
        &[],
    );
    let web = pod("p").label("app", "web").build();
    let with_weight = |w: i32| {
        InterPodAffinity::new(InterPodAffinityArgs {
            hard_pod_affinity_weight: w,
            ..Default::default()
        })
    };
    let (raw, norm) = score(&with_weight(100), &web, &snap).unwrap();
    assert_eq!(raw, named(&[("n1", 100), ("n2", 100), ("n3", 0)]));
    assert_eq!(norm, named(&[("n1", 100), ("n2", 100), ("n3", 0)]));
    // 0 turns the rule off; with nothing else to score, PreScore skips.
    assert_eq!(score(&with_weight(0), &web, &snap), None);
    // The existing pod's required affinity matters only for scoring: Filter skips.
    assert_eq!(filter(&with_weight(100), &web, &snap), None);
}

#[test]
fn ignore_preferred_terms_of_existing_pods() {
    let likes = pod("likes")
        .on("n1")
        .spec_yaml(
            r#"
affinity:
  podAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 4
      podAffinityTerm:
        labelSelector: {matchLabels: {app: web}}
        topologyKey: kubernetes.io/hostname
"#,
        )
        .build();
    let snap = snapshot(
        vec![n("n1", "a"), n("n2", "a")],
        vec![likes, placed("db", "db", "n2")],
        &[],
    );
    let pl = InterPodAffinity::new(InterPodAffinityArgs {
        ignore_preferred_terms_of_existing_pods: true,
        ..Default::default()
    });
    let web = pod("p").label("app", "web").build();
    assert!(score(&plugin(), &web, &snap).is_some());
    assert_eq!(
        score(&pl, &web, &snap),
        None,
        "no preferred terms of its own"
    );
    // With preferred terms of its own, the existing pods' terms count again (as in
    // kube-scheduler, the option only skips pods without preferences).
    let web_near_db = pod("p")
        .label("app", "web")
        .spec_yaml(
            r#"
affinity:
  podAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 6
      podAffinityTerm:
        labelSelector: {matchLabels: {app: db}}
        topologyKey: kubernetes.io/hostname
"#,
        )
        .build();
    let (raw, norm) = score(&pl, &web_near_db, &snap).unwrap();
    assert_eq!(raw, named(&[("n1", 4), ("n2", 6)]));
    assert_eq!(norm, named(&[("n1", 0), ("n2", 100)]));
}

#[test]
fn incoming_preferred_terms_use_resolved_namespaces() {
    let snap = snapshot(
        vec![n("n1", "a"), n("n2", "b")],
        vec![
            pod("db1")
                .namespace("prod")
                .label("app", "db")
                .on("n1")
                .build(),
            pod("db2")
                .namespace("dev")
                .label("app", "db")
                .on("n2")
                .build(),
        ],
        &[("prod", &[("env", "prod")]), ("dev", &[("env", "dev")])],
    );
    let p = pod("p")
        .spec_yaml(
            r#"
affinity:
  podAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 9
      podAffinityTerm:
        labelSelector: {matchLabels: {app: db}}
        namespaceSelector: {matchLabels: {env: dev}}
        topologyKey: topology.kubernetes.io/zone
"#,
        )
        .build();
    let (raw, _) = score(&plugin(), &p, &snap).unwrap();
    assert_eq!(raw, named(&[("n1", 0), ("n2", 9)]));
}

#[test]
fn normalization_truncates_like_kube() {
    // 100 * (29 / 100) is 28.999999999999996 in floating point: kube-scheduler gives 28.
    let snap = snapshot(
        vec![n("n1", "a"), n("n2", "b")],
        vec![placed("db", "db", "n1")],
        &[],
    );
    let p = pod("p")
        .spec_yaml(
            r#"
affinity:
  podAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 1
      podAffinityTerm:
        labelSelector: {matchLabels: {app: db}}
        topologyKey: kubernetes.io/hostname
"#,
        )
        .build();
    let pl = plugin();
    let mut state = CycleState::new();
    let feasible: Vec<&NodeInfo> = snap.nodes().iter().map(|n| &**n).collect();
    assert!(pl.pre_score(&mut state, &p, &snap, &feasible).is_success());
    let mut scores: Vec<NodeScore> = [0, 29, 100, -50]
        .into_iter()
        .enumerate()
        .map(|(index, score)| NodeScore { index, score })
        .collect();
    assert!(pl.normalize(&state, &p, &mut scores).is_success());
    let got: Vec<i64> = scores.iter().map(|s| s.score).collect();
    // Range [-50, 100] = 150: 50/150 -> 33, 79/150 -> 52, 150/150 -> 100, 0.
    assert_eq!(got, [33, 52, 100, 0]);
    let mut scores: Vec<NodeScore> = [0, 29, 100]
        .into_iter()
        .enumerate()
        .map(|(index, score)| NodeScore { index, score })
        .collect();
    assert!(pl.normalize(&state, &p, &mut scores).is_success());
    let got: Vec<i64> = scores.iter().map(|s| s.score).collect();
    assert_eq!(got, [0, 28, 100]);
}

#[test]
fn score_without_prescore_state_is_an_error() {
    let snap = snapshot(vec![n("n1", "a")], vec![], &[]);
    let pl = plugin();
    let p = pod("p").build();
    let e = pl
        .score(&CycleState::new(), &p, &snap.nodes()[0])
        .unwrap_err();
    assert_eq!(e.code(), Code::Error);
    assert_eq!(
        e.message(),
        "failed to read \"PreScoreInterPodAffinity\" from cycleState: not found"
    );
    let mut scores = [NodeScore { index: 0, score: 1 }];
    let s: Status = pl.normalize(&CycleState::new(), &p, &mut scores);
    assert_eq!(s.code(), Code::Error);
}

/// A preferred (anti-)affinity stanza about `app=web`, either as `matchLabels` (which the
/// snapshot's pod index serves) or as expressions no index can serve.
fn preferred_about_web(kind: &str, weight: i32, key: &str, indexed: bool) -> String {
    let selector = if indexed {
        "{matchLabels: {app: web}}".to_string()
    } else {
        "{matchExpressions: [{key: app, operator: Exists}, {key: app, operator: NotIn, values: [db, api]}]}"
            .to_string()
    };
    format!(
        r#"
affinity:
  {kind}:
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: {weight}
      podAffinityTerm:
        labelSelector: {selector}
        topologyKey: {key}
"#
    )
}

#[test]
fn indexed_scores_equal_a_scan_of_every_pod() {
    let nodes: Vec<NodeModel> = (0..9)
        .map(|i| n(&format!("n{i}"), &format!("z{}", i % 3)))
        .collect();
    let apps = ["web", "db", "api"];
    // The same cluster twice: existing pods' terms indexed, then not.
    let cluster = |indexed: bool| {
        let mut pods = Vec::new();
        for i in 0..40usize {
            let node = format!("n{}", (i * 5) % 8);
            let mut p = pod(&format!("p{i}")).label("app", apps[i % 3]).on(&node);
            if i % 4 == 0 {
                p = p.spec_yaml(&preferred_about_web("podAntiAffinity", 7, HOST, indexed));
            } else if i % 4 == 1 {
                p = p.spec_yaml(&preferred_about_web("podAffinity", 3, ZONE, indexed));
            }
            pods.push(p.build());
        }
        snapshot(nodes.clone(), pods, &[])
    };
    let (indexed_cluster, scanned_cluster) = (cluster(true), cluster(false));
    for (kind, key) in [("podAntiAffinity", HOST), ("podAffinity", ZONE)] {
        let incoming = |indexed| {
            pod("in")
                .label("app", "web")
                .spec_yaml(&preferred_about_web(kind, 10, key, indexed))
                .build()
        };
        let expected = score(&plugin(), &incoming(false), &scanned_cluster);
        assert!(expected.is_some());
        assert_eq!(
            score(&plugin(), &incoming(true), &indexed_cluster),
            expected
        );
        assert_eq!(
            score(&plugin(), &incoming(true), &scanned_cluster),
            expected
        );
        assert_eq!(
            score(&plugin(), &incoming(false), &indexed_cluster),
            expected
        );
    }
    // A pod without terms of its own: only the existing pods' terms count.
    let plain = pod("in").label("app", "web").build();
    let expected = score(&plugin(), &plain, &scanned_cluster);
    assert!(expected.is_some());
    assert_eq!(score(&plugin(), &plain, &indexed_cluster), expected);
}

#[test]
fn verdicts_by_domain_agree_with_filter_on_every_node() {
    // Zone a holds web pods and a guard refusing api pods per zone; zone b a db pod; n5 has
    // no zone.
    let guard = pod("guard")
        .label("app", "guard")
        .on("n3")
        .spec_yaml(
            r#"
affinity:
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - labelSelector: {matchLabels: {app: api}}
      topologyKey: topology.kubernetes.io/zone
"#,
        )
        .build();
    let snap = snapshot(
        vec![
            n("n1", "a"),
            n("n2", "a"),
            n("n3", "b"),
            n("n4", "c"),
            n("n5", ""),
        ],
        vec![
            placed("web1", "web", "n1"),
            placed("web2", "web", "n2"),
            placed("db", "db", "n3"),
            guard,
        ],
        &[],
    );
    let term = |kind: &str, app: &str, key: &str| {
        format!(
            "affinity:\n  {kind}:\n    requiredDuringSchedulingIgnoredDuringExecution:\n    - labelSelector: {{matchLabels: {{app: {app}}}}}\n      topologyKey: {key}\n"
        )
    };
    let pods = [
        // Affinity to pods that exist, by zone and by host.
        pod("p")
            .spec_yaml(&term("podAffinity", "web", ZONE))
            .build(),
        pod("p")
            .spec_yaml(&term("podAffinity", "web", HOST))
            .build(),
        // Affinity to pods that do not exist: the first of its group, or nowhere.
        pod("p")
            .label("app", "new")
            .spec_yaml(&term("podAffinity", "new", ZONE))
            .build(),
        pod("p")
            .spec_yaml(&term("podAffinity", "new", ZONE))
            .build(),
        // Anti-affinity by zone and by host, and an api pod the guard keeps out of zone b.
        pod("p")
            .spec_yaml(&term("podAntiAffinity", "web", ZONE))
            .build(),
        pod("p")
            .spec_yaml(&term("podAntiAffinity", "db", HOST))
            .build(),
        pod("p")
            .label("app", "api")
            .spec_yaml(&term("podAffinity", "web", ZONE))
            .build(),
        pod("p").label("app", "api").build(),
    ];
    let pl = plugin();
    for p in &pods {
        let mut state = CycleState::new();
        let (_, status) = pl.pre_filter(&mut state, p, &snap);
        assert!(status.is_success(), "{status}");
        let verdicts = pl
            .verdict_by_domain(&state, p, &snap)
            .expect("required terms answer by domain");
        for (position, node) in snap.nodes().iter().enumerate() {
            let by_domain = status_by_domain(&verdicts, position);
            let filtered = pl.filter(&state, p, node);
            assert_eq!(
                by_domain, filtered,
                "{:?} on {}",
                p.affinity, node.node.name
            );
        }
    }
}
