//! VolumeZone: a pod whose claims are bound to volumes labelled with a zone or region goes
//! only to nodes of that zone or region. The labels are
//! [`VOLUME_ZONE_LABELS`](crate::model::volume::VOLUME_ZONE_LABELS); a volume's value may
//! list several zones, separated by `__`. A node with none of those labels takes any pod.
//! A node without a beta label the volume has is judged by the GA label of the same meaning
//! (`topology.kubernetes.io/zone` for `failure-domain.beta.kubernetes.io/zone`, and the
//! same for the region); not the other way round.
//!
//! Claims waiting for their first consumer (unbound, of a `WaitForFirstConsumer` class) are
//! passed over: their volume does not exist yet, and is provisioned where the pod goes.

use std::sync::Arc;

use crate::cache::{NodeInfo, Snapshot, Tracked};
use crate::framework::events::is_a_named_claim_of_the_pod;
use crate::framework::{
    ArgsError, ClusterChange, ClusterEvent, CycleState, DefaultPlace, EventHint, FilterPlugin,
    Plugin, PluginSpec, PreFilterPlugin, PreFilterResult, QueueingHint, Status,
};
use crate::model::PodInfo;
use crate::model::volume::{BindingMode, VOLUME_ZONE_LABELS, VolumeTopology};

/// The name used in configuration files.
pub const NAME: &str = "VolumeZone";

/// Reason given for a node outside the zone or region of one of the pod's volumes.
pub const ERR_REASON_CONFLICT: &str = "node(s) had no available volume zone";

/// Reason given when an unbound claim names no storage class.
pub const ERR_REASON_NO_CLASS: &str = "PersistentVolumeClaim had no pv name and storageClass name";

/// Reason given when an unbound claim of an `Immediate` class is to be scheduled: the PV
/// controller has not bound it yet.
pub const ERR_REASON_UNBOUND: &str = "PersistentVolume had no name";

/// Error when Filter runs without this plugin's PreFilter state (gantry's wording).
pub const ERR_MISSING_STATE: &str = "reading \"PreFilterVolumeZone\" from cycleState: not found";

/// The zone and region labels of the volumes the pod's claims are bound to, computed at
/// PreFilter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeZoneState {
    /// Each label of each volume, with the values it allows.
    pub topologies: Vec<VolumeTopology>,
}

/// Rejects nodes outside the zones and regions of the pod's volumes.
#[derive(Debug, Default, Clone, Copy)]
pub struct VolumeZone;

/// A delayed-binding class lets a claim wait for its pod; a node appearing or relabelled
/// may be in the zone; the pod's claim appearing or changing, or a volume appearing or
/// changing its zone, may settle it.
const EVENTS: [EventHint; 7] = [
    EventHint::when(ClusterEvent::StorageClassAdd, delays_binding),
    EventHint::any(ClusterEvent::NodeAdd),
    EventHint::when(ClusterEvent::NodeUpdate, relabels_the_node),
    EventHint::when(ClusterEvent::ClaimAdd, is_a_named_claim_of_the_pod),
    EventHint::when(ClusterEvent::ClaimUpdate, is_a_named_claim_of_the_pod),
    EventHint::any(ClusterEvent::VolumeAdd),
    EventHint::when(ClusterEvent::VolumeUpdate, changes_the_zone),
];

fn delays_binding(change: &ClusterChange<'_>, _: &PodInfo) -> QueueingHint {
    match change {
        ClusterChange::StorageClass { new, .. }
            if new.binding_mode != Some(BindingMode::WaitForFirstConsumer) =>
        {
            QueueingHint::Skip
        }
        _ => QueueingHint::Queue,
    }
}

fn relabels_the_node(change: &ClusterChange<'_>, _: &PodInfo) -> QueueingHint {
    match change {
        ClusterChange::NodeUpdated { old, new } if old.labels == new.labels => QueueingHint::Skip,
        _ => QueueingHint::Queue,
    }
}

fn changes_the_zone(change: &ClusterChange<'_>, _: &PodInfo) -> QueueingHint {
    match change {
        ClusterChange::Volume {
            old: Some(old),
            new,
        } if old.topology == new.topology => QueueingHint::Skip,
        _ => QueueingHint::Queue,
    }
}

impl Plugin for VolumeZone {
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

impl PreFilterPlugin for VolumeZone {
    /// Collects the zone labels of the volumes bound to the claims the pod names (not its
    /// ephemeral ones); skips the Filter when there are none. A claim, class or volume that
    /// is missing or incomplete rejects the pod on every node.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let storage = snapshot.storage();
        let reject = |reason: String| (PreFilterResult::default(), Status::unresolvable(reason));
        let mut topologies = Vec::new();
        for c in pod.volumes.claims.iter().filter(|c| !c.ephemeral) {
            let Some(claim) = storage.claim(&pod.namespace, &c.name) else {
                return reject(format!("persistentvolumeclaim \"{}\" not found", c.name));
            };
            if claim.volume_name.is_empty() {
                if claim.class.is_empty() {
                    return reject(ERR_REASON_NO_CLASS.to_string());
                }
                let Some(class) = storage.class(&claim.class) else {
                    return reject(format!(
                        "storageclass.storage.k8s.io \"{}\" not found",
                        claim.class
                    ));
                };
                match class.binding_mode {
                    None => {
                        return reject(format!(
                            "VolumeBindingMode not set for StorageClass \"{}\"",
                            claim.class
                        ));
                    }
                    Some(BindingMode::WaitForFirstConsumer) => continue,
                    Some(BindingMode::Immediate) => return reject(ERR_REASON_UNBOUND.to_string()),
                }
            }
            let Some(volume) = storage.volume(&claim.volume_name) else {
                return reject(format!(
                    "persistentvolume \"{}\" not found",
                    claim.volume_name
                ));
            };
            topologies.extend(volume.topology.iter().cloned());
        }
        if topologies.is_empty() {
            return (PreFilterResult::default(), Status::skip());
        }
        state.insert(VolumeZoneState { topologies });
        (PreFilterResult::default(), Status::success())
    }
}

/// The GA label a beta zone or region label stands for.
fn ga_label(key: &str) -> Option<&'static str> {
    match key {
        "failure-domain.beta.kubernetes.io/zone" => Some("topology.kubernetes.io/zone"),
        "failure-domain.beta.kubernetes.io/region" => Some("topology.kubernetes.io/region"),
        _ => None,
    }
}

impl FilterPlugin for VolumeZone {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if pod.volumes.is_empty() {
            return Status::success();
        }
        let labels = &node.node.labels;
        if !VOLUME_ZONE_LABELS.iter().any(|k| labels.contains_key(k)) {
            return Status::success();
        }
        let Some(found) = state.get::<VolumeZoneState>() else {
            return Status::error(ERR_MISSING_STATE);
        };
        for t in &found.topologies {
            let value = labels
                .get(t.key)
                .or_else(|| ga_label(t.key).and_then(|k| labels.get(k)));
            if !value.is_some_and(|v| t.values.contains(v)) {
                return Status::unresolvable(ERR_REASON_CONFLICT);
            }
        }
        Status::success()
    }
}

/// The plugin for the registry, with its place in kube-scheduler's default profile.
pub const SPEC: PluginSpec = PluginSpec {
    name: NAME,
    factory,
    default: Some(DefaultPlace {
        order: 88,
        weight: None,
    }),
    args: None,
};

/// Builds the plugin; it takes no arguments, and ignores any given (as kube-scheduler does
/// for plugins without an arguments type).
pub fn factory(_args: Option<&serde_json::Value>) -> Result<Arc<dyn Plugin>, ArgsError> {
    Ok(Arc::new(VolumeZone))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1 as core;
    use k8s_openapi::api::storage::v1 as storage;

    use super::*;
    use crate::cache::Cache;
    use crate::framework::{Code, may_help};
    use crate::model::volume::{ClaimModel, StorageClassModel, VolumeModel};
    use crate::testing::{NodeBuilder, PodBuilder, node, node_info, pod};

    fn yaml<T: serde::de::DeserializeOwned>(text: &str) -> T {
        serde_yaml::from_str(text).expect("valid object")
    }

    /// A claim `name` bound to volume `volume` (unbound when empty), of class `class`.
    fn claim(name: &str, volume: &str, class: &str) -> ClaimModel {
        ClaimModel::from_api(&yaml(&format!(
            "{{metadata: {{name: {name}, namespace: default}}, spec: {{volumeName: '{volume}', storageClassName: '{class}'}}}}"
        )))
        .expect("valid claim")
    }

    /// A volume `name` with `labels` (a YAML map).
    fn volume(name: &str, labels: &str) -> VolumeModel {
        let pv: core::PersistentVolume =
            yaml(&format!("{{metadata: {{name: {name}, labels: {labels}}}}}"));
        VolumeModel::from_api(&pv).expect("valid volume")
    }

    fn class(name: &str, mode: Option<&str>) -> StorageClassModel {
        let mode = mode.map_or(String::new(), |m| format!(", volumeBindingMode: {m}"));
        let sc: storage::StorageClass = yaml(&format!(
            "{{metadata: {{name: {name}}}, provisioner: example.com/csi{mode}}}"
        ));
        StorageClassModel::from_api(&sc).expect("valid class")
    }

    const ZONE: &str = "topology.kubernetes.io/zone";
    const BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";

    fn using(claims: &[&str]) -> PodBuilder {
        let volumes: Vec<String> = claims
            .iter()
            .map(|c| format!("{{name: {c}, persistentVolumeClaim: {{claimName: {c}}}}}"))
            .collect();
        pod("p").spec_yaml(&format!("volumes: [{}]", volumes.join(", ")))
    }

    struct World {
        claims: Vec<ClaimModel>,
        volumes: Vec<VolumeModel>,
        classes: Vec<StorageClassModel>,
    }

    impl World {
        fn snapshot(&self) -> Snapshot {
            let mut cache = Cache::new();
            for c in &self.claims {
                cache.upsert_claim(c.clone());
            }
            for v in &self.volumes {
                cache.upsert_volume(v.clone());
            }
            for c in &self.classes {
                cache.upsert_storage_class(c.clone());
            }
            let mut snap = Snapshot::default();
            cache.update_snapshot(&mut snap);
            snap
        }

        /// PreFilter, then Filter on `node` unless PreFilter decided.
        fn run(&self, p: PodBuilder, n: NodeBuilder) -> Status {
            let p = p.build();
            let mut state = CycleState::new();
            let (_, status) = VolumeZone.pre_filter(&mut state, &p, &self.snapshot());
            if !status.is_success() {
                return status;
            }
            VolumeZone.filter(&state, &p, &node_info(n.build(), &[]))
        }
    }

    /// Claim `data` bound to volume `pv` labelled with `labels`.
    fn bound(labels: &str) -> World {
        World {
            claims: vec![claim("data", "pv", "")],
            volumes: vec![volume("pv", labels)],
            classes: vec![],
        }
    }

    #[test]
    fn a_node_in_the_volumes_zone_fits_and_others_do_not() {
        let w = bound(&format!("{{{ZONE}: a}}"));
        assert!(
            w.run(using(&["data"]), node("n").label(ZONE, "a"))
                .is_success()
        );
        let s = w.run(using(&["data"]), node("n").label(ZONE, "b"));
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(s.message(), "node(s) had no available volume zone");
        assert!(
            w.run(using(&["data"]), node("n")).is_success(),
            "a node without zone labels takes the pod"
        );
        assert!(
            w.run(
                using(&["data"]),
                node("n").label("topology.kubernetes.io/region", "r")
            )
            .is_rejected(),
            "a node with a region but no zone lacks the volume's zone"
        );
    }

    #[test]
    fn a_volume_may_allow_several_zones() {
        let w = bound(&format!("{{{ZONE}: a__b}}"));
        assert!(
            w.run(using(&["data"]), node("n").label(ZONE, "b"))
                .is_success()
        );
        assert!(
            w.run(using(&["data"]), node("n").label(ZONE, "c"))
                .is_rejected()
        );
        let bad = bound(&format!("{{{ZONE}: 'a__'}}"));
        assert!(
            bad.run(using(&["data"]), node("n").label(ZONE, "c"))
                .is_skip(),
            "an unreadable label is ignored"
        );
    }

    #[test]
    fn a_beta_volume_label_falls_back_to_the_ga_node_label() {
        let w = bound(&format!("{{{BETA_ZONE}: a}}"));
        assert!(
            w.run(using(&["data"]), node("n").label(ZONE, "a"))
                .is_success()
        );
        assert!(
            w.run(using(&["data"]), node("n").label(ZONE, "b"))
                .is_rejected()
        );
        assert!(
            w.run(
                using(&["data"]),
                node("n").label(BETA_ZONE, "b").label(ZONE, "a")
            )
            .is_rejected(),
            "the beta label wins when the node has it"
        );
        let ga = bound(&format!("{{{ZONE}: a}}"));
        assert!(
            ga.run(using(&["data"]), node("n").label(BETA_ZONE, "a"))
                .is_rejected(),
            "no fallback from GA to beta"
        );
    }

    #[test]
    fn pods_without_zoned_volumes_skip() {
        let w = bound("{app: db}");
        assert!(
            w.run(using(&["data"]), node("n").label(ZONE, "a"))
                .is_skip()
        );
        assert!(w.run(pod("p"), node("n").label(ZONE, "a")).is_skip());
        let ephemeral = pod("p").spec_yaml(
            "volumes: [{name: s, ephemeral: {volumeClaimTemplate: {spec: {accessModes: [ReadWriteOnce]}}}}]",
        );
        assert!(w.run(ephemeral, node("n").label(ZONE, "a")).is_skip());
    }

    #[test]
    fn unbound_claims() {
        let w = |mode: Option<&str>| World {
            claims: vec![claim("data", "", "fast")],
            volumes: vec![],
            classes: vec![class("fast", mode)],
        };
        let on = || node("n").label(ZONE, "a");
        assert!(
            w(Some("WaitForFirstConsumer"))
                .run(using(&["data"]), on())
                .is_skip()
        );
        let s = w(Some("Immediate")).run(using(&["data"]), on());
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(s.message(), "PersistentVolume had no name");
        assert_eq!(
            w(None).run(using(&["data"]), on()).message(),
            "VolumeBindingMode not set for StorageClass \"fast\""
        );
        let no_class = World {
            claims: vec![claim("data", "", "")],
            volumes: vec![],
            classes: vec![],
        };
        assert_eq!(
            no_class.run(using(&["data"]), on()).message(),
            "PersistentVolumeClaim had no pv name and storageClass name"
        );
        let missing_class = World {
            claims: vec![claim("data", "", "fast")],
            volumes: vec![],
            classes: vec![],
        };
        assert_eq!(
            missing_class.run(using(&["data"]), on()).message(),
            "storageclass.storage.k8s.io \"fast\" not found"
        );
    }

    #[test]
    fn missing_claims_and_volumes_reject_the_pod() {
        let none = World {
            claims: vec![],
            volumes: vec![],
            classes: vec![],
        };
        let s = none.run(using(&["data"]), node("n"));
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(s.message(), "persistentvolumeclaim \"data\" not found");
        let no_volume = World {
            claims: vec![claim("data", "pv", "")],
            volumes: vec![],
            classes: vec![],
        };
        assert_eq!(
            no_volume.run(using(&["data"]), node("n")).message(),
            "persistentvolume \"pv\" not found"
        );
    }

    #[test]
    fn every_volume_of_the_pod_must_fit() {
        let w = World {
            claims: vec![claim("a", "pv-a", ""), claim("b", "pv-b", "")],
            volumes: vec![
                volume("pv-a", &format!("{{{ZONE}: a}}")),
                volume("pv-b", "{topology.kubernetes.io/region: r1}"),
            ],
            classes: vec![],
        };
        let region = "topology.kubernetes.io/region";
        assert!(
            w.run(
                using(&["a", "b"]),
                node("n").label(ZONE, "a").label(region, "r1")
            )
            .is_success()
        );
        assert!(
            w.run(
                using(&["a", "b"]),
                node("n").label(ZONE, "a").label(region, "r2")
            )
            .is_rejected()
        );
    }

    #[test]
    fn missing_state_is_an_error_on_zoned_nodes() {
        let p = using(&["data"]).build();
        let zoned = node_info(node("n").label(ZONE, "a").build(), &[]);
        let s = VolumeZone.filter(&CycleState::new(), &p, &zoned);
        assert_eq!(s.code(), Code::Error);
        assert_eq!(
            s.message(),
            "reading \"PreFilterVolumeZone\" from cycleState: not found"
        );
    }

    #[test]
    fn hints() {
        let events = VolumeZone.events();
        let p = using(&["data"]).build();
        let helps = |c: ClusterChange<'_>| may_help(events, &c, &p);
        let wffc = class("late", Some("WaitForFirstConsumer"));
        let immediate = class("now", Some("Immediate"));
        assert!(helps(ClusterChange::StorageClass {
            old: None,
            new: &wffc
        }));
        assert!(!helps(ClusterChange::StorageClass {
            old: None,
            new: &immediate
        }));
        let (a, b) = (
            node("n").label(ZONE, "a").build(),
            node("n").label(ZONE, "b").build(),
        );
        let tainted = node("n")
            .label(ZONE, "a")
            .taint("k", "v", "NoSchedule")
            .build();
        assert!(helps(ClusterChange::NodeAdded(&a)));
        assert!(helps(ClusterChange::NodeUpdated { old: &a, new: &b }));
        assert!(!helps(ClusterChange::NodeUpdated {
            old: &a,
            new: &tainted
        }));
        let data = claim("data", "pv", "");
        let logs = claim("logs", "pv", "");
        assert!(helps(ClusterChange::Claim {
            old: None,
            new: &data
        }));
        assert!(helps(ClusterChange::Claim {
            old: Some(&data),
            new: &data
        }));
        assert!(!helps(ClusterChange::Claim {
            old: None,
            new: &logs
        }));
        let (pv_a, pv_b) = (
            volume("pv", &format!("{{{ZONE}: a}}")),
            volume("pv", &format!("{{{ZONE}: b}}")),
        );
        let relabelled = volume("pv", &format!("{{{ZONE}: a, app: db}}"));
        assert!(helps(ClusterChange::Volume {
            old: None,
            new: &pv_a
        }));
        assert!(helps(ClusterChange::Volume {
            old: Some(&pv_a),
            new: &pv_b
        }));
        assert!(!helps(ClusterChange::Volume {
            old: Some(&pv_a),
            new: &relabelled
        }));
    }

    #[test]
    fn factory_builds_the_named_plugin() {
        let p = factory(None).unwrap();
        assert_eq!(p.name(), "VolumeZone");
        assert!(p.as_pre_filter().is_some() && p.as_filter().is_some());
        assert_eq!(p.cache_state(), [Tracked::Volumes]);
    }
}
