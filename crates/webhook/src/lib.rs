//! The canary rollout webhook, `gantry webhook`: a mutating admission webhook that sends a
//! configured share of new pods to gantry (it sets `spec.schedulerName` to gantry's profile)
//! and leaves the rest to the default scheduler, sticky per workload.
//!
//! - [`config`]: the `RolloutConfiguration` file and the share type.
//! - [`decision`]: precedence of the share (pod annotation, namespace annotation,
//!   configuration), the workload of a pod and its bucket.
//! - [`server`]: the AdmissionReview endpoint, health and metrics endpoints, and the HTTPS
//!   server in front of them.
//! - [`metrics`]: counters of routed, skipped pods and invalid annotations, and of the
//!   connections open and closed on clients.
//!
//! Served over TLS (rustls, HTTP/1.1) by [`server::serve`], with deadlines and a cap on
//! connections against hostile clients; the certificate and key files are re-read when they
//! change, so a renewed certificate (cert-manager, a rotated Secret) is picked up without a
//! restart.

#![warn(missing_docs)]

pub mod config;
pub mod decision;
#[cfg(test)]
mod fuzz_tests;
pub mod metrics;
pub mod server;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use tokio::net::TcpListener;

use config::RolloutConfig;
use gantry_adapter::signals::Signals;
use gantry_adapter::{self as adapter, AdapterError};
use gantry_core::config::{ClientConnection, DEFAULT_BURST, DEFAULT_QPS};
use server::{Limits, Namespaces, TlsConfig, Webhook};

/// How often the certificate files are checked for a change, by default.
pub const DEFAULT_TLS_RELOAD_INTERVAL: Duration = Duration::from_secs(10);
/// How long in-flight admission requests may take to finish at shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Why `gantry webhook` stopped with an error. Each message includes its cause, so none is
/// returned as a `source` as well (the CLI would print it twice).
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The API client cannot be built.
    #[error(transparent)]
    Client(#[from] AdapterError),
    /// The certificate or key cannot be loaded.
    #[error("cannot load the TLS certificate {cert} and key {key}: {error}")]
    Tls {
        /// The certificate file.
        cert: String,
        /// The key file.
        key: String,
        /// Why.
        error: std::io::Error,
    },
    /// The address cannot be served.
    #[error("cannot serve HTTPS on {address}: {error}")]
    Serve {
        /// The address.
        address: SocketAddr,
        /// Why.
        error: std::io::Error,
    },
    /// The signal handlers cannot be installed.
    #[error("cannot start: {0}")]
    Start(std::io::Error),
}

impl From<std::io::Error> for WebhookError {
    fn from(e: std::io::Error) -> Self {
        WebhookError::Start(e)
    }
}

/// What `gantry webhook` needs.
pub struct Options {
    /// The rollout configuration.
    pub config: RolloutConfig,
    /// A kubeconfig; the usual places (`KUBECONFIG`, `~/.kube/config`, in-cluster) when
    /// absent.
    pub kubeconfig: Option<PathBuf>,
    /// Where to serve HTTPS.
    pub address: SocketAddr,
    /// The serving certificate (PEM, the chain from the leaf).
    pub tls_cert: PathBuf,
    /// Its private key (PEM).
    pub tls_key: PathBuf,
    /// How often the two files are checked for a change.
    pub tls_reload_interval: Duration,
    /// Deadlines and the connection cap of the HTTPS server.
    pub limits: Limits,
}

/// Serves the webhook until SIGTERM or SIGINT, then finishes the requests in flight.
pub async fn run(options: Options) -> Result<(), WebhookError> {
    let Options {
        config,
        kubeconfig,
        address,
        tls_cert,
        tls_key,
        tls_reload_interval,
        limits,
    } = options;
    let tls = TlsConfig::load(&tls_cert, &tls_key).map_err(|error| WebhookError::Tls {
        cert: tls_cert.display().to_string(),
        key: tls_key.display().to_string(),
        error,
    })?;
    let settings = ClientConnection {
        kubeconfig: None,
        qps: DEFAULT_QPS,
        burst: DEFAULT_BURST,
        content_type: Default::default(),
    };
    let client = adapter::connect(kubeconfig.as_deref(), &settings, None).await?;
    let mut signals = Signals::new()?;

    let api: Api<PartialObjectMeta<Namespace>> = Api::all(client);
    let (store, writer) = reflector::store();
    let webhook = Webhook::new(
        config,
        Namespaces {
            store: store.clone(),
            api: Some(api.clone()),
        },
    );
    let namespaces_task = tokio::spawn(
        reflector(
            writer,
            watcher(api, watcher::Config::default()).default_backoff(),
        )
        .for_each(|event| async move {
            if let Err(e) = event {
                tracing::warn!(error = %e, "namespace watch failed; retrying");
            }
        }),
    );
    let ready_task = {
        let ready = webhook.ready.clone();
        tokio::spawn(async move {
            if store.wait_until_ready().await.is_ok() {
                ready.store(true, Ordering::Relaxed);
                tracing::info!(namespaces = store.len(), "namespace cache synced");
            }
        })
    };
    let reload_task = tokio::spawn(reload_on_change(
        tls.clone(),
        tls_cert.clone(),
        tls_key.clone(),
        tls_reload_interval,
    ));

    let serve_error = |error| WebhookError::Serve { address, error };
    let listener = TcpListener::bind(address).await.map_err(serve_error)?;
    let served = listener.local_addr().map_err(serve_error)?;
    tracing::info!(
        %served,
        scheduler = %webhook.config.scheduler_name,
        share = %webhook.config.share,
        excluded = ?webhook.config.excluded_namespaces,
        max_connections = limits.max_connections,
        handshake_timeout = ?limits.handshake_timeout,
        header_read_timeout = ?limits.header_read_timeout,
        body_read_timeout = ?limits.body_read_timeout,
        "gantry webhook serving /mutate"
    );
    server::serve(
        listener,
        tls,
        webhook,
        limits,
        async {
            signals.wait().await;
            tracing::info!("shutting down");
        },
        SHUTDOWN_GRACE,
    )
    .await;
    for task in [namespaces_task, ready_task, reload_task] {
        task.abort();
    }
    tracing::info!("stopped");
    Ok(())
}

/// The modification times of the two files, if both can be read.
fn modified(cert: &Path, key: &Path) -> Option<(SystemTime, SystemTime)> {
    let time = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    Some((time(cert)?, time(key)?))
}

/// Reloads the certificate and key whenever either file changes; a pair that cannot be
/// loaded (say, one file written and not yet the other) keeps the previous one in use.
async fn reload_on_change(tls: TlsConfig, cert: PathBuf, key: PathBuf, every: Duration) {
    let mut seen = modified(&cert, &key);
    loop {
        tokio::time::sleep(every).await;
        let now = modified(&cert, &key);
        if now.is_none() || now == seen {
            continue;
        }
        match tls.reload(&cert, &key) {
            Ok(()) => {
                tracing::info!(cert = %cert.display(), "TLS certificate reloaded");
                seen = now;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot reload the TLS certificate; keeping the previous one")
            }
        }
    }
}
