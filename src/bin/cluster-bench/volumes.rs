//! kube-scheduler's own volume workloads, from scheduler_perf in the Kubernetes 1.37.2 source
//! (`test/integration/scheduler_perf/volumes/performance-config.yaml`, templates in
//! `test/integration/scheduler_perf/templates`): `SchedulingInTreePVs`, `SchedulingCSIPVs`
//! and `SchedulingMigratedInTreePVs`, so that gantry and kube-scheduler are compared on the
//! objects kube-scheduler's authors measure it with.
//!
//! The nodes are `node-default.yaml` (4 cpu, 32Gi, 110 pods, Ready; the in-tree workload's
//! `makeBaseNode` is the same node); the two CSI workloads add the allocatable
//! `attachable-volumes-csi-ebs.csi.aws.com: 39` and a CSINode of driver `ebs.csi.aws.com`
//! with 39 volumes, which the migrated workload annotates with the in-tree AWS EBS plugin as
//! migrated. Every pod (`makeBasePod`: one `pause` container, 100m and 500Mi requested and
//! limited) has a claim of its own (`pvc.yaml`: ReadOnlyMany, 1Gi) on a volume of its own
//! (`pv-aws.yaml`, an in-tree AWS EBS volume, or `pv-csi.yaml`, the same volume through the
//! EBS CSI driver, its handle the volume's name).
//!
//! One deviation: scheduler_perf writes each claim and volume bound already (both phases
//! Bound, the claim with the bind-completed annotation and `spec.volumeName`, the volume's
//! `claimRef` without the claim's uid) and runs no PV controller; the real one, which the
//! benchmark runs, would mark such a claim Lost (its volume's claimant, without a uid, is not
//! the claim). So each pair is pre-bound the way a user does it and the controller completes:
//! the volume names its claim (namespace and name, no uid), the claim names its volume
//! (`spec.volumeName`), neither has an annotation or a status, and the controller binds them
//! before the scheduler starts.

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::CSINode;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The label on every volume of a run, valued with the run's namespace: `clear` deletes the
/// volumes it selects (volumes have no namespace of their own).
pub const RUN_LABEL: &str = "cluster-bench/run";
/// The CSI driver of the CSI workloads, and the one the in-tree AWS EBS plugin migrates to.
const EBS_CSI_DRIVER: &str = "ebs.csi.aws.com";
/// Volumes a node may attach, in the CSI workloads.
const VOLUME_LIMIT: i32 = 39;

/// Which of the three workloads, named as `cluster-bench populate` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// `SchedulingInTreePVs`: in-tree AWS EBS volumes, nodes without a CSINode.
    #[value(name = "in-tree-pvs")]
    InTree,
    /// `SchedulingCSIPVs`: EBS CSI volumes, nodes with their CSI limit and CSINode.
    #[value(name = "csi-pvs")]
    Csi,
    /// `SchedulingMigratedInTreePVs`: in-tree AWS EBS volumes on nodes whose CSINode says the
    /// plugin is migrated to the CSI driver, so the CSI limit counts them.
    #[value(name = "migrated-in-tree-pvs")]
    MigratedInTree,
}

/// A run's volumes, their claims and their pods, in the order they are to be created.
#[derive(Debug)]
pub struct Objects {
    /// Pre-bound to their claims.
    pub volumes: Vec<PersistentVolume>,
    /// Naming their volumes.
    pub claims: Vec<PersistentVolumeClaim>,
    /// Pending, one claim each.
    pub pods: Vec<Pod>,
}

fn object<T: DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("a scheduler_perf template decodes")
}

/// `count` nodes of the workload (`node-default.yaml`), named `scheduler-perf-NNNNN` (the
/// template's generateName, numbered), with the hostname label every node has.
pub fn nodes(count: usize, kind: Kind) -> Vec<Node> {
    (0..count)
        .map(|i| {
            let name = format!("scheduler-perf-{i:05}");
            let capacity = json!({"pods": "110", "cpu": "4", "memory": "32Gi"});
            let mut allocatable = capacity.clone();
            if kind != Kind::InTree {
                allocatable[format!("attachable-volumes-csi-{EBS_CSI_DRIVER}")] =
                    json!(VOLUME_LIMIT.to_string());
            }
            object(json!({
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                "status": {
                    "capacity": capacity,
                    "allocatable": allocatable,
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "phase": "Running",
                },
            }))
        })
        .collect()
}

/// The CSINodes of `nodes` (none in the in-tree workload): the EBS CSI driver with its limit,
/// and in the migrated workload the annotation that the in-tree plugin is migrated to it.
pub fn csi_nodes(nodes: &[Node], kind: Kind) -> Vec<CSINode> {
    if kind == Kind::InTree {
        return Vec::new();
    }
    nodes
        .iter()
        .map(|n| {
            let name = n.metadata.name.clone().unwrap_or_default();
            let mut metadata = json!({"name": name});
            if kind == Kind::MigratedInTree {
                metadata["annotations"] = json!({
                    "storage.alpha.kubernetes.io/migrated-plugins": "kubernetes.io/aws-ebs"
                });
            }
            object(json!({
                "metadata": metadata,
                "spec": {"drivers": [{
                    "name": EBS_CSI_DRIVER,
                    "nodeID": name,
                    "allocatable": {"count": VOLUME_LIMIT},
                }]},
            }))
        })
        .collect()
}

/// `count` pods in `namespace` for `scheduler_name`, pod `pod-NNNNN` (numbered in the order
/// they are created, so that a list returns them in that order) with claim `pvc-<i>` on
/// volume `<namespace>-vol-<i>` (volume ID `vol-<i>`, handle the volume's name), as
/// scheduler_perf names them.
pub fn objects(count: usize, namespace: &str, kind: Kind, scheduler_name: &str) -> Objects {
    let mut objects = Objects {
        volumes: Vec::with_capacity(count),
        claims: Vec::with_capacity(count),
        pods: Vec::with_capacity(count),
    };
    for i in 0..count {
        let volume = format!("{namespace}-vol-{i}");
        let claim = format!("pvc-{i}");
        let (source, details) = match kind {
            Kind::Csi => (
                "csi",
                json!({"driver": EBS_CSI_DRIVER, "volumeHandle": &volume}),
            ),
            Kind::InTree | Kind::MigratedInTree => (
                "awsElasticBlockStore",
                json!({"volumeID": format!("vol-{i}")}),
            ),
        };
        let mut spec = json!({
            "accessModes": ["ReadOnlyMany"],
            "capacity": {"storage": "1Gi"},
            "persistentVolumeReclaimPolicy": "Retain",
            "claimRef": {"kind": "PersistentVolumeClaim", "namespace": namespace, "name": claim},
        });
        spec[source] = details;
        objects.volumes.push(object(json!({
            "metadata": {"name": volume, "labels": {RUN_LABEL: namespace}},
            "spec": spec,
        })));
        objects.claims.push(object(json!({
            "metadata": {"name": claim, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadOnlyMany"],
                "resources": {"requests": {"storage": "1Gi"}},
                "volumeName": volume,
            },
        })));
        let resources = json!({"cpu": "100m", "memory": "500Mi"});
        objects.pods.push(object(json!({
            "metadata": {"name": format!("pod-{i:05}"), "namespace": namespace},
            "spec": {
                "schedulerName": scheduler_name,
                "containers": [{
                    "name": "pause",
                    "image": "registry.k8s.io/pause:3.10.2",
                    "ports": [{"containerPort": 80}],
                    "resources": {"requests": resources, "limits": resources},
                }],
                "volumes": [{"name": "vol", "persistentVolumeClaim": {"claimName": claim}}],
            },
        })));
    }
    objects
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csi_nodes_carry_the_limit_and_the_migrated_ones_the_annotation() {
        let in_tree = nodes(2, Kind::InTree);
        let allocatable = in_tree[1].status.as_ref().unwrap().allocatable.as_ref();
        assert_eq!(allocatable.unwrap().len(), 3);
        assert_eq!(
            in_tree[1].metadata.labels.as_ref().unwrap()["kubernetes.io/hostname"],
            "scheduler-perf-00001"
        );
        assert!(csi_nodes(&in_tree, Kind::InTree).is_empty());

        let csi = nodes(1, Kind::Csi);
        let allocatable = csi[0]
            .status
            .as_ref()
            .unwrap()
            .allocatable
            .as_ref()
            .unwrap();
        assert_eq!(
            allocatable["attachable-volumes-csi-ebs.csi.aws.com"].0,
            "39"
        );
        let csi_node = &csi_nodes(&csi, Kind::Csi)[0];
        assert_eq!(
            csi_node.metadata.name.as_deref(),
            Some("scheduler-perf-00000")
        );
        assert!(csi_node.metadata.annotations.is_none());
        let driver = &csi_node.spec.drivers[0];
        assert_eq!(
            (driver.name.as_str(), driver.node_id.as_str()),
            ("ebs.csi.aws.com", "scheduler-perf-00000")
        );
        assert_eq!(driver.allocatable.as_ref().unwrap().count, Some(39));

        let migrated = csi_nodes(&nodes(1, Kind::MigratedInTree), Kind::MigratedInTree);
        assert_eq!(
            migrated[0].metadata.annotations.as_ref().unwrap()["storage.alpha.kubernetes.io/migrated-plugins"],
            "kubernetes.io/aws-ebs"
        );
    }

    #[test]
    fn each_pod_has_its_claim_pre_bound_to_its_volume() {
        let o = objects(3, "ns", Kind::InTree, "default-scheduler");
        let (volume, claim, pod) = (&o.volumes[2], &o.claims[2], &o.pods[2]);
        assert_eq!(volume.metadata.name.as_deref(), Some("ns-vol-2"));
        assert_eq!(volume.metadata.labels.as_ref().unwrap()[RUN_LABEL], "ns");
        let spec = volume.spec.as_ref().unwrap();
        assert_eq!(
            spec.aws_elastic_block_store.as_ref().unwrap().volume_id,
            "vol-2"
        );
        assert!(spec.csi.is_none());
        let claim_ref = spec.claim_ref.as_ref().unwrap();
        assert_eq!(
            (claim_ref.namespace.as_deref(), claim_ref.name.as_deref()),
            (Some("ns"), Some("pvc-2"))
        );
        assert!(claim_ref.uid.is_none());
        assert_eq!(claim.metadata.name.as_deref(), Some("pvc-2"));
        assert!(claim.metadata.annotations.is_none());
        assert_eq!(
            claim.spec.as_ref().unwrap().volume_name.as_deref(),
            Some("ns-vol-2")
        );
        let pod_spec = pod.spec.as_ref().unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("pod-00002"));
        assert_eq!(
            pod_spec.volumes.as_ref().unwrap()[0]
                .persistent_volume_claim
                .as_ref()
                .unwrap()
                .claim_name,
            "pvc-2"
        );
        let resources = pod_spec.containers[0].resources.as_ref().unwrap();
        assert_eq!(resources.requests, resources.limits);
        assert_eq!(resources.requests.as_ref().unwrap()["memory"].0, "500Mi");

        let csi = objects(1, "ns", Kind::Csi, "default-scheduler");
        let spec = csi.volumes[0].spec.as_ref().unwrap();
        let source = spec.csi.as_ref().unwrap();
        assert_eq!(
            (source.driver.as_str(), source.volume_handle.as_str()),
            ("ebs.csi.aws.com", "ns-vol-0")
        );
        assert!(spec.aws_elastic_block_store.is_none());
    }
}
