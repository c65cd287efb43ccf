//! "Will it fit?": placement and capacity questions answered against a cluster as a
//! scheduler holds it ([`ClusterView`]), by the same core that schedules it, on a copy.
//!
//! A question ([`Question`]) names pods and workloads (expanded into their pods by
//! [`workload`]). The answer ([`Answer`]) says, for each pod, where it would go and why that
//! node won, or why no node could take it and which single change would let it, the pods it
//! would preempt, and for a gang whether its group completes; with [`Question::max`], how
//! many more replicas of each workload fit and what stops the next one; with
//! [`Question::add_nodes`], how many nodes of a template would have to be added for all the
//! pods to fit. Nothing is written anywhere: each run is a [`Scheduler`] built from a clone
//! of the view ([`Scheduler::from_view`]), pods placed one after the other (later pods see
//! earlier ones), preemptions carried out on the copy.
//!
//! A question costs what it asks for, so its size is bounded ([`Limits`]: pods placed,
//! replicas counted, nodes added, bytes held) and it stops between two steps when its
//! asker says so ([`ask_within`]): gone, past its deadline, or shutting down.

mod capacity;
mod table;
pub mod workload;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{self as sim, Report};
use gantry_core::config::Config;
use gantry_core::decision::{DecisionRecord, DecisionRecorder, DecisionStore};
use gantry_core::memory::Budget;
use gantry_core::model::pod_group::PodGroupModel;
use gantry_core::model::{NodeModel, PodInfo};
use gantry_core::scheduler::{ClusterView, Scheduler};
use workload::Expanded;

pub use capacity::{DEFAULT_MAX_LIMIT, MAX_ADDED_NODES};

/// How many attempts of each pod an answer keeps (a preemptor's first, unschedulable one
/// and the one that placed it; a gang member's wait and its end).
const ATTEMPTS_KEPT: usize = 4;

/// A question that cannot be answered as asked.
#[derive(Debug, thiserror::Error)]
pub enum WhatIfError {
    /// An object of the question cannot be read; names it and the field.
    #[error("{at}: {reason}")]
    Invalid {
        /// Which object: `objects[2]`, `objects[0].items[3]`, `nodeTemplate`.
        at: String,
        /// What is wrong.
        reason: String,
    },
    /// The scheduler's configuration could not be built for the question.
    #[error("the scheduler's configuration: {0}")]
    Config(String),
    /// The question's settings contradict each other.
    #[error("{0}")]
    Question(String),
    /// The question asks for more than one question may cost ([`Limits`]).
    #[error("{0}")]
    TooLarge(String),
    /// The question was stopped before it was answered: why.
    #[error("the question was stopped: {0}")]
    Stopped(String),
}

/// What one question may cost. A question beyond them is refused before it runs (or, for
/// memory, stopped once it holds more).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Pods a question may place (its workloads' replicas together), and replicas `max`
    /// may count per workload.
    pub pods: usize,
    /// Workloads (pods and controllers) a question may name.
    pub workloads: usize,
    /// Nodes `addNodes` may add.
    pub added_nodes: usize,
    /// Bytes a question may hold while it runs (counted by [`gantry_core::memory`] where the
    /// binary counts them).
    pub memory: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            pods: DEFAULT_MAX_LIMIT,
            workloads: 1_000,
            added_nodes: MAX_ADDED_NODES,
            memory: 1 << 30,
        }
    }
}

impl Limits {
    /// Refuses `question` (expanded into `expanded`) when it asks for more than these allow.
    fn check(&self, question: &Question, expanded: &Expanded) -> Result<(), WhatIfError> {
        let too_large = |what: String| Err(WhatIfError::TooLarge(what));
        if expanded.workloads.len() > self.workloads {
            return too_large(format!(
                "the question names {} workloads; at most {} are answered",
                expanded.workloads.len(),
                self.workloads
            ));
        }
        if question.max {
            let limit = question
                .max_limit
                .unwrap_or(DEFAULT_MAX_LIMIT.min(self.pods));
            if limit > self.pods {
                return too_large(format!(
                    "maxLimit {limit} is more than the {} replicas counted at most",
                    self.pods
                ));
            }
        } else {
            let pods = expanded
                .workloads
                .iter()
                .fold(0usize, |sum, w| sum.saturating_add(w.replicas));
            if pods > self.pods {
                return too_large(format!(
                    "the question places {pods} pods; at most {} are answered",
                    self.pods
                ));
            }
        }
        match question.add_nodes {
            Some(n) if n > self.added_nodes => too_large(format!(
                "addNodes: {n} is more than the {} nodes a question may add",
                self.added_nodes
            )),
            _ => Ok(()),
        }
    }
}

/// Between the steps of a question: whether it must stop, and why.
struct Watch<'a> {
    budget: Budget,
    halted: &'a dyn Fn() -> Option<String>,
}

impl Watch<'_> {
    /// Why the question must stop now: its asker's reason, or its memory spent.
    fn stop(&self) -> Option<String> {
        if let Some(why) = (self.halted)() {
            return Some(why);
        }
        self.budget.spent().then(|| {
            let limit = self.budget.limit();
            let budget = if limit >= 1 << 20 {
                format!("{} MiB", limit >> 20)
            } else {
                format!("{limit} bytes")
            };
            format!("it holds more than its memory budget of {budget}: ask for fewer pods or nodes")
        })
    }

    fn check(&self) -> Result<(), WhatIfError> {
        match self.stop() {
            Some(why) => Err(WhatIfError::Stopped(why)),
            None => Ok(()),
        }
    }
}

/// What is asked: the body of `POST /debug/whatif`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Question {
    /// Pods, Deployments, ReplicaSets, StatefulSets, Jobs and PodGroups, as Kubernetes
    /// objects (JSON); `List`s are read item by item.
    pub objects: Vec<serde_json::Value>,
    /// Instead of placing the pods as given: how many more replicas of each workload fit.
    #[serde(default)]
    pub max: bool,
    /// With `max`: the most replicas counted per workload ([`DEFAULT_MAX_LIMIT`] unless
    /// given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_limit: Option<usize>,
    /// How many nodes of `node_template` may be added, at most, for all the pods to fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_nodes: Option<usize>,
    /// The Node whose shape is added (with `add_nodes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_template: Option<serde_json::Value>,
}

/// The answer to a [`Question`].
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    /// The scheduler's time when the cluster was read, in milliseconds (since the start of
    /// `gantry run`; 0 for a snapshot file).
    pub taken_at_ms: u64,
    /// Nodes in the cluster (before any added from a template).
    pub nodes: usize,
    /// Pods placed in the cluster (bound or assumed).
    pub placed_pods: usize,
    /// Each pod of the question, in the order given (empty for `max`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<PodAnswer>,
    /// Each PodGroup the pods name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupAnswer>,
    /// With `max`: each workload's room.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity: Vec<CapacityAnswer>,
    /// With `addNodes`: how many template nodes are needed (the pods are placed with them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes_needed: Option<NodesNeeded>,
}

/// Where one pod would go.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodAnswer {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The workload it belongs to, `Kind/name`.
    pub workload: String,
    /// The node it would be bound to; none when it would stay pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Why it would stay pending (kube-scheduler's message), or why it was not tried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The pods it would preempt (`namespace/name`), on `node`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preempts: Vec<String>,
    /// A later pod of the question that would preempt this one once placed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evicted_by: Option<String>,
    /// Its attempts' decision records, newest first (as `gantry explain` shows them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<DecisionRecord>,
}

/// How a PodGroup of the question would fare.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GroupAnswer {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `minMember`.
    pub min_member: u32,
    /// Pods naming the group.
    pub pods: usize,
    /// Of them, bound.
    pub placed: usize,
    /// True once `minMember` are bound: the group completes.
    pub complete: bool,
    /// For a group that does not complete, why its pods found no place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// How many more replicas of one workload fit.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CapacityAnswer {
    /// The workload, `Kind/name`.
    pub workload: String,
    /// Its namespace.
    pub namespace: String,
    /// Replicas that fit, one after the other, without preempting anything.
    pub fits: usize,
    /// True when counting stopped at the limit, not at a replica that did not fit.
    pub limit_reached: bool,
    /// What stops the next replica (its message), when something does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<String>,
    /// The next replica's attempt: the rejections, and the single change that would let it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<DecisionRecord>,
}

/// How many template nodes would have to be added.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NodesNeeded {
    /// The template's name.
    pub template: String,
    /// The most that could be added (`addNodes`).
    pub max: usize,
    /// The fewest that let every pod fit; none when even `max` do not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needed: Option<usize>,
    /// With one node fewer than `needed` (or with `max`, when none suffice): a pod left
    /// pending and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub short_by_one: Option<String>,
}

/// Answers `question` against `view` within the default [`Limits`], to the end.
pub fn ask(
    config: &dyn Fn() -> Result<Config, String>,
    view: &ClusterView,
    question: &Question,
) -> Result<Answer, WhatIfError> {
    ask_within(config, view, question, &Limits::default(), &|| None)
}

/// Answers `question` against `view`. Every scheduler it runs is built from `config()` (a
/// fresh configuration each: plugins keeping state between cycles keep it apart) and a
/// clone of `view`; `view` itself is not changed. A question beyond `limits` is refused;
/// one that comes to hold more than `limits.memory`, or for which `halted` gives a reason
/// (asked between two scheduling cycles), stops with [`WhatIfError::Stopped`].
pub fn ask_within(
    config: &dyn Fn() -> Result<Config, String>,
    view: &ClusterView,
    question: &Question,
    limits: &Limits,
    halted: &dyn Fn() -> Option<String>,
) -> Result<Answer, WhatIfError> {
    let watch = Watch {
        budget: Budget::start(limits.memory),
        halted,
    };
    let expanded = workload::expand(&question.objects)?;
    limits.check(question, &expanded)?;
    let mut answer = Answer {
        taken_at_ms: millis(view.taken_at),
        nodes: view.cache().node_count(),
        placed_pods: view.cache().pod_count(),
        ..Answer::default()
    };
    if question.max {
        if question.add_nodes.is_some() {
            return Err(WhatIfError::Question(
                "max and addNodes are separate questions: ask one at a time".to_string(),
            ));
        }
        let limit = question
            .max_limit
            .unwrap_or(DEFAULT_MAX_LIMIT.min(limits.pods));
        for w in &expanded.workloads {
            let fork = fork(config, view, &expanded, &[])?;
            let room = capacity::max_replicas(fork, w, limit, view.taken_at, &watch);
            watch.check()?;
            answer.capacity.push(room);
        }
        return Ok(answer);
    }
    let added = match question.add_nodes {
        Some(max) => {
            let template = question.node_template.as_ref().ok_or_else(|| {
                WhatIfError::Question("addNodes needs a nodeTemplate".to_string())
            })?;
            let template = capacity::NodeTemplate::read(template, view.cache(), max)?;
            let (needed, nodes) = capacity::nodes_needed(&template, max, |nodes| {
                place(config, view, &expanded, nodes, &watch)
            })?;
            answer.nodes_needed = Some(needed);
            nodes
        }
        None => Vec::new(),
    };
    let placed = place(config, view, &expanded, &added, &watch)?;
    answer.pods = placed.pods;
    answer.groups = placed.groups;
    Ok(answer)
}

/// One placement of the question's pods, on the view with `added` nodes.
struct Placed {
    pods: Vec<PodAnswer>,
    groups: Vec<GroupAnswer>,
}

impl Placed {
    /// The first pod left pending, with why.
    fn first_pending(&self) -> Option<String> {
        self.pods.iter().find(|p| p.node.is_none()).map(|p| {
            format!(
                "{}/{}: {}",
                p.namespace,
                p.name,
                p.message.as_deref().unwrap_or("not placed")
            )
        })
    }
}

/// A scheduler holding a clone of `view` with `added` nodes, the question's PodGroups and
/// its controllers' selectors, nothing queued.
fn fork(
    config: &dyn Fn() -> Result<Config, String>,
    view: &ClusterView,
    expanded: &Expanded,
    added: &[NodeModel],
) -> Result<Scheduler, WhatIfError> {
    let now = view.taken_at;
    let mut fork = Scheduler::from_view(config().map_err(WhatIfError::Config)?, view.clone(), None);
    fork.set_explain(true);
    for node in added {
        fork.upsert_node(node.clone(), now);
    }
    for group in &expanded.pod_groups {
        let model = PodGroupModel::from_api(group).map_err(|reason| WhatIfError::Invalid {
            at: format!(
                "PodGroup {}",
                group.metadata.name.as_deref().unwrap_or_default()
            ),
            reason,
        })?;
        fork.upsert_pod_group(model, now);
    }
    for w in &expanded.workloads {
        if let Some((kind, name, selector)) = &w.controller {
            fork.cache_mut()
                .set_controller(kind, &w.namespace, name, selector.clone());
        }
    }
    Ok(fork)
}

/// Places every pod of the question, in order, on a fork of `view` with `added` nodes.
fn place(
    config: &dyn Fn() -> Result<Config, String>,
    view: &ClusterView,
    expanded: &Expanded,
    added: &[NodeModel],
    watch: &Watch<'_>,
) -> Result<Placed, WhatIfError> {
    let now = view.taken_at;
    let mut fork = fork(config, view, expanded, added)?;
    let mut pods = Vec::new();
    let mut pending = Vec::new();
    let mut seen: HashMap<(String, String), ()> = HashMap::new();
    for w in &expanded.workloads {
        for api in w.pods() {
            let mut answer = PodAnswer {
                namespace: api
                    .metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".to_string()),
                name: api.metadata.name.clone().unwrap_or_default(),
                workload: w.label(),
                ..PodAnswer::default()
            };
            let refusal = match PodInfo::from_api(&api) {
                Err(e) => Some(e.to_string()),
                Ok(pod) => refusal(&fork, &pod, &mut seen).or_else(|| {
                    pending.push(Arc::new(pod));
                    None
                }),
            };
            answer.message = refusal;
            pods.push(answer);
        }
        watch.check()?;
    }
    let recorder = DecisionRecorder::new(
        DecisionStore::shared(pending.len() * ATTEMPTS_KEPT * 2 + 16),
        None,
        true,
    );
    let report = sim::schedule_pending_until(
        &mut fork,
        Report::default(),
        pending,
        now,
        Some(&recorder),
        &|| watch.stop().is_none(),
    );
    watch.check()?;
    let outcomes: HashMap<(&str, &str), &sim::PodOutcome> = report
        .pods
        .iter()
        .map(|o| ((o.namespace.as_str(), o.name.as_str()), o))
        .collect();
    let store = recorder.store().clone();
    let store = store.lock().unwrap_or_else(|e| e.into_inner());
    for p in &mut pods {
        if p.message.is_some() {
            continue;
        }
        let Some(outcome) = outcomes.get(&(p.namespace.as_str(), p.name.as_str())) else {
            continue;
        };
        p.node = outcome.node.clone();
        p.message = outcome.message.clone();
        p.evicted_by = outcome.evicted.clone();
        p.preempts = report
            .preemptions
            .iter()
            .filter(|x| x.namespace == p.namespace && x.pod == p.name)
            .flat_map(|x| x.victims.iter().cloned())
            .collect();
        p.attempts = store
            .latest(&p.namespace, &p.name, ATTEMPTS_KEPT)
            .iter()
            .map(|r| (**r).clone())
            .collect();
    }
    let groups = report
        .groups
        .iter()
        .map(|g| GroupAnswer {
            namespace: g.namespace.clone(),
            name: g.name.clone(),
            min_member: g.min_member,
            pods: g.pods,
            placed: g.placed,
            complete: g.complete,
            why: g.why.clone(),
        })
        .collect();
    Ok(Placed { pods, groups })
}

/// Why a pod of the question is not placed at all: it is already in the cluster, named
/// twice in the question, or bound by its own `spec.nodeName`.
fn refusal(
    fork: &Scheduler,
    pod: &PodInfo,
    seen: &mut HashMap<(String, String), ()>,
) -> Option<String> {
    if let Some((node, _)) = fork.cache().pod_placement(&pod.namespace, &pod.name) {
        return Some(format!(
            "a pod {} is already in the cluster, on node {node}",
            pod.key()
        ));
    }
    if seen
        .insert((pod.namespace.clone(), pod.name.clone()), ())
        .is_some()
    {
        return Some(format!("pod {} is named twice in the question", pod.key()));
    }
    pod.node_name.as_ref().map(|node| {
        format!("spec.nodeName is {node}: the pod is bound as it is created, not scheduled")
    })
}

/// The cluster of a snapshot file (the simulator's input, as `gantry snapshot` writes it)
/// as a scheduler for `config` holds it: nodes, running pods and the other objects; its
/// pending pods are left out, as a running scheduler's queue is. Also returns what could
/// not be read.
pub fn view_of_snapshot(input: &sim::ClusterInput, config: Config) -> (ClusterView, Vec<String>) {
    let loaded = sim::load(input, config, None);
    let mut invalid = loaded.report.invalid;
    invalid.extend(loaded.report.pods.iter().filter_map(|p| {
        p.message
            .as_ref()
            .map(|m| format!("{}/{}: {m}", p.namespace, p.name))
    }));
    (loaded.scheduler.view(Duration::ZERO), invalid)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod snapshot_tests;
#[cfg(test)]
mod tests;
