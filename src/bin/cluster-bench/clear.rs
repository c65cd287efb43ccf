//! `cluster-bench clear`: deletes a finished run's pods and events, and its claims and
//! volumes if it has any, so that the next scheduler meets the control plane as the first
//! did: the same nodes, empty, and only its own pending pods. The pods are bound to nodes
//! without a kubelet, so they are deleted without a grace period (nothing would ever confirm
//! a graceful one), many deletes in flight; the events (a scheduler writes one per pod, and
//! they would live for an hour) go in one request. The claims and volumes go in one request
//! each, and then their protection finalizers (which the API server adds, and whose
//! controllers the benchmark does not run) are removed one by one; the PodGroups, where the
//! API server serves them, go in one request too. Then etcd's history is
//! compacted and its database defragmented: every run writes 40,000 revisions or more, and
//! without this each run would find etcd larger than the one before it did.

use std::fmt::Debug;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{StreamExt, stream};
use gantry_core::model::pod_group::PodGroup;
use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde::de::DeserializeOwned;

use crate::volumes::RUN_LABEL;

/// Attempts per pod, or per object's finalizers, before giving up.
const ATTEMPTS: u32 = 5;
/// Longest a clear may take (the deletes and the wait until nothing of the run is listed).
const GONE_MAX: Duration = Duration::from_secs(120);
/// Longest wait for one request to etcd (a defragmentation rewrites the whole database).
const ETCD_TIMEOUT: Duration = Duration::from_secs(60);

/// Arguments of `cluster-bench clear`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Admin kubeconfig of the API server.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// The namespace whose pods, events, claims and PodGroups go, with the volumes labelled with it
    /// (`cluster-bench/run`).
    #[arg(long)]
    namespace: String,
    /// Deletes in flight at once.
    #[arg(long, default_value_t = crate::DEFAULT_CONCURRENCY)]
    concurrency: usize,
    /// etcd's client URL (plain HTTP, as the scripts' control plane serves it): compact its
    /// history to the current revision and defragment it once the pods are gone.
    #[arg(long)]
    etcd: Option<String>,
}

/// Deletes every pod, event, claim and PodGroup of the namespace and the volumes labelled with it, and
/// waits until none is listed.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let client = crate::client(&args.kubeconfig).await?;
    let api = Api::<Pod>::namespaced(client.clone(), &args.namespace);
    let start = Instant::now();
    let all = ListParams::default();
    let names = names(&api, &all, "pods").await?;
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
    Api::<Event>::namespaced(client.clone(), &args.namespace)
        .delete_collection(&DeleteParams::default(), &all)
        .await
        .with_context(|| format!("cannot delete the events of {}", args.namespace))?;
    let claims_api = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &args.namespace);
    let claims = delete_protected(&claims_api, &all, "claims", args.concurrency).await?;
    let volumes_api = Api::<PersistentVolume>::all(client.clone());
    let run_volumes = ListParams::default().labels(&format!("{RUN_LABEL}={}", args.namespace));
    let volumes = delete_protected(&volumes_api, &run_volumes, "volumes", args.concurrency).await?;
    let groups_api = Api::<PodGroup>::namespaced(client, &args.namespace);
    let groups = delete_pod_groups(&groups_api).await?;
    wait_gone(&api, &all, "pods", start).await?;
    wait_gone(&claims_api, &all, "claims", start).await?;
    wait_gone(&volumes_api, &run_volumes, "volumes", start).await?;
    if groups > 0 {
        wait_gone(&groups_api, &all, "PodGroups", start).await?;
    }
    eprintln!(
        "cluster-bench: deleted {} pods of {}{}{} in {:.1}s",
        names.len(),
        args.namespace,
        if claims + volumes > 0 {
            format!(", {claims} claims and {volumes} volumes")
        } else {
            String::new()
        },
        if groups > 0 {
            format!(", {groups} PodGroups")
        } else {
            String::new()
        },
        start.elapsed().as_secs_f64()
    );
    if let Some(etcd) = &args.etcd {
        let revision = compact_and_defragment(etcd).await?;
        eprintln!("cluster-bench: etcd compacted at revision {revision} and defragmented");
    }
    Ok(())
}

/// The names of the objects `api` lists with `params`.
async fn names<K>(api: &Api<K>, params: &ListParams, what: &str) -> anyhow::Result<Vec<String>>
where
    K: Clone + DeserializeOwned + Debug,
{
    Ok(api
        .list_metadata(params)
        .await
        .with_context(|| format!("cannot list the {what}"))?
        .items
        .into_iter()
        .filter_map(|o| o.metadata.name)
        .collect())
}

/// Deletes the objects `api` lists with `params` in one request, then removes the finalizers
/// that hold them back (kubernetes.io/pvc-protection and pv-protection: their controllers
/// would remove them once no pod uses the claim, and the benchmark does not run them).
/// Returns how many there were.
async fn delete_protected<K>(
    api: &Api<K>,
    params: &ListParams,
    what: &str,
    concurrency: usize,
) -> anyhow::Result<usize>
where
    K: Clone + DeserializeOwned + Debug,
{
    let names = names(api, params, what).await?;
    if names.is_empty() {
        return Ok(0);
    }
    api.delete_collection(&DeleteParams::default(), params)
        .await
        .with_context(|| format!("cannot delete the {what}"))?;
    let unprotect = Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}}));
    let failed: Vec<String> = stream::iter(&names)
        .map(|name| {
            let unprotect = &unprotect;
            async move {
                let mut attempt = 0;
                loop {
                    attempt += 1;
                    match api.patch(name, &PatchParams::default(), unprotect).await {
                        Ok(_) => return Ok(()),
                        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
                        Err(_) if attempt < ATTEMPTS => {
                            tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt)))
                                .await;
                        }
                        Err(e) => {
                            return Err(anyhow::Error::new(e)).with_context(|| {
                                format!("cannot remove the finalizers of {name}")
                            });
                        }
                    }
                }
            }
        })
        .buffer_unordered(concurrency.max(1))
        .filter_map(|r| async move { r.err().map(|e| format!("{e:#}")) })
        .collect()
        .await;
    if let Some(first) = failed.first() {
        bail!(
            "{} {what} kept their finalizers; the first: {first}",
            failed.len()
        );
    }
    Ok(names.len())
}

/// Deletes the namespace's PodGroups in one request; returns how many there were, none when
/// the API server does not serve PodGroups (the CRD is installed only for the gang
/// workload).
async fn delete_pod_groups(api: &Api<PodGroup>) -> anyhow::Result<usize> {
    let all = ListParams::default();
    let names = match api.list_metadata(&all).await {
        Ok(list) => list.items.len(),
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(0),
        Err(e) => return Err(e).context("cannot list the PodGroups"),
    };
    if names > 0 {
        api.delete_collection(&DeleteParams::default(), &all)
            .await
            .context("cannot delete the PodGroups")?;
    }
    Ok(names)
}

/// Waits until `api` lists nothing with `params`, until [`GONE_MAX`] after `start`.
async fn wait_gone<K>(
    api: &Api<K>,
    params: &ListParams,
    what: &str,
    start: Instant,
) -> anyhow::Result<()>
where
    K: Clone + DeserializeOwned + Debug,
{
    loop {
        let left = api
            .list_metadata(&params.clone().limit(1))
            .await
            .with_context(|| format!("cannot list the {what}"))?
            .items
            .len();
        if left == 0 {
            return Ok(());
        }
        if start.elapsed() > GONE_MAX {
            bail!(
                "{what} still listed {} s after their deletion",
                GONE_MAX.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Compacts etcd's history up to its current revision and defragments its database, through
/// etcd's JSON gateway. Returns the revision.
async fn compact_and_defragment(etcd: &str) -> anyhow::Result<i64> {
    let base = etcd.trim_end_matches('/');
    // A range over the key "\0" reads nothing but the header, which holds the revision.
    let header = etcd_post(
        &format!("{base}/v3/kv/range"),
        serde_json::json!({"key": "AA=="}),
    )
    .await?;
    let revision: i64 = header["header"]["revision"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .with_context(|| format!("etcd's answer has no header.revision: {header}"))?;
    let compaction = etcd_post(
        &format!("{base}/v3/kv/compaction"),
        serde_json::json!({"revision": revision.to_string(), "physical": true}),
    )
    .await;
    // The API server compacts etcd too (every five minutes): a revision it got to first is
    // as good.
    if let Err(e) = compaction
        && !format!("{e:#}").contains("compacted")
    {
        return Err(e);
    }
    etcd_post(
        &format!("{base}/v3/maintenance/defragment"),
        serde_json::json!({}),
    )
    .await?;
    Ok(revision)
}

/// POSTs `body` to etcd's JSON gateway and returns the answer.
async fn etcd_post(url: &str, body: serde_json::Value) -> anyhow::Result<serde_json::Value> {
    use http_body_util::{BodyExt, Full};
    use hyper::body::Bytes;
    use hyper_util::client::legacy::Client as HttpClient;
    use hyper_util::rt::TokioExecutor;

    let request = hyper::Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .with_context(|| format!("invalid URL {url}"))?;
    let client = HttpClient::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let answer = tokio::time::timeout(ETCD_TIMEOUT, async {
        let response = client.request(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        anyhow::ensure!(
            status.is_success(),
            "HTTP {status}: {}",
            String::from_utf8_lossy(&body)
        );
        Ok(body)
    })
    .await
    .with_context(|| format!("{url}: no answer within {} s", ETCD_TIMEOUT.as_secs()))?
    .with_context(|| format!("{url} failed"))?;
    serde_json::from_slice(&answer).with_context(|| format!("{url}: not JSON"))
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
