//! `cluster-bench null-binder`: a scheduler that decides nothing. It lists the pending pods of
//! a scheduler name (from the API server's watch cache, as gantry's and client-go's informers
//! do; the harness starts it once the API server is idle after the pods were created, so the
//! cache holds them all) and binds them round-robin over the nodes (sorted by name), many bindings
//! in flight over one client, so that its throughput is what the API server can bind on this
//! machine: the ceiling of any scheduler. Then it waits for SIGTERM or SIGINT, like a
//! scheduler would, so that the harness treats it like the others.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{StreamExt, stream};
use gantry_core::config::DEFAULT_SCHEDULER_NAME;
use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, PostParams};

/// Attempts per binding when the API server fails (not when it refuses).
const ATTEMPTS: u32 = 3;

/// Arguments of `cluster-bench null-binder`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Kubeconfig of the API server.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Bind the pending pods with this `spec.schedulerName`.
    #[arg(long, default_value = DEFAULT_SCHEDULER_NAME)]
    scheduler_name: String,
    /// Bindings in flight at once.
    #[arg(long, default_value_t = 256)]
    in_flight: usize,
}

/// How one binding went.
enum Outcome {
    Bound,
    Refused,
    Failed,
}

/// Binds every pending pod, then waits for a signal.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let client = crate::client(&args.kubeconfig).await?;
    let start = Instant::now();
    let nodes = node_names(&client).await?;
    anyhow::ensure!(!nodes.is_empty(), "no nodes to bind to");
    let selector = format!("spec.nodeName=,spec.schedulerName={}", args.scheduler_name);
    let pods = Api::<Pod>::all(client.clone())
        .list_metadata(&ListParams::default().match_any().fields(&selector))
        .await
        .context("cannot list pods")?
        .items;
    let listed = start.elapsed();
    let bindings = pods
        .into_iter()
        .enumerate()
        .map(|(i, p)| binding(p.metadata, &nodes[i % nodes.len()]));
    let outcomes: Vec<Outcome> = stream::iter(bindings)
        .map(|b| {
            let client = client.clone();
            async move { bind(client, b).await }
        })
        .buffer_unordered(args.in_flight.max(1))
        .collect()
        .await;
    let count = |f: fn(&Outcome) -> bool| outcomes.iter().filter(|o| f(o)).count();
    eprintln!(
        "null-binder: listed {} nodes and {} pods in {:.2}s; {} bound, {} refused, {} failed in {:.2}s",
        nodes.len(),
        outcomes.len(),
        listed.as_secs_f64(),
        count(|o| matches!(o, Outcome::Bound)),
        count(|o| matches!(o, Outcome::Refused)),
        count(|o| matches!(o, Outcome::Failed)),
        (start.elapsed() - listed).as_secs_f64(),
    );
    crate::wait_for_signal().await
}

/// The names of the cluster's nodes, sorted (from the API server's watch cache).
pub async fn node_names(client: &kube::Client) -> anyhow::Result<Vec<String>> {
    let mut nodes: Vec<String> = Api::<Node>::all(client.clone())
        .list_metadata(&ListParams::default().match_any())
        .await
        .context("cannot list nodes")?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    nodes.sort();
    Ok(nodes)
}

/// The binding of the pod of `pod` (its name, namespace and uid) to `node`.
pub fn binding(pod: ObjectMeta, node: &str) -> Binding {
    Binding {
        metadata: ObjectMeta {
            name: pod.name,
            namespace: pod.namespace,
            uid: pod.uid,
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".to_string()),
            kind: Some("Node".to_string()),
            name: Some(node.to_string()),
            ..Default::default()
        },
    }
}

async fn bind(client: kube::Client, binding: Binding) -> Outcome {
    let name = binding.metadata.name.clone().unwrap_or_default();
    let namespace = binding.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client, &namespace);
    let mut attempt = 0;
    loop {
        attempt += 1;
        match api
            .create_subresource::<_, serde_json::Value>(
                "binding",
                &name,
                &PostParams::default(),
                &binding,
            )
            .await
        {
            Ok(_) => return Outcome::Bound,
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
                eprintln!("null-binder: {namespace}/{name}: {}", s.message);
                return Outcome::Refused;
            }
            Err(e) if attempt >= ATTEMPTS => {
                eprintln!("null-binder: {namespace}/{name}: {e}");
                return Outcome::Failed;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}
