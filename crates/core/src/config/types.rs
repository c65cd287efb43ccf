//! The `KubeSchedulerConfiguration` (`kubescheduler.config.k8s.io/v1`) file, as written.
//! Every struct rejects unknown fields, so a typo is an error that names the field. A list or
//! a set given as `null` is empty, as kube-scheduler's decoder takes it.

use serde::{Deserialize, Deserializer};

/// The API version gantry reads.
pub const API_VERSION: &str = "kubescheduler.config.k8s.io/v1";
/// The kind gantry reads.
pub const KIND: &str = "KubeSchedulerConfiguration";

/// The whole configuration file.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubeSchedulerConfiguration {
    /// Must be `kubescheduler.config.k8s.io/v1`.
    pub api_version: Option<String>,
    /// Must be `KubeSchedulerConfiguration`.
    pub kind: Option<String>,
    /// Threads for filtering and scoring (default 16).
    pub parallelism: Option<i64>,
    /// Leader election settings.
    pub leader_election: Option<LeaderElection>,
    /// API client settings.
    pub client_connection: Option<ClientConnection>,
    /// Serve the CPU profile at `/debug/pprof/profile` (default true, as kube-scheduler).
    pub enable_profiling: Option<bool>,
    /// Go's block profile: accepted for compatibility, not served (a warning when true).
    pub enable_contention_profiling: Option<bool>,
    /// Share of nodes to find feasible before scoring; 0 (default) is adaptive.
    pub percentage_of_nodes_to_score: Option<i64>,
    /// First backoff of a pod that failed scheduling (default 1).
    pub pod_initial_backoff_seconds: Option<i64>,
    /// Longest backoff (default 10).
    pub pod_max_backoff_seconds: Option<i64>,
    /// The profiles; one `default-scheduler` profile when absent.
    #[serde(default, deserialize_with = "null_is_default")]
    pub profiles: Vec<ProfileConfig>,
    /// Scheduler extenders: HTTP services asked to filter, score, bind and cut preemptions
    /// for the pods they are interested in.
    #[serde(default, deserialize_with = "null_is_default")]
    pub extenders: Vec<Extender>,
    /// Accepted for compatibility.
    pub delay_cache_until_active: Option<bool>,
}

/// One entry of `extenders`, as kube-scheduler's `Extender`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Extender {
    /// The extender's URL without the verb, such as `https://127.0.0.1:443/scheduler`.
    pub url_prefix: Option<String>,
    /// Path (after `urlPrefix`) of the filter call; empty: the extender does not filter.
    pub filter_verb: Option<String>,
    /// Path of the preempt call; empty: the extender is not asked about preemptions.
    pub preempt_verb: Option<String>,
    /// Path of the prioritize call; empty: the extender does not score.
    pub prioritize_verb: Option<String>,
    /// Multiplier of the extender's scores; must be positive when `prioritizeVerb` is set.
    pub weight: Option<i64>,
    /// Path of the bind call; empty: the extender does not bind.
    pub bind_verb: Option<String>,
    /// Whether the extender is reached over HTTPS (without a CA, its certificate is not
    /// verified, as kube-scheduler does).
    #[serde(rename = "enableHTTPS")]
    pub enable_https: Option<bool>,
    /// TLS settings for an HTTPS extender.
    pub tls_config: Option<ExtenderTlsConfig>,
    /// How long one call may take (a Go duration; 0 or absent: kube-scheduler's 5s).
    pub http_timeout: Option<String>,
    /// Whether the extender keeps its own node cache: it is then sent node names only.
    pub node_cache_capable: Option<bool>,
    /// The extended resources the extender manages: it is asked only about pods whose
    /// containers request or limit one of them (none: about every pod).
    #[serde(default, deserialize_with = "null_is_default")]
    pub managed_resources: Vec<ExtenderManagedResource>,
    /// Whether the extender's failures are skipped instead of failing the attempt.
    pub ignorable: Option<bool>,
}

/// One entry of an extender's `managedResources`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExtenderManagedResource {
    /// The extended resource's name.
    pub name: Option<String>,
    /// Whether NodeResourcesFit leaves the resource to the extender.
    pub ignored_by_scheduler: Option<bool>,
}

/// An extender's `tlsConfig`, as client-go's TLS client settings.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExtenderTlsConfig {
    /// Do not verify the extender's certificate.
    pub insecure: Option<bool>,
    /// The name the certificate is checked against (default: the URL's host).
    pub server_name: Option<String>,
    /// Client certificate file (PEM).
    pub cert_file: Option<String>,
    /// Client key file (PEM).
    pub key_file: Option<String>,
    /// CA certificates file (PEM).
    pub ca_file: Option<String>,
    /// Client certificate (PEM, base64 in the file); takes precedence over `certFile`.
    pub cert_data: Option<k8s_openapi::ByteString>,
    /// Client key (PEM, base64 in the file); takes precedence over `keyFile`.
    pub key_data: Option<k8s_openapi::ByteString>,
    /// CA certificates (PEM, base64 in the file); take precedence over `caFile`.
    pub ca_data: Option<k8s_openapi::ByteString>,
}

/// `leaderElection`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LeaderElection {
    /// Whether to elect a leader (default true).
    pub leader_elect: Option<bool>,
    /// Lease duration (default `15s`).
    pub lease_duration: Option<String>,
    /// Renew deadline (default `10s`).
    pub renew_deadline: Option<String>,
    /// Retry period (default `2s`).
    pub retry_period: Option<String>,
    /// Only `leases` is supported.
    pub resource_lock: Option<String>,
    /// Lease name (default `gantry`, so gantry never contends with kube-scheduler's lease).
    pub resource_name: Option<String>,
    /// Lease namespace (default `kube-system`).
    pub resource_namespace: Option<String>,
}

/// `clientConnection`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClientConnection {
    /// Path of a kubeconfig file.
    pub kubeconfig: Option<String>,
    /// Accepted for compatibility.
    pub accept_content_types: Option<String>,
    /// Encoding of the pod and node lists and watches: `application/vnd.kubernetes.protobuf`
    /// (the default) or `application/json`.
    pub content_type: Option<String>,
    /// Requests per second to the API server.
    pub qps: Option<f64>,
    /// Burst above `qps`.
    pub burst: Option<i64>,
}

/// One entry of `profiles`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProfileConfig {
    /// The `spec.schedulerName` served (default `default-scheduler`).
    pub scheduler_name: Option<String>,
    /// Per-profile override of the global setting.
    pub percentage_of_nodes_to_score: Option<i64>,
    /// Plugin sets per extension point.
    pub plugins: Option<Plugins>,
    /// Arguments per plugin.
    #[serde(default, deserialize_with = "null_is_default")]
    pub plugin_config: Vec<PluginConfig>,
}

/// `plugins`: one set per extension point, and `multiPoint` for all of them.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Plugins {
    /// PreEnqueue.
    #[serde(default, deserialize_with = "null_is_default")]
    pub pre_enqueue: PluginSet,
    /// QueueSort.
    #[serde(default, deserialize_with = "null_is_default")]
    pub queue_sort: PluginSet,
    /// PreFilter.
    #[serde(default, deserialize_with = "null_is_default")]
    pub pre_filter: PluginSet,
    /// Filter.
    #[serde(default, deserialize_with = "null_is_default")]
    pub filter: PluginSet,
    /// PostFilter.
    #[serde(default, deserialize_with = "null_is_default")]
    pub post_filter: PluginSet,
    /// PreScore.
    #[serde(default, deserialize_with = "null_is_default")]
    pub pre_score: PluginSet,
    /// Score.
    #[serde(default, deserialize_with = "null_is_default")]
    pub score: PluginSet,
    /// Reserve.
    #[serde(default, deserialize_with = "null_is_default")]
    pub reserve: PluginSet,
    /// Permit.
    #[serde(default, deserialize_with = "null_is_default")]
    pub permit: PluginSet,
    /// PreBind (no gantry plugin implements it).
    #[serde(default, deserialize_with = "null_is_default")]
    pub pre_bind: PluginSet,
    /// Bind.
    #[serde(default, deserialize_with = "null_is_default")]
    pub bind: PluginSet,
    /// PostBind (no gantry plugin implements it).
    #[serde(default, deserialize_with = "null_is_default")]
    pub post_bind: PluginSet,
    /// PlacementGenerate: placements proposed for a group of pods (kube-scheduler 1.37's
    /// topology-aware workload scheduling; no gantry plugin implements it).
    #[serde(default, deserialize_with = "null_is_default")]
    pub placement_generate: PluginSet,
    /// PlacementScore: the proposed placements scored (no gantry plugin implements it).
    #[serde(default, deserialize_with = "null_is_default")]
    pub placement_score: PluginSet,
    /// PodGroupPostFilter: preemption for a group of pods of the Workload API (no gantry
    /// plugin implements it).
    #[serde(default, deserialize_with = "null_is_default")]
    pub pod_group_post_filter: PluginSet,
    /// Every extension point each plugin implements.
    #[serde(default, deserialize_with = "null_is_default")]
    pub multi_point: PluginSet,
}

/// Enabled and disabled plugins of one extension point.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PluginSet {
    /// Plugins to enable, in order.
    #[serde(default, deserialize_with = "null_is_default")]
    pub enabled: Vec<PluginRef>,
    /// Plugins to disable; `*` disables all defaults.
    #[serde(default, deserialize_with = "null_is_default")]
    pub disabled: Vec<PluginRef>,
}

/// A plugin named in a set.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PluginRef {
    /// The plugin's name.
    pub name: String,
    /// Score weight (Score and multiPoint only).
    pub weight: Option<i64>,
}

/// One entry of `pluginConfig`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PluginConfig {
    /// The plugin's name.
    pub name: String,
    /// Its arguments.
    pub args: Option<serde_json::Value>,
}

/// A field given as `null` takes its default, as an absent one does: Go's decoder, which
/// reads kube-scheduler's files, leaves a list or struct empty for `null`.
fn null_is_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}
