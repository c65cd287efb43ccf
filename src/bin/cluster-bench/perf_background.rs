//! The background ops of a scheduler_perf workload, as `cluster-bench scheduler-perf
//! background` runs them next to the measured scheduler (started with it by `cluster-bench run
//! --companion`, stopped with it): `churn` (every interval, one object per template created,
//! or in recreate mode each slot's object deleted or created in turn) and `deletePods` with
//! `skipWaitToCompletion` (the namespace's pods, listed at the start, deleted at the given
//! rate). At SIGTERM the churn's objects still there are deleted: the next run meets the
//! cluster as this one did (its churn nodes especially, which are not in any namespace).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, bail};
use futures::future::join_all;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::perf_config::{Churn, ChurnMode, DeletePods, Op, Workload};
use crate::perf_objects;
use crate::populate::{create, create_namespace};

/// scheduler_perf's churn interval when the op gives none.
const DEFAULT_INTERVAL: Duration = Duration::from_millis(500);

/// The kinds a churn template may have (those of scheduler_perf's churn templates).
#[derive(Debug, Clone, Copy)]
enum Kind {
    Node,
    Pod,
    Service,
}

/// One churn template: its object, kind and namespace, and the names of the objects made from
/// it that are still there.
struct Churner {
    template: Value,
    kind: Kind,
    namespace: String,
    live: Mutex<Vec<String>>,
}

/// Runs the workload's background ops until SIGTERM or SIGINT, then deletes the churn's
/// objects still there.
pub async fn run(client: &Client, workload: &Workload) -> anyhow::Result<()> {
    let mut churns = Vec::new();
    let mut deletes = Vec::new();
    for (index, op) in workload.ops.iter().enumerate() {
        match op {
            Op::Churn(churn) => churns.push((
                churn,
                churners(client, churn)
                    .await
                    .with_context(|| format!("op {index} (churn)"))?,
            )),
            Op::DeletePods(delete) if delete.skip_wait_to_completion => deletes.push(delete),
            _ => {}
        }
    }
    let work = async {
        let churning = join_all(
            churns
                .iter()
                .map(|(op, churners)| churn(client, op, churners)),
        );
        let deleting = join_all(deletes.iter().map(|op| delete_pods(client, op)));
        let (_, deleted) = futures::join!(churning, deleting);
        for result in deleted {
            if let Err(e) = result {
                eprintln!("cluster-bench: deletePods: {e:#}");
            }
        }
        std::future::pending::<()>().await;
    };
    tokio::select! {
        signal = crate::wait_for_signal() => signal?,
        () = work => {}
    }
    for (_, churners) in &churns {
        for churner in churners {
            remove_live(client, churner).await;
        }
    }
    Ok(())
}

/// The churners of `op`'s templates, with the PriorityClasses their pods name created.
async fn churners(client: &Client, op: &Churn) -> anyhow::Result<Vec<Churner>> {
    let namespace = op.namespace.clone().unwrap_or_default();
    create_namespace(client, &namespace).await?;
    let mut churners = Vec::new();
    for path in &op.template_paths {
        let mut template = perf_objects::render(path, &BTreeMap::new())?;
        let kind = match template["kind"].as_str() {
            Some("Node") => Kind::Node,
            Some("Pod") => Kind::Pod,
            Some("Service") => Kind::Service,
            other => bail!(
                "{}: kind {other:?} is not churned (Node, Pod, Service are)",
                path.display()
            ),
        };
        if let Some(class) = perf_objects::priority_class(&mut template) {
            create(&Api::<PriorityClass>::all(client.clone()), &class).await?;
        }
        churners.push(Churner {
            template,
            kind,
            namespace: namespace.clone(),
            live: Mutex::new(Vec::new()),
        });
    }
    Ok(churners)
}

/// Churns `op`'s objects every interval: in create mode until `number` per template (0: no
/// end), in recreate mode for ever, `number` slots per template.
async fn churn(client: &Client, op: &Churn, churners: &[Churner]) {
    let interval = op
        .interval_milliseconds
        .map_or(DEFAULT_INTERVAL, Duration::from_millis);
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    let mut slots: Vec<Vec<Option<String>>> = vec![vec![None; op.number.max(1)]; churners.len()];
    let mut tick = 0;
    loop {
        if op.mode == ChurnMode::Create && op.number > 0 && tick >= op.number {
            return;
        }
        ticker.tick().await;
        for (churner, slots) in churners.iter().zip(&mut slots) {
            let at = tick % slots.len();
            let slot = &mut slots[at];
            *slot = match (op.mode, slot.take()) {
                (ChurnMode::Recreate, Some(name)) => {
                    delete_object(client, churner, &name).await;
                    None
                }
                _ => create_object(client, churner).await,
            };
        }
        tick += 1;
    }
}

/// Creates one object of `churner` (its name generated by the API server); its name, or None
/// when the API server refused it (scheduler_perf ignores that too).
async fn create_object(client: &Client, churner: &Churner) -> Option<String> {
    let name = match churner.kind {
        Kind::Node => post(Api::<Node>::all(client.clone()), &churner.template).await,
        Kind::Pod => {
            post(
                Api::<Pod>::namespaced(client.clone(), &churner.namespace),
                &churner.template,
            )
            .await
        }
        Kind::Service => {
            post(
                Api::<Service>::namespaced(client.clone(), &churner.namespace),
                &churner.template,
            )
            .await
        }
    };
    match name {
        Ok(name) => {
            lock(&churner.live).push(name.clone());
            Some(name)
        }
        Err(e) => {
            eprintln!("cluster-bench: churn: {e:#}");
            None
        }
    }
}

/// Creates `template` through `api`; the name the API server gave it.
async fn post<K>(api: Api<K>, template: &Value) -> anyhow::Result<String>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    let object: K = serde_json::from_value(template.clone()).context("the churn template")?;
    let created = api.create(&PostParams::default(), &object).await?;
    created
        .meta()
        .name
        .clone()
        .context("created without a name")
}

/// Deletes `churner`'s object `name`.
async fn delete_object(client: &Client, churner: &Churner, name: &str) {
    let params = DeleteParams::default();
    let result = match churner.kind {
        Kind::Node => Api::<Node>::all(client.clone())
            .delete(name, &params)
            .await
            .map(drop),
        Kind::Pod => Api::<Pod>::namespaced(client.clone(), &churner.namespace)
            .delete(name, &params)
            .await
            .map(drop),
        Kind::Service => Api::<Service>::namespaced(client.clone(), &churner.namespace)
            .delete(name, &params)
            .await
            .map(drop),
    };
    let gone = match &result {
        Ok(()) => true,
        Err(kube::Error::Api(status)) => status.code == 404,
        Err(_) => false,
    };
    match result {
        Err(e) if !gone => eprintln!("cluster-bench: churn: cannot delete {name}: {e}"),
        _ => lock(&churner.live).retain(|n| n != name),
    }
}

/// Deletes every object of `churner` still there.
async fn remove_live(client: &Client, churner: &Churner) {
    let names = lock(&churner.live).clone();
    for name in names {
        delete_object(client, churner, &name).await;
    }
}

fn lock(live: &Mutex<Vec<String>>) -> std::sync::MutexGuard<'_, Vec<String>> {
    live.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Deletes the pods of `op`'s namespace (matching its labels) as listed now, one per
/// `1/deletePodsPerSecond` (all at once when 0).
async fn delete_pods(client: &Client, op: &DeletePods) -> anyhow::Result<()> {
    let api = Api::<Pod>::namespaced(client.clone(), &op.namespace);
    let selector: Vec<String> = op
        .label_selector
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let params = ListParams::default().labels(&selector.join(","));
    if op.delete_pods_per_second == 0 {
        api.delete_collection(&DeleteParams::default(), &params)
            .await
            .with_context(|| format!("cannot delete the pods of {}", op.namespace))?;
        return Ok(());
    }
    let names: Vec<String> = api
        .list_metadata(&params)
        .await
        .with_context(|| format!("cannot list the pods of {}", op.namespace))?
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    let mut ticker = tokio::time::interval(Duration::from_secs(1) / op.delete_pods_per_second);
    for name in names {
        ticker.tick().await;
        if let Err(e) = api.delete(&name, &DeleteParams::default()).await {
            eprintln!("cluster-bench: deletePods: cannot delete {name}: {e}");
        }
    }
    Ok(())
}
