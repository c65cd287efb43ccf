//! `cluster-bench clear`: deletes a finished run's pods, so that the next scheduler meets the
//! control plane as the first did: the same nodes, empty, and only its own pending pods. The
//! pods are bound to nodes without a kubelet, so they are deleted without a grace period
//! (nothing would ever confirm a graceful one), many deletes in flight.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams};

/// Attempts per pod before giving up.
const ATTEMPTS: u32 = 5;
/// Longest wait for the namespace to list no pod.
const GONE_MAX: Duration = Duration::from_secs(120);

/// Arguments of `cluster-bench clear`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Admin kubeconfig of the API server.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// The namespace whose pods go.
    #[arg(long)]
    namespace: String,
    /// Deletes in flight at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
}

/// Deletes every pod of the namespace and waits until it lists none.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let client = crate::client(&args.kubeconfig).await?;
    let api = Api::<Pod>::namespaced(client, &args.namespace);
    let start = Instant::now();
    let names: Vec<String> = api
        .list_metadata(&ListParams::default())
        .await
        .with_context(|| format!("cannot list the pods of {}", args.namespace))?
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    let failed: Vec<String> = stream::iter(&names)
        .map(|name| {
            let api = api.clone();
            async move { delete(&api, name).await }
        })
        .buffer_unordered(args.concurrency.max(1))
        .filter_map(|r| async move { r.err().map(|e| format!("{e:#}")) })
        .collect()
        .await;
    if let Some(first) = failed.first() {
        bail!("{} deletes failed; the first: {first}", failed.len());
    }
    loop {
        let left = api
            .list_metadata(&ListParams::default().limit(1))
            .await
            .with_context(|| format!("cannot list the pods of {}", args.namespace))?
            .items
            .len();
        if left == 0 {
            break;
        }
        if start.elapsed() > GONE_MAX {
            bail!(
                "pods of {} still listed {} s after their deletion",
                args.namespace,
                GONE_MAX.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "cluster-bench: deleted {} pods of {} in {:.1}s",
        names.len(),
        args.namespace,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Deletes one pod at once; a pod already gone counts as deleted, other failures are retried.
async fn delete(api: &Api<Pod>, name: &str) -> anyhow::Result<()> {
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    let mut attempt = 0;
    loop {
        attempt += 1;
        match api.delete(name, &now).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(_) if attempt < ATTEMPTS => {
                tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
            }
            Err(e) => return Err(e).with_context(|| format!("cannot delete pod {name}")),
        }
    }
}
