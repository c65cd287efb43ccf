//! Decision records as people read them (`gantry explain`): where the pod went and why that
//! node won, or why no node could take it and which single change would have helped.

use std::fmt::Write;

use super::record::{DecisionRecord, Outcome};

/// A plain-text table: columns padded to their widest cell, numbers aligned right.
struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    right: Vec<bool>,
}

impl Table {
    fn new(header: Vec<String>, right: Vec<bool>) -> Self {
        Table {
            header,
            rows: Vec::new(),
            right,
        }
    }

    fn render(&self, out: &mut String, indent: &str) {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::from(indent);
            for (i, cell) in row.iter().enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                let w = widths[i];
                if self.right.get(i).copied().unwrap_or(false) {
                    let _ = write!(line, "{cell:>w$}");
                } else {
                    let _ = write!(line, "{cell:<w$}");
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
}

/// A duration in microseconds, short: `850us`, `1.2ms`, `3.40s`.
fn format_micros(us: u64) -> String {
    if us < 1000 {
        format!("{us}us")
    } else if us < 1_000_000 {
        format!("{:.1}ms", us as f64 / 1e3)
    } else {
        format!("{:.2}s", us as f64 / 1e6)
    }
}

/// A record's time: a date for Unix times, an offset for simulated ones.
fn format_time(ms: u64) -> String {
    // Before 2001 is no real scheduling time: the simulator counts from its start.
    if ms < 1_000_000_000_000 {
        return format!("t+{:.3}s", ms as f64 / 1e3);
    }
    i64::try_from(ms)
        .ok()
        .and_then(|ms| k8s_openapi::jiff::Timestamp::from_millisecond(ms).ok())
        .map(|t| t.to_string())
        .unwrap_or_else(|| format!("{ms}ms"))
}

/// The explanation of one attempt.
pub fn explain_record(r: &DecisionRecord, out: &mut String) {
    let outcome = match (&r.result, &r.node) {
        (Outcome::Scheduled, Some(node)) => format!("scheduled on {node}"),
        (Outcome::Waiting, Some(node)) => format!("waiting at Permit on {node}"),
        (Outcome::Permitted, Some(node)) => format!("permitted on {node}"),
        (Outcome::Rejected, Some(node)) => format!("rejected at Permit on {node}"),
        (other, _) => other.as_str().to_string(),
    };
    // The end of a wait at Permit ran no cycle: nothing about nodes to tell.
    let cycle_ran = !matches!(
        r.result,
        Outcome::Error | Outcome::Permitted | Outcome::Rejected
    );
    let _ = writeln!(
        out,
        "{}/{}  attempt {}: {}  (profile {}, {}, took {})",
        r.namespace,
        r.pod,
        r.attempt,
        outcome,
        r.profile,
        format_time(r.timestamp_ms),
        format_micros(r.duration_micros)
    );
    if let Some(message) = &r.message {
        let _ = writeln!(out, "  {message}");
    }
    if cycle_ran {
        let _ = writeln!(
            out,
            "  Nodes: {} in the cluster, {} evaluated, {} feasible",
            r.nodes_total, r.nodes_evaluated, r.nodes_feasible
        );
    }
    let chosen = matches!(r.result, Outcome::Scheduled | Outcome::Waiting);
    if chosen {
        explain_choice(r, out);
    }
    if !r.rejections.is_empty() {
        let what = if chosen {
            "Ruled out while filtering:"
        } else {
            "Why no node could take it:"
        };
        let _ = writeln!(out, "  {what}");
        let mut t = Table::new(
            vec!["PLUGIN".into(), "NODES".into(), "REASON".into()],
            vec![false, true, false],
        );
        for rej in &r.rejections {
            t.rows.push(vec![
                rej.plugin.as_deref().unwrap_or("(PreFilter)").to_string(),
                rej.nodes.to_string(),
                rej.reason.to_string(),
            ]);
        }
        t.render(out, "    ");
    }
    if let Some(g) = &r.group {
        let _ = writeln!(
            out,
            "  Group {}: {} of minMember {} placed ({} waiting at Permit), {} pods in all",
            g.group, g.placed, g.min_member, g.waiting, g.pods
        );
    }
    if let Some(p) = &r.preemption {
        let _ = writeln!(
            out,
            "  Preemption: nominated to {} once {} evicted: {} (chosen for: {})",
            p.node,
            if p.victims.len() == 1 {
                "this pod is"
            } else {
                "these pods are"
            },
            p.victims.join(", "),
            p.reason
        );
    }
    if r.result == Outcome::Unschedulable {
        if r.suggestions.is_empty() {
            let _ = writeln!(
                out,
                "  No single change computed: no rejected node fails one filter alone."
            );
        } else {
            let _ = writeln!(out, "  What single change would let it fit:");
            for s in &r.suggestions {
                let _ = writeln!(out, "    - {s}");
            }
        }
    }
}

/// Why the chosen node won: its total against the runner-up, and the score table.
fn explain_choice(r: &DecisionRecord, out: &mut String) {
    let Some(node) = &r.node else { return };
    let chosen = r.top_nodes.iter().find(|n| n.node == *node);
    let runner_up = r.top_nodes.iter().find(|n| n.node != *node);
    match (chosen, runner_up) {
        (None, _) if r.top_nodes.is_empty() => {
            let _ = writeln!(
                out,
                "  Why {node}: the only feasible node among the {} evaluated (no scoring needed)",
                r.nodes_evaluated
            );
            return;
        }
        (None, _) => {
            let _ = writeln!(
                out,
                "  Why {node}: chosen among the best-scored nodes below"
            );
        }
        (Some(best), None) => {
            let _ = writeln!(out, "  Why {node}: highest total score {}", best.total);
        }
        (Some(best), Some(second)) => {
            let lead = best.total - second.total;
            if lead <= 0 {
                let _ = writeln!(
                    out,
                    "  Why {node}: tied with {} at {}; ties are broken by a hash of the pod and node names",
                    second.node, best.total
                );
            } else {
                let mut diffs: Vec<(i64, &str)> = best
                    .scores
                    .iter()
                    .zip(&second.scores)
                    .zip(&r.score_plugins)
                    .map(|((a, b), p)| (a - b, &**p))
                    .filter(|(d, _)| *d != 0)
                    .collect();
                diffs.sort_by(|a, b| b.0.abs().cmp(&a.0.abs()).then_with(|| a.1.cmp(b.1)));
                let detail: Vec<String> = diffs.iter().map(|(d, p)| format!("{p} {d:+}")).collect();
                let _ = writeln!(
                    out,
                    "  Why {node}: highest total score {}, {lead} more than {}{}",
                    best.total,
                    second.node,
                    if detail.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", detail.join(", "))
                    }
                );
            }
        }
    }
    let mut header = vec!["NODE".to_string(), "TOTAL".to_string()];
    header.extend(r.score_plugins.iter().map(|p| p.to_string()));
    let right = (0..header.len()).map(|i| i > 0).collect();
    let mut t = Table::new(header, right);
    for n in &r.top_nodes {
        let mut row = vec![n.node.to_string(), n.total.to_string()];
        row.extend(n.scores.iter().map(i64::to_string));
        t.rows.push(row);
    }
    let _ = writeln!(out, "  Best-scored nodes (weighted scores):");
    t.render(out, "    ");
}

/// The explanation of several attempts, in the order given, separated by blank lines.
pub fn explain(records: &[DecisionRecord]) -> String {
    let mut out = String::new();
    for (i, r) in records.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        explain_record(r, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::sync::Arc;

    use super::*;
    use crate::decision::record::{Rejection, TopNode};
    use crate::suggest::{Shortfall, Suggestion};

    fn base(result: Outcome) -> DecisionRecord {
        DecisionRecord {
            timestamp_ms: 1_500,
            namespace: "shop".to_string(),
            pod: "web-1".to_string(),
            profile: "default-scheduler".to_string(),
            attempt: 2,
            result,
            node: None,
            message: None,
            nodes_total: 5,
            nodes_evaluated: 5,
            nodes_feasible: 0,
            rejections: Vec::new(),
            score_plugins: Vec::new(),
            top_nodes: Vec::new(),
            suggestions: Vec::new(),
            preemption: None,
            group: None,
            duration_micros: 1_234,
        }
    }

    #[test]
    fn the_end_of_a_wait_at_permit_names_the_node_and_the_rejection() {
        let mut r = base(Outcome::Rejected);
        r.node = Some(Arc::from("n3"));
        r.message = Some(
            "rejected due to timeout after waiting 30s at plugin Coscheduling (after waiting 30000ms at Permit)"
                .into(),
        );
        let mut out = String::new();
        explain_record(&r, &mut out);
        let mut lines = out.lines();
        assert!(
            lines
                .next()
                .unwrap()
                .contains("attempt 2: rejected at Permit on n3"),
            "{out}"
        );
        assert!(lines.next().unwrap().contains("timeout after waiting 30s"));
        assert!(!out.contains("Nodes:"), "no cycle ran: {out}");
        r.group = Some(crate::cache::GroupProgress {
            group: "ml/train".to_string(),
            min_member: 8,
            pods: 8,
            placed: 5,
            waiting: 5,
        });
        let mut out = String::new();
        explain_record(&r, &mut out);
        assert!(
            out.contains(
                "  Group ml/train: 5 of minMember 8 placed (5 waiting at Permit), 8 pods in all"
            ),
            "{out}"
        );
    }

    #[test]
    fn a_preemption_names_its_node_victims_and_why() {
        let mut r = base(Outcome::Unschedulable);
        r.preemption = Some(super::super::record::PreemptionRecord {
            node: "n2".to_string(),
            victims: vec!["shop/batch-1".to_string()],
            reason: "fewest victims".to_string(),
        });
        let mut out = String::new();
        explain_record(&r, &mut out);
        assert!(
            out.contains(
                "  Preemption: nominated to n2 once this pod is evicted: shop/batch-1 (chosen for: fewest victims)"
            ),
            "{out}"
        );
    }

    #[test]
    fn an_unschedulable_attempt_shows_reasons_and_the_single_change() {
        let mut r = base(Outcome::Unschedulable);
        r.message = Some(
            "0/5 nodes are available: 3 Insufficient cpu, 2 node(s) had untolerated taint(s)."
                .into(),
        );
        r.rejections = vec![
            Rejection {
                plugin: Some(Cow::Borrowed("NodeResourcesFit")),
                reason: Cow::Borrowed("Insufficient cpu"),
                nodes: 3,
            },
            Rejection {
                plugin: Some(Cow::Borrowed("TaintToleration")),
                reason: Cow::Borrowed("node(s) had untolerated taint(s)"),
                nodes: 2,
            },
        ];
        r.suggestions = vec![Suggestion::MoreResources {
            node: "node-7".into(),
            shortfalls: vec![Shortfall {
                resource: Cow::Borrowed("cpu"),
                amount: 200,
            }],
        }];
        assert_eq!(
            explain(&[r]),
            "shop/web-1  attempt 2: unschedulable  (profile default-scheduler, t+1.500s, took 1.2ms)
  0/5 nodes are available: 3 Insufficient cpu, 2 node(s) had untolerated taint(s).
  Nodes: 5 in the cluster, 5 evaluated, 0 feasible
  Why no node could take it:
    PLUGIN            NODES  REASON
    NodeResourcesFit      3  Insufficient cpu
    TaintToleration       2  node(s) had untolerated taint(s)
  What single change would let it fit:
    - node-7 would fit with 200m more cpu
"
        );
    }

    #[test]
    fn no_single_change_is_said_so() {
        let r = base(Outcome::Unschedulable);
        assert!(explain(&[r]).contains("No single change computed"));
    }

    #[test]
    fn a_placement_says_why_the_node_won() {
        let mut r = base(Outcome::Scheduled);
        r.node = Some("node-2".into());
        r.nodes_feasible = 4;
        r.timestamp_ms = 1_700_000_000_000;
        r.score_plugins = vec![
            Cow::Borrowed("NodeResourcesFit"),
            Cow::Borrowed("ImageLocality"),
        ];
        r.top_nodes = vec![
            TopNode {
                node: "node-2".into(),
                scores: vec![90, 0],
                total: 90,
            },
            TopNode {
                node: "node-5".into(),
                scores: vec![70, 10],
                total: 80,
            },
        ];
        r.rejections = vec![Rejection {
            plugin: Some(Cow::Borrowed("NodeResourcesFit")),
            reason: Cow::Borrowed("Insufficient cpu"),
            nodes: 1,
        }];
        assert_eq!(
            explain(&[r]),
            "shop/web-1  attempt 2: scheduled on node-2  (profile default-scheduler, 2023-11-14T22:13:20Z, took 1.2ms)
  Nodes: 5 in the cluster, 5 evaluated, 4 feasible
  Why node-2: highest total score 90, 10 more than node-5 (NodeResourcesFit +20, ImageLocality -10)
  Best-scored nodes (weighted scores):
    NODE    TOTAL  NodeResourcesFit  ImageLocality
    node-2     90                90              0
    node-5     80                70             10
  Ruled out while filtering:
    PLUGIN            NODES  REASON
    NodeResourcesFit      1  Insufficient cpu
"
        );
    }

    #[test]
    fn a_single_feasible_node_and_a_tie_are_explained() {
        let mut r = base(Outcome::Scheduled);
        r.node = Some("node-2".into());
        r.nodes_feasible = 1;
        assert!(
            explain(&[r.clone()])
                .contains("Why node-2: the only feasible node among the 5 evaluated")
        );
        r.score_plugins = vec![Cow::Borrowed("NodeResourcesFit")];
        // The chosen node need not come first among equals.
        r.top_nodes = vec![
            TopNode {
                node: "node-1".into(),
                scores: vec![50],
                total: 50,
            },
            TopNode {
                node: "node-2".into(),
                scores: vec![50],
                total: 50,
            },
        ];
        assert!(explain(&[r]).contains("Why node-2: tied with node-1 at 50"));
    }

    #[test]
    fn durations_read_short() {
        assert_eq!(format_micros(850), "850us");
        assert_eq!(format_micros(1_260), "1.3ms");
        assert_eq!(format_micros(3_400_000), "3.40s");
    }
}
