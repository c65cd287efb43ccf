//! The capacity questions: how many more replicas of a workload fit (the question
//! kubernetes-sigs/cluster-capacity answers), and how many nodes of a given shape would have
//! to be added for a set of pods to fit.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1 as core;

use gantry_core::cache::Cache;
use gantry_core::decision::DecisionRecord;
use gantry_core::model::{NodeModel, PodInfo};
use gantry_core::scheduler::{Attempt, Scheduler};

use super::workload::Workload;
use super::{CapacityAnswer, NodesNeeded, Placed, Watch, WhatIfError};

/// The most replicas `max` counts per workload unless the question says.
pub const DEFAULT_MAX_LIMIT: usize = 10_000;
/// The most template nodes a question may add.
pub const MAX_ADDED_NODES: usize = 10_000;
/// The label every node carries with its own name (spreading by host reads it).
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// Places replicas of `workload` one at a time on `fork` (`<name>-0`, `<name>-1`, ...;
/// names of pods already in the cluster are skipped) until one does not fit without
/// preempting anything, or `limit` fit, or `watch` says stop (the caller asks it why).
pub(super) fn max_replicas(
    mut fork: Scheduler,
    workload: &Workload,
    limit: usize,
    now: Duration,
    watch: &Watch<'_>,
) -> CapacityAnswer {
    let mut answer = CapacityAnswer {
        workload: workload.label(),
        namespace: workload.namespace.clone(),
        ..CapacityAnswer::default()
    };
    let mut i = 0;
    while answer.fits < limit {
        if watch.stop().is_some() {
            return answer;
        }
        let pod = match PodInfo::from_api(&workload.pod(i)) {
            Ok(pod) => Arc::new(pod),
            Err(e) => {
                answer.stopped_by = Some(e.to_string());
                return answer;
            }
        };
        i += 1;
        if fork
            .cache()
            .pod_placement(&pod.namespace, &pod.name)
            .is_some()
        {
            continue;
        }
        let (namespace, name) = (pod.namespace.clone(), pod.name.clone());
        // A pending pod carries no node: the cache cannot refuse it.
        let _ = fork.upsert_pod(pod, now);
        match place_one(&mut fork, &namespace, &name, now, watch) {
            Ok(()) => answer.fits += 1,
            Err((message, record)) => {
                answer.stopped_by = Some(message);
                answer.next = record.map(|r| *r);
                return answer;
            }
        }
    }
    answer.limit_reached = true;
    answer
}

/// Schedules until the pod `namespace/name` has its attempt: Ok when it is placed (bound,
/// or held at Permit with its room reserved), otherwise why not, with its record when a
/// cycle ran.
#[allow(clippy::type_complexity)]
fn place_one(
    fork: &mut Scheduler,
    namespace: &str,
    name: &str,
    now: Duration,
    watch: &Watch<'_>,
) -> Result<(), (String, Option<Box<DecisionRecord>>)> {
    let ours = |pod: &PodInfo| pod.namespace == namespace && pod.name == name;
    loop {
        if let Some(why) = watch.stop() {
            return Err((why, None));
        }
        let start = Instant::now();
        let Some(mut attempt) = fork.schedule_next(now) else {
            let why = fork
                .waiting()
                .find(|(q, _)| ours(&q.pod))
                .and_then(|(q, _)| q.gated.as_ref().map(|s| s.message()))
                .unwrap_or_else(|| "not tried: no profile serves its schedulerName".to_string());
            return Err((why, None));
        };
        match &attempt {
            Attempt::Scheduled(task, _) | Attempt::Permitted { task, .. } => {
                let mine = ours(&task.assumed);
                if let Err(e) = fork.binding_succeeded(task, now) {
                    return Err((e.to_string(), None));
                }
                if mine {
                    return Ok(());
                }
            }
            Attempt::Waiting { pod, .. } if ours(pod) => return Ok(()),
            Attempt::Waiting { .. } | Attempt::Rejected { .. } => {}
            Attempt::Unschedulable { pod, message, .. } if ours(pod) => {
                let message = message.clone();
                let record = DecisionRecord::from_attempt(&mut attempt, 0, start.elapsed());
                return Err((message, Some(Box::new(record))));
            }
            Attempt::Failed { pod, status, .. } if ours(pod) => {
                return Err((status.error_message(), None));
            }
            Attempt::Extending(request) if ours(&request.pod) => {
                return Err((crate::EXTENDERS_NOT_SIMULATED.to_string(), None));
            }
            Attempt::Unschedulable { .. } | Attempt::Failed { .. } | Attempt::Extending(_) => {}
        }
    }
}

/// The shape of the nodes a question may add, and their names.
pub(super) struct NodeTemplate {
    /// The template's name.
    name: String,
    /// One node per name, in order: `<name>-1`, `<name>-2`, ... (names of nodes already
    /// in the cluster skipped).
    nodes: Vec<NodeModel>,
}

impl NodeTemplate {
    /// Reads the template (a Node object as JSON) and names up to `max` nodes of it.
    pub(super) fn read(
        template: &serde_json::Value,
        cache: &Cache,
        max: usize,
    ) -> Result<Self, WhatIfError> {
        let invalid = |reason: String| WhatIfError::Invalid {
            at: "nodeTemplate".to_string(),
            reason,
        };
        if max > MAX_ADDED_NODES {
            return Err(WhatIfError::TooLarge(format!(
                "addNodes: {max} is more than {MAX_ADDED_NODES}"
            )));
        }
        let node: core::Node = serde_path_to_error::deserialize(template)
            .map_err(|e| invalid(format!("{}: {}", e.path(), e.inner())))?;
        let name = node
            .metadata
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "template".to_string());
        let mut nodes = Vec::with_capacity(max);
        let mut i = 0;
        while nodes.len() < max {
            i += 1;
            let node_name = format!("{name}-{i}");
            if cache.has_node(&node_name) {
                continue;
            }
            let mut copy = node.clone();
            copy.metadata.name = Some(node_name.clone());
            copy.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert(HOSTNAME_LABEL.to_string(), node_name);
            nodes.push(NodeModel::from_api(&copy).map_err(|e| invalid(e.to_string()))?);
        }
        Ok(NodeTemplate { name, nodes })
    }
}

/// The fewest nodes of `template` (at most `max`) with which `place` places every pod, and
/// those nodes. Placements are assumed to only get better with more nodes: the answer is
/// checked at its bounds (every pod fits with `needed`, one does not with `needed - 1`), and
/// found between them by bisection.
pub(super) fn nodes_needed(
    template: &NodeTemplate,
    max: usize,
    place: impl Fn(&[NodeModel]) -> Result<Placed, WhatIfError>,
) -> Result<(NodesNeeded, Vec<NodeModel>), WhatIfError> {
    let fits = |p: &Placed| p.pods.iter().all(|p| p.node.is_some());
    let mut answer = NodesNeeded {
        template: template.name.clone(),
        max,
        ..NodesNeeded::default()
    };
    let none = place(&[])?;
    if fits(&none) {
        answer.needed = Some(0);
        return Ok((answer, Vec::new()));
    }
    let all = &template.nodes[..max];
    let most = place(all)?;
    if !fits(&most) {
        answer.short_by_one = most.first_pending();
        return Ok((answer, all.to_vec()));
    }
    // Every pod fits with `high` nodes, not with `low`.
    let (mut low, mut high) = (0, max);
    let mut short = none.first_pending();
    while high - low > 1 {
        let middle = low + (high - low) / 2;
        let placed = place(&all[..middle])?;
        if fits(&placed) {
            high = middle;
        } else {
            low = middle;
            short = placed.first_pending();
        }
    }
    answer.needed = Some(high);
    answer.short_by_one = short;
    Ok((answer, all[..high].to_vec()))
}
