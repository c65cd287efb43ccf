//! `gantry run` preempting, with a profile that enables DefaultPreemption, against a real
//! kube-apiserver (whose Priority admission plugin is on as by default: pods name a
//! PriorityClass and the API server fills in their priority and preemption policy). A full
//! cluster of priority-0 pods and a burst of high-priority pods: every one is bound after the
//! fewest evictions, each victim gets its `Preempted` event, and each preemptor had its
//! `nominatedNodeName` written. A pod with `preemptionPolicy: Never` evicts nothing and waits
//! with kube-scheduler's message, and so does a pod too big for any node even emptied. While
//! a preemptor waits for its victim to go, a pod of lower priority does not take the room
//! on its nominated node; a victim a PodDisruptionBudget protects is spared when another
//! will do. A burst of 60 preemptors on 40 full nodes evicts the fewest pods (80) though
//! gantry, or kube-apiserver, is killed amid the evictions.
//!
//! No kubelet runs: a bound pod deleted with a grace period stays Terminating, since nothing
//! finishes its deletion (no kubelet, and no kube-controller-manager to collect it). Most
//! victims here have `terminationGracePeriodSeconds: 0`, which the API server honours by
//! deleting them at once; the one that must linger has a grace period, and the test deletes
//! it at once when it is done waiting. No disruption controller runs either: the tests write
//! the budgets' status themselves. Each test has its own control plane, so that its nodes are
//! the cluster's and the messages count them alone.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use support::*;

const PROFILE: &str = "gantry";
const LABEL: &str = "preempt";
const NS: &str = "preempt";

/// The test configuration, with DefaultPreemption enabled.
fn preempting_config() -> String {
    config_with_plugins(PROFILE, LABEL, &["DefaultPreemption"], &[])
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

/// `pod` created already bound to `node`, as if another scheduler had placed it.
fn placed(mut pod: Pod, node: &str) -> Pod {
    pod.spec.as_mut().expect("spec").node_name = Some(node.to_string());
    pod
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
    plane.apply(
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
    );
    let client = client_with_namespace(&plane, NS).await;
    let allocatable: BTreeMap<String, i64> = [("pre-1", 4000), ("pre-2", 4000)]
        .into_iter()
        .map(|(n, m)| (n.to_string(), m))
        .collect();
    let names: Vec<&str> = allocatable.keys().map(String::as_str).collect();
    create_nodes(&client, &names, LABEL, "4", "8Gi").await;
    let mut gantry = Gantry::start_ready(
        plane.dir(),
        "preempt",
        &preempting_config(),
        &plane.kubeconfig(),
    )
    .await;

    let node_of_low = fill_the_cluster_with_low_pods(&client).await;

    // A burst of 3 pods of 1.5 cpu at priority 1000. The fewest evictions: 2 pods of 1.5 cpu
    // fit a node with 1 low pod left (3 evicted), the third another node with 2 left (2
    // evicted): 5. The preemptions follow each other faster than the evictions: a later
    // preemptor finds the victims of an earlier one still there, and that one's nomination
    // taking room on the node, so its victims include them (as kube-scheduler's would); the
    // pods evicted are the fewest all the same.
    let nominations = Nominations::watch(&client, NS);
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
    let survivors = assert_the_fewest_low_pods_evicted(&after);
    let evicted: BTreeSet<String> = (0..8)
        .map(|i| format!("low-{i}"))
        .filter(|n| !survivors.contains(n.as_str()))
        .collect();
    let highs = preemptors_nominated_where_bound(&after, &nominations);
    let pairs = assert_a_preempted_event_per_victim(&client, &evicted, &highs, &node_of_low).await;
    assert_one_preemption_per_preemptor(&gantry.metrics());
    assert_no_preemption_where_it_cannot_help(&client, &gantry, &survivors, pairs.len()).await;
    assert!(gantry.is_running(), "gantry exited:\n{}", gantry.log_text());
}

/// Fills the cluster with priority-0 pods and returns the node each went to, which the
/// `Preempted` events of their eviction must name.
async fn fill_the_cluster_with_low_pods(client: &kube::Client) -> BTreeMap<String, String> {
    // The cluster filled with priority-0 pods: 4 of 1 cpu on each node.
    for i in 0..8 {
        create_pod(client, &low(&format!("low-{i}"))).await;
    }
    eventually(Duration::from_secs(30), "the 8 low pods bound", || async {
        (bound_pods(client, NS).await.len() == 8).then_some(())
    })
    .await;
    let created = pods(client, NS).await;
    assert!(
        created
            .iter()
            .all(|p| p.spec.as_ref().and_then(|s| s.priority) == Some(0)),
        "no priority class: priority 0"
    );
    created
        .iter()
        .map(|p| (name(p).to_string(), node_of(p).expect("bound").to_string()))
        .collect()
}

/// Checks that the burst of preemptors evicted the fewest low pods and left none
/// Terminating, and returns the names of the low pods that survived.
fn assert_the_fewest_low_pods_evicted(after: &[Pod]) -> BTreeSet<&str> {
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
    lows.into_iter().map(name).collect()
}

/// The bound high pods by uid, with their names and nodes, each checked to have been
/// nominated to the node it went to, so that the events can be matched to their preemptors.
fn preemptors_nominated_where_bound(
    after: &[Pod],
    nominations: &Nominations,
) -> BTreeMap<String, (String, String)> {
    after
        .iter()
        .filter(|p| name(p).starts_with("high-"))
        .map(|p| {
            let node = node_of(p).expect("bound").to_string();
            // The preemptor's nomination was written (the API server clears it once the pod
            // is bound).
            assert_eq!(
                nominations.of(name(p)).as_deref(),
                Some(node.as_str()),
                "{} nominated where it went",
                name(p)
            );
            let uid = p.metadata.uid.clone().expect("uid");
            (uid, (name(p).to_string(), node))
        })
        .collect()
}

/// Waits for a `Preempted` event about every one of the `evicted` pods and checks that each
/// names its preemptor (of `highs`) and the victim's node, once; returns the (victim,
/// preemptor uid) pairs, for a later check that no event was added.
async fn assert_a_preempted_event_per_victim(
    client: &kube::Client,
    evicted: &BTreeSet<String>,
    highs: &BTreeMap<String, (String, String)>,
    node_of_low: &BTreeMap<String, String>,
) -> BTreeSet<(String, String)> {
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
            let evs = events(client, NS).await;
            (regarding(&evs) == *evicted).then_some(evs)
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
    pairs
}

/// Checks gantry's preemption metrics after the burst: one successful preemption per
/// preemptor, each victim counted.
fn assert_one_preemption_per_preemptor(metrics: &str) {
    assert_eq!(
        metric_value(metrics, "scheduler_preemption_victims_count"),
        3.0,
        "one preemption per preemptor"
    );
    assert!(metric_value(metrics, "scheduler_preemption_victims_sum") >= 5.0);
    assert_eq!(
        metric_value(
            metrics,
            "scheduler_preemption_goroutines_execution_total{result=\"success\"}"
        ),
        3.0
    );
    assert!(metric_value(metrics, "scheduler_preemption_attempts_total") >= 3.0);
}

/// Creates a pod whose policy forbids preempting and one too big for any node, and checks
/// that both wait with kube-scheduler's message while nothing more is evicted than the
/// `survivors` show and no `Preempted` event is added to the `events_before`.
async fn assert_no_preemption_where_it_cannot_help(
    client: &kube::Client,
    gantry: &Gantry,
    survivors: &BTreeSet<&str>,
    events_before: usize,
) {
    // preemptionPolicy: Never: no eviction, the pod waits with kube-scheduler's message.
    create_pod(client, &classed("polite", "high-never", "1500m")).await;
    // Too big for any node even emptied: NodeResourcesFit finds it unresolvable, and
    // preemption does not try.
    create_pod(client, &classed("huge", "high", "5")).await;
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
        let got = wait_unschedulable(client, NS, pod, Duration::from_secs(30)).await;
        assert_eq!(got, message, "{pod}");
    }
    let attempts = metric_value(&gantry.metrics(), "scheduler_preemption_attempts_total");
    // Time for an eviction to show, were there one.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let now = pods(client, NS).await;
    let lows_now: BTreeSet<&str> = now
        .iter()
        .map(name)
        .filter(|n| n.starts_with("low-"))
        .collect();
    assert_eq!(&lows_now, survivors, "nothing more evicted");
    for pod in ["polite", "huge"] {
        let p = now.iter().find(|p| name(p) == pod).expect("still there");
        assert_eq!(node_of(p), None, "{pod} pending");
        assert_eq!(nominated_node(p), None, "{pod} nominated nowhere");
    }
    let preempted_now = events(client, NS)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Preempted"))
        .count();
    assert_eq!(preempted_now, events_before, "no new Preempted event");
    let metrics = gantry.metrics();
    assert!(attempts >= 5.0, "both ran DefaultPreemption's PostFilter");
    assert_eq!(
        metric_value(&metrics, "scheduler_preemption_victims_count"),
        3.0,
        "no preemption since"
    );
}

/// The names of the pods `Preempted` events are about.
async fn preempted(client: &kube::Client) -> BTreeSet<String> {
    events(client, NS)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Preempted"))
        .filter_map(|e| e.regarding?.name)
        .collect()
}

/// While a preemptor waits for its victim to terminate, a pod of lower priority that would
/// fit beside the victim is kept off the preemptor's nominated node, then and after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_of_lower_priority_does_not_take_the_room_a_preemptor_waits_for() {
    let plane = ControlPlane::start();
    plane.apply(
        "apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: mid}
value: 500
",
    );
    let client = client_with_namespace(&plane, NS).await;
    let node_name = "nominee";
    create_node(&client, &node(node_name, LABEL, "4", "8Gi")).await;
    // A victim of 2 cpu that takes its time to go: deleted with its grace period, it stays
    // Terminating (still taking its room) until the test deletes it at once.
    let mut victim = placed(pod(NS, "leaving", PROFILE, "2", "128Mi"), node_name);
    victim
        .spec
        .as_mut()
        .expect("spec")
        .termination_grace_period_seconds = Some(300);
    create_pod(&client, &victim).await;
    let mut gantry = Gantry::start_ready(
        plane.dir(),
        "nominee",
        &preempting_config(),
        &plane.kubeconfig(),
    )
    .await;

    // 3 cpu at priority 1000: fits only without the victim, so evicts it and waits for it.
    create_pod(&client, &classed("preemptor", "high", "3")).await;
    eventually(
        Duration::from_secs(30),
        "the preemptor nominated and its victim terminating",
        || async {
            let p = get_pod(&client, NS, "preemptor").await;
            let v = get_pod(&client, NS, "leaving").await;
            (nominated_node(&p) == Some(node_name) && v.metadata.deletion_timestamp.is_some())
                .then_some(())
        },
    )
    .await;

    // 2 cpu at priority 500: beside the terminating victim it fits (2 + 2 of 4 cpu), beside
    // the victim and the nominated preemptor (counted there, its priority being higher) it
    // does not; nor once the victim is gone (3 + 2). Its own preemption finds no room either:
    // without the victim, the preemptor still counts.
    create_pod(&client, &classed("latecomer", "mid", "2")).await;
    let latecomer_message = "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 Insufficient cpu.";
    let pending = |p: &Pod, what: &str| {
        assert_eq!(node_of(p), None, "{} bound {what}", name(p));
        assert_eq!(nominated_node(p), None, "{} nominated {what}", name(p));
    };
    let message = wait_unschedulable(&client, NS, "latecomer", Duration::from_secs(30)).await;
    assert_eq!(message, latecomer_message);
    pending(
        &get_pod(&client, NS, "latecomer").await,
        "while the victim terminates",
    );
    // Time for more attempts (the backoff is at most 2 s): the window stays shut.
    tokio::time::sleep(Duration::from_secs(3)).await;
    pending(
        &get_pod(&client, NS, "latecomer").await,
        "while the victim terminates",
    );
    let p = get_pod(&client, NS, "preemptor").await;
    assert_eq!(node_of(&p), None, "the preemptor waits");
    assert_eq!(
        nominated_node(&p),
        Some(node_name),
        "the preemptor still nominated"
    );
    let v = get_pod(&client, NS, "leaving").await;
    assert!(
        v.metadata.deletion_timestamp.is_some(),
        "the victim still terminating"
    );

    // The victim goes: the preemptor takes the room, the latecomer still finds none.
    delete_pod(&client, NS, "leaving").await;
    let bound = wait_bound(&client, NS, "preemptor", Duration::from_secs(30)).await;
    assert_eq!(bound, node_name, "bound where nominated");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let now = pods(&client, NS).await;
    let allocatable = BTreeMap::from([(node_name.to_string(), 4000)]);
    assert_within_capacity(&now, &allocatable);
    let latecomer = now
        .iter()
        .find(|p| name(p) == "latecomer")
        .expect("latecomer");
    pending(latecomer, "once the victim went");
    assert_eq!(
        now.iter().map(name).collect::<BTreeSet<_>>(),
        BTreeSet::from(["latecomer", "preemptor"]),
        "nothing else evicted"
    );
    assert_eq!(
        preempted(&client).await,
        BTreeSet::from(["leaving".to_string()]),
        "the one victim preempted"
    );
    assert_eq!(
        gantry.metric("scheduler_preemption_victims_count"),
        1.0,
        "one preemption"
    );
    assert!(gantry.is_running(), "gantry exited:\n{}", gantry.log_text());
}

/// A victim whose PodDisruptionBudget allows no disruption is spared for one whose budget
/// allows it, though its node would otherwise be preferred (its victim's priority lower).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_victim_a_disruption_budget_protects_is_spared_when_another_will_do() {
    let plane = ControlPlane::start();
    plane.apply(
        "apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: mid}
value: 10
",
    );
    let client = client_with_namespace(&plane, NS).await;
    // Two nodes, each full with one pod: `guarded` (priority 0, under a budget that allows
    // no disruption) and `spare` (priority 10, under a budget that allows one). Ignoring
    // the budgets, the lowest priority of the most important victim would choose guarded's
    // node; the fewest budget violations comes first and chooses spare's.
    let victims = [("guarded", "pdb-1", None), ("spare", "pdb-2", Some("mid"))];
    for (pod_name, node_name, class) in victims {
        create_node(&client, &node(node_name, LABEL, "4", "8Gi")).await;
        let mut p = placed(pod(NS, pod_name, PROFILE, "4", "128Mi"), node_name);
        let spec = p.spec.as_mut().expect("spec");
        spec.termination_grace_period_seconds = Some(0);
        spec.priority_class_name = class.map(str::to_string);
        p.metadata.labels = Some(BTreeMap::from([("app".to_string(), pod_name.to_string())]));
        create_pod(&client, &p).await;
    }
    // No disruption controller runs: the status is written here, as it would write it.
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "policy",
        "v1",
        "PodDisruptionBudget",
    ));
    let budgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &resource);
    for (budget, app, allowed) in [("guard", "guarded", 0), ("loose", "spare", 1)] {
        let pdb: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": budget, "namespace": NS},
            "spec": {"minAvailable": 1 - allowed, "selector": {"matchLabels": {"app": app}}}
        }))
        .expect("budget");
        budgets
            .create(&PostParams::default(), &pdb)
            .await
            .expect("create budget");
        let status = serde_json::json!({"status": {
            "observedGeneration": 1,
            "disruptionsAllowed": allowed,
            "currentHealthy": 1,
            "desiredHealthy": 1 - allowed,
            "expectedPods": 1,
        }});
        budgets
            .patch_status(budget, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .expect("write budget status");
    }
    let guard = budgets.get("guard").await.expect("guard");
    assert_eq!(
        guard.data["status"]["disruptionsAllowed"],
        serde_json::json!(0),
        "the status written"
    );
    let guarded_uid = get_pod(&client, NS, "guarded").await.metadata.uid;

    // Started once the budgets are in place: ready, it has read them.
    let mut gantry = Gantry::start_ready(
        plane.dir(),
        "budget",
        &preempting_config(),
        &plane.kubeconfig(),
    )
    .await;
    let nominations = Nominations::watch(&client, NS);
    create_pod(&client, &classed("preemptor", "high", "2")).await;
    let bound = wait_bound(&client, NS, "preemptor", Duration::from_secs(30)).await;
    assert_eq!(bound, "pdb-2", "bound where spare was");
    assert_eq!(
        nominations.of("preemptor").as_deref(),
        Some("pdb-2"),
        "nominated there"
    );
    // Time for a wrong eviction to show, were there one.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let now = pods(&client, NS).await;
    assert_eq!(
        now.iter().map(name).collect::<BTreeSet<_>>(),
        BTreeSet::from(["guarded", "preemptor"]),
        "spare evicted, guarded not"
    );
    let guarded = now.iter().find(|p| name(p) == "guarded").expect("guarded");
    assert_eq!(guarded.metadata.uid, guarded_uid, "the same pod");
    assert_eq!(node_of(guarded), Some("pdb-1"));
    assert!(guarded.metadata.deletion_timestamp.is_none(), "not deleted");
    let marked = guarded
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "DisruptionTarget"));
    assert!(!marked, "guarded not marked as a victim");
    assert_eq!(
        preempted(&client).await,
        BTreeSet::from(["spare".to_string()]),
        "spare alone preempted"
    );
    assert_eq!(gantry.metric("scheduler_preemption_victims_count"), 1.0);
    assert!(gantry.is_running(), "gantry exited:\n{}", gantry.log_text());
}

/// Nodes of the crash scenarios, each full with four priority-0 pods of 1 cpu.
const CRASH_NODES: usize = 40;
/// Preemptors of 2 cpu and of 1 cpu: 20 * 2 + 40 * 1 = 80 cpu, so 80 evictions at least.
const BIG_PREEMPTORS: usize = 20;
const SMALL_PREEMPTORS: usize = 40;
const FEWEST_EVICTIONS: usize = 80;

/// What the crash scenario does once 30 victims are gone.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// gantry is killed (SIGKILL) and a new one started.
    KillGantry,
    /// kube-apiserver is killed (SIGKILL) and started again.
    KillApiServer,
}

/// The full cluster, the burst of preemptors, and `fault` partway through the evictions;
/// no more pods than needed are evicted once every preemptor is bound.
async fn evictions_across(fault: Fault) {
    let plane = ControlPlane::start();
    plane.apply(
        "apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
",
    );
    let client = client_with_namespace(&plane, NS).await;
    let nodes: Vec<String> = (0..CRASH_NODES).map(|i| format!("crash-{i:02}")).collect();
    let names: Vec<&str> = nodes.iter().map(String::as_str).collect();
    create_nodes(&client, &names, LABEL, "4", "8Gi").await;
    let lows = CRASH_NODES * 4;
    for (i, node) in nodes.iter().cycle().take(lows).enumerate() {
        create_pod(&client, &placed(low(&format!("low-{i:03}")), node)).await;
    }
    let kubelets = tokio::spawn(finish_terminating(client.clone()));
    let mut gantry = Gantry::start_ready(
        plane.dir(),
        "crash",
        &preempting_config(),
        &plane.kubeconfig(),
    )
    .await;
    for i in 0..SMALL_PREEMPTORS {
        if i < BIG_PREEMPTORS {
            create_pod(&client, &classed(&format!("big-{i:02}"), "high", "2")).await;
        }
        create_pod(&client, &classed(&format!("small-{i:02}"), "high", "1")).await;
    }
    let remaining_lows = |ps: &[Pod]| ps.iter().filter(|p| name(p).starts_with("low-")).count();
    let at_fault = eventually(Duration::from_secs(60), "30 victims evicted", || async {
        let evicted = lows - remaining_lows(&pods(&client, NS).await);
        (evicted >= 30).then_some(evicted)
    })
    .await;
    assert!(
        at_fault < FEWEST_EVICTIONS,
        "the fault comes amid the evictions: {at_fault} made"
    );
    let mut restarted = None;
    match fault {
        Fault::KillGantry => {
            gantry.kill();
            restarted = Some(
                Gantry::start_ready(
                    plane.dir(),
                    "crash-again",
                    &preempting_config(),
                    &plane.kubeconfig(),
                )
                .await,
            );
        }
        Fault::KillApiServer => plane.restart_apiserver(Duration::from_secs(1)),
    }
    let client = plane.client().await;
    let preemptors = BIG_PREEMPTORS + SMALL_PREEMPTORS;
    let after = eventually(
        Duration::from_secs(120),
        "every preemptor bound",
        || async {
            let ps = pods(&client, NS).await;
            let bound = ps
                .iter()
                .filter(|p| !name(p).starts_with("low-") && node_of(p).is_some())
                .count();
            (bound == preemptors).then_some(ps)
        },
    )
    .await;
    let allocatable = nodes.iter().map(|n| (n.clone(), 4000)).collect();
    assert_within_capacity(&after, &allocatable);
    // Time for a late eviction to show, were there one.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let evicted = lows - remaining_lows(&pods(&client, NS).await);
    let running = restarted.as_mut().unwrap_or(&mut gantry);
    assert!(
        running.is_running(),
        "gantry exited:\n{}",
        running.log_text()
    );
    kubelets.abort();
    // Asserted here, with gantry still there: a failure shows its log.
    assert_eq!(evicted, FEWEST_EVICTIONS, "evicted across {fault:?}");
}

/// Plays the kubelets' part for the pods being deleted: a deletion cut short when the client
/// that made it was killed (or the API server was) can leave a pod terminating, which its
/// kubelet would remove once stopped (their grace period is 0). Runs until aborted.
async fn finish_terminating(client: kube::Client) {
    let api: Api<Pod> = Api::namespaced(client, NS);
    loop {
        if let Ok(list) = api.list(&Default::default()).await {
            for p in list.items {
                if p.metadata.deletion_timestamp.is_some() {
                    let gone = kube::api::DeleteParams::default().grace_period(0);
                    let _ = api.delete(name(&p), &gone).await;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// gantry killed partway through a burst of preemptions: the nominations it wrote are what
/// the next one goes by, and the evictions stay the fewest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_of_gantry_amid_preemptions_evicts_no_more_than_needed() {
    evictions_across(Fault::KillGantry).await;
}
/// kube-apiserver killed partway through a burst of preemptions: the evictions stay the
/// fewest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_of_the_api_server_amid_preemptions_evicts_no_more_than_needed() {
    evictions_across(Fault::KillApiServer).await;
}
