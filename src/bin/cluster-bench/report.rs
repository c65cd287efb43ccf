//! `cluster-bench report`: the table of a set of runs (Markdown), gantry's ratios to the null
//! binder and to kube-scheduler, and the targets checked against them: issue 4's for the
//! synthetic workloads, issue 19's (five times kube-scheduler's throughput, every claim bound
//! to its volume) for scheduler_perf's volume workloads; for its preemption workload a table
//! of its own (preemptors bound per second, victims, the API server's writes per preemptor)
//! and issue 20's target (ten times kube-scheduler's preemptors per second, no more victims);
//! for the gang workload gantry's throughput against its own on the plain workload (the same
//! pods without groups) and issue 21's target (at least 0.8 of it), every gang bound whole;
//! for scheduler_perf's other workloads (`<test case>/<workload>`, issue 50) the ratios and
//! the correctness, no target.

use std::path::PathBuf;

use anyhow::Context;

use crate::measure::RunResult;

/// Arguments of `cluster-bench report`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Result files written by `cluster-bench run`.
    #[arg(required = true)]
    results: Vec<PathBuf>,
}

/// Prints the report.
pub fn run(args: Args) -> anyhow::Result<()> {
    let mut results = Vec::new();
    for path in &args.results {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let r: RunResult = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a run result", path.display()))?;
        results.push(r);
    }
    print!("{}", render(&results));
    Ok(())
}

fn num(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.decimals$}"))
}

fn pair(a: Option<f64>, b: Option<f64>, decimals: usize) -> String {
    if a.is_none() && b.is_none() {
        return "-".to_string();
    }
    format!("{} / {}", num(a, decimals), num(b, decimals))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    let (a, b) = (a?, b?);
    (b > 0.0).then(|| a / b)
}

fn verdict(ok: Option<bool>) -> &'static str {
    match ok {
        Some(true) => "holds",
        Some(false) => "misses",
        None => "not measured",
    }
}

/// gantry's ratios in one round: the n-th run of each scheduler in a group of runs (same
/// nodes, pods and workload) belongs to round n, whatever order the round took them in.
#[derive(Debug)]
struct Round {
    to_null: Option<f64>,
    to_kube: Option<f64>,
    rss: Option<f64>,
    bound_to_null: Option<f64>,
    bound_to_kube: Option<f64>,
    tail_to_kube: Option<f64>,
    /// The gang workload: gantry's pods/s against its own in the same round of the plain
    /// workload (same nodes and pods).
    gangs_to_plain: Option<f64>,
}

/// The rounds of `group`; `plain` holds gantry's runs of the plain workload with the same
/// nodes and pods when `group` is the gang workload's (empty otherwise).
fn rounds(group: &[&RunResult], plain: &[&RunResult]) -> Vec<Round> {
    let of = |scheduler: &str| -> Vec<&RunResult> {
        group
            .iter()
            .copied()
            .filter(|r| r.scheduler == scheduler)
            .collect()
    };
    let (gantry, null, kube) = (of("gantry"), of("null"), of("kube-scheduler"));
    let rate = |r: Option<&&RunResult>| r.and_then(|r| r.pods_per_s);
    let rss = |r: Option<&&RunResult>| r.and_then(|r| r.peak_rss_mib);
    let bound = |r: Option<&&RunResult>| r.and_then(|r| r.cpu_bound_pods_per_s());
    let tail = |r: Option<&&RunResult>| r.and_then(|r| r.tail_pods_per_s);
    (0..gantry.len())
        .map(|i| {
            let (g, n, k) = (gantry.get(i), null.get(i), kube.get(i));
            Round {
                to_null: ratio(rate(g), rate(n)),
                to_kube: ratio(rate(g), rate(k)),
                rss: ratio(rss(g), rss(k)),
                bound_to_null: ratio(bound(g), bound(n)),
                bound_to_kube: ratio(bound(g), bound(k)),
                tail_to_kube: ratio(tail(g), tail(k)),
                gangs_to_plain: ratio(rate(g), rate(plain.get(i))),
            }
        })
        .collect()
}

/// The median: of an even count, the mean of the middle two.
fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// The report of `results`, in their order: every run, gantry's ratios in each round, and
/// the targets judged on the median over rounds (on a shared machine one round's ratio
/// swings with the machine; the report says how many rounds hold on their own). The
/// preemption workload's measured runs come after, in [`render_preemption`]'s tables.
pub fn render(results: &[RunResult]) -> String {
    let (preemption, others): (Vec<RunResult>, Vec<RunResult>) = results
        .iter()
        .cloned()
        .partition(|r| r.preemption.is_some());
    let mut out = String::new();
    if !others.is_empty() {
        out.push_str(&render_runs(&others));
    }
    if !preemption.is_empty() {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&render_preemption(&preemption));
    }
    out
}

/// The row of one run in the table of runs.
fn run_row(r: &RunResult) -> String {
    let per_pod = r
        .scheduler_cpu_s
        .filter(|_| r.bound > 0)
        .map(|s| s * 1e6 / r.bound as f64);
    let server = match (r.apiserver_cpu_s, r.etcd_cpu_s) {
        (Some(a), Some(e)) => Some(a + e),
        _ => None,
    };
    let correct = correctness(r);
    let tail = match r.tail_pods {
        Some(n) => format!("{} ({n})", num(r.tail_pods_per_s, 0)),
        None => "-".to_string(),
    };
    format!(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
        r.nodes,
        r.pods,
        r.workload,
        r.scheduler,
        num(r.pods_per_s, 0),
        num(r.first_binding_s, 2),
        num(r.pods_per_s_after_first, 0),
        tail,
        num(r.peak_rss_mib, 0),
        pair(r.sli_p50_s, r.sli_p99_s, 2),
        pair(r.seen_p50_s, r.seen_p99_s, 2),
        num(r.scheduler_cpu_s, 1),
        num(per_pod, 0),
        num(server, 1),
        num(r.cpu_per_pod_s().map(|s| s * 1e3), 2),
        num(r.cpu_bound_pods_per_s(), 0),
        num(r.events_created, 0),
        num(r.other_cpu_s, 1),
        num(r.load_at_start, 1),
        correct,
    )
}

/// `yes`, or what was wrong with the run.
fn correctness(r: &RunResult) -> String {
    if r.correct() {
        "yes".to_string()
    } else {
        let volumes = match &r.volumes {
            Some(v) if !v.ok() => format!(
                ", {}/{} claims bound to their volume ({})",
                v.bound,
                v.claims,
                v.first_problem.as_deref().unwrap_or_default()
            ),
            _ => String::new(),
        };
        let gangs = match &r.gangs {
            Some(g) if !g.ok() => format!(
                ", {} of {} gangs bound partly ({})",
                g.groups - g.whole - g.none,
                g.groups,
                g.first_partial.as_deref().unwrap_or_default()
            ),
            _ => String::new(),
        };
        format!(
            "NO: {}/{} bound, {} over-committed nodes, {} rebound{volumes}{gangs}{}",
            r.check.bound,
            r.pods,
            r.check.overcommitted.len(),
            r.rebound,
            r.incomplete_reason
                .as_deref()
                .map(|why| format!(", {why}"))
                .unwrap_or_default()
        )
    }
}

fn render_runs(results: &[RunResult]) -> String {
    let mut out = String::new();
    out.push_str(
        "| nodes | pods | workload | scheduler | pods/s | first binding (s) | pods/s after first | pods/s of the last N (N) | peak RSS (MiB) | SLI p50 / p99 (s) | seen p50 / p99 (s) | scheduler CPU (s) | CPU µs/pod | API server + etcd CPU (s) | CPU ms/pod (all three) | CPU-bound pods/s | events by last binding | other CPU (s) | load | correct |\n",
    );
    out.push_str(
        "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for r in results {
        out.push_str(&run_row(r));
    }

    let mut groups: Vec<(usize, usize, &str)> = Vec::new();
    for r in results {
        let key = (r.nodes, r.pods, r.workload.as_str());
        if !groups.contains(&key) {
            groups.push(key);
        }
    }
    out.push_str("\n| nodes | pods | workload | round | gantry / null binder | gantry / kube-scheduler | gantry RSS / kube-scheduler RSS | CPU-bound: gantry / null binder | CPU-bound: gantry / kube-scheduler | last N: gantry / kube-scheduler | gantry: gangs / plain |\n");
    out.push_str("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let mut targets = String::new();
    for &(nodes, pods, workload) in &groups {
        let group: Vec<&RunResult> = results
            .iter()
            .filter(|r| r.nodes == nodes && r.pods == pods && r.workload == workload)
            .collect();
        let plain: Vec<&RunResult> = if workload == GANGS {
            results
                .iter()
                .filter(|r| {
                    (r.nodes, r.pods, r.workload.as_str(), r.scheduler.as_str())
                        == (nodes, pods, "plain", "gantry")
                })
                .collect()
        } else {
            Vec::new()
        };
        let rounds = rounds(&group, &plain);
        for (i, round) in rounds.iter().enumerate() {
            out.push_str(&format!(
                "| {nodes} | {pods} | {workload} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                i + 1,
                num(round.to_null, 2),
                num(round.to_kube, 2),
                num(round.rss, 2),
                num(round.bound_to_null, 2),
                num(round.bound_to_kube, 2),
                num(round.tail_to_kube, 2),
                num(round.gangs_to_plain, 2),
            ));
        }
        let line = |what: &str, ok: Option<bool>, detail: String| {
            format!(
                "- {nodes} nodes, {pods} pods, {workload}: {what}: {}{detail}\n",
                verdict(ok)
            )
        };
        let target = |what: &str, of: fn(&Round) -> Option<f64>, holds: fn(f64) -> bool| {
            let values: Vec<f64> = rounds.iter().filter_map(of).collect();
            let median = median(&values);
            let detail = match values.len() {
                0 | 1 => String::new(),
                n => format!(
                    " (median {:.2} of {n} rounds; {} of {n} hold; {:.2} to {:.2})",
                    median.unwrap_or_default(),
                    values.iter().filter(|&&v| holds(v)).count(),
                    values.iter().copied().fold(f64::INFINITY, f64::min),
                    values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                ),
            };
            line(what, median.map(holds), detail)
        };
        // scheduler_perf's volume workloads: their pods have claims.
        let volumes = group.iter().any(|r| r.volumes.is_some());
        if volumes {
            targets.push_str(&target(
                "gantry >= 5 x kube-scheduler",
                |r| r.to_kube,
                |x| x >= 5.0,
            ));
            if rounds.iter().any(|r| r.tail_to_kube.is_some()) {
                targets.push_str(&target(
                    "over the last N bindings, gantry >= 5 x kube-scheduler",
                    |r| r.tail_to_kube,
                    |x| x >= 5.0,
                ));
            }
        } else if is_init(workload) {
            // Placing a workload's init pods is not what it measures.
        } else if workload.contains('/') {
            // scheduler_perf's workloads (`<test case>/<workload>`): issue 50 compares the two
            // schedulers on them and sets no target but correctness.
        } else if workload == GANGS {
            targets.push_str(&target(
                "gantry's gangs >= 0.8 x its plain pods/s",
                |r| r.gangs_to_plain,
                |x| x >= 0.8,
            ));
        } else if workload == "plain" {
            targets.push_str(&target(
                "gantry >= 0.9 x null binder",
                |r| r.to_null,
                |x| x >= 0.9,
            ));
            targets.push_str(&target(
                "gantry >= 3 x kube-scheduler",
                |r| r.to_kube,
                |x| x >= 3.0,
            ));
        } else {
            targets.push_str(&target(
                "gantry >= 5 x kube-scheduler",
                |r| r.to_kube,
                |x| x >= 5.0,
            ));
        }
        if !volumes && !is_init(workload) && workload != GANGS && !workload.contains('/') {
            targets.push_str(&target(
                "gantry's peak RSS <= 1/4 of kube-scheduler's",
                |r| r.rss,
                |x| x <= 0.25,
            ));
        }
        let gantry: Vec<bool> = group
            .iter()
            .filter(|r| r.scheduler == "gantry")
            .map(|r| r.correct())
            .collect();
        let correct = (!gantry.is_empty()).then(|| gantry.iter().all(|&ok| ok));
        let detail = if correct == Some(true) && gantry.len() > 1 {
            format!(" (every one of {} runs)", gantry.len())
        } else {
            String::new()
        };
        targets.push_str(&line(
            if volumes {
                "gantry: every pod bound exactly once, no over-committed node, every claim bound to its volume"
            } else if workload == GANGS {
                "gantry: every pod bound exactly once, no over-committed node, every gang bound whole"
            } else {
                "gantry: every pod bound exactly once, no over-committed node"
            },
            correct,
            detail,
        ));
    }
    out.push_str("\nTargets:\n");
    out.push_str(&targets);
    out
}

/// The gang workload's name, as `scripts/bench-cluster.sh` names it; judged against gantry's
/// runs of the plain workload.
const GANGS: &str = "gangs";

/// The workload name of the preemption workload's init runs (the scheduler placing the
/// low-priority pods), as `scripts/bench-preemption.sh` names it.
const PREEMPTION_INIT: &str = "preemption-init";

/// The name scripts/bench-scheduler-perf.sh gives the runs that place a workload's init pods:
/// the workload's, with this suffix.
const INIT_SUFFIX: &str = " (init)";

/// Whether `workload` names the runs placing a workload's init pods.
fn is_init(workload: &str) -> bool {
    workload == PREEMPTION_INIT || workload.ends_with(INIT_SUFFIX)
}

/// The preemption workload's measured runs: every run with its preemptors per second and
/// victims, the API server's writes per preemptor by kind, gantry's ratios to kube-scheduler
/// in each round, and issue 20's target judged on their median.
pub fn render_preemption(results: &[RunResult]) -> String {
    let mut out = String::from(
        "| nodes | preemptors | scheduler | preemptors/s | first binding (s) | last binding (s) | victims | victims / preemptor | victims (metric) | preemption attempts (metric) | API writes / preemptor | peak RSS (MiB) | scheduler CPU (s) | API server + etcd CPU (s) | other CPU (s) | load | correct |\n|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    let mut kinds: Vec<&str> = Vec::new();
    for r in results {
        for k in r.api_writes.keys() {
            if !kinds.contains(&k.as_str()) {
                kinds.push(k);
            }
        }
        let p = r.preemption.clone().unwrap_or_default();
        let per = |n: f64| (r.pods > 0).then(|| n / r.pods as f64);
        let server = match (r.apiserver_cpu_s, r.etcd_cpu_s) {
            (Some(a), Some(e)) => Some(a + e),
            _ => None,
        };
        let correct = if r.correct() {
            "yes".to_string()
        } else {
            format!(
                "NO: {}/{} bound, {} pods left unbound, {} over-committed nodes, {} rebound, {} deleted{}",
                r.bound,
                r.pods,
                r.check.pods - r.check.bound,
                r.check.overcommitted.len(),
                r.rebound,
                r.deleted,
                r.incomplete_reason
                    .as_deref()
                    .map(|why| format!(", {why}"))
                    .unwrap_or_default()
            )
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.nodes,
            r.pods,
            r.scheduler,
            num(r.pods_per_s, 1),
            num(r.first_binding_s, 2),
            num(r.last_binding_s, 1),
            p.victims,
            num(per(p.victims as f64), 2),
            num(p.victims_metric, 0),
            num(p.attempts_metric, 0),
            num(r.writes_per_pod(), 2),
            num(r.peak_rss_mib, 0),
            num(r.scheduler_cpu_s, 1),
            num(server, 1),
            num(r.other_cpu_s, 1),
            num(r.load_at_start, 1),
            correct,
        ));
    }
    kinds.sort_unstable();
    out.push_str("\nThe API server's write requests per preemptor, by kind:\n\n| scheduler |");
    for k in &kinds {
        out.push_str(&format!(" {k} |"));
    }
    out.push_str("\n|---|");
    out.push_str(&"---:|".repeat(kinds.len()));
    out.push('\n');
    for r in results {
        out.push_str(&format!("| {} |", r.scheduler));
        for k in &kinds {
            let n = r.api_writes.get(*k).copied().unwrap_or(0.0);
            out.push_str(&format!(
                " {} |",
                num((r.pods > 0).then(|| n / r.pods as f64), 2)
            ));
        }
        out.push('\n');
    }

    let mut sizes: Vec<usize> = results.iter().map(|r| r.nodes).collect();
    sizes.dedup();
    out.push_str("\n| nodes | round | preemptors/s: gantry / kube-scheduler | victims: gantry / kube-scheduler | peak RSS: gantry / kube-scheduler |\n|---:|---:|---:|---|---:|\n");
    let mut targets = String::new();
    for nodes in sizes {
        let of = |scheduler: &str| -> Vec<&RunResult> {
            results
                .iter()
                .filter(|r| r.nodes == nodes && r.scheduler == scheduler)
                .collect()
        };
        let (gantry, kube) = (of("gantry"), of("kube-scheduler"));
        let victims = |r: &RunResult| r.preemption.as_ref().map_or(0, |p| p.victims);
        let mut ratios = Vec::new();
        let mut fewer_victims = Vec::new();
        for (i, g) in gantry.iter().enumerate() {
            let k = kube.get(i);
            let r = ratio(g.pods_per_s, k.and_then(|k| k.pods_per_s));
            ratios.extend(r);
            // A run that did not bind every preemptor may have evicted fewer.
            if let Some(k) = k {
                fewer_victims.push(g.correct() && k.correct() && victims(g) <= victims(k));
            }
            out.push_str(&format!(
                "| {nodes} | {} | {} | {} / {} | {} |\n",
                i + 1,
                num(r, 2),
                victims(g),
                k.map_or_else(|| "-".to_string(), |k| victims(k).to_string()),
                num(ratio(g.peak_rss_mib, k.and_then(|k| k.peak_rss_mib)), 2),
            ));
        }
        let median = median(&ratios);
        let detail = match ratios.len() {
            0 | 1 => String::new(),
            n => format!(
                " (median {:.2} of {n} rounds; {} of {n} hold; {:.2} to {:.2})",
                median.unwrap_or_default(),
                ratios.iter().filter(|&&v| v >= 10.0).count(),
                ratios.iter().copied().fold(f64::INFINITY, f64::min),
                ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            ),
        };
        targets.push_str(&format!(
            "- {nodes} nodes, preemption: gantry >= 10 x kube-scheduler's preemptors/s: {}{detail}\n",
            verdict(median.map(|m| m >= 10.0))
        ));
        let fewer = (!fewer_victims.is_empty()).then(|| fewer_victims.iter().all(|&ok| ok));
        targets.push_str(&format!(
            "- {nodes} nodes, preemption: gantry's victims <= kube-scheduler's in every round: {}\n",
            verdict(fewer)
        ));
        let correct = (!gantry.is_empty()).then(|| gantry.iter().all(|r| r.correct()));
        targets.push_str(&format!(
            "- {nodes} nodes, preemption: gantry: every preemptor bound exactly once, every pod left bound, no over-committed node: {}\n",
            verdict(correct)
        ));
    }
    out.push_str("\nTargets:\n");
    out.push_str(&targets);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(scheduler: &str, pods_per_s: f64, rss: f64) -> RunResult {
        // CPU per pod: gantry 0.1 s, the null binder 0.2 s, kube-scheduler 0.4 s.
        let cpu = match scheduler {
            "gantry" => 0.5,
            "null" => 1.0,
            _ => 2.0,
        };
        RunResult {
            scheduler_cpu_s: Some(cpu),
            apiserver_cpu_s: Some(cpu / 2.0),
            etcd_cpu_s: Some(cpu / 2.0),
            cores: Some(2),
            scheduler: scheduler.to_string(),
            workload: "plain".to_string(),
            nodes: 5000,
            pods: 10,
            bound: 10,
            complete: true,
            pods_per_s: Some(pods_per_s),
            peak_rss_mib: Some(rss),
            bindings_created: Some(10.0),
            check: crate::check::Findings {
                pods: 10,
                bound: 10,
                ..Default::default()
            },
            ..RunResult::default()
        }
    }

    #[test]
    fn ratios_and_targets() {
        let text = render(&[
            result("null", 1000.0, 20.0),
            result("gantry", 950.0, 100.0),
            result("kube-scheduler", 300.0, 450.0),
        ]);
        assert!(
            text.contains("| 5000 | 10 | plain | 1 | 0.95 | 3.17 | 0.22 |"),
            "{text}"
        );
        assert!(text.contains("plain: gantry >= 0.9 x null binder: holds"));
        assert!(text.contains("plain: gantry >= 3 x kube-scheduler: holds"));
        assert!(text.contains("RSS <= 1/4 of kube-scheduler's: holds"));
        assert!(text.contains("no over-committed node: holds"));
    }

    #[test]
    fn rounds_pair_the_nth_runs_and_targets_take_the_median() {
        // Round 2 takes the schedulers in reverse order.
        let text = render(&[
            result("null", 1000.0, 20.0),
            result("gantry", 850.0, 100.0),
            result("gantry", 1000.0, 100.0),
            result("null", 1000.0, 20.0),
            result("null", 1000.0, 20.0),
            result("gantry", 930.0, 100.0),
        ]);
        assert!(text.contains("| plain | 1 | 0.85 |"), "{text}");
        assert!(text.contains("| plain | 2 | 1.00 |"), "{text}");
        assert!(text.contains("| plain | 3 | 0.93 |"), "{text}");
        assert!(
            text.contains(
                "gantry >= 0.9 x null binder: holds (median 0.93 of 3 rounds; 2 of 3 hold; 0.85 to 1.00)"
            ),
            "{text}"
        );
        assert!(text.contains("no over-committed node: holds (every one of 3 runs)"));
    }

    #[test]
    fn a_wrong_run_in_any_round_misses() {
        let mut wrong = result("gantry", 950.0, 100.0);
        wrong.rebound = 1;
        let text = render(&[
            result("null", 1000.0, 20.0),
            result("gantry", 950.0, 100.0),
            result("null", 1000.0, 20.0),
            wrong,
        ]);
        assert!(text.contains("no over-committed node: misses"), "{text}");
    }

    fn volume_result(scheduler: &str, pods_per_s: f64, tail_pods_per_s: f64) -> RunResult {
        RunResult {
            workload: "csi-pvs".to_string(),
            tail_pods: Some(4),
            tail_pods_per_s: Some(tail_pods_per_s),
            volumes: Some(crate::check::VolumeFindings {
                claims: 10,
                bound: 10,
                first_problem: None,
            }),
            ..result(scheduler, pods_per_s, 100.0)
        }
    }

    #[test]
    fn volume_workloads_are_judged_on_five_times_kube_scheduler_and_their_claims() {
        let text = render(&[
            volume_result("gantry", 600.0, 400.0),
            volume_result("kube-scheduler", 100.0, 100.0),
        ]);
        assert!(
            text.contains("| gantry | 600 | - | - | 400 (4) |"),
            "{text}"
        );
        assert!(
            text.contains("| 5000 | 10 | csi-pvs | 1 | - | 6.00 | 1.00 | - | 4.00 | 4.00 |"),
            "{text}"
        );
        assert!(text.contains("csi-pvs: gantry >= 5 x kube-scheduler: holds"));
        assert!(
            text.contains(
                "csi-pvs: over the last N bindings, gantry >= 5 x kube-scheduler: misses"
            )
        );
        assert!(text.contains("every claim bound to its volume: holds"));
        assert!(!text.contains("csi-pvs: gantry's peak RSS"));

        let mut unbound = volume_result("gantry", 600.0, 400.0);
        unbound.volumes = Some(crate::check::VolumeFindings {
            claims: 10,
            bound: 9,
            first_problem: Some("claim ns/pvc-3 is Some(\"Pending\"), not Bound".to_string()),
        });
        let text = render(&[unbound, volume_result("kube-scheduler", 100.0, 100.0)]);
        assert!(
            text.contains("9/10 claims bound to their volume (claim ns/pvc-3"),
            "{text}"
        );
        assert!(text.contains("every claim bound to its volume: misses"));
    }

    fn preemption_result(scheduler: &str, pods_per_s: f64, victims: usize) -> RunResult {
        RunResult {
            workload: "preemption".to_string(),
            api_writes: [
                ("DELETE pods".to_string(), 3.0 * 10.0),
                ("POST pods/binding".to_string(), 10.0),
            ]
            .into_iter()
            .collect(),
            preemption: Some(crate::measure::PreemptionFindings {
                init_pods: 40,
                victims,
                victims_seen: victims,
                ..Default::default()
            }),
            check: crate::check::Findings {
                pods: 50 - victims,
                bound: 50 - victims,
                ..Default::default()
            },
            ..result(scheduler, pods_per_s, 100.0)
        }
    }

    #[test]
    fn the_preemption_workload_is_judged_on_ten_times_and_its_victims() {
        let text = render(&[
            preemption_result("gantry", 500.0, 30),
            preemption_result("kube-scheduler", 40.0, 30),
            preemption_result("kube-scheduler", 50.0, 30),
            preemption_result("gantry", 450.0, 31),
        ]);
        assert!(text.contains("| 5000 | 10 | gantry | 500.0 |"), "{text}");
        assert!(text.contains("| 30 | 3.00 |"), "{text}");
        assert!(text.contains("| gantry | 3.00 | 1.00 |"), "{text}");
        assert!(
            text.contains("| 5000 | 1 | 12.50 | 30 / 30 | 1.00 |"),
            "{text}"
        );
        assert!(text.contains("| 5000 | 2 | 9.00 | 31 / 30 |"), "{text}");
        assert!(
            text.contains(
                "gantry >= 10 x kube-scheduler's preemptors/s: holds (median 10.75 of 2 rounds; 1 of 2 hold"
            ),
            "{text}"
        );
        assert!(text.contains("victims <= kube-scheduler's in every round: misses"));
        assert!(text.contains("no over-committed node: holds"));
        assert!(!text.contains("null binder"), "{text}");
    }

    fn gang_result(pods_per_s: f64, partial: bool) -> RunResult {
        RunResult {
            workload: "gangs".to_string(),
            gangs: Some(crate::gangs::GangFindings {
                groups: 2,
                whole: if partial { 1 } else { 2 },
                none: 0,
                first_partial: partial.then(|| "ns/gang-00001: 3 of 5 bound".to_string()),
            }),
            ..result("gantry", pods_per_s, 100.0)
        }
    }

    #[test]
    fn the_gang_workload_is_judged_against_gantry_on_the_plain_pods() {
        let text = render(&[
            result("null", 1000.0, 20.0),
            result("gantry", 1000.0, 100.0),
            gang_result(850.0, false),
            result("gantry", 1000.0, 100.0),
            result("null", 1000.0, 20.0),
            gang_result(750.0, false),
        ]);
        assert!(
            text.contains("| 5000 | 10 | gangs | 1 | - | - | - | - | - | - | 0.85 |"),
            "{text}"
        );
        assert!(
            text.contains("| gangs | 2 | - | - | - | - | - | - | 0.75 |"),
            "{text}"
        );
        assert!(
            text.contains(
                "gangs: gantry's gangs >= 0.8 x its plain pods/s: holds (median 0.80 of 2 rounds; 1 of 2 hold; 0.75 to 0.85)"
            ),
            "{text}"
        );
        assert!(
            text.contains("gangs: gantry: every pod bound exactly once, no over-committed node, every gang bound whole: holds"),
            "{text}"
        );
        assert!(!text.contains("gangs: gantry >= 5"), "{text}");
        assert!(!text.contains("gangs: gantry's peak RSS"), "{text}");

        let text = render(&[result("gantry", 1000.0, 100.0), gang_result(900.0, true)]);
        assert!(
            text.contains("1 of 2 gangs bound partly (ns/gang-00001: 3 of 5 bound)"),
            "{text}"
        );
        assert!(text.contains("every gang bound whole: misses"), "{text}");
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }

    #[test]
    fn a_missing_scheduler_is_not_measured_and_a_slow_one_misses() {
        let text = render(&[result("gantry", 500.0, 100.0), result("null", 1000.0, 20.0)]);
        assert!(
            text.contains("plain: gantry >= 0.9 x null binder: misses"),
            "{text}"
        );
        assert!(text.contains("plain: gantry >= 3 x kube-scheduler: not measured"));
    }

    #[test]
    fn an_incorrect_run_says_why() {
        let mut r = result("gantry", 950.0, 100.0);
        r.check.overcommitted.push(crate::check::Overcommit {
            node: "n1".to_string(),
            used: Default::default(),
            allocatable: Default::default(),
        });
        let text = render(&[r]);
        assert!(
            text.contains("NO: 10/10 bound, 1 over-committed nodes"),
            "{text}"
        );
        assert!(text.contains("no over-committed node: misses"));
    }
}
