//! GPUs: a node's devices and a pod's GPU request, read once at the edge.
//!
//! A node's GPUs follow NVIDIA's device plugin and GPU feature discovery conventions: the
//! count is allocatable `nvidia.com/gpu`, the model the label `nvidia.com/gpu.product`, the
//! memory of each GPU (MiB) the label `nvidia.com/gpu.memory`. Each GPU is a device of
//! [`MILLI_PER_GPU`] milli that pods may share.
//!
//! A pod asks for whole GPUs with the `nvidia.com/gpu` resource, or for a share of one GPU
//! with the annotation `gantry.io/gpu-milli` (1..=1000) or `gantry.io/gpu-memory` (MiB of the
//! GPU's memory); `gantry.io/gpu-model: V100M16|V100M32` restricts it to some models. The
//! devices a placed pod holds are written on it as `gantry.io/gpu-assignment` (see
//! [`GpuAssignment`]), so that a restarted scheduler reads them back.
//!
//! A node that HAMi's device plugin registers (see [`super::hami`]) has its devices read from
//! the registration instead: each with its UUID, model, memory, compute and how many pods may
//! share it. Pods then ask as HAMi's users write it: `nvidia.com/gpu` GPUs, each a share of
//! `nvidia.com/gpumem` MiB (or `nvidia.com/gpumem-percentage`) and `nvidia.com/gpucores`
//! percent of compute, restricted by HAMi's type, UUID and policy annotations.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use super::echo::echo;
use super::hami;
use super::labels::Labels;
use super::resources::Resources;

/// The extended resource counting whole GPUs.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";
/// Node label naming the GPU model (GPU feature discovery).
pub const GPU_PRODUCT_LABEL: &str = "nvidia.com/gpu.product";
/// Node label giving each GPU's memory in MiB (GPU feature discovery).
pub const GPU_MEMORY_LABEL: &str = "nvidia.com/gpu.memory";
/// Pod annotation asking for a share of one GPU, in thousandths.
pub const GPU_MILLI_ANNOTATION: &str = "gantry.io/gpu-milli";
/// Pod annotation asking for a share of one GPU by memory, in MiB.
pub const GPU_MEMORY_ANNOTATION: &str = "gantry.io/gpu-memory";
/// Pod annotation restricting the GPU models a pod accepts, `|`-separated.
pub const GPU_MODEL_ANNOTATION: &str = "gantry.io/gpu-model";
/// Pod annotation recording the devices a placed pod holds.
pub const GPU_ASSIGNMENT_ANNOTATION: &str = "gantry.io/gpu-assignment";

/// A whole GPU, in the unit shares are counted in.
pub const MILLI_PER_GPU: u32 = 1000;
/// Most GPUs tracked on one node; a larger allocatable count is capped (a misreported
/// capacity must not make the scheduler allocate without bound).
pub const MAX_GPUS_PER_NODE: usize = 256;

/// A GPU that HAMi's device plugin registered, usable for scheduling (healthy, not
/// cordoned, not partitioned by MIG).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HamiDevice {
    /// The device's UUID, which allocations name it by.
    pub uuid: Arc<str>,
    /// Its index on the node.
    pub index: u32,
    /// How many pods may share it at once.
    pub shares: u32,
    /// Its memory in MiB.
    pub memory_mib: u64,
    /// Its compute in percent.
    pub cores: u32,
    /// Its model as registered (`NVIDIA-Tesla V100-PCIE-32GB`).
    pub model: Arc<str>,
}

/// What a node's HAMi registration says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum HamiNode {
    /// The node has no HAMi registration: its GPUs are read from labels.
    #[default]
    Absent,
    /// The usable devices, in the order registered.
    Devices(Arc<[HamiDevice]>),
    /// The registration cannot be used (unreadable, or the device plugin is gone): the
    /// node's GPUs are not scheduled.
    Unusable(Arc<str>),
}

/// A node's GPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeGpus {
    /// Number of devices.
    pub count: usize,
    /// The model, when the node is labelled with it (or all its HAMi devices share one).
    pub model: Option<Arc<str>>,
    /// Memory of each GPU in MiB, when labelled (an unparsable label counts as unknown), or
    /// when all its HAMi devices have the same.
    pub memory_mib: Option<u64>,
    /// The devices HAMi's device plugin registered, if it did.
    pub hami: HamiNode,
}

impl NodeGpus {
    /// Reads a node's GPUs from its labels and allocatable resources.
    pub fn from_node(labels: &Labels, allocatable: &Resources) -> Self {
        let count = usize::try_from(allocatable.scalar(GPU_RESOURCE).max(0))
            .unwrap_or(MAX_GPUS_PER_NODE)
            .min(MAX_GPUS_PER_NODE);
        NodeGpus {
            count,
            model: labels
                .get(GPU_PRODUCT_LABEL)
                .filter(|m| !m.is_empty())
                .map(Arc::from),
            memory_mib: labels
                .get(GPU_MEMORY_LABEL)
                .and_then(|m| m.trim().parse::<u64>().ok())
                .filter(|m| *m > 0),
            hami: HamiNode::Absent,
        }
    }

    /// Reads a node's GPUs: from its HAMi registration when its annotations carry one
    /// ([`hami::REGISTER_ANNOTATION`], with the handshake and the cordoned devices), from
    /// its labels and allocatable resources otherwise.
    pub fn from_api_node(
        labels: &Labels,
        allocatable: &Resources,
        annotations: Option<&BTreeMap<String, String>>,
    ) -> Self {
        let registration = annotations.and_then(|a| a.get(hami::REGISTER_ANNOTATION));
        let (Some(annotations), Some(registration)) = (annotations, registration) else {
            return NodeGpus::from_node(labels, allocatable);
        };
        let unusable = |reason: String| NodeGpus {
            hami: HamiNode::Unusable(Arc::from(reason)),
            ..NodeGpus::default()
        };
        let handshake = hami::Handshake::parse(
            annotations
                .get(hami::HANDSHAKE_ANNOTATION)
                .map(String::as_str),
        );
        if !handshake.devices_usable(allocatable.scalar(GPU_RESOURCE)) {
            return unusable(format!(
                "HAMi's device plugin is not answering ({} is {:?})",
                hami::HANDSHAKE_ANNOTATION,
                annotations
                    .get(hami::HANDSHAKE_ANNOTATION)
                    .map_or("", |h| h.as_str())
            ));
        }
        let registered = match hami::decode_registration(registration) {
            Ok(r) => r,
            Err(e) => return unusable(format!("annotation {}: {e}", hami::REGISTER_ANNOTATION)),
        };
        let cordoned: Vec<&str> = annotations
            .get(hami::DEVICE_CORDON_ANNOTATION)
            .map(|c| {
                c.split(',')
                    .map(str::trim)
                    .filter(|u| !u.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        let devices: Vec<HamiDevice> = registered
            .into_iter()
            .filter(|d| {
                d.healthy && d.mode() != hami::MIG_MODE && !cordoned.contains(&d.uuid.as_str())
            })
            .filter(|d| d.shares > 0 && !d.uuid.is_empty())
            .take(MAX_GPUS_PER_NODE)
            .map(|d| HamiDevice {
                uuid: Arc::from(d.uuid),
                index: d.index,
                shares: d.shares,
                memory_mib: d.memory_mib,
                cores: d.cores,
                model: Arc::from(d.model),
            })
            .collect();
        let common = |f: &dyn Fn(&HamiDevice) -> Option<u64>| {
            let first = devices.first().and_then(f)?;
            devices.iter().all(|d| f(d) == Some(first)).then_some(first)
        };
        let memory_mib = common(&|d| Some(d.memory_mib).filter(|m| *m > 0));
        let model = devices
            .first()
            .filter(|first| devices.iter().all(|d| d.model == first.model))
            .map(|d| d.model.clone());
        NodeGpus {
            count: devices.len(),
            model,
            memory_mib,
            hami: HamiNode::Devices(devices.into()),
        }
    }

    /// The node's HAMi devices, if HAMi's device plugin registered it.
    pub fn hami_devices(&self) -> Option<&[HamiDevice]> {
        match &self.hami {
            HamiNode::Devices(d) => Some(d),
            _ => None,
        }
    }

    /// Milli of one GPU that `mib` of memory amounts to on this node (rounded up), or `None`
    /// when the node does not report its GPU memory or has less than asked.
    pub fn milli_for_memory(&self, mib: u64) -> Option<u32> {
        let total = self.memory_mib?;
        if mib > total {
            return None;
        }
        // In u128: a memory of any u64 size times 1,000 cannot overflow.
        let milli = (u128::from(mib) * u128::from(MILLI_PER_GPU)).div_ceil(u128::from(total));
        u32::try_from(milli).ok().map(|m| m.max(1))
    }
}

/// GPU models a pod accepts, as listed (empty: any).
pub type Models = Box<[Box<str>]>;

/// What a pod asks of GPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GpuRequest {
    /// No GPU.
    #[default]
    None,
    /// Whole, unshared GPUs (`nvidia.com/gpu`).
    Whole(u32),
    /// A share of one GPU, in milli (`gantry.io/gpu-milli`); 1000 is a whole device.
    Milli(u32),
    /// A share of one GPU by memory, in MiB (`gantry.io/gpu-memory`).
    MemoryMib(u64),
    /// Shares of distinct GPUs as HAMi's users ask (`nvidia.com/gpumem`, ...).
    Hami(HamiShare),
}

impl GpuRequest {
    /// True when the pod asks for any GPU.
    pub fn is_some(&self) -> bool {
        !matches!(self, GpuRequest::None)
    }
}

/// GPU memory a HAMi share asks on each device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HamiMemory {
    /// MiB (`nvidia.com/gpumem`).
    Mib(u64),
    /// Percent of the device's (`nvidia.com/gpumem-percentage`; 100 when neither is given).
    Percent(u32),
}

/// `count` GPUs, each shared: memory and compute on each of them, as HAMi reads a
/// container's `nvidia.com/gpu`, `nvidia.com/gpumem`, `nvidia.com/gpumem-percentage` and
/// `nvidia.com/gpucores`, with the defaults HAMi's admission webhook fills in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HamiShare {
    /// Number of distinct GPUs.
    pub count: u32,
    /// Memory on each.
    pub memory: HamiMemory,
    /// Compute on each, in percent (0: no limit of its own).
    pub cores: u32,
}

impl HamiShare {
    /// MiB taken on a device of `device_mib` (HAMi rounds a percentage down).
    pub fn memory_on(&self, device_mib: u64) -> u64 {
        match self.memory {
            HamiMemory::Mib(m) => m,
            HamiMemory::Percent(p) => device_mib.saturating_mul(u64::from(p)) / 100,
        }
    }
}

/// The GPUs a pod may use, by HAMi's annotations: types as case-insensitive substrings of
/// the model (`nvidia.com/use-gputype`, `nvidia.com/nouse-gputype`), devices by UUID
/// (`nvidia.com/use-gpuuuid`, `nvidia.com/nouse-gpuuuid`); comma-separated lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceFilter {
    use_types: Box<[Box<str>]>,
    nouse_types: Box<[Box<str>]>,
    use_uuids: Box<[Box<str>]>,
    nouse_uuids: Box<[Box<str>]>,
}

impl DeviceFilter {
    fn from_annotations(annotations: &Labels) -> Option<Self> {
        let list = |key: &str, upper: bool| -> Box<[Box<str>]> {
            annotations
                .get(key)
                .into_iter()
                .flat_map(|v| v.split(','))
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(|t| {
                    Box::from(if upper {
                        t.to_uppercase()
                    } else {
                        t.to_string()
                    })
                })
                .collect()
        };
        let filter = DeviceFilter {
            use_types: list(hami::USE_TYPE_ANNOTATION, true),
            nouse_types: list(hami::NOUSE_TYPE_ANNOTATION, true),
            use_uuids: list(hami::USE_UUID_ANNOTATION, false),
            nouse_uuids: list(hami::NOUSE_UUID_ANNOTATION, false),
        };
        (filter != DeviceFilter::default()).then_some(filter)
    }

    /// Whether a device of `model` is allowed by the type lists.
    pub fn accepts_type(&self, model: &str) -> bool {
        let model = model.to_uppercase();
        let matches = |list: &[Box<str>]| list.iter().any(|t| model.contains(&**t));
        (self.use_types.is_empty() || matches(&self.use_types))
            && (self.nouse_types.is_empty() || !matches(&self.nouse_types))
    }

    /// Whether the device `uuid` is allowed by the UUID lists.
    pub fn accepts_uuid(&self, uuid: &str) -> bool {
        let listed = |list: &[Box<str>]| list.iter().any(|u| &**u == uuid);
        (self.use_uuids.is_empty() || listed(&self.use_uuids)) && !listed(&self.nouse_uuids)
    }

    /// True when devices are chosen by UUID, which only a HAMi registration gives.
    pub fn names_uuids(&self) -> bool {
        !self.use_uuids.is_empty()
    }
}

/// HAMi's binpack or spread, for nodes (`hami.io/node-scheduler-policy`) or for the GPUs of
/// a node (`hami.io/gpu-scheduler-policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packing {
    /// The fullest first.
    Binpack,
    /// The emptiest first.
    Spread,
}

impl Packing {
    fn parse(annotations: &Labels, key: &str) -> Result<Option<Packing>, String> {
        match annotations.get(key).map(str::trim) {
            None | Some("") => Ok(None),
            Some("binpack") => Ok(Some(Packing::Binpack)),
            Some("spread") => Ok(Some(Packing::Spread)),
            Some(other) => Err(format!(
                "annotation {key}: {} is not binpack or spread (the HAMi policies gantry follows)",
                echo(other)
            )),
        }
    }
}

/// A pod's HAMi policy annotations; none given: the plugin's policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HamiPolicy {
    /// How nodes are chosen.
    pub node: Option<Packing>,
    /// How a node's GPUs are chosen.
    pub gpu: Option<Packing>,
}

/// The devices a placed pod holds: device index and milli taken on it, e.g. `1:500` or
/// `0:1000,3:1000` as the annotation spells it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct GpuAssignment(pub Vec<(u16, u32)>);

impl GpuAssignment {
    /// Parses the annotation's value.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut out = Vec::new();
        for part in text.split(',') {
            let part = part.trim();
            let (device, milli) = part
                .split_once(':')
                .ok_or_else(|| format!("{} is not <device>:<milli>", echo(part)))?;
            let device: u16 = device
                .trim()
                .parse()
                .ok()
                .filter(|d| usize::from(*d) < MAX_GPUS_PER_NODE)
                .ok_or_else(|| format!("{} is not a device index", echo(device)))?;
            let milli: u32 = milli
                .trim()
                .parse()
                .ok()
                .filter(|m| (1..=MILLI_PER_GPU).contains(m))
                .ok_or_else(|| format!("{} is not a share in 1..=1000", echo(milli)))?;
            if out.iter().any(|(d, _)| *d == device) {
                return Err(format!("device {device} is listed twice"));
            }
            out.push((device, milli));
        }
        Ok(GpuAssignment(out))
    }
}

impl fmt::Display for GpuAssignment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (device, milli)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{device}:{milli}")?;
        }
        Ok(())
    }
}

/// Everything the scheduler reads about a pod's GPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodGpu {
    /// What the pod asks for.
    pub request: GpuRequest,
    /// Models the pod accepts; empty means any.
    pub models: Models,
    /// HAMi's type and UUID restrictions, if the pod has any.
    pub filter: Option<Arc<DeviceFilter>>,
    /// HAMi's policy annotations.
    pub policy: HamiPolicy,
    /// Containers (init containers included) that ask for GPUs.
    pub containers: u8,
    /// The devices it holds, from its `gantry.io/gpu-assignment` annotation (a malformed
    /// value reads as none: the cache then places the pod's share on the first devices
    /// that have room, keeping the node's totals right).
    pub assignment: Option<GpuAssignment>,
    /// The HAMi devices it holds, from its `hami.io/vgpu-devices-allocated` annotation, all
    /// containers together (written by gantry or by HAMi's own scheduler).
    pub hami_assignment: Option<Arc<[hami::ContainerDevice]>>,
    /// HAMi's device plugin reported that it could not allocate the pod's devices
    /// (`hami.io/bind-phase: failed`): the pod holds none (its kubelet rejects it, and its
    /// controller's replacement is placed afresh).
    pub allocation_failed: bool,
    /// What is wrong with the pod's GPU annotations, if anything: such a pod cannot be
    /// scheduled by the GPU plugin, which reports this message.
    pub error: Option<String>,
}

impl PodGpu {
    /// Reads a pod's GPU request from its requests, (kept) annotations and the number of
    /// its containers that ask for GPUs.
    pub fn from_pod(requests: &Resources, annotations: &Labels, containers: u8) -> Self {
        let assignment = annotations
            .get(GPU_ASSIGNMENT_ANNOTATION)
            .and_then(|a| GpuAssignment::parse(a).ok());
        let hami_assignment = annotations
            .get(hami::ALLOCATED_ANNOTATION)
            .and_then(|a| hami::decode_pod_devices(a).ok())
            .map(|containers| containers.into_iter().flatten().collect::<Arc<[_]>>())
            .filter(|devices| !devices.is_empty());
        let allocation_failed =
            annotations.get(hami::BIND_PHASE_ANNOTATION) == Some(hami::BIND_FAILED);
        let parsed = parse_request(requests, annotations, containers).and_then(|(r, m)| {
            let policy = HamiPolicy {
                node: Packing::parse(annotations, hami::NODE_POLICY_ANNOTATION)?,
                gpu: Packing::parse(annotations, hami::GPU_POLICY_ANNOTATION)?,
            };
            Ok((r, m, policy))
        });
        match parsed {
            Ok((request, models, policy)) => PodGpu {
                request,
                models,
                filter: DeviceFilter::from_annotations(annotations).map(Arc::new),
                policy,
                containers,
                assignment,
                hami_assignment,
                allocation_failed,
                error: None,
            },
            Err(error) => PodGpu {
                containers,
                assignment,
                hami_assignment,
                allocation_failed,
                error: Some(error),
                ..Default::default()
            },
        }
    }

    /// True when the pod accepts a GPU of `model` (a node without a model label only suits
    /// pods that accept any model).
    pub fn accepts_model(&self, model: Option<&str>) -> bool {
        let listed =
            self.models.is_empty() || model.is_some_and(|m| self.models.iter().any(|a| &**a == m));
        let typed = match &self.filter {
            None => true,
            Some(f) => model.map_or(f.accepts_type(""), |m| f.accepts_type(m)),
        };
        listed && typed
    }
}

/// The largest GPU memory a HAMi request may name, in MiB: HAMi keeps it in 32 bits.
const MAX_HAMI_MIB: i64 = i32::MAX as i64;

fn parse_hami(
    requests: &Resources,
    whole: i64,
    containers: u8,
) -> Result<Option<HamiShare>, String> {
    let memory = requests.scalar(hami::MEMORY_RESOURCE);
    let percent = requests.scalar(hami::MEMORY_PERCENTAGE_RESOURCE);
    let cores = requests.scalar(hami::CORES_RESOURCE);
    if memory <= 0 && percent <= 0 && cores <= 0 {
        return Ok(None);
    }
    if containers > 1 {
        return Err(format!(
            "{containers} containers ask for HAMi GPU shares: gantry places them for one \
             container per pod"
        ));
    }
    if whole <= 0 {
        return Err(format!(
            "{}, {} and {} need {GPU_RESOURCE}: HAMi's device plugin is asked for \
             {GPU_RESOURCE} only (HAMi's admission webhook adds {GPU_RESOURCE}: 1)",
            hami::MEMORY_RESOURCE,
            hami::MEMORY_PERCENTAGE_RESOURCE,
            hami::CORES_RESOURCE
        ));
    }
    let count = u32::try_from(whole)
        .ok()
        .filter(|w| *w as usize <= MAX_GPUS_PER_NODE)
        .ok_or_else(|| format!("{GPU_RESOURCE}: {whole} GPUs is more than any node has"))?;
    if memory > MAX_HAMI_MIB {
        return Err(format!(
            "{}: {memory} MiB is more than HAMi can express ({MAX_HAMI_MIB})",
            hami::MEMORY_RESOURCE
        ));
    }
    if percent > 100 {
        return Err(format!(
            "{}: {percent} is not a percentage in 0..=100",
            hami::MEMORY_PERCENTAGE_RESOURCE
        ));
    }
    if cores > i64::from(hami::FULL_CORES) {
        return Err(format!(
            "{}: {cores} is not a percentage in 0..=100",
            hami::CORES_RESOURCE
        ));
    }
    // HAMi's reading: memory in MiB wins over a percentage; neither is the whole memory.
    let memory = match (memory, percent) {
        (m, _) if m > 0 => HamiMemory::Mib(m as u64),
        (_, p) if p > 0 => HamiMemory::Percent(p as u32),
        _ => HamiMemory::Percent(100),
    };
    // HAMi's webhook: a GPU's whole memory without a compute limit is the whole GPU.
    let cores = match (cores, memory) {
        (0, HamiMemory::Percent(100)) => hami::FULL_CORES,
        (c, _) => c as u32,
    };
    Ok(Some(HamiShare {
        count,
        memory,
        cores,
    }))
}

fn parse_request(
    requests: &Resources,
    annotations: &Labels,
    containers: u8,
) -> Result<(GpuRequest, Models), String> {
    let whole = requests.scalar(GPU_RESOURCE);
    let milli = annotations.get(GPU_MILLI_ANNOTATION);
    let memory = annotations.get(GPU_MEMORY_ANNOTATION);
    let hami = parse_hami(requests, whole, containers)?;
    if hami.is_some() && (milli.is_some() || memory.is_some()) {
        return Err(format!(
            "HAMi's GPU resources ({}, ...) cannot be combined with a GPU share annotation",
            hami::MEMORY_RESOURCE
        ));
    }
    let request = match (whole, milli, memory) {
        _ if hami.is_some() => hami.map_or(GpuRequest::None, GpuRequest::Hami),
        (_, Some(_), Some(_)) => {
            return Err(format!(
                "annotations {GPU_MILLI_ANNOTATION} and {GPU_MEMORY_ANNOTATION} cannot both be set"
            ));
        }
        (w, Some(_), _) | (w, _, Some(_)) if w > 0 => {
            return Err(format!(
                "a {GPU_RESOURCE} request cannot be combined with a GPU share annotation"
            ));
        }
        (_, Some(m), None) => {
            let v: u32 = m
                .trim()
                .parse()
                .ok()
                .filter(|v| (1..=MILLI_PER_GPU).contains(v))
                .ok_or_else(|| {
                    format!(
                        "annotation {GPU_MILLI_ANNOTATION}: {} is not an integer in 1..=1000",
                        echo(m)
                    )
                })?;
            GpuRequest::Milli(v)
        }
        (_, None, Some(m)) => {
            let v: u64 = m.trim().parse().ok().filter(|v| *v > 0).ok_or_else(|| {
                format!(
                    "annotation {GPU_MEMORY_ANNOTATION}: {} is not a positive integer (MiB)",
                    echo(m)
                )
            })?;
            GpuRequest::MemoryMib(v)
        }
        (w, None, None) if w > 0 => GpuRequest::Whole(
            u32::try_from(w)
                .ok()
                .filter(|w| *w as usize <= MAX_GPUS_PER_NODE)
                .ok_or_else(|| format!("{GPU_RESOURCE}: {w} GPUs is more than any node has"))?,
        ),
        _ => GpuRequest::None,
    };
    let models: Models = match annotations.get(GPU_MODEL_ANNOTATION) {
        None => Box::default(),
        Some(text) => {
            if !request.is_some() {
                return Err(format!(
                    "annotation {GPU_MODEL_ANNOTATION} is set but the pod requests no GPU"
                ));
            }
            let models: Vec<Box<str>> = text
                .split('|')
                .map(str::trim)
                .filter(|m| !m.is_empty())
                .map(Box::from)
                .collect();
            if models.is_empty() {
                return Err(format!(
                    "annotation {GPU_MODEL_ANNOTATION}: {} names no model",
                    echo(text)
                ));
            }
            models.into_boxed_slice()
        }
    };
    Ok((request, models))
}

/// Milli used on each of a node's `gpus.count` devices by `pods`. Pods with an assignment
/// hold what it says (indices beyond the node's devices are ignored); GPU pods without one
/// (bound by another scheduler, or before gantry wrote assignments) are placed on the
/// first devices with room, after all assigned pods, so the node's totals stay right.
pub fn device_usage<'a>(
    gpus: &NodeGpus,
    pods: impl Iterator<Item = &'a PodGpu> + Clone,
) -> Vec<u32> {
    if let Some(devices) = gpus.hami_devices() {
        return hami_milli(devices, &hami_usage(devices, pods));
    }
    let mut used = vec![0u32; gpus.count];
    for pod in pods.clone() {
        if let Some(a) = &pod.assignment {
            for &(device, milli) in &a.0 {
                if let Some(u) = used.get_mut(usize::from(device)) {
                    *u += milli;
                }
            }
        }
    }
    for pod in pods.filter(|p| p.assignment.is_none()) {
        let (count, milli) = match pod.request {
            GpuRequest::None => continue,
            GpuRequest::Whole(n) => (n as usize, MILLI_PER_GPU),
            GpuRequest::Milli(m) => (1, m),
            GpuRequest::MemoryMib(mib) => match gpus.milli_for_memory(mib) {
                Some(m) => (1, m),
                None => continue,
            },
            // Measured against HAMi devices only, which this node does not have.
            GpuRequest::Hami(_) => continue,
        };
        let mut left = count;
        for u in used.iter_mut() {
            if left == 0 {
                break;
            }
            if *u + milli <= MILLI_PER_GPU {
                *u += milli;
                left -= 1;
            }
        }
    }
    used
}

/// What pods hold of one HAMi device, or what a pod asks of one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceUse {
    /// Memory in MiB.
    pub memory_mib: u64,
    /// Compute in percent.
    pub cores: u32,
    /// Pods sharing it.
    pub shares: u32,
}

impl DeviceUse {
    /// The milli of `device` this use amounts to, for the policies' one-dimensional view:
    /// the larger of its memory and compute fractions, rounded up, and all of it once no
    /// pod more may share it.
    pub fn milli_of(&self, device: &HamiDevice) -> u32 {
        if self.shares >= device.shares {
            return MILLI_PER_GPU;
        }
        let fraction = |used: u64, total: u64| {
            if total == 0 {
                return if used > 0 { MILLI_PER_GPU } else { 0 };
            }
            let milli = (u128::from(used) * u128::from(MILLI_PER_GPU)).div_ceil(u128::from(total));
            u32::try_from(milli)
                .unwrap_or(MILLI_PER_GPU)
                .min(MILLI_PER_GPU)
        };
        fraction(self.memory_mib, device.memory_mib)
            .max(fraction(u64::from(self.cores), u64::from(device.cores)))
    }

    /// Whether `ask` fits on `device` next to this use, by HAMi's rules: a share left,
    /// enough memory and compute, a pod asking all of a GPU's compute only on an unshared
    /// GPU, and a pod asking no compute of its own only where some is left.
    pub fn fits(&self, ask: &DeviceUse, device: &HamiDevice) -> bool {
        self.shares < device.shares
            && self.memory_mib.saturating_add(ask.memory_mib) <= device.memory_mib
            && self.cores.saturating_add(ask.cores) <= device.cores
            && !(ask.cores >= hami::FULL_CORES
                && device.cores == hami::FULL_CORES
                && self.shares > 0)
            && !(ask.cores == 0 && device.cores != 0 && self.cores >= device.cores)
    }

    fn add(&mut self, other: &DeviceUse) {
        self.memory_mib = self.memory_mib.saturating_add(other.memory_mib);
        self.cores = self.cores.saturating_add(other.cores);
        self.shares = self.shares.saturating_add(other.shares);
    }
}

/// How many of a node's HAMi devices `request` asks for, and what it asks of each of them
/// (sized against `device`): a whole GPU is its memory and all its compute; a gantry share
/// of `m` milli is `m` thousandths of its memory and `m/10` percent of compute (rounded up);
/// a share by memory asks no compute of its own.
pub fn hami_demand(request: GpuRequest, device: &HamiDevice) -> Option<(usize, DeviceUse)> {
    let one = |memory_mib, cores| DeviceUse {
        memory_mib,
        cores,
        shares: 1,
    };
    match request {
        GpuRequest::None => None,
        GpuRequest::Whole(n) => Some((n as usize, one(device.memory_mib, hami::FULL_CORES))),
        GpuRequest::Milli(m) => Some((
            1,
            one(
                device.memory_mib.saturating_mul(u64::from(m)) / u64::from(MILLI_PER_GPU),
                m.div_ceil(MILLI_PER_GPU / hami::FULL_CORES),
            ),
        )),
        GpuRequest::MemoryMib(mib) => Some((1, one(mib, 0))),
        GpuRequest::Hami(share) => Some((
            share.count as usize,
            one(share.memory_on(device.memory_mib), share.cores),
        )),
    }
}

/// The milli each of `devices` is used by, from what pods hold of each (`used`, as
/// [`hami_usage`] gives it): the policies' view of HAMi devices.
pub fn hami_milli(devices: &[HamiDevice], used: &[DeviceUse]) -> Vec<u32> {
    used.iter()
        .zip(devices)
        .map(|(used, device)| used.milli_of(device))
        .collect()
}

/// What `pods` hold of each of `devices`: the devices their HAMi allocation names (by UUID;
/// devices the node no longer registers are ignored), then, for GPU pods without one (bound
/// by another scheduler), the first devices with room, so that the node's totals stay right.
pub fn hami_usage<'a>(
    devices: &[HamiDevice],
    pods: impl Iterator<Item = &'a PodGpu> + Clone,
) -> Vec<DeviceUse> {
    let mut used = vec![DeviceUse::default(); devices.len()];
    let pods = pods.filter(|p| !p.allocation_failed);
    for pod in pods.clone() {
        for held in pod.hami_assignment.iter().flat_map(|a| a.iter()) {
            if let Some(i) = devices.iter().position(|d| *d.uuid == *held.uuid) {
                used[i].add(&DeviceUse {
                    memory_mib: held.memory_mib,
                    cores: held.cores,
                    shares: 1,
                });
            }
        }
    }
    for pod in pods.filter(|p| p.hami_assignment.is_none()) {
        let mut left = None;
        for (i, device) in devices.iter().enumerate() {
            let Some((count, ask)) = hami_demand(pod.request, device) else {
                break;
            };
            let left = left.get_or_insert(count);
            if *left == 0 {
                break;
            }
            if used[i].fits(&ask, device) {
                used[i].add(&ask);
                *left -= 1;
            }
        }
    }
    used
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs.iter().copied().collect()
    }

    fn gpus(n: i64) -> Resources {
        let mut r = Resources::default();
        r.set_scalar(GPU_RESOURCE, n);
        r
    }

    fn pod_gpu(whole: i64, annotations: &[(&str, &str)]) -> PodGpu {
        PodGpu::from_pod(&gpus(whole), &labels(annotations), 1)
    }

    #[test]
    fn the_largest_memories_do_not_overflow() {
        let huge = NodeGpus {
            count: 1,
            model: None,
            memory_mib: Some(u64::MAX),
            hami: HamiNode::Absent,
        };
        assert_eq!(huge.milli_for_memory(u64::MAX), Some(1000));
        assert_eq!(huge.milli_for_memory(u64::MAX / 2), Some(500));
        assert_eq!(huge.milli_for_memory(1), Some(1));
    }

    #[test]
    fn node_gpus_from_labels_and_allocatable() {
        let n = NodeGpus::from_node(
            &labels(&[(GPU_PRODUCT_LABEL, "V100M16"), (GPU_MEMORY_LABEL, "16384")]),
            &gpus(4),
        );
        assert_eq!(n.count, 4);
        assert_eq!(n.model.as_deref(), Some("V100M16"));
        assert_eq!(n.memory_mib, Some(16384));
        let bare = NodeGpus::from_node(&labels(&[(GPU_MEMORY_LABEL, "lots")]), &gpus(0));
        assert_eq!(bare, NodeGpus::default(), "unparsable memory is unknown");
        assert_eq!(
            NodeGpus::from_node(&Labels::default(), &gpus(1 << 40)).count,
            MAX_GPUS_PER_NODE
        );
    }

    #[test]
    fn memory_to_milli_rounds_up_and_needs_the_label() {
        let n = NodeGpus {
            count: 1,
            model: None,
            memory_mib: Some(16384),
            hami: HamiNode::Absent,
        };
        assert_eq!(n.milli_for_memory(8192), Some(500));
        assert_eq!(n.milli_for_memory(8193), Some(501));
        assert_eq!(n.milli_for_memory(1), Some(1));
        assert_eq!(n.milli_for_memory(16384), Some(1000));
        assert_eq!(n.milli_for_memory(16385), None);
        assert_eq!(NodeGpus::default().milli_for_memory(1), None);
    }

    #[test]
    fn requests() {
        assert_eq!(pod_gpu(0, &[]).request, GpuRequest::None);
        assert_eq!(pod_gpu(2, &[]).request, GpuRequest::Whole(2));
        assert_eq!(
            pod_gpu(0, &[(GPU_MILLI_ANNOTATION, "300")]).request,
            GpuRequest::Milli(300)
        );
        assert_eq!(
            pod_gpu(0, &[(GPU_MILLI_ANNOTATION, "1000")]).request,
            GpuRequest::Milli(1000)
        );
        assert_eq!(
            pod_gpu(0, &[(GPU_MILLI_ANNOTATION, "1")]).request,
            GpuRequest::Milli(1)
        );
        assert_eq!(
            pod_gpu(0, &[(GPU_MEMORY_ANNOTATION, "4096")]).request,
            GpuRequest::MemoryMib(4096)
        );
        let p = pod_gpu(1, &[(GPU_MODEL_ANNOTATION, "V100M16|V100M32")]);
        assert_eq!(&*p.models, &[Box::from("V100M16"), Box::from("V100M32")]);
        assert!(p.accepts_model(Some("V100M32")));
        assert!(!p.accepts_model(Some("T4")));
        assert!(!p.accepts_model(None));
        assert!(pod_gpu(1, &[]).accepts_model(None));
    }

    #[test]
    fn malformed_annotations_are_errors_not_panics() {
        let err = |whole, a: &[(&str, &str)]| pod_gpu(whole, a).error.unwrap();
        assert_eq!(
            err(0, &[(GPU_MILLI_ANNOTATION, "0")]),
            "annotation gantry.io/gpu-milli: \"0\" is not an integer in 1..=1000"
        );
        assert!(err(0, &[(GPU_MILLI_ANNOTATION, "1001")]).contains("1..=1000"));
        assert!(err(0, &[(GPU_MILLI_ANNOTATION, "half")]).contains("\"half\""));
        assert_eq!(
            err(0, &[(GPU_MEMORY_ANNOTATION, "-5")]),
            "annotation gantry.io/gpu-memory: \"-5\" is not a positive integer (MiB)"
        );
        assert_eq!(
            err(1, &[(GPU_MILLI_ANNOTATION, "500")]),
            "a nvidia.com/gpu request cannot be combined with a GPU share annotation"
        );
        assert_eq!(
            err(
                0,
                &[(GPU_MILLI_ANNOTATION, "5"), (GPU_MEMORY_ANNOTATION, "5")]
            ),
            "annotations gantry.io/gpu-milli and gantry.io/gpu-memory cannot both be set"
        );
        assert_eq!(
            err(0, &[(GPU_MODEL_ANNOTATION, "T4")]),
            "annotation gantry.io/gpu-model is set but the pod requests no GPU"
        );
        assert_eq!(
            err(1, &[(GPU_MODEL_ANNOTATION, " | ")]),
            "annotation gantry.io/gpu-model: \" | \" names no model"
        );
        let p = pod_gpu(0, &[(GPU_MILLI_ANNOTATION, "x")]);
        assert_eq!(
            p.request,
            GpuRequest::None,
            "an invalid pod asks for nothing"
        );
    }

    #[test]
    fn assignment_round_trip_and_errors() {
        let a = GpuAssignment::parse("0:1000, 3:1000").unwrap();
        assert_eq!(a.0, vec![(0, 1000), (3, 1000)]);
        assert_eq!(a.to_string(), "0:1000,3:1000");
        assert_eq!(GpuAssignment::parse("2:250").unwrap().to_string(), "2:250");
        assert!(GpuAssignment::parse("").is_err());
        assert!(GpuAssignment::parse("1").is_err());
        assert!(GpuAssignment::parse("1:0").is_err());
        assert!(GpuAssignment::parse("1:1001").is_err());
        assert!(GpuAssignment::parse("256:10").is_err());
        assert_eq!(
            GpuAssignment::parse("1:10,1:20").unwrap_err(),
            "device 1 is listed twice"
        );
        let p = pod_gpu(0, &[(GPU_ASSIGNMENT_ANNOTATION, "bad")]);
        assert_eq!(p.assignment, None);
        assert_eq!(p.error, None, "a bad assignment is not a bad request");
    }

    #[test]
    fn usage_from_assignments_then_first_fit() {
        let node = NodeGpus {
            count: 3,
            model: None,
            memory_mib: Some(1000),
            hami: HamiNode::Absent,
        };
        let assigned = pod_gpu(
            0,
            &[
                (GPU_MILLI_ANNOTATION, "300"),
                (GPU_ASSIGNMENT_ANNOTATION, "1:300"),
            ],
        );
        let whole = pod_gpu(2, &[]);
        let share = pod_gpu(0, &[(GPU_MILLI_ANNOTATION, "700")]);
        let by_memory = pod_gpu(0, &[(GPU_MEMORY_ANNOTATION, "100")]);
        let out_of_range = pod_gpu(1, &[(GPU_ASSIGNMENT_ANNOTATION, "7:1000")]);
        let pods = [whole, assigned, share, by_memory, out_of_range];
        // Assigned first (device 1 holds 300); then the whole pod takes devices 0 and 2,
        // the 700 share fills device 1, and the 100 share finds no room and is left out.
        assert_eq!(device_usage(&node, pods.iter()), vec![1000, 1000, 1000]);
        let node2 = NodeGpus { count: 2, ..node };
        let pods = [
            pod_gpu(0, &[(GPU_MILLI_ANNOTATION, "600")]),
            pod_gpu(0, &[(GPU_MILLI_ANNOTATION, "600")]),
            pod_gpu(0, &[(GPU_MILLI_ANNOTATION, "600")]),
        ];
        assert_eq!(
            device_usage(&node2, pods.iter()),
            vec![600, 600],
            "what does not fit is left out"
        );
    }

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const TWO_V100: &str = "[{\"id\":\"GPU-a\",\"index\":0,\"count\":10,\"devmem\":32768,\"devcore\":100,\"type\":\"NVIDIA-Tesla V100-PCIE-32GB\",\"health\":true},{\"id\":\"GPU-b\",\"index\":1,\"count\":10,\"devmem\":32768,\"devcore\":100,\"type\":\"NVIDIA-Tesla V100-PCIE-32GB\",\"health\":true},{\"id\":\"GPU-sick\",\"index\":2,\"count\":10,\"devmem\":32768,\"devcore\":100,\"type\":\"NVIDIA-Tesla V100-PCIE-32GB\",\"health\":false}]";

    fn hami_node(extra: &[(&str, &str)], allocatable: i64) -> NodeGpus {
        let mut pairs = vec![(hami::REGISTER_ANNOTATION, TWO_V100)];
        pairs.extend_from_slice(extra);
        NodeGpus::from_api_node(
            &Labels::default(),
            &gpus(allocatable),
            Some(&annotations(&pairs)),
        )
    }

    #[test]
    fn a_hami_registration_gives_the_nodes_devices() {
        let n = hami_node(&[], 30);
        let devices = n.hami_devices().expect("HAMi devices");
        let uuids: Vec<&str> = devices.iter().map(|d| &*d.uuid).collect();
        assert_eq!(
            uuids,
            ["GPU-a", "GPU-b"],
            "the unhealthy device is left out"
        );
        assert_eq!(n.count, 2);
        assert_eq!(n.memory_mib, Some(32768));
        assert_eq!(n.model.as_deref(), Some("NVIDIA-Tesla V100-PCIE-32GB"));
        let cordoned = hami_node(&[(hami::DEVICE_CORDON_ANNOTATION, "GPU-b")], 30);
        assert_eq!(cordoned.count, 1);
        let gone = hami_node(
            &[(hami::HANDSHAKE_ANNOTATION, "Requesting_2024-01-23 04:31:04")],
            0,
        );
        assert!(matches!(gone.hami, HamiNode::Unusable(_)), "{gone:?}");
        assert_eq!(gone.count, 0);
        let bad = NodeGpus::from_api_node(
            &Labels::default(),
            &gpus(1),
            Some(&annotations(&[(hami::REGISTER_ANNOTATION, "garbage")])),
        );
        let HamiNode::Unusable(reason) = &bad.hami else {
            panic!("{bad:?}");
        };
        assert!(
            reason.starts_with("annotation hami.io/node-nvidia-register:"),
            "{reason}"
        );
        let plain = NodeGpus::from_api_node(&Labels::default(), &gpus(4), Some(&BTreeMap::new()));
        assert_eq!((plain.count, &plain.hami), (4, &HamiNode::Absent));
    }

    fn hami_pod(resources: &[(&str, i64)], annotations: &[(&str, &str)]) -> PodGpu {
        let mut r = Resources::default();
        for (name, v) in resources {
            r.set_scalar(name, *v);
        }
        PodGpu::from_pod(&r, &labels(annotations), 1)
    }

    #[test]
    fn hami_requests_read_as_hami_and_its_webhook_read_them() {
        let share = |r: &[(&str, i64)]| match hami_pod(r, &[]).request {
            GpuRequest::Hami(s) => s,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            share(&[(GPU_RESOURCE, 1), (hami::MEMORY_RESOURCE, 8000)]),
            HamiShare {
                count: 1,
                memory: HamiMemory::Mib(8000),
                cores: 0
            }
        );
        assert_eq!(
            share(&[
                (GPU_RESOURCE, 2),
                (hami::MEMORY_PERCENTAGE_RESOURCE, 50),
                (hami::CORES_RESOURCE, 30)
            ]),
            HamiShare {
                count: 2,
                memory: HamiMemory::Percent(50),
                cores: 30
            }
        );
        // Compute alone: all the memory of the GPU, that compute.
        assert_eq!(
            share(&[(GPU_RESOURCE, 1), (hami::CORES_RESOURCE, 25)]).memory,
            HamiMemory::Percent(100)
        );
        // Memory in MiB wins over a percentage, as in HAMi.
        assert_eq!(
            share(&[
                (GPU_RESOURCE, 1),
                (hami::MEMORY_RESOURCE, 100),
                (hami::MEMORY_PERCENTAGE_RESOURCE, 50)
            ])
            .memory,
            HamiMemory::Mib(100)
        );
        // nvidia.com/gpu alone stays whole GPUs.
        assert_eq!(
            hami_pod(&[(GPU_RESOURCE, 1)], &[]).request,
            GpuRequest::Whole(1)
        );
        let p = hami_pod(
            &[(GPU_RESOURCE, 1), (hami::MEMORY_RESOURCE, 1000)],
            &[
                (hami::USE_TYPE_ANNOTATION, "v100, A100"),
                (hami::NOUSE_UUID_ANNOTATION, "GPU-b"),
                (hami::GPU_POLICY_ANNOTATION, "binpack"),
            ],
        );
        let f = p.filter.as_deref().expect("a filter");
        assert!(f.accepts_type("NVIDIA-Tesla V100-PCIE-32GB"));
        assert!(!f.accepts_type("NVIDIA-T4"));
        assert!(f.accepts_uuid("GPU-a") && !f.accepts_uuid("GPU-b"));
        assert!(!p.accepts_model(Some("NVIDIA-T4")));
        assert_eq!(p.policy.gpu, Some(Packing::Binpack));
        assert_eq!(p.policy.node, None);
    }

    #[test]
    fn malformed_hami_requests_say_what_is_wrong() {
        let err = |r: &[(&str, i64)], a: &[(&str, &str)]| hami_pod(r, a).error.unwrap();
        assert!(err(&[(hami::MEMORY_RESOURCE, 100)], &[]).starts_with(
            "nvidia.com/gpumem, nvidia.com/gpumem-percentage and nvidia.com/gpucores need nvidia.com/gpu"
        ));
        assert_eq!(
            err(
                &[(GPU_RESOURCE, 1), (hami::MEMORY_PERCENTAGE_RESOURCE, 101)],
                &[]
            ),
            "nvidia.com/gpumem-percentage: 101 is not a percentage in 0..=100"
        );
        assert_eq!(
            err(&[(GPU_RESOURCE, 1), (hami::CORES_RESOURCE, 150)], &[]),
            "nvidia.com/gpucores: 150 is not a percentage in 0..=100"
        );
        assert!(
            err(&[(GPU_RESOURCE, 1), (hami::MEMORY_RESOURCE, 1 << 40)], &[])
                .contains("more than HAMi can express")
        );
        assert!(
            err(
                &[(GPU_RESOURCE, 1), (hami::MEMORY_RESOURCE, 10)],
                &[(GPU_MILLI_ANNOTATION, "5")]
            )
            .contains("cannot be combined")
        );
        assert_eq!(
            err(
                &[(GPU_RESOURCE, 1), (hami::MEMORY_RESOURCE, 10)],
                &[(hami::NODE_POLICY_ANNOTATION, "topology-aware")]
            ),
            "annotation hami.io/node-scheduler-policy: \"topology-aware\" is not binpack or spread (the HAMi policies gantry follows)"
        );
        let mut r = Resources::default();
        r.set_scalar(GPU_RESOURCE, 2);
        r.set_scalar(hami::MEMORY_RESOURCE, 10);
        assert!(
            PodGpu::from_pod(&r, &Labels::default(), 2)
                .error
                .unwrap()
                .contains("one container per pod")
        );
    }

    #[test]
    fn hami_usage_from_allocations_and_hamis_fit_rules() {
        let n = hami_node(&[], 30);
        let devices = n.hami_devices().unwrap();
        let placed = hami_pod(
            &[
                (GPU_RESOURCE, 1),
                (hami::MEMORY_RESOURCE, 8192),
                (hami::CORES_RESOURCE, 30),
            ],
            &[(hami::ALLOCATED_ANNOTATION, "GPU-b,NVIDIA,8192,30:;")],
        );
        let unplaced = hami_pod(&[(GPU_RESOURCE, 1)], &[]);
        let used = hami_usage(devices, [placed, unplaced].iter());
        assert_eq!(
            used,
            vec![
                DeviceUse {
                    memory_mib: 32768,
                    cores: 100,
                    shares: 1
                },
                DeviceUse {
                    memory_mib: 8192,
                    cores: 30,
                    shares: 1
                },
            ]
        );
        assert_eq!(
            used[1].milli_of(&devices[1]),
            300,
            "the larger of 250 (memory) and 300 (compute)"
        );
        assert_eq!(used[0].milli_of(&devices[0]), 1000);
        let ask = |m, c| DeviceUse {
            memory_mib: m,
            cores: c,
            shares: 1,
        };
        assert!(used[1].fits(&ask(24576, 70), &devices[1]));
        assert!(!used[1].fits(&ask(24577, 0), &devices[1]), "memory");
        assert!(!used[1].fits(&ask(1, 71), &devices[1]), "compute");
        assert!(
            !used[1].fits(&ask(1, 100), &devices[1]),
            "all the compute of a shared GPU"
        );
        let full = DeviceUse {
            memory_mib: 100,
            cores: 100,
            shares: 1,
        };
        assert!(!full.fits(&ask(1, 0), &devices[1]), "no compute left");
        let crowded = DeviceUse {
            memory_mib: 0,
            cores: 0,
            shares: 10,
        };
        assert!(!crowded.fits(&ask(1, 0), &devices[1]), "no share left");
        assert_eq!(crowded.milli_of(&devices[1]), 1000);
        let (count, each) = hami_demand(GpuRequest::Milli(250), &devices[0]).unwrap();
        assert_eq!((count, each), (1, ask(8192, 25)));
        // A pod whose allocation HAMi's device plugin reports failed holds nothing.
        let failed = hami_pod(
            &[(GPU_RESOURCE, 1), (hami::MEMORY_RESOURCE, 8192)],
            &[
                (hami::ALLOCATED_ANNOTATION, "GPU-a,NVIDIA,8192,0:;"),
                (hami::BIND_PHASE_ANNOTATION, hami::BIND_FAILED),
            ],
        );
        assert!(failed.allocation_failed);
        assert_eq!(
            hami_usage(devices, [failed].iter()),
            vec![DeviceUse::default(); 2]
        );
        // The node's milli view follows.
        let pods = [hami_pod(
            &[(GPU_RESOURCE, 1), (hami::MEMORY_RESOURCE, 16384)],
            &[(hami::ALLOCATED_ANNOTATION, "GPU-a,NVIDIA,16384,0:;")],
        )];
        assert_eq!(device_usage(&n, pods.iter()), vec![500, 0]);
    }
}
