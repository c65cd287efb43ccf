//! The API client: kube-rs's request stack over a connection that speaks HTTP/2 when the
//! API server offers it, as client-go's does.
//!
//! kube-rs builds its client for HTTP/1.1 only, so every request in flight needs a
//! connection of its own: a binder with 256 bindings in flight holds 256 TLS connections,
//! each with its buffers (about 48 KiB apiece, the largest item in gantry's memory after
//! the cluster itself) and a goroutine on the server. Over HTTP/2 all requests and watches
//! share one connection, as they do for kube-scheduler. The stack on top is kube-rs's own
//! (base URI, authentication, extra headers, retries of 429/503/504), built from its public
//! parts. Setting `DISABLE_HTTP2` (client-go's switch) to anything keeps HTTP/1.1; so does
//! a proxy in the kubeconfig (kube-rs's own client is used then).

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_rustls::{FixedServerNameResolver, HttpsConnectorBuilder};
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::Client;
use kube::client::retry::RetryPolicy;
use kube::client::{ClientBuilder, ConfigExt};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder};

use super::AdapterError;
use super::rest_client::{RequestMetricsLayer, RestClientMetrics};
use super::throttle::ThrottleLayer;
use gantry_core::config::ClientConnection;

/// Idle time after which an HTTP/2 connection is pinged (client-go's `ReadIdleTimeout`).
const PING_INTERVAL: Duration = Duration::from_secs(30);
/// A ping unanswered for this long closes the connection (client-go's `PingTimeout`).
const PING_TIMEOUT: Duration = Duration::from_secs(15);
/// client-go's environment switch for HTTP/1.1 only.
const DISABLE_HTTP2: &str = "DISABLE_HTTP2";

/// A client for the API server described by `kubeconfig` (else
/// `clientConnection.kubeconfig`, else the usual places: `KUBECONFIG`, `~/.kube/config`,
/// in-cluster), throttled as `clientConnection` says, its requests counted into `metrics`
/// if given.
pub async fn connect(
    kubeconfig: Option<&Path>,
    settings: &ClientConnection,
    metrics: Option<&RestClientMetrics>,
) -> Result<Client, AdapterError> {
    connect_to(kubeconfig, None, settings, metrics).await
}

/// Like [`connect`], with the API server at `master` when given (kube-scheduler's
/// `--master`: it overrides the kubeconfig's server; with no kubeconfig at all, the client
/// has that address and no credentials, as client-go builds it).
pub async fn connect_to(
    kubeconfig: Option<&Path>,
    master: Option<&str>,
    settings: &ClientConnection,
    metrics: Option<&RestClientMetrics>,
) -> Result<Client, AdapterError> {
    let path = kubeconfig
        .map(Path::to_path_buf)
        .or_else(|| settings.kubeconfig.as_ref().map(PathBuf::from));
    let master = master
        .filter(|m| !m.is_empty())
        .map(|m| {
            m.parse::<http::Uri>().map_err(|e| AdapterError::Master {
                master: m.to_string(),
                error: e.to_string(),
            })
        })
        .transpose()?;
    let mut config = match (path, &master) {
        (Some(path), _) => {
            let error = |error| AdapterError::Kubeconfig {
                path: path.display().to_string(),
                error,
            };
            let file = Kubeconfig::read_from(&path).map_err(error)?;
            kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(error)?
        }
        (None, Some(master)) => kube::Config::new(master.clone()),
        (None, None) => kube::Config::infer().await?,
    };
    if let Some(master) = master {
        config.cluster_url = master;
    }
    Ok(build(
        config,
        ThrottleLayer::new(settings.qps, settings.burst),
        metrics,
    )?)
}

/// Whether new clients offer HTTP/2 (unless `DISABLE_HTTP2` is set, as for client-go).
pub fn http2_enabled() -> bool {
    std::env::var_os(DISABLE_HTTP2).is_none_or(|v| v.is_empty())
}

/// A client for `config`, throttled by `throttle` if given, its requests counted into
/// `metrics` if given (outermost: a request counts once, whatever the retries below).
pub fn build(
    config: kube::Config,
    throttle: Option<ThrottleLayer>,
    metrics: Option<&RestClientMetrics>,
) -> Result<Client, kube::Error> {
    let host = config
        .cluster_url
        .authority()
        .map_or_else(|| "none".to_string(), ToString::to_string);
    let counted = metrics
        .cloned()
        .unwrap_or_else(RestClientMetrics::unregistered)
        .layer(&host);
    if http2_enabled() && config.proxy_url.is_none() {
        return http2_capable(config, throttle, counted);
    }
    let builder = ClientBuilder::try_from(config)?;
    Ok(match throttle {
        Some(layer) => builder.with_layer(&layer).with_layer(&counted).build(),
        None => builder.with_layer(&counted).build(),
    })
}

/// kube-rs's stack over a connector that offers `h2` and `http/1.1` by ALPN.
fn http2_capable(
    config: kube::Config,
    throttle: Option<ThrottleLayer>,
    counted: RequestMetricsLayer,
) -> Result<Client, kube::Error> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let tls = HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    let tls = match &config.tls_server_name {
        Some(name) => {
            let name = name.clone().try_into().map_err(|e| {
                kube::Error::Service(format!("tls-server-name {name:?}: {e}").into())
            })?;
            tls.with_server_name_resolver(FixedServerNameResolver::new(name))
        }
        None => tls,
    };
    let mut connector = TimeoutConnector::new(tls.enable_all_versions().wrap_connector(http));
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http_client = HttpClient::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .http2_keep_alive_interval(PING_INTERVAL)
        .http2_keep_alive_timeout(PING_TIMEOUT)
        .http2_keep_alive_while_idle(true)
        .build(connector);
    let service = ServiceBuilder::new()
        .layer(counted)
        .option_layer(throttle)
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http_client);
    Ok(Client::new(service, config.default_namespace))
}
