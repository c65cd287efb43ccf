//! `cluster-bench volume-list`: a volume workload's cluster as one JSON List for `gantry
//! simulate`, so that the scheduling core is measured on the very objects of
//! `scripts/bench-volumes.sh` without an API server.
//!
//! The objects are [`crate::volumes`]' with one difference: they are written as the PV
//! controller leaves them (each volume's claimRef with its claim's uid, each claim with the
//! bind-completed annotation, both phases Bound), since no controller runs in the simulator.

use std::io::Write;

use anyhow::Context;
use k8s_openapi::api::core::v1::{
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimStatus, PersistentVolumeStatus,
};
use serde::Serialize;
use serde_json::{Value, json};

use crate::volumes::{self, Kind};

/// The namespace of the pods and claims, as in the benchmark's runs (any name would do).
const NAMESPACE: &str = "bench";
/// The annotation the PV controller sets on a claim it has bound.
const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";

/// Arguments of `cluster-bench volume-list`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Nodes of the cluster.
    #[arg(long, default_value_t = 5000)]
    nodes: usize,
    /// Pending pods, one claim and one volume each.
    #[arg(long, default_value_t = 6000)]
    pods: usize,
    /// The volume workload.
    #[arg(long, value_enum)]
    workload: Kind,
}

/// Writes the List to standard output.
pub fn run(args: Args) -> anyhow::Result<()> {
    let list = list(args.nodes, args.pods, args.workload)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    serde_json::to_writer(&mut out, &list).context("cannot write the List")?;
    out.flush().context("cannot write the List")
}

/// Every node (each followed by its CSINode, if the workload has them), then every volume
/// and its claim, then every pod.
fn list(nodes: usize, pods: usize, kind: Kind) -> anyhow::Result<Value> {
    let nodes = volumes::nodes(nodes, kind);
    let csi_nodes = volumes::csi_nodes(&nodes, kind);
    let objects = volumes::objects(pods, NAMESPACE, kind, "default-scheduler");
    let mut items = Vec::with_capacity(nodes.len() + csi_nodes.len() + 3 * pods);
    let mut csi_nodes = csi_nodes.into_iter();
    for node in nodes {
        items.push(item(&node, "v1", "Node")?);
        if let Some(csi_node) = csi_nodes.next() {
            items.push(item(&csi_node, "storage.k8s.io/v1", "CSINode")?);
        }
    }
    for (volume, claim) in objects.volumes.into_iter().zip(objects.claims) {
        let (volume, claim) = bound(volume, claim);
        items.push(item(&volume, "v1", "PersistentVolume")?);
        items.push(item(&claim, "v1", "PersistentVolumeClaim")?);
    }
    for pod in objects.pods {
        items.push(item(&pod, "v1", "Pod")?);
    }
    Ok(json!({"apiVersion": "v1", "kind": "List", "items": items}))
}

/// A pre-bound pair as the PV controller completes it: the claim gets a uid of its own
/// (`uid-<claim>`) that the volume's claimRef names, the bind-completed annotation, and both
/// the phase Bound.
fn bound(
    mut volume: PersistentVolume,
    mut claim: PersistentVolumeClaim,
) -> (PersistentVolume, PersistentVolumeClaim) {
    let uid = format!("uid-{}", claim.metadata.name.as_deref().unwrap_or_default());
    if let Some(claim_ref) = volume.spec.as_mut().and_then(|s| s.claim_ref.as_mut()) {
        claim_ref.uid = Some(uid.clone());
    }
    volume.status = Some(PersistentVolumeStatus {
        phase: Some("Bound".to_owned()),
        ..Default::default()
    });
    claim.metadata.uid = Some(uid);
    claim
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(BIND_COMPLETED.to_owned(), "yes".to_owned());
    claim.status = Some(PersistentVolumeClaimStatus {
        phase: Some("Bound".to_owned()),
        ..Default::default()
    });
    (volume, claim)
}

/// An object with its apiVersion and kind, which a List item needs and k8s-openapi's typed
/// serialisation leaves out.
fn item<T: Serialize>(object: &T, api_version: &str, kind: &str) -> anyhow::Result<Value> {
    let mut value =
        serde_json::to_value(object).with_context(|| format!("cannot encode a {kind}"))?;
    value["apiVersion"] = json!(api_version);
    value["kind"] = json!(kind);
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(list: &Value) -> Vec<&str> {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["kind"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn the_list_holds_every_object_bound_in_order() {
        let migrated = list(2, 1, Kind::MigratedInTree).unwrap();
        assert_eq!(
            kinds(&migrated),
            [
                "Node",
                "CSINode",
                "Node",
                "CSINode",
                "PersistentVolume",
                "PersistentVolumeClaim",
                "Pod"
            ]
        );
        let items = &migrated["items"];
        assert_eq!(items[1]["apiVersion"], "storage.k8s.io/v1");
        let (volume, claim) = (&items[4], &items[5]);
        assert_eq!(volume["spec"]["claimRef"]["uid"], "uid-pvc-0");
        assert_eq!(volume["status"]["phase"], "Bound");
        assert_eq!(claim["metadata"]["uid"], "uid-pvc-0");
        assert_eq!(claim["metadata"]["annotations"][BIND_COMPLETED], "yes");
        assert_eq!(claim["spec"]["volumeName"], "bench-vol-0");
        assert_eq!(claim["status"]["phase"], "Bound");
        assert_eq!(items[6]["metadata"]["namespace"], NAMESPACE);

        let in_tree = list(2, 0, Kind::InTree).unwrap();
        assert_eq!(kinds(&in_tree), ["Node", "Node"]);
    }
}
