//! `gantry bench`: scheduling decisions per second of the core on synthetic clusters.
//! Measures the scheduling loop alone (queue, snapshot, filter, score, assume, confirm), not
//! the API server: the end-to-end benchmark against a real control plane is separate.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use gantry::config::{Config, DEFAULT_SCHEDULER_NAME};
use gantry::decision::{DecisionRecorder, DecisionStore};
use gantry::model::{NodeModel, PodInfo};
use gantry::plugins;
use gantry::scheduler::{Attempt, Scheduler};
use gantry::synthetic::{self, Workload};

use crate::bench_whatif::{Stream, StreamResult, single_questions};

/// Arguments of `gantry bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Cluster sizes (nodes), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1000,5000,15000")]
    nodes: Vec<usize>,
    /// Pending pods per run.
    #[arg(long, default_value_t = 10_000)]
    pods: usize,
    /// Workloads: plain, constrained.
    #[arg(long, value_delimiter = ',', default_value = "plain,constrained")]
    workload: Vec<WorkloadArg>,
    /// Scheduling threads: 1 runs filtering and scoring on the calling thread.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<usize>,
    /// percentageOfNodesToScore values: 0 is kube-scheduler's adaptive default.
    #[arg(long, value_delimiter = ',', default_value = "0,100")]
    percentage: Vec<u32>,
    /// Decision recording: `on` records every attempt into an in-memory store as `gantry run`
    /// does; `off,on` measures both, one after the other, for each combination.
    #[arg(long, value_delimiter = ',', default_value = "off")]
    record: Vec<Recording>,
    /// Records the in-memory store keeps with `--record on`; below `--pods`, most records
    /// evict an older one, as in a long-running `gantry run`.
    #[arg(long, default_value_t = 2000)]
    decision_records: usize,
    /// Times to run the whole set of combinations (with `--record off,on`, the two
    /// alternate this many times).
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// What-if questions: `on` answers a one-pod question every --question-interval-ms on
    /// a thread of its own during the run, as `gantry run` does (the scheduling loop only
    /// takes the view); `off,on` measures both, one after the other.
    #[arg(long, value_delimiter = ',', default_value = "off")]
    questions: Vec<Recording>,
    /// Milliseconds between two questions with `--questions on`.
    #[arg(long, default_value_t = 10)]
    question_interval_ms: u64,
    /// After each run, time a one-pod what-if question and a `--max` question against the
    /// cluster the run left.
    #[arg(long)]
    question_latency: bool,
}

/// Decision recording in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Recording {
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
enum WorkloadArg {
    Plain,
    Constrained,
}

/// Runs every combination and prints one row each: wall-clock pods/s and µs per pod, and
/// the CPU time per pod (all threads).
pub fn run(args: Args) -> anyhow::Result<()> {
    println!(
        "{:>6} {:>6} {:<11} {:>4} {:>7} {:>6} {:>9} {:>10} {:>9} {:>11} {:>9} {:>7}",
        "nodes",
        "pods",
        "workload",
        "pct",
        "threads",
        "record",
        "questions",
        "pods/s",
        "us/pod",
        "cpu-us/pod",
        "scheduled",
        "pending"
    );
    for &nodes in &args.nodes {
        let node_models: Vec<NodeModel> = synthetic::nodes(nodes)
            .iter()
            .map(NodeModel::from_api)
            .collect::<Result<_, _>>()?;
        for &w in &args.workload {
            let (workload, label) = match w {
                WorkloadArg::Plain => (Workload::Plain, "plain"),
                WorkloadArg::Constrained => (Workload::Constrained, "constrained"),
            };
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
                            let r = run_one(
                                &node_models,
                                &pods,
                                pct,
                                threads,
                                record.then_some(args.decision_records),
                                questions
                                    .then_some(Duration::from_millis(args.question_interval_ms)),
                                args.question_latency,
                            )?;
                            println!(
                                "{:>6} {:>6} {:<11} {:>4} {:>7} {:>6} {:>9} {:>10.0} {:>9.1} {:>11.1} {:>9} {:>7}",
                                nodes,
                                pods.len(),
                                label,
                                if pct == 0 {
                                    "auto".to_string()
                                } else {
                                    pct.to_string()
                                },
                                threads,
                                record.label(),
                                questions.label(),
                                pods.len() as f64 / r.elapsed.as_secs_f64(),
                                r.elapsed.as_secs_f64() * 1e6 / pods.len() as f64,
                                r.cpu.as_secs_f64() * 1e6 / pods.len() as f64,
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
    scheduled: usize,
    pending: usize,
    /// With a stream of what-if questions, what it measured.
    questions: Option<StreamResult>,
    /// The one-pod and `--max` question times after the run, and the `--max` answer.
    latency: Option<(Duration, Duration, usize)>,
}

fn run_one(
    nodes: &[NodeModel],
    pods: &[Arc<PodInfo>],
    percentage: u32,
    threads: usize,
    record: Option<usize>,
    questions: Option<Duration>,
    latency: bool,
) -> anyhow::Result<RunResult> {
    let registry = plugins::registry();
    let mut config = Config::default_with(&registry)?;
    config.percentage_of_nodes_to_score = percentage;
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
    let runner = pool.clone();
    let mut sched = Scheduler::new(config, pool);
    let recorder = record.map(|capacity| {
        sched.set_explain(true);
        DecisionRecorder::new(DecisionStore::shared(capacity), None, false)
    });
    let now = Duration::ZERO;
    for n in nodes {
        sched.upsert_node(n.clone(), now);
    }
    for p in pods {
        sched.upsert_pod(p.clone(), now)?;
    }
    let mut run = move || -> anyhow::Result<RunResult> {
        let (mut scheduled, mut pending) = (0, 0);
        let mut stream = questions.map(|every| Stream::start(every, percentage));
        let start = Instant::now();
        let cpu_start = cpu_time::ProcessTime::now();
        loop {
            if let Some(s) = &mut stream {
                s.tick(&sched);
            }
            // Timed and stamped as the scheduling thread of `gantry run` does.
            let attempt_start = Instant::now();
            let Some(mut attempt) = sched.schedule_next(now) else {
                break;
            };
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
