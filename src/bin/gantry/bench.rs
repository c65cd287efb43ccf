//! `gantry bench`: scheduling decisions per second of the core on synthetic clusters.
//! Measures the scheduling loop alone (queue, snapshot, filter, score, assume, confirm), not
//! the API server: the end-to-end benchmark against a real control plane is separate.
//! `gantry bench --fill` measures how well the pods were placed instead (the `quality`
//! module).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use gantry_core::config::{Config, DEFAULT_SCHEDULER_NAME};
use gantry_core::decision::{DecisionRecorder, DecisionStore};
use gantry_core::model::{NodeModel, PodInfo};
use gantry_core::plugins;
use gantry_core::scheduler::{Attempt, Scheduler};
use gantry_core::synthetic::{self, Workload};

use crate::bench_whatif::{Stream, StreamResult, single_questions};

/// Arguments of `gantry bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Cluster sizes (nodes), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1000,5000,15000")]
    pub(crate) nodes: Vec<usize>,
    /// Pending pods per run.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) pods: usize,
    /// Workloads: plain, constrained.
    #[arg(long, value_delimiter = ',', default_value = "plain,constrained")]
    pub(crate) workload: Vec<WorkloadArg>,
    /// Scheduling threads: 1 runs filtering and scoring on the calling thread.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub(crate) threads: Vec<usize>,
    /// percentageOfNodesToScore values: 0 is kube-scheduler's adaptive share (its default),
    /// 100 every node (gantry's default).
    #[arg(long, value_delimiter = ',', default_value = "0,100")]
    pub(crate) percentage: Vec<u32>,
    /// Decision recording: `on` records every attempt into an in-memory store as `gantry run`
    /// does; `off,on` measures both, one after the other, for each combination.
    #[arg(long, value_delimiter = ',', default_value = "off")]
    pub(crate) record: Vec<Recording>,
    /// Records the in-memory store keeps with `--record on`; below `--pods`, most records
    /// evict an older one, as in a long-running `gantry run`.
    #[arg(long, default_value_t = 2000)]
    pub(crate) decision_records: usize,
    /// Times to run the whole set of combinations (with `--record off,on`, the two
    /// alternate this many times).
    #[arg(long, default_value_t = 1)]
    pub(crate) rounds: usize,
    /// Pods bound before the measured ones, round-robin over the nodes (pod i on node i
    /// modulo the nodes), of the same workload and sizes but another seed: the cache holds
    /// them as it holds a cluster's running pods, in its node lists and pod index.
    #[arg(long, default_value_t = 0)]
    pub(crate) running_pods: usize,
    /// Fills each cluster instead: pods (of the workload's sizes) until their cpu requests
    /// reach this share of the cluster's allocatable cpu, comma-separated shares (e.g.
    /// `0.9,1.0`), each scheduled once in order; prints how well they were placed (pods
    /// placed before the first that found no room, nodes used, spread of cpu and memory
    /// across nodes, topology skew) instead of the throughput. `--pods` is not used.
    #[arg(long, value_delimiter = ',', value_name = "SHARE")]
    pub(crate) fill: Vec<f64>,
    /// A KubeSchedulerConfiguration (v1) file: its `default-scheduler` profile schedules
    /// the pods (its percentages are replaced by `--percentage`); kube-scheduler's defaults
    /// without it.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// What-if questions: `on` answers a one-pod question every --question-interval-ms on
    /// a thread of its own during the run, as `gantry run` does (the scheduling loop only
    /// takes the view); `off,on` measures both, one after the other.
    #[arg(long, value_delimiter = ',', default_value = "off")]
    pub(crate) questions: Vec<Recording>,
    /// Milliseconds between two questions with `--questions on`.
    #[arg(long, default_value_t = 10)]
    pub(crate) question_interval_ms: u64,
    /// After each run, time a one-pod what-if question and a `--max` question against the
    /// cluster the run left.
    #[arg(long)]
    pub(crate) question_latency: bool,
}

/// Decision recording in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Recording {
    Off,
    On,
}

impl Recording {
    fn label(self) -> &'static str {
        match self {
            Recording::Off => "off",
            Recording::On => "on",
        }
    }

    /// `value` when recording is on.
    fn then_some<T>(self, value: T) -> Option<T> {
        (self == Recording::On).then_some(value)
    }
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum WorkloadArg {
    Plain,
    Constrained,
}

/// The workload and how the rows name it.
pub(crate) fn workload_of(w: WorkloadArg) -> (Workload, &'static str) {
    match w {
        WorkloadArg::Plain => (Workload::Plain, "plain"),
        WorkloadArg::Constrained => (Workload::Constrained, "constrained"),
    }
}

/// How the rows name a `percentageOfNodesToScore`.
pub(crate) fn percentage_label(pct: u32) -> String {
    if pct == 0 {
        "auto".to_string()
    } else {
        pct.to_string()
    }
}

/// The seed of the running pods: not the measured pods' own, so that they differ.
const RUNNING_SEED: u64 = synthetic::DEFAULT_SEED + 1;

/// Runs every combination and prints one row each (see [`run_throughput`]; with `--fill`,
/// the placements are measured instead, by the `quality` module), then the process's peak
/// resident memory: run one size per process to read it per size.
pub fn run(args: Args) -> anyhow::Result<()> {
    run_throughput(&args)?;
    print_peak_rss();
    Ok(())
}

/// Prints the process's peak resident memory, the last line of every bench run.
pub(crate) fn print_peak_rss() {
    match peak_rss_kib() {
        Some(kib) => println!("peak RSS (VmHWM): {:.1} MiB", kib as f64 / 1024.0),
        None => println!("peak RSS (VmHWM): unknown (no /proc/self/status)"),
    }
}

/// The process's peak resident set size in KiB (`VmHWM` of `/proc/self/status`).
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_vm_hwm(&status)
}

/// The `VmHWM:` line of a `/proc/<pid>/status` text, in KiB.
fn parse_vm_hwm(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
}

/// The synthetic cluster of `count` nodes in the scheduler's model, converted one at a
/// time (the API objects would otherwise count in the peak memory).
pub(crate) fn node_models(count: usize) -> anyhow::Result<Vec<NodeModel>> {
    Ok((0..count)
        .map(|i| NodeModel::from_api(&synthetic::node_object(i)))
        .collect::<Result<_, _>>()?)
}

/// `count` running pods of `workload`, bound round-robin to `nodes`, converted one at a
/// time (the API objects are never all held).
pub(crate) fn running_pods(
    count: usize,
    workload: Workload,
    nodes: &[NodeModel],
) -> anyhow::Result<Vec<Arc<PodInfo>>> {
    if count > 0 && nodes.is_empty() {
        anyhow::bail!("--running-pods: no nodes to bind them to");
    }
    synthetic::pod_stream("running", workload, DEFAULT_SCHEDULER_NAME, RUNNING_SEED)
        .take(count)
        .enumerate()
        .map(|(i, mut p)| {
            if let Some(spec) = p.spec.as_mut() {
                spec.node_name = Some(nodes[i % nodes.len()].name.to_string());
            }
            Ok(Arc::new(PodInfo::from_api(&p)?))
        })
        .collect()
}

/// The configuration of `--config`, or kube-scheduler's defaults.
pub(crate) fn base_config(args: &Args) -> anyhow::Result<Config> {
    let registry = plugins::registry();
    Ok(match &args.config {
        Some(path) => Config::load(path, &registry)?,
        None => Config::default_with(&registry)?,
    })
}

/// A scheduler of `config` with `percentage` of the nodes scored (in every profile), on
/// `threads` threads (none for one: the caller's), holding `nodes` and the `running` pods.
pub(crate) fn scheduler(
    config: &Config,
    nodes: &[NodeModel],
    running: &[Arc<PodInfo>],
    percentage: u32,
    threads: usize,
) -> anyhow::Result<(Scheduler, Option<Arc<rayon::ThreadPool>>)> {
    let mut config = config.clone();
    config.percentage_of_nodes_to_score = percentage;
    for profile in &mut config.profiles {
        profile.percentage_of_nodes_to_score = None;
    }
    let pool = if threads > 1 {
        Some(Arc::new(
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .context("cannot start threads")?,
        ))
    } else {
        None
    };
    let mut sched = Scheduler::new(config, pool.clone());
    let now = Duration::ZERO;
    for n in nodes {
        sched.upsert_node(n.clone(), now);
    }
    for p in running {
        sched.upsert_pod(p.clone(), now)?;
    }
    Ok((sched, pool))
}

/// The throughput runs: one row each, wall-clock pods/s and µs per pod, the CPU time per
/// pod (all threads), and the CPU time of the first attempt alone.
fn run_throughput(args: &Args) -> anyhow::Result<()> {
    let config = base_config(args)?;
    println!(
        "{:>6} {:>7} {:>6} {:<11} {:>4} {:>7} {:>6} {:>9} {:>10} {:>9} {:>11} {:>12} {:>9} {:>7}",
        "nodes",
        "running",
        "pods",
        "workload",
        "pct",
        "threads",
        "record",
        "questions",
        "pods/s",
        "us/pod",
        "cpu-us/pod",
        "first-cpu-ms",
        "scheduled",
        "pending"
    );
    for &nodes in &args.nodes {
        let node_models = node_models(nodes)?;
        for &w in &args.workload {
            let (workload, label) = workload_of(w);
            let running = running_pods(args.running_pods, workload, &node_models)?;
            let pods: Vec<Arc<PodInfo>> = synthetic::pods(
                args.pods,
                workload,
                DEFAULT_SCHEDULER_NAME,
                synthetic::DEFAULT_SEED,
            )
            .iter()
            .map(|p| PodInfo::from_api(p).map(Arc::new))
            .collect::<Result<_, _>>()?;
            for _ in 0..args.rounds {
                for &pct in &args.percentage {
                    for &threads in &args.threads {
                        for (&record, &questions) in args
                            .record
                            .iter()
                            .flat_map(|r| args.questions.iter().map(move |q| (r, q)))
                        {
                            let setting = Setting {
                                percentage: pct,
                                threads,
                                record: record.then_some(args.decision_records),
                                questions: questions
                                    .then_some(Duration::from_millis(args.question_interval_ms)),
                                latency: args.question_latency,
                            };
                            let r = run_one(&config, &node_models, &running, &pods, &setting)?;
                            println!(
                                "{:>6} {:>7} {:>6} {:<11} {:>4} {:>7} {:>6} {:>9} {:>10.0} {:>9.1} {:>11.1} {:>12.1} {:>9} {:>7}",
                                nodes,
                                running.len(),
                                pods.len(),
                                label,
                                percentage_label(pct),
                                threads,
                                record.label(),
                                questions.label(),
                                pods.len() as f64 / r.elapsed.as_secs_f64(),
                                r.elapsed.as_secs_f64() * 1e6 / pods.len() as f64,
                                r.cpu.as_secs_f64() * 1e6 / pods.len() as f64,
                                r.first_cpu.as_secs_f64() * 1e3,
                                r.scheduled,
                                r.pending
                            );
                            if let Some(q) = &r.questions {
                                println!(
                                    "  questions: {} answered; the scheduling loop took {:.0}us per question (its view); answered in {:.1}ms median, {:.1}ms at most",
                                    q.answered,
                                    q.view_mean.as_secs_f64() * 1e6,
                                    q.answer_median.as_secs_f64() * 1e3,
                                    q.answer_max.as_secs_f64() * 1e3
                                );
                            }
                            if let Some((one, max, fits)) = r.latency {
                                println!(
                                    "  what-if against the cluster left: one pod {:.1}ms; --max {:.0}ms ({fits} replicas)",
                                    one.as_secs_f64() * 1e3,
                                    max.as_secs_f64() * 1e3
                                );
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

struct RunResult {
    elapsed: Duration,
    /// CPU time of the whole process (all threads) during the run: on a shared machine,
    /// wall time also counts the time other processes held the cores.
    cpu: Duration,
    /// CPU time of the first attempt, part of `cpu`: the first snapshot of the whole
    /// cluster (with every running pod) is taken then, a cost paid once.
    first_cpu: Duration,
    scheduled: usize,
    pending: usize,
    /// With a stream of what-if questions, what it measured.
    questions: Option<StreamResult>,
    /// The one-pod and `--max` question times after the run, and the `--max` answer.
    latency: Option<(Duration, Duration, usize)>,
}

/// How one measured run is set up beyond its cluster and pods: the scheduler's settings
/// and what runs beside the loop, each varied on its own.
struct Setting {
    /// `percentageOfNodesToScore`.
    percentage: u32,
    /// Threads filtering and scoring.
    threads: usize,
    /// Decision records kept, when recording.
    record: Option<usize>,
    /// How often a what-if question is asked during the run.
    questions: Option<Duration>,
    /// Whether single questions are timed after the run.
    latency: bool,
}

/// One measured run of `pods` on `nodes` with `running` already placed.
fn run_one(
    config: &Config,
    nodes: &[NodeModel],
    running: &[Arc<PodInfo>],
    pods: &[Arc<PodInfo>],
    setting: &Setting,
) -> anyhow::Result<RunResult> {
    let &Setting {
        percentage,
        threads,
        record,
        questions,
        latency,
    } = setting;
    let (mut sched, runner) = scheduler(config, nodes, running, percentage, threads)?;
    let recorder = record.map(|capacity| {
        sched.set_explain(true);
        DecisionRecorder::new(DecisionStore::shared(capacity), None, false)
    });
    let now = Duration::ZERO;
    for p in pods {
        sched.upsert_pod(p.clone(), now)?;
    }
    let mut run = move || -> anyhow::Result<RunResult> {
        let (mut scheduled, mut pending) = (0, 0);
        let mut stream = questions.map(|every| Stream::start(every, percentage));
        let start = Instant::now();
        let cpu_start = cpu_time::ProcessTime::now();
        let mut first_cpu = None;
        loop {
            if let Some(s) = &mut stream {
                s.tick(&sched);
            }
            // Timed and stamped as the scheduling thread of `gantry run` does.
            let attempt_start = Instant::now();
            let Some(mut attempt) = sched.schedule_next(now) else {
                break;
            };
            first_cpu.get_or_insert_with(|| cpu_start.elapsed());
            if let Some(r) = &recorder {
                let took = attempt_start.elapsed();
                let timestamp_ms = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
                r.record(&mut attempt, timestamp_ms, took);
            }
            match attempt {
                Attempt::Scheduled(task, _) | Attempt::Permitted { task, .. } => {
                    sched.binding_succeeded(&task, now)?;
                    scheduled += 1;
                }
                Attempt::Waiting { .. } => {}
                Attempt::Unschedulable { .. }
                | Attempt::Extending(_)
                | Attempt::Failed { .. }
                | Attempt::Rejected { .. } => pending += 1,
            }
        }
        let (elapsed, cpu) = (start.elapsed(), cpu_start.elapsed());
        Ok(RunResult {
            elapsed,
            cpu,
            first_cpu: first_cpu.unwrap_or_default(),
            scheduled,
            pending,
            questions: stream.map(Stream::finish),
            latency: if latency {
                Some(single_questions(&sched, percentage)?)
            } else {
                None
            },
        })
    };
    // Driven from inside the pool, as the adapter does (see `adapter::run`).
    match runner {
        Some(pool) => pool.install(run),
        None => run(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_rss_is_read_from_the_vm_hwm_line() {
        let status = "Name:\tgantry\nVmPeak:\t  900 kB\nVmHWM:\t   123456 kB\nVmRSS:\t 1 kB\n";
        assert_eq!(parse_vm_hwm(status), Some(123_456));
        assert_eq!(parse_vm_hwm("VmRSS:\t1 kB\n"), None);
        assert!(peak_rss_kib().is_some_and(|kib| kib > 0));
    }

    #[test]
    fn running_pods_are_bound_round_robin_and_named_apart() {
        let nodes = node_models(3).expect("synthetic nodes");
        let running = running_pods(7, Workload::Constrained, &nodes).expect("synthetic pods");
        let placed: Vec<&str> = running
            .iter()
            .map(|p| p.node_name.as_deref().unwrap_or(""))
            .collect();
        assert_eq!(
            placed,
            [
                "node-00000",
                "node-00001",
                "node-00002",
                "node-00000",
                "node-00001",
                "node-00002",
                "node-00000"
            ]
        );
        assert!(running.iter().all(|p| p.name.starts_with("running-")));
        let config = Config::default_with(&plugins::registry()).expect("default configuration");
        let (sched, _) = scheduler(&config, &nodes, &running, 0, 1).expect("scheduler");
        assert_eq!(sched.cache().pod_count(), 7);
        assert!(running_pods(1, Workload::Plain, &[]).is_err());
    }
}
