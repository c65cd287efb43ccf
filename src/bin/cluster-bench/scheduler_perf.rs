//! `cluster-bench scheduler-perf`: replays one workload of kube-scheduler's own scheduler_perf
//! (a `performance-config.yaml` of `test/integration/scheduler_perf/` in the Kubernetes
//! module, its test case and workload named) against a real API server, in phases that
//! `scripts/bench-scheduler-perf.sh` runs around `cluster-bench run`:
//!
//! - `plan` prints what the script needs, as shell assignments: the node count, the namespace
//!   of the init pods the scheduler must place before the measurement, the measured
//!   namespace (that of the one `collectMetrics: true` createPods op), the other namespaces
//!   with pods (checked alongside), whether background ops run;
//! - `nodes` carries out the createNodes ops (once per control plane);
//! - `init` the ops before the measured one: namespaces, pods (pending), sleeps;
//! - `measured` creates the measured pods, pending;
//! - `background` runs the churn ops and the deletePods ops that do not wait (scheduler_perf
//!   runs both in the background, so they overlap the measured pods' scheduling) until SIGTERM,
//!   then deletes what its churn left.
//!
//! Barriers are not waited for here: every pod is created pending before a scheduler runs,
//! and the plan turns the barriers into which pods the init run must see bound (a pod of a
//! createPods op that waits, or behind a `Scheduled` barrier) and which may stay pending
//! (`Attempted`, such as gated pods). Ops after the measured one are refused.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::Client;
use kube::api::Api;

use crate::perf_background;
use crate::perf_config::{self, CreatePods, Op, Stage, Workload};
use crate::perf_objects;
use crate::populate::{create, create_all, create_namespace};

/// Arguments of `cluster-bench scheduler-perf`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to do.
    #[arg(value_enum)]
    phase: Phase,
    /// The `performance-config.yaml` (its template paths are relative to its folder).
    #[arg(long)]
    config: PathBuf,
    /// The test case (`name` of an entry), such as SchedulingBasic.
    #[arg(long)]
    test_case: String,
    /// The workload of the test case, such as 5000Nodes_10000Pods.
    #[arg(long)]
    workload: String,
    /// A workload parameter replaced, as NAME=NUMBER (for a smaller run).
    #[arg(long = "param", value_parser = parse_param)]
    params: Vec<(String, i64)>,
    /// Admin kubeconfig of the API server (every phase but `plan`).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Creates in flight at once.
    #[arg(long, default_value_t = crate::DEFAULT_CONCURRENCY)]
    concurrency: usize,
}

/// The phases of a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Phase {
    /// Print the workload's plan as shell assignments.
    Plan,
    /// Create the nodes.
    Nodes,
    /// Create what comes before the measured pods (their pods pending).
    Init,
    /// Create the measured pods (pending).
    Measured,
    /// Run the churn and non-waiting deletePods ops until SIGTERM.
    Background,
}

fn parse_param(text: &str) -> Result<(String, i64), String> {
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text}: expected NAME=NUMBER"))?;
    let value = value
        .parse()
        .map_err(|_| format!("{text}: {value} is not a number"))?;
    Ok((name.to_string(), value))
}

/// The workload split the way it is replayed.
#[derive(Debug, PartialEq)]
pub struct Plan {
    /// `<test case>/<workload>`.
    pub name: String,
    /// Nodes the createNodes ops make.
    pub nodes: usize,
    /// The namespace of the pods the scheduler must bind before the measurement, if any.
    pub init_namespace: Option<String>,
    /// How many.
    pub init_pods: usize,
    /// The measured op's namespace.
    pub measured_namespace: String,
    /// Its pods.
    pub measured_pods: usize,
    /// Every other namespace the workload puts pods in.
    pub other_namespaces: Vec<String>,
    /// Whether churn or deletePods ops run in the background.
    pub background: bool,
}

/// Runs one phase.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let overrides = args
        .params
        .iter()
        .map(|(k, v)| (k.clone(), serde_yaml::Value::from(*v)))
        .collect();
    let workload = perf_config::read(&args.config, &args.test_case, &args.workload, &overrides)?;
    let plan = plan(&workload)?;
    if args.phase == Phase::Plan {
        print!("{}", shell_assignments(&plan));
        return Ok(());
    }
    let kubeconfig = args
        .kubeconfig
        .as_ref()
        .with_context(|| format!("--kubeconfig is needed for {:?}", args.phase))?;
    let client = crate::client(kubeconfig).await?;
    match args.phase {
        Phase::Plan => Ok(()),
        Phase::Nodes => create_nodes(&client, &workload, args.concurrency).await,
        Phase::Init => run_init_ops(&client, &workload, args.concurrency).await,
        Phase::Measured => {
            let (index, op) = measured_op(&workload)?;
            create_pods(&client, op, index, args.concurrency).await
        }
        Phase::Background => perf_background::run(&client, &workload).await,
    }
}

/// The measured op (`collectMetrics: true`) and its index; exactly one is needed.
fn measured_op(workload: &Workload) -> anyhow::Result<(usize, &CreatePods)> {
    let mut measured = workload
        .ops
        .iter()
        .enumerate()
        .filter_map(|(i, op)| match op {
            Op::CreatePods(pods) if pods.collect_metrics => Some((i, pods)),
            _ => None,
        });
    let first = measured
        .next()
        .context("no createPods op with collectMetrics: true")?;
    if let Some((second, _)) = measured.next() {
        bail!("op {second} (createPods): a second op with collectMetrics: true is not replayed");
    }
    Ok(first)
}

/// The plan of `workload`; fails on an op in a place the replay cannot honour.
pub fn plan(workload: &Workload) -> anyhow::Result<Plan> {
    let (measured_index, measured) = measured_op(workload)?;
    if let Some((index, op)) = workload.ops.iter().enumerate().nth(measured_index + 1) {
        bail!(
            "op {index} ({}): ops after the measured createPods are not replayed",
            opcode(op)
        );
    }
    let mut nodes = 0;
    let mut background = false;
    // Pods per namespace, and whether the scheduler must bind them before the measurement.
    let mut pods: BTreeMap<String, (usize, bool)> = BTreeMap::new();
    let mut other = BTreeSet::new();
    for (index, op) in workload.ops[..measured_index].iter().enumerate() {
        match op {
            Op::CreateNodes(op) => nodes += op.count,
            Op::CreatePods(op) => {
                let entry = pods.entry(namespace_of(op)).or_default();
                entry.0 += op.count;
                entry.1 |= !op.skip_wait_to_completion;
            }
            Op::Barrier(barrier) if barrier.stage_requirement != Some(Stage::Attempted) => {
                for (namespace, entry) in pods.iter_mut() {
                    entry.1 |=
                        barrier.namespaces.is_empty() || barrier.namespaces.contains(namespace);
                }
            }
            Op::Churn(churn) => {
                background = true;
                other.extend(churn.namespace.clone());
            }
            Op::DeletePods(delete) if delete.skip_wait_to_completion => background = true,
            Op::DeletePods(_) => bail!(
                "op {index} (deletePods): only skipWaitToCompletion: true is replayed (the deletion overlapping the measurement)"
            ),
            Op::CreateNamespaces(_) | Op::Barrier(_) | Op::Sleep(_) => {}
        }
    }
    let mut bound: Vec<(&String, usize)> = pods
        .iter()
        .filter(|(_, (_, must_bind))| *must_bind)
        .map(|(namespace, (count, _))| (namespace, *count))
        .collect();
    if bound.len() > 1 {
        bail!(
            "init pods to place in {} namespaces; one is replayed",
            bound.len()
        );
    }
    let measured_namespace = namespace_of(measured);
    anyhow::ensure!(
        !pods.contains_key(&measured_namespace),
        "the measured namespace {measured_namespace} holds init pods too; the measurement needs it to itself"
    );
    other.extend(pods.keys().cloned());
    other.remove(&measured_namespace);
    let init = bound.pop();
    Ok(Plan {
        name: workload.name.clone(),
        nodes,
        init_namespace: init.map(|(namespace, _)| namespace.clone()),
        init_pods: init.map_or(0, |(_, count)| count),
        measured_namespace,
        measured_pods: measured.count,
        other_namespaces: other.into_iter().collect(),
        background,
    })
}

fn namespace_of(op: &CreatePods) -> String {
    op.namespace.clone().unwrap_or_default()
}

/// The op's opcode, for messages.
fn opcode(op: &Op) -> &'static str {
    match op {
        Op::CreateNodes(_) => "createNodes",
        Op::CreateNamespaces(_) => "createNamespaces",
        Op::CreatePods(_) => "createPods",
        Op::Barrier(_) => "barrier",
        Op::Churn(_) => "churn",
        Op::Sleep(_) => "sleep",
        Op::DeletePods(_) => "deletePods",
    }
}

/// `plan` as lines of `NAME=value` for the script to evaluate.
fn shell_assignments(plan: &Plan) -> String {
    format!(
        "PERF_NAME='{}'\nPERF_NODES={}\nPERF_INIT_NAMESPACE={}\nPERF_INIT_PODS={}\nPERF_MEASURED_NAMESPACE={}\nPERF_MEASURED_PODS={}\nPERF_OTHER_NAMESPACES='{}'\nPERF_BACKGROUND={}\n",
        plan.name,
        plan.nodes,
        plan.init_namespace.as_deref().unwrap_or_default(),
        plan.init_pods,
        plan.measured_namespace,
        plan.measured_pods,
        plan.other_namespaces.join(" "),
        if plan.background { "1" } else { "" },
    )
}

/// Carries out every createNodes op, numbering the nodes across them.
async fn create_nodes(
    client: &Client,
    workload: &Workload,
    concurrency: usize,
) -> anyhow::Result<()> {
    let mut made = 0;
    for (index, op) in workload.ops.iter().enumerate() {
        if let Op::CreateNodes(op) = op {
            let nodes = perf_objects::nodes(op, index, made)
                .with_context(|| format!("op {index} (createNodes)"))?;
            create_all(Api::<Node>::all(client.clone()), nodes, concurrency).await?;
            made += op.count;
        }
    }
    eprintln!("cluster-bench: {}: created {made} nodes", workload.name);
    Ok(())
}

/// Carries out the ops before the measured one, but the nodes and the background ops: the
/// namespaces, the pods (pending) and the sleeps.
async fn run_init_ops(
    client: &Client,
    workload: &Workload,
    concurrency: usize,
) -> anyhow::Result<()> {
    let (measured_index, _) = measured_op(workload)?;
    for (index, op) in workload.ops[..measured_index].iter().enumerate() {
        match op {
            Op::CreateNamespaces(op) => {
                for i in 0..op.count {
                    create_namespace(client, &format!("{}-{i}", op.prefix)).await?;
                }
            }
            Op::CreatePods(op) => create_pods(client, op, index, concurrency).await?,
            Op::Sleep(duration) => tokio::time::sleep(*duration).await,
            Op::CreateNodes(_) | Op::Barrier(_) | Op::Churn(_) | Op::DeletePods(_) => {}
        }
    }
    Ok(())
}

/// Creates createPods op `index`'s namespace, PriorityClasses and pods.
async fn create_pods(
    client: &Client,
    op: &CreatePods,
    index: usize,
    concurrency: usize,
) -> anyhow::Result<()> {
    let namespace = namespace_of(op);
    let (pods, classes) =
        perf_objects::pods(op, index).with_context(|| format!("op {index} (createPods)"))?;
    create_namespace(client, &namespace).await?;
    for class in &classes {
        create(&Api::<PriorityClass>::all(client.clone()), class).await?;
    }
    let start = std::time::Instant::now();
    create_all(
        Api::<Pod>::namespaced(client.clone(), &namespace),
        pods,
        concurrency,
    )
    .await?;
    eprintln!(
        "cluster-bench: created {} pods in {namespace} in {:.1}s",
        op.count,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn plan_of(template: &str) -> anyhow::Result<Plan> {
        let text = format!(
            "- name: T\n  workloadTemplate:\n{template}  workloads:\n  - name: W\n    params: {{nodes: 3, pods: 4}}\n"
        );
        let workload = perf_config::parse(&text, "T", "W", &BTreeMap::new(), Path::new("."))?;
        plan(&workload)
    }

    #[test]
    fn gated_pods_stay_out_of_the_init_run() {
        let plan = plan_of(
            "  - {opcode: createNodes, countParam: $nodes}
  - {opcode: createPods, countParam: $pods, skipWaitToCompletion: true}
  - {opcode: barrier, stageRequirement: Attempted}
  - {opcode: createPods, count: 5}
  - {opcode: deletePods, namespace: namespace-3, deletePodsPerSecond: 50, skipWaitToCompletion: true}
  - {opcode: createPods, count: 7, collectMetrics: true}
",
        )
        .unwrap();
        assert_eq!(
            plan,
            Plan {
                name: "T/W".to_string(),
                nodes: 3,
                init_namespace: Some("namespace-3".to_string()),
                init_pods: 5,
                measured_namespace: "namespace-5".to_string(),
                measured_pods: 7,
                other_namespaces: vec!["namespace-1".to_string(), "namespace-3".to_string()],
                background: true,
            }
        );
        assert!(
            shell_assignments(&plan).contains("PERF_OTHER_NAMESPACES='namespace-1 namespace-3'\n")
        );
    }

    #[test]
    fn misplaced_ops_are_refused() {
        let after = plan_of(
            "  - {opcode: createPods, count: 1, collectMetrics: true}
  - {opcode: sleep, duration: 1s}
",
        );
        assert!(format!("{:#}", after.unwrap_err()).contains("op 1 (sleep): ops after"));
        let none = plan_of("  - {opcode: createPods, count: 1}\n");
        assert!(
            format!("{:#}", none.unwrap_err()).contains("no createPods op with collectMetrics")
        );
        let waiting = plan_of(
            "  - {opcode: deletePods, namespace: x}
  - {opcode: createPods, count: 1, collectMetrics: true}
",
        );
        assert!(format!("{:#}", waiting.unwrap_err()).contains("op 0 (deletePods)"));
    }
}
