//! Serving the endpoints of [`super::health`] as kube-scheduler serves its own: HTTPS on the
//! secure port, every request authenticated ([`authn`]: the API server reviews bearer
//! tokens) and authorized ([`authz`]: the API server reviews `get` on the path) except the
//! always-allowed health paths; a certificate from files or self-signed ([`tls`]). Plain
//! HTTP is served only where `--address` asks, without any of this.

pub mod authn;
pub mod authz;
mod cache;
pub mod tls;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use super::health::{self, Health};
use super::rest_client::RestClientMetrics;
use authn::{Authenticator, Unauthorized};
use authz::{Authorizer, Decision, PathRule};
use tls::CertificateSource;

/// kube-scheduler's secure port (`--secure-port`).
pub const DEFAULT_SECURE_PORT: u16 = 10259;
/// kube-scheduler's `--bind-address`: every IPv4 interface.
pub const DEFAULT_BIND_ADDRESS: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
/// How long a client may take over the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send a request's header (also closes idle connections).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How the secure port authenticates and authorizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delegation {
    /// `--authentication-kubeconfig`; the in-cluster configuration when absent.
    pub authentication_kubeconfig: Option<PathBuf>,
    /// `--authentication-token-webhook-cache-ttl`.
    pub token_cache_ttl: Duration,
    /// `--authorization-kubeconfig`; the in-cluster configuration when absent.
    pub authorization_kubeconfig: Option<PathBuf>,
    /// `--authorization-always-allow-paths`.
    pub always_allow_paths: Vec<PathRule>,
    /// `--authorization-webhook-cache-authorized-ttl`.
    pub authorized_ttl: Duration,
    /// `--authorization-webhook-cache-unauthorized-ttl`.
    pub unauthorized_ttl: Duration,
}

impl Default for Delegation {
    fn default() -> Self {
        Delegation {
            authentication_kubeconfig: None,
            token_cache_ttl: authn::DEFAULT_TOKEN_CACHE_TTL,
            authorization_kubeconfig: None,
            always_allow_paths: authz::parse_paths(authz::DEFAULT_ALWAYS_ALLOW_PATHS)
                .unwrap_or_default(),
            authorized_ttl: authz::DEFAULT_AUTHORIZED_TTL,
            unauthorized_ttl: authz::DEFAULT_UNAUTHORIZED_TTL,
        }
    }
}

/// The secure port's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecureServing {
    /// Where to listen (`--bind-address`, `--secure-port`).
    pub address: SocketAddr,
    /// The serving certificate.
    pub certificate: CertificateSource,
    /// Authentication and authorization.
    pub delegation: Delegation,
}

/// Where the endpoints are served.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Serving {
    /// HTTPS with authentication and authorization; none with `--secure-port=0`.
    pub secure: Option<SecureServing>,
    /// Plain HTTP, open to all (`--address`).
    pub plain: Option<SocketAddr>,
    /// Whether the plain port also serves `/debug/*` (decisions, what-if, snapshots,
    /// pprof), which cost more than a health check; off unless asked for.
    pub plain_debug: bool,
    /// Whether `/debug/pprof` is served (`enableProfiling`).
    pub profiling: bool,
}

/// The endpoints cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ServingError {
    /// The certificate.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// A delegation kubeconfig cannot be read or used.
    #[error("{flag} {path}: {reason}")]
    Kubeconfig {
        /// The flag.
        flag: &'static str,
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The port cannot be bound.
    #[error("cannot serve on {address}: {error}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// Why.
        error: std::io::Error,
    },
}

/// The client for a delegation: from `kubeconfig`, else in-cluster, else none (tolerated,
/// as kube-scheduler tolerates it, with a warning saying what will not work); its requests
/// are counted with the scheduler's own, as client-go counts every client of a process.
async fn delegate_client(
    kubeconfig: Option<&Path>,
    flag: &'static str,
    without: &str,
    metrics: &RestClientMetrics,
) -> Result<Option<Client>, ServingError> {
    let error = |path: &Path, reason: String| ServingError::Kubeconfig {
        flag,
        path: path.display().to_string(),
        reason,
    };
    let config = match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path).map_err(|e| error(path, e.to_string()))?;
            kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(|e| error(path, e.to_string()))?
        }
        None => match kube::Config::incluster() {
            Ok(config) => config,
            Err(e) => {
                tracing::warn!(error = %e, "no {flag} given and not in a cluster: {without}");
                return Ok(None);
            }
        },
    };
    let client = super::client::build(config, None, Some(metrics)).map_err(|e| {
        ServingError::Kubeconfig {
            flag,
            path: kubeconfig.map_or("(in-cluster)".to_string(), |p| p.display().to_string()),
            reason: e.to_string(),
        }
    })?;
    Ok(Some(client))
}

/// The checks in front of the secure port's routes.
struct Guard {
    authenticator: Arc<Authenticator>,
    authorizer: Arc<Authorizer>,
}

/// A Kubernetes `Status` answer, as kube-scheduler's server gives for 401, 403 and 500.
fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

async fn guard(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    let user = match guard.authenticator.authenticate(request.headers()).await {
        Ok(user) => user,
        Err(Unauthorized(reason)) => {
            tracing::debug!(%reason, path = %request.uri().path(), "unauthorized request");
            return status(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized");
        }
    };
    let path = request.uri().path().to_string();
    let verb = authz::verb(request.method());
    match guard.authorizer.authorize(&user, &verb, &path).await {
        Ok(Decision::Allow) => next.run(request).await,
        // A request nobody is known to have sent is asked for credentials (401) where
        // kube-scheduler answers the anonymous user 403: a scraper missing its token is told
        // so; an anonymous request that RBAC allows is still served.
        Ok(Decision::Deny(reason)) if user.name == authn::ANONYMOUS_USER => {
            tracing::debug!(%reason, %path, "anonymous request denied");
            status(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized")
        }
        Ok(Decision::Deny(reason)) => {
            let mut message = format!(
                "forbidden: User {:?} cannot {verb} path {path:?}",
                user.name
            );
            if !reason.is_empty() {
                message.push_str(": ");
                message.push_str(&reason);
            }
            status(StatusCode::FORBIDDEN, "Forbidden", &message)
        }
        Err(e) => status(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            &e.to_string(),
        ),
    }
}

/// The secure port's router: the endpoints behind the guard.
async fn secure_router(health: Health, delegation: &Delegation) -> Result<Router, ServingError> {
    let authn_client = delegate_client(
        delegation.authentication_kubeconfig.as_deref(),
        "--authentication-kubeconfig",
        "tokens cannot be reviewed, every request is anonymous",
        health.metrics.rest_client(),
    )
    .await?;
    let authz_client = delegate_client(
        delegation.authorization_kubeconfig.as_deref(),
        "--authorization-kubeconfig",
        "requests cannot be reviewed, only the always-allowed paths are served",
        health.metrics.rest_client(),
    )
    .await?;
    let guard = Arc::new(Guard {
        authenticator: Authenticator::new(authn_client, delegation.token_cache_ttl),
        authorizer: Authorizer::new(
            authz_client,
            delegation.always_allow_paths.clone(),
            delegation.authorized_ttl,
            delegation.unauthorized_ttl,
        ),
    });
    Ok(health::router(health).layer(axum::middleware::from_fn_with_state(guard, self::guard)))
}

/// Binds `address` and serves the endpoints over plain HTTP, open to all (`--address`),
/// until the task is dropped; returns the bound address.
pub async fn serve_plain(
    address: SocketAddr,
    health: Health,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(address).await?;
    let local = listener.local_addr()?;
    let handle = tokio::spawn(accept_loop(listener, None, health::router(health)));
    Ok((local, handle))
}

/// Binds the secure port and serves until the task is dropped; returns the bound address.
pub async fn serve_secure(
    settings: &SecureServing,
    health: Health,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), ServingError> {
    let (chain, key) = tls::certificate(&settings.certificate, settings.address.ip())?;
    let acceptor = TlsAcceptor::from(tls::server_config(&chain, &key)?);
    let router = secure_router(health, &settings.delegation).await?;
    let bind = |error| ServingError::Bind {
        address: settings.address,
        error,
    };
    let listener = tokio::net::TcpListener::bind(settings.address)
        .await
        .map_err(bind)?;
    let local = listener.local_addr().map_err(bind)?;
    let handle = tokio::spawn(accept_loop(listener, Some(acceptor), router));
    Ok((local, handle))
}

/// Serves `router` on the connections `listener` accepts, over TLS with `acceptor` if given.
/// A client that closes its connection while its request is answered has the request's
/// future dropped (hyper notices the close), which stops a what-if question.
async fn accept_loop(
    listener: tokio::net::TcpListener,
    acceptor: Option<TlsAcceptor>,
    router: Router,
) {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::debug!(error = %e, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (acceptor, router, http) = (acceptor.clone(), router.clone(), http.clone());
        let service =
            hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                router.clone().oneshot(request)
            });
        tokio::spawn(async move {
            let Some(acceptor) = acceptor else {
                if let Err(e) = http.serve_connection(TokioIo::new(tcp), service).await {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                return;
            };
            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            if let Err(e) = http.serve_connection(TokioIo::new(stream), service).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use axum::body::Body;
    use http_body_util::BodyExt;

    use super::*;
    use crate::metrics::Metrics;
    use gantry_core::decision::DecisionStore;

    fn health() -> Health {
        Health {
            metrics: Arc::new(Metrics::new()),
            ready: Arc::new(AtomicBool::new(true)),
            watchers: Arc::default(),
            decisions: DecisionStore::shared(10),
            profiling: true,
            questions: None,
            debug: true,
        }
    }

    async fn get(router: &Router, uri: &str, token: Option<&str>) -> (StatusCode, String) {
        let mut request = axum::http::Request::get(uri);
        if let Some(t) = token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let response = router
            .clone()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn without_delegation_only_the_health_paths_are_open() {
        let router = secure_router(health(), &Delegation::default())
            .await
            .unwrap();
        for path in ["/healthz", "/livez", "/readyz"] {
            assert_eq!(get(&router, path, None).await.0, StatusCode::OK, "{path}");
        }
        let (code, body) = get(&router, "/metrics", None).await;
        assert_eq!(code, StatusCode::UNAUTHORIZED);
        assert!(body.contains(r#""reason":"Unauthorized""#), "{body}");
        for path in [
            "/debug/decisions/default/p",
            "/debug/pprof/profile?seconds=1",
            "/debug/snapshot",
        ] {
            let (code, _) = get(&router, path, Some("token")).await;
            assert_eq!(code, StatusCode::UNAUTHORIZED, "{path}");
        }
    }

    #[tokio::test]
    async fn a_delegation_kubeconfig_that_cannot_be_read_names_its_flag() {
        let delegation = Delegation {
            authorization_kubeconfig: Some("/nonexistent/authz.conf".into()),
            ..Delegation::default()
        };
        let Err(e) = secure_router(health(), &delegation).await else {
            panic!("accepted a missing kubeconfig");
        };
        assert!(
            e.to_string()
                .starts_with("--authorization-kubeconfig /nonexistent/authz.conf:"),
            "{e}"
        );
    }
}
