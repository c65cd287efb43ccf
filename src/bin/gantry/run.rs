//! `gantry run`: schedule pods of a real cluster.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::ArgMatches;
use gantry_adapter::node_load::{self, LoadSource, NodeLoadSettings, PrometheusSource};
use gantry_adapter::questions::QuestionSettings;
use gantry_adapter::serving::Serving;
use gantry_adapter::{self as adapter, DecisionSettings, Options};
use gantry_core::config::{self, Config, GoDuration};
use gantry_core::framework::resource_claims;
use gantry_core::plugins::{self, dynamic_resources};
use gantry_sim::whatif::{self, Limits};

use crate::kube_flags::{self, DeprecatedArgs, LeaderElectionArgs, ServingArgs};

/// Arguments of `gantry run`: kube-scheduler's flags, with their meaning and precedence
/// against the configuration file, and gantry's own.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A KubeSchedulerConfiguration (v1) file; kube-scheduler's defaults without it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Write the effective configuration (the file and the flags, every default filled in)
    /// to this file as YAML, and exit; `-` writes it to standard output.
    #[arg(long)]
    write_config_to: Option<PathBuf>,
    /// A kubeconfig file. With --config, used only when the file's
    /// clientConnection.kubeconfig is empty (kube-scheduler ignores it then); otherwise
    /// `KUBECONFIG`, `~/.kube/config` or the in-cluster service account.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The API server's address, overriding the kubeconfig's server.
    #[arg(long)]
    master: Option<String>,
    /// Also serve /metrics, /healthz, /readyz, /livez and /debug/decisions over plain HTTP
    /// here, open to anyone (e.g. 127.0.0.1:10251); off by default, as kube-scheduler has
    /// no plain port any more.
    #[arg(long)]
    address: Option<SocketAddr>,
    /// Also serve /debug/* (decision records, what-if questions, snapshots, profiles) on
    /// --address, to anyone who reaches it: these cost far more than a health check.
    #[arg(long, requires = "address")]
    address_serves_debug: bool,
    /// Kubernetes feature gates, `Name=true|false,...` (or `kube:Name=...`): an unknown or
    /// locked gate is an error, and so is a scheduler's gate set away from its default.
    #[arg(long)]
    feature_gates: Option<String>,
    /// The log filter.
    #[command(flatten)]
    log: crate::LogArgs,
    /// Scheduling attempts whose decision records are kept in memory (all pods together;
    /// the oldest go first), for /debug/decisions and `gantry explain --server`.
    #[arg(long, env = "GANTRY_DECISION_RECORDS", default_value_t = crate::explain::DEFAULT_RECORDS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    decision_records: usize,
    /// HTTPS, authentication and authorization.
    #[command(flatten)]
    serving: ServingArgs,
    /// Leader election.
    #[command(flatten)]
    leader: LeaderElectionArgs,
    /// kube-scheduler's deprecated flags.
    #[command(flatten)]
    deprecated: DeprecatedArgs,
    /// Where node load comes from.
    #[command(flatten)]
    load: LoadArgs,
    /// The decision log file.
    #[command(flatten)]
    decision_log: crate::explain::DecisionLogArgs,
    /// What what-if questions may cost.
    #[command(flatten)]
    questions: QuestionArgs,
}

/// The bounds of the what-if questions `gantry run` answers (`POST /debug/whatif`).
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "What-if questions")]
struct QuestionArgs {
    /// The most pods one question may place (its workloads' replicas together), and the
    /// most replicas `--max` counts per workload; beyond, the question is refused (400).
    #[arg(long, default_value_t = Limits::default().pods,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    whatif_max_pods: usize,
    /// The most workloads one question may name.
    #[arg(long, default_value_t = Limits::default().workloads,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    whatif_max_workloads: usize,
    /// The most nodes `addNodes` may add.
    #[arg(long, default_value_t = Limits::default().added_nodes,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=whatif::MAX_ADDED_NODES as u64))]
    whatif_max_added_nodes: usize,
    /// The memory one question may hold, in MiB; a question holding more is stopped (503).
    #[arg(long, default_value_t = Limits::default().memory >> 20,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 20))]
    whatif_memory_mib: usize,
    /// Questions answered at once; more are refused (429).
    #[arg(long, default_value_t = QuestionSettings::default().concurrent,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=64))]
    whatif_concurrent: usize,
    /// How long one question may run before it is stopped (503).
    #[arg(long, default_value_t = GoDuration(QuestionSettings::default().timeout))]
    whatif_timeout: GoDuration,
}

impl QuestionArgs {
    fn settings(&self) -> anyhow::Result<QuestionSettings> {
        if self.whatif_timeout.0.is_zero() {
            anyhow::bail!("--whatif-timeout: must be more than 0");
        }
        Ok(QuestionSettings {
            limits: Limits {
                pods: self.whatif_max_pods,
                workloads: self.whatif_max_workloads,
                added_nodes: self.whatif_max_added_nodes,
                memory: self.whatif_memory_mib << 20,
            },
            concurrent: self.whatif_concurrent,
            timeout: self.whatif_timeout.0,
        })
    }
}

/// Where LoadAware and Overcommit get node load from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Source {
    /// No node load.
    None,
    /// Prometheus' HTTP API (`--prometheus-url`).
    Prometheus,
    /// The node annotations gantry.io/cpu-utilization, gantry.io/memory-utilization and
    /// gantry.io/metrics-timestamp, written by an external agent.
    Annotations,
}

/// Node load settings of `gantry run`.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Node load (for the LoadAware and Overcommit plugins)")]
struct LoadArgs {
    /// Where node load comes from.
    #[arg(long, value_enum, default_value_t = Source::None)]
    load_source: Source,
    /// Base URL of the Prometheus server (plain HTTP), e.g. http://prometheus:9090.
    #[arg(long, required_if_eq("load_source", "prometheus"))]
    prometheus_url: Option<String>,
    /// The label of the query results that holds the node's name (a `:port` suffix is
    /// dropped).
    #[arg(long, default_value = node_load::DEFAULT_NODE_LABEL)]
    prometheus_node_label: String,
    /// PromQL giving each node's cpu utilisation as a fraction; by default one minus the idle
    /// rate of node-exporter's node_cpu_seconds_total over 1m, averaged by the node label.
    #[arg(long)]
    prometheus_cpu_query: Option<String>,
    /// PromQL giving each node's memory utilisation as a fraction; by default one minus
    /// node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes, by the node label.
    #[arg(long)]
    prometheus_memory_query: Option<String>,
    /// Time between Prometheus queries.
    #[arg(long, default_value_t = GoDuration(node_load::DEFAULT_INTERVAL))]
    load_interval: GoDuration,
    /// Age beyond which a node's load sample is stale (LoadAware's staleMetrics decides what
    /// that means; Overcommit treats the node as loaded).
    #[arg(long, default_value_t = GoDuration(node_load::DEFAULT_MAX_AGE))]
    load_max_age: GoDuration,
    /// How long a pod takes to show in a node's measured load: pods placed less than this
    /// before a measurement still count with their estimate.
    #[arg(long, default_value_t = GoDuration(node_load::DEFAULT_LAG))]
    load_lag: GoDuration,
}

impl LoadArgs {
    fn settings(&self) -> anyhow::Result<NodeLoadSettings> {
        let label = &self.prometheus_node_label;
        let source = match self.load_source {
            Source::None => LoadSource::None,
            Source::Annotations => LoadSource::Annotations,
            Source::Prometheus => LoadSource::Prometheus(PrometheusSource {
                url: self
                    .prometheus_url
                    .clone()
                    .context("--prometheus-url is required with --load-source prometheus")?,
                cpu_query: self
                    .prometheus_cpu_query
                    .clone()
                    .unwrap_or_else(|| node_load::default_cpu_query(label)),
                memory_query: self
                    .prometheus_memory_query
                    .clone()
                    .unwrap_or_else(|| node_load::default_memory_query(label)),
                node_label: label.clone(),
                interval: self.load_interval.0,
            }),
        };
        let settings = NodeLoadSettings {
            source,
            max_age: self.load_max_age.0,
            lag: self.load_lag.0,
        };
        settings.validate()?;
        Ok(settings)
    }
}

/// The exit status of a process ended by a panic: the one Rust gives a process whose main
/// thread panics.
const PANIC_EXIT_STATUS: i32 = 101;

/// Makes a panic on any thread end the whole process, with [`PANIC_EXIT_STATUS`], once the
/// default hook has printed it. A long-running command is made of many threads and tasks;
/// by default a panicking one dies alone (a tokio task's panic is even caught), leaving a
/// process that looks alive to its liveness probe but no longer schedules, binds or renews
/// its lease. Exiting lets the restart policy start a whole one.
pub(crate) fn exit_on_panic() {
    let print = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        print(info);
        std::process::exit(PANIC_EXIT_STATUS);
    }));
}

/// The effective configuration of `args`: the file (if any) and the flags, by
/// kube-scheduler's precedence, validated; with the warnings to log.
fn effective_configuration(
    args: &Args,
    matches: &ArgMatches,
) -> anyhow::Result<(config::KubeSchedulerConfiguration, Config, Vec<String>)> {
    let file = match &args.config {
        Some(path) => Some(
            config::read_file(path)
                .and_then(|text| config::read_configuration(&text))
                .with_context(|| format!("--config {}", path.display()))?,
        ),
        None => None,
    };
    let from_file = file.is_some();
    let (file, warnings) = kube_flags::apply(
        file,
        &args.leader,
        &args.deprecated,
        args.kubeconfig.as_deref(),
        matches,
    );
    let registry = plugins::registry();
    let resolved = Config::from_file_config(&file, &registry).map_err(|e| {
        // A field that came from a flag is named by the flag.
        let e = anyhow::Error::new(e);
        match (&args.config, from_file) {
            (Some(path), true) => e.context(format!("--config {}", path.display())),
            _ => e.context("the command line's configuration"),
        }
    })?;
    if let Some(gates) = &args.feature_gates {
        crate::feature_gates::parse(gates).map_err(|e| anyhow::anyhow!("--feature-gates: {e}"))?;
    }
    Ok((file, resolved, warnings))
}

/// A warning per profile that enables a plugin gantry accepts by name but does not do the work
/// of yet: DynamicResources, which leaves pods with resource claims pending.
fn plugins_not_doing_their_work(config: &Config) -> Vec<String> {
    config
        .profiles
        .iter()
        .filter(|p| resource_claims::refused_by(p))
        .map(|p| {
            format!(
                "profile {}: {}: {}",
                p.scheduler_name,
                dynamic_resources::NAME,
                dynamic_resources::START_WARNING
            )
        })
        .collect()
}

/// Runs the scheduler until SIGTERM or SIGINT; `matches` tells which flags were given.
pub fn run(args: Args, matches: &ArgMatches) -> anyhow::Result<()> {
    exit_on_panic();
    limit_malloc_arenas();
    args.log.init()?;
    let (file, config, warnings) = effective_configuration(&args, matches)?;
    if let Some(target) = &args.write_config_to {
        return crate::write_config::write(target, &file, &config);
    }
    for warning in warnings
        .iter()
        .chain(&plugins_not_doing_their_work(&config))
    {
        tracing::warn!("{warning}");
    }
    let node_load = args.load.settings()?;
    let serving = args
        .serving
        .serving(
            args.address,
            file.enable_profiling.unwrap_or(config::DEFAULT_PROFILING),
        )
        .map_err(anyhow::Error::msg)?;
    let serving = Serving {
        plain_debug: args.address_serves_debug,
        ..serving
    };
    let question_settings = args.questions.settings()?;
    // `parallelism` counts kube-scheduler's goroutines, which Go multiplexes onto the cores;
    // threads beyond the cores would only add switching. One core is left to the I/O
    // threads and to what shares the machine (a control-plane node's API server and etcd):
    // on two cores, filtering stays on the scheduling thread, with no pool.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = config.parallelism.min(cores.saturating_sub(1));
    let pool = if threads > 1 {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("filter-{i}"))
            .build()
            .context("cannot start the scheduling threads")?;
        Some(Arc::new(pool))
    } else {
        None
    };
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if std::env::var_os(TOKIO_WORKER_THREADS).is_none() {
        runtime.worker_threads(io_threads(cores));
    }
    let runtime = runtime
        .enable_all()
        .thread_name("gantry-io")
        .build()
        .context("cannot start the async runtime")?;
    let options = Options {
        config,
        // Already in the configuration (clientConnection.kubeconfig), by precedence.
        kubeconfig: None,
        master: args.master.clone(),
        serving,
        pool,
        node_load,
        decisions: DecisionSettings {
            capacity: args.decision_records,
            file: args.decision_log.rotation(),
        },
        questions: Some(Arc::new(move || {
            Config::from_file_config(&file, &plugins::registry()).map_err(|e| e.to_string())
        })),
        question_settings,
    };
    let ran = runtime.block_on(adapter::run(options));
    // Blocking work still under way (a what-if question between two of its cycles) has
    // been told to stop: it is not waited for past this.
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
    ran?;
    Ok(())
}

/// How long, once the scheduler has stopped, blocking work still under way is waited for.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The variable with which tokio's users choose its number of worker threads; honoured here
/// too.
const TOKIO_WORKER_THREADS: &str = "TOKIO_WORKER_THREADS";

/// Threads for the API traffic (watches, bindings, events, the HTTP endpoints): one per four
/// cores, one to two. At 2,000 bindings a second with their watch events one thread is busy
/// a quarter of the time; more threads mostly hand work back and forth, each hand-over a
/// wake-up that costs CPU on both sides. Measured against a local API server on two cores
/// (5,000 nodes, 10,000 pods): 1.5 CPU-seconds on the I/O thread with one, 2.0 with two
/// (tokio's default, one per core), and a fifth less of gantry's CPU per pod.
fn io_threads(cores: usize) -> usize {
    (cores / 4).clamp(1, 2)
}

/// Two malloc arenas at most, unless `MALLOC_ARENA_MAX` says otherwise. glibc gives each
/// thread that meets contention an arena of its own (up to eight per core), and memory freed
/// by another thread goes back to the arena it came from; pods decoded on the I/O threads
/// live in the scheduling thread's cache, and with many arenas the peak resident memory of
/// the same run varied by half (90 to 145 MiB at 5,000 nodes); with two it stays at the low
/// end, at no measurable cost in throughput.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn limit_malloc_arenas() {
    /// glibc's `M_ARENA_MAX` parameter of `mallopt`.
    const M_ARENA_MAX: std::ffi::c_int = -8;
    unsafe extern "C" {
        fn mallopt(param: std::ffi::c_int, value: std::ffi::c_int) -> std::ffi::c_int;
    }
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets a tuning parameter of glibc's allocator, which is the
        // allocator of this target; it is called before any other thread starts.
        unsafe {
            mallopt(M_ARENA_MAX, 2);
        }
    }
}

/// Other allocators need no limit.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn limit_malloc_arenas() {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{assert_shown_defaults, parse};
    use clap::ValueEnum;
    use gantry_adapter::serving;
    use gantry_core::decision::file;

    #[test]
    fn help_shows_each_default_from_its_definition() {
        let none = Source::None.to_possible_value().expect("a visible value");
        let load = [
            GoDuration(node_load::DEFAULT_INTERVAL),
            GoDuration(node_load::DEFAULT_MAX_AGE),
            GoDuration(node_load::DEFAULT_LAG),
        ];
        let d = |d: std::time::Duration| GoDuration(d).to_string();
        let (limits, questions) = (Limits::default(), QuestionSettings::default());
        assert_shown_defaults::<Args>(&[
            ("log", crate::DEFAULT_LOG.to_string()),
            (
                "decision_records",
                crate::explain::DEFAULT_RECORDS.to_string(),
            ),
            ("bind_address", serving::DEFAULT_BIND_ADDRESS.to_string()),
            ("secure_port", serving::DEFAULT_SECURE_PORT.to_string()),
            ("authentication_skip_lookup", "false".to_string()),
            (
                "authentication_token_webhook_cache_ttl",
                d(serving::authn::DEFAULT_TOKEN_CACHE_TTL),
            ),
            (
                "authorization_always_allow_paths",
                serving::authz::DEFAULT_ALWAYS_ALLOW_PATHS.to_string(),
            ),
            (
                "authorization_webhook_cache_authorized_ttl",
                d(serving::authz::DEFAULT_AUTHORIZED_TTL),
            ),
            (
                "authorization_webhook_cache_unauthorized_ttl",
                d(serving::authz::DEFAULT_UNAUTHORIZED_TTL),
            ),
            ("leader_elect", config::DEFAULT_LEADER_ELECT.to_string()),
            (
                "leader_elect_lease_duration",
                d(config::DEFAULT_LEASE_DURATION),
            ),
            (
                "leader_elect_renew_deadline",
                d(config::DEFAULT_RENEW_DEADLINE),
            ),
            ("leader_elect_retry_period", d(config::DEFAULT_RETRY_PERIOD)),
            (
                "leader_elect_resource_lock",
                config::DEFAULT_RESOURCE_LOCK.to_string(),
            ),
            (
                "leader_elect_resource_name",
                config::DEFAULT_LEASE_NAME.to_string(),
            ),
            (
                "leader_elect_resource_namespace",
                config::DEFAULT_LEASE_NAMESPACE.to_string(),
            ),
            ("kube_api_qps", config::DEFAULT_QPS.to_string()),
            ("kube_api_burst", config::DEFAULT_BURST.to_string()),
            (
                "kube_api_content_type",
                config::DEFAULT_CONTENT_TYPE.to_string(),
            ),
            ("profiling", config::DEFAULT_PROFILING.to_string()),
            (
                "contention_profiling",
                config::DEFAULT_PROFILING.to_string(),
            ),
            ("load_source", none.get_name().to_string()),
            (
                "prometheus_node_label",
                node_load::DEFAULT_NODE_LABEL.to_string(),
            ),
            ("load_interval", load[0].to_string()),
            ("load_max_age", load[1].to_string()),
            ("load_lag", load[2].to_string()),
            ("whatif_max_pods", limits.pods.to_string()),
            ("whatif_max_workloads", limits.workloads.to_string()),
            ("whatif_max_added_nodes", limits.added_nodes.to_string()),
            ("whatif_memory_mib", (limits.memory >> 20).to_string()),
            ("whatif_concurrent", questions.concurrent.to_string()),
            ("whatif_timeout", d(questions.timeout)),
            (
                "decision_log_max_size",
                crate::explain::Size(file::DEFAULT_MAX_SIZE).to_string(),
            ),
            (
                "decision_log_max_files",
                file::DEFAULT_MAX_FILES.to_string(),
            ),
        ]);
        let args: Args = parse(&[]);
        // What --help shows reads back as the definition itself.
        assert_eq!(args.address, None);
        assert_eq!(args.load.load_source, Source::None);
        assert_eq!(
            [args.load.load_interval, args.load.load_lag][..],
            [load[0], load[2]][..]
        );
        // And the configuration the flags make by default is the file's own default.
        let (file, config, warnings) = resolve(&[]);
        let registry = plugins::registry();
        let plain = Config::default_with(&registry).unwrap();
        assert_eq!(config.leader_election, plain.leader_election);
        assert_eq!(config.client_connection, plain.client_connection);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(file.enable_profiling, Some(config::DEFAULT_PROFILING));
    }

    /// The effective configuration of `gantry run <argv>`.
    fn resolve(argv: &[&str]) -> (config::KubeSchedulerConfiguration, Config, Vec<String>) {
        let matches = crate::tests::command::<Args>()
            .try_get_matches_from(std::iter::once("gantry-test").chain(argv.iter().copied()))
            .expect("valid arguments");
        let args = <Args as clap::FromArgMatches>::from_arg_matches(&matches).expect("args");
        effective_configuration(&args, &matches).expect("a valid configuration")
    }

    fn config_file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(
            &mut f,
            format!("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n{text}")
                .as_bytes(),
        )
        .unwrap();
        f
    }

    #[test]
    fn without_config_every_kube_scheduler_flag_applies() {
        let (_, config, warnings) = resolve(&[
            "--leader-elect=false",
            "--leader-elect-lease-duration=30s",
            "--leader-elect-renew-deadline=20s",
            "--leader-elect-retry-period=4s",
            "--leader-elect-resource-name=kube-scheduler",
            "--leader-elect-resource-namespace=gantry-system",
            "--kube-api-qps=50",
            "--kube-api-burst=100",
            "--kube-api-content-type=application/json",
            "--kubeconfig=/etc/kubernetes/scheduler.conf",
        ]);
        let le = &config.leader_election;
        assert!(!le.enabled);
        assert_eq!(le.lease_duration.as_secs(), 30);
        assert_eq!(le.renew_deadline.as_secs(), 20);
        assert_eq!(le.retry_period.as_secs(), 4);
        assert_eq!(le.resource_name, "kube-scheduler");
        assert_eq!(le.resource_namespace, "gantry-system");
        let cc = &config.client_connection;
        assert_eq!((cc.qps, cc.burst), (50.0, 100));
        assert_eq!(cc.content_type, config::ContentType::Json);
        assert_eq!(
            cc.kubeconfig.as_deref(),
            Some("/etc/kubernetes/scheduler.conf")
        );
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn with_config_leader_flags_override_and_deprecated_flags_are_ignored() {
        let file = config_file(
            "leaderElection: {leaderElect: true, leaseDuration: 20s, resourceName: from-file}\n\
             clientConnection: {qps: 10, burst: 20, kubeconfig: file.conf}\n",
        );
        let path = file.path().to_str().unwrap();
        let (_, config, warnings) = resolve(&[
            "--config",
            path,
            "--leader-elect=false",
            "--kube-api-qps=99",
            "--kubeconfig=flag.conf",
        ]);
        let le = &config.leader_election;
        assert!(!le.enabled, "the flag overrides the file");
        assert_eq!(le.lease_duration.as_secs(), 20, "the file's, no flag given");
        assert_eq!(le.resource_name, "from-file");
        let cc = &config.client_connection;
        assert_eq!((cc.qps, cc.burst), (10.0, 20), "--kube-api-qps ignored");
        assert_eq!(cc.kubeconfig.as_deref(), Some("file.conf"));
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].starts_with("--kube-api-qps is ignored because --config is given"));
        assert!(warnings[1].starts_with("--kubeconfig flag.conf is ignored"));
        // A file without a kubeconfig takes the flag's.
        let file = config_file("");
        let (_, config, _) =
            resolve(&["--config", file.path().to_str().unwrap(), "--kubeconfig=k"]);
        assert_eq!(config.client_connection.kubeconfig.as_deref(), Some("k"));
    }

    #[test]
    fn bad_values_name_their_flag() {
        let command = crate::tests::command::<Args>();
        for (argv, named) in [
            (vec!["--leader-elect=maybe"], "--leader-elect"),
            (vec!["--secure-port=70000"], "--secure-port"),
            (vec!["--port=10251"], "--port"),
            (vec!["--bind-address=localhost"], "--bind-address"),
            (
                vec!["--leader-elect-lease-duration=15"],
                "--leader-elect-lease-duration",
            ),
            (vec!["--tls-cert-file=a.crt"], "--tls-private-key-file"),
        ] {
            let e = command
                .clone()
                .try_get_matches_from(std::iter::once("gantry-test").chain(argv.iter().copied()))
                .unwrap_err()
                .to_string();
            assert!(e.contains(named), "{argv:?}: {e}");
        }
        let matches = command
            .clone()
            .try_get_matches_from(["gantry-test", "--leader-elect-renew-deadline=20s"])
            .unwrap();
        let args = <Args as clap::FromArgMatches>::from_arg_matches(&matches).unwrap();
        let e = effective_configuration(&args, &matches).unwrap_err();
        assert!(
            format!("{e:#}").contains("leaderElection.leaseDuration"),
            "{e:#}"
        );
        let matches = command
            .clone()
            .try_get_matches_from(["gantry-test", "--feature-gates=Nope=true"])
            .unwrap();
        let args = <Args as clap::FromArgMatches>::from_arg_matches(&matches).unwrap();
        let e = effective_configuration(&args, &matches).unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "--feature-gates: unrecognized feature gate: Nope"
        );
        let args: Args = parse(&["--authorization-always-allow-paths=/a*b"]);
        let e = args.serving.serving(None, false).unwrap_err();
        assert!(e.starts_with("--authorization-always-allow-paths:"), "{e}");
    }

    #[test]
    fn kubeadms_command_line_is_accepted() {
        let args: Args = parse(&[
            "--authentication-kubeconfig=/etc/kubernetes/scheduler.conf",
            "--authorization-kubeconfig=/etc/kubernetes/scheduler.conf",
            "--bind-address=127.0.0.1",
            "--kubeconfig=/etc/kubernetes/scheduler.conf",
            "--leader-elect=true",
        ]);
        let serving = args.serving.serving(None, false).unwrap();
        let secure = serving.secure.expect("HTTPS by default");
        assert_eq!(secure.address.to_string(), "127.0.0.1:10259");
        assert_eq!(serving.plain, None, "no plain HTTP unless asked");
        let _: Args = parse(&["--port=0", "-v", "2", "--profiling=false"]);
    }

    #[test]
    fn help_states_the_rate_window_of_the_default_cpu_query() {
        let query = node_load::default_cpu_query(node_load::DEFAULT_NODE_LABEL);
        assert!(query.contains("[1m]"), "{query}");
        let help = crate::tests::command::<Args>()
            .render_long_help()
            .to_string();
        assert!(help.contains("node_cpu_seconds_total over 1m"), "{help}");
    }

    /// Set in the child process the test below starts.
    const CHILD: &str = "GANTRY_TEST_PANIC_CHILD";

    #[test]
    fn a_panic_in_a_tokio_task_ends_the_process_with_status_101() {
        if std::env::var_os(CHILD).is_some() {
            exit_on_panic();
            let runtime = tokio::runtime::Runtime::new().expect("runtime");
            // tokio catches a task's panic; the hook must end the process first.
            let _ = runtime.block_on(async { tokio::spawn(async { panic!("on purpose") }).await });
            std::thread::sleep(std::time::Duration::from_secs(10));
            std::process::exit(0);
        }
        let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "run::tests::a_panic_in_a_tokio_task_ends_the_process_with_status_101",
                "--nocapture",
            ])
            .env(CHILD, "1")
            .output()
            .expect("run the child");
        assert_eq!(out.status.code(), Some(PANIC_EXIT_STATUS), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("on purpose"));
    }
}
