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

use std::fmt;
use std::sync::Arc;

use super::echo::echo;
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

/// A node's GPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeGpus {
    /// Number of devices.
    pub count: usize,
    /// The model, when the node is labelled with it.
    pub model: Option<Arc<str>>,
    /// Memory of each GPU in MiB, when labelled (an unparsable label counts as unknown).
    pub memory_mib: Option<u64>,
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
}

impl GpuRequest {
    /// True when the pod asks for any GPU.
    pub fn is_some(&self) -> bool {
        !matches!(self, GpuRequest::None)
    }
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
    /// The devices it holds, from its `gantry.io/gpu-assignment` annotation (a malformed
    /// value reads as none: the cache then places the pod's share on the first devices
    /// that have room, keeping the node's totals right).
    pub assignment: Option<GpuAssignment>,
    /// What is wrong with the pod's GPU annotations, if anything: such a pod cannot be
    /// scheduled by the GPU plugin, which reports this message.
    pub error: Option<String>,
}

impl PodGpu {
    /// Reads a pod's GPU request from its requests and (kept) annotations.
    pub fn from_pod(requests: &Resources, annotations: &Labels) -> Self {
        let assignment = annotations
            .get(GPU_ASSIGNMENT_ANNOTATION)
            .and_then(|a| GpuAssignment::parse(a).ok());
        match parse_request(requests, annotations) {
            Ok((request, models)) => PodGpu {
                request,
                models,
                assignment,
                error: None,
            },
            Err(error) => PodGpu {
                assignment,
                error: Some(error),
                ..Default::default()
            },
        }
    }

    /// True when the pod accepts a GPU of `model` (a node without a model label only suits
    /// pods that accept any model).
    pub fn accepts_model(&self, model: Option<&str>) -> bool {
        self.models.is_empty() || model.is_some_and(|m| self.models.iter().any(|a| &**a == m))
    }
}

fn parse_request(
    requests: &Resources,
    annotations: &Labels,
) -> Result<(GpuRequest, Models), String> {
    let whole = requests.scalar(GPU_RESOURCE);
    let milli = annotations.get(GPU_MILLI_ANNOTATION);
    let memory = annotations.get(GPU_MEMORY_ANNOTATION);
    let request = match (whole, milli, memory) {
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
        PodGpu::from_pod(&gpus(whole), &labels(annotations))
    }

    #[test]
    fn the_largest_memories_do_not_overflow() {
        let huge = NodeGpus {
            count: 1,
            model: None,
            memory_mib: Some(u64::MAX),
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
}
