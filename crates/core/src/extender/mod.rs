//! Scheduler extenders, as kube-scheduler calls them: HTTP services configured under
//! `extenders:` that filter and score nodes, bind pods and cut preemptions for the pods they
//! are interested in (every pod, or those that use a resource they manage).
//!
//! This module is the pure part: the resolved configuration ([`Extender`]), which pods an
//! extender is interested in, the wire types of kube-scheduler's protocol ([`protocol`]) and
//! the rules that combine the extenders' answers with the plugins' results ([`combine`],
//! and [`preempt`] for preemptions).
//! The calls themselves are the front end's (`adapter::extender`): the scheduling thread
//! never waits on the network. A pod that an extender filters or scores stops after the
//! Filter plugins; the front end asks the extenders and hands their answers back, and the
//! scheduler resumes the pod with them (see `Attempt::Extending` in the scheduler).

pub mod combine;
pub mod preempt;
pub mod protocol;

use std::sync::Arc;
use std::time::Duration;

use crate::model::PodInfo;

/// kube-scheduler's name for the extenders in a diagnosis's unschedulable plugins and in
/// the scores: a pod they rejected is retried on any cluster event, as none registers any.
pub const NAME: &str = "Extender";

/// kube-scheduler's timeout of one call, when `httpTimeout` is absent or zero.
pub const DEFAULT_HTTP_TIMEOUT: Duration = Duration::from_secs(5);

/// The highest score an extender gives a node (kube's `MaxExtenderPriority`); its scores
/// are scaled from `0..=10` to the plugins' `0..=100`.
pub const MAX_EXTENDER_PRIORITY: i64 = 10;

/// One extender, validated and with its defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extender {
    /// The URL the verbs are appended to (its trailing `/` removed).
    pub url_prefix: String,
    /// The filter verb, if the extender filters.
    pub filter_verb: Option<String>,
    /// The preempt verb, if the extender is asked about preemptions.
    pub preempt_verb: Option<String>,
    /// The prioritize verb, if the extender scores.
    pub prioritize_verb: Option<String>,
    /// Multiplier of its scores.
    pub weight: i64,
    /// The bind verb, if the extender binds.
    pub bind_verb: Option<String>,
    /// Whether it is reached over HTTPS.
    pub enable_https: bool,
    /// Its TLS settings.
    pub tls: TlsSettings,
    /// How long one call may take.
    pub http_timeout: Duration,
    /// Whether it is sent node names only (it caches nodes itself).
    pub node_cache_capable: bool,
    /// The extended resources it manages; empty: it is interested in every pod.
    pub managed_resources: Vec<ManagedResource>,
    /// Whether its failures are skipped.
    pub ignorable: bool,
}

/// One managed resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedResource {
    /// The extended resource's name.
    pub name: String,
    /// Whether NodeResourcesFit leaves it to the extender.
    pub ignored_by_scheduler: bool,
}

/// An extender's TLS settings (client-go's `TLSClientConfig`); data takes precedence over
/// the file of the same thing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// Do not verify the server's certificate.
    pub insecure: bool,
    /// The name the certificate is checked against, instead of the URL's host.
    pub server_name: Option<String>,
    /// Client certificate file.
    pub cert_file: Option<String>,
    /// Client key file.
    pub key_file: Option<String>,
    /// CA certificates file.
    pub ca_file: Option<String>,
    /// Client certificate (PEM).
    pub cert_data: Vec<u8>,
    /// Client key (PEM).
    pub key_data: Vec<u8>,
    /// CA certificates (PEM).
    pub ca_data: Vec<u8>,
}

impl TlsSettings {
    /// Whether a CA is given; without one, an HTTPS extender's certificate is not verified
    /// (kube-scheduler's rule for `enableHTTPS`).
    pub fn has_ca(&self) -> bool {
        self.ca_file.is_some() || !self.ca_data.is_empty()
    }
}

/// One call of an extender, for logs: its URL prefix and verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// `filterVerb`.
    Filter,
    /// `prioritizeVerb`.
    Prioritize,
    /// `bindVerb`.
    Bind,
    /// `preemptVerb`.
    Preempt,
}

impl Verb {
    /// The configuration field naming the verb.
    pub fn field(self) -> &'static str {
        match self {
            Verb::Filter => "filterVerb",
            Verb::Prioritize => "prioritizeVerb",
            Verb::Bind => "bindVerb",
            Verb::Preempt => "preemptVerb",
        }
    }
}

impl Extender {
    /// kube-scheduler's `IsInterested`: an extender without managed resources is
    /// interested in every pod; one with them, in a pod whose containers or init containers
    /// request or limit one.
    pub fn is_interested(&self, pod: &PodInfo) -> bool {
        self.managed_resources.is_empty()
            || self.managed_resources.iter().any(|m| {
                pod.extended_resource_names
                    .binary_search_by(|n| (**n).cmp(m.name.as_str()))
                    .is_ok()
            })
    }

    /// The verb's path, if the extender implements it.
    pub fn verb(&self, verb: Verb) -> Option<&str> {
        match verb {
            Verb::Filter => self.filter_verb.as_deref(),
            Verb::Prioritize => self.prioritize_verb.as_deref(),
            Verb::Bind => self.bind_verb.as_deref(),
            Verb::Preempt => self.preempt_verb.as_deref(),
        }
    }

    /// The URL of `verb`: the prefix, a `/`, the verb (kube-scheduler joins them so).
    pub fn url(&self, verb: &str) -> String {
        format!("{}/{verb}", self.url_prefix.trim_end_matches('/'))
    }
}

/// The configured extenders, in the order kube-scheduler calls them: the non-ignorable
/// ones first, then the ignorable ones, each group in the order of the file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extenders(Arc<[Extender]>);

impl Extenders {
    /// `list` in kube-scheduler's call order.
    pub fn new(list: Vec<Extender>) -> Self {
        let (mut ordered, ignorable): (Vec<_>, Vec<_>) =
            list.into_iter().partition(|e| !e.ignorable);
        ordered.extend(ignorable);
        Extenders(ordered.into())
    }

    /// All of them, in call order.
    pub fn all(&self) -> &[Extender] {
        &self.0
    }

    /// Whether none is configured.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The positions of the extenders interested in `pod` that implement `verb`.
    pub fn interested(&self, pod: &PodInfo, verb: Verb) -> Vec<usize> {
        self.0
            .iter()
            .enumerate()
            .filter(|(_, e)| e.verb(verb).is_some() && e.is_interested(pod))
            .map(|(i, _)| i)
            .collect()
    }

    /// Whether some extender filters or scores `pod`: its cycle then stops after the
    /// Filter plugins until they have answered.
    pub fn asked_to_place(&self, pod: &PodInfo) -> bool {
        self.0.iter().any(|e| {
            (e.filter_verb.is_some() || e.prioritize_verb.is_some()) && e.is_interested(pod)
        })
    }

    /// Whether some extender cuts `pod`'s preemptions: its PostFilter then lists the
    /// candidates for them before a node is chosen.
    pub fn asked_to_preempt(&self, pod: &PodInfo) -> bool {
        self.0
            .iter()
            .any(|e| e.preempt_verb.is_some() && e.is_interested(pod))
    }

    /// The extender that binds `pod`, if one does: the first interested binder
    /// (configuration allows one binder at most).
    pub fn binder_for(&self, pod: &PodInfo) -> Option<usize> {
        self.interested(pod, Verb::Bind).into_iter().next()
    }

    /// The resources NodeResourcesFit leaves to the extenders (`ignoredByScheduler`).
    pub fn ignored_resources(&self) -> Vec<String> {
        self.0
            .iter()
            .flat_map(|e| &e.managed_resources)
            .filter(|m| m.ignored_by_scheduler)
            .map(|m| m.name.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests;
