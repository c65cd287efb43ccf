//! The admission endpoint: reads an AdmissionReview (v1), decides, answers with a JSONPatch
//! of `/spec/schedulerName` for the pods sent to gantry. Always allows: the webhook routes
//! pods, it never blocks them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, ReplaceOperation};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::{DynamicObject, PartialObjectMeta};
use kube::runtime::reflector::{ObjectRef, Store};

use super::config::RolloutConfig;
use super::decision::{Decision, Route, decide};
use super::metrics::{InvalidLabels, Metrics, RoutedLabels, SkippedLabels};

/// The content type of the OpenMetrics text format.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The largest AdmissionReview read (the API server's own request limit is 3 MiB).
const BODY_LIMIT: usize = 8 * 1024 * 1024;
/// How long a namespace missing from the cache may be looked up for.
const NAMESPACE_GET_TIMEOUT: Duration = Duration::from_secs(2);
/// Skip reason of requests that are not pod creations (the webhook should not get them).
pub const NOT_A_POD_CREATION: &str = "not_a_pod_creation";

/// The namespaces' annotations: a watch cache, and a GET for a namespace the cache does not
/// have yet (one created a moment before its first pod).
#[derive(Clone)]
pub struct Namespaces {
    /// The watch cache (metadata only).
    pub store: Store<PartialObjectMeta<Namespace>>,
    /// Where to look up a namespace missing from the cache; None: no lookup.
    pub api: Option<Api<PartialObjectMeta<Namespace>>>,
}

impl Namespaces {
    /// The annotations of namespace `name`; None when it cannot be found.
    async fn annotations(&self, name: &str) -> Option<BTreeMap<String, String>> {
        if let Some(ns) = self.store.get(&ObjectRef::new(name)) {
            return Some(ns.metadata.annotations.clone().unwrap_or_default());
        }
        let api = self.api.as_ref()?;
        match tokio::time::timeout(NAMESPACE_GET_TIMEOUT, api.get_opt(name)).await {
            Ok(Ok(Some(ns))) => Some(ns.metadata.annotations.unwrap_or_default()),
            Ok(Ok(None)) => None,
            Ok(Err(e)) => {
                tracing::warn!(namespace = name, error = %e, "cannot read the namespace; its annotations are ignored");
                None
            }
            Err(_) => {
                tracing::warn!(
                    namespace = name,
                    "namespace lookup timed out; its annotations are ignored"
                );
                None
            }
        }
    }
}

/// What the endpoints need.
#[derive(Clone)]
pub struct Webhook {
    /// The configuration.
    pub config: Arc<RolloutConfig>,
    /// Namespace annotations.
    pub namespaces: Namespaces,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// True once the namespace cache has listed.
    pub ready: Arc<AtomicBool>,
}

/// A request that cannot be answered with an AdmissionReview.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// The body is not an AdmissionReview.
    #[error("malformed AdmissionReview: {0}")]
    Malformed(#[from] serde_json::Error),
    /// It has no `request`.
    #[error("malformed AdmissionReview: no request")]
    NoRequest,
    /// Its object is not a readable pod.
    #[error("malformed AdmissionReview: the object is not a pod: {0}")]
    NotAPod(#[source] serde_json::Error),
    /// The patch could not be written (cannot happen with a string value).
    #[error("cannot write the patch: {0}")]
    Patch(#[from] kube::core::admission::SerializePatchError),
}

impl Webhook {
    /// Answers one AdmissionReview (the request body).
    pub async fn review(&self, body: &[u8]) -> Result<AdmissionReview<DynamicObject>, ReviewError> {
        let review: AdmissionReview<DynamicObject> = serde_json::from_slice(body)?;
        let request: AdmissionRequest<DynamicObject> =
            review.try_into().map_err(|_| ReviewError::NoRequest)?;
        let response = AdmissionResponse::from(&request);
        let is_pod_creation = request.operation == Operation::Create
            && request.kind.group.is_empty()
            && request.kind.kind == "Pod"
            && request.sub_resource.as_deref().is_none_or(str::is_empty);
        let object = match (&request.object, is_pod_creation) {
            (Some(object), true) => object,
            _ => {
                self.count_skip(NOT_A_POD_CREATION, request.dry_run);
                return Ok(response.into_review());
            }
        };
        let pod: Pod = serde_json::to_value(object)
            .and_then(serde_json::from_value)
            .map_err(ReviewError::NotAPod)?;
        let namespace = request
            .namespace
            .clone()
            .or_else(|| pod.metadata.namespace.clone())
            .unwrap_or_default();
        let annotations = self.namespaces.annotations(&namespace).await;
        let decision = decide(&self.config, &pod, &namespace, annotations.as_ref());
        self.record(&decision, &request, &namespace);
        let mut response = response;
        if !decision.invalid.is_empty() {
            response.warnings = Some(decision.invalid.iter().map(ToString::to_string).collect());
        }
        if let Route::Split {
            gantry,
            workload,
            bucket,
            share,
            source,
        } = &decision.route
        {
            let side = if *gantry {
                self.config.scheduler_name.as_str()
            } else {
                "default"
            };
            response.audit_annotations.insert(
                "decision".to_string(),
                format!("{side}: {workload} bucket {bucket}, share {share} from {source}"),
            );
        }
        if matches!(decision.route, Route::Split { gantry: true, .. }) {
            let path = PointerBuf::from_tokens(["spec", "schedulerName"]);
            let value = serde_json::Value::String(self.config.scheduler_name.clone());
            let has_name = pod
                .spec
                .as_ref()
                .is_some_and(|s| s.scheduler_name.is_some());
            let op = if has_name {
                PatchOperation::Replace(ReplaceOperation { path, value })
            } else {
                PatchOperation::Add(AddOperation { path, value })
            };
            response = response.with_patch(Patch(vec![op]))?;
        }
        Ok(response.into_review())
    }

    /// Counts and logs a decision (dry runs are logged but not counted: no pod is made).
    fn record(
        &self,
        decision: &Decision,
        request: &AdmissionRequest<DynamicObject>,
        namespace: &str,
    ) {
        let pod = request.name.as_str();
        for invalid in &decision.invalid {
            tracing::warn!(namespace, pod, "{invalid}");
            if !request.dry_run {
                self.metrics
                    .invalid
                    .get_or_create(&InvalidLabels {
                        level: invalid.on.level(),
                        annotation: invalid.on.annotation(),
                    })
                    .inc();
            }
        }
        match &decision.route {
            Route::Skip(skip) => {
                tracing::debug!(namespace, pod, reason = skip.reason(), "left alone");
                self.count_skip(skip.reason(), request.dry_run);
            }
            Route::Split {
                gantry,
                workload,
                bucket,
                share,
                source,
            } => {
                tracing::debug!(namespace, pod, %workload, bucket, %share, %source, gantry, "routed");
                if !request.dry_run {
                    self.metrics
                        .routed
                        .get_or_create(&RoutedLabels {
                            scheduler: if *gantry { "gantry" } else { "default" },
                            source: source.level(),
                        })
                        .inc();
                }
            }
        }
    }

    fn count_skip(&self, reason: &'static str, dry_run: bool) {
        if !dry_run {
            self.metrics
                .skipped
                .get_or_create(&SkippedLabels { reason })
                .inc();
        }
    }
}

/// The router: `/mutate`, `/metrics`, `/healthz`, `/livez`, `/readyz`.
pub fn router(webhook: Webhook) -> Router {
    Router::new()
        .route("/mutate", post(mutate))
        .route("/metrics", get(metrics))
        .route("/healthz", get(ok))
        .route("/livez", get(ok))
        .route("/readyz", get(readyz))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(webhook)
}

async fn mutate(State(w): State<Webhook>, body: Bytes) -> Response {
    match w.review(&body).await {
        Ok(review) => match serde_json::to_vec(&review) {
            Ok(json) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
            Err(e) => {
                tracing::error!(error = %e, "cannot write the AdmissionReview");
                (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response()
            }
        },
        Err(e) => {
            w.metrics.malformed.inc();
            tracing::warn!(error = %e, "bad admission request");
            (StatusCode::BAD_REQUEST, e.to_string()).into_response()
        }
    }
}

async fn metrics(State(w): State<Webhook>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, OPENMETRICS)], w.metrics.render())
}

async fn ok() -> &'static str {
    "ok"
}

async fn readyz(State(w): State<Webhook>) -> (StatusCode, &'static str) {
    if w.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "namespace cache not synced",
        )
    }
}
