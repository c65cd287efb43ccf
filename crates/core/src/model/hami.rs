//! HAMi's formats (its `docs/develop/protocol.md` and the code that reads and writes them):
//! how HAMi's device plugin registers a node's GPUs in node annotations, and how HAMi's
//! scheduler tells that device plugin which devices to give each container of a pod, in pod
//! annotations. gantry reads the first and writes the second, so that HAMi's device plugin
//! and its in-container limiter enforce the shares gantry places.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::echo::echo;

/// Node annotation: the node's NVIDIA devices, as HAMi's device plugin registers them.
pub const REGISTER_ANNOTATION: &str = "hami.io/node-nvidia-register";
/// Node annotation: the handshake between HAMi's scheduler and its device plugin.
pub const HANDSHAKE_ANNOTATION: &str = "hami.io/node-handshake";
/// Node annotation: devices (UUIDs, comma-separated) taken out of scheduling by an operator.
pub const DEVICE_CORDON_ANNOTATION: &str = "hami.io/device-cordon";
/// Node annotation: the pod whose devices the node's device plugin is allocating.
pub const NODE_LOCK_ANNOTATION: &str = "hami.io/mutex.lock";
/// Pod annotation: the devices still to allocate, per container.
pub const TO_ALLOCATE_ANNOTATION: &str = "hami.io/vgpu-devices-to-allocate";
/// Pod annotation: the devices allocated, per container (what the pod holds).
pub const ALLOCATED_ANNOTATION: &str = "hami.io/vgpu-devices-allocated";
/// Pod annotation (and label): the node the devices are on.
pub const ASSIGNED_NODE_ANNOTATION: &str = "hami.io/vgpu-node";
/// Pod annotation: when the devices were chosen (Unix seconds).
pub const ASSIGNED_TIME_ANNOTATION: &str = "hami.io/vgpu-time";
/// Pod annotation: where the device plugin's allocation stands ([`BIND_ALLOCATING`],
/// [`BIND_SUCCESS`], [`BIND_FAILED`]).
pub const BIND_PHASE_ANNOTATION: &str = "hami.io/bind-phase";
/// Pod annotation: when the pod was bound (Unix seconds).
pub const BIND_TIME_ANNOTATION: &str = "hami.io/bind-time";
/// Bind phase: bound, the device plugin has not allocated yet.
pub const BIND_ALLOCATING: &str = "allocating";
/// Bind phase: the device plugin allocated the devices.
pub const BIND_SUCCESS: &str = "success";
/// Bind phase: the device plugin could not allocate the devices.
pub const BIND_FAILED: &str = "failed";

/// The device type HAMi's NVIDIA backend writes in allocations.
pub const DEVICE_TYPE: &str = "NVIDIA";
/// Container resource: GPU memory per GPU, in MiB.
pub const MEMORY_RESOURCE: &str = "nvidia.com/gpumem";
/// Container resource: GPU memory per GPU, in percent of the device's.
pub const MEMORY_PERCENTAGE_RESOURCE: &str = "nvidia.com/gpumem-percentage";
/// Container resource: compute per GPU, in percent of the device's.
pub const CORES_RESOURCE: &str = "nvidia.com/gpucores";
/// Container resource: the task priority HAMi's limiter gives the container (not a
/// resource any node offers; nothing to schedule by).
pub const PRIORITY_RESOURCE: &str = "nvidia.com/priority";
/// Pod annotation: the device modes (`hami-core`, `mig`, `mps`) the pod accepts.
pub const MODE_ANNOTATION: &str = "nvidia.com/vgpu-mode";
/// Pod annotation: all of the pod's GPUs on one NUMA node (`true`).
pub const NUMA_BIND_ANNOTATION: &str = "nvidia.com/numa-bind";
/// Pod annotation: GPU types (substrings, comma-separated) the pod may use.
pub const USE_TYPE_ANNOTATION: &str = "nvidia.com/use-gputype";
/// Pod annotation: GPU types the pod must not use.
pub const NOUSE_TYPE_ANNOTATION: &str = "nvidia.com/nouse-gputype";
/// Pod annotation: device UUIDs (comma-separated) the pod may use.
pub const USE_UUID_ANNOTATION: &str = "nvidia.com/use-gpuuuid";
/// Pod annotation: device UUIDs the pod must not use.
pub const NOUSE_UUID_ANNOTATION: &str = "nvidia.com/nouse-gpuuuid";
/// Pod annotation: how nodes are chosen, `binpack` or `spread`.
pub const NODE_POLICY_ANNOTATION: &str = "hami.io/node-scheduler-policy";
/// Pod annotation: how GPUs of a node are chosen, `binpack` or `spread`.
pub const GPU_POLICY_ANNOTATION: &str = "hami.io/gpu-scheduler-policy";

/// A device's compute, whole: HAMi counts compute in percent.
pub const FULL_CORES: u32 = 100;
/// The device mode of a GPU partitioned by MIG, which HAMi allocates by MIG profile.
pub const MIG_MODE: &str = "mig";
/// The device mode of a GPU shared by HAMi's in-container limiter (the default).
pub const HAMI_CORE_MODE: &str = "hami-core";

/// Separates the devices of one container (and the devices of a legacy registration).
const DEVICE_SEPARATOR: char = ':';
/// Separates the containers of a pod.
const CONTAINER_SEPARATOR: char = ';';

/// One device as HAMi's device plugin registers it (`DeviceInfo` in HAMi's JSON; the field
/// names are HAMi's, fields it leaves out read as zero, as Go's decoder reads them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisteredDevice {
    /// The device's UUID.
    #[serde(rename = "id", default)]
    pub uuid: String,
    /// Its index on the node.
    #[serde(default)]
    pub index: u32,
    /// How many containers may share it at once (the device plugin's `deviceSplitCount`).
    #[serde(rename = "count", default)]
    pub shares: u32,
    /// Its memory in MiB (after the device plugin's memory scaling).
    #[serde(rename = "devmem", default)]
    pub memory_mib: u64,
    /// Its compute in percent (100, or as the device plugin's core scaling sets it).
    #[serde(rename = "devcore", default)]
    pub cores: u32,
    /// Its model, e.g. `NVIDIA-Tesla V100-PCIE-32GB`.
    #[serde(rename = "type", default)]
    pub model: String,
    /// Its NUMA node.
    #[serde(default)]
    pub numa: i64,
    /// How the device is shared: `hami-core` (the default), `mig` or `mps`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mode: String,
    /// Whether the device plugin reports it healthy.
    #[serde(rename = "health", default)]
    pub healthy: bool,
}

impl RegisteredDevice {
    /// The device's mode, `hami-core` when the registration gives none.
    pub fn mode(&self) -> &str {
        if self.mode.is_empty() {
            HAMI_CORE_MODE
        } else {
            &self.mode
        }
    }
}

/// The devices of a `hami.io/node-nvidia-register` value: the JSON array HAMi's device
/// plugin writes today, or the colon-separated form of earlier versions
/// (`UUID,count,memory,cores,type,numa,health[,index,mode]:` per device).
pub fn decode_registration(text: &str) -> Result<Vec<RegisteredDevice>, String> {
    let trimmed = text.trim();
    if trimmed.starts_with('[') {
        return serde_json::from_str(trimmed).map_err(|e| format!("not HAMi's device list: {e}"));
    }
    if !trimmed.contains(DEVICE_SEPARATOR) {
        return Err(format!(
            "{} is neither a JSON device list nor devices separated by ':'",
            echo(text)
        ));
    }
    trimmed
        .split(DEVICE_SEPARATOR)
        .filter(|d| !d.is_empty())
        .map(decode_legacy_device)
        .collect()
}

fn decode_legacy_device(text: &str) -> Result<RegisteredDevice, String> {
    let fields: Vec<&str> = text.split(',').collect();
    if fields.len() != 7 && fields.len() != 9 {
        return Err(format!(
            "device {} has {} fields, not 7 or 9",
            echo(text),
            fields.len()
        ));
    }
    let number = |i: usize, what: &str| -> Result<u64, String> {
        fields[i].parse::<u64>().map_err(|_| {
            format!(
                "device {}: {what} {} is not a number",
                echo(fields[0]),
                echo(fields[i])
            )
        })
    };
    let narrow = |v: u64, what: &str| {
        u32::try_from(v).map_err(|_| format!("device {}: {what} {v} is too large", echo(fields[0])))
    };
    let healthy = go_bool(fields[6]).ok_or_else(|| {
        format!(
            "device {}: health {} is not a boolean",
            echo(fields[0]),
            echo(fields[6])
        )
    })?;
    let numa = fields[5].parse::<i64>().map_err(|_| {
        format!(
            "device {}: numa {} is not a number",
            echo(fields[0]),
            echo(fields[5])
        )
    })?;
    let (index, mode) = if fields.len() == 9 {
        (narrow(number(7, "index")?, "index")?, fields[8].to_string())
    } else {
        (0, String::new())
    };
    Ok(RegisteredDevice {
        uuid: fields[0].to_string(),
        index,
        shares: narrow(number(1, "count")?, "count")?,
        memory_mib: number(2, "memory")?,
        cores: narrow(number(3, "cores")?, "cores")?,
        model: fields[4].to_string(),
        numa,
        mode,
        healthy,
    })
}

/// A boolean as Go's `strconv.ParseBool` reads it.
fn go_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// The JSON value of `hami.io/node-nvidia-register` for `devices`, as HAMi's device plugin
/// writes it.
pub fn encode_registration(devices: &[RegisteredDevice]) -> String {
    serde_json::to_string(devices).unwrap_or_default()
}

/// What a `hami.io/node-handshake` value says of the node's device plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handshake {
    /// No handshake: a registration without it is taken as it is.
    Absent,
    /// The device plugin reported (`Reported <time>`, HAMi before 2.4).
    Reported,
    /// A scheduler asked the device plugin to report (`Requesting_<time>`).
    Requesting,
    /// The node's devices were cleaned up (`Deleted_<time>`): none is usable.
    Deleted,
}

impl Handshake {
    /// Reads a handshake value.
    pub fn parse(value: Option<&str>) -> Handshake {
        match value {
            None => Handshake::Absent,
            Some(v) if v.starts_with("Deleted") => Handshake::Deleted,
            Some(v) if v.starts_with("Requesting") => Handshake::Requesting,
            Some(_) => Handshake::Reported,
        }
    }

    /// Whether the node's registered devices may be used, as HAMi's scheduler decides it: not
    /// after a clean-up, nor while a scheduler's request stands unanswered and the node no
    /// longer offers `nvidia.com/gpu` (its device plugin is gone; HAMi waits 60 seconds for
    /// an answer, gantry takes the kubelet's word, which is what HAMi checks after them).
    pub fn devices_usable(self, gpu_allocatable: i64) -> bool {
        match self {
            Handshake::Deleted => false,
            Handshake::Requesting => gpu_allocatable > 0,
            Handshake::Absent | Handshake::Reported => true,
        }
    }
}

/// A device allocated to a container: `UUID,type,memory,cores` in HAMi's pod annotations.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ContainerDevice {
    /// The device's UUID.
    pub uuid: String,
    /// The device type (`NVIDIA`).
    pub device_type: String,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// Compute in percent.
    pub cores: u32,
}

/// Each container's devices, in HAMi's order: init containers first, then the others.
pub type PodDevices = Vec<Vec<ContainerDevice>>;

/// The devices of `hami.io/vgpu-devices-to-allocate` or `hami.io/vgpu-devices-allocated`:
/// containers ended by `;`, devices ended by `:`.
pub fn decode_pod_devices(text: &str) -> Result<PodDevices, String> {
    let mut containers: Vec<&str> = text.split(CONTAINER_SEPARATOR).collect();
    // The value ends with the separator: the part after it is not a container.
    if containers.last().is_some_and(|c| c.is_empty()) {
        containers.pop();
    }
    containers
        .into_iter()
        .map(decode_container_devices)
        .collect()
}

/// One container's devices (`UUID,type,memory,cores:` each).
pub fn decode_container_devices(text: &str) -> Result<Vec<ContainerDevice>, String> {
    let mut out = Vec::new();
    for device in text.split(DEVICE_SEPARATOR).filter(|d| d.contains(',')) {
        let fields: Vec<&str> = device.split(',').collect();
        if fields.len() < 4 {
            return Err(format!(
                "device {} has {} fields, not 4 (UUID,type,memory,cores)",
                echo(device),
                fields.len()
            ));
        }
        let memory_mib = fields[2].parse::<u64>().map_err(|_| {
            format!(
                "device {}: memory {} is not a number",
                echo(fields[0]),
                echo(fields[2])
            )
        })?;
        let cores = fields[3].parse::<u32>().map_err(|_| {
            format!(
                "device {}: cores {} is not a number",
                echo(fields[0]),
                echo(fields[3])
            )
        })?;
        out.push(ContainerDevice {
            uuid: fields[0].to_string(),
            device_type: fields[1].to_string(),
            memory_mib,
            cores,
        });
    }
    Ok(out)
}

/// The annotation value for `devices`, as HAMi's scheduler writes it.
pub fn encode_pod_devices(devices: &[Vec<ContainerDevice>]) -> String {
    let mut out = String::new();
    for container in devices {
        for d in container {
            let _ = write!(
                out,
                "{},{},{},{}{DEVICE_SEPARATOR}",
                d.uuid, d.device_type, d.memory_mib, d.cores
            );
        }
        out.push(CONTAINER_SEPARATOR);
    }
    out
}

/// The value of `hami.io/mutex.lock` taken for the pod `namespace/name` at `time` (RFC 3339).
pub fn node_lock(time: &str, namespace: &str, name: &str) -> String {
    format!("{time},{namespace},{name}")
}

/// The holder of a `hami.io/mutex.lock` value: (time as written, namespace, name); a lock
/// written by a HAMi older than 2.4 has a time only (empty namespace and name).
pub fn parse_node_lock(value: &str) -> Result<(&str, &str, &str), String> {
    let parts: Vec<&str> = value.split(',').collect();
    match parts.as_slice() {
        [time] => Ok((time, "", "")),
        [time, namespace, name] => Ok((time, namespace, name)),
        _ => Err(format!("{} is not <time>,<namespace>,<name>", echo(value))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let path = format!(
            "{}/src/model/testdata/hami/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn the_documented_legacy_registration_reads_as_hami_reads_it() {
        let devices = decode_registration(&fixture("register-legacy.txt")).unwrap();
        assert_eq!(devices.len(), 2);
        let d = &devices[0];
        assert_eq!(d.uuid, "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec");
        assert_eq!(
            (d.shares, d.memory_mib, d.cores, d.numa, d.healthy),
            (10, 32768, 100, 0, true)
        );
        assert_eq!(d.model, "NVIDIA-Tesla V100-PCIE-32GB");
        assert_eq!(d.mode(), HAMI_CORE_MODE);
        assert_eq!(devices[1].uuid, "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448");
        // Round trip through today's JSON form.
        assert_eq!(
            decode_registration(&encode_registration(&devices)).unwrap(),
            devices
        );
    }

    #[test]
    fn todays_json_registrations_read_as_hami_reads_them() {
        let devices = decode_registration(&fixture("register-json.txt")).unwrap();
        assert_eq!(
            devices,
            vec![RegisteredDevice {
                uuid: "GPU-0".to_string(),
                index: 0,
                shares: 10,
                memory_mib: 8192,
                cores: 100,
                model: "NVIDIA-A100".to_string(),
                numa: 0,
                mode: "hami-core".to_string(),
                healthy: true,
            }]
        );
        let text = encode_registration(&devices);
        assert_eq!(decode_registration(&text).unwrap(), devices);
        let two = decode_registration(&fixture("register-json-two.txt")).unwrap();
        assert_eq!(two.len(), 2);
        assert_eq!(
            (two[1].uuid.as_str(), two[1].index, two[1].numa),
            ("GPU-1", 0, 0)
        );
        let mig = decode_registration(&fixture("register-json-mig.txt")).unwrap();
        assert_eq!(
            mig[0].mode(),
            MIG_MODE,
            "MIG profiles are skipped, the mode kept"
        );
    }

    #[test]
    fn malformed_registrations_say_what_is_wrong() {
        assert!(
            decode_registration("[{\"id\": 5}]")
                .unwrap_err()
                .starts_with("not HAMi's device list")
        );
        assert!(
            decode_registration("GPU-0")
                .unwrap_err()
                .contains("neither")
        );
        assert_eq!(
            decode_registration("GPU-0,10,8192:").unwrap_err(),
            "device \"GPU-0,10,8192\" has 3 fields, not 7 or 9"
        );
        assert_eq!(
            decode_registration("GPU-0,ten,8192,100,T4,0,true:").unwrap_err(),
            "device \"GPU-0\": count \"ten\" is not a number"
        );
        assert_eq!(
            decode_registration("GPU-0,10,8192,100,T4,0,yes:").unwrap_err(),
            "device \"GPU-0\": health \"yes\" is not a boolean"
        );
        let nine = decode_registration("GPU-0,10,8192,100,T4,1,F,3,mps:").unwrap();
        assert_eq!(
            (nine[0].index, nine[0].mode(), nine[0].healthy),
            (3, "mps", false)
        );
    }

    #[test]
    fn handshakes_as_hami_reads_them() {
        let reported = fixture("handshake-reported.txt");
        let requesting = fixture("handshake-requesting.txt");
        assert_eq!(Handshake::parse(Some(&reported)), Handshake::Reported);
        assert_eq!(Handshake::parse(Some(&requesting)), Handshake::Requesting);
        assert_eq!(
            Handshake::parse(Some("Deleted_2024-01-23 04:31:04")),
            Handshake::Deleted
        );
        assert!(Handshake::Requesting.devices_usable(40));
        assert!(!Handshake::Requesting.devices_usable(0));
        assert!(!Handshake::Deleted.devices_usable(40));
        assert!(Handshake::Absent.devices_usable(0));
    }

    #[test]
    fn the_documented_allocations_round_trip() {
        for name in ["to-allocate-two-containers.txt", "to-allocate-cores.txt"] {
            let text = fixture(name);
            let devices = decode_pod_devices(&text).unwrap();
            assert_eq!(devices.len(), 2, "{name}");
            assert_eq!(encode_pod_devices(&devices), text, "{name}");
        }
        let devices = decode_pod_devices(&fixture("to-allocate-two-containers.txt")).unwrap();
        assert_eq!(
            devices[1],
            vec![ContainerDevice {
                uuid: "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448".to_string(),
                device_type: DEVICE_TYPE.to_string(),
                memory_mib: 5000,
                cores: 0,
            }]
        );
        let two = decode_container_devices(&fixture("container-two-devices.txt")).unwrap();
        assert_eq!(two.len(), 2);
        assert_eq!(
            (two[1].uuid.as_str(), two[1].memory_mib, two[1].cores),
            ("GPU-uuid2", 2048, 20)
        );
        // A container without devices is an empty part, kept in place.
        let with_empty = decode_pod_devices(";GPU-a,NVIDIA,1000,10:;").unwrap();
        assert_eq!(with_empty.len(), 2);
        assert!(with_empty[0].is_empty());
        assert_eq!(encode_pod_devices(&with_empty), ";GPU-a,NVIDIA,1000,10:;");
    }

    #[test]
    fn malformed_allocations_say_what_is_wrong() {
        assert_eq!(
            decode_pod_devices("GPU-a,NVIDIA,1000:;").unwrap_err(),
            "device \"GPU-a,NVIDIA,1000\" has 3 fields, not 4 (UUID,type,memory,cores)"
        );
        assert_eq!(
            decode_pod_devices("GPU-a,NVIDIA,lots,10:;").unwrap_err(),
            "device \"GPU-a\": memory \"lots\" is not a number"
        );
    }

    #[test]
    fn node_locks_as_hami_writes_them() {
        let lock = node_lock("2024-01-23T04:31:04Z", "default", "train");
        assert_eq!(lock, "2024-01-23T04:31:04Z,default,train");
        assert_eq!(
            parse_node_lock(&lock).unwrap(),
            ("2024-01-23T04:31:04Z", "default", "train")
        );
        assert_eq!(
            parse_node_lock("2024-01-23T04:31:04Z").unwrap(),
            ("2024-01-23T04:31:04Z", "", "")
        );
        assert!(parse_node_lock("a,b").is_err());
    }
}
