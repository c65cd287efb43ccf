//! Binding: each decision is carried out by its own task, many at once (bounded by a
//! semaphore), over one shared client (one HTTP/2 connection, see [`super::client`]). Results
//! go back to the scheduling thread, which never waits for them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Binding, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::PostParams;
use kube::core::Request;
use tokio::sync::{Semaphore, mpsc};

use super::driver::Input;
use super::metrics::Metrics;
use crate::framework::Code;
use crate::scheduler::BindTask;

/// Bindings in flight at once.
pub const MAX_IN_FLIGHT: usize = 256;
/// Bindings in flight at first. Each one that finishes allows one more, up to
/// [`MAX_IN_FLIGHT`]: where the client speaks HTTP/1.1 (`DISABLE_HTTP2`, a proxy) every
/// binding in flight is a connection of its own, and the API server then does not face a
/// burst of full TLS handshakes (a certificate signature each) whenever gantry starts or
/// takes over; later connections resume the sessions of the first ones.
const FIRST_IN_FLIGHT: usize = 8;

/// A decision to bind, with when its scheduling attempt started.
#[derive(Debug)]
pub struct BindRequest {
    /// The decision.
    pub task: Box<BindTask>,
    /// When the attempt started (for the attempt duration).
    pub attempt_start: Instant,
}

/// How a binding went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindOutcome {
    /// The pod is bound.
    Bound,
    /// The pod is gone or already bound (404 or 409): nothing to retry.
    Refused(String),
    /// Anything else: retry after backoff.
    Failed(String),
}

/// Carries out every request from `requests`, reporting each outcome to `results`, until
/// the channel closes and all bindings in flight are done.
pub async fn run(
    client: Client,
    mut requests: mpsc::UnboundedReceiver<BindRequest>,
    results: Sender<Input>,
    metrics: Arc<Metrics>,
) {
    let limit = Arc::new(Semaphore::new(FIRST_IN_FLIGHT));
    let withheld = Arc::new(AtomicUsize::new(MAX_IN_FLIGHT - FIRST_IN_FLIGHT));
    while let Some(request) = requests.recv().await {
        let Ok(permit) = limit.clone().acquire_owned().await else {
            return;
        };
        let (client, results, metrics) = (client.clone(), results.clone(), metrics.clone());
        let (limit, withheld) = (limit.clone(), withheld.clone());
        tokio::spawn(async move {
            let start = Instant::now();
            let outcome = bind(&client, &request.task).await;
            let code = match outcome {
                BindOutcome::Bound => Code::Success,
                _ => Code::Error,
            };
            record_bind(&metrics, &request.task, code, start.elapsed());
            if withheld
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| w.checked_sub(1))
                .is_ok()
            {
                limit.add_permits(1);
            }
            drop(permit);
            // The scheduling thread is gone only when shutting down; the result no longer
            // matters then.
            let _ = results.send(Input::Bound(Box::new(request), outcome));
        });
    }
    // Every permit back in the semaphore means no binding is in flight any more.
    limit.add_permits(withheld.swap(0, Ordering::Relaxed));
    let _ = limit.acquire_many(MAX_IN_FLIGHT as u32).await;
}

fn record_bind(metrics: &Metrics, task: &BindTask, code: Code, elapsed: Duration) {
    metrics.extension_point("Bind", code, &task.profile, elapsed);
    metrics.plugin(crate::plugins::default_binder::NAME, "Bind", code, elapsed);
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
async fn bind(client: &Client, task: &BindTask) -> BindOutcome {
    let pod = &task.assumed;
    let body = match serde_json::to_vec(&binding_for(task)) {
        Ok(body) => body,
        Err(e) => return BindOutcome::Failed(e.to_string()),
    };
    let request = Request::new(format!("/api/v1/namespaces/{}/pods", pod.namespace))
        .create_subresource("binding", &pod.name, &PostParams::default(), body);
    match request {
        Ok(request) => outcome(client.request_text(request).await),
        Err(e) => BindOutcome::Failed(e.to_string()),
    }
}

fn outcome<T>(result: Result<T, kube::Error>) -> BindOutcome {
    match result {
        Ok(_) => BindOutcome::Bound,
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
            BindOutcome::Refused(s.message.clone())
        }
        Err(e) => BindOutcome::Failed(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::{BindPlan, CycleState};
    use crate::queue::QueuedPod;
    use crate::testing::pod;

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
            },
            profile: "gantry".to_string(),
            state: CycleState::new(),
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
    fn conflicts_and_missing_pods_are_refused_not_failed() {
        assert_eq!(outcome::<()>(Ok(())), BindOutcome::Bound);
        assert_eq!(
            outcome::<()>(Err(api_error(409))),
            BindOutcome::Refused("code 409".to_string())
        );
        assert_eq!(
            outcome::<()>(Err(api_error(404))),
            BindOutcome::Refused("code 404".to_string())
        );
        assert!(matches!(
            outcome::<()>(Err(api_error(500))),
            BindOutcome::Failed(_)
        ));
    }
}
