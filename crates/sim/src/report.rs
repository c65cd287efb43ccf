//! What a simulation found: where every pod went, how full every node is, and why the pending
//! pods are pending. Printed as tables or JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

/// Where one pod ended up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodOutcome {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The node, or `None` when pending.
    pub node: Option<String>,
    /// Why it is pending (kube-scheduler's message), or what is wrong with it.
    pub message: Option<String>,
    /// True for pods that were already running in the input.
    #[serde(skip)]
    pub running: bool,
    /// Annotations the scheduler set on the pod with its binding: what plugins decided
    /// beyond the node (an overcommit's margin, GPU devices).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// The HAMi devices the pod was given, as HAMi's device plugin will allocate them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<GpuDevice>,
    /// The volumes the scheduler bound for the pod's claims: claim name to volume name, or
    /// to `provisioned on <node>` for a claim whose volume the class provisions.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub volumes: BTreeMap<String, String>,
    /// Set when a preemption evicted the pod: by which pod, from which node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evicted: Option<String>,
}

/// A GPU a pod was given on a HAMi node, with the memory and compute HAMi's limiter holds it
/// to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuDevice {
    /// The device's UUID.
    pub uuid: String,
    /// Memory, in MiB.
    pub memory_mib: u64,
    /// Compute, in percent.
    pub cores: u32,
}

impl GpuDevice {
    /// The devices HAMi's allocation annotation among `annotations` names.
    pub fn allocated(annotations: &BTreeMap<String, String>) -> Vec<GpuDevice> {
        annotations
            .get(gantry_core::model::hami::ALLOCATED_ANNOTATION)
            .and_then(|a| gantry_core::model::hami::decode_pod_devices(a).ok())
            .into_iter()
            .flatten()
            .flatten()
            .map(|d| GpuDevice {
                uuid: d.uuid,
                memory_mib: d.memory_mib,
                cores: d.cores,
            })
            .collect()
    }
}

/// One preemption the simulation carried out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PreemptionOutcome {
    /// The preemptor's namespace.
    pub namespace: String,
    /// The preemptor.
    pub pod: String,
    /// The node it was nominated to.
    pub node: String,
    /// The evicted pods, `namespace/name`, most important first.
    pub victims: Vec<String>,
    /// Why that node won over the other candidates.
    pub reason: String,
}

/// How one PodGroup fared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupOutcome {
    /// Namespace.
    pub namespace: String,
    /// The group's name.
    pub name: String,
    /// `minMember`.
    pub min_member: u32,
    /// Pods naming the group.
    pub pods: usize,
    /// Of them, bound.
    pub placed: usize,
    /// The most of them placed at once, waiting at Permit included: how far the group got.
    pub held_at_most: usize,
    /// True once `minMember` of them are bound.
    pub complete: bool,
    /// For a group not complete, why its pods found no place.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// How much of a node is requested.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeUsage {
    /// Node name.
    pub name: String,
    /// cpu requested by its pods, in millicores.
    pub milli_cpu_requested: i64,
    /// Allocatable cpu, in millicores.
    pub milli_cpu_allocatable: i64,
    /// Memory requested, in bytes.
    pub memory_requested: i64,
    /// Allocatable memory, in bytes.
    pub memory_allocatable: i64,
    /// Pods on the node.
    pub pods: i64,
    /// Allocatable pods.
    pub pods_allocatable: i64,
    /// Measured cpu utilisation, in whole percent, when the node's annotations give it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_cpu_percent: Option<i64>,
    /// Measured memory utilisation, in whole percent, when the node's annotations give it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_memory_percent: Option<i64>,
}

/// The result of a simulation.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// Every pod: running ones, then pending ones in input order.
    pub pods: Vec<PodOutcome>,
    /// Every node, in input order.
    pub nodes: Vec<NodeUsage>,
    /// Objects that could not be used, with the reason.
    pub invalid: Vec<String>,
    /// Objects of kinds the scheduler does not read, counted by kind.
    pub ignored: BTreeMap<String, usize>,
    /// The preemptions, in the order they happened.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub preemptions: Vec<PreemptionOutcome>,
    /// Every PodGroup, ordered by namespace and name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupOutcome>,
}

fn percent(part: i64, whole: i64) -> String {
    if whole <= 0 {
        "-".to_string()
    } else {
        format!("{:.0}%", part as f64 * 100.0 / whole as f64)
    }
}

/// Formats rows as aligned columns.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut l = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                l.push_str(cell);
            } else {
                let _ = write!(l, "{cell:<w$}  ");
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

impl Report {
    /// Pods placed by the simulation (not those already running).
    pub fn scheduled(&self) -> impl Iterator<Item = &PodOutcome> {
        self.pods.iter().filter(|p| !p.running && p.node.is_some())
    }

    /// Pods left pending (evicted ones are gone, not pending).
    pub fn pending(&self) -> impl Iterator<Item = &PodOutcome> {
        self.pods
            .iter()
            .filter(|p| p.node.is_none() && p.evicted.is_none())
    }

    /// The report as readable tables.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let placed: Vec<Vec<String>> = self
            .scheduled()
            .map(|p| {
                vec![
                    p.namespace.clone(),
                    p.name.clone(),
                    p.node.clone().unwrap_or_default(),
                ]
            })
            .collect();
        let _ = writeln!(out, "Scheduled pods ({}):", placed.len());
        out.push_str(&table(&["NAMESPACE", "POD", "NODE"], &placed));
        let annotated: Vec<Vec<String>> = self
            .scheduled()
            .flat_map(|p| {
                p.annotations
                    .iter()
                    .map(|(k, v)| vec![p.namespace.clone(), p.name.clone(), format!("{k}={v}")])
            })
            .collect();
        if !annotated.is_empty() {
            let _ = writeln!(out, "\nSet with the binding:");
            out.push_str(&table(&["NAMESPACE", "POD", "ANNOTATION"], &annotated));
        }
        let devices: Vec<Vec<String>> = self
            .scheduled()
            .flat_map(|p| {
                p.devices.iter().map(|d| {
                    vec![
                        p.namespace.clone(),
                        p.name.clone(),
                        p.node.clone().unwrap_or_default(),
                        d.uuid.clone(),
                        d.memory_mib.to_string(),
                        d.cores.to_string(),
                    ]
                })
            })
            .collect();
        if !devices.is_empty() {
            let _ = writeln!(out, "\nGPU devices (HAMi):");
            out.push_str(&table(
                &[
                    "NAMESPACE",
                    "POD",
                    "NODE",
                    "DEVICE",
                    "MEMORY (MiB)",
                    "CORES (%)",
                ],
                &devices,
            ));
        }
        let volumes: Vec<Vec<String>> = self
            .scheduled()
            .flat_map(|p| {
                p.volumes.iter().map(|(claim, volume)| {
                    vec![
                        p.namespace.clone(),
                        p.name.clone(),
                        claim.clone(),
                        volume.clone(),
                    ]
                })
            })
            .collect();
        if !volumes.is_empty() {
            let _ = writeln!(out, "\nVolumes bound with the pods:");
            out.push_str(&table(&["NAMESPACE", "POD", "CLAIM", "VOLUME"], &volumes));
        }
        self.write_preemptions_and_groups(&mut out);
        self.write_nodes(&mut out);
        let pending: Vec<Vec<String>> = self
            .pending()
            .map(|p| {
                vec![
                    p.namespace.clone(),
                    p.name.clone(),
                    p.message.clone().unwrap_or_default(),
                ]
            })
            .collect();
        let _ = writeln!(out, "\nUnschedulable pods ({}):", pending.len());
        if !pending.is_empty() {
            out.push_str(&table(&["NAMESPACE", "POD", "WHY"], &pending));
        }
        for msg in &self.invalid {
            let _ = writeln!(out, "invalid input: {msg}");
        }
        if !self.ignored.is_empty() {
            let kinds: Vec<String> = self
                .ignored
                .iter()
                .map(|(k, n)| format!("{n} {k}"))
                .collect();
            let _ = writeln!(
                out,
                "\nIgnored objects the scheduler does not read: {}",
                kinds.join(", ")
            );
        }
        out
    }

    /// The preemptions decided and the pod groups, as tables (nothing for none).
    fn write_preemptions_and_groups(&self, out: &mut String) {
        if !self.preemptions.is_empty() {
            let rows: Vec<Vec<String>> = self
                .preemptions
                .iter()
                .map(|p| {
                    vec![
                        p.namespace.clone(),
                        p.pod.clone(),
                        p.node.clone(),
                        p.victims.join(", "),
                        p.reason.clone(),
                    ]
                })
                .collect();
            let _ = writeln!(out, "\nPreemptions ({}):", rows.len());
            out.push_str(&table(
                &["NAMESPACE", "PREEMPTOR", "NODE", "VICTIMS", "CHOSEN FOR"],
                &rows,
            ));
        }
        if !self.groups.is_empty() {
            let rows: Vec<Vec<String>> = self
                .groups
                .iter()
                .map(|g| {
                    vec![
                        g.namespace.clone(),
                        g.name.clone(),
                        format!("{}/{}", g.placed, g.min_member),
                        g.pods.to_string(),
                        match &g.why {
                            None => "complete".to_string(),
                            Some(why) => {
                                format!("incomplete ({} placed at most): {why}", g.held_at_most)
                            }
                        },
                    ]
                })
                .collect();
            let _ = writeln!(out, "\nPod groups ({}):", rows.len());
            out.push_str(&table(
                &["NAMESPACE", "GROUP", "BOUND/MIN", "PODS", "STATE"],
                &rows,
            ));
        }
    }

    /// Each node's requests against its allocatable (and what was measured, if anything).
    fn write_nodes(&self, out: &mut String) {
        let measured = self.nodes.iter().any(|n| n.measured_cpu_percent.is_some());
        let nodes: Vec<Vec<String>> = self
            .nodes
            .iter()
            .map(|n| {
                let mut row = vec![
                    n.name.clone(),
                    percent(n.milli_cpu_requested, n.milli_cpu_allocatable),
                    percent(n.memory_requested, n.memory_allocatable),
                    format!("{}/{}", n.pods, n.pods_allocatable),
                ];
                if measured {
                    row.push(match (n.measured_cpu_percent, n.measured_memory_percent) {
                        (Some(c), Some(m)) => format!("{c}%/{m}%"),
                        _ => "-".to_string(),
                    });
                }
                row
            })
            .collect();
        let _ = writeln!(out, "\nNode utilisation (requests / allocatable):");
        let mut header = vec!["NODE", "CPU", "MEMORY", "PODS"];
        if measured {
            header.push("MEASURED CPU/MEMORY");
        }
        out.push_str(&table(&header, &nodes));
    }

    /// The report as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}
