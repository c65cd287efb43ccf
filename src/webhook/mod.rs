//! The canary rollout webhook, `gantry webhook`: a mutating admission webhook that sends a
//! configured share of new pods to gantry (it sets `spec.schedulerName` to gantry's profile)
//! and leaves the rest to the default scheduler, sticky per workload.
//!
//! - [`config`]: the `RolloutConfiguration` file and the share type.
//! - [`decision`]: precedence of the share (pod annotation, namespace annotation,
//!   configuration), the workload of a pod and its bucket.
//! - [`server`]: the AdmissionReview endpoint, health and metrics endpoints.
//! - [`metrics`]: counters of routed, skipped pods and invalid annotations.
//!
//! Served over TLS (rustls through axum-server); the certificate and key files are re-read
//! when they change, so a renewed certificate (cert-manager, a rotated Secret) is picked up
//! without a restart.

pub mod config;
pub mod decision;
pub mod metrics;
pub mod server;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use axum_server::Handle;
use axum_server::tls_rustls::RustlsConfig;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, reflector, watcher};

use crate::adapter::{self, AdapterError};
use crate::config::{ClientConnection, DEFAULT_BURST, DEFAULT_QPS};
use crate::signals::Signals;
use config::RolloutConfig;
use metrics::Metrics;
use server::{Namespaces, Webhook};

/// How often the certificate files are checked for a change, by default.
pub const DEFAULT_TLS_RELOAD_INTERVAL: Duration = Duration::from_secs(10);
/// How long in-flight admission requests may take to finish at shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Why `gantry webhook` stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The API client cannot be built.
    #[error(transparent)]
    Client(#[from] AdapterError),
    /// The certificate or key cannot be loaded.
    #[error("cannot load the TLS certificate {cert} and key {key}: {source}")]
    Tls {
        /// The certificate file.
        cert: String,
        /// The key file.
        key: String,
        /// Why.
        source: std::io::Error,
    },
    /// The address cannot be served.
    #[error("cannot serve HTTPS on {address}: {source}")]
    Serve {
        /// The address.
        address: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The signal handlers cannot be installed.
    #[error("cannot start: {0}")]
    Start(#[from] std::io::Error),
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
    } = options;
    let tls_error = |source| WebhookError::Tls {
        cert: tls_cert.display().to_string(),
        key: tls_key.display().to_string(),
        source,
    };
    has_certificate(&tls_cert).map_err(tls_error)?;
    let tls = RustlsConfig::from_pem_file(&tls_cert, &tls_key)
        .await
        .map_err(tls_error)?;
    let settings = ClientConnection {
        kubeconfig: None,
        qps: DEFAULT_QPS,
        burst: DEFAULT_BURST,
        content_type: Default::default(),
    };
    let client = adapter::connect(kubeconfig.as_deref(), &settings).await?;
    let mut signals = Signals::new()?;

    let api: Api<PartialObjectMeta<Namespace>> = Api::all(client);
    let (store, writer) = reflector::store();
    let ready = Arc::new(AtomicBool::new(false));
    let namespaces_task = tokio::spawn(
        reflector(
            writer,
            watcher(api.clone(), watcher::Config::default()).default_backoff(),
        )
        .for_each(|event| async move {
            if let Err(e) = event {
                tracing::warn!(error = %e, "namespace watch failed; retrying");
            }
        }),
    );
    let ready_task = {
        let (store, ready) = (store.clone(), ready.clone());
        tokio::spawn(async move {
            if store.wait_until_ready().await.is_ok() {
                ready.store(true, Ordering::Relaxed);
                tracing::info!(namespaces = store.len(), "namespace cache synced");
            }
        })
    };
    let webhook = Webhook {
        config: Arc::new(config),
        namespaces: Namespaces {
            store,
            api: Some(api),
        },
        metrics: Arc::new(Metrics::new()),
        ready,
    };
    let reload_task = tokio::spawn(reload_on_change(
        tls.clone(),
        tls_cert.clone(),
        tls_key.clone(),
        tls_reload_interval,
    ));

    let handle: Handle<SocketAddr> = Handle::new();
    let server = axum_server::bind_rustls(address, tls)
        .handle(handle.clone())
        .serve(server::router(webhook.clone()).into_make_service());
    let mut server_task = tokio::spawn(server);
    let Some(served) = handle.listening().await else {
        let source = match (&mut server_task).await {
            Ok(Err(e)) => e,
            _ => std::io::Error::other("the server stopped"),
        };
        return Err(WebhookError::Serve { address, source });
    };
    tracing::info!(
        %served,
        scheduler = %webhook.config.scheduler_name,
        share = %webhook.config.share,
        excluded = ?webhook.config.excluded_namespaces,
        "gantry webhook serving /mutate"
    );

    let result = tokio::select! {
        () = signals.wait() => Ok(()),
        r = &mut server_task => Err(match r {
            Ok(Err(source)) => WebhookError::Serve { address, source },
            _ => WebhookError::Serve { address, source: std::io::Error::other("the server stopped") },
        }),
    };
    tracing::info!("shutting down");
    handle.graceful_shutdown(Some(SHUTDOWN_GRACE));
    if result.is_ok() {
        let _ = server_task.await;
    }
    for task in [namespaces_task, ready_task, reload_task] {
        task.abort();
    }
    tracing::info!("stopped");
    result
}

/// Fails unless `path` holds a PEM certificate (rustls would say "peer sent no certificates").
fn has_certificate(path: &Path) -> std::io::Result<()> {
    let text = std::fs::read(path)?;
    let marker = b"-----BEGIN CERTIFICATE-----";
    if text.windows(marker.len()).any(|w| w == marker) {
        Ok(())
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "no PEM certificate in the certificate file",
        ))
    }
}

/// The modification times of the two files, if both can be read.
fn modified(cert: &Path, key: &Path) -> Option<(SystemTime, SystemTime)> {
    let time = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    Some((time(cert)?, time(key)?))
}

/// Reloads the certificate and key whenever either file changes; a pair that cannot be
/// loaded (say, one file written and not yet the other) keeps the previous one in use.
async fn reload_on_change(tls: RustlsConfig, cert: PathBuf, key: PathBuf, every: Duration) {
    let mut seen = modified(&cert, &key);
    loop {
        tokio::time::sleep(every).await;
        let now = modified(&cert, &key);
        if now.is_none() || now == seen {
            continue;
        }
        match tls.reload_from_pem_file(&cert, &key).await {
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
