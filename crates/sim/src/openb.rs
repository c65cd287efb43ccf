//! The openb GPU-sharing trace (Alibaba, published with FGD: Weng et al., "Beware of
//! Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent",
//! USENIX ATC 2023) and the paper's experiment, replayed through gantry's scheduling core.
//!
//! The experiment: the pod list, sorted by name, is shuffled with a seed; pods drawn at random
//! (same seed) from the list are appended until the GPU requested would exceed 1.3 times the
//! cluster's GPU capacity. Pods arrive one by one and never leave; each is placed or fails,
//! without retry. After each arrival the allocated share of the cluster's GPU milli is
//! recorded against the share that has arrived; the reported figures are the allocation at
//! 100% and 130% arrival (the mean over the arrivals that round to that percentage, as the
//! paper's scripts compute it), the GPUs left unallocated, and FGD's fragmentation measure.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::quality::{Attempts, PlacementQuality};
use gantry_core::config::Config;
use gantry_core::framework::Registry;
use gantry_core::model::echo::echo;
use gantry_core::model::gpu::{
    GPU_MILLI_ANNOTATION, GPU_MODEL_ANNOTATION, GPU_PRODUCT_LABEL, GPU_RESOURCE, MAX_GPUS_PER_NODE,
    MILLI_PER_GPU,
};
use gantry_core::model::pod_group::{POD_GROUP_LABEL, PodGroupModel};
use gantry_core::model::{NodeModel, PodInfo};
use gantry_core::plugins::gpu_share::workload::{ShapeKey, TypicalWorkload};
use gantry_core::plugins::gpu_share::{self, Policy};
use gantry_core::plugins::{coscheduling, default_binder, node_resources_fit, priority_sort};
use gantry_core::scheduler::{Attempt, Scheduler};

mod plot;

/// How much GPU (relative to the cluster's capacity) the experiment's workload asks for.
pub const TUNE_RATIO: f64 = 1.3;
/// The arrival percentages the experiment reports.
pub const REPORTED_ARRIVALS: [usize; 2] = [100, 130];
/// The arrival percentages the table's curve shows, every [`CURVE_TABLE_STEP`] points (the
/// JSON and the plot have every point).
const CURVE_TABLE_ARRIVALS: std::ops::RangeInclusive<usize> = 10..=130;
/// Spacing of the table's curve points.
const CURVE_TABLE_STEP: usize = 10;
/// Pods a node of the trace can hold (the reference's node objects say 1001).
const NODE_POD_CAPACITY: &str = "1001";
/// The most memory a trace row may give, in MiB: the largest byte count a quantity holds.
const MAX_MEMORY_MIB: i64 = i64::MAX >> 20;

/// A trace that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum OpenbError {
    /// The file could not be read.
    #[error("cannot read {path}: {error}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// A line or column is malformed.
    #[error("{path}:{line}: {reason}")]
    Invalid {
        /// The file.
        path: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The experiment cannot be configured (a bug, not bad input).
    #[error("experiment configuration: {0}")]
    Config(String),
}

/// A node of the trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceNode {
    /// Name (`sn`).
    pub name: String,
    /// cpu in millicores.
    pub cpu_milli: i64,
    /// Memory in MiB.
    pub memory_mib: i64,
    /// Number of GPUs.
    pub gpus: u32,
    /// GPU model (empty for a CPU node).
    pub model: String,
}

/// A pod of the trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracePod {
    /// Name.
    pub name: String,
    /// cpu in millicores.
    pub cpu_milli: i64,
    /// Memory in MiB.
    pub memory_mib: i64,
    /// Number of GPUs.
    pub num_gpu: u32,
    /// Milli of each GPU (1000 is a whole GPU).
    pub gpu_milli: u32,
    /// Accepted GPU models, `|`-separated (empty: any).
    pub gpu_spec: String,
}

impl TracePod {
    /// GPU milli requested in total.
    pub fn total_gpu_milli(&self) -> u64 {
        u64::from(self.num_gpu) * u64::from(self.gpu_milli)
    }
}

/// A CSV row: its line number and cells.
type Row = (usize, Vec<String>);

/// Reads a CSV file into its header and rows.
fn read_csv(path: &Path) -> Result<(Vec<String>, Vec<Row>), OpenbError> {
    let text = std::fs::read_to_string(path).map_err(|error| OpenbError::Read {
        path: path.display().to_string(),
        error,
    })?;
    let mut lines = gantry_core::config::yaml::strip_bom(&text)
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let header: Vec<String> = lines
        .next()
        .map(|(_, l)| l.split(',').map(|c| c.trim().to_string()).collect())
        .unwrap_or_default();
    let rows = lines
        .map(|(i, l)| (i + 1, l.split(',').map(|c| c.trim().to_string()).collect()))
        .collect();
    Ok((header, rows))
}

struct Columns<'a> {
    path: &'a Path,
    header: &'a [String],
}

impl Columns<'_> {
    fn index(&self, name: &str, required: bool) -> Result<Option<usize>, OpenbError> {
        match self.header.iter().position(|h| h == name) {
            Some(i) => Ok(Some(i)),
            None if !required => Ok(None),
            None => Err(OpenbError::Invalid {
                path: self.path.display().to_string(),
                line: 1,
                reason: format!("missing column {name:?}"),
            }),
        }
    }

    /// The number in column `col` (0 when empty), at most `max`.
    fn number<T: std::str::FromStr + PartialOrd + std::fmt::Display>(
        &self,
        row: &Row,
        col: Option<usize>,
        name: &str,
        max: T,
    ) -> Result<T, OpenbError> {
        let text = col.and_then(|c| row.1.get(c)).map_or("", String::as_str);
        let text = if text.is_empty() { "0" } else { text };
        let invalid = |what: &str| OpenbError::Invalid {
            path: self.path.display().to_string(),
            line: row.0,
            reason: format!("column {name}: {} {what}", echo(text)),
        };
        if text.starts_with('-') {
            return Err(invalid("is not a non-negative integer"));
        }
        let value: T = text
            .parse()
            .map_err(|_| invalid("is not a non-negative integer"))?;
        if value > max {
            return Err(invalid(&format!("is more than {max}")));
        }
        Ok(value)
    }
}

/// Reads a node list (`sn,cpu_milli,memory_mib,gpu,model`).
pub fn load_nodes(path: &Path) -> Result<Vec<TraceNode>, OpenbError> {
    let (header, rows) = read_csv(path)?;
    let c = Columns {
        path,
        header: &header,
    };
    let (sn, cpu, mem, gpu, model) = (
        c.index("sn", true)?,
        c.index("cpu_milli", true)?,
        c.index("memory_mib", true)?,
        c.index("gpu", true)?,
        c.index("model", false)?,
    );
    rows.iter()
        .map(|row| {
            Ok(TraceNode {
                name: sn.and_then(|i| row.1.get(i)).cloned().unwrap_or_default(),
                cpu_milli: c.number(row, cpu, "cpu_milli", i64::MAX)?,
                memory_mib: c.number(row, mem, "memory_mib", MAX_MEMORY_MIB)?,
                gpus: c.number(row, gpu, "gpu", MAX_GPUS_PER_NODE as u32)?,
                model: model
                    .and_then(|i| row.1.get(i))
                    .cloned()
                    .unwrap_or_default(),
            })
        })
        .collect()
}

/// Reads a pod list (`name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...]`).
pub fn load_pods(path: &Path) -> Result<Vec<TracePod>, OpenbError> {
    let (header, rows) = read_csv(path)?;
    let c = Columns {
        path,
        header: &header,
    };
    let (name, cpu, mem, num, milli, spec) = (
        c.index("name", true)?,
        c.index("cpu_milli", true)?,
        c.index("memory_mib", true)?,
        c.index("num_gpu", true)?,
        c.index("gpu_milli", true)?,
        c.index("gpu_spec", false)?,
    );
    rows.iter()
        .map(|row| {
            let pod = TracePod {
                name: name.and_then(|i| row.1.get(i)).cloned().unwrap_or_default(),
                cpu_milli: c.number(row, cpu, "cpu_milli", i64::MAX)?,
                memory_mib: c.number(row, mem, "memory_mib", MAX_MEMORY_MIB)?,
                num_gpu: c.number(row, num, "num_gpu", MAX_GPUS_PER_NODE as u32)?,
                gpu_milli: c.number(row, milli, "gpu_milli", u32::MAX)?,
                gpu_spec: spec.and_then(|i| row.1.get(i)).cloned().unwrap_or_default(),
            };
            if pod.gpu_milli > MILLI_PER_GPU
                || (pod.num_gpu > 1 && pod.gpu_milli < MILLI_PER_GPU && pod.gpu_milli > 0)
            {
                return Err(OpenbError::Invalid {
                    path: path.display().to_string(),
                    line: row.0,
                    reason: format!(
                        "gpu_milli {} with num_gpu {}: shares are of one GPU, at most 1000",
                        pod.gpu_milli, pod.num_gpu
                    ),
                });
            }
            Ok(pod)
        })
        .collect()
}

fn quantity(s: String) -> Quantity {
    Quantity(s)
}

/// The Kubernetes Node a trace node stands for: cpu, memory, pods and `nvidia.com/gpu`
/// allocatable, the GPU model as `nvidia.com/gpu.product`.
pub fn node_object(n: &TraceNode) -> core::Node {
    let mut node = core::Node::default();
    node.metadata.name = Some(n.name.clone());
    if !n.model.is_empty() {
        node.metadata.labels = Some(BTreeMap::from([(
            GPU_PRODUCT_LABEL.to_string(),
            n.model.clone(),
        )]));
    }
    let mut alloc = BTreeMap::from([
        ("cpu".to_string(), quantity(format!("{}m", n.cpu_milli))),
        (
            "memory".to_string(),
            quantity(format!("{}Mi", n.memory_mib)),
        ),
        ("pods".to_string(), quantity(NODE_POD_CAPACITY.to_string())),
    ]);
    if n.gpus > 0 {
        alloc.insert(GPU_RESOURCE.to_string(), quantity(n.gpus.to_string()));
    }
    node.status = Some(core::NodeStatus {
        allocatable: Some(alloc),
        ..Default::default()
    });
    node
}

/// How the replay writes the trace's GPUs and GPU requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Terms {
    /// GPU feature discovery's labels and gantry's annotations (`gantry.io/gpu-milli`).
    #[default]
    Gantry,
    /// HAMi's: each node's GPUs registered as HAMi's device plugin registers them, each share
    /// asked as HAMi's users ask it, `gpu_milli` as both its memory and its compute
    /// percentage (as the trace's authors define a share).
    Hami,
}

/// Memory of every GPU of a node in HAMi's terms, in MiB (the trace gives none; shares are
/// asked as percentages of it).
const HAMI_DEVICE_MIB: u64 = 16384;
/// Pods that may share one GPU in HAMi's terms: more than any GPU of the trace takes, so that
/// only memory and compute bound the shares (HAMi's `deviceSplitCount`).
const HAMI_DEVICE_SHARES: u32 = 100;

/// [`node_object`] in HAMi's terms: its GPUs registered in `hami.io/node-nvidia-register`
/// (UUID `GPU-<node>-<i>`, the trace's model, [`HAMI_DEVICE_MIB`], compute 100,
/// [`HAMI_DEVICE_SHARES`] shares), `nvidia.com/gpu` as HAMi's device plugin offers it.
pub fn hami_node_object(n: &TraceNode) -> core::Node {
    use gantry_core::model::hami::{self, RegisteredDevice};
    let mut node = node_object(n);
    if n.gpus == 0 {
        return node;
    }
    let devices: Vec<RegisteredDevice> = (0..n.gpus)
        .map(|i| RegisteredDevice {
            uuid: format!("GPU-{}-{i}", n.name),
            index: i,
            shares: HAMI_DEVICE_SHARES,
            memory_mib: HAMI_DEVICE_MIB,
            cores: hami::FULL_CORES,
            model: n.model.clone(),
            numa: 0,
            mode: hami::HAMI_CORE_MODE.to_string(),
            healthy: true,
        })
        .collect();
    node.metadata.labels = None;
    node.metadata.annotations = Some(BTreeMap::from([(
        hami::REGISTER_ANNOTATION.to_string(),
        hami::encode_registration(&devices),
    )]));
    if let Some(alloc) = node.status.as_mut().and_then(|s| s.allocatable.as_mut()) {
        alloc.insert(
            GPU_RESOURCE.to_string(),
            quantity((u64::from(n.gpus) * u64::from(HAMI_DEVICE_SHARES)).to_string()),
        );
    }
    node
}

/// [`pod_object`] in HAMi's terms: a share of one GPU as `nvidia.com/gpu: 1` with
/// `nvidia.com/gpumem-percentage` and `nvidia.com/gpucores` both `gpu_milli / 10` (rounded
/// up; every `gpu_milli` of the trace is a multiple of 10, so they are exact); whole GPUs as
/// `nvidia.com/gpu` alone, as HAMi's users ask them; models as
/// `gantry.io/gpu-model`, which holds on HAMi's devices too.
pub fn hami_pod_object(p: &TracePod, namespace: &str) -> core::Pod {
    use gantry_core::model::hami;
    let mut pod = pod_object(p, namespace);
    if p.num_gpu == 0 || p.gpu_milli == 0 || p.gpu_milli >= MILLI_PER_GPU {
        return pod;
    }
    if let Some(a) = pod.metadata.annotations.as_mut() {
        a.remove(GPU_MILLI_ANNOTATION);
    }
    let percent = p.gpu_milli.div_ceil(10).to_string();
    if let Some(requests) = pod
        .spec
        .as_mut()
        .and_then(|s| s.containers.first_mut())
        .and_then(|c| c.resources.as_mut())
        .and_then(|r| r.requests.as_mut())
    {
        requests.insert(GPU_RESOURCE.to_string(), quantity("1".to_string()));
        requests.insert(
            hami::MEMORY_PERCENTAGE_RESOURCE.to_string(),
            quantity(percent.clone()),
        );
        requests.insert(hami::CORES_RESOURCE.to_string(), quantity(percent));
    }
    pod
}

/// The Kubernetes Pod a trace pod stands for: cpu and memory requests; whole GPUs as
/// `nvidia.com/gpu`, a share of one as `gantry.io/gpu-milli`; models as `gantry.io/gpu-model`.
pub fn pod_object(p: &TracePod, namespace: &str) -> core::Pod {
    let mut pod = core::Pod::default();
    pod.metadata.name = Some(p.name.clone());
    pod.metadata.namespace = Some(namespace.to_string());
    let mut requests = BTreeMap::from([
        ("cpu".to_string(), quantity(format!("{}m", p.cpu_milli))),
        (
            "memory".to_string(),
            quantity(format!("{}Mi", p.memory_mib)),
        ),
    ]);
    let mut annotations = BTreeMap::new();
    if p.num_gpu > 0 && p.gpu_milli > 0 {
        if p.gpu_milli >= MILLI_PER_GPU {
            requests.insert(GPU_RESOURCE.to_string(), quantity(p.num_gpu.to_string()));
        } else {
            annotations.insert(GPU_MILLI_ANNOTATION.to_string(), p.gpu_milli.to_string());
        }
        if !p.gpu_spec.is_empty() {
            annotations.insert(GPU_MODEL_ANNOTATION.to_string(), p.gpu_spec.clone());
        }
    }
    if !annotations.is_empty() {
        pod.metadata.annotations = Some(annotations);
    }
    pod.spec = Some(core::PodSpec {
        containers: vec![core::Container {
            name: "main".to_string(),
            resources: Some(core::ResourceRequirements {
                requests: Some(requests),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    });
    pod
}

/// A trace ready for experiments: the cluster and the pod list in the scheduler's model.
#[derive(Debug, Clone)]
pub struct Trace {
    /// Nodes.
    pub nodes: Vec<NodeModel>,
    /// Pods, sorted by name, with the GPU milli each asks for in total.
    pub pods: Vec<(Arc<PodInfo>, u64)>,
    /// The cluster's GPU milli.
    pub capacity_milli: u64,
}

impl Trace {
    /// Converts the trace's nodes and pods (pods are sorted by name, as the experiment's
    /// shuffle starts from that order).
    pub fn new(nodes: &[TraceNode], pods: &[TracePod]) -> Result<Self, OpenbError> {
        Trace::in_terms(nodes, pods, Terms::Gantry)
    }

    /// [`Trace::new`], the GPUs and requests written in `terms`.
    pub fn in_terms(
        nodes: &[TraceNode],
        pods: &[TracePod],
        terms: Terms,
    ) -> Result<Self, OpenbError> {
        let node_of = match terms {
            Terms::Gantry => node_object,
            Terms::Hami => hami_node_object,
        };
        let pod_of = match terms {
            Terms::Gantry => pod_object,
            Terms::Hami => hami_pod_object,
        };
        let nodes: Vec<NodeModel> = nodes
            .iter()
            .map(|n| {
                NodeModel::from_api(&node_of(n)).map_err(|e| OpenbError::Config(e.to_string()))
            })
            .collect::<Result<_, _>>()?;
        let mut sorted: Vec<&TracePod> = pods.iter().collect();
        sorted.sort_by(|a, b| a.name.cmp(&b.name));
        let pods = sorted
            .into_iter()
            .map(|p| {
                PodInfo::from_api(&pod_of(p, "openb"))
                    .map(|info| (Arc::new(info), p.total_gpu_milli()))
                    .map_err(|e| OpenbError::Config(e.to_string()))
            })
            .collect::<Result<_, _>>()?;
        let capacity_milli = nodes
            .iter()
            .map(|n| n.gpu.count as u64 * u64::from(MILLI_PER_GPU))
            .sum();
        Ok(Trace {
            nodes,
            pods,
            capacity_milli,
        })
    }

    /// FGD's typical workload of the pod list: the most frequent shapes covering 95%.
    pub fn typical_workload(&self) -> TypicalWorkload {
        let mut counts: BTreeMap<ShapeKey, f64> = BTreeMap::new();
        for (p, _) in &self.pods {
            if let Some(s) = ShapeKey::of(p) {
                *counts.entry(s).or_default() += 1.0;
            }
        }
        TypicalWorkload::from_counts(
            counts,
            f64::from(gpu_share::DEFAULT_COVERAGE_PERCENT) / 100.0,
        )
    }

    /// The nodes of the experiment with `seed`: as the reference simulator does, each node's
    /// name is prefixed with its place in a random permutation (`0042-openb-node-0007`), which
    /// makes the order in which equally scored nodes are preferred differ from seed to seed.
    pub fn nodes_for(&self, seed: u64) -> Vec<NodeModel> {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x6e6f_6465_7321);
        let mut perm: Vec<usize> = (0..self.nodes.len()).collect();
        perm.shuffle(&mut rng);
        let mut sorted: Vec<&NodeModel> = self.nodes.iter().collect();
        sorted.sort_by(|a, b| a.name.cmp(&b.name));
        sorted
            .into_iter()
            .zip(perm)
            .map(|(n, p)| {
                let mut n = n.clone();
                let name = format!("{p:04}-{}", n.name);
                n.name_hash = gantry_core::model::node::name_hash(&name);
                n.name = Arc::from(name);
                n
            })
            .collect()
    }

    /// The arrivals of the experiment with `seed`: indices into [`Trace::pods`], the whole
    /// list shuffled, then random draws until the GPU asked for would exceed
    /// [`TUNE_RATIO`] times the capacity (or, for a list asking for more, the shuffled list
    /// with random pods removed until it does not).
    pub fn arrivals(&self, seed: u64) -> Vec<usize> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut order: Vec<usize> = (0..self.pods.len()).collect();
        order.shuffle(&mut rng);
        let target = TUNE_RATIO * self.capacity_milli as f64;
        let mut total: u64 = self.pods.iter().map(|(_, m)| m).sum();
        if self.pods.is_empty() {
            return order;
        }
        if total as f64 > target {
            while total as f64 > target && !order.is_empty() {
                let i = rng.random_range(0..order.len());
                total -= self.pods[order.remove(i)].1;
            }
            return order;
        }
        loop {
            let i = rng.random_range(0..self.pods.len());
            let m = self.pods[i].1;
            if (total + m) as f64 > target {
                break;
            }
            total += m;
            order.push(i);
        }
        order
    }
}

/// What to run: a policy, with its typical workload given or learned.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicySpec {
    /// The name reported.
    pub label: String,
    /// `GpuShareArgs` for the plugin.
    pub args: serde_json::Value,
}

impl PolicySpec {
    /// `policy` as the paper ran it: for FGD, the typical workload is the trace's own pod
    /// list, given in the configuration; other policies use the plugin's defaults.
    pub fn published(policy: Policy, trace: &Trace) -> Self {
        let mut args = serde_json::json!({ "scoringStrategy": policy.name() });
        if policy.uses_fragmentation() {
            args["typicalPods"] = typical_pods_json(&trace.typical_workload());
        }
        PolicySpec {
            label: policy.name().to_string(),
            args,
        }
    }

    /// `policy` with every setting at the plugin's default (a learned typical workload).
    pub fn default_args(policy: Policy) -> Self {
        PolicySpec {
            label: policy.name().to_string(),
            args: serde_json::json!({ "scoringStrategy": policy.name() }),
        }
    }
}

/// A typical workload as `GpuShareArgs.typicalPods`.
pub fn typical_pods_json(w: &TypicalWorkload) -> serde_json::Value {
    w.shapes()
        .iter()
        .map(|(s, weight)| {
            serde_json::json!({
                "cpuMilli": s.cpu,
                "gpuCount": s.count,
                "gpuMilli": s.milli,
                "gpuMemoryMib": s.memory_mib,
                "gpuModels": s.models.iter().map(|m| m.to_string()).collect::<Vec<_>>(),
                "weight": weight,
            })
        })
        .collect()
}

/// The `percentageOfNodesToScore` of the paper's experiment: every node scored.
pub const EXPERIMENT_PERCENTAGE: u32 = 100;

/// The scheduler configuration of the experiment: one profile with only what the
/// experiment checks (cpu, memory and pod count by NodeResourcesFit's filter, GPUs by
/// GpuShare, which alone scores), `percentage` of the nodes scored (the paper's
/// [`EXPERIMENT_PERCENTAGE`], or 0 for kube-scheduler's adaptive share); with `gangs`,
/// Coscheduling sorts the queue (in PrioritySort's place) and places gangs whole.
pub fn experiment_config(
    args: &serde_json::Value,
    gangs: bool,
    percentage: u32,
    registry: &Registry,
) -> Result<Config, OpenbError> {
    let sort = if gangs {
        coscheduling::NAME
    } else {
        priority_sort::NAME
    };
    let config = serde_json::json!({
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "percentageOfNodesToScore": percentage,
        "profiles": [{
            "schedulerName": "default-scheduler",
            "plugins": {
                "multiPoint": {
                    "enabled": [
                        {"name": sort},
                        {"name": node_resources_fit::NAME},
                        {"name": gpu_share::NAME},
                        {"name": default_binder::NAME}
                    ],
                    "disabled": [{"name": "*"}]
                },
                "score": {"disabled": [{"name": node_resources_fit::NAME}]},
                "preScore": {"disabled": [{"name": node_resources_fit::NAME}]}
            },
            "pluginConfig": [{"name": gpu_share::NAME, "args": args}]
        }]
    });
    Config::parse(&config.to_string(), registry).map_err(|e| OpenbError::Config(e.to_string()))
}

/// One experiment's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// The seed.
    pub seed: u64,
    /// Allocation ratio (% of the cluster's GPU milli) at each arrival percentage 0..=130,
    /// `None` where no arrival rounds to it.
    pub curve: Vec<Option<f64>>,
    /// Allocation ratio at the end (130% arrived).
    pub final_alloc: f64,
    /// GPUs (in whole-GPU units) left unallocated at the end.
    pub unallocated_gpus: f64,
    /// FGD's fragmentation of the cluster at the end, in GPU milli, against the trace's
    /// typical workload.
    pub frag_milli: f64,
    /// That fragmentation as a share (%) of the idle GPU milli.
    pub frag_ratio: f64,
    /// Pods that arrived.
    pub pods: usize,
    /// Pods that could not be placed.
    pub failed: usize,
    /// Pods placed and not placed by the GPU milli each asks for in all (0: no GPU, below
    /// 1,000: a share of one GPU, multiples of 1,000: whole GPUs): which requests the end of
    /// the experiment turned away.
    pub by_request: BTreeMap<u64, Outcome>,
    /// The partly used GPUs at the end by their free milli: the shape of what stays idle.
    pub holes: BTreeMap<u32, usize>,
    /// GPUs (in whole-GPU units) the shares placed would leave idle on the GPUs they use if
    /// they were packed offline with all of them known (best-fit decreasing, cpu and
    /// memory not counted): the online placement's idle share milli against a
    /// clairvoyant packing of the same pods.
    pub offline_share_idle_gpus: f64,
    /// Pods placed and not, in the order they arrived, and how many were placed before
    /// the first that found no place.
    pub attempts: Attempts,
    /// How the pods are spread over the nodes at the end (nodes used, cpu and memory
    /// allocation across nodes, skew of pods over nodes).
    pub quality: PlacementQuality,
    /// Wall time of the scheduling loop, in seconds.
    pub wall_seconds: f64,
    /// CPU time of the scheduling loop (the thread that ran it), in seconds.
    pub cpu_seconds: f64,
}

/// How many pods of one request were placed and how many were not.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Outcome {
    /// Pods placed.
    pub placed: usize,
    /// Pods that found no place.
    pub failed: usize,
}

impl RunResult {
    /// The allocation ratio at `arrival` percent (0 when unrecorded).
    pub fn alloc_at(&self, arrival: usize) -> f64 {
        self.curve.get(arrival).copied().flatten().unwrap_or(0.0)
    }
}

/// Runs the experiment with `seed` under the policy `args` through the scheduling core,
/// scoring `percentage` of the nodes (`percentageOfNodesToScore`; the paper's is
/// [`EXPERIMENT_PERCENTAGE`]). With `gang_size` (2 or more), the pods asking for more than
/// one GPU arrive in gangs of that many (consecutive such pods, each gang a PodGroup of
/// that `minMember`; the last, shorter one of what is left): a gang's pods are placed all
/// together or none is, as distributed training jobs need.
pub fn run(
    trace: &Trace,
    args: &serde_json::Value,
    seed: u64,
    gang_size: Option<u32>,
    percentage: u32,
    registry: &Registry,
) -> Result<RunResult, OpenbError> {
    let gang_size = gang_size.filter(|n| *n >= 2);
    let config = experiment_config(args, gang_size.is_some(), percentage, registry)?;
    let mut sched = Scheduler::new(config, None);
    let now = Duration::ZERO;
    for n in trace.nodes_for(seed) {
        sched.upsert_node(n, now);
    }
    let namespace = format!("openb-{seed}");
    let arrivals = trace.arrivals(seed);
    let capacity = trace.capacity_milli.max(1) as f64;
    let mut points: Vec<(f64, f64)> = Vec::with_capacity(arrivals.len());
    let (mut arrived, mut allocated, mut failed) = (0u64, 0u64, 0usize);
    let start = Instant::now();
    let cpu_start = cpu_time::ThreadTime::now();
    let mut gang: Vec<(Arc<PodInfo>, u64)> = Vec::new();
    let mut gangs = 0usize;
    let mut by_request: BTreeMap<u64, Outcome> = BTreeMap::new();
    let mut attempts = Attempts::default();
    for (k, &i) in arrivals.iter().enumerate() {
        let (template, milli) = &trace.pods[i];
        let mut pod = (**template).clone();
        pod.namespace.clone_from(&namespace);
        pod.name = format!("{}-{k}", template.name);
        arrived += milli;
        let in_gang = gang_size.is_some()
            && matches!(template.gpu.request, gantry_core::model::gpu::GpuRequest::Whole(n) if n > 1);
        let batch = if in_gang {
            gang.push((Arc::new(pod), *milli));
            let last = k + 1 == arrivals.len();
            if gang.len() < gang_size.unwrap_or(0) as usize && !last {
                points.push((
                    100.0 * arrived as f64 / capacity,
                    100.0 * allocated as f64 / capacity,
                ));
                continue;
            }
            gangs += 1;
            std::mem::take(&mut gang)
        } else {
            vec![(Arc::new(pod), *milli)]
        };
        let (placed, lost) = place(
            &mut sched,
            batch,
            in_gang.then_some(gangs),
            now,
            (&mut by_request, &mut attempts),
        )?;
        allocated += placed;
        failed += lost;
        points.push((
            100.0 * arrived as f64 / capacity,
            100.0 * allocated as f64 / capacity,
        ));
    }
    if !gang.is_empty() {
        let (placed, lost) = place(
            &mut sched,
            std::mem::take(&mut gang),
            Some(gangs + 1),
            now,
            (&mut by_request, &mut attempts),
        )?;
        allocated += placed;
        failed += lost;
    }
    let wall_seconds = start.elapsed().as_secs_f64();
    let cpu_seconds = cpu_start.elapsed().as_secs_f64();
    let typical = trace.typical_workload();
    let (mut frag, mut idle) = (0.0, 0.0);
    let mut holes: BTreeMap<u32, usize> = BTreeMap::new();
    for info in sched.cache().nodes() {
        let table = typical.table(info.node.gpu.model.as_deref(), info.node.gpu.memory_mib);
        let free: Vec<u32> = {
            let mut f: Vec<u32> = (0..info.gpu_used.len()).map(|d| info.gpu_free(d)).collect();
            f.sort_unstable_by(|a, b| b.cmp(a));
            f
        };
        idle += f64::from(free.iter().sum::<u32>());
        for f in free.iter().filter(|f| **f > 0 && **f < MILLI_PER_GPU) {
            *holes.entry(*f).or_default() += 1;
        }
        frag += table.fragmentation(
            info.node.allocatable.milli_cpu - info.requested.milli_cpu,
            &free,
        );
    }
    let final_alloc = 100.0 * allocated as f64 / capacity;
    Ok(RunResult {
        seed,
        curve: curve(&points),
        final_alloc,
        unallocated_gpus: (trace.capacity_milli - allocated.min(trace.capacity_milli)) as f64
            / f64::from(MILLI_PER_GPU),
        frag_milli: frag,
        frag_ratio: if idle > 0.0 { 100.0 * frag / idle } else { 0.0 },
        pods: arrivals.len(),
        failed,
        offline_share_idle_gpus: offline_share_idle(&by_request) as f64 / f64::from(MILLI_PER_GPU),
        by_request,
        holes,
        attempts,
        quality: PlacementQuality::measure(sched.cache().nodes().map(|n| &**n), None),
        wall_seconds,
        cpu_seconds,
    })
}

/// The GPU milli left idle on the GPUs the shares (requests below one GPU) of `placed` take
/// when they are packed largest first, each into the fullest GPU it fits (a new one when
/// none has room).
fn offline_share_idle(placed: &BTreeMap<u64, Outcome>) -> u64 {
    let gpu = MILLI_PER_GPU as usize;
    // GPUs in use by their free milli.
    let mut free = vec![0u64; gpu];
    for (&milli, outcome) in placed.range(1..u64::from(MILLI_PER_GPU)).rev() {
        let m = milli as usize;
        for _ in 0..outcome.placed {
            match (m..gpu).find(|&f| free[f] > 0) {
                Some(f) => {
                    free[f] -= 1;
                    free[f - m] += 1;
                }
                None => free[gpu - m] += 1,
            }
        }
    }
    free.iter().enumerate().map(|(f, n)| f as u64 * n).sum()
}

/// Schedules `pods` (with their GPU milli), as gang number `gang` when given (a PodGroup
/// of them all): returns the GPU milli placed and how many pods could not be, which are
/// removed (an arrival that finds no place leaves, in the experiment), and counts each
/// pod's outcome in `by_request` and in `attempts`, in the pods' order.
fn place(
    sched: &mut Scheduler,
    pods: Vec<(Arc<PodInfo>, u64)>,
    gang: Option<usize>,
    now: Duration,
    (by_request, attempts): (&mut BTreeMap<u64, Outcome>, &mut Attempts),
) -> Result<(u64, usize), OpenbError> {
    let bad = |e: gantry_core::cache::CacheError| OpenbError::Config(e.to_string());
    let mut pods = pods;
    if let (Some(g), Some((first, _))) = (gang, pods.first()) {
        let name = format!("gang-{g}");
        sched.upsert_pod_group(
            PodGroupModel {
                namespace: first.namespace.clone(),
                name: name.clone(),
                min_member: u32::try_from(pods.len()).unwrap_or(u32::MAX),
                min_resources: None,
                schedule_timeout: None,
            },
            now,
        );
        for (pod, _) in &mut pods {
            let mut p = (**pod).clone();
            p.labels = p
                .labels
                .iter()
                .chain([(POD_GROUP_LABEL, name.as_str())])
                .collect();
            *pod = Arc::new(p);
        }
    }
    let milli: HashMap<String, u64> = pods.iter().map(|(p, m)| (p.name.clone(), *m)).collect();
    for (pod, _) in &pods {
        sched.upsert_pod(pod.clone(), now).map_err(bad)?;
    }
    let mut placed = 0;
    let mut bound = HashSet::new();
    while let Some(attempt) = sched.schedule_next(now) {
        if let Attempt::Scheduled(task, _) | Attempt::Permitted { task, .. } = attempt {
            sched.binding_succeeded(&task, now).map_err(bad)?;
            placed += milli.get(&task.assumed.name).copied().unwrap_or(0);
            bound.insert(task.assumed.name.clone());
        }
    }
    let mut lost = 0;
    for (pod, milli) in &pods {
        let outcome = by_request.entry(*milli).or_default();
        if bound.contains(&pod.name) {
            outcome.placed += 1;
            attempts.placed();
        } else {
            outcome.failed += 1;
            attempts.failed();
            lost += 1;
            sched.remove_pod(&pod.namespace, &pod.name, now);
        }
    }
    Ok((placed, lost))
}

/// The allocation at each whole arrival percentage: the mean over the arrivals that round to
/// it (or, when none does, to within one point), as the paper's analysis scripts compute it.
fn curve(points: &[(f64, f64)]) -> Vec<Option<f64>> {
    let top = (TUNE_RATIO * 100.0).round() as usize;
    let mut sums = vec![(0.0, 0usize); top + 2];
    for &(arr, alloc) in points {
        let r = arr.round();
        if r >= 0.0 && (r as usize) < sums.len() {
            let s = &mut sums[r as usize];
            s.0 += alloc;
            s.1 += 1;
        }
    }
    (0..=top)
        .map(|x| {
            if sums[x].1 > 0 {
                return Some(sums[x].0 / sums[x].1 as f64);
            }
            let near: Vec<f64> = points
                .iter()
                .filter(|(a, _)| (a.round() - x as f64).abs() <= 1.0)
                .map(|(_, b)| *b)
                .collect();
            (!near.is_empty()).then(|| near.iter().sum::<f64>() / near.len() as f64)
        })
        .collect()
}

/// The outcome of one policy over several seeds.
#[derive(Debug, Clone, Serialize)]
pub struct PolicySummary {
    /// The policy.
    pub policy: String,
    /// Mean allocation ratio (%) at 100% arrival.
    pub alloc_100: f64,
    /// Mean allocation ratio (%) at 130% arrival.
    pub alloc_130: f64,
    /// Mean GPUs left unallocated at the end.
    pub unallocated_gpus: f64,
    /// Mean fragmentation at the end (GPU milli).
    pub frag_milli: f64,
    /// Mean of [`RunResult::offline_share_idle_gpus`].
    pub offline_share_idle_gpus: f64,
    /// Mean fragmentation ratio at the end (% of idle GPU milli).
    pub frag_ratio: f64,
    /// Mean of the pods placed before the first that found no place (all the pods
    /// placed, for a run where none failed).
    pub placed_before_first_failure: f64,
    /// Mean of the nodes holding pods at the end.
    pub nodes_used: f64,
    /// Mean of the standard deviation of the nodes' cpu allocation (% of allocatable).
    pub cpu_std_dev: f64,
    /// Mean of the standard deviation of the nodes' memory allocation (% of allocatable).
    pub memory_std_dev: f64,
    /// Mean allocation ratio at each arrival percentage 0..=130.
    pub curve: Vec<Option<f64>>,
    /// Mean CPU time of one experiment (the scheduling loop, on one thread), in seconds.
    pub cpu_seconds_per_run: f64,
    /// Mean wall time of one experiment, in seconds.
    pub wall_seconds_per_run: f64,
    /// Each seed's run.
    pub runs: Vec<RunResult>,
}

impl PolicySummary {
    /// Averages `runs` of `policy`.
    pub fn new(policy: &str, runs: Vec<RunResult>) -> Self {
        let n = runs.len().max(1) as f64;
        let mean = |f: &dyn Fn(&RunResult) -> f64| runs.iter().map(f).sum::<f64>() / n;
        let points = runs.first().map_or(0, |r| r.curve.len());
        let curve = (0..points)
            .map(|x| {
                let v: Vec<f64> = runs.iter().filter_map(|r| r.curve[x]).collect();
                (v.len() == runs.len() && !v.is_empty())
                    .then(|| v.iter().sum::<f64>() / v.len() as f64)
            })
            .collect();
        PolicySummary {
            policy: policy.to_string(),
            alloc_100: mean(&|r| r.alloc_at(100)),
            alloc_130: mean(&|r| r.alloc_at(130)),
            unallocated_gpus: mean(&|r| r.unallocated_gpus),
            frag_milli: mean(&|r| r.frag_milli),
            offline_share_idle_gpus: mean(&|r| r.offline_share_idle_gpus),
            frag_ratio: mean(&|r| r.frag_ratio),
            placed_before_first_failure: mean(&|r| {
                r.attempts
                    .placed_before_first_failure
                    .unwrap_or(r.attempts.placed) as f64
            }),
            nodes_used: mean(&|r| r.quality.nodes_used as f64),
            cpu_std_dev: mean(&|r| r.quality.cpu.std_dev),
            memory_std_dev: mean(&|r| r.quality.memory.std_dev),
            curve,
            cpu_seconds_per_run: mean(&|r| r.cpu_seconds),
            wall_seconds_per_run: mean(&|r| r.wall_seconds),
            runs,
        }
    }
}

/// The results of a replay: one summary per policy.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The node list.
    pub nodes: String,
    /// The pod list.
    pub pods: String,
    /// Nodes in the cluster.
    pub cluster_nodes: usize,
    /// GPUs in the cluster.
    pub cluster_gpus: f64,
    /// The seeds run.
    pub seeds: Vec<u64>,
    /// Results by policy, in the order asked.
    pub policies: Vec<PolicySummary>,
    /// The size of the gangs the multi-GPU pods arrived in, if they did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gang_size: Option<u32>,
    /// The `percentageOfNodesToScore` of the runs (0: kube-scheduler's adaptive share).
    pub percentage: u32,
}

impl Report {
    /// The results as a table.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "openb replay: {} ({} nodes, {} GPUs), {}{}, seeds {}, {}",
            self.nodes,
            self.cluster_nodes,
            self.cluster_gpus,
            self.pods,
            self.gang_size
                .map(|n| format!(" (multi-GPU pods in gangs of {n})"))
                .unwrap_or_default(),
            seed_range(&self.seeds),
            match self.percentage {
                0 => "nodes scored: kube-scheduler's adaptive share".to_string(),
                p => format!("nodes scored: {p}%"),
            }
        );
        let _ = writeln!(
            out,
            "{:<14} {:>9} {:>9} {:>12} {:>10} {:>9} {:>10}",
            "POLICY", "ALLOC@100", "ALLOC@130", "UNALLOC GPUS", "FRAG GPUS", "FRAG %", "CPU S/RUN"
        );
        for p in &self.policies {
            let _ = writeln!(
                out,
                "{:<14} {:>8.2}% {:>8.2}% {:>12.1} {:>10.1} {:>8.2}% {:>10.2}",
                p.policy,
                p.alloc_100,
                p.alloc_130,
                p.unallocated_gpus,
                p.frag_milli / f64::from(MILLI_PER_GPU),
                p.frag_ratio,
                p.cpu_seconds_per_run
            );
        }
        let _ = writeln!(
            out,
            "\nALLOCATED GPU (%) BY ARRIVED GPU REQUESTS (% OF CAPACITY)"
        );
        let _ = write!(out, "{:<14}", "POLICY");
        for a in CURVE_TABLE_ARRIVALS.clone().step_by(CURVE_TABLE_STEP) {
            let _ = write!(out, " {a:>6}");
        }
        out.push('\n');
        for p in &self.policies {
            let _ = write!(out, "{:<14}", p.policy);
            for a in CURVE_TABLE_ARRIVALS.clone().step_by(CURVE_TABLE_STEP) {
                match p.curve.get(a).copied().flatten() {
                    Some(v) => {
                        let _ = write!(out, " {v:>6.2}");
                    }
                    None => {
                        let _ = write!(out, " {:>6}", "-");
                    }
                }
            }
            out.push('\n');
        }
        let _ = writeln!(out, "\nPLACEMENT AT THE END (MEANS OVER THE SEEDS)");
        let _ = writeln!(
            out,
            "{:<14} {:>15} {:>10} {:>10} {:>10}",
            "POLICY", "BEFORE 1ST FAIL", "NODES USED", "CPU SD %", "MEM SD %"
        );
        for p in &self.policies {
            let _ = writeln!(
                out,
                "{:<14} {:>15.1} {:>10.1} {:>10.2} {:>10.2}",
                p.policy,
                p.placed_before_first_failure,
                p.nodes_used,
                p.cpu_std_dev,
                p.memory_std_dev
            );
        }
        out
    }

    /// The results as JSON: per policy (keyed by name) the means under `alloc_100` and
    /// `alloc_130`, the other figures, the curve and every run.
    pub fn to_json(&self) -> String {
        let policies: serde_json::Map<String, serde_json::Value> = self
            .policies
            .iter()
            .map(|p| {
                (
                    p.policy.clone(),
                    serde_json::to_value(p).unwrap_or(serde_json::Value::Null),
                )
            })
            .collect();
        let out = serde_json::json!({
            "nodes": self.nodes,
            "pods": self.pods,
            "cluster_nodes": self.cluster_nodes,
            "cluster_gpus": self.cluster_gpus,
            "seeds": self.seeds,
            "percentage": self.percentage,
            "policies": policies,
        });
        serde_json::to_string_pretty(&out).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// The allocation-against-arrival curves as an SVG plot, one line per policy.
    pub fn to_svg(&self) -> String {
        let file = |p: &str| {
            Path::new(p)
                .file_name()
                .map_or_else(|| p.to_string(), |f| f.to_string_lossy().into_owned())
        };
        plot::svg(
            &format!("GPU allocation against arrival: {}", file(&self.pods)),
            &format!(
                "{} nodes, {} GPUs ({}); mean of seeds {}",
                self.cluster_nodes,
                self.cluster_gpus,
                file(&self.nodes),
                seed_range(&self.seeds)
            ),
            &self
                .policies
                .iter()
                .map(|p| (p.policy.as_str(), p.curve.as_slice()))
                .collect::<Vec<_>>(),
        )
    }
}

fn seed_range(seeds: &[u64]) -> String {
    match (seeds.first(), seeds.last()) {
        (Some(a), Some(b)) if seeds.len() > 1 && b - a + 1 == seeds.len() as u64 => {
            format!("{a}..{b}")
        }
        _ => seeds
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(","),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_core::model::gpu::GpuRequest;

    /// Writes `text` to a temporary file of its own, named after `name`, removed when the
    /// returned path is dropped.
    fn write(name: &str, text: &str) -> tempfile::TempPath {
        let file = tempfile::Builder::new()
            .prefix(&format!("gantry-openb-{name}-"))
            .tempfile()
            .unwrap();
        std::fs::write(file.path(), text).unwrap();
        file.into_temp_path()
    }

    const NODES: &str =
        "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\nn1,8000,16384,0,\n";
    const PODS: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n\
        p2,4000,1024,1,500,,LS\n\
        p1,1000,1024,1,1000,T4|V100M16,BE\n\
        p3,2000,1024,0,0,,BE\n";

    #[test]
    fn reads_the_csv_files() {
        let nodes = load_nodes(&write("nodes.csv", NODES)).unwrap();
        assert_eq!(nodes.len(), 2);
        assert_eq!(
            nodes[0],
            TraceNode {
                name: "n0".into(),
                cpu_milli: 32000,
                memory_mib: 65536,
                gpus: 2,
                model: "T4".into()
            }
        );
        assert_eq!(nodes[1].model, "");
        let pods = load_pods(&write("pods.csv", PODS)).unwrap();
        assert_eq!(pods[1].gpu_spec, "T4|V100M16");
        assert_eq!(pods[0].total_gpu_milli(), 500);
        // multigpu files have no gpu_spec column.
        let short = load_pods(&write(
            "short.csv",
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,4,1000\n",
        ))
        .unwrap();
        assert_eq!(short[0].total_gpu_milli(), 4000);
    }

    #[test]
    fn csv_errors_name_the_line_and_column() {
        let e = load_nodes(&write("bad1.csv", "sn,cpu_milli,gpu,model\nn,1,1,T4\n")).unwrap_err();
        assert!(
            e.to_string().ends_with(":1: missing column \"memory_mib\""),
            "{e}"
        );
        let e = load_pods(&write(
            "bad2.csv",
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,x,5\n",
        ))
        .unwrap_err();
        assert!(
            e.to_string()
                .ends_with(":2: column num_gpu: \"x\" is not a non-negative integer"),
            "{e}"
        );
        let e = load_pods(&write(
            "bad3.csv",
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,2,500\n",
        ))
        .unwrap_err();
        assert!(e.to_string().contains("shares are of one GPU"), "{e}");
        assert!(matches!(
            load_nodes(Path::new("/nonexistent/x.csv")),
            Err(OpenbError::Read { .. })
        ));
    }

    #[test]
    fn csv_values_are_ranged_and_cut_in_errors() {
        let e = load_nodes(&write(
            "neg.csv",
            "sn,cpu_milli,memory_mib,gpu
n,-1000,1,0
",
        ))
        .unwrap_err();
        assert!(
            e.to_string()
                .ends_with(":2: column cpu_milli: \"-1000\" is not a non-negative integer"),
            "{e}"
        );
        let e = load_nodes(&write(
            "mem.csv",
            "sn,cpu_milli,memory_mib,gpu
n,1,9223372036854775807,0
",
        ))
        .unwrap_err();
        assert!(
            e.to_string().ends_with(&format!(
                ":2: column memory_mib: \"9223372036854775807\" is more than {MAX_MEMORY_MIB}"
            )),
            "{e}"
        );
        let e = load_nodes(&write(
            "gpus.csv",
            "sn,cpu_milli,memory_mib,gpu
n,1,1,257
",
        ))
        .unwrap_err();
        assert!(e.to_string().ends_with("is more than 256"), "{e}");
        let huge = "7".repeat(1_000_000);
        let e = load_pods(&write(
            "huge.csv",
            &format!("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,{huge},1,0,0\n"),
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.ends_with(&format!(
                ":2: column cpu_milli: \"{}\"... (1000000 bytes) is not a non-negative integer",
                "7".repeat(64)
            )),
            "{}",
            &e[..e.len().min(300)]
        );
    }

    #[test]
    fn a_byte_order_mark_before_the_header_is_accepted() {
        let nodes = load_nodes(&write("bom.csv", &format!("\u{feff}{NODES}"))).unwrap();
        assert_eq!(nodes.len(), 2);
    }

    fn trace() -> Trace {
        let nodes = load_nodes(&write("n.csv", NODES)).unwrap();
        let pods = load_pods(&write("p.csv", PODS)).unwrap();
        Trace::new(&nodes, &pods).unwrap()
    }

    #[test]
    fn trace_objects_carry_the_gpu_conventions() {
        let t = trace();
        assert_eq!(t.capacity_milli, 2000);
        assert_eq!(t.nodes[0].gpu.count, 2);
        assert_eq!(t.nodes[0].gpu.model.as_deref(), Some("T4"));
        let names: Vec<&str> = t.pods.iter().map(|(p, _)| p.name.as_str()).collect();
        assert_eq!(names, ["p1", "p2", "p3"], "sorted by name");
        assert_eq!(t.pods[0].0.gpu.request, GpuRequest::Whole(1));
        assert_eq!(
            &*t.pods[0].0.gpu.models,
            &[Box::from("T4"), Box::from("V100M16")]
        );
        assert_eq!(t.pods[1].0.gpu.request, GpuRequest::Milli(500));
        assert_eq!(t.pods[2].0.gpu.request, GpuRequest::None);
    }

    #[test]
    fn arrivals_shuffle_then_fill_to_the_tune_ratio() {
        let t = trace();
        let a = t.arrivals(42);
        assert_eq!(a, t.arrivals(42), "seeded");
        let mut first: Vec<usize> = a[..3].to_vec();
        first.sort_unstable();
        assert_eq!(first, [0, 1, 2], "every pod once, then draws");
        let total: u64 = a.iter().map(|&i| t.pods[i].1).sum();
        assert!(total as f64 <= TUNE_RATIO * 2000.0);
        assert!(
            total as f64 + 1000.0 > TUNE_RATIO * 2000.0,
            "stops at the first draw that overshoots or before"
        );
        let names = |seed| -> Vec<String> {
            t.nodes_for(seed)
                .iter()
                .map(|n| n.name.to_string())
                .collect()
        };
        let a = names(1);
        assert!(
            a.iter().all(|n| n.ends_with("-n0") || n.ends_with("-n1")),
            "{a:?}"
        );
        assert!(a.iter().all(|n| n.len() == "0000-n0".len()));
        assert_eq!(a, names(1), "seeded");
        assert!(
            (2..20).any(|s| names(s) != a),
            "the order varies with the seed"
        );
    }

    #[test]
    fn curve_is_the_mean_of_the_arrivals_that_round_to_each_point() {
        let c = curve(&[(0.4, 0.0), (99.6, 90.0), (100.2, 92.0), (128.0, 95.0)]);
        assert_eq!(c.len(), 131);
        assert_eq!(c[0], Some(0.0));
        assert_eq!(c[100], Some(91.0));
        assert_eq!(c[128], Some(95.0));
        assert_eq!(
            c[129],
            Some(95.0),
            "within one point when none rounds to it"
        );
        assert_eq!(c[130], None);
        assert_eq!(c[50], None);
    }

    #[test]
    fn in_hamis_terms_the_trace_is_hami_devices_and_requests_with_the_same_outcome() {
        let nodes = load_nodes(&write("hn.csv", NODES)).unwrap();
        let pods = load_pods(&write("hp.csv", PODS)).unwrap();
        let t = Trace::in_terms(&nodes, &pods, Terms::Hami).unwrap();
        let devices = t.nodes[0].gpu.hami_devices().expect("registered as HAMi's");
        assert_eq!(devices.len(), 2);
        assert_eq!((&*devices[1].uuid, &*devices[1].model), ("GPU-n0-1", "T4"));
        assert_eq!(
            t.nodes[1].gpu.hami_devices(),
            None,
            "no GPU, no registration"
        );
        assert_eq!(t.capacity_milli, 2000);
        let share = match t.pods[1].0.gpu.request {
            GpuRequest::Hami(s) => s,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            (share.count, share.memory, share.cores),
            (1, gantry_core::model::gpu::HamiMemory::Percent(50), 50)
        );
        assert_eq!(t.pods[0].0.gpu.request, GpuRequest::Whole(1));
        let registry = gantry_core::plugins::registry();
        let plain = trace();
        for policy in [Policy::Fgd, Policy::Gantry] {
            let spec = PolicySpec::published(policy, &plain);
            let a = run(&plain, &spec.args, 42, None, 100, &registry).unwrap();
            let b = run(&t, &spec.args, 42, None, 100, &registry).unwrap();
            assert_eq!(
                (a.final_alloc, a.failed),
                (b.final_alloc, b.failed),
                "{policy:?}"
            );
        }
    }

    #[test]
    fn runs_the_experiment_through_the_scheduler() {
        let t = trace();
        let registry = gantry_core::plugins::registry();
        for policy in [Policy::Fgd, Policy::BestFit] {
            let spec = PolicySpec::published(policy, &t);
            let r = run(&t, &spec.args, 42, None, 100, &registry).unwrap();
            assert_eq!(r.pods, t.arrivals(42).len());
            assert!(r.final_alloc > 0.0 && r.final_alloc <= 100.0, "{r:?}");
            assert_eq!(r.unallocated_gpus, 2.0 * (1.0 - r.final_alloc / 100.0));
            let counted: usize = r.by_request.values().map(|o| o.placed + o.failed).sum();
            assert_eq!(counted, r.pods);
            let failed: usize = r.by_request.values().map(|o| o.failed).sum();
            assert_eq!(failed, r.failed);
            let placed: u64 = r.by_request.iter().map(|(m, o)| m * o.placed as u64).sum();
            assert!((100.0 * placed as f64 / 2000.0 - r.final_alloc).abs() < 1e-9);
            let idle: u64 = r.holes.iter().map(|(f, n)| u64::from(*f) * *n as u64).sum();
            assert!(idle <= 2000 - placed, "{r:?}");
            assert_eq!(
                (r.attempts.placed, r.attempts.failed),
                (r.pods - r.failed, r.failed)
            );
            // Below 100 nodes kube-scheduler's adaptive share is every node: the same run.
            let adaptive = run(&t, &spec.args, 42, None, 0, &registry).unwrap();
            assert_eq!(
                (adaptive.final_alloc, adaptive.attempts, adaptive.quality),
                (r.final_alloc, r.attempts, r.quality)
            );
        }
        assert!(PolicySpec::published(Policy::Fgd, &t).args["typicalPods"].is_array());
        assert!(
            PolicySpec::published(Policy::BestFit, &t)
                .args
                .get("typicalPods")
                .is_none()
        );
    }

    #[test]
    fn multi_gpu_pods_in_gangs_are_placed_whole_or_not_at_all() {
        // Two nodes of 4 GPUs; every pod asks for 3, and three arrive (130% of the GPUs).
        // One at a time, two find a place; as one gang of three they need 9 GPUs, and none
        // is placed.
        let nodes = load_nodes(&write(
            "n.csv",
            "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,4,V100M16\nn1,64000,262144,4,V100M16\n",
        ))
        .unwrap();
        let pods = load_pods(&write(
            "p.csv",
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nt,8000,16384,3,1000\n",
        ))
        .unwrap();
        let t = Trace::new(&nodes, &pods).unwrap();
        let registry = gantry_core::plugins::registry();
        let spec = PolicySpec::published(Policy::BestFit, &t);
        let alone = run(&t, &spec.args, 7, None, 100, &registry).unwrap();
        assert_eq!(
            (alone.pods, alone.final_alloc, alone.failed),
            (3, 75.0, 1),
            "{alone:?}"
        );
        assert_eq!(
            alone.by_request,
            BTreeMap::from([(
                3000,
                Outcome {
                    placed: 2,
                    failed: 1
                }
            )])
        );
        assert!(alone.holes.is_empty(), "a free whole GPU is no hole");
        assert_eq!(
            alone.attempts,
            Attempts {
                placed: 2,
                failed: 1,
                placed_before_first_failure: Some(2)
            }
        );
        assert_eq!((alone.quality.nodes_used, alone.quality.pods), (2, 2));
        let gang = run(&t, &spec.args, 7, Some(3), 100, &registry).unwrap();
        assert_eq!(
            (gang.pods, gang.final_alloc, gang.failed),
            (3, 0.0, 3),
            "{gang:?}"
        );
        assert_eq!(gang.attempts.placed_before_first_failure, Some(0));
        assert_eq!(gang.quality.nodes_used, 0);
        // In gangs of two, the first pair is placed and the shorter gang left over is not.
        let pairs = run(&t, &spec.args, 7, Some(2), 100, &registry).unwrap();
        assert_eq!((pairs.final_alloc, pairs.failed), (75.0, 1), "{pairs:?}");
    }

    #[test]
    fn offline_packing_fills_the_fullest_gpu_with_room() {
        let placed = |shares: &[(u64, usize)]| -> BTreeMap<u64, Outcome> {
            shares
                .iter()
                .map(|&(m, n)| {
                    (
                        m,
                        Outcome {
                            placed: n,
                            failed: 3,
                        },
                    )
                })
                .collect()
        };
        // 600 and 400 make one GPU; 300 + 300 + 300 another (100 idle); whole GPUs and
        // pods without GPU do not count, nor do pods that failed.
        assert_eq!(
            offline_share_idle(&placed(&[(0, 4), (300, 3), (400, 1), (600, 1), (2000, 2)])),
            100
        );
        // 700, 700: two GPUs; 300 goes into one of them, 250 into the other (50 idle).
        assert_eq!(
            offline_share_idle(&placed(&[(250, 1), (300, 1), (700, 2)])),
            50
        );
        // Best fit: 300 goes next to the 700 (300 free), not the 600 (400 free), which the
        // two 200s then fill.
        assert_eq!(
            offline_share_idle(&placed(&[(200, 2), (300, 1), (600, 1), (700, 1)])),
            0
        );
        assert_eq!(offline_share_idle(&BTreeMap::new()), 0);
    }

    #[test]
    fn report_formats() {
        let mut curve = vec![Some(50.0); 131];
        curve[20] = None;
        let run = RunResult {
            seed: 1,
            curve,
            final_alloc: 50.0,
            unallocated_gpus: 1.0,
            frag_milli: 500.0,
            frag_ratio: 50.0,
            pods: 3,
            failed: 1,
            by_request: BTreeMap::from([(
                500,
                Outcome {
                    placed: 2,
                    failed: 1,
                },
            )]),
            holes: BTreeMap::from([(500, 1)]),
            offline_share_idle_gpus: 0.5,
            attempts: Attempts {
                placed: 2,
                failed: 1,
                placed_before_first_failure: Some(1),
            },
            quality: PlacementQuality::measure(&[], None),
            wall_seconds: 0.5,
            cpu_seconds: 0.25,
        };
        let report = Report {
            nodes: "n.csv".into(),
            pods: "p.csv".into(),
            cluster_nodes: 2,
            cluster_gpus: 2.0,
            seeds: vec![42, 43],
            policies: vec![PolicySummary::new("FGD", vec![run.clone(), run])],
            gang_size: None,
            percentage: 0,
        };
        let table = report.to_table();
        assert!(
            table.contains("seeds 42..43, nodes scored: kube-scheduler's adaptive share"),
            "{table}"
        );
        assert!(
            table.contains("FGD                        1.0        0.0       0.00       0.00"),
            "{table}"
        );
        assert!(
            table.contains("FGD               50.00%    50.00%"),
            "{table}"
        );
        assert!(
            table.contains(
                "POLICY             10     20     30     40     50     60     70     80     90    100    110    120    130\n\
                 FGD             50.00      -  50.00  50.00"
            ),
            "{table}"
        );
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(json["policies"]["FGD"]["alloc_100"], 50.0);
        assert_eq!(json["policies"]["FGD"]["alloc_130"], 50.0);
        let run = &json["policies"]["FGD"]["runs"][0];
        assert_eq!(run["by_request"]["500"]["failed"], 1);
        assert_eq!(run["holes"]["500"], 1);
        let svg = report.to_svg();
        assert!(
            svg.starts_with("<svg") && svg.contains("<polyline") && svg.contains(">FGD</text>")
        );
        assert!(svg.contains(">GPU allocation against arrival: p.csv</text>"));
        assert!(svg.contains(">2 nodes, 2 GPUs (n.csv); mean of seeds 42..43</text>"));
    }
}
