//! GpuShare on nodes whose GPUs HAMi's device plugin registered: which devices a pod may take
//! (HAMi's rules, exact in memory, compute and shares, and its type and UUID annotations),
//! how the policies see what it takes, and the allocation HAMi's device plugin reads.

use crate::cache::NodeInfo;
use crate::model::PodInfo;
use crate::model::gpu::{DeviceUse, GpuRequest, HamiNode, MILLI_PER_GPU, hami_demand};
use crate::model::hami::{self, ContainerDevice};

use super::policy::Take;

/// Reason for a node without HAMi devices, for a pod that needs them (HAMi's resources, or
/// devices named by UUID).
pub const NO_HAMI_DEVICES: &str = "node(s) had no GPU registered by HAMi's device plugin";
/// Reason for a node whose HAMi registration cannot be used.
pub const HAMI_UNUSABLE: &str = "node(s) had an unusable HAMi device registration";
/// Reason for a HAMi node without enough devices that can take the pod's share.
pub const INSUFFICIENT_HAMI: &str =
    "node(s) didn't have enough GPUs with the requested memory, compute and share free";
/// Reason for a HAMi node and a pod whose GPUs several containers ask for.
pub const ONE_CONTAINER: &str =
    "node(s) allocate GPUs through HAMi, which gantry does for one container per pod";

/// Reason for a HAMi node avoided for a while: gantry found its lock held for another pod's
/// allocation (see [`LOCK_AVOIDANCE`]).
pub const LOCK_HELD: &str = "node(s) had HAMi's node lock held for another pod's allocation";
/// How long a node whose HAMi lock gantry found held for another pod is avoided, unless
/// gantry takes the lock sooner: about HAMi's wait for a lock, after which the node is tried
/// again (and a lock older than HAMi's expiry taken over).
pub const LOCK_AVOIDANCE: std::time::Duration = std::time::Duration::from_secs(30);

/// Devices of a node by position among its HAMi devices, with what a pod asks of each.
pub type Asks = Vec<(usize, DeviceUse)>;

/// Whether `node` can take the pod ([`candidates`] without listing them, for Filter).
pub fn feasible(pod: &PodInfo, request: GpuRequest, node: &NodeInfo) -> Result<(), &'static str> {
    let devices = usable(pod, request, node)?;
    let mut count = usize::from(request.is_some());
    let mut found = 0;
    for (i, device) in devices.iter().enumerate() {
        let Some((n, ask)) = hami_demand(request, device) else {
            continue;
        };
        count = n;
        if takes(pod, node, i, device, &ask) {
            found += 1;
            if found >= count {
                return Ok(());
            }
        }
    }
    if found < count {
        Err(INSUFFICIENT_HAMI)
    } else {
        Ok(())
    }
}

/// The node's HAMi devices, or why the pod cannot use them; none needed for a pod asking
/// no GPU.
fn usable<'a>(
    pod: &PodInfo,
    request: GpuRequest,
    node: &'a NodeInfo,
) -> Result<&'a [crate::model::gpu::HamiDevice], &'static str> {
    let devices = match &node.node.gpu.hami {
        HamiNode::Devices(d) => d,
        HamiNode::Unusable(_) => return Err(HAMI_UNUSABLE),
        HamiNode::Absent => return Err(NO_HAMI_DEVICES),
    };
    if !request.is_some() {
        return Ok(&[]);
    }
    if pod.gpu.containers > 1 {
        return Err(ONE_CONTAINER);
    }
    Ok(devices)
}

/// Whether device `i` of `node` may take what the pod asks of it.
fn takes(
    pod: &PodInfo,
    node: &NodeInfo,
    i: usize,
    device: &crate::model::gpu::HamiDevice,
    ask: &DeviceUse,
) -> bool {
    let allowed = pod
        .gpu
        .filter
        .as_deref()
        .is_none_or(|f| f.accepts_type(&device.model) && f.accepts_uuid(&device.uuid))
        && pod.gpu.accepts_model(Some(&device.model));
    let used = node.gpu_hami_used.get(i).copied().unwrap_or_default();
    allowed && used.fits(ask, device)
}

/// The devices of `node` that the pod may take, with what it asks of each, and how many it
/// needs; or why the node cannot take it.
pub fn candidates(
    pod: &PodInfo,
    request: GpuRequest,
    node: &NodeInfo,
) -> Result<(usize, Asks), &'static str> {
    let devices = usable(pod, request, node)?;
    let mut count = usize::from(request.is_some());
    let mut out = Vec::new();
    for (i, device) in devices.iter().enumerate() {
        let Some((n, ask)) = hami_demand(request, device) else {
            continue;
        };
        count = n;
        if takes(pod, node, i, device, &ask) {
            out.push((i, ask));
        }
    }
    if out.len() < count {
        return Err(INSUFFICIENT_HAMI);
    }
    Ok((count, out))
}

/// `node` as the policies should see it for a pod taking `take`: devices the pod may not take
/// count as full, and those it may take as having at least the room the take needs (the
/// policies' one-dimensional milli can understate what fits in memory and compute apart),
/// so that a policy's choice is always one of `allowed`.
pub fn masked(node: &NodeInfo, allowed: &[(usize, DeviceUse)], take: Take) -> NodeInfo {
    let room = match take {
        Take::Share(m) => MILLI_PER_GPU.saturating_sub(m),
        Take::Whole(_) | Take::Nothing => 0,
    };
    let mut view = node.clone();
    for (i, used) in view.gpu_used.iter_mut().enumerate() {
        *used = if allowed.iter().any(|(a, _)| *a == i) {
            (*used).min(room)
        } else {
            MILLI_PER_GPU
        };
    }
    view
}

/// The value of HAMi's allocation annotations for the devices `chosen` (positions among the
/// node's HAMi devices, with what the pod takes of each), one container's worth.
pub fn allocation(node: &NodeInfo, chosen: &[(usize, DeviceUse)]) -> String {
    let Some(devices) = node.node.gpu.hami_devices() else {
        return String::new();
    };
    let container: Vec<ContainerDevice> = chosen
        .iter()
        .filter_map(|(i, ask)| {
            devices.get(*i).map(|d| ContainerDevice {
                uuid: d.uuid.to_string(),
                device_type: hami::DEVICE_TYPE.to_string(),
                memory_mib: ask.memory_mib,
                cores: ask.cores,
            })
        })
        .collect();
    hami::encode_pod_devices(&[container])
}
