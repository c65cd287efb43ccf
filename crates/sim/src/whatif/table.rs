//! An [`Answer`] as text: the pods' placements in a table, then why, as `gantry explain`
//! explains an attempt.

use std::fmt::Write as _;

use crate::table;
use gantry_core::decision::Outcome;
use gantry_core::decision::explain::explain_record;

use super::{Answer, PodAnswer};

/// The kinds whose pods the question names `<name>-<i>` where their controller draws random
/// names.
const RANDOMLY_NAMED: [&str; 3] = ["Deployment/", "ReplicaSet/", "Job/"];

impl Answer {
    /// The answer as tables and explanations.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let when = if self.taken_at_ms == 0 {
            String::new()
        } else {
            format!(" at t+{:.3}s", self.taken_at_ms as f64 / 1e3)
        };
        let _ = writeln!(
            out,
            "Against the cluster as the scheduler held it{when}: {} nodes, {} pods placed.",
            self.nodes, self.placed_pods
        );
        if let Some(n) = &self.nodes_needed {
            out.push('\n');
            match (n.needed, &n.short_by_one) {
                (Some(0), _) => {
                    let _ = writeln!(out, "No node of template {} needs to be added.", n.template);
                }
                (Some(k), short) => {
                    let _ = writeln!(
                        out,
                        "Nodes of template {} to add for every pod to fit: {k} (at most {} tried).",
                        n.template, n.max
                    );
                    if let Some(short) = short {
                        let _ = writeln!(out, "  With {}: {short}", k - 1);
                    }
                }
                (None, short) => {
                    let _ = writeln!(
                        out,
                        "Even {} nodes of template {} are not enough.",
                        n.max, n.template
                    );
                    if let Some(short) = short {
                        let _ = writeln!(out, "  With {}: {short}", n.max);
                    }
                }
            }
        }
        if !self.pods.is_empty() {
            self.placements(&mut out);
        }
        if !self.capacity.is_empty() {
            self.capacities(&mut out);
        }
        out
    }

    fn placements(&self, out: &mut String) {
        let rows: Vec<Vec<String>> = self
            .pods
            .iter()
            .map(|p| {
                let node = match (&p.node, &p.evicted_by) {
                    (Some(node), _) => node.clone(),
                    (None, Some(by)) => format!("(preempted by {by})"),
                    (None, None) => "(pending)".to_string(),
                };
                vec![
                    p.namespace.clone(),
                    p.name.clone(),
                    p.workload.clone(),
                    node,
                    p.preempts.join(", "),
                ]
            })
            .collect();
        out.push('\n');
        out.push_str(&table(
            &["NAMESPACE", "POD", "WORKLOAD", "NODE", "PREEMPTS"],
            &rows,
        ));
        if !self.groups.is_empty() {
            let rows: Vec<Vec<String>> = self
                .groups
                .iter()
                .map(|g| {
                    vec![
                        format!("{}/{}", g.namespace, g.name),
                        g.min_member.to_string(),
                        g.pods.to_string(),
                        g.placed.to_string(),
                        if g.complete { "yes" } else { "no" }.to_string(),
                        g.why.clone().unwrap_or_default(),
                    ]
                })
                .collect();
            out.push('\n');
            out.push_str(&table(
                &["PODGROUP", "MIN", "PODS", "PLACED", "COMPLETES", "WHY NOT"],
                &rows,
            ));
        }
        out.push_str("\nWhy:\n");
        for p in &self.pods {
            explain_pod(p, out);
        }
        if self.pods.iter().any(tie_decided_by_name) {
            out.push_str(
                "\nNote: ties between equally scored nodes are broken by the pod's name. The \
                 pods of Deployments, ReplicaSets and Jobs are named <name>-<i> here; their real \
                 pods, named at random, may land on another of the nodes tied at the top.\n",
            );
        }
    }

    fn capacities(&self, out: &mut String) {
        let rows: Vec<Vec<String>> = self
            .capacity
            .iter()
            .map(|c| {
                let fits = if c.limit_reached {
                    format!("{}+", c.fits)
                } else {
                    c.fits.to_string()
                };
                let why = match (&c.stopped_by, c.limit_reached) {
                    (Some(why), _) => why.clone(),
                    (None, true) => "(counting stopped at the limit)".to_string(),
                    (None, false) => String::new(),
                };
                vec![c.namespace.clone(), c.workload.clone(), fits, why]
            })
            .collect();
        out.push('\n');
        out.push_str(&table(
            &[
                "NAMESPACE",
                "WORKLOAD",
                "MORE REPLICAS FIT",
                "WHAT STOPS THE NEXT ONE",
            ],
            &rows,
        ));
        for c in &self.capacity {
            if let Some(next) = &c.next {
                let _ = writeln!(out, "\n{} replica {}:", c.workload, c.fits + 1);
                explain_record(next, out);
            }
        }
    }
}

/// A pod's attempts, newest first, or why it was not tried.
fn explain_pod(p: &PodAnswer, out: &mut String) {
    out.push('\n');
    if p.attempts.is_empty() {
        let _ = writeln!(
            out,
            "{}/{}: {}",
            p.namespace,
            p.name,
            p.message.as_deref().unwrap_or("not tried")
        );
        return;
    }
    for (i, r) in p.attempts.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        explain_record(r, out);
    }
    if !p.preempts.is_empty() {
        let _ = writeln!(
            out,
            "  Would preempt: {} (then bound once they are gone)",
            p.preempts.join(", ")
        );
    }
    if let Some(by) = &p.evicted_by {
        let _ = writeln!(out, "  Then preempted by {by}");
    }
}

/// True for a pod of a randomly named workload placed on one of several nodes tied at the
/// top, where the tie went by its name.
fn tie_decided_by_name(p: &PodAnswer) -> bool {
    if !RANDOMLY_NAMED.iter().any(|k| p.workload.starts_with(k)) {
        return false;
    }
    p.attempts.first().is_some_and(|r| {
        r.result == Outcome::Scheduled
            && r.top_nodes.len() > 1
            && r.top_nodes[0].total == r.top_nodes[1].total
    })
}
