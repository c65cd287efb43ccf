//! PodTopologySpread: arguments, hard constraints at every edge, soft scores checked by hand
//! against kube-scheduler's formula.

use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use serde_json::json;

use super::*;
use crate::cache::{Cache, NodeInfo};
use crate::framework::{Code, CycleState, NodeScore, PreFilterResult, Status};
use crate::model::selector::LabelSelector;
use crate::testing::{PodBuilder, node, pod, status_by_domain};

const ZONE: &str = "zone";

// ---------------------------------------------------------------------------------------
// Fixtures.

fn app(value: &str) -> meta::LabelSelector {
    meta::LabelSelector {
        match_labels: Some([("app".to_string(), value.to_string())].into()),
        match_expressions: None,
    }
}

fn tsc(
    max_skew: i32,
    key: &str,
    when: &str,
    selector: Option<meta::LabelSelector>,
) -> core::TopologySpreadConstraint {
    core::TopologySpreadConstraint {
        max_skew,
        topology_key: key.to_string(),
        when_unsatisfiable: when.to_string(),
        label_selector: selector,
        ..Default::default()
    }
}

fn hard(max_skew: i32, key: &str) -> core::TopologySpreadConstraint {
    tsc(max_skew, key, "DoNotSchedule", Some(app("web")))
}

fn soft(max_skew: i32, key: &str) -> core::TopologySpreadConstraint {
    tsc(max_skew, key, "ScheduleAnyway", Some(app("web")))
}

fn spread(b: PodBuilder, constraints: Vec<core::TopologySpreadConstraint>) -> PodBuilder {
    b.with_spec(|s| s.topology_spread_constraints = Some(constraints))
}

/// The incoming pod, labelled `app=web`.
fn web(constraints: Vec<core::TopologySpreadConstraint>) -> Arc<PodInfo> {
    spread(pod("p").label("app", "web"), constraints).build()
}

/// A pod placed on `node`, labelled `app=<app>`.
fn placed(name: &str, node: &str, app: &str) -> Arc<PodInfo> {
    pod(name).label("app", app).on(node).build()
}

/// `n` pods labelled `app=web` on `node`.
fn webs(node: &str, n: usize) -> Vec<Arc<PodInfo>> {
    (0..n)
        .map(|i| placed(&format!("{node}-web{i}"), node, "web"))
        .collect()
}

fn zone_node(name: &str, zone: &str) -> NodeModel {
    node(name)
        .label(ZONE, zone)
        .label(HOSTNAME_LABEL, name)
        .build()
}

fn host_node(name: &str) -> NodeModel {
    node(name).label(HOSTNAME_LABEL, name).build()
}

fn cache(nodes: Vec<NodeModel>, pods: Vec<Arc<PodInfo>>) -> Cache {
    let mut cache = Cache::new();
    for n in nodes {
        cache.upsert_node(n);
    }
    for p in pods {
        cache.add_bound_pod(p).unwrap();
    }
    cache
}

fn snap(cache: &mut Cache) -> Snapshot {
    let mut s = Snapshot::default();
    cache.update_snapshot(&mut s);
    s
}

fn snapshot(nodes: Vec<NodeModel>, pods: Vec<Arc<PodInfo>>) -> Snapshot {
    snap(&mut cache(nodes, pods))
}

fn system() -> PodTopologySpread {
    PodTopologySpread::new(&PodTopologySpreadArgs::default()).unwrap()
}

fn list(defaults: serde_json::Value) -> PodTopologySpread {
    let args: PodTopologySpreadArgs = decode_args(Some(&json!({
        "defaultingType": "List",
        "defaultConstraints": defaults,
    })))
    .unwrap();
    PodTopologySpread::new(&args).unwrap()
}

/// Runs PreFilter, then Filter on the named nodes; `Err` with PreFilter's code when it did
/// not succeed.
fn run_filter(
    pl: &PodTopologySpread,
    pod: &PodInfo,
    snap: &Snapshot,
    names: &[&str],
) -> Result<Vec<Status>, Code> {
    let mut state = CycleState::new();
    let (result, status) = pl.pre_filter(&mut state, pod, snap);
    assert_eq!(result, PreFilterResult::default());
    if !status.is_success() {
        return Err(status.code());
    }
    Ok(names
        .iter()
        .map(|n| pl.filter(&state, pod, snap.get(n).unwrap()))
        .collect())
}

fn ok() -> Status {
    Status::success()
}

fn skewed() -> Status {
    Status::unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH)
}

fn unlabelled() -> Status {
    Status::unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH)
}

/// Runs PreScore with the named feasible nodes, Score on each, then NormalizeScore; returns
/// the raw and the normalized scores, or PreScore's code when it did not succeed.
fn run_score(
    pl: &PodTopologySpread,
    pod: &PodInfo,
    snap: &Snapshot,
    feasible: &[&str],
) -> Result<(Vec<i64>, Vec<i64>), Code> {
    let nodes: Vec<&NodeInfo> = feasible.iter().map(|n| &**snap.get(n).unwrap()).collect();
    let mut state = CycleState::new();
    let status = pl.pre_score(&mut state, pod, snap, &nodes);
    if !status.is_success() {
        return Err(status.code());
    }
    let raw: Vec<i64> = nodes
        .iter()
        .map(|n| pl.score(&state, pod, n).unwrap())
        .collect();
    let mut scores: Vec<NodeScore> = raw
        .iter()
        .enumerate()
        .map(|(index, &score)| NodeScore { index, score })
        .collect();
    assert!(pl.normalize(&state, pod, &mut scores).is_success());
    Ok((raw, scores.iter().map(|s| s.score).collect()))
}

// ---------------------------------------------------------------------------------------
// Arguments.

fn args_error(args: serde_json::Value) -> ArgsError {
    decode_args::<PodTopologySpreadArgs>(Some(&args)).unwrap_err()
}

#[test]
fn args_default_to_system_defaulting() {
    let none: PodTopologySpreadArgs = decode_args(None).unwrap();
    assert_eq!(none.defaulting_type, DefaultingType::System);
    assert!(none.default_constraints.is_empty());
    let empty: PodTopologySpreadArgs = decode_args(Some(&json!({"defaultingType": ""}))).unwrap();
    assert_eq!(empty, none);
    let pl = system();
    assert!(pl.system_defaulted);
    let got: Vec<_> = pl
        .defaults
        .iter()
        .map(|c| (c.max_skew, c.topology_key.as_str(), c.when_unsatisfiable))
        .collect();
    assert_eq!(
        got,
        [
            (
                3,
                "kubernetes.io/hostname",
                WhenUnsatisfiable::ScheduleAnyway
            ),
            (
                5,
                "topology.kubernetes.io/zone",
                WhenUnsatisfiable::ScheduleAnyway
            ),
        ]
    );
}

#[test]
fn args_list_defaulting_keeps_fields() {
    let pl = list(json!([
        {"maxSkew": 2, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule",
         "minDomains": 3, "nodeAffinityPolicy": "Ignore", "nodeTaintsPolicy": "Honor"},
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"},
    ]));
    assert!(!pl.system_defaulted);
    let c = &pl.defaults[0];
    assert_eq!(c.when_unsatisfiable, WhenUnsatisfiable::DoNotSchedule);
    assert_eq!(c.min_domains, Some(3));
    assert_eq!(c.node_affinity_policy, InclusionPolicy::Ignore);
    assert_eq!(c.node_taints_policy, InclusionPolicy::Honor);
    let d = &pl.defaults[1];
    assert_eq!(d.when_unsatisfiable, WhenUnsatisfiable::ScheduleAnyway);
    assert_eq!(d.node_affinity_policy, InclusionPolicy::Honor);
    assert_eq!(d.node_taints_policy, InclusionPolicy::Ignore);
    let empty_list = list(json!([]));
    assert!(empty_list.defaults.is_empty());
}

#[test]
fn args_validation_names_the_field() {
    let c = |extra: serde_json::Value| {
        let mut base =
            json!({"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"});
        base.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        base
    };
    let cases = [
        (
            json!({"defaultConstraints": [c(json!({}))]}),
            "defaultingType",
            "Invalid value: \"System\": when .defaultConstraints are not empty",
        ),
        (
            json!({"defaultingType": "List", "defaultConstraints": [c(json!({"maxSkew": 0}))]}),
            "defaultConstraints[0].maxSkew",
            "Invalid value: 0: not in valid range (0, inf)",
        ),
        (
            json!({"defaultingType": "List", "defaultConstraints": [c(json!({"maxSkew": -1}))]}),
            "defaultConstraints[0].maxSkew",
            "Invalid value: -1: not in valid range (0, inf)",
        ),
        (
            json!({"defaultingType": "List", "defaultConstraints": [c(json!({"topologyKey": ""}))]}),
            "defaultConstraints[0].topologyKey",
            "Required value: can not be empty",
        ),
        (
            json!({"defaultingType": "List", "defaultConstraints": [c(json!({"whenUnsatisfiable": ""}))]}),
            "defaultConstraints[0].whenUnsatisfiable",
            "Required value: can not be empty",
        ),
        (
            json!({"defaultingType": "List", "defaultConstraints": [c(json!({"whenUnsatisfiable": "Never"}))]}),
            "defaultConstraints[0].whenUnsatisfiable",
            "Unsupported value: \"Never\": supported values: \"DoNotSchedule\", \"ScheduleAnyway\"",
        ),
        (
            json!({"defaultingType": "List", "defaultConstraints": [c(json!({"minDomains": 0}))]}),
            "defaultConstraints[0].minDomains",
            "Invalid value: 0: must be greater than zero",
        ),
        (
            json!({"defaultingType": "List", "defaultConstraints": [c(json!({"labelSelector": {}}))]}),
            "defaultConstraints[0].labelSelector",
            "Forbidden: constraint must not define a selector, as they deduced for each pod",
        ),
        (
            json!({"defaultingType": "List", "defaultConstraints": [c(json!({"nodeTaintsPolicy": "Always"}))]}),
            "defaultConstraints[0].nodeTaintsPolicy",
            "Unsupported value: \"Always\": supported values: \"Honor\", \"Ignore\"",
        ),
        (
            json!({"defaultingType": "List", "defaultConstraints": [
                c(json!({})),
                c(json!({"whenUnsatisfiable": "ScheduleAnyway"})),
                c(json!({"maxSkew": 4})),
            ]}),
            "defaultConstraints[2]",
            "Duplicate value: \"{zone, DoNotSchedule}\"",
        ),
    ];
    for (args, field, reason) in cases {
        let err = args_error(args.clone());
        assert_eq!(
            (err.field.as_str(), err.reason.as_str()),
            (field, reason),
            "{args}"
        );
    }
}

#[test]
fn args_topology_key_must_be_a_qualified_name() {
    for good in [
        "zone",
        "topology.kubernetes.io/zone",
        "a",
        "A_b-c.9",
        "x.y/Z",
    ] {
        assert!(validate_qualified_name(good).is_ok(), "{good}");
    }
    for bad in [
        "-zone",
        "zone-",
        "a/b/c",
        "/zone",
        "Example.com/zone",
        "example.com/",
        "zo ne",
        &"x".repeat(64),
    ] {
        assert!(validate_qualified_name(bad).is_err(), "{bad}");
        let err = args_error(json!({"defaultingType": "List", "defaultConstraints": [
            {"maxSkew": 1, "topologyKey": bad, "whenUnsatisfiable": "DoNotSchedule"}
        ]}));
        assert_eq!(err.field, "defaultConstraints[0].topologyKey");
    }
}

#[test]
fn args_reject_unknown_fields_and_values() {
    assert_eq!(
        args_error(json!({"defaultingType": "Sometimes"})).field,
        "defaultingType"
    );
    assert_eq!(args_error(json!({"spread": true})).field, "spread");
    assert_eq!(
        args_error(
            json!({"defaultingType": "List", "defaultConstraints": [{"maxSkew": 1, "key": "zone"}]})
        )
        .field,
        "defaultConstraints[0].key"
    );
    assert_eq!(
        args_error(json!({"kind": "NodeAffinityArgs"})).field,
        "kind"
    );
    assert!(
        decode_args::<PodTopologySpreadArgs>(Some(&json!({"kind": "PodTopologySpreadArgs", "apiVersion": "kubescheduler.config.k8s.io/v1"})))
            .is_ok()
    );
}

#[test]
fn registered_under_its_kube_name() {
    let registry = crate::plugins::registry();
    let factory = registry.get("PodTopologySpread").unwrap();
    assert_eq!(factory(None).unwrap().name(), "PodTopologySpread");
    assert!(factory(Some(&json!({"defaultingType": "Bogus"}))).is_err());
}

// ---------------------------------------------------------------------------------------
// Hard constraints.

#[test]
fn skew_equal_to_max_skew_passes_and_one_more_fails() {
    let p = web(vec![hard(2, ZONE)]);
    let nodes = || vec![zone_node("n1", "a"), zone_node("n2", "b")];
    // a: 1 + 1 (self) - 0 (min) = 2 == maxSkew.
    let s = snapshot(nodes(), webs("n1", 1));
    assert_eq!(
        run_filter(&system(), &p, &s, &["n1", "n2"]),
        Ok(vec![ok(), ok()])
    );
    // a: 2 + 1 - 0 = 3 > maxSkew.
    let s = snapshot(nodes(), webs("n1", 2));
    assert_eq!(
        run_filter(&system(), &p, &s, &["n1", "n2"]),
        Ok(vec![skewed(), ok()])
    );
}

#[test]
fn global_minimum_is_the_least_crowded_domain() {
    let p = web(vec![hard(1, ZONE)]);
    let mut pods = webs("n1", 3);
    pods.extend(webs("n2", 2));
    pods.extend(webs("n3", 2));
    let s = snapshot(
        vec![
            zone_node("n1", "a"),
            zone_node("n2", "b"),
            zone_node("n3", "c"),
        ],
        pods,
    );
    // min = 2: a 3+1-2 = 2 > 1; b and c 2+1-2 = 1.
    assert_eq!(
        run_filter(&system(), &p, &s, &["n1", "n2", "n3"]),
        Ok(vec![skewed(), ok(), ok()])
    );
}

#[test]
fn incoming_pod_counts_only_when_it_matches_its_own_selector() {
    let nodes = || vec![zone_node("n1", "a"), zone_node("n2", "b")];
    let s = snapshot(nodes(), webs("n1", 2));
    // Not matching: a 2 + 0 - 0 = 2 == maxSkew.
    let other = spread(pod("p").label("app", "db"), vec![hard(2, ZONE)]).build();
    assert_eq!(
        run_filter(&system(), &other, &s, &["n1", "n2"]),
        Ok(vec![ok(), ok()])
    );
    // Matching: a 2 + 1 - 0 = 3.
    let same = web(vec![hard(2, ZONE)]);
    assert_eq!(
        run_filter(&system(), &same, &s, &["n1", "n2"]),
        Ok(vec![skewed(), ok()])
    );
}

#[test]
fn min_domains_below_the_domain_count_makes_the_minimum_zero() {
    let s = snapshot(
        vec![zone_node("n1", "a"), zone_node("n2", "b")],
        [webs("n1", 1), webs("n2", 1)].concat(),
    );
    let with_min = |m: Option<i32>| {
        let mut c = hard(1, ZONE);
        c.min_domains = m;
        web(vec![c])
    };
    // Two eligible domains, min 1: 1 + 1 - 1 = 1.
    for m in [None, Some(1), Some(2)] {
        assert_eq!(
            run_filter(&system(), &with_min(m), &s, &["n1", "n2"]),
            Ok(vec![ok(), ok()]),
            "minDomains {m:?}"
        );
    }
    // Fewer domains (2) than minDomains (3): min 0, 1 + 1 - 0 = 2.
    assert_eq!(
        run_filter(&system(), &with_min(Some(3)), &s, &["n1", "n2"]),
        Ok(vec![skewed(), skewed()])
    );
}

#[test]
fn min_domains_counts_domains_with_zero_matching_pods() {
    // Domain b is eligible though empty: with minDomains 2 the minimum is b's 0, not forced.
    let s = snapshot(
        vec![
            zone_node("n1", "a"),
            zone_node("n2", "b"),
            zone_node("n3", "c"),
        ],
        [webs("n1", 1), webs("n3", 1)].concat(),
    );
    let mut c = hard(1, ZONE);
    c.min_domains = Some(3);
    assert_eq!(
        run_filter(&system(), &web(vec![c]), &s, &["n1", "n2", "n3"]),
        Ok(vec![skewed(), ok(), skewed()])
    );
}

#[test]
fn nodes_missing_a_key_are_rejected_as_unresolvable_and_not_counted() {
    let n1 = node("n1").label(ZONE, "a").label("rack", "r1").build();
    let n2 = node("n2").label(ZONE, "b").build();
    let n3 = node("n3").label("rack", "r1").build();
    let s = snapshot(vec![n1, n2, n3], [webs("n1", 1), webs("n3", 3)].concat());
    let p = web(vec![hard(1, ZONE), hard(1, "rack")]);
    // Only n1 is eligible: zone {a: 1}, rack {r1: 1}; n2's empty zone b is not a domain
    // (else the minimum would be 0 and n1 would fail), n3's pods are not counted.
    assert_eq!(
        run_filter(&system(), &p, &s, &["n1", "n2", "n3"]),
        Ok(vec![ok(), unlabelled(), unlabelled()])
    );
    assert_eq!(
        unlabelled().reasons(),
        ["node(s) didn't match pod topology spread constraints (missing required label)"]
    );
    assert_eq!(
        skewed().reasons(),
        ["node(s) didn't match pod topology spread constraints"]
    );
}

#[test]
fn constraints_are_checked_in_order() {
    // n1 lacks a rack label, so it is not eligible, but its zone a is, through n2's 5 pods.
    let s = snapshot(
        vec![
            node("n1").label(ZONE, "a").build(),
            node("n2").label(ZONE, "a").label("rack", "r1").build(),
            node("n3").label(ZONE, "b").label("rack", "r2").build(),
        ],
        webs("n2", 5),
    );
    // Zone first: a 5 + 1 - 0 > 1 rejects n1 before its missing rack label is seen.
    let p = web(vec![hard(1, ZONE), hard(1, "rack")]);
    assert_eq!(run_filter(&system(), &p, &s, &["n1"]), Ok(vec![skewed()]));
    // Rack first: the missing label is seen first.
    let p = web(vec![hard(1, "rack"), hard(1, ZONE)]);
    assert_eq!(
        run_filter(&system(), &p, &s, &["n1"]),
        Ok(vec![unlabelled()])
    );
}

/// n1 (zone a, disk=ssd) holds one matching pod, n2 (zone b) is empty; the pod matches its
/// selector and maxSkew is 1. If n2 is eligible, min is 0 and n1 fails (1+1-0); if not, min
/// is 1 and n1 passes (1+1-1).
fn affinity_cluster() -> Snapshot {
    snapshot(
        vec![
            node("n1").label(ZONE, "a").label("disk", "ssd").build(),
            node("n2").label(ZONE, "b").build(),
        ],
        webs("n1", 1),
    )
}

#[test]
fn node_affinity_policy_honor_excludes_nodes_the_pod_cannot_use() {
    let s = affinity_cluster();
    let by_selector = |policy: Option<&str>| {
        let mut c = hard(1, ZONE);
        c.node_affinity_policy = policy.map(String::from);
        spread(
            pod("p").label("app", "web").node_selector("disk", "ssd"),
            vec![c],
        )
        .build()
    };
    // Honor is the default.
    for policy in [None, Some("Honor")] {
        assert_eq!(
            run_filter(&system(), &by_selector(policy), &s, &["n1"]),
            Ok(vec![ok()])
        );
    }
    assert_eq!(
        run_filter(&system(), &by_selector(Some("Ignore")), &s, &["n1"]),
        Ok(vec![skewed()])
    );

    let by_affinity = |policy: &str| {
        spread(pod("p").label("app", "web"), vec![])
            .spec_yaml(&format!(
                r#"
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
      - matchExpressions:
        - {{key: disk, operator: In, values: [ssd]}}
topologySpreadConstraints:
- maxSkew: 1
  topologyKey: zone
  whenUnsatisfiable: DoNotSchedule
  labelSelector: {{matchLabels: {{app: web}}}}
  nodeAffinityPolicy: {policy}
"#
            ))
            .build()
    };
    assert_eq!(
        run_filter(&system(), &by_affinity("Honor"), &s, &["n1"]),
        Ok(vec![ok()])
    );
    assert_eq!(
        run_filter(&system(), &by_affinity("Ignore"), &s, &["n1"]),
        Ok(vec![skewed()])
    );
}

#[test]
fn node_taints_policy_honor_excludes_untolerated_blocking_taints() {
    let cluster = |effect: &str| {
        snapshot(
            vec![
                node("n1").label(ZONE, "a").build(),
                node("n2")
                    .label(ZONE, "b")
                    .taint("dedicated", "gpu", effect)
                    .build(),
            ],
            webs("n1", 1),
        )
    };
    let p = |policy: Option<&str>, tolerate: bool| {
        let mut c = hard(1, ZONE);
        c.node_taints_policy = policy.map(String::from);
        let mut b = pod("p").label("app", "web");
        if tolerate {
            b = b.toleration("dedicated", "Equal", "gpu", "");
        }
        spread(b, vec![c]).build()
    };
    for effect in ["NoSchedule", "NoExecute"] {
        let s = cluster(effect);
        // Ignore is the default: tainted n2 counts, min 0.
        assert_eq!(
            run_filter(&system(), &p(None, false), &s, &["n1"]),
            Ok(vec![skewed()])
        );
        assert_eq!(
            run_filter(&system(), &p(Some("Ignore"), false), &s, &["n1"]),
            Ok(vec![skewed()])
        );
        // Honor: n2 is not eligible unless the pod tolerates the taint.
        assert_eq!(
            run_filter(&system(), &p(Some("Honor"), false), &s, &["n1"]),
            Ok(vec![ok()]),
            "{effect}"
        );
        assert_eq!(
            run_filter(&system(), &p(Some("Honor"), true), &s, &["n1"]),
            Ok(vec![skewed()])
        );
    }
    // PreferNoSchedule does not keep a pod off a node, so it does not exclude it either.
    assert_eq!(
        run_filter(
            &system(),
            &p(Some("Honor"), false),
            &cluster("PreferNoSchedule"),
            &["n1"]
        ),
        Ok(vec![skewed()])
    );
}

#[test]
fn only_live_matching_pods_of_the_same_namespace_count() {
    let mut terminating = (*placed("dying", "n1", "web")).clone();
    terminating.terminating = true;
    let pods = vec![
        pod("elsewhere")
            .namespace("other")
            .label("app", "web")
            .on("n1")
            .build(),
        Arc::new(terminating),
        placed("db", "n1", "db"),
    ];
    let s = snapshot(vec![zone_node("n1", "a"), zone_node("n2", "b")], pods);
    // None of n1's pods counts: 0 + 1 - 0 = 1.
    assert_eq!(
        run_filter(&system(), &web(vec![hard(1, ZONE)]), &s, &["n1"]),
        Ok(vec![ok()])
    );
    // The same pods seen from namespace `other`: one counts, 1 + 1 - 0 = 2.
    let p = spread(
        pod("p").namespace("other").label("app", "web"),
        vec![hard(1, ZONE)],
    )
    .build();
    assert_eq!(run_filter(&system(), &p, &s, &["n1"]), Ok(vec![skewed()]));
}

#[test]
fn a_node_outside_every_domain_counts_zero() {
    // n2 has the key but fails the affinity policy: its domain c is not in the counts, so it
    // is checked as 0 + 1 - min.
    let s = snapshot(
        vec![
            node("n1").label(ZONE, "a").label("disk", "ssd").build(),
            node("n2").label(ZONE, "c").build(),
        ],
        [webs("n1", 1), webs("n2", 4)].concat(),
    );
    let p = spread(
        pod("p").label("app", "web").node_selector("disk", "ssd"),
        vec![hard(1, ZONE)],
    )
    .build();
    assert_eq!(
        run_filter(&system(), &p, &s, &["n1", "n2"]),
        Ok(vec![ok(), ok()])
    );
}

#[test]
fn pre_filter_skips_without_hard_constraints() {
    let s = snapshot(vec![zone_node("n1", "a")], vec![]);
    // Only soft constraints.
    assert_eq!(
        run_filter(&system(), &web(vec![soft(1, ZONE)]), &s, &[]),
        Err(Code::Skip)
    );
    // No constraints, system defaults (all soft), even with a Service selecting the pod.
    let mut c = cache(vec![zone_node("n1", "a")], vec![]);
    c.set_service("default", "svc", [("app", "web")].into_iter().collect());
    let s = snap(&mut c);
    let bare = pod("p").label("app", "web").build();
    assert_eq!(run_filter(&system(), &bare, &s, &[]), Err(Code::Skip));
    // Hard list defaults but nothing selects the pod.
    let pl =
        list(json!([{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]));
    let lonely = pod("p").label("app", "db").build();
    assert_eq!(run_filter(&pl, &lonely, &s, &[]), Err(Code::Skip));
}

fn owned_by(b: PodBuilder, kind: &str, name: &str) -> Arc<PodInfo> {
    let mut api = b.api();
    api.metadata.owner_references = Some(vec![meta::OwnerReference {
        api_version: "apps/v1".to_string(),
        kind: kind.to_string(),
        name: name.to_string(),
        uid: format!("uid-{name}"),
        controller: Some(true),
        block_owner_deletion: None,
    }]);
    Arc::new(PodInfo::from_api(&api).unwrap())
}

fn replica_set_cache(nodes: Vec<NodeModel>, pods: Vec<Arc<PodInfo>>) -> Cache {
    let mut c = cache(nodes, pods);
    let selector = LabelSelector::compile(Some(&app("web")), "spec.selector").unwrap();
    c.set_controller("ReplicaSet", "default", "rs1", selector);
    c
}

#[test]
fn hard_list_defaults_use_the_replica_set_selector() {
    let pl =
        list(json!([{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]));
    let mut c = replica_set_cache(
        vec![zone_node("n1", "a"), zone_node("n2", "b")],
        webs("n1", 1),
    );
    let s = snap(&mut c);
    let p = owned_by(pod("p").label("app", "web"), "ReplicaSet", "rs1");
    // a: 1 + 1 - 0 = 2 > 1.
    assert_eq!(
        run_filter(&pl, &p, &s, &["n1", "n2"]),
        Ok(vec![skewed(), ok()])
    );
    // Owned by an unknown ReplicaSet: no selector, no defaults.
    let stray = owned_by(pod("p").label("app", "web"), "ReplicaSet", "rs2");
    assert_eq!(run_filter(&pl, &stray, &s, &[]), Err(Code::Skip));
    // A pod with any constraint of its own (here a soft one) gets no default.
    let own = owned_by(
        spread(pod("p").label("app", "web"), vec![soft(1, ZONE)]),
        "ReplicaSet",
        "rs1",
    );
    assert_eq!(run_filter(&pl, &own, &s, &[]), Err(Code::Skip));
}

#[test]
fn empty_default_selector_means_no_defaults() {
    let pl =
        list(json!([{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]));
    let mut c = cache(vec![zone_node("n1", "a")], vec![]);
    c.set_controller("ReplicaSet", "default", "rs1", LabelSelector::everything());
    let s = snap(&mut c);
    let p = owned_by(pod("p").label("app", "web"), "ReplicaSet", "rs1");
    assert_eq!(run_filter(&pl, &p, &s, &[]), Err(Code::Skip));
}

#[test]
fn filter_without_pre_filter_state_is_an_error() {
    let s = snapshot(vec![zone_node("n1", "a")], vec![]);
    let p = web(vec![hard(1, ZONE)]);
    let status = system().filter(&CycleState::new(), &p, s.get("n1").unwrap());
    assert_eq!(status.code(), Code::Error);
}

#[test]
fn cycle_places_and_reports_as_kube_does() {
    use crate::cycle::{CycleError, CycleMemory, CycleOptions, schedule_one};
    use crate::framework::Profile;
    let pl: Arc<dyn Plugin> = Arc::new(system());
    let profile = Profile {
        scheduler_name: "default-scheduler".into(),
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
    let options = CycleOptions {
        pool: None,
        percentage_of_nodes_to_score: 0,
        top_scores: 3,
        nominated: None,
        waiting: None,
        preempt_extenders: false,
        preemption_running: false,
    };
    let s = snapshot(
        vec![
            zone_node("n1", "a"),
            zone_node("n2", "a"),
            zone_node("n3", "b"),
            host_node("n4"),
        ],
        [webs("n1", 2), webs("n3", 1)].concat(),
    );
    // a = 2, b = 1: n1 and n2 2 + 1 - 1 > 1; n3 1 + 1 - 1 = 1; n4 has no zone.
    let p = web(vec![hard(1, ZONE)]);
    let placement = schedule_one(&profile, &s, &p, &mut CycleMemory::default(), &options).unwrap();
    assert_eq!(&*placement.node, "n3");

    // minDomains 3 with two zones: min 0, so both zones (1 pod each) are too crowded.
    let s = snapshot(
        vec![zone_node("n1", "a"), zone_node("n2", "b"), host_node("n3")],
        [webs("n1", 1), webs("n2", 1)].concat(),
    );
    let mut c = hard(1, ZONE);
    c.min_domains = Some(3);
    let p = web(vec![c]);
    let Err(CycleError::Unschedulable(d)) =
        schedule_one(&profile, &s, &p, &mut CycleMemory::default(), &options)
    else {
        panic!("expected unschedulable");
    };
    assert_eq!(
        d.message(),
        "0/3 nodes are available: 1 node(s) didn't match pod topology spread constraints (missing required label), 2 node(s) didn't match pod topology spread constraints."
    );
    assert!(d.unschedulable_plugins.contains(NAME));
}

// ---------------------------------------------------------------------------------------
// Soft constraints. Raw score = round(sum of count * ln(domains + 2) + maxSkew - 1);
// normalized = 100 * (max + min - raw) / max over the nodes not ignored.

#[test]
fn hostname_spread_two_one_zero_three() {
    let s = snapshot(
        vec![
            host_node("a"),
            host_node("b"),
            host_node("c"),
            host_node("d"),
        ],
        [webs("a", 2), webs("b", 1), webs("d", 3)].concat(),
    );
    // 4 domains: w = ln 6 = 1.7918. a 3.58 -> 4, b 1.79 -> 2, c 0, d 5.38 -> 5.
    // max 5, min 0: a 100*1/5 = 20, b 100*3/5 = 60, c 100, d 0.
    assert_eq!(
        run_score(
            &system(),
            &web(vec![soft(1, HOSTNAME_LABEL)]),
            &s,
            &["a", "b", "c", "d"]
        ),
        Ok((vec![4, 2, 0, 5], vec![20, 60, 100, 0]))
    );
}

#[test]
fn max_skew_dampens_the_differences() {
    let s = snapshot(
        vec![
            host_node("a"),
            host_node("b"),
            host_node("c"),
            host_node("d"),
        ],
        [webs("a", 4), webs("b", 3), webs("c", 2), webs("d", 1)].concat(),
    );
    // w = ln 6; + (3 - 1): a 9.17 -> 9, b 7.38 -> 7, c 5.58 -> 6, d 3.79 -> 4.
    // max 9, min 4: a 100*4/9 = 44, b 100*6/9 = 66, c 100*7/9 = 77, d 100.
    assert_eq!(
        run_score(
            &system(),
            &web(vec![soft(3, HOSTNAME_LABEL)]),
            &s,
            &["a", "b", "c", "d"]
        ),
        Ok((vec![9, 7, 6, 4], vec![44, 66, 77, 100]))
    );
}

#[test]
fn zone_counts_include_pods_on_infeasible_nodes() {
    let s = snapshot(
        vec![
            zone_node("a", "z1"),
            zone_node("b", "z1"),
            zone_node("x", "z2"),
            zone_node("y", "z2"),
        ],
        [webs("a", 4), webs("b", 2), webs("x", 1), webs("y", 3)].concat(),
    );
    // y is not feasible but its pods count: z1 = 6, z2 = 4; 2 domains, w = ln 4 = 1.3863.
    // a, b 8.32 -> 8; x 5.55 -> 6. max 8, min 6: a, b 100*6/8 = 75, x 100.
    assert_eq!(
        run_score(&system(), &web(vec![soft(1, ZONE)]), &s, &["a", "b", "x"]),
        Ok((vec![8, 8, 6], vec![75, 75, 100]))
    );
}

#[test]
fn domains_come_from_feasible_nodes_only() {
    // Zone z3 exists only on the infeasible node: it neither adds to the weight nor gets a
    // count. 2 domains, w = ln 4: a 2*1.386 = 2.77 -> 3, x 0. max 3, min 0: a 0, x 100.
    let s = snapshot(
        vec![
            zone_node("a", "z1"),
            zone_node("x", "z2"),
            zone_node("y", "z3"),
        ],
        [webs("a", 2), webs("y", 7)].concat(),
    );
    assert_eq!(
        run_score(&system(), &web(vec![soft(1, ZONE)]), &s, &["a", "x"]),
        Ok((vec![3, 0], vec![0, 100]))
    );
}

#[test]
fn nodes_missing_a_key_score_zero() {
    let s = snapshot(
        vec![
            host_node("a"),
            node("b").label("n", "b").build(),
            host_node("x"),
            host_node("y"),
        ],
        [webs("a", 4), webs("b", 2), webs("x", 1), webs("y", 3)].concat(),
    );
    // b is ignored; hostname domains = 3 feasible - 1 ignored = 2, w = ln 4 = 1.3863.
    // a 5.55 -> 6, x 1.39 -> 1. max 6, min 1: a 100*1/6 = 16, x 100; b 0.
    assert_eq!(
        run_score(
            &system(),
            &web(vec![soft(1, HOSTNAME_LABEL)]),
            &s,
            &["a", "b", "x"]
        ),
        Ok((vec![6, 0, 1], vec![16, 0, 100]))
    );
}

#[test]
fn a_node_with_one_key_of_two_scores_zero() {
    // Found by fuzz_sim_structured_clusters_fit: b has the first constraint's key, not the
    // second's; PreScore ignored it, so its zone had no count and Score failed (and the pod
    // was retried for ever).
    let s = snapshot(
        vec![
            node("a").label(ZONE, "z1").label("rack", "r1").build(),
            node("b").label(ZONE, "z2").build(),
        ],
        vec![],
    );
    assert_eq!(
        run_score(
            &system(),
            &web(vec![soft(1, ZONE), soft(1, "rack")]),
            &s,
            &["a", "b"]
        ),
        Ok((vec![0, 0], vec![100, 0]))
    );
}

#[test]
fn two_constraints_add_up() {
    // Zone (app=web) and hostname (app=api) with different selectors.
    //          z1            z2
    //   a: web      b: web+api    x: -    y: web, api
    let both = |name: &str, node: &str| {
        pod(name)
            .label("app", "web")
            .label("tier", "api")
            .on(node)
            .build()
    };
    let api = |name: &str, node: &str| pod(name).label("tier", "api").on(node).build();
    let s = snapshot(
        vec![
            zone_node("a", "z1"),
            zone_node("b", "z1"),
            zone_node("x", "z2"),
            zone_node("y", "z2"),
        ],
        vec![
            placed("a1", "a", "web"),
            both("b1", "b"),
            placed("y1", "y", "web"),
            api("y2", "y"),
        ],
    );
    let tier = meta::LabelSelector {
        match_labels: Some([("tier".to_string(), "api".to_string())].into()),
        match_expressions: None,
    };
    let p = spread(
        pod("p").label("app", "web").label("tier", "api"),
        vec![
            soft(1, ZONE),
            tsc(1, HOSTNAME_LABEL, "ScheduleAnyway", Some(tier)),
        ],
    )
    .build();
    // Zone: z1 = 2, z2 = 1, w = ln 4 = 1.3863. Hostname: 0/1/0/1, w = ln 6 = 1.7918.
    // a 2.77 -> 3; b 2.77 + 1.79 = 4.56 -> 5; x 1.39 -> 1; y 1.39 + 1.79 = 3.18 -> 3.
    // max 5, min 1: a 100*3/5 = 60, b 20, x 100, y 60.
    assert_eq!(
        run_score(&system(), &p, &s, &["a", "b", "x", "y"]),
        Ok((vec![3, 5, 1, 3], vec![60, 20, 100, 60]))
    );
}

#[test]
fn equal_counts_and_zero_scores_give_everyone_the_maximum() {
    let s = snapshot(
        vec![host_node("a"), host_node("b"), node("c").build()],
        [webs("a", 1), webs("b", 1)].concat(),
    );
    // c is ignored, so 2 hostname domains, w = ln 4: a, b 1.39 -> 1 each;
    // 100 * (1 + 1 - 1) / 1 = 100; c 0.
    assert_eq!(
        run_score(
            &system(),
            &web(vec![soft(1, HOSTNAME_LABEL)]),
            &s,
            &["a", "b", "c"]
        ),
        Ok((vec![1, 1, 0], vec![100, 100, 0]))
    );
    // No matching pods at all: max 0, every scored node gets 100, the ignored one 0.
    let s = snapshot(
        vec![host_node("a"), host_node("b"), node("c").build()],
        vec![],
    );
    assert_eq!(
        run_score(
            &system(),
            &web(vec![soft(1, HOSTNAME_LABEL)]),
            &s,
            &["a", "b", "c"]
        ),
        Ok((vec![0, 0, 0], vec![100, 100, 0]))
    );
}

#[test]
fn other_namespaces_and_terminating_pods_do_not_score() {
    let mut dying = (*placed("dying", "b", "web")).clone();
    dying.terminating = true;
    let s = snapshot(
        vec![host_node("a"), host_node("b")],
        vec![
            pod("far")
                .namespace("ns1")
                .label("app", "web")
                .on("a")
                .build(),
            placed("a1", "a", "web"),
            placed("b1", "b", "web"),
            placed("b2", "b", "web"),
            Arc::new(dying),
        ],
    );
    // a 1, b 2; w = ln 4: a 1.39 -> 1, b 2.77 -> 3. max 3, min 1: a 100, b 100*1/3 = 33.
    assert_eq!(
        run_score(
            &system(),
            &web(vec![soft(1, HOSTNAME_LABEL)]),
            &s,
            &["a", "b"]
        ),
        Ok((vec![1, 3], vec![100, 33]))
    );
}

/// Three nodes keyed by `node`: a (2 matching, foo label), b (1, foo label), c (1, no foo
/// label, tainted). All three are scored.
fn policy_cluster() -> Snapshot {
    snapshot(
        vec![
            node("a").label("node", "a").label("foo", "").build(),
            node("b").label("node", "b").label("foo", "").build(),
            node("c")
                .label("node", "c")
                .taint("dedicated", "x", "NoSchedule")
                .build(),
        ],
        [webs("a", 2), webs("b", 1), webs("c", 1)].concat(),
    )
}

#[test]
fn inclusion_policies_decide_which_pods_score() {
    let s = policy_cluster();
    let p = |affinity: Option<&str>, taints: Option<&str>, selector: bool| {
        let mut c = soft(1, "node");
        c.node_affinity_policy = affinity.map(String::from);
        c.node_taints_policy = taints.map(String::from);
        let mut b = pod("p").label("app", "web");
        if selector {
            b = b.node_selector("foo", "");
        }
        spread(b, vec![c]).build()
    };
    // Excluding c's pod: counts 2/1/0 over 3 domains, w = ln 5 = 1.6094: a 3.22 -> 3,
    // b 1.61 -> 2, c 0. max 3, min 0: a 0, b 33, c 100.
    let excluded = Ok((vec![3, 2, 0], vec![0, 33, 100]));
    // Counting it: 2/1/1: a 3, b 2, c 2. max 3, min 2: a 100*2/3 = 66, b 100, c 100.
    let counted = Ok((vec![3, 2, 2], vec![66, 100, 100]));
    let all = ["a", "b", "c"];
    assert_eq!(
        run_score(&system(), &p(None, None, true), &s, &all),
        excluded
    );
    assert_eq!(
        run_score(&system(), &p(Some("Ignore"), None, true), &s, &all),
        counted
    );
    assert_eq!(
        run_score(&system(), &p(None, Some("Honor"), false), &s, &all),
        excluded
    );
    assert_eq!(
        run_score(&system(), &p(None, None, false), &s, &all),
        counted
    );
}

#[test]
fn hostname_counts_at_score_ignore_inclusion_policies() {
    // As in kube-scheduler, the per-node count taken at Score counts the node's own pods even
    // when the node itself would be excluded by a policy (here, an untolerated taint).
    let mut c = soft(1, HOSTNAME_LABEL);
    c.node_taints_policy = Some("Honor".to_string());
    let s = snapshot(
        vec![
            host_node("a"),
            node("c")
                .label(HOSTNAME_LABEL, "c")
                .taint("dedicated", "x", "NoSchedule")
                .build(),
        ],
        [webs("a", 1), webs("c", 2)].concat(),
    );
    // w = ln 4: a 1.39 -> 1, c 2.77 -> 3.
    assert_eq!(
        run_score(&system(), &web(vec![c]), &s, &["a", "c"]),
        Ok((vec![1, 3], vec![100, 33]))
    );
}

#[test]
fn system_defaults_via_a_service_spread_nodes_without_zones() {
    let mut c = cache(
        vec![
            host_node("a"),
            host_node("b"),
            host_node("c"),
            host_node("d"),
        ],
        [webs("a", 4), webs("b", 3), webs("c", 2), webs("d", 1)].concat(),
    );
    c.set_service("default", "svc", [("app", "web")].into_iter().collect());
    let s = snap(&mut c);
    let p = pod("p").label("app", "web").build();
    // No node has a zone, yet none is ignored (system defaults do not require every key).
    // Hostname, maxSkew 3, w = ln 6; the zone constraint adds nothing to nodes without the
    // label. a 4*1.79+2 = 9.17 -> 9, b 7.38 -> 7, c 5.58 -> 6, d 3.79 -> 4.
    // max 9, min 4: 44, 66, 77, 100.
    assert_eq!(
        run_score(&system(), &p, &s, &["a", "b", "c", "d"]),
        Ok((vec![9, 7, 6, 4], vec![44, 66, 77, 100]))
    );
    // A Service in another namespace does not select the pod.
    let mut c = cache(vec![host_node("a"), host_node("b")], webs("a", 1));
    c.set_service("other", "svc", [("app", "web")].into_iter().collect());
    assert_eq!(
        run_score(&system(), &p, &snap(&mut c), &["a", "b"]),
        Err(Code::Skip)
    );
}

#[test]
fn system_defaults_via_a_replica_set_treat_missing_zones_as_one_domain() {
    let mut c = replica_set_cache(
        vec![
            node("a")
                .label(HOSTNAME_LABEL, "a")
                .label(crate::cache::ZONE_LABEL, "mars")
                .build(),
            node("b")
                .label(HOSTNAME_LABEL, "b")
                .label(crate::cache::ZONE_LABEL, "mars")
                .build(),
            host_node("c"),
            host_node("d"),
        ],
        [webs("a", 2), webs("c", 1)].concat(),
    );
    let s = snap(&mut c);
    let p = owned_by(pod("p").label("app", "web"), "ReplicaSet", "rs1");
    // Hostname: maxSkew 3, 4 nodes, w = ln 6 = 1.7918.
    // Zone: maxSkew 5, domains {mars, ""} (c and d have no zone), w = ln 4 = 1.3863; mars = 2.
    // a: 2*1.7918 + 2 + 2*1.3863 + 4 = 12.36 -> 12
    // b: 0 + 2 + 2*1.3863 + 4 = 8.77 -> 9
    // c: 1.7918 + 2 = 3.79 -> 4 (no zone label: the zone constraint adds nothing)
    // d: 2
    // max 12, min 2: a 100*2/12 = 16, b 100*5/12 = 41, c 100*10/12 = 83, d 100.
    assert_eq!(
        run_score(&system(), &p, &s, &["a", "b", "c", "d"]),
        Ok((vec![12, 9, 4, 2], vec![16, 41, 83, 100]))
    );
}

#[test]
fn system_defaults_count_nodes_without_a_zone_under_the_empty_zone() {
    // As in kube-scheduler, a node without the zone label counts under the empty value, so
    // its pods land in the domain of a node labelled with an empty zone.
    let zoned = |name: &str, zone: &str| {
        node(name)
            .label(HOSTNAME_LABEL, name)
            .label(crate::cache::ZONE_LABEL, zone)
            .build()
    };
    let mut c = cache(
        vec![zoned("a", "mars"), zoned("e", ""), host_node("c")],
        webs("c", 5),
    );
    c.set_service("default", "svc", [("app", "web")].into_iter().collect());
    let s = snap(&mut c);
    let p = pod("p").label("app", "web").build();
    // Hostname: maxSkew 3, 3 nodes, w = ln 5 = 1.6094. Zone: maxSkew 5, domains {mars, ""}
    // (e and c share the empty one), w = ln 4 = 1.3863, mars = 0, "" = 5 (c's pods).
    // a: 0 + 2 + 0 + 4 = 6; e: 0 + 2 + 5*1.3863 + 4 = 12.93 -> 13;
    // c: 5*1.6094 + 2 = 10.05 -> 10 (no zone label: the zone constraint adds nothing).
    // max 13, min 6: a 100*13/13 = 100, e 100*6/13 = 46, c 100*9/13 = 69.
    assert_eq!(
        run_score(&system(), &p, &s, &["a", "e", "c"]),
        Ok((vec![6, 13, 10], vec![100, 46, 69]))
    );
}

#[test]
fn list_defaults_require_every_key() {
    let pl = list(json!([
        {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"},
        {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"},
    ]));
    let mut c = replica_set_cache(
        vec![zone_node("a", "z1"), zone_node("b", "z2"), host_node("c")],
        [webs("a", 1), webs("c", 5)].concat(),
    );
    let s = snap(&mut c);
    let p = owned_by(pod("p").label("app", "web"), "ReplicaSet", "rs1");
    // c lacks the zone: ignored. Hostname: 2 nodes, w = ln 4 = 1.3863; zone: 2 domains,
    // w = ln 4. a: 1.386 + 1.386 + 1 = 3.77 -> 4; b: 0 + 0 + 1 = 1.
    // max 4, min 1: a 100*1/4 = 25, b 100; c 0.
    assert_eq!(
        run_score(&pl, &p, &s, &["a", "b", "c"]),
        Ok((vec![4, 1, 0], vec![25, 100, 0]))
    );
}

#[test]
fn pre_score_skips_when_nothing_to_score() {
    let s = snapshot(vec![host_node("a")], webs("a", 1));
    // Only hard constraints.
    assert_eq!(
        run_score(&system(), &web(vec![hard(1, ZONE)]), &s, &["a"]),
        Err(Code::Skip)
    );
    // No constraints and nothing selects the pod.
    assert_eq!(
        run_score(&system(), &pod("p").label("app", "web").build(), &s, &["a"]),
        Err(Code::Skip)
    );
    // Hard-only list defaults give no soft constraint.
    let pl =
        list(json!([{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]));
    let mut c = replica_set_cache(vec![zone_node("a", "z")], vec![]);
    let p = owned_by(pod("p").label("app", "web"), "ReplicaSet", "rs1");
    assert_eq!(run_score(&pl, &p, &snap(&mut c), &["a"]), Err(Code::Skip));
    // An empty cluster.
    let mut state = CycleState::new();
    let status = system().pre_score(
        &mut state,
        &web(vec![soft(1, ZONE)]),
        &Snapshot::default(),
        &[],
    );
    assert_eq!(status.code(), Code::Skip);
}

#[test]
fn score_without_pre_score_state_is_an_error() {
    let s = snapshot(vec![host_node("a")], vec![]);
    let p = web(vec![soft(1, HOSTNAME_LABEL)]);
    let state = CycleState::new();
    let err = system().score(&state, &p, s.get("a").unwrap()).unwrap_err();
    assert_eq!(err.code(), Code::Error);
    let mut scores = [NodeScore { index: 0, score: 1 }];
    assert_eq!(
        system().normalize(&state, &p, &mut scores).code(),
        Code::Error
    );
}

/// `app in (web)` written so that the snapshot's pod index cannot serve it: every pod is
/// examined, as kube-scheduler does.
fn app_web_unindexed() -> meta::LabelSelector {
    let expr = |operator: &str, values: Option<Vec<&str>>| meta::LabelSelectorRequirement {
        key: "app".to_string(),
        operator: operator.to_string(),
        values: values.map(|v| v.into_iter().map(str::to_string).collect()),
    };
    meta::LabelSelector {
        match_labels: None,
        match_expressions: Some(vec![
            expr("Exists", None),
            expr("NotIn", Some(vec!["db", "api"])),
        ]),
    }
}

#[test]
fn indexed_counts_equal_a_scan_of_every_pod_as_the_cluster_changes() {
    let apps = ["web", "db", "api"];
    let mut nodes = Vec::new();
    for i in 0..12 {
        let mut n = node(&format!("n{i}"))
            .label(ZONE_LABEL, &format!("z{}", i % 4))
            .label(HOSTNAME_LABEL, &format!("n{i}"));
        if i % 5 == 0 {
            n = n.taint("dedicated", "x", "NoSchedule");
        }
        nodes.push(n.build());
    }
    let mut pods = Vec::new();
    for i in 0..60usize {
        let node = format!("n{}", (i * 7) % 11);
        pods.push(placed(&format!("p{i}"), &node, apps[i % 3]));
    }
    let mut c = cache(nodes, pods.clone());
    let mut s = Snapshot::default();
    c.update_snapshot(&mut s);
    let names: Vec<String> = (0..12).map(|i| format!("n{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let check = |s: &Snapshot, round: usize| {
        for (key, skew, taints) in [
            (ZONE_LABEL, 1, None),
            (HOSTNAME_LABEL, 1, None),
            (ZONE_LABEL, 2, Some("Honor")),
        ] {
            let incoming = |selector| {
                let mut t = tsc(skew, key, "DoNotSchedule", Some(selector));
                t.node_taints_policy = taints.map(str::to_string);
                web(vec![t])
            };
            let indexed = run_filter(&system(), &incoming(app("web")), s, &names);
            let scanned = run_filter(&system(), &incoming(app_web_unindexed()), s, &names);
            assert_eq!(indexed, scanned, "round {round}, {key}, taints {taints:?}");
        }
    };
    check(&s, 0);
    // Pods leave, others arrive, some are assumed: the snapshot is refreshed in place.
    for round in 1..6 {
        for p in pods.iter().skip(round).step_by(7) {
            c.remove_pod(&p.namespace, &p.name);
        }
        for i in 0..5 {
            let node = format!("n{}", (round * 3 + i) % 12);
            let p = placed(&format!("r{round}-{i}"), &node, apps[(round + i) % 3]);
            c.assume_pod(p).unwrap();
        }
        c.update_snapshot(&mut s);
        check(&s, round);
    }
}

// ---------------------------------------------------------------------------------------
// Verdicts by domain.

#[test]
fn verdicts_by_domain_agree_with_filter_on_every_node() {
    // Zones a (2 pods), b (none), c (4 pods), a node without a zone, and a second
    // constraint by host: each node's verdict by domain must be Filter's, first failure
    // first.
    let nodes = vec![
        zone_node("a1", "a"),
        zone_node("a2", "a"),
        zone_node("b1", "b"),
        zone_node("c1", "c"),
        host_node("none"),
    ];
    let mut pods = webs("a1", 2);
    pods.extend(webs("c1", 4));
    let snap = snapshot(nodes, pods);
    let pl = PodTopologySpread::new(&PodTopologySpreadArgs::default()).unwrap();
    for constraints in [
        vec![hard(1, ZONE)],
        vec![hard(3, ZONE)],
        vec![hard(1, HOSTNAME_LABEL), hard(2, ZONE)],
    ] {
        let p = web(constraints);
        let mut state = CycleState::new();
        let (_, status) = pl.pre_filter(&mut state, &p, &snap);
        assert!(status.is_success());
        let verdicts = pl
            .verdict_by_domain(&state, &p, &snap)
            .expect("hard constraints answer by domain");
        let mut rejected = 0;
        for (position, n) in snap.nodes().iter().enumerate() {
            let by_domain = status_by_domain(&verdicts, position);
            let filtered = pl.filter(&state, &p, n);
            assert_eq!(by_domain, filtered, "{}", n.node.name);
            rejected += usize::from(!filtered.is_success());
        }
        assert!(rejected > 0, "the checks rejected some node");
    }
}
