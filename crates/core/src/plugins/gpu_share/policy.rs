//! The scoring policies: how a node is scored for a pod, and which of its GPUs the pod gets.

use serde::Deserialize;

use crate::cache::NodeInfo;
use crate::framework::{MAX_NODE_SCORE, NodeScore};
use crate::model::gpu::{DeviceUse, GpuRequest, MILLI_PER_GPU, hami_demand};

use super::devices::{FreeList, whole_devices};
use super::workload::ShapeTable;

/// A GPU placement policy, as `scoringStrategy` names it.
#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize, PartialEq, Eq, Default)]
pub enum Policy {
    /// gantry's policy (the default): FGD's fragmentation plus the GPU milli a node's cpu can
    /// no longer feed, scored as FGD scores, the tightest GPU among equally good ones.
    #[serde(rename = "Gantry")]
    #[default]
    Gantry,
    /// Fragmentation Gradient Descent as published (Weng et al., ATC 2023): the node (and,
    /// for a share, the GPU) where the typical workload's fragmentation grows least, scored
    /// `sigmoid(decrease / 1000) * 100` truncated to an integer.
    #[serde(rename = "FGD")]
    Fgd,
    /// The node left with the least free cpu and GPU (each relative to the largest node),
    /// scores rescaled between the lowest and the highest; the tightest GPU.
    #[serde(rename = "BestFit")]
    BestFit,
    /// Shared GPUs first, then free GPUs on used nodes, then empty nodes; the tightest GPU.
    #[serde(rename = "GpuPacking")]
    GpuPacking,
    /// The node left with the largest share of its GPU milli free; the emptiest GPU.
    #[serde(rename = "Spread")]
    Spread,
}

impl Policy {
    /// Every policy with the name configuration files use.
    pub const ALL: &'static [(&'static str, Policy)] = &[
        ("Gantry", Policy::Gantry),
        ("FGD", Policy::Fgd),
        ("BestFit", Policy::BestFit),
        ("GpuPacking", Policy::GpuPacking),
        ("Spread", Policy::Spread),
    ];

    /// The name configuration files use.
    pub fn name(self) -> &'static str {
        Policy::ALL
            .iter()
            .find(|(_, p)| *p == self)
            .map_or("", |(n, _)| n)
    }

    /// True when the policy needs the typical workload.
    pub fn uses_fragmentation(self) -> bool {
        matches!(self, Policy::Fgd | Policy::Gantry)
    }

    /// True when raw scores are rescaled between the lowest and the highest.
    pub fn min_max_normalized(self) -> bool {
        matches!(self, Policy::BestFit)
    }
}

/// What a pod takes of one node's GPUs, its memory share resolved against the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// Nothing.
    Nothing,
    /// Whole GPUs.
    Whole(usize),
    /// A share of one GPU, in milli.
    Share(u32),
}

impl Take {
    /// What `request` takes on `node`; `None` when a memory share cannot be resolved there.
    pub fn on(request: GpuRequest, node: &NodeInfo) -> Option<Take> {
        if node.node.gpu.hami_devices().is_some() {
            return take_on_hami(request, node);
        }
        match request {
            // Measured against HAMi devices, which this node does not have.
            GpuRequest::Hami(_) => None,
            GpuRequest::None => Some(Take::Nothing),
            GpuRequest::Whole(n) => Some(Take::Whole(n as usize)),
            GpuRequest::Milli(m) if m >= MILLI_PER_GPU => Some(Take::Whole(1)),
            GpuRequest::Milli(m) => Some(Take::Share(m)),
            GpuRequest::MemoryMib(mib) => match node.node.gpu.milli_for_memory(mib)? {
                m if m >= MILLI_PER_GPU => Some(Take::Whole(1)),
                m => Some(Take::Share(m)),
            },
        }
    }

    /// GPU milli taken in total.
    pub fn milli(self) -> u32 {
        match self {
            Take::Nothing => 0,
            Take::Whole(n) => n as u32 * MILLI_PER_GPU,
            Take::Share(m) => m,
        }
    }
}

/// What `request` takes on the HAMi node `node`, in the policies' milli: a share of one GPU
/// the size of its larger fraction (memory or compute) on the node's first device, whole
/// GPUs when that is all of one; a share of several GPUs counts as one share in scoring
/// (the devices are then chosen one by one).
fn take_on_hami(request: GpuRequest, node: &NodeInfo) -> Option<Take> {
    let device = node.node.gpu.hami_devices()?.first()?;
    let Some((count, ask)) = hami_demand(request, device) else {
        return Some(Take::Nothing);
    };
    let milli = DeviceUse { shares: 0, ..ask }.milli_of(device);
    Some(if milli >= MILLI_PER_GPU {
        Take::Whole(count)
    } else {
        Take::Share(milli.max(1))
    })
}

/// cpu a node has left.
pub fn cpu_left(node: &NodeInfo) -> i64 {
    node.node.allocatable.milli_cpu - node.requested.milli_cpu
}

/// FGD's score for a fragmentation decrease: `sigmoid(decrease / 1000) * 100`, truncated.
pub fn fgd_quantize(decrease: f64) -> i64 {
    (MAX_NODE_SCORE as f64 / (1.0 + (-decrease / 1000.0).exp())) as i64
}

/// FGD: the fragmentation decrease (negative: increase) if the pod with `cpu` and `take` goes
/// on `node`, with, for a share, the sorted position of the best GPU (the first position
/// among equally good ones, largest free first).
pub fn fgd_decrease(
    table: &ShapeTable,
    node: &NodeInfo,
    cpu: i64,
    take: Take,
) -> (f64, Option<usize>) {
    let free = FreeList::of(node);
    let left = cpu_left(node);
    let before = table.fragmentation(left, free.as_slice());
    let after_cpu = left - cpu;
    match take {
        Take::Nothing => (
            before - table.fragmentation(after_cpu, free.as_slice()),
            None,
        ),
        Take::Whole(n) => {
            let after = free.without_whole(n);
            (
                before - table.fragmentation(after_cpu, after.as_slice()),
                None,
            )
        }
        Take::Share(m) => {
            let mut best: Option<(f64, usize)> = None;
            for at in free.share_candidates(m) {
                let after = free.with_share_taken(at, m);
                let d = before - table.fragmentation(after_cpu, after.as_slice());
                if best.is_none_or(|(b, _)| d > b) {
                    best = Some((d, at));
                }
            }
            match best {
                Some((d, at)) => (d, Some(at)),
                None => (f64::NEG_INFINITY, None),
            }
        }
    }
}

/// FGD's node score, as the reference computes it: the best GPU by quantized score.
pub fn fgd_score(table: &ShapeTable, node: &NodeInfo, cpu: i64, take: Take) -> i64 {
    match take {
        Take::Share(m) => {
            let free = FreeList::of(node);
            let left = cpu_left(node);
            let before = table.fragmentation(left, free.as_slice());
            free.share_candidates(m)
                .map(|at| {
                    let after = free.with_share_taken(at, m);
                    fgd_quantize(before - table.fragmentation(left - cpu, after.as_slice()))
                })
                .max()
                .unwrap_or(0)
        }
        _ => fgd_quantize(fgd_decrease(table, node, cpu, take).0),
    }
}

/// FGD's choice of GPU for a share: the lowest-indexed device whose quantized score is best.
pub fn fgd_share_device(table: &ShapeTable, node: &NodeInfo, cpu: i64, milli: u32) -> Option<u16> {
    let free = FreeList::of(node);
    let sorted = free.as_slice();
    let left = cpu_left(node);
    let before = table.fragmentation(left, sorted);
    let mut best: Option<(i64, usize)> = None;
    for device in 0..node.gpu_used.len() {
        let v = node.gpu_free(device);
        if v < milli {
            continue;
        }
        let at = sorted.iter().position(|f| *f == v)?;
        let after = free.with_share_taken(at, milli);
        let s = fgd_quantize(before - table.fragmentation(left - cpu, after.as_slice()));
        if best.is_none_or(|(b, _)| s > b) {
            best = Some((s, device));
        }
    }
    best.and_then(|(_, d)| u16::try_from(d).ok())
}

/// gantry: the decrease of a node's waste (FGD's fragmentation plus the GPU milli its cpu can
/// no longer feed, see [`ShapeTable::stranded`]) if the pod with `cpu` and `take` goes there,
/// with, for a share, the sorted position of the GPU: the one whose quantized decrease is
/// best, the tightest among equals.
pub fn gantry_decrease(
    table: &ShapeTable,
    node: &NodeInfo,
    cpu: i64,
    take: Take,
) -> (f64, Option<usize>) {
    let waste = |cpu_left: i64, free: &FreeList| {
        table.fragmentation(cpu_left, free.as_slice()) + table.stranded(cpu_left, free.total())
    };
    let free = FreeList::of(node);
    let left = cpu_left(node);
    let before = waste(left, &free);
    let after_cpu = left - cpu;
    match take {
        Take::Nothing => (before - waste(after_cpu, &free), None),
        Take::Whole(n) => (before - waste(after_cpu, &free.without_whole(n)), None),
        Take::Share(m) => {
            let mut best: Option<(i64, f64, usize)> = None;
            // Candidates come largest free first: `>=` keeps the tightest of equals.
            for at in free.share_candidates(m) {
                let d = before - waste(after_cpu, &free.with_share_taken(at, m));
                let q = fgd_quantize(d);
                if best.is_none_or(|(b, _, _)| q >= b) {
                    best = Some((q, d, at));
                }
            }
            match best {
                Some((_, d, at)) => (d, Some(at)),
                None => (f64::NEG_INFINITY, None),
            }
        }
    }
}

/// gantry's node score: FGD's quantized score of the waste decrease.
pub fn gantry_score(table: &ShapeTable, node: &NodeInfo, cpu: i64, take: Take) -> i64 {
    fgd_quantize(gantry_decrease(table, node, cpu, take).0)
}

/// gantry's GPU for a share: the lowest-indexed device with the free milli
/// [`gantry_decrease`] chose.
pub fn gantry_share_device(
    table: &ShapeTable,
    node: &NodeInfo,
    cpu: i64,
    milli: u32,
) -> Option<u16> {
    let (_, at) = gantry_decrease(table, node, cpu, Take::Share(milli));
    let free = FreeList::of(node).as_slice().get(at?).copied()?;
    (0..node.gpu_used.len())
        .find(|&i| node.gpu_free(i) == free)
        .and_then(|i| u16::try_from(i).ok())
}

/// Largest node capacities, which BestFit measures leftovers against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// Largest allocatable cpu of any node (millicores), at least 1.
    pub cpu: i64,
    /// Largest GPU milli of any node, at least 1.
    pub gpu_milli: i64,
}

/// BestFit's raw score: `(1 - (cpu left / largest cpu + GPU milli left / largest GPU milli)
/// / 2) * 100`, truncated, with what the pod takes already subtracted.
pub fn best_fit_score(node: &NodeInfo, cpu: i64, take: Take, cap: Capacity) -> i64 {
    let cpu_after = (cpu_left(node) - cpu) as f64;
    let gpu_after = f64::from(FreeList::of(node).total()) - f64::from(take.milli());
    let leftover = 0.5 * cpu_after / cap.cpu as f64 + 0.5 * gpu_after / cap.gpu_milli as f64;
    ((1.0 - leftover) * MAX_NODE_SCORE as f64) as i64
}

/// Rescales raw scores so the lowest maps to 0 and the highest to 100 (all 0 when equal).
pub fn min_max_normalize(scores: &mut [NodeScore]) {
    let lo = scores.iter().map(|s| s.score).min().unwrap_or(0);
    let hi = scores.iter().map(|s| s.score).max().unwrap_or(0);
    for s in scores.iter_mut() {
        s.score = if hi == lo {
            0
        } else {
            (s.score - lo) * MAX_NODE_SCORE / (hi - lo)
        };
    }
}

/// The reference GpuPacking score: a share on a used GPU scores 50..=100 (fuller GPUs
/// higher), whole GPUs on a used node 33..=50 (fewer better), an empty node 0..=33.
pub fn gpu_packing_score(node: &NodeInfo, take: Take) -> i64 {
    let (count, milli) = match take {
        Take::Nothing => return 0,
        Take::Whole(n) => (n, MILLI_PER_GPU),
        Take::Share(m) => (1, m),
    };
    let devices = node.gpu_used.len();
    let fully_free = (0..devices)
        .filter(|&i| node.gpu_free(i) >= MILLI_PER_GPU)
        .count();
    let third = MAX_NODE_SCORE / 3;
    if fully_free == devices {
        return (third - fully_free as i64).max(fully_free as i64);
    }
    // The GPUs used: the tightest ones with room, in index order among equals.
    let mut order: Vec<usize> = (0..devices).collect();
    order.sort_by_key(|&i| node.gpu_free(i));
    let used: Vec<usize> = order
        .into_iter()
        .filter(|&i| node.gpu_free(i) >= milli)
        .take(count)
        .collect();
    if used.len() < count {
        return 0;
    }
    let whole_used = used
        .iter()
        .filter(|&&i| node.gpu_free(i) >= MILLI_PER_GPU)
        .count();
    if whole_used > 0 {
        return (MAX_NODE_SCORE / 2 - whole_used as i64).max(third);
    }
    let free_pct: i64 = used
        .iter()
        .map(|&i| i64::from(node.gpu_free(i)) * 100 / i64::from(MILLI_PER_GPU))
        .sum();
    (MAX_NODE_SCORE - free_pct / 10).max(MAX_NODE_SCORE / 2)
}

/// Spread: the share of the node's GPU milli left free once the pod is placed, 0..=100.
pub fn spread_score(node: &NodeInfo, take: Take) -> i64 {
    let devices = node.gpu_used.len() as i64;
    if take == Take::Nothing || devices == 0 {
        return 0;
    }
    let after = i64::from(FreeList::of(node).total()) - i64::from(take.milli());
    (after.max(0) * MAX_NODE_SCORE) / (devices * i64::from(MILLI_PER_GPU))
}

/// The lowest-indexed device with room for `milli` that has the least (`tightest`) or the
/// most free milli.
pub fn share_device(node: &NodeInfo, milli: u32, tightest: bool) -> Option<u16> {
    let mut best: Option<(u32, usize)> = None;
    for i in 0..node.gpu_used.len() {
        let f = node.gpu_free(i);
        if f < milli {
            continue;
        }
        let better = match best {
            None => true,
            Some((b, _)) if tightest => f < b,
            Some((b, _)) => f > b,
        };
        if better {
            best = Some((f, i));
        }
    }
    best.and_then(|(_, i)| u16::try_from(i).ok())
}

/// The devices `take` gets on `node` under `policy` (FGD's share choice needs `table`), as
/// (device, milli) pairs; `None` when the node has no room.
pub fn choose_devices(
    policy: Policy,
    table: Option<&ShapeTable>,
    node: &NodeInfo,
    cpu: i64,
    take: Take,
) -> Option<Vec<(u16, u32)>> {
    match take {
        Take::Nothing => Some(Vec::new()),
        Take::Whole(n) => {
            whole_devices(node, n).map(|d| d.into_iter().map(|i| (i, MILLI_PER_GPU)).collect())
        }
        Take::Share(m) => {
            let device = match (policy, table) {
                (Policy::Fgd, Some(t)) => fgd_share_device(t, node, cpu, m),
                (Policy::Gantry, Some(t)) => gantry_share_device(t, node, cpu, m),
                (Policy::Spread, _) => share_device(node, m, false),
                _ => share_device(node, m, true),
            }?;
            Some(vec![(device, m)])
        }
    }
}
