//! Binding: each decision is carried out by its own task, many at once (bounded by a
//! semaphore), over one shared client (one HTTP/2 connection, see [`super::client`]). Results
//! go back to the scheduling thread, which never waits for them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::core::Request;
use kube::{Api, Client};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use super::extender::Clients;
use super::metrics::Metrics;
use super::pre_bind::{self, LockSeen};
use gantry_core::extender::protocol::BindingArgs;
use gantry_core::framework::Code;
use gantry_core::scheduler::BindTask;

/// Bindings in flight at once.
pub const MAX_IN_FLIGHT: usize = 256;
/// Bindings in flight at first. Each one that finishes allows one more, up to
/// [`MAX_IN_FLIGHT`]: where the client speaks HTTP/1.1 (`DISABLE_HTTP2`, a proxy) every
/// binding in flight is a connection of its own, and the API server then does not face a
/// burst of full TLS handshakes (a certificate signature each) whenever gantry starts or
/// takes over; later connections resume the sessions of the first ones.
const FIRST_IN_FLIGHT: usize = 8;
/// How long after a binding's answer was lost the pod is first read back. A request the API
/// server was carrying out when the connection broke is done well within it.
const READ_BACK_DELAY: Duration = Duration::from_secs(1);
/// Longest wait between reads of a pod that cannot be read (the API server is down).
const MAX_READ_BACK_WAIT: Duration = Duration::from_secs(4);
/// How long a shutdown waits for bindings still in flight or being read back.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(10);

/// A decision to bind, with when its scheduling attempt started.
#[derive(Debug)]
pub struct BindRequest {
    /// The decision.
    pub task: Box<BindTask>,
    /// When the attempt started (for the attempt duration).
    pub attempt_start: Instant,
}

/// How a binding went, once gantry knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindOutcome {
    /// The pod is bound to the node planned.
    Bound,
    /// The pod turned out to be bound to another node (someone else bound it first).
    BoundElsewhere(Arc<str>),
    /// The pod is gone (deleted, or replaced by a new pod of the same name): nothing to retry.
    Gone(String),
    /// The binding did not take effect: forget the assumption and retry after backoff.
    Failed(String),
    /// What had to be done before the binding (volumes to bind) failed or timed out; the
    /// pod was not bound: forget the assumption and retry after backoff.
    PreBindFailed(String),
}

/// What the API server answered to a binding.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    /// Bound.
    Bound,
    /// 404: the pod (or its namespace) does not exist.
    Gone(String),
    /// A definite refusal (a 4xx other than 404 and 409, or a request that could not be
    /// built): nothing was written.
    Refused(String),
    /// No definite answer: a connection that broke or timed out after the request was sent,
    /// a 5xx, or a 409 (the pod already has a node, which may be this very binding, committed
    /// by an earlier try whose answer was lost). The binding may or may not have been written.
    Unknown(String),
}

/// Carries out every request from `requests`, handing each outcome to `report`, until
/// the channel closes and all bindings in flight are done (or, at shutdown, [`SHUTDOWN_WAIT`]
/// has passed: a binding still being read back then is left to the next leader's lists).
pub async fn run(
    client: Client,
    extenders: Option<Clients>,
    mut requests: mpsc::UnboundedReceiver<BindRequest>,
    report: impl Fn(Box<BindRequest>, BindOutcome) + Clone + Send + 'static,
    lock_seen: Arc<LockSeen>,
    metrics: Arc<Metrics>,
) {
    let limit = Arc::new(Semaphore::new(FIRST_IN_FLIGHT));
    let withheld = Arc::new(AtomicUsize::new(MAX_IN_FLIGHT - FIRST_IN_FLIGHT));
    while let Some(request) = requests.recv().await {
        let (client, report, metrics) = (client.clone(), report.clone(), metrics.clone());
        let extenders = extenders.clone();
        let (limit, withheld) = (limit.clone(), withheld.clone());
        if request.task.plan.pre_bind.is_empty() {
            let Ok(permit) = limit.clone().acquire_owned().await else {
                return;
            };
            tokio::spawn(bind_and_report(
                Binders { client, extenders },
                request,
                permit,
                limit,
                withheld,
                report,
                metrics,
            ));
            continue;
        }
        // Work before the binding (volumes to bind) may wait minutes on other controllers:
        // it holds no binding slot meanwhile.
        let lock_seen = lock_seen.clone();
        tokio::spawn(async move {
            let mut request = request;
            let start = Instant::now();
            let pod = &request.task.assumed;
            let done = pre_bind::carry_out(
                &client,
                &pod.namespace,
                &pod.name,
                &request.task.plan.pre_bind,
                &*lock_seen,
            )
            .await;
            let code = if done.is_ok() {
                Code::Success
            } else {
                Code::Error
            };
            metrics.extension_point("PreBind", code, &request.task.profile, start.elapsed());
            match done {
                Ok(annotations) => request.task.plan.annotations.extend(annotations),
                Err(error) => {
                    report(Box::new(request), BindOutcome::PreBindFailed(error));
                    return;
                }
            }
            let Ok(permit) = limit.clone().acquire_owned().await else {
                return;
            };
            let binders = Binders { client, extenders };
            bind_and_report(binders, request, permit, limit, withheld, report, metrics).await;
        });
    }
    // Every permit back in the semaphore means no binding is in flight any more.
    limit.add_permits(withheld.swap(0, Ordering::Relaxed));
    let all = limit.acquire_many(MAX_IN_FLIGHT as u32);
    if tokio::time::timeout(SHUTDOWN_WAIT, all).await.is_err() {
        tracing::warn!("stopping with bindings whose outcome is still unknown");
    }
}

/// Who binds: the API server, or an extender that binds the pods it is interested in.
struct Binders {
    client: Client,
    extenders: Option<Clients>,
}

/// Binds the pod (holding `permit`, one of the binding slots) and reports the outcome.
async fn bind_and_report(
    binders: Binders,
    request: BindRequest,
    permit: OwnedSemaphorePermit,
    limit: Arc<Semaphore>,
    withheld: Arc<AtomicUsize>,
    report: impl Fn(Box<BindRequest>, BindOutcome),
    metrics: Arc<Metrics>,
) {
    let start = Instant::now();
    let client = &binders.client;
    let answer = match (&binders.extenders, request.task.extender_binder) {
        (Some(extenders), Some(i)) => {
            match bind_by_extender(client, extenders, i, &request.task).await {
                Ok(true) => Answer::Bound,
                Ok(false) => bind(client, &request.task).await,
                Err(message) => Answer::Refused(message),
            }
        }
        _ => bind(client, &request.task).await,
    };
    let code = match answer {
        Answer::Bound => Code::Success,
        _ => Code::Error,
    };
    record_bind(&metrics, &request.task, code, start.elapsed());
    if withheld
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| w.checked_sub(1))
        .is_ok()
    {
        limit.add_permits(1);
    }
    let outcome = match answer {
        Answer::Bound => BindOutcome::Bound,
        Answer::Gone(message) => BindOutcome::Gone(message),
        Answer::Refused(message) => BindOutcome::Failed(message),
        Answer::Unknown(reason) => {
            metrics.binding_unconfirmed();
            let pod = &request.task.assumed;
            tracing::warn!(pod = %pod.key(), node = %request.task.plan.node, %reason, "binding outcome unknown; the pod stays assumed until it is read back");
            read_back(client, &request.task, &reason).await
        }
    };
    // The permit is held while the binding is read back: when the API server is
    // unreachable, no new binding is sent before the earlier ones are settled.
    drop(permit);
    if !matches!(outcome, BindOutcome::Bound) && !request.task.plan.pre_bind.is_empty() {
        let pod = &request.task.assumed;
        pre_bind::release(
            client,
            &pod.namespace,
            &pod.name,
            &request.task.plan.pre_bind,
        )
        .await;
    }
    report(Box::new(request), outcome);
}

fn record_bind(metrics: &Metrics, task: &BindTask, code: Code, elapsed: Duration) {
    metrics.extension_point("Bind", code, &task.profile, elapsed);
    metrics.plugin(
        gantry_core::plugins::default_binder::NAME,
        "Bind",
        code,
        elapsed,
    );
}

/// The `Binding` kube-scheduler posts: the pod's name and uid (so that a pod deleted and
/// recreated under the same name is not bound by mistake), the plan's annotations (the API
/// server copies them onto the pod), and the node.
pub fn binding_for(task: &BindTask) -> Binding {
    let pod = &task.assumed;
    let annotations: BTreeMap<String, String> = task.plan.annotations.iter().cloned().collect();
    Binding {
        metadata: ObjectMeta {
            name: Some(pod.name.clone()),
            namespace: Some(pod.namespace.clone()),
            uid: (!pod.uid.is_empty()).then(|| pod.uid.clone()),
            annotations: (!annotations.is_empty()).then_some(annotations),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".to_string()),
            kind: Some("Node".to_string()),
            name: Some(task.plan.node.to_string()),
            ..Default::default()
        },
    }
}

/// Posts the binding. The request is built directly (no `Api` per binding) and the answer,
/// a `Status`, is not decoded: only whether it is an error matters.
async fn bind(client: &Client, task: &BindTask) -> Answer {
    let pod = &task.assumed;
    let body = match serde_json::to_vec(&binding_for(task)) {
        Ok(body) => body,
        Err(e) => return Answer::Refused(e.to_string()),
    };
    let request = Request::new(format!("/api/v1/namespaces/{}/pods", pod.namespace))
        .create_subresource("binding", &pod.name, &PostParams::default(), body);
    match request {
        Ok(request) => answer(client.request_text(request).await),
        Err(e) => Answer::Refused(e.to_string()),
    }
}

/// Binds through extender `i` (kube-scheduler's `extendersBinding`): the plan's
/// annotations, which a Binding would carry, are patched onto the pod first. `Ok(false)`:
/// the ignorable extender failed, and the default binding applies.
async fn bind_by_extender(
    client: &Client,
    extenders: &Clients,
    i: usize,
    task: &BindTask,
) -> Result<bool, String> {
    let pod = &task.assumed;
    if !task.plan.annotations.is_empty() {
        let annotations: BTreeMap<&str, &str> = task
            .plan
            .annotations
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let patch = serde_json::json!({"metadata": {"annotations": annotations}});
        let pods: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
        pods.patch(
            &pod.name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .map_err(|e| format!("annotating the pod before the extender binds it: {e}"))?;
    }
    let args = BindingArgs {
        pod_name: pod.name.clone(),
        pod_namespace: pod.namespace.clone(),
        pod_uid: pod.uid.clone(),
        node: task.plan.node.to_string(),
    };
    extenders.bind(i, &args).await
}

/// Sorts the API server's answer (or its absence) into what it tells about the binding.
fn answer<T>(result: Result<T, kube::Error>) -> Answer {
    match result {
        Ok(_) => Answer::Bound,
        Err(kube::Error::Api(s)) => match s.code {
            404 => Answer::Gone(s.message.clone()),
            409 => Answer::Unknown(format!("conflict: {}", s.message)),
            // Any other 4xx (429 too): refused before anything was written.
            400..=499 => Answer::Refused(s.message.clone()),
            _ => Answer::Unknown(format!("HTTP {}: {}", s.code, s.message)),
        },
        // Never sent.
        Err(e @ (kube::Error::BuildRequest(_) | kube::Error::Auth(_))) => {
            Answer::Refused(e.to_string())
        }
        // The connection failed or timed out somewhere around sending the request and
        // reading its answer, or the answer could not be read.
        Err(e) => Answer::Unknown(e.to_string()),
    }
}

/// Reads the pod back until it tells how the binding went: bound (here or elsewhere), not
/// bound, or gone. The first read waits [`READ_BACK_DELAY`], so that a request the API server
/// was still carrying out when the connection broke has finished; reads that fail are
/// retried with backoff for as long as it takes (the pod stays assumed meanwhile).
async fn read_back(client: &Client, task: &BindTask, reason: &str) -> BindOutcome {
    let pod = &task.assumed;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    let mut wait = READ_BACK_DELAY;
    loop {
        tokio::time::sleep(wait).await;
        match pods.get_opt(&pod.name).await {
            Ok(found) => return settle(found.as_ref(), task, reason),
            Err(e) => {
                tracing::debug!(pod = %pod.key(), error = %e, "cannot read the pod back yet");
                wait = (wait * 2).min(MAX_READ_BACK_WAIT);
            }
        }
    }
}

/// What a fresh read of the pod (none: not found) tells about a binding whose answer was
/// `reason`.
fn settle(found: Option<&Pod>, task: &BindTask, reason: &str) -> BindOutcome {
    let Some(pod) = found else {
        return BindOutcome::Gone("the pod no longer exists".to_string());
    };
    let ours = &task.assumed.uid;
    if !ours.is_empty() && pod.metadata.uid.as_deref() != Some(ours.as_str()) {
        return BindOutcome::Gone("the pod was replaced by another of the same name".to_string());
    }
    match pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
        Some(node) if node == &*task.plan.node => BindOutcome::Bound,
        Some(node) => BindOutcome::BoundElsewhere(Arc::from(node)),
        None => BindOutcome::Failed(format!("the binding did not take effect ({reason})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_core::framework::{BindPlan, CycleState};
    use gantry_core::queue::QueuedPod;
    use gantry_core::testing::pod;

    fn task() -> BindTask {
        let mut p = (*pod("web").namespace("shop").build()).clone();
        p.uid = "u-1".to_string();
        let p = Arc::new(p);
        BindTask {
            queued: QueuedPod {
                pod: p.clone(),
                attempts: 1,
                first_queued: Duration::ZERO,
                enqueued: Duration::ZERO,
                unschedulable_plugins: Default::default(),
                gated: None,
            },
            assumed: p,
            plan: BindPlan {
                node: Arc::from("n1"),
                annotations: vec![("gantry.dev/gpu".to_string(), "0".to_string())],
                pre_bind: Vec::new(),
            },
            profile: "gantry".to_string(),
            state: CycleState::new(),
            extender_binder: None,
        }
    }

    #[test]
    fn binding_names_the_pod_uid_node_and_annotations() {
        let b = binding_for(&task());
        let json = serde_json::to_value(&b).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {
                    "name": "web",
                    "namespace": "shop",
                    "uid": "u-1",
                    "annotations": {"gantry.dev/gpu": "0"}
                },
                "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}
            })
        );
    }

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            message: format!("code {code}"),
            ..Default::default()
        }))
    }

    #[test]
    fn only_definite_answers_settle_a_binding_at_once() {
        assert_eq!(answer::<()>(Ok(())), Answer::Bound);
        assert_eq!(
            answer::<()>(Err(api_error(404))),
            Answer::Gone("code 404".to_string())
        );
        for definite in [400, 403, 422, 429] {
            assert!(
                matches!(answer::<()>(Err(api_error(definite))), Answer::Refused(_)),
                "{definite}"
            );
        }
        // A conflict may be this very binding, committed by a try whose answer was lost.
        for unknown in [409, 500, 503, 504] {
            assert!(
                matches!(answer::<()>(Err(api_error(unknown))), Answer::Unknown(_)),
                "{unknown}"
            );
        }
        let broken = kube::Error::Service("connection reset by peer".into());
        assert!(matches!(answer::<()>(Err(broken)), Answer::Unknown(_)));
    }

    fn read(uid: &str, node: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web".to_string()),
                namespace: Some("shop".to_string()),
                uid: Some(uid.to_string()),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::core::v1::PodSpec {
                node_name: node.map(str::to_string),
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn a_pod_read_back_tells_how_the_binding_went() {
        let t = task();
        let settled = |found: Option<&Pod>| settle(found, &t, "connection reset");
        assert_eq!(settled(Some(&read("u-1", Some("n1")))), BindOutcome::Bound);
        assert_eq!(
            settled(Some(&read("u-1", Some("n2")))),
            BindOutcome::BoundElsewhere(Arc::from("n2"))
        );
        assert_eq!(
            settled(Some(&read("u-1", None))),
            BindOutcome::Failed("the binding did not take effect (connection reset)".to_string())
        );
        assert!(matches!(
            settled(Some(&read("u-2", None))),
            BindOutcome::Gone(_)
        ));
        assert!(matches!(settled(None), BindOutcome::Gone(_)));
    }
}
