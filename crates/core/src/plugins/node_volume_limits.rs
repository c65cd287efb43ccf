//! NodeVolumeLimits: a node attaches at most as many volumes of a CSI driver as its CSINode
//! allows (`spec.drivers[].allocatable.count`); a driver without a count, or a node without
//! a CSINode, has no limit.
//!
//! The volumes counted are the attachable ones of the pod and of the pods on the node, each
//! once however many pods use it: a claim bound to a CSI volume counts under its driver and
//! handle; a claim not bound yet (or bound to a volume gantry does not know) counts as a
//! volume of its storage class's provisioner, one per claim; a volume of an in-tree plugin
//! migrated to CSI (a PersistentVolume's source, an inline pod volume, or a class's in-tree
//! provisioner) counts under the CSI driver it was migrated to, on nodes where the migration
//! is on. The migration is on wherever a node has a CSINode for AWS EBS, GCE PD, Azure Disk
//! and Cinder, and for Portworx where the CSINode lists it in
//! `storage.alpha.kubernetes.io/migrated-plugins`; never for the others.
//!
//! Unlike kube-scheduler, gantry does not watch VolumeAttachments: it counts the volumes of
//! the pods on the node only, not those still attached for pods gone (kube-scheduler adds
//! each attachment to the node whose volume no pod there uses).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::cache::{NodeInfo, NodeRow, Snapshot, Storage, TopologyValues, Tracked};
use crate::framework::events::is_a_claim_of_the_pod;
use crate::framework::{
    ArgsError, ClusterChange, ClusterEvent, Code, CycleState, DefaultPlace, DomainVerdict,
    EventHint, FilterPlugin, NodeBlock, Plugin, PluginSpec, PreFilterPlugin, PreFilterResult,
    QueueingHint, Status,
};
use crate::model::PodInfo;
use crate::model::volume::{Attachable, ClaimUse, CsiNodeModel, MIGRATED_DRIVERS};

/// The name used in configuration files.
pub const NAME: &str = "NodeVolumeLimits";

/// Reason given for a node where the pod's volumes would exceed a driver's attach limit.
pub const ERR_REASON_MAX_VOLUME_COUNT: &str = "node(s) exceed max volume count";

/// Error when Filter runs without this plugin's PreFilter state (gantry's wording:
/// kube-scheduler's NodeVolumeLimits keeps no state, its Filter reads the listers).
pub const ERR_MISSING_STATE: &str =
    "reading \"PreFilterNodeVolumeLimits\" from cycleState: not found";

/// A volume as attach limits count it: under its driver, once per node.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum VolumeKey {
    /// A volume with a handle: a CSI volume, or an in-tree one as its CSI driver knows it.
    Handle(Attachable),
    /// The volume a claim will get from its class's provisioner: one per claim, and never
    /// the same as a volume with a handle.
    Claim {
        /// The provisioner (for an in-tree one, the CSI driver it was migrated to).
        driver: String,
        /// The claim's namespace.
        namespace: String,
        /// The claim's name.
        name: String,
    },
}

impl VolumeKey {
    /// The CSI driver the volume counts under.
    pub fn driver(&self) -> &str {
        match self {
            VolumeKey::Handle(a) => &a.driver,
            VolumeKey::Claim { driver, .. } => driver,
        }
    }
}

/// A volume of a pod that may count against a node's limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountedVolume {
    /// How it counts.
    pub key: VolumeKey,
    /// The in-tree plugin it comes from: it counts only where that plugin's migration to
    /// CSI is on.
    pub migrated_from: Option<&'static str>,
}

impl CountedVolume {
    /// True when the volume counts on a node with `csi_node`.
    fn counts_on(&self, csi_node: Option<&CsiNodeModel>) -> bool {
        self.migrated_from
            .is_none_or(|plugin| migration_on(csi_node, plugin))
    }
}

/// True when the in-tree `plugin` is migrated to CSI on a node with `csi_node`
/// (kube-scheduler's rule for volume limits, not VolumeBinding's).
fn migration_on(csi_node: Option<&CsiNodeModel>, plugin: &str) -> bool {
    let Some(csi_node) = csi_node else {
        return false;
    };
    match plugin {
        "kubernetes.io/aws-ebs"
        | "kubernetes.io/gce-pd"
        | "kubernetes.io/azure-disk"
        | "kubernetes.io/cinder" => true,
        "kubernetes.io/portworx-volume" => csi_node.migrated.contains(plugin),
        _ => false,
    }
}

/// What PreFilter found for Filter: the storage objects (shared with the snapshot, not
/// copied) and the pod's volumes, or the status every node gets for them.
#[derive(Debug, Clone)]
pub struct NodeVolumeLimitsState {
    /// Claims, volumes, classes and CSI nodes.
    pub storage: Storage,
    /// The pod's volumes that may count, or why the pod cannot be placed anywhere.
    pub volumes: Result<Vec<CountedVolume>, Status>,
    /// The lowest attach limit of every node of the cycle's snapshot, by position
    /// ([`Snapshot::attach_limits`]), when the pod has volumes that may count and some
    /// node has a limit.
    pub limits: Option<Arc<[u32]>>,
}

/// Rejects nodes where the pod's volumes would exceed a CSI driver's attach limit.
#[derive(Debug, Default, Clone, Copy)]
pub struct NodeVolumeLimits;

/// A CSINode appearing, or raising a limit; a placed pod with volumes going away; the pod's
/// claim appearing.
const EVENTS: [EventHint; 4] = [
    EventHint::any(ClusterEvent::CsiNodeAdd),
    EventHint::when(ClusterEvent::CsiNodeUpdate, raises_a_limit),
    EventHint::when(ClusterEvent::PodDelete, frees_volumes),
    EventHint::when(ClusterEvent::ClaimAdd, is_a_claim_of_the_pod),
];

fn raises_a_limit(change: &ClusterChange<'_>, _: &PodInfo) -> QueueingHint {
    let ClusterChange::CsiNode {
        old: Some(old),
        new,
    } = change
    else {
        return QueueingHint::Queue;
    };
    let raised = new
        .drivers
        .iter()
        .any(|(d, c)| c.unwrap_or(0) > old.limit(d).unwrap_or(0));
    if raised {
        QueueingHint::Queue
    } else {
        QueueingHint::Skip
    }
}

fn frees_volumes(change: &ClusterChange<'_>, _: &PodInfo) -> QueueingHint {
    match change {
        ClusterChange::PodRemoved(gone)
            if gone.volumes.claims.is_empty() && gone.volumes.inline.is_empty() =>
        {
            QueueingHint::Skip
        }
        _ => QueueingHint::Queue,
    }
}

impl Plugin for NodeVolumeLimits {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [EventHint] {
        &EVENTS
    }

    fn cache_state(&self) -> &'static [Tracked] {
        &[Tracked::Volumes]
    }

    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }

    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

/// How one claim of `pod` counts: `Ok(None)` when it does not (its volume is not
/// attachable, or its class is unknown). A missing claim is `Err(None)`; an ephemeral
/// volume's claim that another owner made is an error status.
fn claim_volume(
    storage: &Storage,
    pod: &PodInfo,
    c: &ClaimUse,
) -> Result<Option<CountedVolume>, Option<Status>> {
    let Some(claim) = storage.claim(&pod.namespace, &c.name) else {
        return Err(None);
    };
    if c.ephemeral && claim.controller_uid.as_deref() != Some(pod.uid.as_str()) {
        return Err(Some(Status::error(format!(
            "PVC {}/{} was not created for pod {}/{} (pod is not owner)",
            claim.namespace, claim.name, pod.namespace, pod.name
        ))));
    }
    if let Some(volume) = (!claim.volume_name.is_empty())
        .then(|| storage.volume(&claim.volume_name))
        .flatten()
    {
        return Ok(volume.attachable.clone().map(|a| CountedVolume {
            key: VolumeKey::Handle(a),
            migrated_from: volume.in_tree_plugin,
        }));
    }
    let Some(class) = (!claim.class.is_empty())
        .then(|| storage.class(&claim.class))
        .flatten()
    else {
        return Ok(None);
    };
    let (driver, migrated_from) = match MIGRATED_DRIVERS
        .iter()
        .find(|(plugin, _)| *plugin == class.provisioner)
    {
        Some((plugin, driver)) => (driver.to_string(), Some(*plugin)),
        None => (class.provisioner.clone(), None),
    };
    Ok(Some(CountedVolume {
        key: VolumeKey::Claim {
            driver,
            namespace: claim.namespace.clone(),
            name: claim.name.clone(),
        },
        migrated_from,
    }))
}

/// The inline volumes of `pod` migrated to CSI.
fn inline_volumes(pod: &PodInfo) -> impl Iterator<Item = CountedVolume> + '_ {
    pod.volumes.inline.iter().map(|(plugin, a)| CountedVolume {
        key: VolumeKey::Handle(a.clone()),
        migrated_from: Some(*plugin),
    })
}

/// The volumes of the pod to place that may count; a missing claim rejects every node (the
/// pod cannot run without it).
fn new_pod_volumes(storage: &Storage, pod: &PodInfo) -> Result<Vec<CountedVolume>, Status> {
    let mut out = Vec::new();
    for c in &pod.volumes.claims {
        match claim_volume(storage, pod, c) {
            Ok(v) => out.extend(v),
            Err(None) => {
                return Err(Status::unresolvable(format!(
                    "looking up PVC {}/{}: persistentvolumeclaim \"{}\" not found",
                    pod.namespace, c.name, c.name
                )));
            }
            Err(Some(status)) => return Err(status),
        }
    }
    out.extend(inline_volumes(pod));
    Ok(out)
}

impl PreFilterPlugin for NodeVolumeLimits {
    /// Reads the pod's claims and inline migrated volumes for Filter; skips the Filter for a
    /// pod with neither.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        if pod.volumes.claims.is_empty() && pod.volumes.inline.is_empty() {
            return (PreFilterResult::default(), Status::skip());
        }
        let storage = snapshot.storage().clone();
        let volumes = new_pod_volumes(&storage, pod);
        let limits = volumes
            .as_ref()
            .is_ok_and(|v| !v.is_empty() && storage.any_attach_limit())
            .then(|| snapshot.attach_limits());
        state.insert(NodeVolumeLimitsState {
            storage,
            volumes,
            limits,
        });
        (PreFilterResult::default(), Status::success())
    }
}

/// True when `node` has room for the pod's `volumes` whatever its pods' volumes resolve to:
/// the pod's volumes that count there and every volume its pods name
/// ([`NodeInfo::volumes_named`]), each counted as a volume of its own, stay within the
/// lowest limit among the drivers the pod's volumes count under. No claim is looked up,
/// which is most of the Filter's cost on a node with pods (and with every node scored, most
/// nodes are far from their limits). A node with a pod using an ephemeral volume is left to
/// the full count, which checks that the pod owns its claim.
fn fits_without_resolving(
    volumes: &[CountedVolume],
    csi_node: &CsiNodeModel,
    node: &NodeInfo,
) -> bool {
    if node.pods_with_ephemeral_volumes > 0 {
        return false;
    }
    let mut named = node.volumes_named;
    let mut lowest = usize::MAX;
    for v in volumes.iter().filter(|v| v.counts_on(Some(csi_node))) {
        named += 1;
        if let Some(limit) = csi_node.limit(v.key.driver()) {
            lowest = lowest.min(limit as usize);
        }
    }
    named <= lowest
}

/// True when the node at `position` of the cycle's snapshot, with `row`, has room for a pod
/// with `volumes` by a bound looser than [`fits_without_resolving`]'s: all of the pod's
/// volumes and all its pods name stay within the lowest limit of any driver of the node.
/// Read from two arrays, without the node's CSINode looked up by name.
#[inline]
fn fits_by_position(volumes: usize, limits: &[u32], position: usize, row: &NodeRow) -> bool {
    let limit = limits[position];
    limit == u32::MAX || u64::from(row.volumes_named) + volumes as u64 <= u64::from(limit)
}

impl FilterPlugin for NodeVolumeLimits {
    /// Every node passes, whatever it holds, when the pod has no volume that may count or
    /// no CSINode sets a limit: when PreFilter found the pod's volumes and kept no limits.
    fn passes_all(&self, state: &CycleState, _pod: &PodInfo, _snapshot: &Snapshot) -> bool {
        state
            .get::<NodeVolumeLimitsState>()
            .is_some_and(|found| found.volumes.is_ok() && found.limits.is_none())
    }

    /// Every node's verdict, for the class index to serve pods whose volumes count against
    /// a limit: the nodes far from their limits pass by position (see [`fits_by_position`]),
    /// the others are counted one by one, and the verdict is by a value computed per node
    /// (whether it passes, or which rejection it gets). No check at all when every node
    /// passes, the usual case. `None` when PreFilter kept no limits or a node's count fails
    /// (the plain cycle reports it).
    fn verdict_by_domain(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> Option<Vec<DomainVerdict>> {
        let found = state.get::<NodeVolumeLimitsState>()?;
        let volumes = found.volumes.as_ref().ok()?.len();
        let limits = found.limits.as_deref()?;
        if limits.len() != snapshot.len() {
            return None;
        }
        let mut rejections: Vec<Status> = Vec::new();
        let mut ids: Vec<u32> = Vec::new();
        let nodes = snapshot.nodes().iter().zip(snapshot.rows()).enumerate();
        for (p, (node, row)) in nodes {
            if fits_by_position(volumes, limits, p, row) {
                continue;
            }
            let status = self.filter(state, pod, node);
            if status.is_success() {
                continue;
            }
            if !matches!(
                status.code(),
                Code::Unschedulable | Code::UnschedulableAndUnresolvable
            ) {
                return None;
            }
            let k = match rejections.iter().position(|r| *r == status) {
                Some(k) => k,
                None => {
                    rejections.push(status);
                    rejections.len() - 1
                }
            };
            ids.resize(snapshot.len(), 0);
            ids[p] = u32::try_from(k + 1).ok()?;
        }
        if rejections.is_empty() {
            return Some(Vec::new());
        }
        let codes = (0..=rejections.len())
            .map(u8::try_from)
            .collect::<Result<Vec<u8>, _>>()
            .ok()?;
        let count = u32::try_from(codes.len()).ok()?;
        Some(vec![DomainVerdict {
            values: Arc::new(TopologyValues::computed(count, ids)),
            by_value: codes,
            without: 0,
            rejections,
        }])
    }

    /// Passes the snapshot's nodes far from their limits by position (see
    /// [`fits_by_position`]); counts the others node by node.
    fn filter_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        block: NodeBlock<'_>,
        statuses: &mut [Status],
    ) -> usize {
        let by_position = state.get::<NodeVolumeLimitsState>().and_then(|found| {
            let volumes = found.volumes.as_ref().ok()?;
            Some((volumes.len(), found.limits.as_deref()?, block.rows?))
        });
        let nodes = block.nodes.iter().zip(block.positions);
        let mut rejected = 0;
        for ((node, &p), status) in nodes.zip(statuses) {
            if !status.is_success() {
                continue;
            }
            if let Some((volumes, limits, rows)) = by_position
                && fits_by_position(volumes, limits, p, &rows[p])
            {
                continue;
            }
            *status = self.filter(state, pod, node);
            rejected += usize::from(!status.is_success());
        }
        rejected
    }

    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if pod.volumes.is_empty() {
            return Status::success();
        }
        let Some(found) = state.get::<NodeVolumeLimitsState>() else {
            return Status::error(ERR_MISSING_STATE);
        };
        let volumes = match &found.volumes {
            Ok(v) => v,
            Err(status) => return status.clone(),
        };
        let csi_node = found.storage.csi_node(&node.node.name).map(Arc::as_ref);
        if !volumes.iter().any(|v| v.counts_on(csi_node)) {
            return Status::success();
        }
        let Some(csi_node) = csi_node.filter(|n| n.has_limit()) else {
            return Status::success();
        };
        if fits_without_resolving(volumes, csi_node, node) {
            return Status::success();
        }
        full_count(&found.storage, volumes, csi_node, node)
    }
}

/// The full count on `node`: the pod's volumes that count there and are not attached
/// already, and the attached ones of the same drivers, each volume once, against each
/// driver's limit.
fn full_count(
    storage: &Storage,
    volumes: &[CountedVolume],
    csi_node: &CsiNodeModel,
    node: &NodeInfo,
) -> Status {
    let mut new: BTreeSet<&VolumeKey> = volumes
        .iter()
        .filter(|v| v.counts_on(Some(csi_node)))
        .map(|v| &v.key)
        .collect();
    let mut attached: BTreeSet<VolumeKey> = BTreeSet::new();
    for p in &node.pods {
        for c in &p.volumes.claims {
            match claim_volume(storage, p, c) {
                Ok(Some(v)) if v.counts_on(Some(csi_node)) => {
                    attached.insert(v.key);
                }
                Ok(_) | Err(None) => {}
                Err(Some(status)) => return status,
            }
        }
        attached.extend(
            inline_volumes(p)
                .filter(|v| v.counts_on(Some(csi_node)))
                .map(|v| v.key),
        );
    }
    new.retain(|k| !attached.contains(*k));
    let mut per_driver: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for k in &new {
        per_driver.entry(k.driver()).or_default().1 += 1;
    }
    for k in &attached {
        if let Some(counts) = per_driver.get_mut(k.driver()) {
            counts.0 += 1;
        }
    }
    for (driver, (attached, new)) in per_driver {
        if let Some(limit) = csi_node.limit(driver)
            && attached + new > limit as usize
        {
            return Status::unschedulable(ERR_REASON_MAX_VOLUME_COUNT);
        }
    }
    Status::success()
}

/// The plugin for the registry, with its place in kube-scheduler's default profile.
pub const SPEC: PluginSpec = PluginSpec {
    name: NAME,
    factory,
    default: Some(DefaultPlace {
        order: 84,
        weight: None,
    }),
    args: None,
};

/// Builds the plugin; it takes no arguments, and ignores any given (as kube-scheduler does
/// for plugins without an arguments type).
pub fn factory(_args: Option<&serde_json::Value>) -> Result<Arc<dyn Plugin>, ArgsError> {
    Ok(Arc::new(NodeVolumeLimits))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1 as core;
    use k8s_openapi::api::storage::v1 as storage;

    use super::*;
    use crate::cache::Cache;
    use crate::framework::{Code, may_help};
    use crate::model::volume::{ClaimModel, StorageClassModel, VolumeModel};
    use crate::testing::{PodBuilder, node, node_info, pod};

    /// A snapshot holding `objects` (a YAML list of claims, volumes, classes and CSI
    /// nodes; claims default to the default namespace).
    fn snapshot(objects: &str) -> Snapshot {
        let mut snap = Snapshot::default();
        cache_of(objects).update_snapshot(&mut snap);
        snap
    }

    /// A cache holding `objects`, as [`snapshot`] takes them.
    fn cache_of(objects: &str) -> Cache {
        let mut cache = Cache::new();
        let items: Vec<serde_json::Value> = serde_yaml::from_str(objects).expect("valid yaml");
        for mut o in items {
            match o["kind"].as_str().expect("kind") {
                "PersistentVolumeClaim" => {
                    if o["metadata"].get("namespace").is_none() {
                        o["metadata"]["namespace"] = "default".into();
                    }
                    let c: core::PersistentVolumeClaim = serde_json::from_value(o).unwrap();
                    cache.upsert_claim(ClaimModel::from_api(&c).unwrap());
                }
                "PersistentVolume" => {
                    let v: core::PersistentVolume = serde_json::from_value(o).unwrap();
                    cache.upsert_volume(VolumeModel::from_api(&v).unwrap());
                }
                "StorageClass" => {
                    let c: storage::StorageClass = serde_json::from_value(o).unwrap();
                    cache.upsert_storage_class(StorageClassModel::from_api(&c).unwrap());
                }
                "CSINode" => {
                    let n: storage::CSINode = serde_json::from_value(o).unwrap();
                    cache.upsert_csi_node(CsiNodeModel::from_api(&n));
                }
                k => panic!("unexpected kind {k}"),
            }
        }
        cache
    }

    /// A bound claim `name` and its CSI volume `pv-<name>` of `driver`.
    fn csi_claim(name: &str, driver: &str) -> String {
        format!(
            "- {{kind: PersistentVolumeClaim, metadata: {{name: {name}}}, spec: {{volumeName: pv-{name}}}}}
- {{kind: PersistentVolume, metadata: {{name: pv-{name}}}, spec: {{csi: {{driver: {driver}, volumeHandle: h-{name}}}}}}}
"
        )
    }

    /// The CSINode of node `n` with `drivers` (YAML list entries' `name` and `count`).
    fn csi_node(drivers: &[(&str, Option<u32>)], annotations: &str) -> String {
        let drivers: Vec<String> = drivers
            .iter()
            .map(|(d, c)| match c {
                Some(c) => format!("{{name: {d}, nodeID: n, allocatable: {{count: {c}}}}}"),
                None => format!("{{name: {d}, nodeID: n}}"),
            })
            .collect();
        format!(
            "- {{kind: CSINode, metadata: {{name: n, annotations: {{{annotations}}}}}, spec: {{drivers: [{}]}}}}\n",
            drivers.join(", ")
        )
    }

    /// A pod using the claims `claims`.
    fn using(name: &str, claims: &[&str]) -> PodBuilder {
        let volumes: Vec<String> = claims
            .iter()
            .map(|c| format!("{{name: {c}, persistentVolumeClaim: {{claimName: {c}}}}}"))
            .collect();
        pod(name).spec_yaml(&format!("volumes: [{}]", volumes.join(", ")))
    }

    /// PreFilter, then Filter on node `n` holding `placed`, unless PreFilter decided.
    fn run(objects: &str, p: PodBuilder, placed: Vec<PodBuilder>) -> Status {
        let p = p.build();
        let snap = snapshot(objects);
        let mut state = CycleState::new();
        let (result, status) = NodeVolumeLimits.pre_filter(&mut state, &p, &snap);
        assert_eq!(result, PreFilterResult::default());
        if !status.is_success() {
            return status;
        }
        let placed: Vec<Arc<PodInfo>> = placed.into_iter().map(|b| b.on("n").build()).collect();
        NodeVolumeLimits.filter(&state, &p, &node_info(node("n").build(), &placed))
    }

    const EBS: &str = "ebs.csi.aws.com";

    #[test]
    fn a_pod_without_claims_or_migrated_volumes_skips() {
        assert!(run("[]", pod("p"), vec![]).is_skip());
        let scratch = pod("p").spec_yaml("volumes: [{name: s, emptyDir: {}}]");
        assert!(run("[]", scratch, vec![]).is_skip());
    }

    #[test]
    fn a_driver_limit_counts_the_volumes_of_the_pods_on_the_node() {
        let mut objects = csi_node(&[(EBS, Some(2))], "");
        for c in ["a", "b", "c"] {
            objects.push_str(&csi_claim(c, EBS));
        }
        let placed = || vec![using("x", &["a"]), using("y", &["b"])];
        let s = run(&objects, using("p", &["c"]), placed());
        assert_eq!(s.code(), Code::Unschedulable);
        assert_eq!(s.message(), "node(s) exceed max volume count");
        assert!(
            run(&objects, using("p", &["a"]), placed()).is_success(),
            "a volume already on the node counts once"
        );
        assert!(run(&objects, using("p", &["c"]), vec![using("x", &["a", "a"])]).is_success());
        assert!(run(&objects, using("p", &["b", "c"]), vec![using("x", &["a"])]).is_rejected());
    }

    #[test]
    fn nodes_and_drivers_without_a_count_are_unlimited() {
        let mut claims = String::new();
        for c in ["a", "b", "c"] {
            claims.push_str(&csi_claim(c, EBS));
        }
        let placed = || vec![using("x", &["a", "b"])];
        assert!(run(&claims, using("p", &["c"]), placed()).is_success());
        let no_count = format!("{}{claims}", csi_node(&[(EBS, None)], ""));
        assert!(run(&no_count, using("p", &["c"]), placed()).is_success());
        let other = format!("{}{claims}", csi_node(&[("other.csi", Some(1))], ""));
        assert!(run(&other, using("p", &["c"]), placed()).is_success());
    }

    #[test]
    fn claims_not_bound_yet_count_as_volumes_of_their_provisioner() {
        let objects = format!(
            "{}- {{kind: StorageClass, metadata: {{name: fast}}, provisioner: {EBS}}}
- {{kind: PersistentVolumeClaim, metadata: {{name: a}}, spec: {{storageClassName: fast}}}}
- {{kind: PersistentVolumeClaim, metadata: {{name: b}}, spec: {{storageClassName: fast}}}}
- {{kind: PersistentVolumeClaim, metadata: {{name: gone}}, spec: {{storageClassName: fast, volumeName: pv-gone}}}}
- {{kind: PersistentVolumeClaim, metadata: {{name: classless}}, spec: {{}}}}
- {{kind: PersistentVolumeClaim, metadata: {{name: unknown}}, spec: {{storageClassName: slow}}}}
",
            csi_node(&[(EBS, Some(1))], "")
        );
        assert!(run(&objects, using("p", &["a"]), vec![]).is_success());
        assert!(run(&objects, using("p", &["a", "b"]), vec![]).is_rejected());
        assert!(
            run(&objects, using("p", &["a"]), vec![using("x", &["a"])]).is_success(),
            "the same claim counts once"
        );
        assert!(
            run(&objects, using("p", &["b"]), vec![using("x", &["gone"])]).is_rejected(),
            "a claim bound to a missing volume counts through its class"
        );
        assert!(
            run(&objects, using("p", &["a", "classless", "unknown"]), vec![]).is_success(),
            "claims without a known class do not count"
        );
    }

    #[test]
    fn in_tree_volumes_count_under_their_csi_driver_where_migrated() {
        let claims =
            "- {kind: PersistentVolumeClaim, metadata: {name: a}, spec: {volumeName: pv-a}}
- {kind: PersistentVolume, metadata: {name: pv-a}, spec: {awsElasticBlockStore: {volumeID: vol-a}}}
- {kind: StorageClass, metadata: {name: gp2}, provisioner: kubernetes.io/aws-ebs}
- {kind: PersistentVolumeClaim, metadata: {name: b}, spec: {storageClassName: gp2}}
";
        let objects = format!("{}{claims}", csi_node(&[(EBS, Some(1))], ""));
        assert!(run(&objects, using("p", &["a", "b"]), vec![]).is_rejected());
        let inline = |name: &str, id: &str| {
            pod(name).spec_yaml(&format!(
                "volumes: [{{name: v, awsElasticBlockStore: {{volumeID: '{id}'}}}}]"
            ))
        };
        assert!(
            run(&objects, inline("p", "vol-b"), vec![using("x", &["a"])]).is_rejected(),
            "an inline EBS volume counts too"
        );
        assert!(
            run(
                &objects,
                inline("p", "aws://us-east-1a/vol-a"),
                vec![using("x", &["a"])]
            )
            .is_success(),
            "the same EBS volume, inline and through a claim"
        );
        assert!(
            run(&objects, using("p", &["b"]), vec![inline("x", "vol-z")]).is_rejected(),
            "an inline volume of a pod on the node counts"
        );
        assert!(
            run(claims, using("p", &["a", "b"]), vec![]).is_success(),
            "no CSINode: no migration, no limit"
        );
        let vsphere = format!(
            "{}- {{kind: PersistentVolumeClaim, metadata: {{name: v}}, spec: {{volumeName: pv-v}}}}
- {{kind: PersistentVolume, metadata: {{name: pv-v}}, spec: {{vsphereVolume: {{volumePath: '[ds] v.vmdk'}}}}}}
",
            csi_node(&[("csi.vsphere.vmware.com", Some(0))], "")
        );
        assert!(
            run(&vsphere, using("p", &["v"]), vec![]).is_success(),
            "vSphere's migration is never on for limits"
        );
    }

    #[test]
    fn portworx_is_migrated_only_where_the_csi_node_says_so() {
        let px = "pxd.portworx.com";
        let claims =
            "- {kind: PersistentVolumeClaim, metadata: {name: a}, spec: {volumeName: pv-a}}
- {kind: PersistentVolume, metadata: {name: pv-a}, spec: {portworxVolume: {volumeID: px-a}}}
- {kind: PersistentVolumeClaim, metadata: {name: b}, spec: {volumeName: pv-b}}
- {kind: PersistentVolume, metadata: {name: pv-b}, spec: {portworxVolume: {volumeID: px-b}}}
";
        let plain = format!("{}{claims}", csi_node(&[(px, Some(1))], ""));
        assert!(run(&plain, using("p", &["a", "b"]), vec![]).is_success());
        let migrated = format!(
            "{}{claims}",
            csi_node(
                &[(px, Some(1))],
                "storage.alpha.kubernetes.io/migrated-plugins: 'kubernetes.io/portworx-volume'"
            )
        );
        assert!(run(&migrated, using("p", &["a", "b"]), vec![]).is_rejected());
    }

    #[test]
    fn a_missing_claim_of_the_pod_rejects_every_node_but_not_one_of_a_placed_pod() {
        let s = run("[]", using("p", &["data"]), vec![]);
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(
            s.message(),
            "looking up PVC default/data: persistentvolumeclaim \"data\" not found"
        );
        let objects = format!("{}{}", csi_node(&[(EBS, Some(1))], ""), csi_claim("a", EBS));
        assert!(run(&objects, using("p", &["a"]), vec![using("x", &["lost"])]).is_success());
    }

    /// Filter's shortcuts (a node far from its limits passes without its pods' claims looked
    /// up, or by position without its CSINode looked up) and the verdict by domain agree with
    /// the full count on random nodes: limits of 0 to 4 under two drivers, claims bound to
    /// volumes of either, volumes shared by handle, claims that do not exist.
    #[test]
    fn the_shortcuts_agree_with_the_full_count() {
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};
        const OTHER: &str = "other.csi.example.com";
        let mut rng = StdRng::seed_from_u64(7);
        let (mut shortcuts, mut by_position, mut rejected_by_domain) = (0, 0, 0);
        for _ in 0..400 {
            let limit = |rng: &mut StdRng| rng.random_range(0u32..6).checked_sub(1);
            let ebs_limit = limit(&mut rng);
            let other_limit = limit(&mut rng);
            let mut objects = csi_node(&[(EBS, ebs_limit), (OTHER, other_limit)], "");
            for i in 0..6 {
                let driver = if rng.random_bool(0.7) { EBS } else { OTHER };
                let handle = rng.random_range(0..4);
                objects.push_str(&format!(
                    "- {{kind: PersistentVolumeClaim, metadata: {{name: c{i}}}, spec: {{volumeName: pv-c{i}}}}}
- {{kind: PersistentVolume, metadata: {{name: pv-c{i}}}, spec: {{csi: {{driver: {driver}, volumeHandle: h{handle}}}}}}}
"
                ));
            }
            let claims = |rng: &mut StdRng| -> Vec<String> {
                (0..rng.random_range(0..4))
                    .map(|_| format!("c{}", rng.random_range(0..7)))
                    .collect()
            };
            let new = claims(&mut rng);
            if new.iter().any(|c| c == "c6") {
                continue;
            }
            let placed: Vec<Arc<PodInfo>> = (0..rng.random_range(0..4))
                .map(|i| {
                    let names = claims(&mut rng);
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    using(&format!("x{i}"), &names).on("n").build()
                })
                .collect();
            let new: Vec<&str> = new.iter().map(String::as_str).collect();
            let p = using("p", &new).build();
            let mut cache = cache_of(&objects);
            cache.upsert_node(node("n").build());
            for x in &placed {
                cache.add_bound_pod(x.clone()).unwrap();
            }
            let mut snap = Snapshot::default();
            cache.update_snapshot(&mut snap);
            let mut state = CycleState::new();
            if !NodeVolumeLimits
                .pre_filter(&mut state, &p, &snap)
                .1
                .is_success()
            {
                continue;
            }
            let node = snap.get("n").unwrap();
            let filtered = NodeVolumeLimits.filter(&state, &p, node);
            let mut by_block = [Status::success()];
            let nodes = [&**node];
            let block = NodeBlock::of_snapshot(&nodes, &[0], &snap);
            NodeVolumeLimits.filter_nodes(&state, &p, block, &mut by_block);
            let context = format!("{objects}\npod {new:?}, placed {placed:?}");
            assert_eq!(by_block[0], filtered, "{context}");
            let found = state.get::<NodeVolumeLimitsState>().unwrap();
            match NodeVolumeLimits.verdict_by_domain(&state, &p, &snap) {
                Some(checks) => {
                    let by_domain = crate::testing::status_by_domain(&checks, 0);
                    rejected_by_domain += usize::from(!by_domain.is_success());
                    assert_eq!(by_domain, filtered, "{context}");
                }
                None => assert!(
                    found.limits.is_none() || filtered.code() == Code::Error,
                    "{context}"
                ),
            }
            let volumes = found.volumes.as_ref().unwrap();
            let csi = found.storage.csi_node("n").unwrap();
            if volumes.is_empty() {
                continue;
            }
            let full = full_count(&found.storage, volumes, csi, node);
            assert_eq!(filtered, full, "{context}");
            shortcuts += usize::from(fits_without_resolving(volumes, csi, node));
            let limits = found.limits.as_deref().unwrap_or(&[u32::MAX]);
            by_position += usize::from(fits_by_position(volumes.len(), limits, 0, &snap.rows()[0]));
        }
        assert!(shortcuts > 50, "the shortcut was taken {shortcuts} times");
        assert!(by_position > 30, "passed by position {by_position} times");
        assert!(
            rejected_by_domain > 30,
            "rejected by domain {rejected_by_domain} times"
        );
    }

    #[test]
    fn an_ephemeral_volume_counts_through_the_claim_made_for_its_pod() {
        let ephemeral = |owner: &str| {
            format!(
                "{}- {{kind: StorageClass, metadata: {{name: fast}}, provisioner: {EBS}}}
- {{kind: PersistentVolumeClaim, metadata: {{name: p-scratch, ownerReferences: [{{apiVersion: v1, kind: Pod, name: p, uid: '{owner}', controller: true}}]}}, spec: {{storageClassName: fast}}}}
{}",
                csi_node(&[(EBS, Some(1))], ""),
                csi_claim("a", EBS)
            )
        };
        let p = || {
            pod("p").spec_yaml(
                "volumes: [{name: scratch, ephemeral: {volumeClaimTemplate: {spec: {storageClassName: fast}}}}]",
            )
        };
        let placed = || vec![using("x", &["a"])];
        assert!(run(&ephemeral("uid-p"), p(), placed()).is_rejected());
        assert!(run(&ephemeral("uid-p"), p(), vec![]).is_success());
        let s = run(&ephemeral("someone-else"), p(), placed());
        assert_eq!(s.code(), Code::Error);
        assert_eq!(
            s.message(),
            "PVC default/p-scratch was not created for pod default/p (pod is not owner)"
        );
    }

    #[test]
    fn missing_state_is_an_error() {
        let p = using("p", &["a"]).build();
        let s = NodeVolumeLimits.filter(&CycleState::new(), &p, &node_info(node("n").build(), &[]));
        assert_eq!(s.code(), Code::Error);
        assert_eq!(
            s.message(),
            "reading \"PreFilterNodeVolumeLimits\" from cycleState: not found"
        );
    }

    #[test]
    fn hints() {
        let events = NodeVolumeLimits.events();
        let p = pod("p")
            .spec_yaml(
                "volumes: [{name: d, persistentVolumeClaim: {claimName: data}}, {name: s, ephemeral: {volumeClaimTemplate: {spec: {}}}}]",
            )
            .build();
        let helps = |c: ClusterChange<'_>| may_help(events, &c, &p);
        let node_with = |count: Option<u32>| {
            let objects = csi_node(&[(EBS, count)], "");
            let items: Vec<storage::CSINode> = serde_yaml::from_str(&objects).unwrap();
            CsiNodeModel::from_api(&items[0])
        };
        let (none, one, two) = (node_with(None), node_with(Some(1)), node_with(Some(2)));
        assert!(helps(ClusterChange::CsiNode {
            old: None,
            new: &one
        }));
        assert!(helps(ClusterChange::CsiNode {
            old: Some(&one),
            new: &two
        }));
        assert!(helps(ClusterChange::CsiNode {
            old: Some(&none),
            new: &one
        }));
        assert!(!helps(ClusterChange::CsiNode {
            old: Some(&two),
            new: &one
        }));
        assert!(!helps(ClusterChange::CsiNode {
            old: Some(&one),
            new: &one
        }));
        let with_claim = using("x", &["other"]).on("n").build();
        let without = pod("x").on("n").build();
        assert!(helps(ClusterChange::PodRemoved(&with_claim)));
        assert!(!helps(ClusterChange::PodRemoved(&without)));
        let claim = |name: &str| {
            let c: core::PersistentVolumeClaim = serde_yaml::from_str(&format!(
                "{{metadata: {{name: {name}, namespace: default}}}}"
            ))
            .unwrap();
            ClaimModel::from_api(&c).unwrap()
        };
        let (data, scratch, other) = (claim("data"), claim("p-s"), claim("other"));
        for (c, want) in [(&data, true), (&scratch, true), (&other, false)] {
            assert_eq!(helps(ClusterChange::Claim { old: None, new: c }), want);
        }
    }

    #[test]
    fn factory_builds_the_named_plugin() {
        let p = factory(None).unwrap();
        assert_eq!(p.name(), "NodeVolumeLimits");
        assert!(p.as_pre_filter().is_some() && p.as_filter().is_some());
        assert_eq!(p.cache_state(), [Tracked::Volumes]);
    }
}
