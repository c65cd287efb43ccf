//! kube-scheduler's flags on `gantry run`, with kube-scheduler's meaning and precedence
//! against the configuration file: the leader-election flags override the file when given;
//! the deprecated flags (`--kube-api-*`, `--profiling`, `--contention-profiling`) apply only
//! without `--config`, and are ignored with a warning otherwise; without `--config` every one
//! of them applies, its default being the configuration's own.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use clap::ArgMatches;
use clap::parser::ValueSource;
use gantry_adapter::serving::authz;
use gantry_adapter::serving::tls::CertificateSource;
use gantry_adapter::serving::{
    self, DEFAULT_BIND_ADDRESS, DEFAULT_SECURE_PORT, Delegation, SecureServing, Serving,
};
use gantry_core::config::types::{ClientConnection, KubeSchedulerConfiguration, LeaderElection};
use gantry_core::config::{self, GoDuration};

/// Reads a boolean as Go's `strconv.ParseBool` does (kube-scheduler's flags take
/// `--leader-elect`, `--leader-elect=true`, `--leader-elect=false`, `=1`, `=t`, `=F`...).
pub fn go_bool(text: &str) -> Result<bool, String> {
    match text {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(format!("{text:?} is not a boolean (true or false)")),
    }
}

/// Whether the flag `id` was given (on the command line or through its variable), as
/// pflag's `Changed` tells: a default is not given.
pub fn given(matches: &ArgMatches, id: &str) -> bool {
    matches!(
        matches.value_source(id),
        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
    )
}

/// kube-scheduler's leader-election flags: they override the configuration file.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Leader election (overrides the file's leaderElection)")]
pub struct LeaderElectionArgs {
    /// Elect a leader among the replicas before scheduling (`--leader-elect=false` to run
    /// alone).
    #[arg(long, default_value_t = config::DEFAULT_LEADER_ELECT, num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_parser = go_bool)]
    pub leader_elect: bool,
    /// How long a candidate waits after the last renewal before taking the lease.
    #[arg(long, default_value_t = GoDuration(config::DEFAULT_LEASE_DURATION))]
    pub leader_elect_lease_duration: GoDuration,
    /// How long the leader keeps trying to renew before it stops leading.
    #[arg(long, default_value_t = GoDuration(config::DEFAULT_RENEW_DEADLINE))]
    pub leader_elect_renew_deadline: GoDuration,
    /// Time between attempts to take or renew the lease.
    #[arg(long, default_value_t = GoDuration(config::DEFAULT_RETRY_PERIOD))]
    pub leader_elect_retry_period: GoDuration,
    /// The kind of lock: only `leases`.
    #[arg(long, default_value = config::DEFAULT_RESOURCE_LOCK)]
    pub leader_elect_resource_lock: String,
    /// The lease's name (gantry's own by default, so that it never contends with
    /// kube-scheduler's).
    #[arg(long, default_value = config::DEFAULT_LEASE_NAME)]
    pub leader_elect_resource_name: String,
    /// The lease's namespace.
    #[arg(long, default_value = config::DEFAULT_LEASE_NAMESPACE)]
    pub leader_elect_resource_namespace: String,
}

impl LeaderElectionArgs {
    /// Writes the flags given (all of them with `all`) over `le`.
    fn apply(&self, matches: &ArgMatches, all: bool, le: &mut LeaderElection) {
        let set = |id: &str| all || given(matches, id);
        if set("leader_elect") {
            le.leader_elect = Some(self.leader_elect);
        }
        if set("leader_elect_lease_duration") {
            le.lease_duration = Some(self.leader_elect_lease_duration.to_string());
        }
        if set("leader_elect_renew_deadline") {
            le.renew_deadline = Some(self.leader_elect_renew_deadline.to_string());
        }
        if set("leader_elect_retry_period") {
            le.retry_period = Some(self.leader_elect_retry_period.to_string());
        }
        if set("leader_elect_resource_lock") {
            le.resource_lock = Some(self.leader_elect_resource_lock.clone());
        }
        if set("leader_elect_resource_name") {
            le.resource_name = Some(self.leader_elect_resource_name.clone());
        }
        if set("leader_elect_resource_namespace") {
            le.resource_namespace = Some(self.leader_elect_resource_namespace.clone());
        }
    }
}

/// kube-scheduler's deprecated flags: honoured only without `--config`, as there.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Deprecated (as in kube-scheduler: ignored when --config is given)")]
pub struct DeprecatedArgs {
    /// Requests per second to the API server (`clientConnection.qps`; 0 turns throttling
    /// off).
    #[arg(long, default_value_t = config::DEFAULT_QPS)]
    pub kube_api_qps: f64,
    /// Requests above the rate allowed in a burst (`clientConnection.burst`).
    #[arg(long, default_value_t = config::DEFAULT_BURST)]
    pub kube_api_burst: u32,
    /// The encoding of pod and node lists and watches (`clientConnection.contentType`):
    /// application/vnd.kubernetes.protobuf or application/json.
    #[arg(long, default_value = config::DEFAULT_CONTENT_TYPE)]
    pub kube_api_content_type: String,
    /// Serve the CPU profile at /debug/pprof/profile, behind the secure port's checks
    /// (`enableProfiling`).
    #[arg(long, default_value_t = config::DEFAULT_PROFILING, num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_parser = go_bool)]
    pub profiling: bool,
    /// Block profiling, with --profiling (`enableContentionProfiling`): Go's, not served
    /// by gantry, so asking for it is a warning.
    #[arg(long, default_value_t = config::DEFAULT_PROFILING, num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_parser = go_bool)]
    pub contention_profiling: bool,
    /// kube-scheduler's removed plain-HTTP port: only 0 (off), which kubeadm passed up to
    /// 1.22, is accepted; gantry's plain HTTP is --address.
    #[arg(long, value_parser = clap::value_parser!(u16).range(0..=0))]
    pub port: Option<u16>,
}

/// The ids of [`DeprecatedArgs`] that set a configuration field, with that field.
const DEPRECATED_FIELDS: [(&str, &str); 5] = [
    ("kube_api_qps", "clientConnection.qps"),
    ("kube_api_burst", "clientConnection.burst"),
    ("kube_api_content_type", "clientConnection.contentType"),
    ("profiling", "enableProfiling"),
    ("contention_profiling", "enableContentionProfiling"),
];

impl DeprecatedArgs {
    fn apply(&self, file: &mut KubeSchedulerConfiguration) {
        let cc = file
            .client_connection
            .get_or_insert_with(ClientConnection::default);
        cc.qps = Some(self.kube_api_qps);
        cc.burst = Some(i64::from(self.kube_api_burst));
        cc.content_type = Some(self.kube_api_content_type.clone());
        file.enable_profiling = Some(self.profiling);
        file.enable_contention_profiling = Some(self.contention_profiling);
    }
}

/// kube-scheduler's secure serving, authentication and authorization flags.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Secure serving (HTTPS, as kube-scheduler serves)")]
pub struct ServingArgs {
    /// The address the secure port listens on (0.0.0.0 or :: for every interface).
    #[arg(long, default_value_t = DEFAULT_BIND_ADDRESS)]
    pub bind_address: IpAddr,
    /// The HTTPS port of /metrics, /healthz, /livez, /readyz and /debug/decisions; 0 turns
    /// HTTPS off.
    #[arg(long, default_value_t = DEFAULT_SECURE_PORT)]
    pub secure_port: u16,
    /// Where the self-signed certificate is kept (kube-scheduler.crt, kube-scheduler.key)
    /// when no --tls-cert-file is given; in memory without it.
    #[arg(long)]
    pub cert_dir: Option<PathBuf>,
    /// The serving certificate (PEM, the leaf first); a self-signed one without it.
    #[arg(long, requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// The serving certificate's key (PEM).
    #[arg(long, requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,
    /// A kubeconfig for TokenReviews; the in-cluster service account without it, and
    /// without either every request is anonymous.
    #[arg(long, help_heading = "Authentication")]
    pub authentication_kubeconfig: Option<PathBuf>,
    /// kube-scheduler's switch off the lookup of client-certificate settings in the
    /// cluster: gantry authenticates bearer tokens only and looks nothing up, so this
    /// changes nothing.
    #[arg(long, help_heading = "Authentication", default_value_t = false, num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_parser = go_bool)]
    pub authentication_skip_lookup: bool,
    /// How long the API server's answer about a token is kept.
    #[arg(long, help_heading = "Authentication",
          default_value_t = GoDuration(serving::authn::DEFAULT_TOKEN_CACHE_TTL))]
    pub authentication_token_webhook_cache_ttl: GoDuration,
    /// A kubeconfig for SubjectAccessReviews; the in-cluster service account without it,
    /// and without either only the always-allowed paths are served.
    #[arg(long, help_heading = "Authorization")]
    pub authorization_kubeconfig: Option<PathBuf>,
    /// Paths served to anyone, without a review (a trailing `*` matches a prefix).
    #[arg(long, help_heading = "Authorization",
          default_value = authz::DEFAULT_ALWAYS_ALLOW_PATHS)]
    pub authorization_always_allow_paths: String,
    /// How long an allowed answer of the API server is kept.
    #[arg(long, help_heading = "Authorization",
          default_value_t = GoDuration(authz::DEFAULT_AUTHORIZED_TTL))]
    pub authorization_webhook_cache_authorized_ttl: GoDuration,
    /// How long a denied answer of the API server is kept.
    #[arg(long, help_heading = "Authorization",
          default_value_t = GoDuration(authz::DEFAULT_UNAUTHORIZED_TTL))]
    pub authorization_webhook_cache_unauthorized_ttl: GoDuration,
}

impl ServingArgs {
    /// Where and how to serve, with the plain address `plain` (`--address`) if given, and
    /// `/debug/pprof` if `profiling`.
    pub fn serving(&self, plain: Option<SocketAddr>, profiling: bool) -> Result<Serving, String> {
        let always_allow_paths = authz::parse_paths(&self.authorization_always_allow_paths)
            .map_err(|e| format!("--authorization-always-allow-paths: {e}"))?;
        let certificate = match (&self.tls_cert_file, &self.tls_private_key_file) {
            (Some(cert), Some(key)) => CertificateSource::Files {
                cert: cert.clone(),
                key: key.clone(),
            },
            _ => CertificateSource::SelfSigned {
                dir: self.cert_dir.clone().filter(|d| !d.as_os_str().is_empty()),
            },
        };
        let secure = (self.secure_port != 0).then(|| SecureServing {
            address: SocketAddr::new(self.bind_address, self.secure_port),
            certificate,
            delegation: Delegation {
                authentication_kubeconfig: self.authentication_kubeconfig.clone(),
                token_cache_ttl: self.authentication_token_webhook_cache_ttl.0,
                authorization_kubeconfig: self.authorization_kubeconfig.clone(),
                always_allow_paths,
                authorized_ttl: self.authorization_webhook_cache_authorized_ttl.0,
                unauthorized_ttl: self.authorization_webhook_cache_unauthorized_ttl.0,
            },
        });
        Ok(Serving {
            secure,
            plain,
            plain_debug: false,
            profiling,
        })
    }
}

/// The configuration file's fields with the flags applied by kube-scheduler's precedence:
/// `file` is the one `--config` names (None without it). Returns the warnings to log (flags
/// ignored, as kube-scheduler ignores them, but said).
pub fn apply(
    file: Option<KubeSchedulerConfiguration>,
    leader: &LeaderElectionArgs,
    deprecated: &DeprecatedArgs,
    kubeconfig: Option<&std::path::Path>,
    matches: &ArgMatches,
) -> (KubeSchedulerConfiguration, Vec<String>) {
    let mut warnings = Vec::new();
    let from_file = file.is_some();
    let mut file = file.unwrap_or_else(|| KubeSchedulerConfiguration {
        api_version: Some(config::types::API_VERSION.to_string()),
        kind: Some(config::types::KIND.to_string()),
        ..Default::default()
    });
    leader.apply(
        matches,
        !from_file,
        file.leader_election
            .get_or_insert_with(LeaderElection::default),
    );
    if from_file {
        for (id, field) in DEPRECATED_FIELDS {
            if given(matches, id) {
                warnings.push(format!(
                    "--{} is ignored because --config is given (as kube-scheduler ignores it): \
                     set {field} in the file",
                    id.replace('_', "-")
                ));
            }
        }
    } else {
        deprecated.apply(&mut file);
    }
    if let Some(path) = kubeconfig {
        let cc = file
            .client_connection
            .get_or_insert_with(ClientConnection::default);
        match cc.kubeconfig.as_deref().filter(|k| !k.is_empty()) {
            Some(own) if own != path.to_string_lossy() => warnings.push(format!(
                "--kubeconfig {} is ignored: the file's clientConnection.kubeconfig ({own}) \
                 wins, as in kube-scheduler",
                path.display()
            )),
            Some(_) => {}
            None => cc.kubeconfig = Some(path.display().to_string()),
        }
    }
    if file.enable_profiling != Some(false)
        && file.enable_contention_profiling == Some(true)
        && (given(matches, "contention_profiling")
            || (from_file && file.enable_contention_profiling.is_some()))
    {
        warnings.push(
            "contention profiling (--contention-profiling, enableContentionProfiling) is not \
             served by gantry: Go's block profile has no counterpart; /debug/pprof/profile \
             serves the CPU profile"
                .to_string(),
        );
    }
    (file, warnings)
}
