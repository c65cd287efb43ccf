//! Whether a node can have the pod's claims: bound volumes reachable from it, and for each
//! claim of a `WaitForFirstConsumer` class not bound yet, an available volume the node can
//! reach or a class that may provision there (with room for it, where the class's CSI
//! driver reports its free storage). Filter asks it for every node; Reserve asks
//! again for the chosen node and keeps the decisions.

use std::sync::Arc;

use crate::cache::VolumeDecision;
use crate::model::Labels;
use crate::model::volume::{ClaimModel, StorageCapacityModel, StorageClassModel, VolumeModel};

/// A node whose bound volumes' node affinity excludes it.
pub const ERR_NODE_CONFLICT: &str = "node(s) didn't match PersistentVolume's node affinity";
/// A node with no volume to bind and no way to provision one for some claim.
pub const ERR_BIND_CONFLICT: &str = "node(s) didn't find available persistent volumes to bind";
/// A node where no CSIStorageCapacity of the class has room for a claim to provision.
pub const ERR_NOT_ENOUGH_SPACE: &str = "node(s) did not have enough free storage";
/// A claim bound to a volume that does not exist.
pub const ERR_PV_NOT_EXIST: &str =
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";

/// A claim bound to its volume (`None`: the volume is not known).
#[derive(Debug, Clone)]
pub struct BoundClaim {
    /// The claim.
    pub claim: Arc<ClaimModel>,
    /// Its volume.
    pub volume: Option<Arc<VolumeModel>>,
}

/// A claim of a `WaitForFirstConsumer` class not bound yet, with its class and the volumes
/// of that class as the cycle started.
#[derive(Debug, Clone)]
pub struct DelayedClaim {
    /// The claim.
    pub claim: Arc<ClaimModel>,
    /// Its class.
    pub class: Arc<StorageClassModel>,
    /// The volumes of the class, in name order.
    pub candidates: Vec<Arc<VolumeModel>>,
    /// Where provisioning is checked against reported capacity (the claim requests storage
    /// and the class's CSI driver reports capacity): the CSIStorageCapacities of the class
    /// with room for the claim. `None`: provisioning always has room.
    pub capacities: Option<Vec<Arc<StorageCapacityModel>>>,
}

/// The pod's claims, sorted out at PreFilter.
#[derive(Debug, Clone, Default)]
pub struct PodClaims {
    /// Claims bound to a volume.
    pub bound: Vec<BoundClaim>,
    /// Claims waiting for their first consumer, smallest request first (kube-scheduler
    /// matches them in that order, so a small claim does not take a large volume a larger
    /// claim of the pod needs).
    pub delayed: Vec<DelayedClaim>,
}

/// What one node can do for the pod's claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeVolumes {
    /// It can: bind these volumes, provision these claims, using this much storage.
    Fits(Vec<VolumeDecision>, StorageUse),
    /// It cannot, for these reasons (kube-scheduler's order).
    Rejected(Vec<&'static str>),
}

impl PodClaims {
    /// True when [`PodClaims::check`] passes every node: no claim waits for its first
    /// consumer, and each is bound to a known volume without node affinity.
    pub fn fit_every_node(&self) -> bool {
        self.delayed.is_empty()
            && self
                .bound
                .iter()
                .all(|b| b.volume.as_ref().is_some_and(|v| v.node_affinity.is_none()))
    }

    /// Checks the node `name` with `labels`.
    pub fn check(&self, name: &str, labels: &Labels) -> NodeVolumes {
        let mut bound_fit = true;
        let mut bound_found = true;
        for b in &self.bound {
            match &b.volume {
                None => {
                    bound_found = false;
                    break;
                }
                Some(v) if !v.fits_node(name, labels) => {
                    bound_fit = false;
                    break;
                }
                Some(_) => {}
            }
        }
        let delayed = self.check_delayed(name, labels);
        let mut reasons = Vec::new();
        if !bound_fit {
            reasons.push(ERR_NODE_CONFLICT);
        }
        if matches!(delayed, Delayed::Conflict) {
            reasons.push(ERR_BIND_CONFLICT);
        }
        if matches!(delayed, Delayed::NoSpace) {
            reasons.push(ERR_NOT_ENOUGH_SPACE);
        }
        if !bound_found {
            reasons.push(ERR_PV_NOT_EXIST);
        }
        match delayed {
            Delayed::Fits(decisions, used) if reasons.is_empty() => {
                NodeVolumes::Fits(decisions, used)
            }
            _ => NodeVolumes::Rejected(reasons),
        }
    }

    /// Matches the delayed claims on the node: a volume for each where one fits, else
    /// provisioning where the class allows it and has room. As kube-scheduler, the first
    /// claim to provision without room ends the check (reported as lacking space, not as a
    /// conflict).
    fn check_delayed(&self, name: &str, labels: &Labels) -> Delayed {
        let mut decisions = Vec::new();
        let mut used = StorageUse::default();
        let mut to_provision: Vec<&DelayedClaim> = Vec::new();
        let mut to_match: Vec<&DelayedClaim> = Vec::new();
        for d in &self.delayed {
            match &d.claim.selected_node {
                // Provisioning was already started for another node: only that one will do.
                Some(selected) if selected != name => return Delayed::Conflict,
                Some(_) => to_provision.push(d),
                None => to_match.push(d),
            }
        }
        let mut chosen: Vec<&str> = Vec::new();
        for d in to_match {
            match find_matching_volume(&d.claim, &d.candidates, name, labels, &chosen) {
                Some(v) => {
                    chosen.push(&v.name);
                    used.bound.push(ClassUse {
                        class: v.class.clone(),
                        requested: d.claim.request,
                        capacity: v.capacity,
                    });
                    decisions.push(VolumeDecision::Bind {
                        claim: key(&d.claim),
                        claim_uid: d.claim.uid.clone(),
                        volume: v.name.clone(),
                        volume_version: v.resource_version.clone(),
                    });
                }
                None => to_provision.push(d),
            }
        }
        for d in to_provision {
            if !d.class.can_provision() || !d.class.allows_node(name, labels) {
                return Delayed::Conflict;
            }
            if let Some(capacities) = &d.capacities {
                let Some(reported) = capacities.iter().find(|c| c.topology.matches(labels)) else {
                    return Delayed::NoSpace;
                };
                used.provisioned.push(ClassUse {
                    class: d.class.name.clone(),
                    requested: d.claim.request,
                    capacity: reported.capacity.unwrap_or(0),
                });
            }
            decisions.push(VolumeDecision::Provision {
                claim: key(&d.claim),
                claim_version: d.claim.resource_version.clone(),
                node: name.to_string(),
            });
        }
        Delayed::Fits(decisions, used)
    }
}

/// Storage of one class a claim would use on a node: what it requests of what there is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassUse {
    /// The storage class.
    pub class: String,
    /// Bytes the claim requests.
    pub requested: i64,
    /// Bytes there are: the volume's capacity for a claim bound to an existing volume, the
    /// reported capacity's total (0 when it reports none) for a claim to provision.
    pub capacity: i64,
}

/// The storage a node would give the pod's claims that wait for their first consumer, for
/// VolumeBinding's score.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StorageUse {
    /// Claims bound to existing volumes there.
    pub bound: Vec<ClassUse>,
    /// Claims provisioned there against a capacity their CSI driver reports (claims whose
    /// provisioning is not held to reports are not counted).
    pub provisioned: Vec<ClassUse>,
}

/// What a node can do for the delayed claims.
enum Delayed {
    /// Everything: these bindings and provisionings.
    Fits(Vec<VolumeDecision>, StorageUse),
    /// Some claim has neither a volume nor provisioning there.
    Conflict,
    /// Some claim could be provisioned there but no reported capacity has room for it.
    NoSpace,
}

fn key(claim: &ClaimModel) -> (String, String) {
    (claim.namespace.clone(), claim.name.clone())
}

/// The volume `claim` should get on the node: a volume reserved for the claim if it can be
/// reached from the node (none at all if it cannot), else the smallest available volume of
/// its class that has room, the access modes, the volume mode and the labels it asks for,
/// and can be reached from the node. Volumes already chosen for the pod's other claims are
/// left out; among equal sizes the first by name wins (kube-scheduler takes whichever its
/// informer lists first).
pub fn find_matching_volume<'a>(
    claim: &ClaimModel,
    candidates: &'a [Arc<VolumeModel>],
    name: &str,
    labels: &Labels,
    chosen: &[&str],
) -> Option<&'a Arc<VolumeModel>> {
    let mut best: Option<&Arc<VolumeModel>> = None;
    for v in candidates {
        if chosen.contains(&v.name.as_str()) {
            continue;
        }
        let reserved_for_claim = match &v.claim_ref {
            Some(r) if r.is_to(claim) => true,
            Some(_) => continue,
            None => false,
        };
        if v.capacity < claim.request || v.block != claim.block || v.deleting {
            continue;
        }
        let reachable = v.fits_node(name, labels);
        if reserved_for_claim {
            return reachable.then_some(v);
        }
        let selected = claim.selector.as_ref().is_none_or(|s| s.matches(&v.labels));
        if !v.available
            || !selected
            || v.class != claim.class
            || !reachable
            || !v.access_modes.contains(claim.access_modes)
        {
            continue;
        }
        if best.is_none_or(|b| v.capacity < b.capacity) {
            best = Some(v);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::volume::ClaimRef;

    fn claim(name: &str, request: i64) -> Arc<ClaimModel> {
        let mut c = ClaimModel::from_api(
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "d", "uid": format!("u-{name}")},
                "spec": {"storageClassName": "local", "accessModes": ["ReadWriteOnce"]}
            }))
            .unwrap(),
        )
        .unwrap();
        c.request = request;
        Arc::new(c)
    }

    fn volume(name: &str, capacity: i64, zone: Option<&str>) -> Arc<VolumeModel> {
        let mut spec = serde_json::json!({
            "storageClassName": "local",
            "accessModes": ["ReadWriteOnce"],
            "capacity": {"storage": capacity.to_string()}
        });
        if let Some(z) = zone {
            spec["nodeAffinity"] = serde_json::json!({"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": [z]}]}
            ]}});
        }
        Arc::new(
            VolumeModel::from_api(
                &serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name},
                    "spec": spec,
                    "status": {"phase": "Available"}
                }))
                .unwrap(),
            )
            .unwrap(),
        )
    }

    fn zone(z: &str) -> Labels {
        [("zone", z)].into_iter().collect()
    }

    #[test]
    fn the_smallest_reachable_volume_with_room_is_chosen() {
        let c = claim("c", 10);
        let vs = [
            volume("big", 100, None),
            volume("small", 20, None),
            volume("tiny", 5, None),
            volume("far", 12, Some("b")),
        ];
        let pick = |node_zone, chosen: &[&str]| {
            find_matching_volume(&c, &vs, "n", &zone(node_zone), chosen).map(|v| v.name.clone())
        };
        assert_eq!(pick("a", &[]).as_deref(), Some("small"));
        assert_eq!(pick("b", &[]).as_deref(), Some("far"));
        assert_eq!(pick("a", &["small"]).as_deref(), Some("big"));
        assert_eq!(pick("a", &["small", "big"]), None);
    }

    #[test]
    fn a_volume_reserved_for_the_claim_is_the_only_choice() {
        let c = claim("c", 10);
        let mut reserved = (*volume("mine", 50, Some("b"))).clone();
        reserved.claim_ref = Some(ClaimRef {
            namespace: "d".into(),
            name: "c".into(),
            uid: String::new(),
        });
        reserved.available = false;
        let mut other = (*volume("theirs", 10, None)).clone();
        other.claim_ref = Some(ClaimRef {
            namespace: "d".into(),
            name: "other".into(),
            uid: String::new(),
        });
        let vs = [
            Arc::new(reserved),
            Arc::new(other),
            volume("free", 10, None),
        ];
        let pick = |z| find_matching_volume(&c, &vs, "n", &zone(z), &[]).map(|v| v.name.clone());
        assert_eq!(pick("b").as_deref(), Some("mine"));
        assert_eq!(
            pick("a"),
            None,
            "unreachable, and no fallback to another volume"
        );
    }
}
