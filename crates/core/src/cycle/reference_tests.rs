//! The cycle against a straightforward one: on random clusters and pods, with every node
//! examined, [`schedule_one`] (blocks of nodes, per-position data, plugins' own block
//! methods) must choose the node, count the feasible nodes, report the best scores and count
//! the rejections exactly as running each plugin's per-node `filter` and `score` on every
//! node, one after the other, would.

use std::sync::{Arc, LazyLock};

use proptest::prelude::*;

use super::*;
use crate::cache::Cache;
use crate::config::{Config, DEFAULT_SCHEDULER_NAME};
use crate::framework::{MAX_NODE_SCORE, MIN_NODE_SCORE};
use crate::testing::{node, pod};

/// kube-scheduler's default profile, built once.
static CONFIG: LazyLock<Config> = LazyLock::new(|| {
    Config::default_with(&crate::plugins::registry()).expect("the default configuration builds")
});

fn default_profile() -> &'static Profile {
    CONFIG
        .profile(DEFAULT_SCHEDULER_NAME)
        .expect("the default profile exists")
}

/// What a cycle decided, in the terms both cycles report.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    node: Option<Arc<str>>,
    feasible: usize,
    scores: Vec<NodeScores>,
    rejections: Vec<RejectionCount>,
}

/// What a failed cycle reports: the rejections of its diagnosis.
fn failed(e: CycleError) -> Outcome {
    Outcome {
        node: None,
        feasible: 0,
        scores: Vec::new(),
        rejections: match e {
            CycleError::Unschedulable(d) => d.rejection_counts(),
            CycleError::Error(s) => panic!("the cycle failed: {s}"),
        },
    }
}

/// The cycle written plainly: PreFilter as the cycle runs it, then every filter on every
/// node in snapshot order with `filter`, then PreScore, `score` per node, normalization of
/// every plugin (those that say they need none included), weights, and the same choice
/// among the best.
/// What the cycle under test decides for `pod`.
fn outcome(
    profile: &Profile,
    snapshot: &Snapshot,
    pod: &PodInfo,
    memory: &mut CycleMemory,
    options: &CycleOptions<'_>,
) -> Outcome {
    match schedule_one(profile, snapshot, pod, memory, options) {
        Ok(placement) => Outcome {
            node: Some(placement.node),
            feasible: placement.feasible,
            scores: placement.scores,
            rejections: placement.rejections,
        },
        Err(e) => failed(e),
    }
}

fn reference(profile: &Profile, snapshot: &Snapshot, pod: &PodInfo, top: usize) -> Outcome {
    let mut state = CycleState::new();
    let diagnosis = Diagnosis {
        num_all_nodes: snapshot.len(),
        ..Default::default()
    };
    let (pre, mut diagnosis) = match pre_filter(profile, &mut state, pod, snapshot, diagnosis) {
        Ok(done) => done,
        Err(e) => return failed(e),
    };
    state.insert(SkippedFilters(pre.skip_filter.clone()));
    let positions: Vec<usize> = match &pre.candidates {
        Some(c) => c.clone(),
        None => (0..snapshot.len()).collect(),
    };
    let mut feasible: Vec<&NodeInfo> = Vec::new();
    for &p in &positions {
        let node = &*snapshot.nodes()[p];
        let mut verdict = Status::success();
        for plugin in &profile.filter {
            let Some(f) = plugin.as_filter() else {
                continue;
            };
            if pre.skip_filter.contains(&plugin.name()) {
                continue;
            }
            verdict = f.filter(&state, pod, node).with_plugin(plugin.name());
            if !verdict.is_success() {
                break;
            }
        }
        if verdict.is_success() {
            feasible.push(node);
        } else {
            diagnosis
                .node_statuses
                .push((node.node.name.clone(), verdict));
        }
    }
    let rejections = diagnosis.rejection_counts();
    if feasible.len() <= 1 {
        return Outcome {
            node: feasible.first().map(|n| n.node.name.clone()),
            feasible: feasible.len(),
            scores: Vec::new(),
            rejections,
        };
    }
    let mut skipped: Vec<&str> = Vec::new();
    for plugin in &profile.pre_score {
        if let Some(ps) = plugin.as_pre_score()
            && ps.pre_score(&mut state, pod, snapshot, &feasible).is_skip()
        {
            skipped.push(plugin.name());
        }
    }
    let mut rows: Vec<Vec<i64>> = vec![Vec::new(); feasible.len()];
    let mut names = Vec::new();
    for (plugin, weight) in &profile.score {
        let Some(s) = plugin.as_score() else {
            continue;
        };
        if skipped.contains(&plugin.name()) {
            continue;
        }
        names.push(plugin.name());
        let mut column: Vec<NodeScore> = feasible
            .iter()
            .enumerate()
            .map(|(index, node)| NodeScore {
                index,
                score: s.score(&state, pod, node).expect("scores"),
            })
            .collect();
        assert!(s.normalize(&state, pod, &mut column).is_success());
        for (row, cell) in rows.iter_mut().zip(&column) {
            assert!((MIN_NODE_SCORE..=MAX_NODE_SCORE).contains(&cell.score));
            row.push(cell.score * weight);
        }
    }
    let totals: Vec<i64> = rows.iter().map(|r| r.iter().sum()).collect();
    let fixed = profile
        .score
        .iter()
        .filter(|(p, _)| names.contains(&p.name()))
        .any(|(p, _)| p.as_score().is_some_and(|s| s.fixed_tie_order()));
    let chosen = reference_select_host(pod, &feasible, &totals, fixed);
    // The best `top`, ties in examination order.
    let mut order: Vec<usize> = (0..feasible.len()).collect();
    order.sort_by(|&a, &b| totals[b].cmp(&totals[a]).then(a.cmp(&b)));
    let scores = order
        .into_iter()
        .take(top)
        .map(|i| NodeScores {
            node: feasible[i].node.name.clone(),
            weighted: rows[i].clone(),
            total: totals[i],
        })
        .collect();
    Outcome {
        node: Some(feasible[chosen].node.name.clone()),
        feasible: feasible.len(),
        scores,
        rejections,
    }
}

/// One random node: its size, zone, and whether it is cordoned or tainted.
#[derive(Debug, Clone)]
struct NodeSpec {
    cpu: u32,
    memory_gi: u32,
    zone: Option<u8>,
    cordoned: bool,
    taint: Option<(&'static str, &'static str)>,
    /// Extended resources: nodes that have them are alike to no other.
    dongles: u8,
}

fn node_spec() -> impl Strategy<Value = NodeSpec> {
    (
        prop_oneof![Just(2u32), Just(4), Just(8), Just(32)],
        prop_oneof![Just(4u32), Just(16), Just(64)],
        prop::option::weighted(0.9, 0u8..3),
        prop::bool::weighted(0.05),
        prop::option::weighted(
            0.15,
            prop_oneof![
                Just(("dedicated", "NoSchedule")),
                Just(("spot", "PreferNoSchedule")),
                Just(("flaky", "NoExecute")),
            ],
        ),
        prop_oneof![6 => Just(0u8), 1 => 1u8..3],
    )
        .prop_map(
            |(cpu, memory_gi, zone, cordoned, taint, dongles)| NodeSpec {
                cpu,
                memory_gi,
                zone,
                cordoned,
                taint,
                dongles,
            },
        )
}

/// One random pod: requests, app label, and the constraints of the constrained workload.
#[derive(Debug, Clone)]
struct PodSpec {
    milli_cpu: u32,
    memory_mi: u32,
    app: u8,
    spread: Option<u8>,
    anti_affinity: bool,
    tolerates: bool,
    zone_selector: Option<u8>,
    dongles: u8,
    /// The claim `c<n>` of [`add_storage`], if any.
    volume: Option<u8>,
    /// A required term about the pod's own app: affinity by zone (0), anti-affinity by
    /// zone (1) or by host (2).
    required_term: Option<u8>,
    /// The spread constraint is `ScheduleAnyway` (scored) rather than `DoNotSchedule`.
    soft_spread: bool,
}

fn pod_spec() -> impl Strategy<Value = PodSpec> {
    (
        prop_oneof![Just(0u32), 100u32..3000],
        prop_oneof![Just(0u32), 64u32..4096],
        0u8..4,
        prop::option::weighted(0.4, 1u8..3),
        prop::bool::weighted(0.4),
        prop::bool::weighted(0.3),
        prop::option::weighted(0.1, 0u8..3),
        prop_oneof![8 => Just(0u8), 1 => Just(1u8)],
        prop::option::weighted(0.2, 0u8..3),
        prop::option::weighted(0.15, 0u8..3),
        prop::bool::weighted(0.3),
    )
        .prop_map(
            |(
                milli_cpu,
                memory_mi,
                app,
                spread,
                anti_affinity,
                tolerates,
                zone_selector,
                dongles,
                volume,
                required_term,
                soft_spread,
            )| {
                PodSpec {
                    milli_cpu,
                    memory_mi,
                    app,
                    spread,
                    anti_affinity,
                    tolerates,
                    zone_selector,
                    dongles,
                    volume,
                    required_term,
                    soft_spread,
                }
            },
        )
}

const ZONE: &str = "topology.kubernetes.io/zone";
const DONGLE: &str = "example.com/dongle";
const HOSTNAME: &str = "kubernetes.io/hostname";

fn build_pod(name: &str, spec: &PodSpec) -> crate::testing::PodBuilder {
    let app = format!("app-{}", spec.app);
    let mut b = pod(name).label("app", &app);
    if spec.milli_cpu > 0 {
        b = b.req("cpu", &format!("{}m", spec.milli_cpu));
    }
    if spec.memory_mi > 0 {
        b = b.req("memory", &format!("{}Mi", spec.memory_mi));
    }
    if spec.dongles > 0 {
        b = b.req(DONGLE, &spec.dongles.to_string());
    }
    if spec.tolerates {
        b = b.toleration("spot", "Exists", "", "PreferNoSchedule");
    }
    if let Some(z) = spec.zone_selector {
        b = b.node_selector(ZONE, &format!("zone-{z}"));
    }
    let mut yaml = String::new();
    if let Some(skew) = spec.spread {
        let when = if spec.soft_spread {
            "ScheduleAnyway"
        } else {
            "DoNotSchedule"
        };
        yaml.push_str(&format!(
            "topologySpreadConstraints:\n- maxSkew: {skew}\n  topologyKey: {ZONE}\n  whenUnsatisfiable: {when}\n  labelSelector: {{matchLabels: {{app: {app}}}}}\n"
        ));
    }
    if let Some(v) = spec.volume {
        yaml.push_str(&format!(
            "volumes: [{{name: data, persistentVolumeClaim: {{claimName: c{v}}}}}]\n"
        ));
    }
    let own_app = format!("{{labelSelector: {{matchLabels: {{app: {app}}}}}, topologyKey: ");
    let mut anti = String::new();
    if spec.anti_affinity {
        anti.push_str(&format!(
            "    preferredDuringSchedulingIgnoredDuringExecution:\n    - weight: 100\n      podAffinityTerm: {own_app}{HOSTNAME}}}\n"
        ));
    }
    let mut affinity = String::new();
    match spec.required_term {
        Some(0) => affinity.push_str(&format!(
            "  podAffinity:\n    requiredDuringSchedulingIgnoredDuringExecution: [{own_app}{ZONE}}}]\n"
        )),
        Some(key) => anti.push_str(&format!(
            "    requiredDuringSchedulingIgnoredDuringExecution: [{own_app}{}}}]\n",
            if key == 1 { ZONE } else { HOSTNAME }
        )),
        None => {}
    }
    if !anti.is_empty() {
        affinity.push_str(&format!("  podAntiAffinity:\n{anti}"));
    }
    if !affinity.is_empty() {
        yaml.push_str(&format!("affinity:\n{affinity}"));
    }
    if !yaml.is_empty() {
        b = b.spec_yaml(&yaml);
    }
    b
}

/// The node `i` of a generated cluster.
fn build_node(i: usize, n: &NodeSpec) -> crate::model::NodeModel {
    let name = format!("node-{i:04}");
    let mut b = node(&name)
        .capacity(&n.cpu.to_string(), &format!("{}Gi", n.memory_gi))
        .label(HOSTNAME, &name);
    if let Some(z) = n.zone {
        b = b.label(ZONE, &format!("zone-{z}"));
    }
    if n.cordoned {
        b = b.unschedulable();
    }
    if let Some((key, effect)) = n.taint {
        b = b.taint(key, "true", effect);
    }
    if n.dongles > 0 {
        b = b.alloc(DONGLE, &n.dongles.to_string());
    }
    b.build()
}

/// Claims `c0` to `c2` (namespace default), bound: `c0` to a CSI volume of the EBS driver
/// that any node can reach, `c1` to one reachable from zone-0 only, `c2` to an in-tree AWS
/// EBS volume. With `csi_limits`, every fifth node has a CSINode limiting the EBS driver to
/// 0, 1 or 2 volumes (and the in-tree one migrated there).
fn add_storage(cache: &mut Cache, nodes: usize, csi_limits: bool) {
    use crate::model::volume::{ClaimModel, CsiNodeModel, VolumeModel};
    let sources = [
        "csi: {driver: ebs.csi.aws.com, volumeHandle: h0}".to_string(),
        format!(
            "csi: {{driver: ebs.csi.aws.com, volumeHandle: h1}}, nodeAffinity: {{required: {{nodeSelectorTerms: [{{matchExpressions: [{{key: {ZONE}, operator: In, values: [zone-0]}}]}}]}}}}"
        ),
        "awsElasticBlockStore: {volumeID: h2}".to_string(),
    ];
    for (i, source) in sources.iter().enumerate() {
        let claim = format!(
            "{{metadata: {{name: c{i}, namespace: default, annotations: {{pv.kubernetes.io/bind-completed: 'yes'}}}}, spec: {{volumeName: pv-c{i}}}, status: {{phase: Bound}}}}"
        );
        let claim = serde_yaml::from_str(&claim).expect("a claim");
        cache.upsert_claim(ClaimModel::from_api(&claim).expect("a claim"));
        let volume = format!(
            "{{metadata: {{name: pv-c{i}}}, spec: {{{source}, claimRef: {{namespace: default, name: c{i}}}}}, status: {{phase: Bound}}}}"
        );
        let volume = serde_yaml::from_str(&volume).expect("a volume");
        cache.upsert_volume(VolumeModel::from_api(&volume).expect("a volume"));
    }
    if csi_limits {
        for i in (0..nodes).step_by(5) {
            let csi_node = format!(
                "{{metadata: {{name: node-{i:04}}}, spec: {{drivers: [{{name: ebs.csi.aws.com, nodeID: n, allocatable: {{count: {}}}}}]}}}}",
                i / 5 % 3
            );
            let csi_node = serde_yaml::from_str(&csi_node).expect("a CSINode");
            cache.upsert_csi_node(CsiNodeModel::from_api(&csi_node));
        }
    }
}

fn cluster_cache(nodes: &[NodeSpec], placed: &[(usize, PodSpec)], csi_limits: bool) -> Cache {
    let mut cache = Cache::new();
    for (i, n) in nodes.iter().enumerate() {
        cache.upsert_node(build_node(i, n));
    }
    add_storage(&mut cache, nodes.len(), csi_limits);
    for (k, (at, spec)) in placed.iter().enumerate() {
        let name = format!("node-{:04}", at % nodes.len());
        let p = build_pod(&format!("placed-{k}"), spec).on(&name).build();
        cache.add_bound_pod(p).expect("a placed pod is accepted");
    }
    cache
}

fn cluster(nodes: &[NodeSpec], placed: &[(usize, PodSpec)], csi_limits: bool) -> Snapshot {
    let mut snapshot = Snapshot::default();
    cluster_cache(nodes, placed, csi_limits).update_snapshot(&mut snapshot);
    snapshot
}

/// A step of a stream of cycles over one cluster.
#[derive(Debug, Clone)]
enum Step {
    /// A pod of the class at this index of the stream's classes, placed where the cycle
    /// chose.
    Pod(usize),
    /// The node (index modulo their number) replaced with another size.
    Resize(usize, NodeSpec),
    /// The pod placed this many placements ago (modulo their number) deleted.
    Delete(usize),
    /// A node added (the snapshot's node list laid out again).
    Add(NodeSpec),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        12 => (0usize..6).prop_map(Step::Pod),
        1 => (0usize..1000, node_spec()).prop_map(|(i, n)| Step::Resize(i, n)),
        1 => (0usize..1000).prop_map(Step::Delete),
        1 => node_spec().prop_map(Step::Add),
    ]
}

/// A class of pods for a stream: most ask only resources, from few sizes, so that classes
/// repeat; some are the constrained workload's.
fn stream_class() -> impl Strategy<Value = PodSpec> {
    prop_oneof![
        4 => (
            prop_oneof![Just(0u32), Just(250), Just(1000), Just(2500)],
            prop_oneof![Just(0u32), Just(512), Just(3000)],
        )
            .prop_map(|(milli_cpu, memory_mi)| PodSpec {
                milli_cpu,
                memory_mi,
                app: 0,
                spread: None,
                anti_affinity: false,
                tolerates: false,
                zone_selector: None,
                dongles: 0,
                volume: None,
                required_term: None,
                soft_spread: false,
            }),
        1 => pod_spec(),
        // Pods whose other plugins answer by domain: spread over zones, anti-affinity by
        // host, nothing else.
        2 => (pod_spec(), 1u8..3, prop::bool::ANY).prop_map(|(p, skew, anti_affinity)| PodSpec {
            spread: Some(skew),
            anti_affinity,
            tolerates: false,
            zone_selector: None,
            ..p
        }),
    ]
}

/// A node of 8 cpu and 16Gi, in one of three zones but for some: many nodes with the best
/// total at once, as in a large cluster of like nodes.
fn like_node() -> impl Strategy<Value = NodeSpec> {
    prop::option::weighted(0.95, 0u8..3).prop_map(|zone| NodeSpec {
        cpu: 8,
        memory_gi: 16,
        zone,
        cordoned: false,
        taint: None,
        dongles: 0,
    })
}

/// A pod spread over zones (filtered or scored), half of them also kept apart by host from
/// their like, some with a required term about their like, asking one of a few amounts.
fn spread_class() -> impl Strategy<Value = PodSpec> {
    (
        prop_oneof![Just(0u32), Just(500), Just(1000)],
        prop_oneof![Just(0u32), Just(1024)],
        0u8..3,
        1u8..3,
        prop::bool::ANY,
        prop::option::weighted(0.3, 0u8..3),
        prop::bool::ANY,
    )
        .prop_map(
            |(milli_cpu, memory_mi, app, skew, anti_affinity, required_term, soft_spread)| {
                PodSpec {
                    milli_cpu,
                    memory_mi,
                    app,
                    spread: Some(skew),
                    anti_affinity,
                    tolerates: false,
                    zone_selector: None,
                    dongles: 0,
                    volume: None,
                    required_term,
                    soft_spread,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn every_node_examined_matches_the_plain_cycle(
        nodes in prop::collection::vec(node_spec(), 1..600),
        placed in prop::collection::vec((0usize..600, pod_spec()), 0..400),
        incoming in prop::collection::vec(pod_spec(), 1..4),
        csi_limits in prop::bool::ANY,
    ) {
        let snapshot = cluster(&nodes, &placed, csi_limits);
        let profile = default_profile();
        let options = CycleOptions {
            pool: None,
            percentage_of_nodes_to_score: 100,
            top_scores: 4,
            nominated: None,
            waiting: None,
            preempt_extenders: false,
            preemption_running: false,
        };
        let mut memory = CycleMemory::default();
        for (i, spec) in incoming.iter().enumerate() {
            let p = build_pod(&format!("incoming-{i}"), spec).build();
            let expected = reference(profile, &snapshot, &p, options.top_scores);
            let got = outcome(profile, &snapshot, &p, &mut memory, &options);
            prop_assert_eq!(got, expected);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// A stream of cycles, pods placed where they were told and nodes changing between
    /// them: the cycle, which keeps verdicts and scores for pods asking the same resources
    /// (the class index), decides each pod as the plainly written cycle does.
    #[test]
    fn a_stream_of_pods_alike_matches_the_plain_cycle(
        nodes in prop::collection::vec(node_spec(), 1..160),
        plain_nodes in prop::bool::weighted(0.7),
        classes in prop::collection::vec(stream_class(), 6),
        steps in prop::collection::vec(step(), 1..80),
        csi_limits in prop::bool::ANY,
    ) {
        stream_matches(nodes, plain_nodes, classes, steps, csi_limits)?;
    }

    #[test]
    fn spread_pods_over_nodes_alike_match_the_plain_cycle(
        nodes in prop::collection::vec(like_node(), 20..300),
        classes in prop::collection::vec(spread_class(), 6),
        steps in prop::collection::vec(step(), 1..120),
    ) {
        stream_matches(nodes, true, classes, steps, false)?;
    }
}

/// Places a stream of pods of `classes` (with `steps` changing the cluster between them)
/// on `nodes` (stripped of cordons and taints when `plain_nodes`), each with the cycle and
/// with the plainly written reference, and fails at the first difference.
fn stream_matches(
    nodes: Vec<NodeSpec>,
    plain_nodes: bool,
    classes: Vec<PodSpec>,
    steps: Vec<Step>,
    csi_limits: bool,
) -> Result<(), TestCaseError> {
    let strip = |mut n: NodeSpec| {
        if plain_nodes {
            n.cordoned = false;
            n.taint = None;
        }
        n
    };
    let mut specs: Vec<NodeSpec> = nodes.into_iter().map(strip).collect();
    let mut cache = cluster_cache(&specs, &[], csi_limits);
    let mut snapshot = Snapshot::default();
    cache.update_snapshot(&mut snapshot);
    let profile = default_profile();
    let options = CycleOptions {
        pool: None,
        percentage_of_nodes_to_score: 100,
        top_scores: 5,
        nominated: None,
        waiting: None,
        preempt_extenders: false,
        preemption_running: false,
    };
    let mut memory = CycleMemory::default();
    let mut placed: Vec<Arc<PodInfo>> = Vec::new();
    for (k, step) in steps.into_iter().enumerate() {
        match step {
            Step::Pod(class) => {
                let p = build_pod(&format!("stream-{k}"), &classes[class]).build();
                let expected = reference(profile, &snapshot, &p, options.top_scores);
                let got = outcome(profile, &snapshot, &p, &mut memory, &options);
                prop_assert_eq!(&got, &expected, "pod {} of class {}", k, class);
                if let Some(node) = got.node {
                    let p = build_pod(&format!("stream-{k}"), &classes[class])
                        .on(&node)
                        .build();
                    cache.add_bound_pod(p.clone()).expect("placed");
                    placed.push(p);
                }
            }
            Step::Resize(i, n) => {
                let i = i % specs.len();
                specs[i] = strip(n);
                cache.upsert_node(build_node(i, &specs[i]));
            }
            Step::Delete(ago) if !placed.is_empty() => {
                let p = placed.remove(placed.len() - 1 - ago % placed.len());
                cache.remove_pod(&p.namespace, &p.name);
            }
            Step::Delete(_) => {}
            Step::Add(n) => {
                specs.push(strip(n));
                cache.upsert_node(build_node(specs.len() - 1, &specs[specs.len() - 1]));
            }
        }
        cache.update_snapshot(&mut snapshot);
    }
    Ok(())
}

/// The best total, its ties told apart as the cycle documents it: by name with a fixed
/// order, else by the smallest mix of the pod's hash and the node's, the first of equals.
fn reference_select_host(
    pod: &PodInfo,
    feasible: &[&NodeInfo],
    totals: &[i64],
    fixed: bool,
) -> usize {
    let best = totals.iter().copied().max().unwrap_or(0);
    let ties: Vec<usize> = (0..feasible.len()).filter(|&i| totals[i] == best).collect();
    if fixed {
        return ties
            .into_iter()
            .min_by_key(|&i| &feasible[i].node.name)
            .unwrap_or(0);
    }
    let mut h = rustc_hash::FxHasher::default();
    pod.namespace.hash(&mut h);
    pod.name.hash(&mut h);
    let pod_hash = h.finish();
    ties.into_iter()
        .min_by_key(|&i| {
            (feasible[i].node.name_hash ^ pod_hash).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        })
        .unwrap_or(0)
}
