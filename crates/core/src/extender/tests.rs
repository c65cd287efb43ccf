use std::collections::BTreeMap;
use std::sync::Arc;

use super::combine::{Exchange, apply_filter};
use super::protocol::{self, FilterResult, HostPriority};
use super::*;
use crate::framework::Code;
use crate::testing::pod;

fn extender(url: &str) -> Extender {
    Extender {
        url_prefix: url.to_string(),
        filter_verb: Some("filter".to_string()),
        preempt_verb: None,
        prioritize_verb: Some("prioritize".to_string()),
        weight: 2,
        bind_verb: None,
        enable_https: false,
        tls: TlsSettings::default(),
        http_timeout: DEFAULT_HTTP_TIMEOUT,
        node_cache_capable: true,
        managed_resources: Vec::new(),
        ignorable: false,
    }
}

fn names(list: &[&str]) -> Vec<Arc<str>> {
    list.iter().map(|n| Arc::from(*n)).collect()
}

fn kept(list: &[&str]) -> Result<FilterResult, String> {
    Ok(FilterResult {
        node_names: Some(list.iter().map(|n| n.to_string()).collect()),
        ..FilterResult::default()
    })
}

#[test]
fn an_extender_with_managed_resources_is_interested_only_in_pods_using_them() {
    let mut gpu = extender("http://gpu");
    gpu.managed_resources = vec![ManagedResource {
        name: "nvidia.com/gpu".to_string(),
        ignored_by_scheduler: true,
    }];
    let all = extender("http://all");
    let plain = pod("web").req("cpu", "1").build();
    let requests = pod("train").req("nvidia.com/gpu", "1").build();
    let zero = pod("zero").req("nvidia.com/gpu", "0").build();
    let limits = pod("lim")
        .with_spec(|s| {
            let r = s.containers[0]
                .resources
                .get_or_insert_with(Default::default);
            r.limits.get_or_insert_with(Default::default).insert(
                "nvidia.com/gpu".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("1".to_string()),
            );
        })
        .build();
    let init = pod("init")
        .with_spec(|s| {
            let mut c = s.containers[0].clone();
            c.name = "setup".to_string();
            let r = c.resources.get_or_insert_with(Default::default);
            r.requests = Some(
                [(
                    "nvidia.com/gpu".to_string(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity("1".to_string()),
                )]
                .into(),
            );
            s.init_containers = Some(vec![c]);
        })
        .build();
    assert!(all.is_interested(&plain));
    assert!(!gpu.is_interested(&plain));
    for p in [&requests, &zero, &limits, &init] {
        assert!(gpu.is_interested(p), "{}", p.name);
    }
    let set = Extenders::new(vec![gpu.clone()]);
    assert!(!set.asked_to_place(&plain));
    assert!(set.asked_to_place(&requests));
    let mut binder = gpu;
    binder.filter_verb = None;
    binder.prioritize_verb = None;
    binder.bind_verb = Some("bind".to_string());
    let set = Extenders::new(vec![binder]);
    assert!(
        !set.asked_to_place(&requests),
        "a binder alone stops no cycle"
    );
    assert_eq!(set.binder_for(&requests), Some(0));
    assert_eq!(set.binder_for(&plain), None);
}

#[test]
fn filters_run_in_order_each_on_the_survivors_of_the_one_before() {
    let set = Extenders::new(vec![extender("http://a"), extender("http://b")]);
    let p = pod("p").build();
    let mut x = Exchange::new(&set, &p, names(&["n1", "n2", "n3"]));
    let (i, sent) = x.next_filter().expect("first");
    assert_eq!((i, sent.to_vec()), (0, names(&["n1", "n2", "n3"])));
    let answer = FilterResult {
        node_names: Some(vec!["n3".to_string(), "n1".to_string()]),
        failed_nodes: [("n2".to_string(), "no room".to_string())].into(),
        ..FilterResult::default()
    };
    assert_eq!(x.filtered(0, Ok(answer)), None);
    let (i, sent) = x.next_filter().expect("second");
    // Kept in the extender's order, as kube-scheduler keeps them.
    assert_eq!((i, sent.to_vec()), (1, names(&["n3", "n1"])));
    let answer = FilterResult {
        node_names: Some(vec!["n1".to_string()]),
        failed_nodes: [("n3".to_string(), "busy".to_string())].into(),
        failed_and_unresolvable_nodes: [("n3".to_string(), "broken".to_string())].into(),
        ..FilterResult::default()
    };
    assert_eq!(x.filtered(1, Ok(answer)), None);
    assert!(x.next_filter().is_none());
    assert_eq!(
        x.prioritizers().0,
        &[] as &[usize],
        "one node left: no scoring"
    );
    let verdict = x.finish().expect("verdict");
    assert_eq!(verdict.survivors, names(&["n1"]));
    let status = |n: &str| {
        verdict
            .statuses
            .iter()
            .find(|(m, _)| &**m == n)
            .map(|(_, s)| (s.code(), s.message()))
    };
    assert_eq!(
        status("n2"),
        Some((Code::Unschedulable, "no room".to_string()))
    );
    // FailedAndUnresolvableNodes wins over FailedNodes.
    assert_eq!(
        status("n3"),
        Some((Code::UnschedulableAndUnresolvable, "broken".to_string()))
    );
    assert!(verdict.rejected_any());
}

#[test]
fn an_ignorable_extenders_error_is_skipped_and_another_fails_the_attempt() {
    let mut soft = extender("http://soft");
    soft.ignorable = true;
    let set = Extenders::new(vec![soft, extender("http://hard")]);
    assert_eq!(
        set.all()[0].url_prefix,
        "http://hard",
        "ignorable ones last"
    );
    let p = pod("p").build();
    let mut x = Exchange::new(&set, &p, names(&["n1", "n2"]));
    let (i, _) = x.next_filter().unwrap();
    assert_eq!(x.filtered(i, kept(&["n1", "n2"])), None);
    let (i, _) = x.next_filter().unwrap();
    let skipped = x.filtered(i, Err("timed out".to_string())).expect("logged");
    assert_eq!((skipped.extender, skipped.verb), (1, Verb::Filter));
    assert_eq!(x.finish().unwrap().survivors, names(&["n1", "n2"]));

    let mut x = Exchange::new(&set, &p, names(&["n1", "n2"]));
    let (i, _) = x.next_filter().unwrap();
    assert_eq!(
        x.filtered(
            i,
            Ok(FilterResult {
                error: "out of order".to_string(),
                ..FilterResult::default()
            })
        ),
        None
    );
    assert!(x.next_filter().is_none(), "a failure ends the round");
    let failed = x.finish().expect_err("fails the attempt");
    assert_eq!(failed.message, "out of order");
}

#[test]
fn a_kept_node_that_was_not_sent_is_an_error() {
    let e = extender("http://a");
    let err = apply_filter(&e, &names(&["n1"]), kept(&["n9"]).unwrap()).unwrap_err();
    assert_eq!(
        err,
        "extender \"http://a\" claims a filtered node \"n9\" which is not found in the input node list"
    );
    // Not node-cache capable: the answer's Node objects count, its names do not.
    let mut full = e;
    full.node_cache_capable = false;
    let answer = FilterResult {
        nodes: Some(vec!["n1".to_string()]),
        node_names: Some(vec!["n2".to_string()]),
        ..FilterResult::default()
    };
    let (survivors, _) = apply_filter(&full, &names(&["n1", "n2"]), answer).unwrap();
    assert_eq!(survivors, names(&["n1"]));
    // Neither: nothing kept.
    let (survivors, _) = apply_filter(&full, &names(&["n1"]), FilterResult::default()).unwrap();
    assert!(survivors.is_empty());
}

#[test]
fn scores_are_scaled_weighted_and_summed_and_errors_only_lose_them() {
    let mut a = extender("http://a");
    a.weight = 3;
    let b = extender("http://b");
    let set = Extenders::new(vec![a, b]);
    let p = pod("p").build();
    let mut x = Exchange::new(&set, &p, names(&["n1", "n2"]));
    while let Some((i, sent)) = x.next_filter() {
        let all: Vec<String> = sent.iter().map(|n| n.to_string()).collect();
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        assert_eq!(x.filtered(i, kept(&all)), None);
    }
    let (prioritizers, left) = x.prioritizers();
    assert_eq!((prioritizers.to_vec(), left.len()), (vec![0, 1], 2));
    let list = |scores: &[(&str, i64)]| {
        Ok(scores
            .iter()
            .map(|(h, s)| HostPriority {
                host: h.to_string(),
                score: *s,
            })
            .collect())
    };
    assert_eq!(
        x.prioritized(0, list(&[("n1", 10), ("n2", 4), ("ghost", 9)])),
        None
    );
    assert_eq!(x.prioritized(1, list(&[("n2", 5)])), None);
    let error = x.prioritized(1, Err("down".to_string())).expect("logged");
    assert_eq!(error.verb, Verb::Prioritize);
    let verdict = x.finish().expect("a prioritize error is never fatal");
    // score × weight × (100 / 10)
    assert_eq!(verdict.scores.get("n1"), Some(&300));
    assert_eq!(verdict.scores.get("n2"), Some(&(120 + 100)));
    assert_eq!(verdict.scores.get("ghost"), None);
}

#[test]
fn answers_are_decoded_as_go_decodes_them() {
    let r = protocol::decode_filter_result(
        br#"{"nodenames": ["a"], "FailedNodes": {"b": "full"}, "failedAndUnresolvableNodes": null, "Error": ""}"#,
    )
    .unwrap();
    assert_eq!(r.node_names, Some(vec!["a".to_string()]));
    assert_eq!(r.failed_nodes.get("b").map(String::as_str), Some("full"));
    let r = protocol::decode_filter_result(
        br#"{"Nodes": {"items": [{"metadata": {"name": "x"}}]}, "NodeNames": null}"#,
    )
    .unwrap();
    assert_eq!((r.nodes, r.node_names), (Some(vec!["x".to_string()]), None));
    assert!(protocol::decode_filter_result(b"[1]").is_err());
    assert_eq!(
        protocol::decode_host_priorities(
            br#"[{"Host": "a", "Score": 7}, {"host": "b", "score": 1}]"#
        )
        .unwrap(),
        vec![
            HostPriority {
                host: "a".to_string(),
                score: 7
            },
            HostPriority {
                host: "b".to_string(),
                score: 1
            }
        ]
    );
    assert_eq!(
        protocol::decode_binding_result(br#"{"Error": "no"}"#).unwrap(),
        "no"
    );
    let v = protocol::decode_preemption_result(
        br#"{"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "u1"}], "NumPDBViolations": 1}}}"#,
    )
    .unwrap();
    assert_eq!(v["n1"].pods[0].uid, "u1");
    assert_eq!(v["n1"].num_pdb_violations, 1);
}

#[test]
fn arguments_use_kube_schedulers_keys() {
    let args = protocol::ExtenderArgs {
        pod: serde_json::json!({"metadata": {"name": "p"}}),
        nodes: None,
        node_names: Some(vec!["n1".to_string()]),
    };
    assert_eq!(
        serde_json::to_value(&args).unwrap(),
        serde_json::json!({"Pod": {"metadata": {"name": "p"}}, "Nodes": null, "NodeNames": ["n1"]})
    );
    let node = crate::testing::node("n1")
        .capacity("2", "1Ki")
        .label("zone", "a")
        .taint("gpu", "yes", "NoSchedule")
        .build();
    let object = protocol::node_object(&node);
    assert_eq!(object["metadata"]["name"], "n1");
    assert_eq!(object["metadata"]["labels"]["zone"], "a");
    assert_eq!(object["status"]["allocatable"]["cpu"], "2000m");
    assert_eq!(object["status"]["allocatable"]["memory"], "1024");
    assert_eq!(
        object["spec"]["taints"][0],
        serde_json::json!({"key": "gpu", "value": "yes", "effect": "NoSchedule"})
    );
}

fn preempter(url: &str, ignorable: bool) -> Extender {
    Extender {
        filter_verb: None,
        prioritize_verb: None,
        preempt_verb: Some("preempt".to_string()),
        ignorable,
        ..extender(url)
    }
}

fn on_node(node: &str, names: &[&str]) -> Vec<Arc<crate::model::PodInfo>> {
    names
        .iter()
        .map(|n| pod(n).on(node).priority(0).build())
        .collect()
}

fn cut(node: &str, uids: &[&str], pdb: i64) -> (String, protocol::MetaVictims) {
    let pods = uids
        .iter()
        .map(|u| protocol::MetaPod { uid: u.to_string() })
        .collect();
    (
        node.to_string(),
        protocol::MetaVictims {
            pods,
            num_pdb_violations: pdb,
        },
    )
}

/// Two preempting extenders and an ignorable one failing: each is sent what the one before
/// left, the ignorable one last; an answer's victims are the node's pods by uid, whichever the plugin chose.
#[test]
fn preempt_calls_run_in_order_each_on_what_the_one_before_left() {
    use crate::framework::PreemptionCandidate;
    use preempt::PreemptRound;
    let extenders = Extenders::new(vec![
        preempter("http://a", false),
        preempter("http://broken", true),
        preempter("http://b", false),
    ]);
    let n1 = on_node("n1", &["a1", "a2"]);
    let n2 = on_node("n2", &["b1"]);
    let candidates = vec![
        PreemptionCandidate {
            node: Arc::from("n1"),
            victims: vec![n1[0].clone()],
            pdb_violations: 0,
        },
        PreemptionCandidate {
            node: Arc::from("n2"),
            victims: n2.clone(),
            pdb_violations: 0,
        },
    ];
    let pods = [(Arc::from("n1"), n1.clone()), (Arc::from("n2"), n2.clone())].into();
    let mut round = PreemptRound::new(&extenders, &pod("p").build(), candidates, pods);
    let (first, sent) = round.next_call().expect("the first extender");
    assert_eq!(first, 0);
    assert_eq!(preempt::meta_victims(sent).len(), 2);
    // The first keeps n1 only, but with the other pod there as victim, and one violation.
    let answer = [cut("n1", &["uid-a2"], 1)].into();
    assert_eq!(round.answered(0, Ok(answer)), None);
    // The ignorable one is called last (kube-scheduler's order), after the other, which is
    // sent what the first left.
    let (second, sent) = round.next_call().expect("the second extender");
    assert_eq!((second, sent.len()), (1, 1));
    assert_eq!(&*sent[0].node, "n1");
    assert_eq!(sent[0].victims[0].name, "a2");
    assert_eq!(sent[0].pdb_violations, 1);
    assert_eq!(
        round.answered(1, Ok(BTreeMap::from([cut("n1", &["uid-a2"], 1)]))),
        None
    );
    // The ignorable one fails: skipped, its error handed back for the log.
    let (third, _) = round.next_call().expect("the ignorable extender");
    assert_eq!(third, 2);
    let skipped = round
        .answered(2, Err("code 500".to_string()))
        .expect("skipped");
    assert_eq!(skipped.verb, Verb::Preempt);
    assert!(round.next_call().is_none());
    let left = round.finish().expect("no failure");
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].victims[0].name, "a2");
}

/// kube-scheduler's checks of an answer: a candidate left without victims (dropped when
/// the extender is ignorable), a pod that is not on the node, a node that is not a
/// candidate; a non-ignorable extender's error fails the round.
#[test]
fn a_preempt_answer_naming_what_is_not_there_fails_the_round() {
    use crate::framework::PreemptionCandidate;
    use preempt::PreemptRound;
    let n1 = on_node("n1", &["a1"]);
    let round_for = |ignorable: bool| {
        let extenders = Extenders::new(vec![preempter("http://a", ignorable)]);
        let candidates = vec![PreemptionCandidate {
            node: Arc::from("n1"),
            victims: n1.clone(),
            pdb_violations: 0,
        }];
        let pods = [(Arc::from("n1"), n1.clone())].into();
        let mut round = PreemptRound::new(&extenders, &pod("p").build(), candidates, pods);
        round.next_call().expect("asked");
        round
    };
    let failure = |answer: Result<BTreeMap<String, protocol::MetaVictims>, String>| {
        let mut round = round_for(false);
        assert_eq!(round.answered(0, answer), None);
        round.finish().expect_err("the round fails").message
    };
    assert_eq!(
        failure(Ok([cut("n1", &[], 0)].into())),
        "expected at least one victim pod on node \"n1\""
    );
    assert!(
        failure(Ok([cut("n1", &["uid-elsewhere"], 0)].into()))
            .contains("(UID: uid-elsewhere) on node \"n1\", but the pod is not found"),
    );
    assert!(failure(Ok([cut("n9", &["uid-a1"], 0)].into())).contains("\"n9\""));
    assert_eq!(failure(Err("timeout".to_string())), "timeout");
    // Ignorable: the empty candidate is dropped, and nothing is left to preempt.
    let mut round = round_for(true);
    assert_eq!(round.answered(0, Ok([cut("n1", &[], 0)].into())), None);
    assert!(round.finish().expect("no failure").is_empty());
}
