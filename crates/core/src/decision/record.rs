//! The decision record: what one scheduling attempt decided and why, built from the
//! attempt's own data. Names, plugins and reasons are shared or borrowed, not formatted;
//! text is made only when a record is serialized or explained.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cache::GroupProgress;
use crate::cycle::RejectionCount;
use crate::model::PodKey;
use crate::scheduler::{Attempt, ExtenderAsk, ExtenderRequest};
use crate::suggest::Suggestion;

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    /// A node was chosen (the binding follows).
    Scheduled,
    /// No node fits.
    Unschedulable,
    /// Something failed (a plugin error); the pod is retried after backoff.
    Error,
    /// A node was chosen, and a Permit plugin holds the pod there (its room reserved) until
    /// it allows or rejects it.
    Waiting,
    /// A pod held at Permit was allowed (the binding follows).
    Permitted,
    /// A pod held at Permit was rejected, or its wait ran out; it is retried after backoff.
    Rejected,
}

impl Outcome {
    /// The JSON name, for tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Scheduled => "scheduled",
            Outcome::Unschedulable => "unschedulable",
            Outcome::Error => "error",
            Outcome::Waiting => "waiting",
            Outcome::Permitted => "permitted",
            Outcome::Rejected => "rejected",
        }
    }
}

/// Nodes one filter plugin rejected with one reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rejection {
    /// The plugin; absent for the nodes a PreFilter plugin left out of the search.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<Cow<'static, str>>,
    /// The reason, in the plugin's words (`Insufficient cpu`).
    pub reason: Cow<'static, str>,
    /// How many nodes.
    pub nodes: usize,
}

/// One of the best-scored nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopNode {
    /// The node.
    #[serde(with = "crate::model::arc_str")]
    pub node: Arc<str>,
    /// Each score plugin's normalized score times its weight, in the order of
    /// [`DecisionRecord::score_plugins`].
    pub scores: Vec<i64>,
    /// The sum: the node with the highest total wins.
    pub total: i64,
}

/// A preemption an unschedulable attempt decided: the pod is nominated to the node once
/// the victims are evicted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionRecord {
    /// The node the pod is nominated to.
    pub node: String,
    /// The pods evicted from it, `namespace/name`, most important first.
    pub victims: Vec<String>,
    /// Why this node won over the other candidates (kube-scheduler's criterion that
    /// decided).
    pub reason: String,
}

/// What one scheduling attempt decided, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionRecord {
    /// When the attempt was made, in milliseconds: Unix time in `gantry run`, time since the
    /// start of the simulation in `gantry simulate`.
    pub timestamp_ms: u64,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// The profile (scheduler name) that scheduled it.
    pub profile: String,
    /// The attempt number, 1 for the first.
    pub attempt: u32,
    /// How it ended.
    pub result: Outcome,
    /// The chosen node, when scheduled.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::model::arc_str::option"
    )]
    pub node: Option<Arc<str>>,
    /// kube-scheduler's message, when unschedulable (`0/5 nodes are available: ...`) or
    /// failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Nodes in the cluster.
    pub nodes_total: usize,
    /// Nodes the filters examined (kube-scheduler stops once it has found enough feasible
    /// ones: `percentageOfNodesToScore`).
    pub nodes_evaluated: usize,
    /// Examined nodes that passed every filter.
    pub nodes_feasible: usize,
    /// Examined nodes that filters rejected, per plugin and reason, most nodes first.
    pub rejections: Vec<Rejection>,
    /// The score plugins, in the order of [`TopNode::scores`].
    pub score_plugins: Vec<Cow<'static, str>>,
    /// The best-scored feasible nodes, best first; empty when only one node was feasible
    /// (scoring is skipped then).
    pub top_nodes: Vec<TopNode>,
    /// For an unschedulable pod, single changes that would let it fit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suggestions: Vec<Suggestion>,
    /// For an unschedulable pod, the preemption decided for it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption: Option<PreemptionRecord>,
    /// For a pod of a PodGroup, how far its group had got.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<GroupProgress>,
    /// How long the attempt took, in microseconds, as measured by the caller.
    pub duration_micros: u64,
}

/// A wait, in milliseconds (`1250ms`).
fn millis(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

fn rejections(counts: &[RejectionCount]) -> Vec<Rejection> {
    counts
        .iter()
        .map(|c| Rejection {
            plugin: c.plugin.map(Cow::Borrowed),
            reason: c.reason.clone(),
            nodes: c.nodes,
        })
        .collect()
}

impl DecisionRecord {
    /// The record of a cycle that chose a node (`outcome` says what followed), with its
    /// summary; `at` is the timestamp and the duration in microseconds.
    fn chosen(
        pod: &crate::model::PodInfo,
        profile: &str,
        attempt: u32,
        outcome: Outcome,
        (node, message): (Arc<str>, Option<String>),
        summary: &mut crate::scheduler::CycleSummary,
        (timestamp_ms, duration_micros): (u64, u64),
    ) -> Self {
        DecisionRecord {
            timestamp_ms,
            namespace: pod.namespace.clone(),
            pod: pod.name.clone(),
            profile: profile.to_string(),
            attempt,
            result: outcome,
            node: Some(node),
            message,
            nodes_total: summary.nodes,
            nodes_evaluated: summary.evaluated,
            nodes_feasible: summary.feasible,
            rejections: rejections(&summary.rejections),
            score_plugins: summary
                .score_plugins
                .iter()
                .map(|&p| Cow::Borrowed(p))
                .collect(),
            top_nodes: std::mem::take(&mut summary.scores)
                .into_iter()
                .map(|s| TopNode {
                    node: s.node,
                    scores: s.weighted,
                    total: s.total,
                })
                .collect(),
            suggestions: Vec::new(),
            preemption: None,
            group: None,
            duration_micros,
        }
    }

    /// The record of the end of a wait at Permit on `node` (no cycle ran).
    fn after_wait(
        pod: &crate::model::PodInfo,
        attempt: u32,
        outcome: Outcome,
        node: Arc<str>,
        at: (u64, u64),
    ) -> Self {
        DecisionRecord {
            node: Some(node),
            ..Self::bare(pod, attempt, outcome, at)
        }
    }

    /// A record of `pod`'s attempt that names no node, examined none and says nothing: what
    /// the other constructors fill in.
    fn bare(
        pod: &crate::model::PodInfo,
        attempt: u32,
        outcome: Outcome,
        (timestamp_ms, duration_micros): (u64, u64),
    ) -> Self {
        DecisionRecord {
            timestamp_ms,
            namespace: pod.namespace.clone(),
            pod: pod.name.clone(),
            profile: pod.scheduler_name.clone(),
            attempt,
            result: outcome,
            node: None,
            message: None,
            nodes_total: 0,
            nodes_evaluated: 0,
            nodes_feasible: 0,
            rejections: Vec::new(),
            score_plugins: Vec::new(),
            top_nodes: Vec::new(),
            suggestions: Vec::new(),
            preemption: None,
            group: None,
            duration_micros,
        }
    }

    /// The record of `attempt`, made at `timestamp_ms` and lasting `took` (both measured by
    /// the caller: the core has no clock). The best nodes' scores and the suggestions are
    /// moved out of the attempt rather than copied (front ends need nothing else from them):
    /// recording allocates little on the scheduling thread.
    pub fn from_attempt(attempt: &mut Attempt, timestamp_ms: u64, took: Duration) -> Self {
        let duration_micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        match attempt {
            Attempt::Scheduled(task, summary) => Self::chosen(
                &task.assumed,
                &task.profile,
                task.queued.attempts,
                Outcome::Scheduled,
                (task.plan.node.clone(), None),
                summary,
                (timestamp_ms, duration_micros),
            ),
            Attempt::Waiting {
                pod,
                attempt,
                node,
                plugins,
                group,
                summary,
            } => DecisionRecord {
                group: group.clone(),
                ..Self::chosen(
                    pod,
                    &pod.scheduler_name,
                    *attempt,
                    Outcome::Waiting,
                    (
                        node.clone(),
                        Some(format!("waiting at Permit for {}", plugins.join(", "))),
                    ),
                    summary,
                    (timestamp_ms, duration_micros),
                )
            },
            Attempt::Extending(request) => {
                Self::extending(request, (timestamp_ms, duration_micros))
            }
            Attempt::Permitted { task, waited } => DecisionRecord {
                message: Some(format!(
                    "allowed at Permit after waiting {}",
                    millis(*waited)
                )),
                ..Self::after_wait(
                    &task.assumed,
                    task.queued.attempts,
                    Outcome::Permitted,
                    task.plan.node.clone(),
                    (timestamp_ms, duration_micros),
                )
            },
            Attempt::Rejected {
                pod,
                attempt,
                node,
                status,
                waited,
                group,
            } => DecisionRecord {
                group: group.clone(),
                message: Some(format!(
                    "{} (after waiting {} at Permit)",
                    status.message(),
                    millis(*waited)
                )),
                ..Self::after_wait(
                    pod,
                    *attempt,
                    Outcome::Rejected,
                    node.clone(),
                    (timestamp_ms, duration_micros),
                )
            },
            Attempt::Unschedulable {
                pod,
                attempt,
                diagnosis,
                message,
                suggestions,
            } => DecisionRecord {
                suggestions: std::mem::take(suggestions),
                ..Self::unschedulable(
                    pod,
                    *attempt,
                    diagnosis,
                    message,
                    (timestamp_ms, duration_micros),
                )
            },
            Attempt::Failed {
                pod,
                attempt,
                status,
            } => DecisionRecord {
                message: Some(status.to_string()),
                ..Self::bare(
                    pod,
                    *attempt,
                    Outcome::Error,
                    (timestamp_ms, duration_micros),
                )
            },
        }
    }

    /// The record of a pod parked while the scheduler extenders are asked.
    fn extending(request: &ExtenderRequest, at: (u64, u64)) -> Self {
        let (evaluated, feasible, message) = match &request.ask {
            ExtenderAsk::Place {
                evaluated,
                exchange,
                ..
            } => (
                *evaluated,
                exchange.survivors().len(),
                "waiting for the scheduler extenders",
            ),
            ExtenderAsk::Preempt(_) => (
                0,
                0,
                "waiting for the scheduler extenders to cut its preemption",
            ),
        };
        DecisionRecord {
            nodes_evaluated: evaluated,
            nodes_feasible: feasible,
            message: Some(message.to_string()),
            ..Self::bare(&request.pod, request.attempt, Outcome::Waiting, at)
        }
    }

    /// The record of an attempt that found no node, with the preemption it decided, if any
    /// (its suggestions are moved in by the caller).
    fn unschedulable(
        pod: &crate::model::PodInfo,
        attempt: u32,
        diagnosis: &crate::cycle::Diagnosis,
        message: &str,
        at: (u64, u64),
    ) -> Self {
        DecisionRecord {
            message: Some(message.to_string()),
            nodes_total: diagnosis.num_all_nodes,
            // A PreFilter rejection rules every node out before any is examined.
            nodes_evaluated: if diagnosis.pre_filter_msg.is_some() {
                0
            } else {
                diagnosis.node_statuses.len()
            },
            rejections: rejections(&diagnosis.rejection_counts()),
            preemption: diagnosis
                .post_filter
                .preemption
                .as_ref()
                .map(|p| PreemptionRecord {
                    node: p.node.to_string(),
                    victims: p
                        .victims
                        .iter()
                        .chain(&p.released)
                        .map(|v| v.key())
                        .collect(),
                    reason: p.reason.clone(),
                }),
            group: diagnosis.group.as_deref().cloned(),
            ..Self::bare(pod, attempt, Outcome::Unschedulable, at)
        }
    }

    /// `namespace/pod`.
    pub fn pod_key(&self) -> String {
        PodKey::new(&self.namespace, &self.pod).text()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::plugins;
    use crate::scheduler::Scheduler;
    use crate::testing::{node, pod};

    fn scheduler() -> Scheduler {
        let config = Config::default_with(&plugins::registry()).expect("defaults");
        let mut s = Scheduler::new(config, None);
        s.set_explain(true);
        s
    }

    #[test]
    fn a_placed_pod_records_its_node_scores_and_the_nodes_ruled_out() {
        let mut s = scheduler();
        let now = Duration::ZERO;
        s.upsert_node(node("big").capacity("4", "8Gi").build(), now);
        s.upsert_node(node("mid").capacity("2", "8Gi").build(), now);
        s.upsert_node(node("small").capacity("500m", "8Gi").build(), now);
        s.upsert_node(
            node("gpu")
                .capacity("8", "8Gi")
                .taint("dedicated", "gpu", "NoSchedule")
                .build(),
            now,
        );
        s.upsert_pod(pod("web").req("cpu", "1").build(), now)
            .unwrap();
        let mut attempt = s.schedule_next(now).expect("an attempt");
        let r = DecisionRecord::from_attempt(&mut attempt, 1234, Duration::from_micros(56));
        assert_eq!(
            (r.namespace.as_str(), r.pod.as_str(), r.profile.as_str()),
            ("default", "web", "default-scheduler")
        );
        assert_eq!((r.attempt, r.result), (1, Outcome::Scheduled));
        assert_eq!(r.node.as_deref(), Some("big"));
        assert_eq!(
            (r.nodes_total, r.nodes_evaluated, r.nodes_feasible),
            (4, 4, 2)
        );
        assert_eq!(
            r.rejections,
            vec![
                Rejection {
                    plugin: Some(Cow::Borrowed("NodeResourcesFit")),
                    reason: Cow::Borrowed("Insufficient cpu"),
                    nodes: 1
                },
                Rejection {
                    plugin: Some(Cow::Borrowed("TaintToleration")),
                    reason: Cow::Borrowed("node(s) had untolerated taint(s)"),
                    nodes: 1
                },
            ]
        );
        assert_eq!(r.top_nodes.len(), 2);
        assert_eq!(&*r.top_nodes[0].node, "big");
        assert_eq!(r.top_nodes[0].scores.len(), r.score_plugins.len());
        assert_eq!(
            r.top_nodes[0].total,
            r.top_nodes[0].scores.iter().sum::<i64>()
        );
        assert!(r.top_nodes[0].total >= r.top_nodes[1].total);
        assert_eq!((r.timestamp_ms, r.duration_micros), (1234, 56));
        assert!(r.message.is_none() && r.suggestions.is_empty());
    }

    #[test]
    fn an_unschedulable_pod_records_the_reasons_and_what_would_help() {
        let mut s = scheduler();
        let now = Duration::ZERO;
        s.upsert_node(node("n1").capacity("1", "8Gi").build(), now);
        s.upsert_node(node("n2").capacity("1800m", "8Gi").build(), now);
        s.upsert_pod(pod("big").req("cpu", "2").build(), now)
            .unwrap();
        let mut attempt = s.schedule_next(now).expect("an attempt");
        let r = DecisionRecord::from_attempt(&mut attempt, 0, Duration::ZERO);
        assert_eq!(r.result, Outcome::Unschedulable);
        assert_eq!(
            r.message.as_deref(),
            Some(
                "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
            )
        );
        assert_eq!(
            (r.nodes_total, r.nodes_evaluated, r.nodes_feasible),
            (2, 2, 0)
        );
        assert_eq!(r.rejections.len(), 1);
        assert_eq!(r.rejections[0].nodes, 2);
        assert_eq!(r.suggestions.len(), 1);
        assert_eq!(
            r.suggestions[0].to_string(),
            "n2 would fit with 200m more cpu"
        );
    }

    #[test]
    fn records_serialize_in_camel_case_and_read_back() {
        let mut s = scheduler();
        let now = Duration::ZERO;
        s.upsert_node(node("n1").capacity("1", "8Gi").build(), now);
        s.upsert_pod(pod("big").req("cpu", "2").build(), now)
            .unwrap();
        let mut attempt = s.schedule_next(now).expect("an attempt");
        let r = DecisionRecord::from_attempt(&mut attempt, 7, Duration::from_millis(2));
        let json = serde_json::to_value(&r).unwrap();
        for field in [
            "timestampMs",
            "namespace",
            "pod",
            "profile",
            "attempt",
            "result",
            "message",
            "nodesTotal",
            "nodesEvaluated",
            "nodesFeasible",
            "rejections",
            "scorePlugins",
            "topNodes",
            "suggestions",
            "durationMicros",
        ] {
            assert!(json.get(field).is_some(), "{field} in {json}");
        }
        assert_eq!(json["result"], "unschedulable");
        assert_eq!(json["rejections"][0]["plugin"], "NodeResourcesFit");
        assert_eq!(json["suggestions"][0]["kind"], "moreResources");
        let back: DecisionRecord = serde_json::from_value(json).unwrap();
        assert_eq!(back, r);
    }
}
