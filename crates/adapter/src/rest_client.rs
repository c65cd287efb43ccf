//! client-go's request metrics for every request gantry makes to the API server:
//! `rest_client_requests_total{code,method,host}` and
//! `rest_client_request_duration_seconds{verb,host}`, with client-go's names, labels and
//! buckets, counted by a tower layer on top of the kube client's stack.
//!
//! As in client-go, a request counts once, with its final answer (the layer sits above the
//! retries of 429/503/504), its code `<error>` when no answer came; a watch counts when it
//! starts (its answer's head arrives) and has no duration, since it lasts as long as the
//! watch; every other request's duration runs from when it is sent (after client-side
//! throttling) until its answer has been read to the end, or dropped.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::future::BoxFuture;
use http::{Request, Response, Uri};
use hyper::body::{Body, Frame, SizeHint};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use tower::{Layer, Service};

use super::exposition::Families;

/// The `code` of a request that got no answer (client-go's).
pub const CODE_ERROR: &str = "<error>";

/// client-go's request duration buckets, in seconds.
const DURATION_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

/// Labels `code`, `method` and `host`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    /// The HTTP status code, or [`CODE_ERROR`].
    code: String,
    /// The HTTP method.
    method: String,
    /// The API server's host and port.
    host: Arc<str>,
}

/// Labels `verb` and `host`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DurationLabels {
    /// The HTTP method (client-go's verb).
    verb: String,
    /// The API server's host and port.
    host: Arc<str>,
}

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// The two families, shared by every client built with them.
#[derive(Debug, Clone)]
pub struct RestClientMetrics {
    requests: Family<ResultLabels, Counter>,
    durations: Family<DurationLabels, Histogram, fn() -> Histogram>,
}

impl RestClientMetrics {
    /// The families, in no registry: for a client whose requests no one reads about.
    pub fn unregistered() -> Self {
        RestClientMetrics {
            requests: Family::default(),
            durations: Family::new_with_constructor(duration_histogram),
        }
    }

    /// The families, added to `families`.
    pub fn register(families: &mut Families) -> Self {
        let metrics = Self::unregistered();
        families.add(
            "rest_client_requests",
            "[ALPHA] Number of HTTP requests, partitioned by status code, method, and host.",
            metrics.requests.clone(),
        );
        families.add(
            "rest_client_request_duration_seconds",
            "[ALPHA] Request latency in seconds. Broken down by verb, and host.",
            metrics.durations.clone(),
        );
        metrics
    }

    /// The layer counting the requests to the API server at `host` (`host:port`).
    pub fn layer(&self, host: &str) -> RequestMetricsLayer {
        RequestMetricsLayer {
            metrics: self.clone(),
            host: Arc::from(host),
        }
    }
}

/// A tower layer counting requests into [`RestClientMetrics`].
#[derive(Debug, Clone)]
pub struct RequestMetricsLayer {
    metrics: RestClientMetrics,
    host: Arc<str>,
}

impl<S> Layer<S> for RequestMetricsLayer {
    type Service = RequestMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestMetrics {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`RequestMetricsLayer`] makes.
#[derive(Debug, Clone)]
pub struct RequestMetrics<S> {
    inner: S,
    layer: RequestMetricsLayer,
}

/// Whether a request is a watch (`?watch=true`, or `1`).
fn is_watch(uri: &Uri) -> bool {
    uri.query().is_some_and(|q| {
        form_urlencoded::parse(q.as_bytes()).any(|(k, v)| k == "watch" && (v == "true" || v == "1"))
    })
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RequestMetrics<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = Response<TimedBody<ResBody>>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let method = request.method().as_str().to_string();
        let watch = is_watch(request.uri());
        let layer = self.layer.clone();
        let timer = (!watch).then(|| Timer {
            start: Instant::now(),
            histogram: layer
                .metrics
                .durations
                .get_or_create(&DurationLabels {
                    verb: method.clone(),
                    host: layer.host.clone(),
                })
                .clone(),
        });
        let answer = self.inner.call(request);
        Box::pin(async move {
            let result = answer.await;
            let code = match &result {
                Ok(response) => response.status().as_str().to_string(),
                Err(_) => CODE_ERROR.to_string(),
            };
            layer
                .metrics
                .requests
                .get_or_create(&ResultLabels {
                    code,
                    method,
                    host: layer.host.clone(),
                })
                .inc();
            // Without an answer the timer stops here, dropped.
            result.map(|response| response.map(|inner| TimedBody { inner, timer }))
        })
    }
}

/// Observes the time since `start` when dropped.
#[derive(Debug)]
struct Timer {
    start: Instant,
    histogram: Histogram,
}

impl Drop for Timer {
    fn drop(&mut self) {
        self.histogram.observe(self.start.elapsed().as_secs_f64());
    }
}

/// An answer's body that stops its request's timer when read to the end, when reading it
/// fails, or when it is dropped.
#[derive(Debug)]
pub struct TimedBody<B> {
    inner: B,
    timer: Option<Timer>,
}

impl<B: Body + Unpin> Body for TimedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let frame = Pin::new(&mut this.inner).poll_frame(cx);
        if matches!(frame, Poll::Ready(None | Some(Err(_)))) || this.inner.is_end_stream() {
            this.timer = None;
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http_body_util::{BodyExt, Full};
    use hyper::body::Bytes;
    use prometheus_client::registry::Registry;
    use tower::ServiceExt;

    use super::*;

    fn render(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text
    }

    /// A server answering `status` after `delay`, or failing for a path `/fail`.
    async fn answer(
        request: Request<()>,
        status: u16,
        delay: Duration,
    ) -> Result<Response<Full<Bytes>>, &'static str> {
        tokio::time::sleep(delay).await;
        if request.uri().path() == "/fail" {
            return Err("connection refused");
        }
        Ok(Response::builder()
            .status(status)
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap())
    }

    #[tokio::test]
    async fn requests_count_by_code_and_method_and_watches_have_no_duration() {
        let mut families = Families::default();
        let metrics = RestClientMetrics::register(&mut families);
        let mut registry = Registry::default();
        registry.register_collector(Box::new(families));
        let layer = metrics.layer("10.0.0.1:6443");
        let call = |uri: &'static str, method: &'static str, status: u16, delay_ms: u64| {
            let service = layer.layer(tower::service_fn(move |r| {
                answer(r, status, Duration::from_millis(delay_ms))
            }));
            async move {
                let request = Request::builder().method(method).uri(uri).body(()).unwrap();
                if let Ok(response) = service.oneshot(request).await {
                    let _ = response.into_body().collect().await;
                }
            }
        };
        call("/api/v1/pods", "GET", 200, 30).await;
        call("/api/v1/namespaces/a/pods/p/binding", "POST", 201, 0).await;
        call("/api/v1/namespaces/a/pods/p/binding", "POST", 409, 0).await;
        call("/api/v1/pods?watch=true&resourceVersion=5", "GET", 200, 0).await;
        call("/fail", "PATCH", 200, 0).await;
        let text = render(&registry);
        for line in [
            "rest_client_requests_total{code=\"200\",method=\"GET\",host=\"10.0.0.1:6443\"} 2",
            "rest_client_requests_total{code=\"201\",method=\"POST\",host=\"10.0.0.1:6443\"} 1",
            "rest_client_requests_total{code=\"409\",method=\"POST\",host=\"10.0.0.1:6443\"} 1",
            "rest_client_requests_total{code=\"<error>\",method=\"PATCH\",host=\"10.0.0.1:6443\"} 1",
            // The list, not the watch; 30 ms is in the bucket up to 0.1 s.
            "rest_client_request_duration_seconds_count{verb=\"GET\",host=\"10.0.0.1:6443\"} 1",
            "rest_client_request_duration_seconds_bucket{le=\"0.025\",verb=\"GET\",host=\"10.0.0.1:6443\"} 0",
            "rest_client_request_duration_seconds_bucket{le=\"0.1\",verb=\"GET\",host=\"10.0.0.1:6443\"} 1",
            "rest_client_request_duration_seconds_count{verb=\"POST\",host=\"10.0.0.1:6443\"} 2",
            "rest_client_request_duration_seconds_count{verb=\"PATCH\",host=\"10.0.0.1:6443\"} 1",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }

    #[tokio::test]
    async fn the_duration_runs_until_the_body_is_read() {
        let mut families = Families::default();
        let metrics = RestClientMetrics::register(&mut families);
        let mut registry = Registry::default();
        registry.register_collector(Box::new(families));
        let service = metrics
            .layer("h:1")
            .layer(tower::service_fn(|r| answer(r, 200, Duration::ZERO)));
        let request = Request::get("/api/v1/nodes").body(()).unwrap();
        let response = service.oneshot(request).await.unwrap();
        let count = |text: &str| {
            text.contains("rest_client_request_duration_seconds_count{verb=\"GET\",host=\"h:1\"} 1")
        };
        assert!(
            !count(&render(&registry)),
            "observed before the body was read"
        );
        tokio::time::sleep(Duration::from_millis(30)).await;
        let _ = response.into_body().collect().await;
        let text = render(&registry);
        assert!(count(&text), "{text}");
        assert!(
            text.contains(
                "rest_client_request_duration_seconds_bucket{le=\"0.025\",verb=\"GET\",host=\"h:1\"} 0"
            ),
            "the wait before reading counts: {text}"
        );
    }
}
