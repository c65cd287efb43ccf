//! `core/v1` Volume, as far as the volume plugins read it (`model::PodVolumes`): the
//! volume's name, claims (named or ephemeral), the inline disks two pods may not share, and
//! the inline sources of in-tree plugins migrated to CSI. Any other source is skipped by the
//! decoder; the volume still arrives, with its name, and counts as one of the pod's volumes.
//! Tags are those of `k8s.io/api`'s `core/v1/generated.proto`.

use k8s_openapi::api::core::v1 as api;

use super::meta::text;

/// `Volume`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Volume {
    /// `name`.
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    /// `volumeSource` (inlined into the volume in JSON).
    #[prost(message, optional, tag = "2")]
    pub volume_source: Option<VolumeSource>,
}

impl From<Volume> for api::Volume {
    fn from(v: Volume) -> Self {
        let s = v.volume_source.unwrap_or_default();
        api::Volume {
            name: v.name.unwrap_or_default(),
            persistent_volume_claim: s.persistent_volume_claim.map(Into::into),
            ephemeral: s.ephemeral.map(Into::into),
            gce_persistent_disk: s.gce_persistent_disk.map(Into::into),
            aws_elastic_block_store: s.aws_elastic_block_store.map(Into::into),
            rbd: s.rbd.map(Into::into),
            iscsi: s.iscsi.map(Into::into),
            azure_disk: s.azure_disk.map(Into::into),
            cinder: s.cinder.map(Into::into),
            vsphere_volume: s.vsphere_volume.map(Into::into),
            portworx_volume: s.portworx_volume.map(Into::into),
            ..Default::default()
        }
    }
}

/// `VolumeSource`: the sources the volume plugins read.
#[derive(Clone, PartialEq, prost::Message)]
pub struct VolumeSource {
    /// `gcePersistentDisk`.
    #[prost(message, optional, tag = "3")]
    pub gce_persistent_disk: Option<GcePersistentDiskVolumeSource>,
    /// `awsElasticBlockStore`.
    #[prost(message, optional, tag = "4")]
    pub aws_elastic_block_store: Option<AwsElasticBlockStoreVolumeSource>,
    /// `iscsi`.
    #[prost(message, optional, tag = "8")]
    pub iscsi: Option<IscsiVolumeSource>,
    /// `persistentVolumeClaim`.
    #[prost(message, optional, tag = "10")]
    pub persistent_volume_claim: Option<PersistentVolumeClaimVolumeSource>,
    /// `rbd`.
    #[prost(message, optional, tag = "11")]
    pub rbd: Option<RbdVolumeSource>,
    /// `cinder`.
    #[prost(message, optional, tag = "13")]
    pub cinder: Option<CinderVolumeSource>,
    /// `vsphereVolume`.
    #[prost(message, optional, tag = "20")]
    pub vsphere_volume: Option<VsphereVirtualDiskVolumeSource>,
    /// `azureDisk`.
    #[prost(message, optional, tag = "22")]
    pub azure_disk: Option<AzureDiskVolumeSource>,
    /// `portworxVolume`.
    #[prost(message, optional, tag = "24")]
    pub portworx_volume: Option<PortworxVolumeSource>,
    /// `ephemeral`.
    #[prost(message, optional, tag = "29")]
    pub ephemeral: Option<EphemeralVolumeSource>,
}

/// `PersistentVolumeClaimVolumeSource`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PersistentVolumeClaimVolumeSource {
    /// `claimName`.
    #[prost(string, optional, tag = "1")]
    pub claim_name: Option<String>,
}

impl From<PersistentVolumeClaimVolumeSource> for api::PersistentVolumeClaimVolumeSource {
    fn from(c: PersistentVolumeClaimVolumeSource) -> Self {
        api::PersistentVolumeClaimVolumeSource {
            claim_name: c.claim_name.unwrap_or_default(),
            read_only: None,
        }
    }
}

/// `EphemeralVolumeSource`, for its presence alone: the claim it makes is named after the
/// pod and the volume, and the claim template is the claim controller's business.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EphemeralVolumeSource {}

impl From<EphemeralVolumeSource> for api::EphemeralVolumeSource {
    fn from(_: EphemeralVolumeSource) -> Self {
        api::EphemeralVolumeSource::default()
    }
}

/// `GCEPersistentDiskVolumeSource`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GcePersistentDiskVolumeSource {
    /// `pdName`.
    #[prost(string, optional, tag = "1")]
    pub pd_name: Option<String>,
    /// `readOnly`.
    #[prost(bool, optional, tag = "4")]
    pub read_only: Option<bool>,
}

impl From<GcePersistentDiskVolumeSource> for api::GCEPersistentDiskVolumeSource {
    fn from(d: GcePersistentDiskVolumeSource) -> Self {
        api::GCEPersistentDiskVolumeSource {
            pd_name: d.pd_name.unwrap_or_default(),
            read_only: set(d.read_only),
            ..Default::default()
        }
    }
}

/// `AWSElasticBlockStoreVolumeSource`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AwsElasticBlockStoreVolumeSource {
    /// `volumeID`.
    #[prost(string, optional, tag = "1")]
    pub volume_id: Option<String>,
}

impl From<AwsElasticBlockStoreVolumeSource> for api::AWSElasticBlockStoreVolumeSource {
    fn from(d: AwsElasticBlockStoreVolumeSource) -> Self {
        api::AWSElasticBlockStoreVolumeSource {
            volume_id: d.volume_id.unwrap_or_default(),
            ..Default::default()
        }
    }
}

/// `RBDVolumeSource`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RbdVolumeSource {
    /// `monitors`.
    #[prost(string, repeated, tag = "1")]
    pub monitors: Vec<String>,
    /// `image`.
    #[prost(string, optional, tag = "2")]
    pub image: Option<String>,
    /// `pool`.
    #[prost(string, optional, tag = "4")]
    pub pool: Option<String>,
    /// `readOnly`.
    #[prost(bool, optional, tag = "8")]
    pub read_only: Option<bool>,
}

impl From<RbdVolumeSource> for api::RBDVolumeSource {
    fn from(d: RbdVolumeSource) -> Self {
        api::RBDVolumeSource {
            monitors: d.monitors,
            image: d.image.unwrap_or_default(),
            pool: text(d.pool),
            read_only: set(d.read_only),
            ..Default::default()
        }
    }
}

/// `ISCSIVolumeSource`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct IscsiVolumeSource {
    /// `iqn`.
    #[prost(string, optional, tag = "2")]
    pub iqn: Option<String>,
    /// `readOnly`.
    #[prost(bool, optional, tag = "6")]
    pub read_only: Option<bool>,
}

impl From<IscsiVolumeSource> for api::ISCSIVolumeSource {
    fn from(d: IscsiVolumeSource) -> Self {
        api::ISCSIVolumeSource {
            iqn: d.iqn.unwrap_or_default(),
            read_only: set(d.read_only),
            ..Default::default()
        }
    }
}

/// `AzureDiskVolumeSource`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AzureDiskVolumeSource {
    /// `diskURI`.
    #[prost(string, optional, tag = "2")]
    pub disk_uri: Option<String>,
}

impl From<AzureDiskVolumeSource> for api::AzureDiskVolumeSource {
    fn from(d: AzureDiskVolumeSource) -> Self {
        api::AzureDiskVolumeSource {
            disk_uri: d.disk_uri.unwrap_or_default(),
            ..Default::default()
        }
    }
}

/// `CinderVolumeSource`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CinderVolumeSource {
    /// `volumeID`.
    #[prost(string, optional, tag = "1")]
    pub volume_id: Option<String>,
}

impl From<CinderVolumeSource> for api::CinderVolumeSource {
    fn from(d: CinderVolumeSource) -> Self {
        api::CinderVolumeSource {
            volume_id: d.volume_id.unwrap_or_default(),
            ..Default::default()
        }
    }
}

/// `VsphereVirtualDiskVolumeSource`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct VsphereVirtualDiskVolumeSource {
    /// `volumePath`.
    #[prost(string, optional, tag = "1")]
    pub volume_path: Option<String>,
}

impl From<VsphereVirtualDiskVolumeSource> for api::VsphereVirtualDiskVolumeSource {
    fn from(d: VsphereVirtualDiskVolumeSource) -> Self {
        api::VsphereVirtualDiskVolumeSource {
            volume_path: d.volume_path.unwrap_or_default(),
            ..Default::default()
        }
    }
}

/// `PortworxVolumeSource`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PortworxVolumeSource {
    /// `volumeID`.
    #[prost(string, optional, tag = "1")]
    pub volume_id: Option<String>,
}

impl From<PortworxVolumeSource> for api::PortworxVolumeSource {
    fn from(d: PortworxVolumeSource) -> Self {
        api::PortworxVolumeSource {
            volume_id: d.volume_id.unwrap_or_default(),
            ..Default::default()
        }
    }
}

/// An absent flag for a false one: Go holds these `readOnly` flags as plain booleans, which
/// protobuf always carries and JSON leaves out when false (`omitempty`).
fn set(flag: Option<bool>) -> Option<bool> {
    flag.filter(|f| *f)
}
