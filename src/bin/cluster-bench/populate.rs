//! `cluster-bench populate`: the synthetic cluster of `gantry bench` (nodes of 32 cpu, 128Gi,
//! 110 pods, Ready, over three zones; pending pods requesting 100m..2 cpu and 128Mi..2Gi), or
//! one of scheduler_perf's volume workloads (see [`crate::volumes`]), created in a real API
//! server, many creates in flight over one client. The nodes once per control plane, the pods
//! once per run, each run's in a namespace of its own. The gang workload's pods are the plain
//! workload's in groups (see [`crate::gangs`]), their PodGroups created first. A volume workload's pods come with
//! their claims and volumes, and populate waits until the PV controller has bound every
//! claim, so that the scheduler measured afterwards finds them bound. The preemption
//! workload's (see [`crate::preemption`]) come in two sets: the low-priority init pods, then
//! (once a scheduler has placed those) the high-priority measured pods with their
//! PriorityClass.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{StreamExt, stream};
use gantry_core::config::DEFAULT_SCHEDULER_NAME;
use gantry_core::model::pod_group::PodGroup;
use gantry_core::synthetic::{self, Workload};
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::CSINode;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::{Api, ListParams, PostParams};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::gangs;
use crate::preemption::{self, Set};
use crate::volumes::{self, Kind};

/// Attempts per object before giving up.
const ATTEMPTS: u32 = 5;
/// How often the claims are counted while the PV controller binds them.
const BOUND_POLL: Duration = Duration::from_secs(1);
/// How often the wait for the claims says how far it got.
const BOUND_PROGRESS: Duration = Duration::from_secs(30);

/// Arguments of `cluster-bench populate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Admin kubeconfig of the API server.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Nodes to create.
    #[arg(long, default_value_t = 0)]
    nodes: usize,
    /// Pending pods to create.
    #[arg(long, default_value_t = 0)]
    pods: usize,
    /// The pods' namespace (created if missing).
    #[arg(long, default_value = crate::DEFAULT_NAMESPACE)]
    namespace: String,
    /// Which nodes and pods: plain (requests only), constrained (100 deployments with
    /// preferred pod anti-affinity and a zone topology spread constraint) or gangs (the plain
    /// pods in PodGroups of `--gang-size`; needs the PodGroup CRD) on the synthetic nodes, or one of scheduler_perf's volume workloads on its nodes (in-tree-pvs, csi-pvs,
    /// migrated-in-tree-pvs), or its preemption workload on its nodes (preemption-init: the
    /// low-priority pods; preemption: the high-priority ones).
    #[arg(long, value_enum, default_value = "plain")]
    workload: WorkloadArg,
    /// The pods' `spec.schedulerName`.
    #[arg(long, default_value = DEFAULT_SCHEDULER_NAME)]
    scheduler_name: String,
    /// Seed of the pods' requests.
    #[arg(long, default_value_t = gantry_core::synthetic::DEFAULT_SEED)]
    seed: u64,
    /// The gang workload: pods per PodGroup (consecutive pods; its `minMember`).
    #[arg(long, default_value_t = crate::gangs::DEFAULT_GANG_SIZE)]
    gang_size: usize,
    /// Creates in flight at once.
    #[arg(long, default_value_t = crate::DEFAULT_CONCURRENCY)]
    concurrency: usize,
    /// A volume workload: give up when the PV controller has not bound every claim this many
    /// seconds after the last pod was created.
    #[arg(long, default_value_t = 1200)]
    bound_timeout: u64,
}

/// The workloads, as `gantry bench` names them.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum WorkloadArg {
    /// Requests only.
    Plain,
    /// Deployments with anti-affinity and spreading.
    Constrained,
    /// The plain pods in gangs, each a PodGroup.
    Gangs,
    /// scheduler_perf's `SchedulingInTreePVs`.
    InTreePvs,
    /// scheduler_perf's `SchedulingCSIPVs`.
    CsiPvs,
    /// scheduler_perf's `SchedulingMigratedInTreePVs`.
    MigratedInTreePvs,
    /// scheduler_perf's `Preemption`, its init pods (low priority).
    PreemptionInit,
    /// scheduler_perf's `Preemption`, its measured pods (high priority).
    Preemption,
}

impl WorkloadArg {
    /// The volume workload, if it is one.
    fn volumes(self) -> Option<Kind> {
        match self {
            WorkloadArg::Plain
            | WorkloadArg::Constrained
            | WorkloadArg::Gangs
            | WorkloadArg::PreemptionInit
            | WorkloadArg::Preemption => None,
            WorkloadArg::InTreePvs => Some(Kind::InTree),
            WorkloadArg::CsiPvs => Some(Kind::Csi),
            WorkloadArg::MigratedInTreePvs => Some(Kind::MigratedInTree),
        }
    }

    /// The preemption workload's set of pods, if it is that workload.
    fn preemption(self) -> Option<Set> {
        match self {
            WorkloadArg::PreemptionInit => Some(Set::Low),
            WorkloadArg::Preemption => Some(Set::High),
            _ => None,
        }
    }
}

/// Creates the nodes, then the pods (with a volume workload's claims and volumes).
pub async fn run(args: Args) -> anyhow::Result<()> {
    let client = crate::client(&args.kubeconfig).await?;
    let kind = args.workload.volumes();
    let start = Instant::now();
    let mut csi_nodes = 0;
    match kind {
        // scheduler_perf's nodes (node-default.yaml) are the in-tree volume workload's.
        None if args.workload.preemption().is_some() => {
            let nodes = volumes::nodes(args.nodes, Kind::InTree);
            create_all(Api::<Node>::all(client.clone()), nodes, args.concurrency).await?;
        }
        None => {
            let nodes = synthetic::nodes(args.nodes);
            create_all(Api::<Node>::all(client.clone()), nodes, args.concurrency).await?;
        }
        Some(kind) => {
            let nodes = volumes::nodes(args.nodes, kind);
            let csi = volumes::csi_nodes(&nodes, kind);
            csi_nodes = csi.len();
            create_all(Api::<Node>::all(client.clone()), nodes, args.concurrency).await?;
            create_all(Api::<CSINode>::all(client.clone()), csi, args.concurrency).await?;
        }
    }
    let nodes_done = start.elapsed();
    if args.nodes > 0 {
        eprintln!(
            "cluster-bench: created {} nodes{} in {:.1}s ({:.0}/s)",
            args.nodes,
            if csi_nodes > 0 {
                format!(" and their {csi_nodes} CSINodes")
            } else {
                String::new()
            },
            nodes_done.as_secs_f64(),
            rate(args.nodes, nodes_done),
        );
    }
    if args.pods == 0 {
        return Ok(());
    }
    create_namespace(&client, &args.namespace).await?;
    let pods_api = Api::<Pod>::namespaced(client.clone(), &args.namespace);
    let pods_start = Instant::now();
    if let Some(set) = args.workload.preemption() {
        if set == Set::High {
            let class = preemption::high_priority_class();
            create(&Api::<PriorityClass>::all(client.clone()), &class).await?;
        }
        let pods = preemption::pods(args.pods, set, &args.namespace, &args.scheduler_name);
        create_all(pods_api, pods, args.concurrency).await?;
        let took = pods_start.elapsed();
        eprintln!(
            "cluster-bench: created {} {} pods in {} in {:.1}s ({:.0}/s)",
            args.pods,
            match set {
                Set::Low => "low-priority",
                Set::High => "high-priority",
            },
            args.namespace,
            took.as_secs_f64(),
            rate(args.pods, took),
        );
        return Ok(());
    }
    let Some(kind) = kind else {
        let workload = match args.workload {
            WorkloadArg::Constrained => Workload::Constrained,
            _ => Workload::Plain,
        };
        let mut pods = synthetic::pods(args.pods, workload, &args.scheduler_name, args.seed);
        for p in &mut pods {
            p.metadata.namespace = Some(args.namespace.clone());
        }
        let mut groups = 0;
        if matches!(args.workload, WorkloadArg::Gangs) {
            let pod_groups = gangs::group(&mut pods, args.gang_size, &args.namespace)
                .map_err(anyhow::Error::msg)?;
            groups = pod_groups.len();
            let api = Api::<PodGroup>::namespaced(client.clone(), &args.namespace);
            create_all(api, pod_groups, args.concurrency)
                .await
                .context("cannot create the PodGroups (is the PodGroup CRD installed?)")?;
        }
        create_all(pods_api, pods, args.concurrency).await?;
        let took = pods_start.elapsed();
        eprintln!(
            "cluster-bench: created {} pods{} in {} in {:.1}s ({:.0}/s)",
            args.pods,
            if groups > 0 {
                format!(" in {groups} PodGroups")
            } else {
                String::new()
            },
            args.namespace,
            took.as_secs_f64(),
            rate(args.pods, took),
        );
        return Ok(());
    };
    let objects = volumes::objects(args.pods, &args.namespace, kind, &args.scheduler_name);
    let claims_api = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &args.namespace);
    create_all(
        Api::<PersistentVolume>::all(client.clone()),
        objects.volumes,
        args.concurrency,
    )
    .await?;
    let claims_start = Instant::now();
    create_all(claims_api.clone(), objects.claims, args.concurrency).await?;
    create_all(pods_api, objects.pods, args.concurrency).await?;
    let created = Instant::now();
    eprintln!(
        "cluster-bench: created {n} volumes, {n} claims and {n} pods in {} in {:.1}s ({:.0} objects/s)",
        args.namespace,
        (created - pods_start).as_secs_f64(),
        rate(3 * args.pods, created - pods_start),
        n = args.pods,
    );
    wait_bound(
        &claims_api,
        args.pods,
        Duration::from_secs(args.bound_timeout),
    )
    .await?;
    eprintln!(
        "cluster-bench: the PV controller had bound every claim {:.1}s after the last pod was created ({:.1}s after the first claim)",
        created.elapsed().as_secs_f64(),
        claims_start.elapsed().as_secs_f64(),
    );
    Ok(())
}

/// Waits until `claims` claims are Bound, counting them in the API server's watch cache every
/// [`BOUND_POLL`]; fails after `timeout`.
async fn wait_bound(
    api: &Api<PersistentVolumeClaim>,
    claims: usize,
    timeout: Duration,
) -> anyhow::Result<()> {
    let start = Instant::now();
    let mut said = start;
    loop {
        let bound = api
            .list(&ListParams::default().match_any())
            .await
            .context("cannot list the claims")?
            .items
            .iter()
            .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
            .count();
        if bound >= claims {
            return Ok(());
        }
        if start.elapsed() > timeout {
            bail!(
                "{bound} of {claims} claims Bound after {} s: is the PV controller running (kube-controller-manager --controllers=persistentvolume-binder)? See its log",
                timeout.as_secs()
            );
        }
        if said.elapsed() >= BOUND_PROGRESS {
            eprintln!("cluster-bench: {bound} of {claims} claims Bound");
            said = Instant::now();
        }
        tokio::time::sleep(BOUND_POLL).await;
    }
}

fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

/// Creates every object, `concurrency` at a time; an object that already exists counts as
/// created, other failures are retried a few times.
pub async fn create_all<K>(api: Api<K>, objects: Vec<K>, concurrency: usize) -> anyhow::Result<()>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    let results: Vec<anyhow::Result<()>> = stream::iter(objects)
        .map(|o| {
            let api = api.clone();
            async move { create(&api, &o).await }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let failed: Vec<String> = results
        .into_iter()
        .filter_map(|r| r.err().map(|e| format!("{e:#}")))
        .collect();
    if let Some(first) = failed.first() {
        bail!("{} creates failed; the first: {first}", failed.len());
    }
    Ok(())
}

/// Creates the namespace `name`; one that already exists counts as created.
pub async fn create_namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    create(&Api::<Namespace>::all(client.clone()), &namespace).await
}

/// Creates `object`; one that already exists counts as created, other failures are retried a
/// few times.
pub async fn create<K>(api: &Api<K>, object: &K) -> anyhow::Result<()>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    let name = object.meta().name.clone().unwrap_or_default();
    let mut attempt = 0;
    loop {
        attempt += 1;
        match api.create(&PostParams::default(), object).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(()),
            Err(_) if attempt < ATTEMPTS => {
                tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
            }
            Err(e) => return Err(e).with_context(|| format!("cannot create {name}")),
        }
    }
}
