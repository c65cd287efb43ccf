//! Configuration: a `KubeSchedulerConfiguration` (v1) file, validated and resolved into
//! ready-to-run profiles. No file means kube-scheduler's defaults.

mod extenders;
pub mod names;
mod resolve;
pub mod types;
pub mod yaml;

use std::path::Path;
use std::time::Duration;

use crate::extender::Extenders;
use crate::framework::{Profile, Registry};
use crate::model::echo::{bound_message, echo};

pub use crate::model::duration::{GoDuration, parse_go_duration};
pub use resolve::{MAX_WEIGHT, UNSUPPORTED_KUBE_PLUGINS};
pub use types::KubeSchedulerConfiguration;

/// The scheduler name of the default profile.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

/// A configuration that cannot be used; names the file and field where it can.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {error}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// The file is larger than any configuration file can be.
    #[error("cannot read {path}: larger than {limit} bytes")]
    TooLarge {
        /// The file.
        path: String,
        /// [`MAX_FILE_BYTES`].
        limit: u64,
    },
    /// The text is nested deeper than [`yaml::MAX_DEPTH`] levels: refused before it is
    /// parsed, whose cost grows with the square of the depth.
    #[error(transparent)]
    TooDeep(#[from] yaml::TooDeep),
    /// A field is malformed or invalid.
    #[error("{field}: {reason}")]
    Field {
        /// Path of the field, such as `profiles[0].plugins.score.enabled[1].weight`.
        field: String,
        /// What is wrong.
        reason: String,
    },
}

impl ConfigError {
    /// An error at `field`. Both parts are cut to a bounded size (see
    /// [`bound_message`]): they can repeat values of the file, which can be of any length.
    pub fn field(field: impl Into<String>, reason: impl Into<String>) -> Self {
        ConfigError::Field {
            field: bound_message(&field.into()),
            reason: bound_message(&reason.into()),
        }
    }
}

/// The largest configuration file read: sixteen times what a ConfigMap (where configuration
/// files usually come from) can hold; anything larger is a mistake, and is refused before it
/// is read into memory.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// The text of a configuration file, at most [`MAX_FILE_BYTES`] long.
pub fn read_file(path: &Path) -> Result<String, ConfigError> {
    use std::io::Read;
    let read_error = |error| ConfigError::Read {
        path: path.display().to_string(),
        error,
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(read_error)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(ConfigError::TooLarge {
            path: path.display().to_string(),
            limit: MAX_FILE_BYTES,
        });
    }
    Ok(text)
}

/// Configuration text (YAML or JSON) decoded into `T`; an error names the offending field by
/// its path. A byte-order mark at the start is accepted; text nested deeper than
/// [`yaml::MAX_DEPTH`] levels is refused before it is parsed.
pub fn decode<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, ConfigError> {
    let text = yaml::strip_bom(text);
    yaml::check_depth(text, yaml::MAX_DEPTH)?;
    let de = serde_yaml::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string();
        // serde_yaml already names the enclosing field of nested errors.
        match message.split_once(": ") {
            Some((prefix, rest)) if !prefix.contains(' ') => ConfigError::field(prefix, rest),
            // An unknown field named "" at the top has the empty path.
            _ if path == "." || path.is_empty() => ConfigError::field("config", message),
            _ => ConfigError::field(path, message),
        }
    })
}

/// Decodes configuration text (YAML or JSON) into the file's fields, checking its
/// `apiVersion` and `kind` but nothing else: for what is applied on top of the file (the
/// command line's flags) before [`Config::from_file_config`] validates the whole.
pub fn read_configuration(text: &str) -> Result<KubeSchedulerConfiguration, ConfigError> {
    let file: KubeSchedulerConfiguration = decode(text)?;
    if file.api_version.as_deref() != Some(types::API_VERSION) {
        return Err(ConfigError::field(
            "apiVersion",
            format!(
                "must be {:?}, got {}",
                types::API_VERSION,
                echo(file.api_version.as_deref().unwrap_or_default())
            ),
        ));
    }
    if file.kind.as_deref() != Some(types::KIND) {
        return Err(ConfigError::field(
            "kind",
            format!(
                "must be {:?}, got {}",
                types::KIND,
                echo(file.kind.as_deref().unwrap_or_default())
            ),
        ));
    }
    Ok(file)
}

/// `leaderElection.leaderElect` when not given.
pub const DEFAULT_LEADER_ELECT: bool = true;
/// `percentageOfNodesToScore` when the file does not set it: every node, where
/// kube-scheduler's default (0) is its adaptive share. Examining every node finds the best
/// node rather than the best of a sample, and the class index makes it about as cheap as
/// the sample (BENCHMARKS.md, issue 24); an explicit 0 keeps kube-scheduler's rule.
pub const DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE: u32 = 100;
/// `leaderElection.leaseDuration` when not given.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// `leaderElection.renewDeadline` when not given.
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// `leaderElection.retryPeriod` when not given.
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);
/// `leaderElection.resourceLock` when not given: the only lock gantry takes.
pub const DEFAULT_RESOURCE_LOCK: &str = "leases";
/// `leaderElection.resourceName` when not given: gantry's own lease, so that gantry never
/// contends with kube-scheduler's (`kube-scheduler`) when both run.
pub const DEFAULT_LEASE_NAME: &str = "gantry";
/// `leaderElection.resourceNamespace` when not given.
pub const DEFAULT_LEASE_NAMESPACE: &str = "kube-system";
/// `clientConnection.contentType` when not given (kube-scheduler's).
pub const DEFAULT_CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// `enableProfiling` and `enableContentionProfiling` when not given (kube-scheduler's).
pub const DEFAULT_PROFILING: bool = true;

/// Leader election settings, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElection {
    /// Whether to elect a leader.
    pub enabled: bool,
    /// How long a lease is valid.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before giving up leadership.
    pub renew_deadline: Duration,
    /// How often to retry acquiring or renewing.
    pub retry_period: Duration,
    /// Lease name.
    pub resource_name: String,
    /// Lease namespace.
    pub resource_namespace: String,
}

/// API client settings, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientConnection {
    /// kubeconfig path, if given in the file.
    pub kubeconfig: Option<String>,
    /// Requests per second (0 disables client-side throttling).
    pub qps: f64,
    /// Burst.
    pub burst: u32,
    /// How pods and nodes are listed and watched.
    pub content_type: ContentType,
}

/// `clientConnection.contentType`: the encoding of the pod and node lists and watches (by
/// far the largest part of what gantry reads). Other kinds, and what gantry writes
/// (bindings, events), are small and stay JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ContentType {
    /// `application/vnd.kubernetes.protobuf`, kube-scheduler's default: cheaper for the API
    /// server to encode and for gantry to decode. JSON is accepted in return, for a server
    /// or proxy without protobuf.
    #[default]
    Protobuf,
    /// `application/json`, for API servers or proxies that do not speak protobuf.
    Json,
}

/// Default client QPS: high enough never to be the bottleneck of a fast scheduler, unlike
/// kube-scheduler's 50.
pub const DEFAULT_QPS: f64 = 5000.0;
/// Default client burst.
pub const DEFAULT_BURST: u32 = 10000;

/// A validated configuration with its profiles built.
#[derive(Debug, Clone)]
pub struct Config {
    /// The profiles, one per scheduler name.
    pub profiles: Vec<Profile>,
    /// Threads for filtering and scoring.
    pub parallelism: usize,
    /// Global share of nodes to score (0 = kube-scheduler's adaptive share;
    /// [`DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE`] when the file does not say).
    pub percentage_of_nodes_to_score: u32,
    /// First backoff after a failed attempt.
    pub pod_initial_backoff: Duration,
    /// Longest backoff.
    pub pod_max_backoff: Duration,
    /// Leader election.
    pub leader_election: LeaderElection,
    /// API client.
    pub client_connection: ClientConnection,
    /// Scheduler extenders, in the order they are called.
    pub extenders: Extenders,
}

impl Config {
    /// kube-scheduler's defaults: one `default-scheduler` profile with the default plugins.
    pub fn default_with(registry: &Registry) -> Result<Self, ConfigError> {
        Self::from_file_config(&KubeSchedulerConfiguration::default(), registry)
    }

    /// Reads and validates a configuration file.
    pub fn load(path: &Path, registry: &Registry) -> Result<Self, ConfigError> {
        Self::parse(&read_file(path)?, registry)
    }

    /// Parses and validates configuration text (YAML or JSON).
    pub fn parse(text: &str, registry: &Registry) -> Result<Self, ConfigError> {
        Self::from_file_config(&read_configuration(text)?, registry)
    }

    /// Validates a decoded file and builds its profiles.
    pub fn from_file_config(
        file: &KubeSchedulerConfiguration,
        registry: &Registry,
    ) -> Result<Self, ConfigError> {
        let parallelism = file.parallelism.unwrap_or(16);
        if !(1..=1024).contains(&parallelism) {
            return Err(ConfigError::field(
                "parallelism",
                format!("must be between 1 and 1024, got {parallelism}"),
            ));
        }
        let percentage = |v: Option<i64>, field: &str| -> Result<Option<u32>, ConfigError> {
            match v {
                None => Ok(None),
                Some(p) if (0..=100).contains(&p) => Ok(Some(p as u32)),
                Some(p) => Err(ConfigError::field(
                    field,
                    format!("not in valid range [0-100], got {p}"),
                )),
            }
        };
        let global_percentage = percentage(
            file.percentage_of_nodes_to_score,
            "percentageOfNodesToScore",
        )?
        .unwrap_or(DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE);
        let initial = file.pod_initial_backoff_seconds.unwrap_or(1);
        if initial <= 0 {
            return Err(ConfigError::field(
                "podInitialBackoffSeconds",
                format!("must be greater than 0, got {initial}"),
            ));
        }
        let max = file.pod_max_backoff_seconds.unwrap_or(10);
        if max < initial {
            return Err(ConfigError::field(
                "podMaxBackoffSeconds",
                format!(
                    "must be greater than or equal to podInitialBackoffSeconds ({initial}), got {max}"
                ),
            ));
        }
        let extenders = extenders::resolve(&file.extenders)?;
        let leader_election = leader_election(file.leader_election.clone().unwrap_or_default())?;
        let client_connection =
            client_connection(file.client_connection.clone().unwrap_or_default())?;

        let default_profiles = [types::ProfileConfig::default()];
        let mut profile_configs: &[types::ProfileConfig] = if file.profiles.is_empty() {
            &default_profiles
        } else {
            &file.profiles
        };
        let ignored = extenders.ignored_resources();
        let with_ignored;
        if !ignored.is_empty() {
            with_ignored = extenders::with_ignored_resources(profile_configs, &ignored);
            profile_configs = &with_ignored;
        }
        let with_hami = extenders::leave_hami_resources_to_gpu_share(profile_configs);
        profile_configs = &with_hami;
        let mut profiles: Vec<Profile> = Vec::new();
        for (i, pc) in profile_configs.iter().enumerate() {
            let base = format!("profiles[{i}]");
            let name = pc
                .scheduler_name
                .as_deref()
                .unwrap_or(DEFAULT_SCHEDULER_NAME);
            if name.is_empty() {
                return Err(ConfigError::field(
                    format!("{base}.schedulerName"),
                    "must not be empty",
                ));
            }
            // A pod's spec.schedulerName must be a DNS-1123 subdomain: a profile named
            // otherwise could serve no pod.
            names::dns_subdomain(name)
                .map_err(|e| ConfigError::field(format!("{base}.schedulerName"), e))?;
            if profiles.iter().any(|p| p.scheduler_name == name) {
                return Err(ConfigError::field(
                    format!("{base}.schedulerName"),
                    format!("duplicate profile {}", echo(name)),
                ));
            }
            let pct = percentage(
                pc.percentage_of_nodes_to_score,
                &format!("{base}.percentageOfNodesToScore"),
            )?;
            let profile = resolve::build_profile(pc, &base, registry, pct)?;
            if let Some(first) = profiles.first()
                && first.queue_sort.name() != profile.queue_sort.name()
            {
                return Err(ConfigError::field(
                    format!("{base}.plugins.queueSort"),
                    format!(
                        "queueSort must be the same for all profiles: {} has {}, {name} has {}",
                        first.scheduler_name,
                        first.queue_sort.name(),
                        profile.queue_sort.name()
                    ),
                ));
            }
            profiles.push(profile);
        }
        Ok(Config {
            profiles,
            parallelism: parallelism as usize,
            percentage_of_nodes_to_score: global_percentage,
            pod_initial_backoff: Duration::from_secs(initial as u64),
            pod_max_backoff: Duration::from_secs(max as u64),
            leader_election,
            client_connection,
            extenders,
        })
    }

    /// The profile serving `scheduler_name`.
    pub fn profile(&self, scheduler_name: &str) -> Option<&Profile> {
        self.profiles
            .iter()
            .find(|p| p.scheduler_name == scheduler_name)
    }
}

/// client-go's `JitterFactor`: a retry may come up to this factor of `retryPeriod` late, so
/// `renewDeadline` must leave room for one.
const LEADER_JITTER_FACTOR: f64 = 1.2;

/// The longest lease: a Lease records its duration as an int32 number of seconds.
const MAX_LEASE_SECONDS: u64 = i32::MAX as u64;

fn leader_election(le: types::LeaderElection) -> Result<LeaderElection, ConfigError> {
    let dur =
        |v: Option<String>, default: Duration, field: &str| -> Result<Duration, ConfigError> {
            match v {
                None => Ok(default),
                Some(s) => parse_go_duration(&s)
                    .map_err(|e| ConfigError::field(format!("leaderElection.{field}"), e)),
            }
        };
    let lease_duration = dur(le.lease_duration, DEFAULT_LEASE_DURATION, "leaseDuration")?;
    let renew_deadline = dur(le.renew_deadline, DEFAULT_RENEW_DEADLINE, "renewDeadline")?;
    let retry_period = dur(le.retry_period, DEFAULT_RETRY_PERIOD, "retryPeriod")?;
    let positive = |d: Duration, field: &str| {
        if d.is_zero() {
            Err(ConfigError::field(
                format!("leaderElection.{field}"),
                "must be greater than zero",
            ))
        } else {
            Ok(())
        }
    };
    positive(lease_duration, "leaseDuration")?;
    positive(renew_deadline, "renewDeadline")?;
    positive(retry_period, "retryPeriod")?;
    if lease_duration < Duration::from_secs(1) || lease_duration.as_secs() > MAX_LEASE_SECONDS {
        return Err(ConfigError::field(
            "leaderElection.leaseDuration",
            format!(
                "must be between 1s and {MAX_LEASE_SECONDS}s: a Lease holds it as a whole \
                 number of seconds (int32), got {lease_duration:?}"
            ),
        ));
    }
    if lease_duration <= renew_deadline {
        return Err(ConfigError::field(
            "leaderElection.leaseDuration",
            "must be greater than renewDeadline",
        ));
    }
    // client-go's rule: a renewal retried up to 20% late must still fall within the
    // deadline. The product cannot overflow: a parsed duration is at most Go's longest.
    if renew_deadline <= retry_period.mul_f64(LEADER_JITTER_FACTOR) {
        return Err(ConfigError::field(
            "leaderElection.renewDeadline",
            format!("must be greater than retryPeriod * {LEADER_JITTER_FACTOR}"),
        ));
    }
    match le.resource_lock.as_deref() {
        None => {}
        Some(lock) if lock == DEFAULT_RESOURCE_LOCK => {}
        Some(other) => {
            return Err(ConfigError::field(
                "leaderElection.resourceLock",
                format!("only \"leases\" is supported, got {}", echo(other)),
            ));
        }
    }
    let resource_name = le
        .resource_name
        .unwrap_or_else(|| DEFAULT_LEASE_NAME.to_string());
    names::dns_subdomain(&resource_name)
        .map_err(|e| ConfigError::field("leaderElection.resourceName", e))?;
    let resource_namespace = le
        .resource_namespace
        .unwrap_or_else(|| DEFAULT_LEASE_NAMESPACE.to_string());
    names::dns_label(&resource_namespace)
        .map_err(|e| ConfigError::field("leaderElection.resourceNamespace", e))?;
    Ok(LeaderElection {
        enabled: le.leader_elect.unwrap_or(DEFAULT_LEADER_ELECT),
        lease_duration,
        renew_deadline,
        retry_period,
        resource_name,
        resource_namespace,
    })
}

/// The smallest `clientConnection.qps` other than 0: one request per 100 seconds. Slower
/// than that not even a watch could be reopened in time; such a value is a mistake.
pub const MIN_QPS: f64 = 0.01;

/// The largest `clientConnection.burst`: kube-scheduler's field is an int32.
pub const MAX_BURST: i64 = i32::MAX as i64;

fn client_connection(cc: types::ClientConnection) -> Result<ClientConnection, ConfigError> {
    let qps = cc.qps.unwrap_or(DEFAULT_QPS);
    if !(qps == 0.0 || (MIN_QPS..=f64::from(f32::MAX)).contains(&qps)) {
        return Err(ConfigError::field(
            "clientConnection.qps",
            format!(
                "must be 0 (no throttling) or between {MIN_QPS} and {:e} requests per second, \
                 got {qps}",
                f32::MAX
            ),
        ));
    }
    let burst = cc.burst.unwrap_or(i64::from(DEFAULT_BURST));
    if !(0..=MAX_BURST).contains(&burst) {
        return Err(ConfigError::field(
            "clientConnection.burst",
            format!("must be between 0 and {MAX_BURST}, got {burst}"),
        ));
    }
    if burst == 0 && qps > 0.0 {
        return Err(ConfigError::field(
            "clientConnection.burst",
            "must be at least 1 when qps is not 0: a burst of 0 would let no request through",
        ));
    }
    let content_type = match cc.content_type.as_deref() {
        None | Some("") => ContentType::Protobuf,
        Some(t) if t == DEFAULT_CONTENT_TYPE => ContentType::Protobuf,
        Some("application/json") => ContentType::Json,
        Some(other) => {
            return Err(ConfigError::field(
                "clientConnection.contentType",
                format!(
                    "must be application/vnd.kubernetes.protobuf or application/json, got {}",
                    echo(other)
                ),
            ));
        }
    };
    Ok(ClientConnection {
        kubeconfig: cc.kubeconfig.filter(|k| !k.is_empty()),
        qps,
        burst: burst as u32,
        content_type,
    })
}

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;
