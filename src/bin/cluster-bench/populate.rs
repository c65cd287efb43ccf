//! `cluster-bench populate`: the synthetic cluster of `gantry bench` (nodes of 32 cpu, 128Gi,
//! 110 pods, Ready, over three zones; pending pods requesting 100m..2 cpu and 128Mi..2Gi)
//! created in a real API server, many creates in flight over one client. The nodes once per
//! control plane, the pods once per run, each run's in a namespace of its own.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{StreamExt, stream};
use gantry::config::DEFAULT_SCHEDULER_NAME;
use gantry::synthetic::{self, Workload};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::{Api, PostParams};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Attempts per object before giving up.
const ATTEMPTS: u32 = 5;

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
    /// Which pods: plain (requests only) or constrained (100 deployments with preferred pod
    /// anti-affinity and a zone topology spread constraint).
    #[arg(long, value_enum, default_value = "plain")]
    workload: WorkloadArg,
    /// The pods' `spec.schedulerName`.
    #[arg(long, default_value = DEFAULT_SCHEDULER_NAME)]
    scheduler_name: String,
    /// Seed of the pods' requests.
    #[arg(long, default_value_t = gantry::synthetic::DEFAULT_SEED)]
    seed: u64,
    /// Creates in flight at once.
    #[arg(long, default_value_t = crate::DEFAULT_CONCURRENCY)]
    concurrency: usize,
}

/// The workloads, as `gantry bench` names them.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum WorkloadArg {
    /// Requests only.
    Plain,
    /// Deployments with anti-affinity and spreading.
    Constrained,
}

/// Creates the nodes, then the pods.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let client = crate::client(&args.kubeconfig).await?;
    let workload = match args.workload {
        WorkloadArg::Plain => Workload::Plain,
        WorkloadArg::Constrained => Workload::Constrained,
    };
    let start = Instant::now();
    let nodes = synthetic::nodes(args.nodes);
    create_all(Api::<Node>::all(client.clone()), nodes, args.concurrency).await?;
    let nodes_done = start.elapsed();
    let mut pods = synthetic::pods(args.pods, workload, &args.scheduler_name, args.seed);
    if !pods.is_empty() {
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(args.namespace.clone()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        create(&Api::<Namespace>::all(client.clone()), &namespace).await?;
        for p in &mut pods {
            p.metadata.namespace = Some(args.namespace.clone());
        }
    }
    create_all(
        Api::<Pod>::namespaced(client, &args.namespace),
        pods,
        args.concurrency,
    )
    .await?;
    let all_done = start.elapsed();
    if args.nodes > 0 {
        eprintln!(
            "cluster-bench: created {} nodes in {:.1}s ({:.0}/s)",
            args.nodes,
            nodes_done.as_secs_f64(),
            rate(args.nodes, nodes_done),
        );
    }
    if args.pods > 0 {
        eprintln!(
            "cluster-bench: created {} pods in {} in {:.1}s ({:.0}/s)",
            args.pods,
            args.namespace,
            (all_done - nodes_done).as_secs_f64(),
            rate(args.pods, all_done - nodes_done),
        );
    }
    Ok(())
}

fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

/// Creates every object, `concurrency` at a time; an object that already exists counts as
/// created, other failures are retried a few times.
async fn create_all<K>(api: Api<K>, objects: Vec<K>, concurrency: usize) -> anyhow::Result<()>
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

async fn create<K>(api: &Api<K>, object: &K) -> anyhow::Result<()>
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
