//! `cluster-bench null-preemptor`: the preemption workload's ceiling, a preemptor that decides
//! nothing. It lists the nodes, the low-priority pods on each and the pending preemptors, gives
//! preemptor i node i (sorted by name) and the three low-priority pods there as victims, and
//! makes the API writes kube-scheduler 1.20 makes for a preemption: the preemptor's status
//! patch (nominated node and `PodScheduled=False`), its `FailedScheduling` event, per victim a
//! DELETE and a `Preempted` event, then once the victims are gone the binding and its
//! `Scheduled` event: ten writes. Many preemptions are in flight over one client, so its rate
//! is what the API server and etcd can carry of this workload on this machine: the ceiling of
//! any scheduler's preemptors per second. Then it waits for SIGTERM or SIGINT, like a
//! scheduler would, so that the harness treats it like the others.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use futures::{StreamExt, stream};
use gantry::config::DEFAULT_SCHEDULER_NAME;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::preemption::PRIORITY_LABEL;

/// Victims per preemptor: the workload's preemptor fits where three of the four low-priority
/// pods of a node leave.
const VICTIMS: usize = 3;
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
    // What no node fitting says, as kube-scheduler words it for this workload.
    let unfit = format!(
        "0/{n} nodes are available: {n} Insufficient cpu.",
        n = nodes.len()
    );
    let results: Vec<anyhow::Result<()>> = stream::iter(plan)
        .map(|p| preempt(client.clone(), p, &unfit))
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

/// The ten writes of one preemption, in kube-scheduler 1.20's order.
/// `unfit` is the message of the preemptor's failed attempt.
async fn preempt(client: kube::Client, p: Preemption, unfit: &str) -> anyhow::Result<()> {
    let namespace = p.preemptor.metadata.namespace.clone().unwrap_or_default();
    let name = p.preemptor.metadata.name.clone().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let events: Api<Event> = Api::namespaced(client.clone(), &namespace);
    let status = json!({"status": {
        "nominatedNodeName": p.node,
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": unfit}],
    }});
    pods.patch_status(&name, &PatchParams::default(), &Patch::Strategic(status))
        .await
        .with_context(|| format!("{namespace}/{name}: status"))?;
    let failed = event(
        &p.preemptor,
        "FailedScheduling",
        "Warning",
        "Scheduling",
        unfit,
    );
    events
        .create(&PostParams::default(), &failed)
        .await
        .with_context(|| format!("{namespace}/{name}: event"))?;
    for victim in &p.victims {
        let victim_name = victim.metadata.name.clone().unwrap_or_default();
        pods.delete(&victim_name, &DeleteParams::default())
            .await
            .with_context(|| format!("{namespace}/{victim_name}: delete"))?;
        let note = format!("Preempted by {namespace}/{name} on node {}", p.node);
        let preempted = event(victim, "Preempted", "Normal", "Preempting", &note);
        events
            .create(&PostParams::default(), &preempted)
            .await
            .with_context(|| format!("{namespace}/{victim_name}: event"))?;
    }
    let binding = crate::null_binder::binding(p.preemptor.metadata.clone(), &p.node);
    pods.create_subresource::<_, serde_json::Value>(
        "binding",
        &name,
        &PostParams::default(),
        &binding,
    )
    .await
    .with_context(|| format!("{namespace}/{name}: binding"))?;
    let note = format!("Successfully assigned {namespace}/{name} to {}", p.node);
    let scheduled = event(&p.preemptor, "Scheduled", "Normal", "Binding", &note);
    events
        .create(&PostParams::default(), &scheduled)
        .await
        .with_context(|| format!("{namespace}/{name}: event"))?;
    Ok(())
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
