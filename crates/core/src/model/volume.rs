//! Storage as the volume plugins see it: a pod's volumes (read once with the pod), and
//! compact views of PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes,
//! CSIDrivers and CSIStorageCapacities. Only the fields kube-scheduler's VolumeRestrictions,
//! VolumeBinding, VolumeZone and NodeVolumeLimits read are kept.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::storage::v1 as storage;

use super::Labels;
use super::quantity::Quantity;
use super::selector::{LabelSelector, NodeSelector, NodeSelectorTerm};

/// The annotation the PV controller sets on a claim once it has bound it.
pub const BIND_COMPLETED_ANNOTATION: &str = "pv.kubernetes.io/bind-completed";
/// The annotation marking a binding made by a controller (or the scheduler) rather than
/// asked for by the user.
pub const BOUND_BY_CONTROLLER_ANNOTATION: &str = "pv.kubernetes.io/bound-by-controller";
/// The annotation naming the node a delayed-binding claim is provisioned for.
pub const SELECTED_NODE_ANNOTATION: &str = "volume.kubernetes.io/selected-node";
/// The annotation that names a storage class before `storageClassName` existed; it wins
/// over the field when present.
pub const BETA_STORAGE_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";
/// The CSINode annotation listing the in-tree plugins migrated to CSI on the node.
pub const MIGRATED_PLUGINS_ANNOTATION: &str = "storage.alpha.kubernetes.io/migrated-plugins";
/// The provisioner of classes that cannot provision (local volumes).
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// Access modes of a claim or a volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AccessModes(u8);

impl AccessModes {
    /// `ReadWriteOnce`.
    pub const READ_WRITE_ONCE: AccessModes = AccessModes(1);
    /// `ReadOnlyMany`.
    pub const READ_ONLY_MANY: AccessModes = AccessModes(2);
    /// `ReadWriteMany`.
    pub const READ_WRITE_MANY: AccessModes = AccessModes(4);
    /// `ReadWriteOncePod`.
    pub const READ_WRITE_ONCE_POD: AccessModes = AccessModes(8);

    /// The modes named in `modes`; unknown names are ignored, as the API server would have
    /// refused them.
    pub fn from_api(modes: Option<&Vec<String>>) -> AccessModes {
        AccessModes(
            modes
                .into_iter()
                .flatten()
                .map(|m| match m.as_str() {
                    "ReadWriteOnce" => 1,
                    "ReadOnlyMany" => 2,
                    "ReadWriteMany" => 4,
                    "ReadWriteOncePod" => 8,
                    _ => 0,
                })
                .fold(0, |a, b| a | b),
        )
    }

    /// The modes as the API names them, in the API's order.
    pub fn to_api(self) -> Vec<String> {
        [
            (Self::READ_WRITE_ONCE, "ReadWriteOnce"),
            (Self::READ_ONLY_MANY, "ReadOnlyMany"),
            (Self::READ_WRITE_MANY, "ReadWriteMany"),
            (Self::READ_WRITE_ONCE_POD, "ReadWriteOncePod"),
        ]
        .into_iter()
        .filter(|(mode, _)| self.contains(*mode))
        .map(|(_, name)| name.to_string())
        .collect()
    }

    /// True when every mode of `other` is here too.
    pub fn contains(self, other: AccessModes) -> bool {
        self.0 & other.0 == other.0
    }
}

/// A claim a pod uses: named in a `persistentVolumeClaim` volume, or made for a generic
/// ephemeral volume (named `<pod>-<volume>`, owned by the pod).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimUse {
    /// The claim's name, in the pod's namespace.
    pub name: String,
    /// True for the claim of a generic ephemeral volume.
    pub ephemeral: bool,
}

/// An inline disk that two pods on one node may not share (VolumeRestrictions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InlineDisk {
    /// `gcePersistentDisk`: conflicts unless both mounts are read-only.
    GcePd {
        /// `pdName`.
        name: String,
        /// `readOnly`.
        read_only: bool,
    },
    /// `awsElasticBlockStore`: always conflicts.
    AwsEbs {
        /// `volumeID`.
        volume_id: String,
    },
    /// `rbd`: conflicts on a shared monitor, the same pool and image, unless both read-only.
    Rbd {
        /// `monitors`.
        monitors: Vec<String>,
        /// `pool` (`rbd` by default).
        pool: String,
        /// `image`.
        image: String,
        /// `readOnly`.
        read_only: bool,
    },
    /// `iscsi`: conflicts on the same IQN unless both read-only.
    Iscsi {
        /// `iqn`.
        iqn: String,
        /// `readOnly`.
        read_only: bool,
    },
}

impl InlineDisk {
    /// True when this disk and `other`, on two pods of one node, conflict.
    pub fn conflicts_with(&self, other: &InlineDisk) -> bool {
        match (self, other) {
            (
                InlineDisk::GcePd { name, read_only },
                InlineDisk::GcePd {
                    name: n,
                    read_only: r,
                },
            ) => name == n && !(*read_only && *r),
            (InlineDisk::AwsEbs { volume_id }, InlineDisk::AwsEbs { volume_id: v }) => {
                volume_id == v
            }
            (
                InlineDisk::Iscsi { iqn, read_only },
                InlineDisk::Iscsi {
                    iqn: q,
                    read_only: r,
                },
            ) => iqn == q && !(*read_only && *r),
            (
                InlineDisk::Rbd {
                    monitors,
                    pool,
                    image,
                    read_only,
                },
                InlineDisk::Rbd {
                    monitors: m,
                    pool: p,
                    image: i,
                    read_only: r,
                },
            ) => {
                monitors.iter().any(|a| m.contains(a))
                    && pool == p
                    && image == i
                    && !(*read_only && *r)
            }
            _ => false,
        }
    }
}

/// A volume counted against a node's attach limit: its CSI driver and a handle unique for
/// the volume within the driver.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Attachable {
    /// The CSI driver (an in-tree plugin's migrated driver for in-tree volumes).
    pub driver: String,
    /// The volume handle.
    pub handle: String,
}

/// The volumes of a pod, as the volume plugins read them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodVolumes {
    /// Claims, in `spec.volumes` order.
    pub claims: Vec<ClaimUse>,
    /// Inline disks VolumeRestrictions compares.
    pub disks: Vec<InlineDisk>,
    /// Inline volumes of in-tree plugins migrated to CSI, each with its plugin: they count
    /// against attach limits where the node has the migration on.
    pub inline: Vec<(&'static str, Attachable)>,
    /// The number of volumes in `spec.volumes` (VolumeZone and the limits pass a pod with
    /// none at once).
    pub count: usize,
}

impl PodVolumes {
    /// Reads the volumes of a pod named `pod`; `field` errors name the volume.
    pub fn from_api(pod: &str, volumes: Option<&Vec<core::Volume>>) -> Result<Self, String> {
        let mut out = PodVolumes::default();
        for (i, v) in volumes.into_iter().flatten().enumerate() {
            out.count += 1;
            if let Some(c) = &v.persistent_volume_claim {
                if c.claim_name.is_empty() {
                    return Err(format!(
                        "spec.volumes[{i}].persistentVolumeClaim.claimName: must be set"
                    ));
                }
                out.claims.push(ClaimUse {
                    name: c.claim_name.clone(),
                    ephemeral: false,
                });
            }
            if v.ephemeral.is_some() {
                out.claims.push(ClaimUse {
                    name: format!("{pod}-{}", v.name),
                    ephemeral: true,
                });
            }
            if let Some(d) = &v.gce_persistent_disk {
                out.disks.push(InlineDisk::GcePd {
                    name: d.pd_name.clone(),
                    read_only: d.read_only.unwrap_or(false),
                });
            }
            if let Some(d) = &v.aws_elastic_block_store {
                out.disks.push(InlineDisk::AwsEbs {
                    volume_id: d.volume_id.clone(),
                });
            }
            if let Some(d) = &v.rbd {
                out.disks.push(InlineDisk::Rbd {
                    monitors: d.monitors.clone(),
                    pool: d.pool.clone().unwrap_or_else(|| "rbd".to_string()),
                    image: d.image.clone(),
                    read_only: d.read_only.unwrap_or(false),
                });
            }
            if let Some(d) = &v.iscsi {
                out.disks.push(InlineDisk::Iscsi {
                    iqn: d.iqn.clone(),
                    read_only: d.read_only.unwrap_or(false),
                });
            }
            if let Some(a) = inline_attachable(v) {
                out.inline.push(a);
            }
        }
        Ok(out)
    }

    /// True when the pod has no volume at all.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// The in-tree plugins migrated to CSI, each with its CSI driver.
pub const MIGRATED_DRIVERS: [(&str, &str); 7] = [
    ("kubernetes.io/aws-ebs", "ebs.csi.aws.com"),
    ("kubernetes.io/gce-pd", "pd.csi.storage.gke.io"),
    ("kubernetes.io/azure-disk", "disk.csi.azure.com"),
    ("kubernetes.io/azure-file", "file.csi.azure.com"),
    ("kubernetes.io/cinder", "cinder.csi.openstack.org"),
    ("kubernetes.io/vsphere-volume", "csi.vsphere.vmware.com"),
    ("kubernetes.io/portworx-volume", "pxd.portworx.com"),
];

/// The CSI driver an in-tree plugin was migrated to.
pub fn migrated_driver(plugin: &str) -> Option<&'static str> {
    MIGRATED_DRIVERS
        .iter()
        .find(|(p, _)| *p == plugin)
        .map(|(_, d)| *d)
}

/// The in-tree plugin of a volume source, with the volume's handle as its CSI driver knows
/// it, for the sources migrated to CSI.
fn in_tree_source(
    ebs: Option<&core::AWSElasticBlockStoreVolumeSource>,
    gce: Option<&core::GCEPersistentDiskVolumeSource>,
    azure_disk: Option<&core::AzureDiskVolumeSource>,
    cinder_id: Option<&str>,
    vsphere_path: Option<&str>,
    portworx_id: Option<&str>,
) -> Option<(&'static str, String)> {
    if let Some(d) = ebs {
        // `aws://<zone>/<id>` and `<id>` name the same volume.
        let id = d.volume_id.rsplit('/').next().unwrap_or_default();
        return Some(("kubernetes.io/aws-ebs", id.to_string()));
    }
    if let Some(d) = gce {
        return Some((
            "kubernetes.io/gce-pd",
            format!("projects/UNSPECIFIED/zones/UNSPECIFIED/disks/{}", d.pd_name),
        ));
    }
    if let Some(d) = azure_disk {
        return Some(("kubernetes.io/azure-disk", d.disk_uri.clone()));
    }
    if let Some(id) = cinder_id {
        return Some(("kubernetes.io/cinder", id.to_string()));
    }
    if let Some(path) = vsphere_path {
        return Some(("kubernetes.io/vsphere-volume", path.to_string()));
    }
    portworx_id.map(|id| ("kubernetes.io/portworx-volume", id.to_string()))
}

/// The in-tree plugin of an inline pod volume migrated to CSI, with the volume as its CSI
/// driver counts it.
fn inline_attachable(v: &core::Volume) -> Option<(&'static str, Attachable)> {
    let (plugin, handle) = in_tree_source(
        v.aws_elastic_block_store.as_ref(),
        v.gce_persistent_disk.as_ref(),
        v.azure_disk.as_ref(),
        v.cinder.as_ref().map(|c| c.volume_id.as_str()),
        v.vsphere_volume.as_ref().map(|s| s.volume_path.as_str()),
        v.portworx_volume.as_ref().map(|p| p.volume_id.as_str()),
    )?;
    let driver = migrated_driver(plugin)?.to_string();
    Some((plugin, Attachable { driver, handle }))
}

/// A PersistentVolumeClaim, as the volume plugins read it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimModel {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.resourceVersion` (the precondition of the scheduler's write).
    pub resource_version: String,
    /// `spec.volumeName`, empty when unset.
    pub volume_name: String,
    /// True once the PV controller marked the binding complete.
    pub bind_completed: bool,
    /// The storage class: the beta annotation, else `spec.storageClassName`, else empty.
    pub class: String,
    /// `spec.accessModes`.
    pub access_modes: AccessModes,
    /// `spec.resources.requests.storage` in bytes, 0 when unset.
    pub request: i64,
    /// True when the claim requests storage at all (only then is a class's reported
    /// capacity checked).
    pub storage_requested: bool,
    /// `spec.selector`; `None` when unset (any volume).
    pub selector: Option<LabelSelector>,
    /// `spec.volumeMode` is `Block`.
    pub block: bool,
    /// True once the claim has a deletion timestamp.
    pub deleting: bool,
    /// `status.phase` is `Lost`.
    pub lost: bool,
    /// The `volume.kubernetes.io/selected-node` annotation.
    pub selected_node: Option<String>,
    /// The uid of the claim's controller (a pod, for an ephemeral volume's claim).
    pub controller_uid: Option<String>,
}

impl ClaimModel {
    /// Reads a claim; errors name the claim and the field.
    pub fn from_api(c: &core::PersistentVolumeClaim) -> Result<Self, String> {
        let meta = &c.metadata;
        let namespace = meta.namespace.clone().unwrap_or_default();
        let name = meta.name.clone().unwrap_or_default();
        let fail = |field: &str, e: &dyn std::fmt::Display| {
            format!(
                "persistentvolumeclaim {}/{}: {field}: {e}",
                super::echo::echo_name(&namespace),
                super::echo::echo_name(&name)
            )
        };
        let annotations = meta.annotations.as_ref();
        let annotation = |k: &str| annotations.and_then(|a| a.get(k)).cloned();
        let spec = c.spec.as_ref();
        let requested = spec
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"));
        let request = match requested {
            Some(q) => Quantity::parse(&q.0)
                .map_err(|e| fail("spec.resources.requests.storage", &e))?
                .value(),
            None => 0,
        };
        let selector = match spec.and_then(|s| s.selector.as_ref()) {
            Some(s) => Some(
                LabelSelector::compile(Some(s), "spec.selector")
                    .map_err(|e| fail("spec.selector", &e))?,
            ),
            None => None,
        };
        let class = annotation(BETA_STORAGE_CLASS_ANNOTATION)
            .or_else(|| spec.and_then(|s| s.storage_class_name.clone()))
            .unwrap_or_default();
        let controller_uid = meta
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.clone());
        Ok(ClaimModel {
            uid: meta.uid.clone().unwrap_or_default(),
            resource_version: meta.resource_version.clone().unwrap_or_default(),
            volume_name: spec.and_then(|s| s.volume_name.clone()).unwrap_or_default(),
            bind_completed: annotations.is_some_and(|a| a.contains_key(BIND_COMPLETED_ANNOTATION)),
            class,
            access_modes: AccessModes::from_api(spec.and_then(|s| s.access_modes.as_ref())),
            request,
            storage_requested: requested.is_some(),
            selector,
            block: spec.and_then(|s| s.volume_mode.as_deref()) == Some("Block"),
            deleting: meta.deletion_timestamp.is_some(),
            lost: c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost"),
            selected_node: annotation(SELECTED_NODE_ANNOTATION),
            controller_uid,
            namespace,
            name,
        })
    }

    /// True when the claim is bound and the PV controller finished the binding.
    pub fn is_bound(&self) -> bool {
        !self.volume_name.is_empty() && self.bind_completed
    }
}

/// The claim a PersistentVolume is reserved for (`spec.claimRef`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// uid; empty when the reference names the claim only.
    pub uid: String,
}

impl ClaimRef {
    /// True when this reference is to `claim`.
    pub fn is_to(&self, claim: &ClaimModel) -> bool {
        self.namespace == claim.namespace
            && self.name == claim.name
            && (self.uid.is_empty() || self.uid == claim.uid)
    }
}

/// One zone-like label of a PersistentVolume, with the values it allows (a value may list
/// several, separated by `__`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeTopology {
    /// The label key.
    pub key: &'static str,
    /// The allowed values.
    pub values: BTreeSet<String>,
}

/// The zone and region labels VolumeZone compares, beta ones first, as kube-scheduler
/// lists them.
pub const VOLUME_ZONE_LABELS: [&str; 4] = [
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
];

/// A PersistentVolume, as the volume plugins read it.
#[derive(Debug, Clone, PartialEq)]
pub struct VolumeModel {
    /// Name.
    pub name: String,
    /// `metadata.resourceVersion` (the precondition of the scheduler's write).
    pub resource_version: String,
    /// Labels (a claim's selector matches them).
    pub labels: Labels,
    /// The storage class: the beta annotation, else `spec.storageClassName`, else empty.
    pub class: String,
    /// `spec.capacity.storage` in bytes.
    pub capacity: i64,
    /// `spec.accessModes`.
    pub access_modes: AccessModes,
    /// `spec.volumeMode` is `Block`.
    pub block: bool,
    /// `spec.claimRef`.
    pub claim_ref: Option<ClaimRef>,
    /// `status.phase` is `Available`.
    pub available: bool,
    /// `spec.nodeAffinity.required`.
    pub node_affinity: Option<NodeSelector>,
    /// Zone and region labels, parsed ([`VOLUME_ZONE_LABELS`]).
    pub topology: Vec<VolumeTopology>,
    /// The CSI driver and handle it counts under for attach limits, if any.
    pub attachable: Option<Attachable>,
    /// The in-tree plugin of a migrated in-tree volume.
    pub in_tree_plugin: Option<&'static str>,
    /// True once the volume has a deletion timestamp.
    pub deleting: bool,
}

impl VolumeModel {
    /// Reads a PersistentVolume; errors name it and the field.
    pub fn from_api(pv: &core::PersistentVolume) -> Result<Self, String> {
        let meta = &pv.metadata;
        let name = meta.name.clone().unwrap_or_default();
        let fail = |field: &str, e: &dyn std::fmt::Display| {
            format!(
                "persistentvolume {}: {field}: {e}",
                super::echo::echo_name(&name)
            )
        };
        let spec = pv.spec.as_ref();
        let capacity = match spec
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("storage"))
        {
            Some(q) => Quantity::parse(&q.0)
                .map_err(|e| fail("spec.capacity.storage", &e))?
                .value(),
            None => 0,
        };
        let node_affinity = match spec
            .and_then(|s| s.node_affinity.as_ref())
            .and_then(|a| a.required.as_ref())
        {
            Some(sel) => Some(
                NodeSelector::compile(sel, "spec.nodeAffinity.required")
                    .map_err(|e| fail("spec.nodeAffinity.required", &e))?,
            ),
            None => None,
        };
        let labels = meta.labels.as_ref().map(Labels::from).unwrap_or_default();
        let topology = VOLUME_ZONE_LABELS
            .iter()
            .filter_map(|key| {
                let raw = labels.get(key)?;
                let values = zone_values(raw)?;
                Some(VolumeTopology { key, values })
            })
            .collect();
        let in_tree = spec.and_then(|s| {
            in_tree_source(
                s.aws_elastic_block_store.as_ref(),
                s.gce_persistent_disk.as_ref(),
                s.azure_disk.as_ref(),
                s.cinder.as_ref().map(|c| c.volume_id.as_str()),
                s.vsphere_volume.as_ref().map(|v| v.volume_path.as_str()),
                s.portworx_volume.as_ref().map(|p| p.volume_id.as_str()),
            )
        });
        let csi = spec.and_then(|s| s.csi.as_ref()).map(|c| Attachable {
            driver: c.driver.clone(),
            handle: c.volume_handle.clone(),
        });
        let in_tree_plugin = in_tree.as_ref().map(|(p, _)| *p);
        let attachable = csi.or_else(|| {
            let (plugin, handle) = in_tree?;
            Some(Attachable {
                driver: migrated_driver(plugin)?.to_string(),
                handle,
            })
        });
        let annotations = meta.annotations.as_ref();
        Ok(VolumeModel {
            resource_version: meta.resource_version.clone().unwrap_or_default(),
            class: annotations
                .and_then(|a| a.get(BETA_STORAGE_CLASS_ANNOTATION))
                .cloned()
                .or_else(|| spec.and_then(|s| s.storage_class_name.clone()))
                .unwrap_or_default(),
            capacity,
            access_modes: AccessModes::from_api(spec.and_then(|s| s.access_modes.as_ref())),
            block: spec.and_then(|s| s.volume_mode.as_deref()) == Some("Block"),
            claim_ref: spec.and_then(|s| s.claim_ref.as_ref()).map(|r| ClaimRef {
                namespace: r.namespace.clone().unwrap_or_default(),
                name: r.name.clone().unwrap_or_default(),
                uid: r.uid.clone().unwrap_or_default(),
            }),
            available: pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Available"),
            node_affinity,
            topology,
            attachable,
            in_tree_plugin,
            deleting: meta.deletion_timestamp.is_some(),
            labels,
            name,
        })
    }

    /// True when the volume's node affinity admits a node with `name` and `labels`.
    pub fn fits_node(&self, name: &str, labels: &Labels) -> bool {
        self.node_affinity
            .as_ref()
            .is_none_or(|a| a.matches(name, labels))
    }
}

/// The values of a zone label: `__`-separated, each trimmed; `None` (the label is ignored,
/// as kube-scheduler does) when one is empty.
fn zone_values(raw: &str) -> Option<BTreeSet<String>> {
    raw.split("__")
        .map(|v| {
            let v = v.trim();
            (!v.is_empty()).then(|| v.to_string())
        })
        .collect()
}

/// When a class's claims are bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindingMode {
    /// At once, by the PV controller.
    Immediate,
    /// Once a pod using the claim is scheduled: the scheduler picks the volume or the node.
    WaitForFirstConsumer,
}

/// A StorageClass, as the volume plugins read it.
#[derive(Debug, Clone, PartialEq)]
pub struct StorageClassModel {
    /// Name.
    pub name: String,
    /// `provisioner`.
    pub provisioner: String,
    /// `volumeBindingMode`; `None` when unset (the API server defaults it, so only an
    /// object written around defaulting lacks it).
    pub binding_mode: Option<BindingMode>,
    /// `allowedTopologies`, each term a set of label requirements; empty allows every node.
    pub allowed_topologies: Vec<NodeSelectorTerm>,
}

impl StorageClassModel {
    /// Reads a StorageClass; errors name it and the field.
    pub fn from_api(sc: &storage::StorageClass) -> Result<Self, String> {
        let name = sc.metadata.name.clone().unwrap_or_default();
        let binding_mode = match sc.volume_binding_mode.as_deref() {
            None => None,
            Some("Immediate") => Some(BindingMode::Immediate),
            Some("WaitForFirstConsumer") => Some(BindingMode::WaitForFirstConsumer),
            Some(other) => {
                return Err(format!(
                    "storageclass {}: volumeBindingMode: unknown mode {}",
                    super::echo::echo_name(&name),
                    super::echo::echo(other)
                ));
            }
        };
        let allowed_topologies = sc
            .allowed_topologies
            .iter()
            .flatten()
            .map(|t| {
                let term = core::NodeSelectorTerm {
                    match_expressions: Some(
                        t.match_label_expressions
                            .iter()
                            .flatten()
                            .map(|e| core::NodeSelectorRequirement {
                                key: e.key.clone(),
                                operator: "In".to_string(),
                                values: Some(e.values.clone()),
                            })
                            .collect(),
                    ),
                    match_fields: None,
                };
                NodeSelectorTerm::compile(&term, "allowedTopologies")
            })
            .collect::<Result<_, _>>()
            .map_err(|e| format!("storageclass {}: {e}", super::echo::echo_name(&name)))?;
        Ok(StorageClassModel {
            provisioner: sc.provisioner.clone(),
            binding_mode,
            allowed_topologies,
            name,
        })
    }

    /// True when the class may provision a volume reachable from a node with `labels`: any
    /// node when it names no topology, else a node matching one of its terms.
    pub fn allows_node(&self, name: &str, labels: &Labels) -> bool {
        self.allowed_topologies.is_empty()
            || self
                .allowed_topologies
                .iter()
                .any(|t| t.matches(name, labels))
    }

    /// True when the class can provision volumes at all.
    pub fn can_provision(&self) -> bool {
        !self.provisioner.is_empty() && self.provisioner != NO_PROVISIONER
    }
}

/// A CSINode: the CSI drivers on a node with their attach limits.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CsiNodeModel {
    /// The node's name.
    pub name: String,
    /// Each driver with its `allocatable.count`, if any.
    pub drivers: Vec<(String, Option<u32>)>,
    /// In-tree plugins migrated to CSI on the node (the migrated-plugins annotation).
    pub migrated: BTreeSet<String>,
}

impl CsiNodeModel {
    /// Reads a CSINode.
    pub fn from_api(n: &storage::CSINode) -> Self {
        CsiNodeModel {
            name: n.metadata.name.clone().unwrap_or_default(),
            drivers: n
                .spec
                .drivers
                .iter()
                .map(|d| {
                    let count = d
                        .allocatable
                        .as_ref()
                        .and_then(|a| a.count)
                        .and_then(|c| u32::try_from(c).ok());
                    (d.name.clone(), count)
                })
                .collect(),
            migrated: n
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(MIGRATED_PLUGINS_ANNOTATION))
                .map(|v| {
                    v.split(',')
                        .map(str::trim)
                        .filter(|p| !p.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// True when some driver of the node has an attach limit.
    pub fn has_limit(&self) -> bool {
        self.drivers.iter().any(|(_, c)| c.is_some())
    }

    /// The lowest attach limit among the node's drivers, if any has one.
    pub fn lowest_limit(&self) -> Option<u32> {
        self.drivers.iter().filter_map(|(_, c)| *c).min()
    }

    /// The attach limit of `driver` on this node, if it has one.
    pub fn limit(&self, driver: &str) -> Option<u32> {
        self.drivers
            .iter()
            .find(|(d, _)| d == driver)
            .and_then(|(_, c)| *c)
    }
}

/// A CSIDriver, as VolumeBinding reads it: whether the driver reports its free storage in
/// CSIStorageCapacity objects (`spec.storageCapacity`), so that provisioning is checked
/// against them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsiDriverModel {
    /// Name (the provisioner of the classes it serves).
    pub name: String,
    /// `spec.storageCapacity`, false when unset.
    pub storage_capacity: bool,
}

impl CsiDriverModel {
    /// Reads a CSIDriver.
    pub fn from_api(d: &storage::CSIDriver) -> Self {
        CsiDriverModel {
            name: d.metadata.name.clone().unwrap_or_default(),
            storage_capacity: d.spec.storage_capacity == Some(true),
        }
    }
}

/// A CSIStorageCapacity: how large a volume of a storage class can be provisioned on the
/// nodes its topology selects.
#[derive(Debug, Clone, PartialEq)]
pub struct StorageCapacityModel {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `storageClassName`.
    pub class: String,
    /// `nodeTopology`; a capacity without one serves no node.
    pub topology: LabelSelector,
    /// The largest volume it can take, in bytes: `maximumVolumeSize` where set (the more
    /// precise figure), else `capacity`; `None` when neither is, and then no claim fits.
    pub limit: Option<i64>,
    /// `capacity`: the free storage in total, in bytes, which VolumeBinding scores by.
    pub capacity: Option<i64>,
}

impl StorageCapacityModel {
    /// Reads a CSIStorageCapacity; errors name it and the field.
    pub fn from_api(c: &storage::CSIStorageCapacity) -> Result<Self, String> {
        let namespace = c.metadata.namespace.clone().unwrap_or_default();
        let name = c.metadata.name.clone().unwrap_or_default();
        let fail = |field: &str, e: &dyn std::fmt::Display| {
            format!(
                "csistoragecapacity {}/{}: {field}: {e}",
                super::echo::echo_name(&namespace),
                super::echo::echo_name(&name)
            )
        };
        let (field, quantity) = match (&c.maximum_volume_size, &c.capacity) {
            (Some(q), _) => ("maximumVolumeSize", Some(q)),
            (None, q) => ("capacity", q.as_ref()),
        };
        let limit = match quantity {
            Some(q) => Some(Quantity::parse(&q.0).map_err(|e| fail(field, &e))?.value()),
            None => None,
        };
        let capacity = match &c.capacity {
            Some(q) => Some(
                Quantity::parse(&q.0)
                    .map_err(|e| fail("capacity", &e))?
                    .value(),
            ),
            None => None,
        };
        let topology = LabelSelector::compile(c.node_topology.as_ref(), "nodeTopology")
            .map_err(|e| fail("nodeTopology", &e))?;
        Ok(StorageCapacityModel {
            class: c.storage_class_name.clone(),
            topology,
            limit,
            capacity,
            namespace,
            name,
        })
    }

    /// True when a volume of `bytes` fits.
    pub fn fits(&self, bytes: i64) -> bool {
        self.limit.is_some_and(|l| l >= bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml<T: serde::de::DeserializeOwned>(text: &str) -> T {
        serde_yaml::from_str(text).expect("valid object")
    }

    #[test]
    fn a_pods_volumes_are_read_once_with_claims_disks_and_migrated_sources() {
        let volumes: Vec<core::Volume> = yaml(
            r#"
- {name: data, persistentVolumeClaim: {claimName: data-0}}
- {name: scratch, ephemeral: {volumeClaimTemplate: {spec: {accessModes: [ReadWriteOnce]}}}}
- {name: pd, gcePersistentDisk: {pdName: disk-1, readOnly: true}}
- {name: ebs, awsElasticBlockStore: {volumeID: "aws://eu-west-1a/vol-1"}}
- {name: rbd, rbd: {monitors: [m1, m2], image: img}}
- {name: cfg, configMap: {name: c}}
"#,
        );
        let v = PodVolumes::from_api("web-0", Some(&volumes)).unwrap();
        assert_eq!(v.count, 6);
        let claims: Vec<_> = v
            .claims
            .iter()
            .map(|c| (c.name.as_str(), c.ephemeral))
            .collect();
        assert_eq!(claims, [("data-0", false), ("web-0-scratch", true)]);
        assert_eq!(v.disks.len(), 3);
        assert!(matches!(&v.disks[2], InlineDisk::Rbd { pool, .. } if pool == "rbd"));
        let inline: Vec<_> = v
            .inline
            .iter()
            .map(|(p, a)| (*p, a.driver.as_str(), a.handle.as_str()))
            .collect();
        assert_eq!(
            inline,
            [
                (
                    "kubernetes.io/gce-pd",
                    "pd.csi.storage.gke.io",
                    "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/disk-1"
                ),
                ("kubernetes.io/aws-ebs", "ebs.csi.aws.com", "vol-1"),
            ]
        );
        let bad: Vec<core::Volume> = yaml("[{name: x, persistentVolumeClaim: {claimName: ''}}]");
        assert_eq!(
            PodVolumes::from_api("p", Some(&bad)).unwrap_err(),
            "spec.volumes[0].persistentVolumeClaim.claimName: must be set"
        );
    }

    #[test]
    fn inline_disks_conflict_by_kube_schedulers_rules() {
        let pd = |name: &str, read_only| InlineDisk::GcePd {
            name: name.into(),
            read_only,
        };
        assert!(pd("a", false).conflicts_with(&pd("a", true)));
        assert!(!pd("a", true).conflicts_with(&pd("a", true)));
        assert!(!pd("a", false).conflicts_with(&pd("b", false)));
        let ebs = |id: &str| InlineDisk::AwsEbs {
            volume_id: id.into(),
        };
        assert!(
            ebs("v").conflicts_with(&ebs("v")),
            "EBS conflicts even read-only"
        );
        let rbd = |monitors: &[&str], read_only| InlineDisk::Rbd {
            monitors: monitors.iter().map(|m| m.to_string()).collect(),
            pool: "rbd".into(),
            image: "img".into(),
            read_only,
        };
        assert!(rbd(&["m1", "m2"], false).conflicts_with(&rbd(&["m2"], true)));
        assert!(!rbd(&["m1"], false).conflicts_with(&rbd(&["m2"], false)));
        assert!(!rbd(&["m1"], true).conflicts_with(&rbd(&["m1"], true)));
        assert!(!pd("a", false).conflicts_with(&ebs("a")));
    }

    #[test]
    fn claims_and_volumes_keep_what_binding_reads() {
        let c: core::PersistentVolumeClaim = yaml(
            r#"
metadata:
  name: data-0
  namespace: shop
  uid: u1
  annotations: {volume.beta.kubernetes.io/storage-class: fast, pv.kubernetes.io/bind-completed: "yes"}
spec:
  storageClassName: slow
  volumeName: pv-1
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 2Gi}}
"#,
        );
        let c = ClaimModel::from_api(&c).unwrap();
        assert_eq!(c.class, "fast", "the beta annotation wins");
        assert!(c.is_bound());
        assert_eq!(c.request, 2 << 30);
        let pv: core::PersistentVolume = yaml(
            r#"
metadata:
  name: pv-1
  labels: {topology.kubernetes.io/zone: "a__b", failure-domain.beta.kubernetes.io/region: " __r"}
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce, ReadOnlyMany]
  claimRef: {namespace: shop, name: data-0}
  csi: {driver: ebs.csi.aws.com, volumeHandle: h1}
status: {phase: Bound}
"#,
        );
        let pv = VolumeModel::from_api(&pv).unwrap();
        assert!(
            pv.claim_ref.as_ref().unwrap().is_to(&c),
            "no uid: the name suffices"
        );
        assert!(pv.access_modes.contains(c.access_modes));
        assert!(!pv.available);
        assert_eq!(pv.attachable.as_ref().unwrap().handle, "h1");
        let topology: Vec<_> = pv
            .topology
            .iter()
            .map(|t| (t.key, t.values.len()))
            .collect();
        assert_eq!(
            topology,
            [("topology.kubernetes.io/zone", 2)],
            "an empty part voids a label"
        );
        let bad: core::PersistentVolumeClaim = yaml(
            "{metadata: {name: x, namespace: d}, spec: {resources: {requests: {storage: lots}}}}",
        );
        assert!(
            ClaimModel::from_api(&bad)
                .unwrap_err()
                .starts_with("persistentvolumeclaim d/x: spec.resources.requests.storage:")
        );
    }

    #[test]
    fn classes_and_csi_nodes() {
        let sc: storage::StorageClass = yaml(
            r#"
metadata: {name: local}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
allowedTopologies: [{matchLabelExpressions: [{key: zone, values: [a]}]}]
"#,
        );
        let sc = StorageClassModel::from_api(&sc).unwrap();
        assert_eq!(sc.binding_mode, Some(BindingMode::WaitForFirstConsumer));
        assert!(!sc.can_provision());
        let zone = |z: &str| -> Labels { [("zone", z)].into_iter().collect() };
        assert!(sc.allows_node("n", &zone("a")) && !sc.allows_node("n", &zone("b")));
        let n: storage::CSINode = yaml(
            r#"
metadata: {name: n1, annotations: {storage.alpha.kubernetes.io/migrated-plugins: "kubernetes.io/aws-ebs, kubernetes.io/gce-pd"}}
spec: {drivers: [{name: ebs.csi.aws.com, nodeID: n1, allocatable: {count: 39}}, {name: other, nodeID: n1}]}
"#,
        );
        let n = CsiNodeModel::from_api(&n);
        assert_eq!(n.limit("ebs.csi.aws.com"), Some(39));
        assert_eq!(n.limit("other"), None);
        assert!(n.migrated.contains("kubernetes.io/gce-pd"));
    }

    #[test]
    fn csi_drivers_and_storage_capacities() {
        let d: storage::CSIDriver =
            yaml("metadata: {name: hostpath.csi.k8s.io}\nspec: {storageCapacity: true}");
        assert!(CsiDriverModel::from_api(&d).storage_capacity);
        let d: storage::CSIDriver = yaml("metadata: {name: other}\nspec: {}");
        assert!(!CsiDriverModel::from_api(&d).storage_capacity);
        let c: storage::CSIStorageCapacity = yaml(
            r#"
metadata: {name: cap-a, namespace: kube-system}
storageClassName: fast
capacity: 10Gi
maximumVolumeSize: 2Gi
nodeTopology: {matchLabels: {zone: a}}
"#,
        );
        let c = StorageCapacityModel::from_api(&c).unwrap();
        assert_eq!(
            c.limit,
            Some(2 << 30),
            "maximumVolumeSize wins over capacity"
        );
        assert!(c.fits(2 << 30) && !c.fits((2 << 30) + 1));
        let zone = |z: &str| -> Labels { [("zone", z)].into_iter().collect() };
        assert!(c.topology.matches(&zone("a")) && !c.topology.matches(&zone("b")));
        let c: storage::CSIStorageCapacity = yaml(
            "metadata: {name: cap-b, namespace: kube-system}\nstorageClassName: fast\ncapacity: 1Gi",
        );
        let c = StorageCapacityModel::from_api(&c).unwrap();
        assert_eq!(c.limit, Some(1 << 30));
        assert!(!c.topology.matches(&zone("a")), "no topology: no node");
        let c: storage::CSIStorageCapacity =
            yaml("metadata: {name: cap-c, namespace: kube-system}\nstorageClassName: fast");
        assert!(!StorageCapacityModel::from_api(&c).unwrap().fits(0));
        let c: storage::CSIStorageCapacity = yaml(
            "metadata: {name: cap-d, namespace: kube-system}\nstorageClassName: fast\ncapacity: lots",
        );
        assert!(
            StorageCapacityModel::from_api(&c)
                .unwrap_err()
                .starts_with("csistoragecapacity kube-system/cap-d: capacity:")
        );
    }
}
