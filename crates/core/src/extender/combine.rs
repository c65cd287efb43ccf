//! How the extenders' answers combine with the plugins' results, as kube-scheduler combines
//! them (`findNodesThatPassExtenders`, the extender part of `prioritizeNodes`):
//!
//! - filter: the interested extenders are asked in order, each about the nodes the one
//!   before it kept, until none is left; the nodes an extender rejects get its message as
//!   their status (unresolvable for `FailedAndUnresolvableNodes`, which win over
//!   `FailedNodes`). An extender's error skips it when it is ignorable, and fails the
//!   attempt otherwise.
//! - prioritize: when more than one node is left, every interested extender scores them;
//!   a score counts `score × weight × 10` (the extenders' `0..=10` scaled to the plugins'
//!   `0..=100`), summed over the extenders and added to the plugins' total. A prioritize
//!   error is never fatal: that extender gives no scores.
//!
//! [`Exchange`] holds one pod's round of calls; the front end makes the calls it asks for
//! and feeds the answers back, and [`Exchange::finish`] gives the [`Verdict`] the
//! scheduler resumes the pod with.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::protocol::{FilterResult, HostPriority};
use super::{Extender, Extenders, MAX_EXTENDER_PRIORITY, Verb};
use crate::framework::{MAX_NODE_SCORE, Status};
use crate::model::PodInfo;

/// What the extenders decided for one pod.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Verdict {
    /// The nodes every filtering extender kept, in the order the last one returned them.
    pub survivors: Vec<Arc<str>>,
    /// The nodes extenders rejected, with their statuses (a later extender's replaces an
    /// earlier one's for the same node, as kube-scheduler's map does).
    pub statuses: Vec<(Arc<str>, Status)>,
    /// The extenders' scaled scores, summed per node.
    pub scores: HashMap<Arc<str>, i64>,
}

impl Verdict {
    /// Whether some extender rejected a node (the pod's unschedulable plugins then name
    /// [`super::NAME`]).
    pub fn rejected_any(&self) -> bool {
        !self.statuses.is_empty()
    }
}

/// A failure of one call, worded for the log and the pod's condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallError {
    /// The extender's position among the configured ones.
    pub extender: usize,
    /// The call.
    pub verb: Verb,
    /// What went wrong.
    pub message: String,
}

/// One pod's round of extender calls.
#[derive(Debug, Clone)]
pub struct Exchange {
    extenders: Extenders,
    filters: std::collections::VecDeque<usize>,
    prioritizers: Vec<usize>,
    verdict: Verdict,
    failure: Option<CallError>,
}

impl Exchange {
    /// The round for `pod`, whose Filter plugins found `feasible`.
    pub fn new(extenders: &Extenders, pod: &PodInfo, feasible: Vec<Arc<str>>) -> Self {
        Exchange {
            extenders: extenders.clone(),
            filters: extenders.interested(pod, Verb::Filter).into(),
            prioritizers: extenders.interested(pod, Verb::Prioritize),
            verdict: Verdict {
                survivors: feasible,
                ..Verdict::default()
            },
            failure: None,
        }
    }

    /// The extender to ask next to filter, and about which nodes; none once every
    /// interested one answered, no node is left, or one failed the attempt.
    pub fn next_filter(&mut self) -> Option<(usize, &[Arc<str>])> {
        if self.failure.is_some() || self.verdict.survivors.is_empty() {
            return None;
        }
        let next = self.filters.pop_front()?;
        Some((next, &self.verdict.survivors))
    }

    /// Takes extender `i`'s answer to the filter call [`Exchange::next_filter`] asked for.
    /// Returns the error of an ignorable extender, which is skipped, for the caller to log.
    pub fn filtered(
        &mut self,
        i: usize,
        answer: Result<FilterResult, String>,
    ) -> Option<CallError> {
        let extender = &self.extenders.all()[i];
        let error = |message| CallError {
            extender: i,
            verb: Verb::Filter,
            message,
        };
        match answer.and_then(|r| apply_filter(extender, &self.verdict.survivors, r)) {
            Ok((survivors, statuses)) => {
                self.verdict.survivors = survivors;
                merge_statuses(&mut self.verdict.statuses, statuses);
                None
            }
            Err(message) if extender.ignorable => Some(error(message)),
            Err(message) => {
                self.failure = Some(error(message));
                None
            }
        }
    }

    /// The nodes left so far: the Filter plugins' feasible nodes, less those filtering
    /// extenders rejected.
    pub fn survivors(&self) -> &[Arc<str>] {
        &self.verdict.survivors
    }

    /// The extenders to ask to score the nodes left, with those nodes: none unless more
    /// than one node is left (kube-scheduler scores nothing when one node fits).
    pub fn prioritizers(&self) -> (&[usize], &[Arc<str>]) {
        if self.failure.is_some() || self.verdict.survivors.len() < 2 {
            return (&[], &[]);
        }
        (&self.prioritizers, &self.verdict.survivors)
    }

    /// Takes extender `i`'s answer to the prioritize call; an error (returned for the
    /// caller to log) only means it gives no scores.
    pub fn prioritized(
        &mut self,
        i: usize,
        answer: Result<Vec<HostPriority>, String>,
    ) -> Option<CallError> {
        match answer {
            Ok(list) => {
                let weight = self.extenders.all()[i].weight;
                add_scores(&mut self.verdict, &list, weight);
                None
            }
            Err(message) => Some(CallError {
                extender: i,
                verb: Verb::Prioritize,
                message,
            }),
        }
    }

    /// The verdict, or the failure of a non-ignorable extender.
    pub fn finish(self) -> Result<Verdict, CallError> {
        match self.failure {
            Some(failure) => Err(failure),
            None => Ok(self.verdict),
        }
    }
}

/// Adds `new` statuses to `statuses`, each replacing the one its node had.
pub fn merge_statuses(statuses: &mut Vec<(Arc<str>, Status)>, new: Vec<(Arc<str>, Status)>) {
    let replaced: HashSet<&Arc<str>> = new.iter().map(|(n, _)| n).collect();
    statuses.retain(|(n, _)| !replaced.contains(n));
    statuses.extend(new);
}

/// The nodes an extender kept, and the statuses of those it rejected.
pub type Filtering = (Vec<Arc<str>>, Vec<(Arc<str>, Status)>);

/// One extender's filter answer applied to the nodes it was sent: the nodes it kept (in
/// its order), and the statuses of those it rejected. An error reported in
/// the answer, or a kept node that was not sent, is an error, as in kube-scheduler.
pub fn apply_filter(
    extender: &Extender,
    sent: &[Arc<str>],
    result: FilterResult,
) -> Result<Filtering, String> {
    if !result.error.is_empty() {
        return Err(result.error);
    }
    let kept = if extender.node_cache_capable && result.node_names.is_some() {
        result.node_names.unwrap_or_default()
    } else {
        result.nodes.unwrap_or_default()
    };
    let by_name: HashMap<&str, &Arc<str>> = sent.iter().map(|n| (&**n, n)).collect();
    let mut survivors = Vec::with_capacity(kept.len());
    let mut seen = HashSet::with_capacity(kept.len());
    for name in &kept {
        let Some(&node) = by_name.get(name.as_str()) else {
            return Err(format!(
                "extender {:?} claims a filtered node {name:?} which is not found in the input node list",
                extender.url_prefix
            ));
        };
        if seen.insert(name.as_str()) {
            survivors.push(node.clone());
        }
    }
    let node_of = |name: &str| -> Arc<str> {
        by_name
            .get(name)
            .map_or_else(|| Arc::from(name), |n| Arc::clone(n))
    };
    let mut statuses: Vec<(Arc<str>, Status)> = Vec::new();
    for (name, message) in &result.failed_and_unresolvable_nodes {
        statuses.push((node_of(name), Status::unresolvable(message.clone())));
    }
    for (name, message) in &result.failed_nodes {
        if !result.failed_and_unresolvable_nodes.contains_key(name) {
            statuses.push((node_of(name), Status::unschedulable(message.clone())));
        }
    }
    Ok((survivors, statuses))
}

/// Adds one extender's scores, scaled and weighted, to the nodes left; scores for other
/// nodes are ignored.
pub fn add_scores(verdict: &mut Verdict, list: &[HostPriority], weight: i64) {
    let scale = MAX_NODE_SCORE / MAX_EXTENDER_PRIORITY;
    for entry in list {
        let Some(node) = verdict.survivors.iter().find(|n| ***n == *entry.host) else {
            continue;
        };
        let score = entry.score.saturating_mul(weight).saturating_mul(scale);
        let total = verdict.scores.entry(node.clone()).or_default();
        *total = total.saturating_add(score);
    }
}
