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
        let name = pod
            .metadata
            .name
            .as_deref()
            .filter(|n| !n.is_empty())
            .or(pod.metadata.generate_name.as_deref())
            .unwrap_or_default();
        self.record(&decision, request.dry_run, &namespace, name);
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
    fn record(&self, decision: &Decision, dry_run: bool, namespace: &str, pod: &str) {
        for invalid in &decision.invalid {
            tracing::warn!(namespace, pod, "{invalid}");
            if !dry_run {
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
                self.count_skip(skip.reason(), dry_run);
            }
            Route::Split {
                gantry,
                workload,
                bucket,
                share,
                source,
            } => {
                tracing::debug!(namespace, pod, %workload, bucket, %share, %source, gantry, "routed");
                if !dry_run {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::config::Share;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::core::PartialObjectMetaExt;
    use kube::runtime::{reflector, watcher};
    use serde_json::{Value, json};

    fn webhook(share: &str, namespaces: &[(&str, &str)]) -> Webhook {
        let (store, mut writer) = reflector::store::<PartialObjectMeta<Namespace>>();
        for (name, rollout) in namespaces {
            let meta = ObjectMeta {
                name: Some(name.to_string()),
                annotations: Some([("gantry.io/rollout".to_string(), rollout.to_string())].into()),
                ..Default::default()
            };
            writer.apply_watcher_event(&watcher::Event::Apply(meta.into_request_partial()));
        }
        Webhook {
            config: Arc::new(RolloutConfig {
                share: Share::parse(share).unwrap(),
                scheduler_name: "gantry".into(),
                excluded_namespaces: vec!["kube-system".into()],
            }),
            namespaces: Namespaces { store, api: None },
            metrics: Arc::new(Metrics::new()),
            ready: Arc::new(AtomicBool::new(true)),
        }
    }

    fn review(namespace: &str, operation: &str, pod: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
                "requestResource": {"group": "", "version": "v1", "resource": "pods"},
                "name": "",
                "namespace": namespace,
                "operation": operation,
                "userInfo": {"username": "admin"},
                "object": pod,
                "oldObject": null,
                "dryRun": false
            }
        }))
        .unwrap()
    }

    fn pod(annotations: Value, scheduler: Option<&str>) -> Value {
        let mut spec = json!({"containers": [{"name": "app", "image": "app"}]});
        if let Some(s) = scheduler {
            spec["schedulerName"] = json!(s);
        }
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": "web-5d8f7c9b4-",
                "labels": {"pod-template-hash": "5d8f7c9b4"},
                "annotations": annotations,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "web-5d8f7c9b4", "uid": "1", "controller": true}]
            },
            "spec": spec
        })
    }

    async fn answer(w: &Webhook, body: &[u8]) -> Value {
        serde_json::to_value(w.review(body).await.unwrap()).unwrap()
    }

    /// The patch, written (like Go's `[]byte` may be) as an array of bytes.
    fn patch(answer: &Value) -> Option<Value> {
        let bytes: Vec<u8> =
            serde_json::from_value(answer["response"].get("patch")?.clone()).unwrap();
        Some(serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn routes_to_gantry_with_a_patch_and_echoes_the_uid() {
        let w = webhook("100%", &[]);
        let a = answer(
            &w,
            &review(
                "apps",
                "CREATE",
                pod(json!(null), Some("default-scheduler")),
            ),
        )
        .await;
        assert_eq!(a["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(a["kind"], "AdmissionReview");
        assert_eq!(a["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert_eq!(a["response"]["allowed"], true);
        assert_eq!(a["response"]["patchType"], "JSONPatch");
        assert_eq!(
            patch(&a),
            Some(json!([{"op": "replace", "path": "/spec/schedulerName", "value": "gantry"}]))
        );
        assert_eq!(
            a["response"]["auditAnnotations"]["decision"],
            "gantry: Deployment/apps/web bucket 5126, share 100% from configuration"
        );
        // Without a schedulerName (not defaulted yet): added.
        let a = answer(&w, &review("apps", "CREATE", pod(json!(null), None))).await;
        assert_eq!(
            patch(&a),
            Some(json!([{"op": "add", "path": "/spec/schedulerName", "value": "gantry"}]))
        );
        assert!(w.metrics.render().contains(
            "gantry_webhook_pods_routed_total{scheduler=\"gantry\",source=\"config\"} 2"
        ));
    }

    #[tokio::test]
    async fn leaves_the_rest_to_the_default_scheduler() {
        let w = webhook("0%", &[]);
        let a = answer(&w, &review("apps", "CREATE", pod(json!(null), None))).await;
        assert_eq!(a["response"]["allowed"], true);
        assert_eq!(patch(&a), None);
        assert!(a["response"].get("patchType").is_none());
        assert!(w.metrics.render().contains(
            "gantry_webhook_pods_routed_total{scheduler=\"default\",source=\"config\"} 1"
        ));
    }

    #[tokio::test]
    async fn namespace_annotations_come_from_the_cache_and_pod_annotations_win() {
        let w = webhook("0%", &[("all-in", "100%"), ("none", "0%")]);
        let a = answer(&w, &review("all-in", "CREATE", pod(json!(null), None))).await;
        assert!(patch(&a).is_some());
        let a = answer(
            &w,
            &review(
                "none",
                "CREATE",
                pod(
                    json!({"scheduler.alpha.kubernetes.io/use-new-scheduler": "100%"}),
                    None,
                ),
            ),
        )
        .await;
        assert!(patch(&a).is_some());
        let a = answer(
            &w,
            &review(
                "all-in",
                "CREATE",
                pod(json!({"gantry.io/rollout": "0%"}), None),
            ),
        )
        .await;
        assert_eq!(patch(&a), None);
        let text = w.metrics.render();
        for series in [
            "gantry_webhook_pods_routed_total{scheduler=\"gantry\",source=\"namespace\"} 1",
            "gantry_webhook_pods_routed_total{scheduler=\"gantry\",source=\"pod\"} 1",
            "gantry_webhook_pods_routed_total{scheduler=\"default\",source=\"pod\"} 1",
        ] {
            assert!(text.contains(series), "no {series} in\n{text}");
        }
    }

    #[tokio::test]
    async fn invalid_annotations_warn_and_fall_back() {
        let w = webhook("100%", &[("bad", "lots")]);
        let a = answer(
            &w,
            &review(
                "bad",
                "CREATE",
                pod(json!({"gantry.io/rollout": "130%"}), None),
            ),
        )
        .await;
        assert!(patch(&a).is_some(), "the configuration's 100% applies");
        assert_eq!(
            a["response"]["warnings"],
            json!([
                "gantry rollout: ignoring pod annotation gantry.io/rollout: invalid share \"130%\": must be between 0% and 100%",
                "gantry rollout: ignoring namespace annotation gantry.io/rollout: invalid share \"lots\": expected a percentage such as \"30%\""
            ])
        );
        let text = w.metrics.render();
        for series in [
            "gantry_webhook_invalid_annotations_total{level=\"pod\",annotation=\"gantry.io/rollout\"} 1",
            "gantry_webhook_invalid_annotations_total{level=\"namespace\",annotation=\"gantry.io/rollout\"} 1",
        ] {
            assert!(text.contains(series), "no {series} in\n{text}");
        }
    }

    #[tokio::test]
    async fn skips_are_allowed_unchanged_and_counted() {
        let w = webhook("100%", &[]);
        for (ns, op, scheduler) in [
            ("apps", "CREATE", Some("other")),
            ("apps", "CREATE", Some("gantry")),
            ("kube-system", "CREATE", None),
            ("apps", "UPDATE", None),
        ] {
            let a = answer(&w, &review(ns, op, pod(json!(null), scheduler))).await;
            assert_eq!(a["response"]["allowed"], true, "{ns} {op} {scheduler:?}");
            assert_eq!(patch(&a), None, "{ns} {op} {scheduler:?}");
        }
        let text = w.metrics.render();
        for reason in [
            "other_scheduler",
            "already_gantry",
            "excluded_namespace",
            "not_a_pod_creation",
        ] {
            let series = format!("gantry_webhook_pods_skipped_total{{reason=\"{reason}\"}} 1");
            assert!(text.contains(&series), "no {series} in\n{text}");
        }
    }

    #[tokio::test]
    async fn dry_runs_are_answered_but_not_counted() {
        let w = webhook("100%", &[]);
        let mut body: Value =
            serde_json::from_slice(&review("apps", "CREATE", pod(json!(null), None))).unwrap();
        body["request"]["dryRun"] = json!(true);
        let a = answer(&w, &serde_json::to_vec(&body).unwrap()).await;
        assert!(patch(&a).is_some());
        assert!(
            !w.metrics
                .render()
                .contains("gantry_webhook_pods_routed_total{")
        );
    }

    #[tokio::test]
    async fn malformed_requests_are_errors() {
        let w = webhook("100%", &[]);
        let err = |body: &[u8]| {
            let w = w.clone();
            let body = body.to_vec();
            async move { w.review(&body).await.unwrap_err().to_string() }
        };
        assert!(
            err(b"not json")
                .await
                .starts_with("malformed AdmissionReview: expected ident")
        );
        assert_eq!(
            err(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#).await,
            "malformed AdmissionReview: no request"
        );
        let mut body: Value =
            serde_json::from_slice(&review("apps", "CREATE", pod(json!(null), None))).unwrap();
        body["request"]["object"]["spec"]["containers"] = json!("nope");
        assert!(
            err(&serde_json::to_vec(&body).unwrap())
                .await
                .starts_with("malformed AdmissionReview: the object is not a pod: invalid type")
        );
        let router = router(w.clone());
        let response = tower::ServiceExt::oneshot(
            router,
            axum::http::Request::post("/mutate")
                .body(axum::body::Body::from("{}"))
                .unwrap(),
        )
        .await
        .unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert!(
            w.metrics
                .render()
                .contains("gantry_webhook_malformed_requests_total 1")
        );
    }
}
