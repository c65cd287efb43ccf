//! `cluster-bench run`: one measured run. With the pods already created and pending, it
//! starts watching them, waits until the API server and etcd are idle, starts the scheduler
//! under test (the command after `--`), and records when each pod is seen bound. Once every
//! pod is bound (or the run times out or stalls) it reads the scheduler's metrics, memory and
//! CPU time, stops it, checks the placements (and, when the pods have claims, that each claim
//! is bound to its volume; when they name PodGroups, that each group is bound whole or not at
//! all) and writes one JSON result.
//!
//! "Start" is the moment the scheduler's process is started (just before `exec`): its own
//! startup (connecting, listing nodes and pods) counts, the same way for every scheduler.
//! Binding times are when the binding is seen on the watch.
//!
//! With `--preemption` (scheduler_perf's preemption workload) the namespace holds bound init
//! pods besides the pending ones: the run measures the pending pods only, counts the init
//! pods deleted meanwhile as the preemptions' victims, and reads the scheduler's preemption
//! metrics and the API server's write requests by resource.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::TryStreamExt;
use gantry_adapter::extender::NoVerification;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::Client;
use kube::api::{Api, ListParams, WatchParams};
use kube::core::{Request, WatchEvent};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::check::{self, Findings, OtherFindings, VolumeFindings};
use crate::gangs::{self, GangFindings};
use crate::procfs::{self, Proc};
use crate::prom;

/// How often the scheduler's memory is sampled and the run's end conditions are checked.
const TICK: Duration = Duration::from_millis(100);
/// Longest wait for the API server and etcd to become idle before a run.
const SETTLE_MAX: Duration = Duration::from_secs(90);
/// CPU seconds per second (API server and etcd together) below which they count as idle.
const IDLE_CPU: f64 = 0.15;
/// Pause after the last binding before the metrics are read, so that the scheduler has
/// recorded its last bindings.
const METRICS_DELAY: Duration = Duration::from_secs(1);
/// Longest wait for the API server's request counters to count every binding seen.
const COUNTS_SETTLE: Duration = Duration::from_secs(5);
/// How long a stopped scheduler may take to exit before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(30);
/// The pod scheduling SLI histogram, as gantry and kube-scheduler 1.37 name it.
const SLI_METRIC: &str = "scheduler_pod_scheduling_sli_duration_seconds";

/// Arguments of `cluster-bench run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Admin kubeconfig of the API server.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// The namespace of the pods.
    #[arg(long, default_value = crate::DEFAULT_NAMESPACE)]
    namespace: String,
    /// The scheduler's name in the result (null, gantry, kube-scheduler).
    #[arg(long)]
    scheduler: String,
    /// The workload's name in the result.
    #[arg(long)]
    workload: String,
    /// The number of nodes, for the result.
    #[arg(long)]
    nodes: usize,
    /// The scheduler's metrics URL, for the SLI histogram: `http://127.0.0.1:PORT/metrics`,
    /// or `https://` on a loopback address (kube-scheduler's secure port, whose self-signed
    /// certificate is taken unverified).
    #[arg(long)]
    metrics: Option<String>,
    /// kube-apiserver's pid: its CPU time, and the run waits until it is idle.
    #[arg(long)]
    apiserver_pid: Option<u32>,
    /// etcd's pid: likewise.
    #[arg(long)]
    etcd_pid: Option<u32>,
    /// Where to write the result (JSON).
    #[arg(long)]
    out: PathBuf,
    /// Where the scheduler's output goes.
    #[arg(long)]
    log: PathBuf,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 1800)]
    timeout: u64,
    /// Give up when no pod was bound (with `--preemption`, nor any init pod evicted) for this
    /// many seconds.
    #[arg(long, default_value_t = 120)]
    stall: u64,
    /// Also measure the rate of the last this many bindings: the pods scheduler_perf measures,
    /// which it creates after its init pods are placed.
    #[arg(long)]
    tail: Option<usize>,
    /// Record the scheduler with `perf record` into this file.
    #[arg(long)]
    perf: Option<PathBuf>,
    /// Record kube-apiserver (`--apiserver-pid`) with `perf record` into this file, over the
    /// same interval: where the API server's time goes while this scheduler runs.
    #[arg(long, requires = "apiserver_pid")]
    perf_apiserver: Option<PathBuf>,
    /// The options of `perf record` (besides the pid and the output file).
    #[arg(long, default_value = "-e cpu-clock -g", allow_hyphen_values = true)]
    perf_options: String,
    /// Where to write the API server's metrics (Prometheus text) after the last binding:
    /// its requests by verb, resource and duration, its watch events. They count since the
    /// API server started, so those read just before the scheduler starts go next to it
    /// (extension `.before.txt`): a run's requests are the difference.
    #[arg(long)]
    apiserver_metrics: Option<PathBuf>,
    /// The preemption workload: the pods bound already at the start are init pods, which
    /// the scheduler may evict; the pending ones are measured.
    #[arg(long)]
    preemption: bool,
    /// A command started right after the scheduler and stopped with it, split at whitespace
    /// like `--perf-options`: scheduler_perf's background ops (`cluster-bench scheduler-perf
    /// background`), which overlap the measured pods' scheduling. Its output goes next to the
    /// scheduler's log (extension `.companion.log`).
    #[arg(long, allow_hyphen_values = true)]
    companion: Option<String>,
    /// A namespace of the workload's other pods (init, gated, churn): they count in the
    /// allocatable check, and those with scheduling gates must stay pending.
    #[arg(long)]
    also_namespace: Vec<String>,
    /// The scheduler's command line.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// The result of one run; every duration is in seconds from the scheduler's start.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunResult {
    /// null, gantry or kube-scheduler.
    pub scheduler: String,
    /// plain or constrained.
    pub workload: String,
    /// Nodes in the cluster.
    pub nodes: usize,
    /// Pending pods at the start.
    pub pods: usize,
    /// Pods seen bound.
    pub bound: usize,
    /// Every pod was bound.
    pub complete: bool,
    /// Why the run ended before every pod was bound.
    pub incomplete_reason: Option<String>,
    /// First binding seen.
    pub first_binding_s: Option<f64>,
    /// Last binding seen.
    pub last_binding_s: Option<f64>,
    /// Pods bound per second, from the start to the last binding.
    pub pods_per_s: Option<f64>,
    /// Pods bound per second, from the first binding to the last.
    pub pods_per_s_after_first: Option<f64>,
    /// The bindings `tail_pods_per_s` counts: the last ones (`--tail`).
    #[serde(default)]
    pub tail_pods: Option<usize>,
    /// Pods bound per second over the last `tail_pods` bindings: from the binding before
    /// them to the last.
    #[serde(default)]
    pub tail_pods_per_s: Option<f64>,
    /// The scheduler's peak resident memory (`VmHWM`), MiB.
    pub peak_rss_mib: Option<f64>,
    /// The histogram the SLI quantiles come from.
    pub sli_metric: Option<String>,
    /// Median of the pod scheduling SLI (from the scheduler's histogram).
    pub sli_p50_s: Option<f64>,
    /// 99th percentile of the pod scheduling SLI (from the scheduler's histogram).
    pub sli_p99_s: Option<f64>,
    /// Median time from the start to a pod's binding, as seen on the watch.
    pub seen_p50_s: Option<f64>,
    /// 99th percentile of the same.
    pub seen_p99_s: Option<f64>,
    /// The scheduler's CPU time from its start until the last binding was seen (what comes
    /// after, such as events held back until then, is not counted here or below).
    pub scheduler_cpu_s: Option<f64>,
    /// The scheduler's CPU time by thread (name without its number).
    #[serde(default)]
    pub scheduler_threads_cpu_s: BTreeMap<String, f64>,
    /// kube-apiserver's CPU time over the same interval.
    pub apiserver_cpu_s: Option<f64>,
    /// etcd's CPU time over the same interval.
    pub etcd_cpu_s: Option<f64>,
    /// This tool's CPU time over the same interval (its watch).
    pub bench_cpu_s: Option<f64>,
    /// CPU time of everything else on the machine over the same interval: other jobs
    /// sharing the cores.
    pub other_cpu_s: Option<f64>,
    /// The 1-minute load average when the scheduler started.
    pub load_at_start: Option<f64>,
    /// The machine's cores.
    #[serde(default)]
    pub cores: Option<usize>,
    /// Bindings the API server accepted (201), from its own metrics.
    pub bindings_created: Option<f64>,
    /// Bindings it refused or failed (any other code).
    pub bindings_rejected: Option<f64>,
    /// Events the API server created (both event APIs) by the time the last binding was
    /// seen.
    #[serde(default)]
    pub events_created: Option<f64>,
    /// Pods seen bound to one node and later to another (must be 0).
    pub rebound: usize,
    /// Pods deleted during the run (must be 0).
    pub deleted: usize,
    /// The placement check.
    pub check: Findings,
    /// The volume check, when the pods have claims.
    #[serde(default)]
    pub volumes: Option<VolumeFindings>,
    /// The gang check, when the pods name PodGroups: every group bound whole or not at all.
    #[serde(default)]
    pub gangs: Option<GangFindings>,
    /// The other namespaces' pods (`--also-namespace`), when the run has some.
    #[serde(default)]
    pub others: Option<OtherFindings>,
    /// The API server's write requests during the run (from its start to the last binding
    /// seen, plus the wait for its counters), by verb and resource, as "PATCH pods/status".
    #[serde(default)]
    pub api_writes: BTreeMap<String, f64>,
    /// The preemption workload's figures, in a run with `--preemption`.
    #[serde(default)]
    pub preemption: Option<PreemptionFindings>,
}

/// What a run of the preemption workload found besides the bindings.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PreemptionFindings {
    /// Init pods (bound) at the start.
    pub init_pods: usize,
    /// Init pods gone at the end: the victims.
    pub victims: usize,
    /// Init pods seen deleted on the watch by the last binding.
    pub victims_seen: usize,
    /// The scheduler's `scheduler_preemption_attempts_total`.
    pub attempts_metric: Option<f64>,
    /// The sum of its `scheduler_preemption_victims` histogram: the victims it chose.
    pub victims_metric: Option<f64>,
    /// The count of that histogram: the preemptions it decided.
    pub preemptions_metric: Option<f64>,
}

impl RunResult {
    /// CPU seconds per bound pod of the scheduler, the API server and etcd together.
    pub fn cpu_per_pod_s(&self) -> Option<f64> {
        let total = self.scheduler_cpu_s? + self.apiserver_cpu_s? + self.etcd_cpu_s?;
        (self.bound > 0).then(|| total / self.bound as f64)
    }

    /// The pods per second the machine's cores would bind if the three used them alone at
    /// the CPU cost per pod measured: the throughput without the other jobs of a shared
    /// machine, when CPU is what limits it.
    pub fn cpu_bound_pods_per_s(&self) -> Option<f64> {
        let per_pod = self.cpu_per_pod_s()?;
        let cores = self.cores? as f64;
        (per_pod > 0.0).then(|| cores / per_pod)
    }

    /// Every pod bound exactly once, none on an over-committed or unknown node, every claim
    /// bound to its volume, every gang bound whole or not at all. With the preemption workload, every measured pod bound once and
    /// none deleted, and every pod left (the init pods not evicted too) bound.
    pub fn correct(&self) -> bool {
        let all_bound = match self.preemption {
            Some(_) => self.check.bound == self.check.pods,
            None => self.check.bound == self.pods,
        };
        self.complete
            && self.rebound == 0
            && self.deleted == 0
            && self.check.overcommitted.is_empty()
            && self.check.on_unknown_nodes == 0
            && all_bound
            && self.bindings_created.is_none_or(|n| n == self.pods as f64)
            && self.volumes.as_ref().is_none_or(VolumeFindings::ok)
            && self.gangs.as_ref().is_none_or(GangFindings::ok)
            && self.others.as_ref().is_none_or(|o| o.gated_bound == 0)
    }

    /// Write requests to the API server per bound pod.
    pub fn writes_per_pod(&self) -> Option<f64> {
        let total: f64 = self.api_writes.values().sum();
        (self.bound > 0 && total > 0.0).then(|| total / self.bound as f64)
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
struct MiniMeta {
    #[serde(default)]
    name: String,
    #[serde(default, rename = "resourceVersion")]
    resource_version: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct MiniSpec {
    #[serde(default, rename = "nodeName")]
    node_name: Option<String>,
}

/// The part of a pod the watch needs; decoding only this keeps the tool's CPU use low.
#[derive(Debug, Clone, Deserialize)]
struct MiniPod {
    #[serde(default)]
    metadata: MiniMeta,
    #[serde(default)]
    spec: MiniSpec,
}

#[derive(Debug, Deserialize)]
struct MiniPodList {
    metadata: MiniMeta,
    items: Vec<MiniPod>,
}

/// What the watch reports: a pod seen bound (name, node, when), a pod deleted (name).
enum Seen {
    Bound(String, String, Instant),
    Deleted(String),
}

/// One measured run.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let client = crate::client(&args.kubeconfig).await?;
    let path = format!("/api/v1/namespaces/{}/pods", args.namespace);
    let (list, measured) = pending_pods(&client, &path, &args).await?;
    let pods = measured.len();
    let init_pods = list.items.len() - pods;
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let watcher = tokio::spawn(watch(
        client.clone(),
        path,
        list.metadata.resource_version,
        seen_tx,
    ));
    settle(args.apiserver_pid, args.etcd_pid).await;
    // The API server's counters run since it started, across runs: this run's are the
    // difference from here.
    let (counts0, text0) = apiserver_counts(&client).await?;
    if let Some(out) = &args.apiserver_metrics {
        let before = out.with_extension("before.txt");
        std::fs::write(&before, text0)
            .with_context(|| format!("cannot write {}", before.display()))?;
    }

    let cpu0 = CpuSpent::now(&args);
    let load_at_start = procfs::load_average();
    let log = std::fs::File::create(&args.log)
        .with_context(|| format!("cannot create {}", args.log.display()))?;
    let t0 = Instant::now();
    let mut child = Command::new(&args.command[0])
        .args(&args.command[1..])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("cannot start {:?}", args.command))?;
    let pid = child.id();
    let companion = match &args.companion {
        Some(line) => Some(start_companion(line, &args.log)?),
        None => None,
    };
    let mut perf = match &args.perf {
        Some(out) => Some(start_perf(pid, out, &args.perf_options)?),
        None => None,
    };
    let mut perf_apiserver = match (&args.perf_apiserver, args.apiserver_pid) {
        (Some(out), Some(api)) => Some(start_perf(api, out, &args.perf_options)?),
        _ => None,
    };

    let mut result = RunResult {
        scheduler: args.scheduler.clone(),
        workload: args.workload.clone(),
        nodes: args.nodes,
        pods,
        load_at_start,
        preemption: args.preemption.then(|| PreemptionFindings {
            init_pods,
            ..PreemptionFindings::default()
        }),
        cores: std::thread::available_parallelism().ok().map(|n| n.get()),
        ..RunResult::default()
    };
    let mut bound: HashMap<String, (String, Duration)> = HashMap::with_capacity(pods);
    let mut last_progress = t0;
    let mut hwm_kib = 0;
    let mut tick = tokio::time::interval(TICK);
    while bound.len() < pods {
        tokio::select! {
            event = seen.recv() => match event {
                // An init pod changed (its status patched by a preemption).
                Some(Seen::Bound(name, _, _)) if !measured.contains(&name) => {}
                Some(Seen::Bound(name, node, at)) => {
                    let at = at.saturating_duration_since(t0);
                    match bound.get(&name) {
                        Some((n, _)) if *n != node => result.rebound += 1,
                        Some(_) => {}
                        None => {
                            bound.insert(name, (node, at));
                            last_progress = Instant::now();
                        }
                    }
                }
                Some(Seen::Deleted(name)) => {
                    if measured.contains(&name) {
                        result.deleted += 1;
                    } else if let Some(p) = result.preemption.as_mut() {
                        // A scheduler may evict for every preemptor before it binds the
                        // first: an eviction is progress too.
                        p.victims_seen += 1;
                        last_progress = Instant::now();
                    }
                }
                None => {
                    result.incomplete_reason = Some("the watch stopped".to_string());
                    break;
                }
            },
            _ = tick.tick() => {
                if let Some(kib) = Proc(Some(pid)).status_kib("VmHWM") {
                    hwm_kib = hwm_kib.max(kib);
                }
                if let Ok(Some(status)) = child.try_wait() {
                    result.incomplete_reason = Some(format!("the scheduler exited: {status}"));
                    break;
                }
                if t0.elapsed() > Duration::from_secs(args.timeout) {
                    result.incomplete_reason = Some(format!("timed out after {} s", args.timeout));
                    break;
                }
                if last_progress.elapsed() > Duration::from_secs(args.stall) {
                    result.incomplete_reason =
                        Some(format!("no binding for {} s", args.stall));
                    break;
                }
            }
        }
    }
    // Every CPU figure stops here, when the last binding is seen.
    cpu0.record_since(&args, pid, &mut result);
    result.bound = bound.len();
    result.complete = bound.len() == pods;
    if let Some(perf) = perf_apiserver.take() {
        stop(perf, "perf");
    }
    record_api_counts(&client, &counts0, &args, &mut result).await?;
    tokio::time::sleep(METRICS_DELAY).await;

    if let Some(kib) = Proc(Some(pid)).status_kib("VmHWM") {
        hwm_kib = hwm_kib.max(kib);
    }
    result.peak_rss_mib = (hwm_kib > 0).then(|| hwm_kib as f64 / 1024.0);
    if let Some(url) = &args.metrics {
        read_scheduler_metrics(url, &mut result).await;
    }
    if let Some(perf) = perf.take() {
        stop(perf, "perf");
    }
    stop(child, &args.scheduler);
    watcher.abort();

    let times: Vec<f64> = bound.values().map(|(_, at)| at.as_secs_f64()).collect();
    record_binding_times(times, args.tail, &mut result);
    let others = list_pods(&client, &args.also_namespace).await;
    // Stopped once the other pods are listed (at its stop it deletes what its churn made),
    // whether or not they could be.
    if let Some(companion) = companion {
        stop(companion, "the companion");
    }
    let others = others?;
    check_cluster(client, &args, &measured, &others, &mut result).await?;

    let json = serde_json::to_string_pretty(&result)?;
    std::fs::write(&args.out, json + "\n")
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    print_summary(&result);
    Ok(())
}

/// The run's namespace's pods (at `path`), and the names of the pending ones, which the run
/// measures; bound ones are a preemption workload's init pods, refused otherwise.
async fn pending_pods(
    client: &Client,
    path: &str,
    args: &Args,
) -> anyhow::Result<(MiniPodList, HashSet<String>)> {
    let list: MiniPodList = client
        .request(Request::new(path).list(&ListParams::default())?)
        .await
        .context("cannot list pods")?;
    let measured: HashSet<String> = list
        .items
        .iter()
        .filter(|p| p.spec.node_name.is_none())
        .map(|p| p.metadata.name.clone())
        .collect();
    let init_pods = list.items.len() - measured.len();
    anyhow::ensure!(
        !measured.is_empty(),
        "no pending pods in namespace {}",
        args.namespace
    );
    anyhow::ensure!(
        init_pods == 0 || args.preemption,
        "{init_pods} of {} pods are bound already",
        list.items.len()
    );
    Ok((list, measured))
}

/// The CPU seconds spent so far by the API server, etcd, this process and the machine, from
/// which a run's own are counted.
struct CpuSpent {
    apiserver: Option<f64>,
    etcd: Option<f64>,
    bench: Option<f64>,
    machine: Option<f64>,
}

impl CpuSpent {
    fn now(args: &Args) -> CpuSpent {
        CpuSpent {
            apiserver: process_cpu(args.apiserver_pid),
            etcd: process_cpu(args.etcd_pid),
            bench: Proc(None).cpu_seconds(),
            machine: procfs::machine_busy_seconds(),
        }
    }

    /// Records in `result` the CPU spent since `self` by the scheduler (process `pid`), the
    /// API server, etcd, this process and the rest of the machine.
    fn record_since(&self, args: &Args, pid: u32, result: &mut RunResult) {
        result.scheduler_cpu_s = Proc(Some(pid)).cpu_seconds();
        result.scheduler_threads_cpu_s = procfs::thread_cpu_seconds(pid);
        let delta = |now: Option<f64>, before: Option<f64>| Some(now? - before?);
        result.apiserver_cpu_s = delta(process_cpu(args.apiserver_pid), self.apiserver);
        result.etcd_cpu_s = delta(process_cpu(args.etcd_pid), self.etcd);
        result.bench_cpu_s = delta(Proc(None).cpu_seconds(), self.bench);
        result.other_cpu_s = (|| {
            let busy = delta(procfs::machine_busy_seconds(), self.machine)?;
            let ours = result.scheduler_cpu_s? + result.apiserver_cpu_s? + result.etcd_cpu_s?;
            Some((busy - ours - result.bench_cpu_s?).max(0.0))
        })();
    }
}

/// The CPU seconds process `pid` has spent, if there is one.
fn process_cpu(pid: Option<u32>) -> Option<f64> {
    pid.and_then(|p| Proc(Some(p)).cpu_seconds())
}

/// Records in `result` the API server's requests since `counts0` (bindings, events,
/// writes), and writes its metrics where asked. The API server counts a request once its
/// response is written, which may be after the watch has shown its effect: they are read
/// again until the bindings counted catch up with the pods seen bound (or COUNTS_SETTLE has
/// passed).
async fn record_api_counts(
    client: &Client,
    counts0: &ApiCounts,
    args: &Args,
    result: &mut RunResult,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + COUNTS_SETTLE;
    let (counts, text) = loop {
        let (counts, text) = apiserver_counts(client).await?;
        let counts = counts.since(counts0);
        if counts.bindings_created >= result.bound as f64 || Instant::now() >= deadline {
            break (counts, text);
        }
        tokio::time::sleep(TICK).await;
    };
    if let Some(out) = &args.apiserver_metrics {
        std::fs::write(out, text).with_context(|| format!("cannot write {}", out.display()))?;
    }
    result.bindings_created = Some(counts.bindings_created);
    result.bindings_rejected = Some(counts.bindings_rejected);
    result.events_created = Some(counts.events_created);
    result.api_writes = counts.writes;
    Ok(())
}

/// Reads the scheduling SLI and the preemption counters from the scheduler's metrics at
/// `url` into `result`; a scheduler that cannot be read leaves them out.
async fn read_scheduler_metrics(url: &str, result: &mut RunResult) {
    let text = match http_get(url).await {
        Ok(text) => text,
        Err(e) => {
            eprintln!("cluster-bench: cannot read {url}: {e:#}");
            return;
        }
    };
    let samples = prom::parse(&text);
    if let Some(h) = prom::histogram(&samples, SLI_METRIC) {
        result.sli_metric = Some(SLI_METRIC.to_string());
        result.sli_p50_s = prom::quantile(0.5, &h);
        result.sli_p99_s = prom::quantile(0.99, &h);
    }
    if let Some(p) = result.preemption.as_mut() {
        let present = |name: &str| samples.iter().any(|s| s.name == name);
        let read = |name: &str| present(name).then(|| prom::sum(&samples, name, &[]));
        p.attempts_metric = read("scheduler_preemption_attempts_total");
        p.victims_metric = read("scheduler_preemption_victims_sum");
        p.preemptions_metric = read("scheduler_preemption_victims_count");
    }
}

/// Records in `result` the rates and times of the bindings seen at `times` (seconds from the
/// scheduler's start), and over the last `tail` of them when asked.
fn record_binding_times(mut times: Vec<f64>, tail: Option<usize>, result: &mut RunResult) {
    times.sort_by(f64::total_cmp);
    let (Some(&first), Some(&last)) = (times.first(), times.last()) else {
        return;
    };
    result.first_binding_s = Some(first);
    result.last_binding_s = Some(last);
    result.pods_per_s = Some(times.len() as f64 / last.max(1e-9));
    if times.len() > 1 && last > first {
        result.pods_per_s_after_first = Some((times.len() - 1) as f64 / (last - first));
    }
    if let Some(tail) = tail.filter(|&n| n > 0 && n < times.len()) {
        let before = times[times.len() - 1 - tail];
        result.tail_pods = Some(tail);
        result.tail_pods_per_s = (last > before).then(|| tail as f64 / (last - before));
    }
    result.seen_p50_s = Some(rank(&times, 0.5));
    result.seen_p99_s = Some(rank(&times, 0.99));
}

/// Checks the cluster after the run into `result`: no node over capacity, the other
/// namespaces' pods, gangs whole, preemption victims, volumes bound as claimed.
async fn check_cluster(
    client: Client,
    args: &Args,
    measured: &HashSet<String>,
    others: &[Pod],
    result: &mut RunResult,
) -> anyhow::Result<()> {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("cannot list nodes")?
        .items;
    let pods_now = Api::<Pod>::namespaced(client.clone(), &args.namespace)
        .list(&ListParams::default())
        .await
        .context("cannot list pods")?
        .items;
    result.check = check::check(&nodes, &pods_now, others).map_err(anyhow::Error::msg)?;
    result.others = (!args.also_namespace.is_empty()).then(|| check::others(others));
    result.gangs = gangs::check(&pods_now);
    if let Some(p) = result.preemption.as_mut() {
        let left = pods_now
            .iter()
            .filter(|pod| {
                pod.metadata
                    .name
                    .as_ref()
                    .is_some_and(|n| !measured.contains(n))
            })
            .count();
        p.victims = p.init_pods.saturating_sub(left);
    }
    let claimed = pods_now.iter().any(|p| {
        p.spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .any(|v| v.persistent_volume_claim.is_some())
    });
    if claimed {
        let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &args.namespace)
            .list(&ListParams::default())
            .await
            .context("cannot list claims")?
            .items;
        let volumes = Api::<PersistentVolume>::all(client)
            .list(&ListParams::default())
            .await
            .context("cannot list volumes")?
            .items;
        result.volumes = check::volumes(&pods_now, &claims, &volumes);
    }
    Ok(())
}

/// One line on stderr: what ran, how fast, how much memory, and whether it was correct.
fn print_summary(result: &RunResult) {
    eprintln!(
        "cluster-bench: {} {} {} nodes: {}/{} bound, {} pods/s{}, first binding {} s, peak RSS {} MiB{}, {}",
        result.scheduler,
        result.workload,
        result.nodes,
        result.bound,
        result.pods,
        fmt(result.pods_per_s, 0),
        match result.tail_pods {
            Some(n) => format!(" ({} over the last {n})", fmt(result.tail_pods_per_s, 0)),
            None => String::new(),
        },
        fmt(result.first_binding_s, 2),
        fmt(result.peak_rss_mib, 0),
        match &result.preemption {
            Some(p) => format!(", {} victims", p.victims),
            None => String::new(),
        },
        if result.correct() {
            "correct".to_string()
        } else {
            format!("NOT CORRECT: {result:?}")
        },
    );
}

fn fmt(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.decimals$}"))
}

/// The value of rank `q` (nearest rank) in sorted `values`.
fn rank(values: &[f64], q: f64) -> f64 {
    let i = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[i - 1]
}

/// Waits until the API server and etcd use less than [`IDLE_CPU`] for two seconds in a row
/// (after creating thousands of objects they compact and settle), at most [`SETTLE_MAX`].
async fn settle(apiserver: Option<u32>, etcd: Option<u32>) {
    let pids: Vec<Proc> = [apiserver, etcd]
        .into_iter()
        .flatten()
        .map(|p| Proc(Some(p)))
        .collect();
    if pids.is_empty() {
        return;
    }
    let total = || pids.iter().filter_map(Proc::cpu_seconds).sum::<f64>();
    let start = Instant::now();
    let mut before = total();
    let mut quiet = 0;
    while quiet < 2 && start.elapsed() < SETTLE_MAX {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = total();
        quiet = if now - before < IDLE_CPU {
            quiet + 1
        } else {
            0
        };
        before = now;
    }
    eprintln!(
        "cluster-bench: API server and etcd {} after {:.0}s",
        if quiet >= 2 { "idle" } else { "still busy" },
        start.elapsed().as_secs_f64()
    );
}

/// Watches the pods from `version` on and reports every pod seen bound and every deletion;
/// reconnects when a watch ends, and relists when its version is too old.
async fn watch(client: Client, path: String, mut version: String, tx: mpsc::UnboundedSender<Seen>) {
    loop {
        let request =
            match Request::new(&path).watch(&WatchParams::default().timeout(290), &version) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("cluster-bench: bad watch request: {e}");
                    return;
                }
            };
        let stream = match client.request_events::<MiniPod>(request).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("cluster-bench: watch failed: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let mut stream = std::pin::pin!(stream);
        let mut gone = false;
        while let Ok(Some(event)) = stream.try_next().await {
            let now = Instant::now();
            match event {
                WatchEvent::Added(p) | WatchEvent::Modified(p) => {
                    version = p.metadata.resource_version;
                    if let Some(node) = p.spec.node_name {
                        let _ = tx.send(Seen::Bound(p.metadata.name, node, now));
                    }
                }
                WatchEvent::Deleted(p) => {
                    version = p.metadata.resource_version;
                    let _ = tx.send(Seen::Deleted(p.metadata.name));
                }
                WatchEvent::Bookmark(b) => version = b.metadata.resource_version,
                WatchEvent::Error(status) => {
                    gone = status.code == 410;
                    break;
                }
            }
        }
        if gone {
            // Too old to resume: relist; pods bound meanwhile are timed now.
            match client
                .request::<MiniPodList>(match Request::new(&path).list(&ListParams::default()) {
                    Ok(r) => r,
                    Err(_) => return,
                })
                .await
            {
                Ok(list) => {
                    let now = Instant::now();
                    for p in list.items {
                        if let Some(node) = p.spec.node_name {
                            let _ = tx.send(Seen::Bound(p.metadata.name, node, now));
                        }
                    }
                    version = list.metadata.resource_version;
                }
                Err(e) => eprintln!("cluster-bench: relist failed: {e}"),
            }
        }
        if tx.is_closed() {
            return;
        }
    }
}

/// What the API server's request counters say.
struct ApiCounts {
    bindings_created: f64,
    bindings_rejected: f64,
    events_created: f64,
    /// Write requests by verb and resource ("POST pods/binding").
    writes: BTreeMap<String, f64>,
}

impl ApiCounts {
    /// The requests counted since `before`.
    fn since(&self, before: &ApiCounts) -> ApiCounts {
        ApiCounts {
            bindings_created: self.bindings_created - before.bindings_created,
            bindings_rejected: self.bindings_rejected - before.bindings_rejected,
            events_created: self.events_created - before.events_created,
            writes: self
                .writes
                .iter()
                .map(|(k, v)| (k.clone(), v - before.writes.get(k).copied().unwrap_or(0.0)))
                .filter(|(_, v)| *v > 0.0)
                .collect(),
        }
    }
}

/// Bindings the API server accepted and those it did not, and the events it created, since
/// it started; with the metrics' text.
async fn apiserver_counts(client: &Client) -> anyhow::Result<(ApiCounts, String)> {
    // A GET of /metrics: a "list" without parameters is exactly that.
    let request = Request::new("/metrics").list(&ListParams::default())?;
    let text = client
        .request_text(request)
        .await
        .context("cannot read the API server's metrics")?;
    let samples = prom::parse(&text);
    let requests = "apiserver_request_total";
    let binding = [
        ("resource", "pods"),
        ("subresource", "binding"),
        ("verb", "POST"),
    ];
    let all = prom::sum(&samples, requests, &binding);
    let created = prom::sum(
        &samples,
        requests,
        &[binding[0], binding[1], binding[2], ("code", "201")],
    );
    let events = prom::sum(
        &samples,
        requests,
        &[("resource", "events"), ("verb", "POST"), ("code", "201")],
    );
    let mut writes = BTreeMap::new();
    for s in samples.iter().filter(|s| s.name == requests) {
        let verb = s.label("verb").unwrap_or_default();
        if !matches!(verb, "POST" | "PUT" | "PATCH" | "DELETE") {
            continue;
        }
        let resource = s.label("resource").unwrap_or_default();
        let key = match s.label("subresource").filter(|r| !r.is_empty()) {
            Some(sub) => format!("{verb} {resource}/{sub}"),
            None => format!("{verb} {resource}"),
        };
        *writes.entry(key).or_insert(0.0) += s.value;
    }
    let counts = ApiCounts {
        bindings_created: created,
        bindings_rejected: all - created,
        events_created: events,
        writes,
    };
    Ok((counts, text))
}

/// GET of a scheduler's metrics endpoint: over plain HTTP (gantry's, `--secure-port 0`), or
/// over HTTPS on a loopback address only (kube-scheduler's secure port: its certificate is
/// self-signed, made in memory when it starts, so there is nothing to verify it against and
/// [`unverified_tls`] takes it as it is).
async fn http_get(url: &str) -> anyhow::Result<String> {
    use http_body_util::{BodyExt, Empty};
    use hyper::body::Bytes;
    use hyper_util::client::legacy::Client as HttpClient;
    use hyper_util::rt::TokioExecutor;

    let uri: hyper::Uri = url.parse().with_context(|| format!("invalid URL {url}"))?;
    anyhow::ensure!(
        uri.scheme_str() != Some("https") || is_loopback(&uri),
        "{url}: HTTPS without certificate verification is for loopback addresses only"
    );
    let client =
        HttpClient::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(unverified_tls()?);
    let body = tokio::time::timeout(Duration::from_secs(10), async {
        let response = client.get(uri).await?;
        anyhow::ensure!(response.status().is_success(), "HTTP {}", response.status());
        Ok(response.into_body().collect().await?.to_bytes())
    })
    .await
    .context("no answer within 10 s")??;
    Ok(String::from_utf8(body.to_vec())?)
}

/// Whether `uri`'s host is a loopback IP address (127.0.0.0/8 or `[::1]`); a name is not,
/// whatever it resolves to.
fn is_loopback(uri: &hyper::Uri) -> bool {
    uri.host()
        .map(|host| host.trim_start_matches('[').trim_end_matches(']'))
        .and_then(|host| host.parse::<std::net::IpAddr>().ok())
        .is_some_and(|ip| ip.is_loopback())
}

/// A connector for plain HTTP, and for HTTPS without verifying the server's certificate (only
/// its handshake signatures): [`http_get`] uses it for loopback addresses only.
fn unverified_tls() -> anyhow::Result<HttpsConnector<HttpConnector>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("TLS")?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
        .with_no_client_auth();
    Ok(HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_or_http()
        .enable_http1()
        .build())
}

/// The pods of `namespaces`.
async fn list_pods(client: &Client, namespaces: &[String]) -> anyhow::Result<Vec<Pod>> {
    let mut pods = Vec::new();
    for namespace in namespaces {
        let listed = Api::<Pod>::namespaced(client.clone(), namespace)
            .list(&ListParams::default())
            .await
            .with_context(|| format!("cannot list the pods of {namespace}"))?;
        pods.extend(listed.items);
    }
    Ok(pods)
}

/// Starts the companion command `line` (split at whitespace), its output in `log` with the
/// extension `.companion.log`.
fn start_companion(line: &str, log: &std::path::Path) -> anyhow::Result<Child> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let (program, arguments) = words.split_first().context("--companion is empty")?;
    let path = log.with_extension("companion.log");
    let out = std::fs::File::create(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    Command::new(program)
        .args(arguments)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .with_context(|| format!("cannot start the companion {line}"))
}

/// Starts `perf record` with `options` on `pid`, its output in `out`.
fn start_perf(pid: u32, out: &std::path::Path, options: &str) -> anyhow::Result<Child> {
    Command::new("perf")
        .arg("record")
        .args(options.split_whitespace())
        .arg("-p")
        .arg(pid.to_string())
        .arg("-o")
        .arg(out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start perf")
}

/// Stops `child` with SIGTERM (SIGINT for perf, which then writes its data), waits for it, and
/// kills it after [`STOP_GRACE`].
fn stop(mut child: Child, what: &str) {
    let signal = if what == "perf" { "-INT" } else { "-TERM" };
    let _ = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status();
    let deadline = Instant::now() + STOP_GRACE;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("cluster-bench: {what} ignored the signal for {STOP_GRACE:?}; killing it");
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_addresses_are_loopback() {
        let loopback = |url: &str| is_loopback(&url.parse().unwrap());
        assert!(loopback("https://127.0.0.1:10259/metrics"));
        assert!(loopback("https://127.1.2.3:10259/metrics"));
        assert!(loopback("https://[::1]:10259/metrics"));
        assert!(!loopback("https://localhost:10259/metrics"));
        assert!(!loopback("https://10.0.0.1:10259/metrics"));
        assert!(!loopback("https://scheduler.example:10259/metrics"));
    }
}
