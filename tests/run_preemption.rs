//! `gantry run` preempting, with a profile that enables DefaultPreemption, against a real
//! kube-apiserver (1.20, whose Priority admission plugin is on as by default: pods name a
//! PriorityClass and the API server fills in their priority and preemption policy). A full
//! cluster of priority-0 pods and a burst of high-priority pods: every one is bound after the
//! fewest evictions, each victim gets its `Preempted` event, and each preemptor had its
//! `nominatedNodeName` written. A pod with `preemptionPolicy: Never` evicts nothing and waits
//! with kube-scheduler's message, and so does a pod too big for any node even emptied.
//!
//! No kubelet runs: a bound pod deleted with a grace period would stay Terminating until it
//! passed. The victims here have `terminationGracePeriodSeconds: 0`, which the API server
//! honours by deleting them at once (the test checks that none is left Terminating).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use support::*;

const PROFILE: &str = "gantry";
const LABEL: &str = "preempt";
const NS: &str = "preempt";

/// The test configuration, with DefaultPreemption enabled.
fn preempting_config() -> String {
    let base = config(PROFILE, LABEL, None, "");
    let enabled = "  plugins:\n    multiPoint:\n      enabled: [{name: DefaultPreemption}]\n  pluginConfig:\n";
    assert!(base.contains("  pluginConfig:\n"));
    base.replacen("  pluginConfig:\n", enabled, 1)
}

/// A priority-0 pod (no PriorityClass, no global default) deleted at once when evicted.
fn low(name: &str) -> Pod {
    let mut p = pod(NS, name, PROFILE, "1", "128Mi");
    p.spec
        .as_mut()
        .expect("spec")
        .termination_grace_period_seconds = Some(0);
    p
}

/// A pod of PriorityClass `class`.
fn classed(name: &str, class: &str, cpu: &str) -> Pod {
    let mut p = pod(NS, name, PROFILE, cpu, "128Mi");
    p.spec.as_mut().expect("spec").priority_class_name = Some(class.to_string());
    p
}

fn name(p: &Pod) -> &str {
    p.metadata.name.as_deref().unwrap_or_default()
}

fn nominated_node(p: &Pod) -> Option<&str> {
    p.status.as_ref()?.nominated_node_name.as_deref()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preemption_evicts_the_fewest_pods_and_only_when_it_helps() {
    let plane = ControlPlane::start();
    let client = plane.client().await;
    plane
        .try_kubectl(
            &["apply", "-f", "-"],
            Some(
                "apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high-never}
value: 1000
preemptionPolicy: Never
",
            ),
        )
        .unwrap_or_else(|e| panic!("kubectl apply: {e}"));
    create_namespace(&client, NS).await;
    let allocatable: BTreeMap<String, i64> = [("pre-1", 4000), ("pre-2", 4000)]
        .into_iter()
        .map(|(n, m)| (n.to_string(), m))
        .collect();
    for n in allocatable.keys() {
        create_node(&client, &node(n, LABEL, "4", "8Gi")).await;
    }
    let mut gantry = Gantry::start(
        plane.dir(),
        "preempt",
        &preempting_config(),
        &plane.kubeconfig(),
    );
    gantry.wait_ready().await;

    // The cluster filled with priority-0 pods: 4 of 1 cpu on each node.
    for i in 0..8 {
        create_pod(&client, &low(&format!("low-{i}"))).await;
    }
    eventually(Duration::from_secs(30), "the 8 low pods bound", || async {
        let ps = pods(&client, NS).await;
        (ps.iter().filter(|p| node_of(p).is_some()).count() == 8).then_some(())
    })
    .await;
    let created = pods(&client, NS).await;
    assert!(
        created
            .iter()
            .all(|p| p.spec.as_ref().and_then(|s| s.priority) == Some(0)),
        "no priority class: priority 0"
    );
    let node_of_low: BTreeMap<String, String> = created
        .iter()
        .map(|p| (name(p).to_string(), node_of(p).expect("bound").to_string()))
        .collect();

    // A burst of 3 pods of 1.5 cpu at priority 1000. The fewest evictions: 2 pods of 1.5 cpu
    // fit a node with 1 low pod left (3 evicted), the third another node with 2 left (2
    // evicted): 5. The preemptions follow each other faster than the evictions: a later
    // preemptor finds the victims of an earlier one still there, and that one's nomination
    // taking room on the node, so its victims include them (as kube-scheduler's would); the
    // pods evicted are the fewest all the same.
    for i in 0..3 {
        create_pod(&client, &classed(&format!("high-{i}"), "high", "1500m")).await;
    }
    let after = eventually(Duration::from_secs(60), "the 3 high pods bound", || async {
        let ps = pods(&client, NS).await;
        let bound = ps
            .iter()
            .filter(|p| name(p).starts_with("high-") && node_of(p).is_some())
            .count();
        (bound == 3).then_some(ps)
    })
    .await;
    assert_within_capacity(&after, &allocatable);
    let lows: Vec<&Pod> = after
        .iter()
        .filter(|p| name(p).starts_with("low-"))
        .collect();
    assert_eq!(lows.len(), 3, "5 low pods evicted, no more");
    assert!(
        after
            .iter()
            .all(|p| p.metadata.deletion_timestamp.is_none()),
        "no pod left Terminating: a grace period of 0 deletes at once"
    );
    let survivors: BTreeSet<&str> = lows.iter().map(|p| name(p)).collect();
    let evicted: BTreeSet<String> = (0..8)
        .map(|i| format!("low-{i}"))
        .filter(|n| !survivors.contains(n.as_str()))
        .collect();
    let highs: BTreeMap<String, (String, String)> = after
        .iter()
        .filter(|p| name(p).starts_with("high-"))
        .map(|p| {
            let node = node_of(p).expect("bound").to_string();
            // The preemptor's nomination was written; nothing clears it on 1.20.
            assert_eq!(
                nominated_node(p),
                Some(node.as_str()),
                "{} nominated where it went",
                name(p)
            );
            let uid = p.metadata.uid.clone().expect("uid");
            (uid, (name(p).to_string(), node))
        })
        .collect();

    // A Preempted event for every victim, naming the preemptor that deleted it and the node
    // (the victim's, where the preemptor went); one per victim and preemptor.
    let regarding = |evs: &[k8s_openapi::api::events::v1::Event]| -> BTreeSet<String> {
        evs.iter()
            .filter(|e| e.reason.as_deref() == Some("Preempted"))
            .filter_map(|e| e.regarding.as_ref()?.name.clone())
            .collect()
    };
    let preempted = eventually(
        Duration::from_secs(45),
        "a Preempted event for every victim",
        || async {
            let evs = events(&client, NS).await;
            (regarding(&evs) == evicted).then_some(evs)
        },
    )
    .await;
    let mut pairs = BTreeSet::new();
    for e in preempted
        .iter()
        .filter(|e| e.reason.as_deref() == Some("Preempted"))
    {
        let victim = e
            .regarding
            .as_ref()
            .and_then(|r| r.name.clone())
            .expect("victim");
        let related = e.related.as_ref().expect("related: the preemptor");
        let uid = related.uid.clone().expect("the preemptor's uid");
        let (preemptor, node) = highs.get(&uid).expect("a high pod preempted");
        assert_eq!(related.name.as_deref(), Some(preemptor.as_str()));
        assert_eq!(
            e.note.as_deref(),
            Some(format!("Preempted by pod {uid} on node {node}").as_str())
        );
        assert_eq!(
            node_of_low.get(&victim),
            Some(node),
            "{victim} was on {node}"
        );
        assert_eq!(
            (e.type_.as_deref(), e.action.as_deref()),
            (Some("Normal"), Some("Preempting"))
        );
        assert_eq!(e.reporting_controller.as_deref(), Some(PROFILE));
        assert!(pairs.insert((victim, uid)), "an event written twice");
    }

    let metrics = gantry.metrics();
    assert_eq!(
        metric_value(&metrics, "scheduler_preemption_victims_count"),
        3.0,
        "one preemption per preemptor"
    );
    assert!(metric_value(&metrics, "scheduler_preemption_victims_sum") >= 5.0);
    assert_eq!(
        metric_value(
            &metrics,
            "scheduler_preemption_goroutines_execution_total{result=\"success\"}"
        ),
        3.0
    );
    assert!(metric_value(&metrics, "scheduler_preemption_attempts_total") >= 3.0);

    // preemptionPolicy: Never: no eviction, the pod waits with kube-scheduler's message.
    create_pod(&client, &classed("polite", "high-never", "1500m")).await;
    // Too big for any node even emptied: NodeResourcesFit finds it unresolvable, and
    // preemption does not try.
    create_pod(&client, &classed("huge", "high", "5")).await;
    for (pod, message) in [
        (
            "polite",
            "0/2 nodes are available: 2 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never.",
        ),
        (
            "huge",
            "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.",
        ),
    ] {
        eventually(
            Duration::from_secs(30),
            &format!("{pod} reported unschedulable"),
            || async {
                let p = get_pod(&client, NS, pod).await;
                pod_scheduled(&p)
                    .filter(|c| c.0 == "False" && c.1 == "Unschedulable" && c.2 == message)
                    .map(|_| ())
            },
        )
        .await;
    }
    let attempts = metric_value(&gantry.metrics(), "scheduler_preemption_attempts_total");
    // Time for an eviction to show, were there one.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let now = pods(&client, NS).await;
    let lows_now: BTreeSet<&str> = now
        .iter()
        .map(name)
        .filter(|n| n.starts_with("low-"))
        .collect();
    assert_eq!(lows_now, survivors, "nothing more evicted");
    for pod in ["polite", "huge"] {
        let p = now.iter().find(|p| name(p) == pod).expect("still there");
        assert_eq!(node_of(p), None, "{pod} pending");
        assert_eq!(nominated_node(p), None, "{pod} nominated nowhere");
    }
    let preempted_now = events(&client, NS)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Preempted"))
        .count();
    assert_eq!(preempted_now, pairs.len(), "no new Preempted event");
    let metrics = gantry.metrics();
    assert!(attempts >= 5.0, "both ran DefaultPreemption's PostFilter");
    assert_eq!(
        metric_value(&metrics, "scheduler_preemption_victims_count"),
        3.0,
        "no preemption since"
    );
    assert!(gantry.is_running(), "gantry exited:\n{}", gantry.log_text());
}
