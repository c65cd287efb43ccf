//! `cluster-bench null-preemptor`: the preemption workload's ceiling, a preemptor that decides
//! nothing. It lists the nodes, the low-priority pods on each and the pending preemptors, gives
//! preemptor i node i (sorted by name) and the four low-priority pods there as victims, and
//! makes the API writes kube-scheduler 1.37 makes for a preemption with its default feature
//! gates (asynchronous preemption on, asynchronous API calls off): the preemptor's
//! `FailedScheduling` event and status patch (nominated node and `PodScheduled=False`) while
//! its victims are evicted, each with a status patch (its `DisruptionTarget` condition), a
//! DELETE and a `Preempted` event; then, once all that is done, the binding and its `Scheduled`
//! event: sixteen writes. Many preemptions are in flight over one client, so its rate is what
//! the API server and etcd can carry of this workload on this machine: the ceiling of any
//! scheduler's preemptors per second. Then it waits for SIGTERM or SIGINT, like a scheduler
//! would, so that the harness treats it like the others.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use futures::{StreamExt, future, stream};
use gantry_core::config::DEFAULT_SCHEDULER_NAME;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::preemption::PRIORITY_LABEL;

/// Victims per preemptor: the workload's preemptor (3970m) fits a node (4 cpu, four
/// low-priority pods of 900m) only once all four of them leave.
const VICTIMS: usize = 4;
/// The reporting controller of the events, as kube-scheduler names itself.
const REPORTER: &str = "default-scheduler";

/// Arguments of `cluster-bench null-preemptor`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Kubeconfig of the API server.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Preempt for the pending pods with this `spec.schedulerName`.
    #[arg(long, default_value = DEFAULT_SCHEDULER_NAME)]
    scheduler_name: String,
    /// Preemptions in flight at once.
    #[arg(long, default_value_t = 64)]
    in_flight: usize,
}

/// One preemptor's node and victims.
struct Preemption {
    preemptor: Pod,
    node: String,
    victims: Vec<Pod>,
}

/// Preempts for every pending pod, then waits for a signal.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let client = crate::client(&args.kubeconfig).await?;
    let start = Instant::now();
    let nodes = crate::null_binder::node_names(&client).await?;
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default().match_any())
        .await
        .context("cannot list pods")?
        .items;
    let mut low: BTreeMap<String, Vec<Pod>> = BTreeMap::new();
    let mut preemptors = Vec::new();
    for pod in pods {
        let spec = pod.spec.as_ref();
        let node = spec.and_then(|s| s.node_name.clone()).unwrap_or_default();
        let label = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(PRIORITY_LABEL));
        if !node.is_empty() && label.is_some_and(|l| l == "low") {
            low.entry(node).or_default().push(pod);
        } else if node.is_empty()
            && spec.and_then(|s| s.scheduler_name.as_deref()) == Some(&args.scheduler_name)
        {
            preemptors.push(pod);
        }
    }
    let with_room: Vec<&String> = nodes
        .iter()
        .filter(|n| low.get(*n).is_some_and(|p| p.len() >= VICTIMS))
        .collect();
    anyhow::ensure!(
        with_room.len() >= preemptors.len(),
        "{} preemptors but only {} nodes with {VICTIMS} low-priority pods",
        preemptors.len(),
        with_room.len()
    );
    let plan: Vec<Preemption> = preemptors
        .into_iter()
        .zip(with_room)
        .map(|(preemptor, node)| Preemption {
            preemptor,
            node: node.clone(),
            victims: low
                .get(node)
                .map(|p| p[..VICTIMS].to_vec())
                .unwrap_or_default(),
        })
        .collect();
    let listed = start.elapsed();
    let results: Vec<anyhow::Result<()>> = stream::iter(plan)
        .map(|p| preempt(client.clone(), p, nodes.len()))
        .buffer_unordered(args.in_flight.max(1))
        .collect()
        .await;
    let failed: Vec<&anyhow::Error> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    for e in failed.iter().take(10) {
        eprintln!("null-preemptor: {e:#}");
    }
    eprintln!(
        "null-preemptor: listed {} nodes and planned {} preemptions in {:.2}s; {} done, {} failed in {:.2}s",
        nodes.len(),
        results.len(),
        listed.as_secs_f64(),
        results.len() - failed.len(),
        failed.len(),
        (start.elapsed() - listed).as_secs_f64(),
    );
    crate::wait_for_signal().await
}

/// The sixteen writes of one preemption among `nodes` nodes, in kube-scheduler 1.37's order:
/// its preemption goroutine evicts the victims while the failed attempt is recorded, and the
/// preemptor, held back until its last victim is gone, is then bound.
async fn preempt(client: kube::Client, p: Preemption, nodes: usize) -> anyhow::Result<()> {
    let (failed, evicted) = future::join(
        record_failure(&client, &p, nodes),
        evict(&client, &p.preemptor, &p.victims, &p.node),
    )
    .await;
    failed?;
    evicted?;
    bind(&client, &p.preemptor, &p.node).await
}

/// What no node fitting says with the preemption found on `node`, as kube-scheduler words it
/// for this workload (the fit error, then DefaultPreemption's message).
fn unfit(nodes: usize, node: &str) -> String {
    format!(
        "0/{nodes} nodes are available: {nodes} Insufficient cpu. preemption: found a potential \
         placement for pod on node {node}, preempting {VICTIMS} victims"
    )
}

/// The failed attempt of the preemptor: its `FailedScheduling` event, then the status patch
/// with `PodScheduled=False` and the nominated node.
async fn record_failure(client: &kube::Client, p: &Preemption, nodes: usize) -> anyhow::Result<()> {
    let (namespace, name) = key(&p.preemptor);
    let message = unfit(nodes, &p.node);
    let failed = event(
        &p.preemptor,
        "FailedScheduling",
        "Warning",
        "Scheduling",
        &message,
    );
    Api::<Event>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &failed)
        .await
        .with_context(|| format!("{namespace}/{name}: event"))?;
    let status = json!({"status": {
        "nominatedNodeName": p.node,
        "conditions": [condition(&p.preemptor, "PodScheduled", "False", "Unschedulable", &message)],
    }});
    Api::<Pod>::namespaced(client.clone(), &namespace)
        .patch_status(&name, &PatchParams::default(), &Patch::Strategic(status))
        .await
        .with_context(|| format!("{namespace}/{name}: status"))?;
    Ok(())
}

/// Evicts `victims` for `preemptor` on `node` as kube-scheduler's preemption goroutine does:
/// all but the last at once, then the last.
async fn evict(
    client: &kube::Client,
    preemptor: &Pod,
    victims: &[Pod],
    node: &str,
) -> anyhow::Result<()> {
    let Some((last, others)) = victims.split_last() else {
        return Ok(());
    };
    future::try_join_all(others.iter().map(|v| evict_one(client, preemptor, v, node))).await?;
    evict_one(client, preemptor, last, node).await
}

/// One victim's three writes: its `DisruptionTarget` condition, its DELETE, and the
/// `Preempted` event naming the preemptor's uid.
async fn evict_one(
    client: &kube::Client,
    preemptor: &Pod,
    victim: &Pod,
    node: &str,
) -> anyhow::Result<()> {
    let (namespace, name) = key(victim);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let scheduler = preemptor
        .spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref());
    let message = format!(
        "{}: preempting to accommodate a higher priority pod",
        scheduler.unwrap_or_default()
    );
    let target = condition(
        victim,
        "DisruptionTarget",
        "True",
        "PreemptionByScheduler",
        &message,
    );
    let status = json!({"status": {"conditions": [target]}});
    pods.patch_status(&name, &PatchParams::default(), &Patch::Strategic(status))
        .await
        .with_context(|| format!("{namespace}/{name}: status"))?;
    pods.delete(&name, &DeleteParams::default())
        .await
        .with_context(|| format!("{namespace}/{name}: delete"))?;
    let uid = preemptor.metadata.uid.as_deref().unwrap_or_default();
    let note = format!("Preempted by pod {uid} on node {node}");
    // No `related`: kube-scheduler 1.37 passes the preemptor in a wrapper type that its event
    // recorder cannot make a reference to, so the field stays empty.
    let preempted = event(victim, "Preempted", "Normal", "Preempting", &note);
    Api::<Event>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &preempted)
        .await
        .with_context(|| format!("{namespace}/{name}: event"))?;
    Ok(())
}

/// The binding of `preemptor` to `node` and its `Scheduled` event.
async fn bind(client: &kube::Client, preemptor: &Pod, node: &str) -> anyhow::Result<()> {
    let (namespace, name) = key(preemptor);
    let binding = crate::null_binder::binding(preemptor.metadata.clone(), node);
    Api::<Pod>::namespaced(client.clone(), &namespace)
        .create_subresource::<_, serde_json::Value>(
            "binding",
            &name,
            &PostParams::default(),
            &binding,
        )
        .await
        .with_context(|| format!("{namespace}/{name}: binding"))?;
    let note = format!("Successfully assigned {namespace}/{name} to {node}");
    let scheduled = event(preemptor, "Scheduled", "Normal", "Binding", &note);
    Api::<Event>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &scheduled)
        .await
        .with_context(|| format!("{namespace}/{name}: event"))?;
    Ok(())
}

/// `pod`'s namespace and name.
fn key(pod: &Pod) -> (String, String) {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    (namespace, pod.metadata.name.clone().unwrap_or_default())
}

/// A pod condition as kube-scheduler sets it: changed now, observed at `pod`'s generation.
fn condition(pod: &Pod, type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": pod.metadata.generation,
        "lastTransitionTime": Time(k8s_openapi::jiff::Timestamp::now()),
    })
}

/// An events.k8s.io/v1 event about `pod`, as kube-scheduler writes them: named after the pod
/// and the time in nanoseconds (hexadecimal).
fn event(pod: &Pod, reason: &str, kind: &str, action: &str, note: &str) -> Event {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let now = k8s_openapi::jiff::Timestamp::now();
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{name}.{:x}", now.as_nanosecond())),
            namespace: pod.metadata.namespace.clone(),
            ..Default::default()
        },
        event_time: Some(MicroTime(now)),
        reporting_controller: Some(REPORTER.to_string()),
        reporting_instance: Some(REPORTER.to_string()),
        action: Some(action.to_string()),
        reason: Some(reason.to_string()),
        type_: Some(kind.to_string()),
        note: Some(note.to_string()),
        regarding: Some(ObjectReference {
            api_version: Some("v1".to_string()),
            kind: Some("Pod".to_string()),
            name: Some(name),
            namespace: pod.metadata.namespace.clone(),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        }),
        ..Default::default()
    }
}
