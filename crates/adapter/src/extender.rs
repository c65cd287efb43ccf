//! The HTTP side of scheduler extenders (see [`gantry_core::extender`]): a task per pod asks its
//! extenders, off the scheduling thread, and hands the answer back as an
//! `Input::Extenders` of the driver; the bind call, made by the binder
//! instead of posting a Binding, is here too.
//!
//! Each call is a JSON POST to `<urlPrefix>/<verb>` that must answer 200 within the
//! extender's `httpTimeout`. The pod is sent as the API server has it (read once per
//! attempt: gantry keeps no full Pod objects); nodes are sent by name to a node-cache-capable
//! extender, else as Node objects built from the cache (see
//! [`gantry_core::extender::protocol::node_object`]). Failures are logged with the extender's
//! `urlPrefix` and the verb.

use std::collections::HashMap;
use std::sync::Arc;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::Value;
use tokio::sync::mpsc;

use gantry_core::extender::combine::Exchange;
use gantry_core::extender::preempt::{self, PreemptRound};
use gantry_core::extender::protocol::{
    self, BindingArgs, ExtenderArgs, FilterResult, HostPriority, NodeList, PreemptionArgs, Victims,
};
use gantry_core::extender::{Extender, Extenders, TlsSettings, Verb};
use gantry_core::framework::PreemptionCandidate;
use gantry_core::model::NodeModel;
use gantry_core::scheduler::{ExtenderAnswer, ExtenderAsk, ExtenderReply, ExtenderRequest};

/// The largest answer read from an extender, whatever it is about: far above any node list.
const MAX_ANSWER_BYTES: usize = 64 << 20;
/// What an answer may hold per node it is about, beyond what was sent (a `FailedNodes`
/// reason, a `HostPriority`).
const ANSWER_BYTES_PER_NODE: usize = 4 << 10;
/// What any answer may hold beyond that (an `Error`, the keys and brackets).
const ANSWER_BYTES_BASE: usize = 64 << 10;

/// The most an answer to a call of `sent` bytes about `nodes` nodes can mean: an extender
/// answers about the nodes it was sent (echoing their objects at most), with a reason or a
/// score each. An answer beyond it is refused unread, rather than held in memory.
fn answer_limit(sent: usize, nodes: usize) -> usize {
    sent.saturating_add(nodes.saturating_mul(ANSWER_BYTES_PER_NODE))
        .saturating_add(ANSWER_BYTES_BASE)
        .min(MAX_ANSWER_BYTES)
}

/// An extender that cannot be set up.
#[derive(Debug, thiserror::Error)]
#[error("extenders[{index}] ({url}): {reason}")]
pub struct SetupError {
    /// Its position in the configuration's call order.
    pub index: usize,
    /// Its `urlPrefix`.
    pub url: String,
    /// What is wrong (a TLS file that cannot be read, ...).
    pub reason: String,
}

/// One HTTP client per extender, with its TLS settings.
#[derive(Clone)]
pub struct Clients {
    extenders: Extenders,
    http: Arc<[HttpClient<HttpsConnector<HttpConnector>, Full<Bytes>>]>,
}

impl std::fmt::Debug for Clients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clients")
            .field("extenders", &self.extenders)
            .finish_non_exhaustive()
    }
}

impl Clients {
    /// Clients for `extenders`.
    pub fn new(extenders: &Extenders) -> Result<Self, SetupError> {
        let http = extenders
            .all()
            .iter()
            .enumerate()
            .map(|(index, e)| {
                connector(e)
                    .map(|c| HttpClient::builder(TokioExecutor::new()).build(c))
                    .map_err(|reason| SetupError {
                        index,
                        url: e.url_prefix.clone(),
                        reason,
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Clients {
            extenders: extenders.clone(),
            http: http.into(),
        })
    }

    /// Makes one call of extender `i` with `body` about `nodes` nodes; the answer's body
    /// (at most [`answer_limit`]), or why there is none.
    async fn call(
        &self,
        i: usize,
        verb: Verb,
        body: &impl serde::Serialize,
        nodes: usize,
    ) -> Result<Bytes, String> {
        let extender = &self.extenders.all()[i];
        let Some(path) = extender.verb(verb) else {
            return Err(format!("no {} configured", verb.field()));
        };
        let url = extender.url(path);
        let body = serde_json::to_vec(body).map_err(|e| e.to_string())?;
        let limit = answer_limit(body.len(), nodes);
        let request = hyper::Request::post(&url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| format!("{url}: {e}"))?;
        let exchange = async {
            let response = self.http[i]
                .request(request)
                .await
                .map_err(|e| format!("POST {url}: {e}"))?;
            let status = response.status();
            if status != http::StatusCode::OK {
                return Err(format!(
                    "failed {path} with extender at URL {url}, code {}",
                    status.as_u16()
                ));
            }
            Limited::new(response.into_body(), limit)
                .collect()
                .await
                .map(|b| b.to_bytes())
                .map_err(|e| {
                    if e.is::<http_body_util::LengthLimitError>() {
                        format!(
                            "POST {url}: the answer is larger than {limit} bytes, more than an answer about {nodes} nodes can hold"
                        )
                    } else {
                        format!("POST {url}: reading the answer: {e}")
                    }
                })
        };
        match tokio::time::timeout(extender.http_timeout, exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(format!(
                "POST {url}: no answer within {:?} (httpTimeout)",
                extender.http_timeout
            )),
        }
    }

    /// Asks extender `i` to bind the pod to `node`. `Ok(false)`: the call failed and the
    /// extender is ignorable, so the default binding applies (kube-scheduler's rule).
    pub async fn bind(&self, i: usize, args: &BindingArgs) -> Result<bool, String> {
        let extender = &self.extenders.all()[i];
        let answer = self
            .call(i, Verb::Bind, args, 1)
            .await
            .and_then(|body| protocol::decode_binding_result(&body).map_err(|e| e.to_string()))
            .and_then(|error| if error.is_empty() { Ok(()) } else { Err(error) });
        match answer {
            Ok(()) => Ok(true),
            Err(message) => {
                log_failure(extender, Verb::Bind, &message);
                if extender.ignorable {
                    Ok(false)
                } else {
                    Err(format!("extender {} bind: {message}", extender.url_prefix))
                }
            }
        }
    }

    /// The extenders.
    pub fn extenders(&self) -> &Extenders {
        &self.extenders
    }
}

fn log_failure(extender: &Extender, verb: Verb, message: &str) {
    tracing::warn!(
        extender = %extender.url_prefix,
        verb = verb.field(),
        ignorable = extender.ignorable,
        %message,
        "scheduler extender call failed"
    );
}

/// Answers every request from `requests`, each in a task of its own, handing the answers
/// to `report`, until the channel closes.
pub async fn run(
    clients: Clients,
    api: kube::Client,
    mut requests: mpsc::UnboundedReceiver<ExtenderRequest>,
    report: impl Fn(ExtenderAnswer) + Clone + Send + 'static,
) {
    while let Some(request) = requests.recv().await {
        let (clients, api, report) = (clients.clone(), api.clone(), report.clone());
        tokio::spawn(async move {
            let (namespace, name) = (request.pod.namespace.clone(), request.pod.name.clone());
            let attempt = request.attempt;
            let verdict = ask(&clients, &api, request).await;
            report(ExtenderAnswer {
                namespace,
                name,
                attempt,
                verdict,
            });
        });
    }
}

/// The pod as the API server has it, for the extenders; an error if it is gone or was
/// replaced by another of the same name.
pub async fn read_pod(
    api: &kube::Client,
    namespace: &str,
    name: &str,
    uid: &str,
) -> Result<Value, String> {
    let pods: Api<Pod> = Api::namespaced(api.clone(), namespace);
    let pod = pods
        .get(name)
        .await
        .map_err(|e| format!("cannot read pod {namespace}/{name} for the extenders: {e}"))?;
    if !uid.is_empty() && pod.metadata.uid.as_deref() != Some(uid) {
        return Err(format!(
            "pod {namespace}/{name} was replaced by another of the same name"
        ));
    }
    serde_json::to_value(&pod).map_err(|e| e.to_string())
}

/// One pod's round, as the request asks.
async fn ask(
    clients: &Clients,
    api: &kube::Client,
    request: ExtenderRequest,
) -> Result<ExtenderReply, String> {
    let pod = request.pod;
    let pod_object = read_pod(api, &pod.namespace, &pod.name, &pod.uid).await?;
    match request.ask {
        ExtenderAsk::Place {
            exchange, nodes, ..
        } => place(clients, &pod_object, exchange, nodes)
            .await
            .map(ExtenderReply::Placed),
        ExtenderAsk::Preempt(round) => cut_preemption(clients, api, &pod_object, round)
            .await
            .map(ExtenderReply::Preempt),
    }
}

/// The preempt calls in order, each about what the one before left.
async fn cut_preemption(
    clients: &Clients,
    api: &kube::Client,
    pod_object: &Value,
    mut round: PreemptRound,
) -> Result<Vec<PreemptionCandidate>, String> {
    let all = clients.extenders.all();
    while let Some((i, candidates)) = round.next_call() {
        let candidates_sent = candidates.len();
        let args = match preemption_args(&all[i], api, pod_object, candidates).await {
            Ok(args) => args,
            // The victims cannot be read: nothing can be sent to any extender.
            Err(message) => return Err(message),
        };
        let answer = clients
            .call(i, Verb::Preempt, &args, candidates_sent)
            .await
            .and_then(|body| protocol::decode_preemption_result(&body).map_err(|e| e.to_string()));
        if let Some(skipped) = round.answered(i, answer) {
            log_failure(&all[skipped.extender], skipped.verb, &skipped.message);
        }
    }
    round.finish().map_err(|failed| {
        let extender = &all[failed.extender];
        log_failure(extender, failed.verb, &failed.message);
        format!(
            "extender {} preempt: {}",
            extender.url_prefix, failed.message
        )
    })
}

/// The preempt call's body: victims by uid for a node-cache-capable extender, else as
/// the API server has them (read now, as kube-scheduler sends its cached objects).
async fn preemption_args(
    extender: &Extender,
    api: &kube::Client,
    pod_object: &Value,
    candidates: &[PreemptionCandidate],
) -> Result<PreemptionArgs, String> {
    if extender.node_cache_capable {
        return Ok(PreemptionArgs {
            pod: pod_object.clone(),
            node_name_to_victims: None,
            node_name_to_meta_victims: Some(preempt::meta_victims(candidates)),
        });
    }
    let reads = candidates.iter().map(|c| async move {
        let pods = futures::future::try_join_all(
            c.victims
                .iter()
                .map(|v| read_pod(api, &v.namespace, &v.name, &v.uid)),
        )
        .await?;
        let victims = Victims {
            pods,
            num_pdb_violations: i64::try_from(c.pdb_violations).unwrap_or(i64::MAX),
        };
        Ok::<_, String>((c.node.to_string(), victims))
    });
    let victims = futures::future::try_join_all(reads).await?;
    Ok(PreemptionArgs {
        pod: pod_object.clone(),
        node_name_to_victims: Some(victims.into_iter().collect()),
        node_name_to_meta_victims: None,
    })
}

/// The filter calls in order, then the prioritize calls at once.
async fn place(
    clients: &Clients,
    pod_object: &Value,
    mut exchange: Exchange,
    nodes: Vec<Arc<NodeModel>>,
) -> Result<gantry_core::extender::combine::Verdict, String> {
    let pod_object = pod_object.clone();
    let by_name: HashMap<&str, &Arc<NodeModel>> = nodes.iter().map(|n| (&*n.name, n)).collect();
    let all = clients.extenders.all();
    while let Some((i, sent)) = exchange.next_filter() {
        let args = args_for(&all[i], &pod_object, sent, &by_name);
        let answer: Result<FilterResult, String> = clients
            .call(i, Verb::Filter, &args, sent.len())
            .await
            .and_then(|body| protocol::decode_filter_result(&body).map_err(|e| e.to_string()));
        if let Some(skipped) = exchange.filtered(i, answer) {
            log_failure(&all[skipped.extender], skipped.verb, &skipped.message);
        }
    }
    let (prioritizers, left) = exchange.prioritizers();
    let calls: Vec<_> = prioritizers
        .iter()
        .map(|&i| {
            let args = args_for(&all[i], &pod_object, left, &by_name);
            async move {
                let answer: Result<Vec<HostPriority>, String> = clients
                    .call(i, Verb::Prioritize, &args, left.len())
                    .await
                    .and_then(|body| {
                        protocol::decode_host_priorities(&body).map_err(|e| e.to_string())
                    });
                (i, answer)
            }
        })
        .collect();
    for (i, answer) in futures::future::join_all(calls).await {
        if let Some(failed) = exchange.prioritized(i, answer) {
            log_failure(&all[failed.extender], failed.verb, &failed.message);
        }
    }
    exchange.finish().map_err(|failed| {
        let extender = &all[failed.extender];
        log_failure(extender, failed.verb, &failed.message);
        format!(
            "extender {} {}: {}",
            extender.url_prefix,
            failed.verb.field().trim_end_matches("Verb"),
            failed.message
        )
    })
}

/// The filter or prioritize call's body for `extender` about `nodes`.
fn args_for(
    extender: &Extender,
    pod: &Value,
    nodes: &[Arc<str>],
    by_name: &HashMap<&str, &Arc<NodeModel>>,
) -> ExtenderArgs {
    if extender.node_cache_capable {
        ExtenderArgs {
            pod: pod.clone(),
            nodes: None,
            node_names: Some(nodes.iter().map(|n| n.to_string()).collect()),
        }
    } else {
        ExtenderArgs {
            pod: pod.clone(),
            nodes: Some(NodeList {
                items: nodes
                    .iter()
                    .filter_map(|n| by_name.get(&**n))
                    .map(|n| protocol::node_object(n))
                    .collect(),
            }),
            node_names: None,
        }
    }
}

/// The connector for `extender`: plain HTTP, or HTTPS with its TLS settings, as client-go
/// makes them (with `enableHTTPS` and no CA, the certificate is not verified).
fn connector(extender: &Extender) -> Result<HttpsConnector<HttpConnector>, String> {
    let tls = &extender.tls;
    let insecure = tls.insecure || (extender.enable_https && !tls.has_ca());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
    } else {
        builder.with_root_certificates(roots(tls)?)
    };
    let config = match client_identity(tls)? {
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| format!("tlsConfig: client certificate: {e}"))?,
        None => builder.with_no_client_auth(),
    };
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_or_http();
    let connector = match &tls.server_name {
        Some(name) => {
            let name = rustls::pki_types::ServerName::try_from(name.clone())
                .map_err(|e| format!("tlsConfig.serverName {name:?}: {e}"))?;
            connector.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => connector,
    };
    Ok(connector.enable_http1().build())
}

fn read(data: &[u8], file: Option<&String>, what: &str) -> Result<Option<Vec<u8>>, String> {
    if !data.is_empty() {
        return Ok(Some(data.to_vec()));
    }
    file.map(|f| std::fs::read(f).map_err(|e| format!("tlsConfig.{what}File {f}: {e}")))
        .transpose()
}

fn roots(tls: &TlsSettings) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    match read(&tls.ca_data, tls.ca_file.as_ref(), "ca")? {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| format!("tlsConfig: CA: {e}"))?;
                roots.add(cert).map_err(|e| format!("tlsConfig: CA: {e}"))?;
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                // A system certificate rustls cannot use is left out, as Go leaves it.
                let _ = roots.add(cert);
            }
        }
    }
    Ok(roots)
}

type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

fn client_identity(tls: &TlsSettings) -> Result<Option<Identity>, String> {
    let cert = read(&tls.cert_data, tls.cert_file.as_ref(), "cert")?;
    let key = read(&tls.key_data, tls.key_file.as_ref(), "key")?;
    let (Some(cert), Some(key)) = (cert, key) else {
        return Ok(None);
    };
    let chain = CertificateDer::pem_slice_iter(&cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("tlsConfig: client certificate: {e}"))?;
    let key =
        PrivateKeyDer::from_pem_slice(&key).map_err(|e| format!("tlsConfig: client key: {e}"))?;
    Ok(Some((chain, key)))
}

/// `tlsConfig.insecure` (or `enableHTTPS` without a CA): the server's certificate is not
/// verified, only its handshake signatures. Also what `gantry what-if` and `gantry
/// snapshot` use with `--insecure-skip-tls-verify`.
#[derive(Debug)]
pub struct NoVerification(pub Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
