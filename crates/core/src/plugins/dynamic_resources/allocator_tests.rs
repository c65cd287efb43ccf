//! The allocator against small clusters of NVIDIA-shaped ResourceSlices.

use super::*;
use crate::cache::Cache;
use crate::model::dra::claim::ResourceClaimModel;
use crate::model::dra::class::DeviceClassModel;
use crate::model::dra::slice::SliceModel;

/// A cluster's DRA objects, from JSON.
struct Cluster {
    cache: Cache,
    labels: Labels,
}

impl Cluster {
    fn new() -> Cluster {
        let mut cache = Cache::new();
        cache.upsert_device_class(
            DeviceClassModel::from_api(
                &serde_json::from_value(serde_json::json!({
                    "metadata": {"name": "gpu.nvidia.com"},
                    "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}
                }))
                .unwrap(),
            )
            .unwrap(),
        );
        Cluster {
            cache,
            labels: Labels::default(),
        }
    }

    /// A slice of `node` with GPUs `(name, productName, pcieRoot)`.
    fn gpus(&mut self, node: &str, generation: i64, gpus: &[(&str, &str, &str)]) -> &mut Self {
        let devices: Vec<_> = gpus
            .iter()
            .map(|(name, product, root)| {
                serde_json::json!({"name": name, "attributes": {
                    "productName": {"string": product},
                    "resource.kubernetes.io/pcieRoot": {"string": root}},
                    "capacity": {"memory": {"value": "40Gi"}}})
            })
            .collect();
        self.slice(serde_json::json!({
            "metadata": {"name": format!("{node}-gpus-{generation}")},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
                "devices": devices}
        }))
    }

    fn slice(&mut self, json: serde_json::Value) -> &mut Self {
        let slice = SliceModel::from_api(&serde_json::from_value(json).unwrap()).unwrap();
        self.cache.upsert_resource_slice(slice);
        self
    }

    fn claim(&mut self, json: serde_json::Value) -> ResourceClaimModel {
        let claim = ResourceClaimModel::from_api(&serde_json::from_value(json).unwrap()).unwrap();
        self.cache.upsert_resource_claim(claim.clone());
        claim
    }

    /// The devices given to `claims` on `node`, as `request=device` per claim.
    fn allocate(
        &self,
        claims: &[&ResourceClaimModel],
        node: &str,
    ) -> Result<Option<Vec<String>>, String> {
        let resources = self.cache.dynamic_resources();
        let allocated = Allocated::of(resources, []);
        let allocator = Allocator::new(resources, claims, &allocated, &Selectors::default())?;
        let node = Node {
            name: node,
            labels: &self.labels,
        };
        Ok(allocator.allocate(node)?.map(|allocations| {
            allocations
                .iter()
                .map(|a| {
                    a.devices
                        .iter()
                        .map(|d| format!("{}={}", d.request, d.device))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .collect()
        }))
    }
}

fn gpu_claim(name: &str, request: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}")},
        "spec": {"devices": request}
    })
}

fn one_gpu(name: &str) -> serde_json::Value {
    gpu_claim(
        name,
        serde_json::json!({"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}),
    )
}

#[test]
fn the_first_free_device_in_order_is_given_and_a_node_without_one_has_none() {
    let mut c = Cluster::new();
    c.gpus(
        "n1",
        1,
        &[("gpu-0", "A100", "pci0"), ("gpu-1", "A100", "pci1")],
    );
    let claim = c.claim(one_gpu("a"));
    assert_eq!(
        c.allocate(&[&claim], "n1"),
        Ok(Some(vec!["gpu=gpu-0".to_string()]))
    );
    assert_eq!(
        c.allocate(&[&claim], "n2"),
        Ok(None),
        "n2 publishes no device"
    );
    // With gpu-0 held by an allocated claim, gpu-1 is next.
    let mut held = one_gpu("held");
    held["status"] = serde_json::json!({"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}]}}});
    c.claim(held);
    assert_eq!(
        c.allocate(&[&claim], "n1"),
        Ok(Some(vec!["gpu=gpu-1".to_string()]))
    );
    // Two claims of one pod take one device each; a third finds none left.
    let (b, d) = (c.claim(one_gpu("b")), c.claim(one_gpu("d")));
    assert_eq!(c.allocate(&[&claim, &b], "n1"), Ok(None));
    let _ = d;
}

#[test]
fn selectors_counts_all_and_first_available() {
    let mut c = Cluster::new();
    c.gpus(
        "n1",
        1,
        &[
            ("gpu-0", "L4", "pci0"),
            ("gpu-1", "A100", "pci0"),
            ("gpu-2", "A100", "pci1"),
        ],
    );
    let a100 = c.claim(gpu_claim(
        "a100",
        serde_json::json!({"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com",
            "count": 2,
            "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName == 'A100'"}}]}}]}),
    ));
    assert_eq!(
        c.allocate(&[&a100], "n1"),
        Ok(Some(vec!["gpu=gpu-1,gpu=gpu-2".to_string()]))
    );
    let all = c.claim(gpu_claim(
        "all",
        serde_json::json!({"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com",
            "allocationMode": "All"}}]}),
    ));
    assert_eq!(
        c.allocate(&[&all], "n1"),
        Ok(Some(vec!["gpu=gpu-0,gpu=gpu-1,gpu=gpu-2".to_string()]))
    );
    let h100_or_l4 = c.claim(gpu_claim(
        "fallback",
        serde_json::json!({"requests": [{"name": "gpu", "firstAvailable": [
            {"name": "h100", "deviceClassName": "gpu.nvidia.com",
                "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName == 'H100'"}}]},
            {"name": "l4", "deviceClassName": "gpu.nvidia.com",
                "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName == 'L4'"}}]}]}]}),
    ));
    assert_eq!(
        c.allocate(&[&h100_or_l4], "n1"),
        Ok(Some(vec!["gpu/l4=gpu-0".to_string()]))
    );
}

#[test]
fn match_attribute_keeps_devices_together_and_the_search_backtracks() {
    let mut c = Cluster::new();
    // The first device in order is alone on its PCIe root: taking it would leave no pair.
    c.gpus(
        "n1",
        1,
        &[
            ("gpu-0", "A100", "pci0"),
            ("gpu-1", "A100", "pci1"),
            ("gpu-2", "A100", "pci1"),
        ],
    );
    let pair = c.claim(gpu_claim(
        "pair",
        serde_json::json!({
            "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}],
            "constraints": [{"matchAttribute": "resource.kubernetes.io/pcieRoot"}]}),
    ));
    assert_eq!(
        c.allocate(&[&pair], "n1"),
        Ok(Some(vec!["gpu=gpu-1,gpu=gpu-2".to_string()]))
    );
}

#[test]
fn an_outdated_or_incomplete_pool_is_not_used() {
    let mut c = Cluster::new();
    c.gpus("n1", 1, &[("old-gpu", "A100", "pci0")]);
    c.gpus("n1", 2, &[("new-gpu", "A100", "pci0")]);
    let claim = c.claim(one_gpu("a"));
    assert_eq!(
        c.allocate(&[&claim], "n1"),
        Ok(Some(vec!["gpu=new-gpu".to_string()]))
    );
    // A pool of two slices of which one is published: none of its devices is used, and a
    // request for all devices says why.
    c.slice(serde_json::json!({
        "metadata": {"name": "n2-half"},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": "n2",
            "pool": {"name": "n2", "generation": 1, "resourceSliceCount": 2},
            "devices": [{"name": "gpu-0"}]}
    }));
    assert_eq!(c.allocate(&[&claim], "n2"), Ok(None));
    let all = c.claim(gpu_claim(
        "all",
        serde_json::json!({"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com",
            "allocationMode": "All"}}]}),
    ));
    assert_eq!(
        c.allocate(&[&all], "n2"),
        Err("claim ml/all, request gpu: asks for all devices, but resource pool gpu.nvidia.com/n2 is currently being updated".to_string())
    );
}

#[test]
fn partitions_share_their_gpus_counters() {
    let mut c = Cluster::new();
    // One GPU of 8 memory slices, published whole and as two 4-slice partitions.
    c.slice(serde_json::json!({
        "metadata": {"name": "n1-mig"},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": "n1",
            "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
            "sharedCounters": [{"name": "gpu-0", "counters": {"memory-slices": {"value": "8"}}}],
            "devices": [
                {"name": "gpu-0-whole", "attributes": {"profile": {"string": "7g"}},
                    "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory-slices": {"value": "8"}}}]},
                {"name": "gpu-0-mig-a", "attributes": {"profile": {"string": "4g"}},
                    "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory-slices": {"value": "4"}}}]},
                {"name": "gpu-0-mig-b", "attributes": {"profile": {"string": "4g"}},
                    "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory-slices": {"value": "4"}}}]}]}
    }));
    let whole = c.claim(one_gpu("whole"));
    let two = c.claim(gpu_claim(
        "two-partitions",
        serde_json::json!({"requests": [{"name": "mig", "exactly": {"deviceClassName": "gpu.nvidia.com",
            "count": 2, "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '4g'"}}]}}]}),
    ));
    assert_eq!(
        c.allocate(&[&whole], "n1"),
        Ok(Some(vec!["gpu=gpu-0-whole".to_string()]))
    );
    assert_eq!(
        c.allocate(&[&two], "n1"),
        Ok(Some(vec!["mig=gpu-0-mig-a,mig=gpu-0-mig-b".to_string()]))
    );
    assert_eq!(
        c.allocate(&[&whole, &two], "n1"),
        Ok(None),
        "the whole GPU and its partitions"
    );
}

#[test]
fn a_tainted_device_needs_a_toleration_and_errors_name_what_failed() {
    let mut c = Cluster::new();
    c.slice(serde_json::json!({
        "metadata": {"name": "n1"},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": "n1",
            "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0", "taints": [{"key": "maintenance", "effect": "NoSchedule"}]}]}
    }));
    let plain = c.claim(one_gpu("plain"));
    assert_eq!(c.allocate(&[&plain], "n1"), Ok(None));
    let tolerant = c.claim(gpu_claim(
        "tolerant",
        serde_json::json!({"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com",
            "tolerations": [{"key": "maintenance", "operator": "Exists"}]}}]}),
    ));
    assert_eq!(
        c.allocate(&[&tolerant], "n1"),
        Ok(Some(vec!["gpu=gpu-0".to_string()]))
    );
    let unknown = c.claim(gpu_claim(
        "unknown",
        serde_json::json!({"requests": [{"name": "gpu", "exactly": {"deviceClassName": "tpu.example.com"}}]}),
    ));
    assert_eq!(
        c.allocate(&[&unknown], "n1"),
        Err("claim ml/unknown, request gpu: could not retrieve device class tpu.example.com: not found".to_string())
    );
    let failing = c.claim(gpu_claim(
        "failing",
        serde_json::json!({"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com",
            "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].missing == 1"}}]}}]}),
    ));
    let e = c.allocate(&[&failing], "n1").unwrap_err();
    assert!(
        e.starts_with(
            "claim ml/failing: selector #0 on device gpu.nvidia.com/n1/gpu-0: CEL runtime error:"
        ),
        "{e}"
    );
}
