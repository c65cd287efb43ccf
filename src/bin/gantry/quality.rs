//! `gantry bench --fill`: how well the default profile places the pods that fill a
//! synthetic cluster to a share of its cpu, for each `percentageOfNodesToScore` asked:
//! pods placed before the first that found no room, nodes used, the spread of cpu and
//! memory allocation across the nodes, and topology skew per deployment.

use std::sync::Arc;
use std::time::Duration;

use gantry_core::config::{Config, DEFAULT_SCHEDULER_NAME};
use gantry_core::model::PodInfo;
use gantry_core::scheduler::Attempt;
use gantry_core::synthetic::{self, Workload};
use gantry_sim::quality::{Attempts, PlacementQuality, Skew};

use crate::bench::{self, Args};

/// The label the synthetic deployments' pods carry (see [`synthetic::pods`]): pods are
/// grouped by it for the skews.
const DEPLOYMENT_LABEL: &str = "app";

/// Fills every cluster size with every workload to every share of `--fill`, once for each
/// percentage and thread count, and prints one row each.
/// Ends with the peak resident memory, as the throughput runs do.
pub fn run(args: &Args) -> anyhow::Result<()> {
    for &fill in &args.fill {
        if !(fill.is_finite() && fill > 0.0) {
            anyhow::bail!("--fill: a share of the cluster's cpu above 0, got {fill}");
        }
    }
    fill(args)?;
    bench::print_peak_rss();
    Ok(())
}

/// The rows of [`run`].
fn fill(args: &Args) -> anyhow::Result<()> {
    let config = bench::base_config(args)?;
    println!(
        "{:>6} {:<11} {:>4} {:>7} {:>4} {:>7} {:>7} {:>6} {:>10} {:>6} {:>6} {:>6} {:>6} {:>6} {:>10} {:>10} {:>7}",
        "nodes",
        "workload",
        "pct",
        "threads",
        "fill",
        "pods",
        "placed",
        "failed",
        "first-fail",
        "used",
        "cpu%",
        "cpu-sd",
        "mem%",
        "mem-sd",
        "zone-skew",
        "host-skew",
        "cpu-s"
    );
    for &nodes in &args.nodes {
        let node_models = bench::node_models(nodes)?;
        let cpu_capacity: i64 = node_models.iter().map(|n| n.allocatable.milli_cpu).sum();
        for &w in &args.workload {
            let (workload, label) = bench::workload_of(w);
            let running = bench::running_pods(args.running_pods, workload, &node_models)?;
            for &fill in &args.fill {
                let pods = filling_pods(workload, cpu_capacity as f64 * fill)?;
                for _ in 0..args.rounds {
                    for &pct in &args.percentage {
                        for &threads in &args.threads {
                            let (attempts, quality, cpu) =
                                fill_once(&config, &node_models, &running, &pods, pct, threads)?;
                            println!(
                                "{:>6} {:<11} {:>4} {:>7} {:>4} {:>7} {:>7} {:>6} {:>10} {:>6} {:>6.2} {:>6.2} {:>6.2} {:>6.2} {:>10} {:>10} {:>7.1}",
                                nodes,
                                label,
                                bench::percentage_label(pct),
                                threads,
                                fill,
                                pods.len(),
                                attempts.placed,
                                attempts.failed,
                                attempts
                                    .placed_before_first_failure
                                    .map_or("none".to_string(), |n| n.to_string()),
                                quality.nodes_used,
                                quality.cpu.mean,
                                quality.cpu.std_dev,
                                quality.memory.mean,
                                quality.memory.std_dev,
                                quality.zone_skew.map_or("-".to_string(), skew_label),
                                skew_label(quality.hostname_skew),
                                cpu.as_secs_f64(),
                            );
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// A skew as `largest/mean` over the groups.
fn skew_label(s: Skew) -> String {
    format!("{}/{:.2}", s.max, s.mean)
}

/// Pending pods of `workload`, taken in order until their cpu requests reach `milli_cpu`.
fn filling_pods(workload: Workload, milli_cpu: f64) -> anyhow::Result<Vec<Arc<PodInfo>>> {
    let mut total = 0i64;
    let mut pods = Vec::new();
    for p in synthetic::pod_stream(
        "pod",
        workload,
        DEFAULT_SCHEDULER_NAME,
        synthetic::DEFAULT_SEED,
    ) {
        if total as f64 >= milli_cpu {
            break;
        }
        let info = PodInfo::from_api(&p)?;
        total += info.requests.milli_cpu;
        pods.push(Arc::new(info));
    }
    Ok(pods)
}

/// Schedules `pods`, each once and in order, on a fresh scheduler holding `nodes` and
/// `running`: what was placed, how well, and the CPU time the scheduling took.
fn fill_once(
    config: &Config,
    nodes: &[gantry_core::model::NodeModel],
    running: &[Arc<PodInfo>],
    pods: &[Arc<PodInfo>],
    percentage: u32,
    threads: usize,
) -> anyhow::Result<(Attempts, PlacementQuality, Duration)> {
    let (mut sched, pool) = bench::scheduler(config, nodes, running, percentage, threads)?;
    // A clock that stands still: a pod that found no room waits out its backoff forever,
    // so every pod is tried once.
    let now = Duration::ZERO;
    for p in pods {
        sched.upsert_pod(p.clone(), now)?;
    }
    let mut run = move || -> anyhow::Result<(Attempts, PlacementQuality, Duration)> {
        let cpu_start = cpu_time::ProcessTime::now();
        let mut attempts = Attempts::default();
        while let Some(attempt) = sched.schedule_next(now) {
            match attempt {
                Attempt::Scheduled(task, _) | Attempt::Permitted { task, .. } => {
                    sched.binding_succeeded(&task, now)?;
                    attempts.placed();
                }
                Attempt::Waiting { .. } => {}
                Attempt::Unschedulable { .. }
                | Attempt::Extending(_)
                | Attempt::Failed { .. }
                | Attempt::Rejected { .. } => attempts.failed(),
            }
        }
        let cpu = cpu_start.elapsed();
        let quality =
            PlacementQuality::measure(sched.cache().nodes().map(|n| &**n), Some(DEPLOYMENT_LABEL));
        Ok((attempts, quality, cpu))
    };
    // Driven from inside the pool, as the throughput runs are.
    match pool {
        Some(pool) => pool.install(run),
        None => run(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filling_pods_stop_once_their_cpu_reaches_the_share() {
        let pods = filling_pods(Workload::Plain, 10_000.0).expect("synthetic pods");
        let total: i64 = pods.iter().map(|p| p.requests.milli_cpu).sum();
        let before_last = total - pods.last().map_or(0, |p| p.requests.milli_cpu);
        assert!(total >= 10_000 && before_last < 10_000, "{total}");
    }

    /// Three nodes of 32 cpu filled to 90%: every pod fits, spread by LeastAllocated to
    /// within a pod of each other; beyond the cluster's cpu the first failure is counted.
    #[test]
    fn a_fill_reports_what_was_placed_and_how_evenly() {
        let config = Config::default_with(&gantry_core::plugins::registry()).expect("defaults");
        let nodes = bench::node_models(3).expect("synthetic nodes");
        let pods = filling_pods(Workload::Plain, 0.9 * 96_000.0).expect("pods");
        let (attempts, quality, _) = fill_once(&config, &nodes, &[], &pods, 100, 1).expect("fill");
        assert_eq!(attempts.placed, pods.len());
        assert_eq!(attempts.placed_before_first_failure, None);
        assert_eq!((quality.nodes_used, quality.pods), (3, pods.len()));
        assert!(
            quality.cpu.mean > 89.0 && quality.cpu.std_dev < 5.0,
            "{quality:?}"
        );
        let over = filling_pods(Workload::Plain, 1.2 * 96_000.0).expect("pods");
        let (attempts, _, _) = fill_once(&config, &nodes, &[], &over, 100, 1).expect("fill");
        assert!(attempts.failed > 0);
        let first = attempts.placed_before_first_failure.expect("a failure");
        assert!(
            first <= attempts.placed && first > pods.len() / 2,
            "{attempts:?}"
        );
    }
}
