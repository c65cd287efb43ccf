//! `gantry run`: schedule pods of a real cluster.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use gantry::adapter::node_load::{self, LoadSource, NodeLoadSettings, PrometheusSource};
use gantry::adapter::{self, DecisionSettings, Options};
use gantry::config::{Config, GoDuration};
use gantry::plugins;

/// Where the HTTP endpoints are served when `--address` is not given: port 10251 (the one
/// kube-scheduler served plain HTTP on) of every IPv4 interface.
const DEFAULT_ADDRESS: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 10251);

/// Arguments of `gantry run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A KubeSchedulerConfiguration (v1) file; kube-scheduler's defaults without it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// A kubeconfig file; otherwise `clientConnection.kubeconfig`, then `KUBECONFIG`,
    /// `~/.kube/config` or the in-cluster service account.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Where to serve /metrics, /healthz, /readyz, /livez and
    /// /debug/decisions/<namespace>/<pod> (plain HTTP).
    #[arg(long, default_value_t = DEFAULT_ADDRESS)]
    address: SocketAddr,
    /// The log filter.
    #[command(flatten)]
    log: crate::LogArgs,
    /// Where node load comes from.
    #[command(flatten)]
    load: LoadArgs,
    /// Scheduling attempts whose decision records are kept in memory (all pods together;
    /// the oldest go first), for /debug/decisions and `gantry explain --server`.
    #[arg(long, env = "GANTRY_DECISION_RECORDS", default_value_t = crate::explain::DEFAULT_RECORDS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    decision_records: usize,
    /// The decision log file.
    #[command(flatten)]
    decision_log: crate::explain::DecisionLogArgs,
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

/// Runs the scheduler until SIGTERM or SIGINT.
pub fn run(args: Args) -> anyhow::Result<()> {
    exit_on_panic();
    limit_malloc_arenas();
    args.log.init()?;
    let node_load = args.load.settings()?;
    let registry = plugins::registry();
    let config = match &args.config {
        Some(path) => Config::load(path, &registry)?,
        None => Config::default_with(&registry)?,
    };
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
        kubeconfig: args.kubeconfig,
        address: args.address,
        pool,
        node_load,
        decisions: DecisionSettings {
            capacity: args.decision_records,
            file: args.decision_log.rotation(),
        },
    };
    runtime.block_on(adapter::run(options))?;
    Ok(())
}

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
    use gantry::decision::file;

    #[test]
    fn help_shows_each_default_from_its_definition() {
        let none = Source::None.to_possible_value().expect("a visible value");
        let load = [
            GoDuration(node_load::DEFAULT_INTERVAL),
            GoDuration(node_load::DEFAULT_MAX_AGE),
            GoDuration(node_load::DEFAULT_LAG),
        ];
        assert_shown_defaults::<Args>(&[
            ("address", DEFAULT_ADDRESS.to_string()),
            ("log", crate::DEFAULT_LOG.to_string()),
            (
                "decision_records",
                crate::explain::DEFAULT_RECORDS.to_string(),
            ),
            ("load_source", none.get_name().to_string()),
            (
                "prometheus_node_label",
                node_load::DEFAULT_NODE_LABEL.to_string(),
            ),
            ("load_interval", load[0].to_string()),
            ("load_max_age", load[1].to_string()),
            ("load_lag", load[2].to_string()),
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
        assert_eq!(args.address, DEFAULT_ADDRESS);
        assert_eq!(args.load.load_source, Source::None);
        assert_eq!(
            [
                args.load.load_interval,
                args.load.load_max_age,
                args.load.load_lag
            ],
            load
        );
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
