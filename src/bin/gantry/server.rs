//! Asking a running gantry: over plain HTTP (its `--address`), or over HTTPS on its secure
//! port with a bearer token, which gantry has the API server review (TokenReview) and
//! authorize on the path (SubjectAccessReview), as kube-scheduler's debug endpoints are.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use gantry_adapter::extender::NoVerification;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// How a running gantry is reached.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "A running gantry")]
pub struct ServerArgs {
    /// A running gantry: http://<host>:<port> (its --address) or https://<host>:10259 (its
    /// secure port, with a token allowed the path).
    #[arg(long)]
    pub server: Option<String>,
    /// A file holding the bearer token for the secure port (a ServiceAccount's token, or
    /// `kubectl create token ...`).
    #[arg(long, conflicts_with = "token")]
    pub token_file: Option<PathBuf>,
    /// The bearer token for the secure port.
    #[arg(long, env = "GANTRY_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The CA certificate (PEM) the secure port's certificate must be signed by.
    #[arg(long, conflicts_with = "insecure_skip_tls_verify")]
    pub certificate_authority: Option<PathBuf>,
    /// Do not check the secure port's certificate (gantry's own is self-signed unless
    /// --tls-cert-file gives one).
    #[arg(long)]
    pub insecure_skip_tls_verify: bool,
    /// How long the answer may take.
    #[arg(long, default_value = "60s", value_parser = parse_seconds)]
    pub timeout: Duration,
}

fn parse_seconds(s: &str) -> Result<Duration, String> {
    let n = s.strip_suffix('s').unwrap_or(s);
    n.parse::<u64>()
        .map(Duration::from_secs)
        .map_err(|_| format!("{s:?} is not a number of seconds (like 60s)"))
}

impl ServerArgs {
    /// Sends `method` `path` (with `body`, JSON) to `server` and returns the answer's body;
    /// an answer that is not a success is an error carrying gantry's message.
    pub fn request(
        &self,
        server: &str,
        method: hyper::Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> anyhow::Result<Bytes> {
        let base = server.trim_end_matches('/');
        let uri: hyper::Uri = format!("{base}{path}")
            .parse()
            .with_context(|| format!("invalid --server {server:?}"))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => bail!(
                "invalid --server {server:?}: expected http://<host>:<port> or https://<host>:<port>"
            ),
        };
        if uri.host().is_none() {
            bail!("invalid --server {server:?}: no host");
        }
        let token = match (&self.token_file, &self.token) {
            (Some(path), _) => Some(
                std::fs::read_to_string(path)
                    .with_context(|| format!("--token-file {}", path.display()))?
                    .trim()
                    .to_string(),
            ),
            (None, token) => token.clone(),
        };
        if token.is_some() && !https {
            bail!("a token is sent only over https: the plain --address port takes none");
        }
        let connector = self.connector()?;
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(uri)
            .header(hyper::header::CONTENT_TYPE, "application/json");
        if let Some(token) = token {
            request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .context("cannot build the request")?;
        let (status, body) = exchange(connector, request, self.timeout)
            .map_err(|e| anyhow!("cannot reach gantry at {base}: {e}"))?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body);
            let message = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(String::from))
                .unwrap_or_else(|| text.trim().to_string());
            bail!("gantry at {base} answered {}: {message}", status.as_u16());
        }
        Ok(body)
    }

    /// HTTP, or HTTPS checked against the CA given, the system's roots, or not at all.
    fn connector(
        &self,
    ) -> anyhow::Result<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    > {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .context("TLS")?;
        let config = if self.insecure_skip_tls_verify {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
                .with_no_client_auth()
        } else {
            let mut roots = rustls::RootCertStore::empty();
            match &self.certificate_authority {
                Some(path) => {
                    use rustls::pki_types::pem::PemObject;
                    let pem = std::fs::read(path)
                        .with_context(|| format!("--certificate-authority {}", path.display()))?;
                    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
                        let cert = cert.with_context(|| {
                            format!("--certificate-authority {}", path.display())
                        })?;
                        roots.add(cert).with_context(|| {
                            format!("--certificate-authority {}", path.display())
                        })?;
                    }
                }
                None => {
                    for cert in rustls_native_certs::load_native_certs().certs {
                        let _ = roots.add(cert);
                    }
                }
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        };
        Ok(hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(config)
            .https_or_http()
            .enable_http1()
            .build())
    }
}

/// Sends `request` through `connector`, on a runtime of its own, and waits up to `timeout`
/// for the whole answer: its status and body. The error names every cause, as the commands
/// that ask a running gantry show it.
pub fn exchange<C>(
    connector: C,
    request: hyper::Request<Full<Bytes>>,
    timeout: Duration,
) -> Result<(hyper::StatusCode, Bytes), String>
where
    C: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    runtime.block_on(async {
        let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
        tokio::time::timeout(timeout, async {
            let response = client.request(request).await.map_err(|e| {
                let mut text = e.to_string();
                let mut source = std::error::Error::source(&e);
                while let Some(s) = source {
                    text = format!("{text}: {s}");
                    source = s.source();
                }
                text
            })?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            Ok::<_, String>((status, body))
        })
        .await
        .map_err(|_| format!("no answer within {timeout:?}"))?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_seconds() {
        assert_eq!(parse_seconds("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_seconds("5"), Ok(Duration::from_secs(5)));
        assert!(parse_seconds("1m").is_err());
    }
}
