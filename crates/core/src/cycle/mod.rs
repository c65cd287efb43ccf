//! One scheduling cycle: `schedule_one(profile, snapshot, pod)` returns the chosen node, or a
//! diagnosis of why no node fits. Pure: no clock, no I/O, and threads only from the pool the
//! caller passes in.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use rayon::prelude::*;

use crate::cache::{NodeInfo, Snapshot};
use crate::extender::combine::Verdict;
use crate::framework::resource_claims;
use crate::framework::runners::{
    ActiveFilter, PreFilterRun, active_filters, check_scores, run_filter_block,
    run_filters_with_nominated, run_filters_with_nominated_ahead, run_normalize,
    run_post_filter_plugins, run_pre_filter, run_pre_score, run_score_block,
};
use crate::framework::{
    Code, CycleState, NodeBlock, NodeScore, NominatedPods, Point, PostFilterInput,
    PostFilterResult, Profile, SkippedFilters, Status, WaitingPods,
};
use crate::model::PodInfo;
use class_index::ClassIndex;

mod class_index;

/// Below this many nodes to examine in one step, filtering and scoring stay on the scheduling
/// thread: handing a step to the other threads costs more than it saves for fewer nodes.
const PARALLEL_THRESHOLD: usize = 1024;
/// The same once pods are nominated: a node with nominated pods is filtered twice, the first
/// time on a copy with them added, which costs several times a plain filter pass.
const PARALLEL_THRESHOLD_NOMINATED: usize = 256;
/// kube-scheduler always looks for at least this many feasible nodes.
const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
/// ... and never for fewer than this share of the cluster, with the adaptive default.
const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: usize = 5;

/// Message when the cluster has no nodes at all.
pub const NO_NODES_AVAILABLE: &str = "no nodes available to schedule pods";

/// What a cycle needs besides the profile, snapshot and pod.
pub struct CycleOptions<'a> {
    /// Threads for filtering and scoring large clusters; `None` runs on the caller's thread.
    pub pool: Option<&'a rayon::ThreadPool>,
    /// The configuration-wide `percentageOfNodesToScore` (0 = adaptive); a profile's own
    /// value takes precedence.
    pub percentage_of_nodes_to_score: u32,
    /// How many of the best-scored nodes to report with their per-plugin scores.
    pub top_scores: usize,
    /// Pods nominated to nodes (room made for them by preemption): counted on their nodes
    /// when pods of no higher priority are filtered there, and tried first for themselves.
    pub nominated: Option<&'a NominatedPods>,
    /// The pods held at Permit, for PostFilter plugins to read (and reject).
    pub waiting: Option<&'a WaitingPods>,
    /// Extenders with a preempt verb are interested in the pod: a preemption lists its
    /// candidates for them instead of choosing a node.
    pub preempt_extenders: bool,
    /// The pod's earlier preemption is still being carried out (its victims evicted).
    pub preemption_running: bool,
}

/// What one cycle works on and does not change: the profile, the pod, the cluster as the
/// cycle sees it, and the caller's options.
#[derive(Clone, Copy)]
struct Cycle<'a> {
    profile: &'a Profile,
    pod: &'a PodInfo,
    snapshot: &'a Snapshot,
    options: &'a CycleOptions<'a>,
}

/// What one cycle leaves for the next: where to start looking, so that successive cycles
/// spread their search over the whole cluster (kube-scheduler's `nextStartNodeIndex`), and
/// score buffers reused so that a cycle allocates no large arrays.
#[derive(Debug, Default)]
pub struct CycleMemory {
    next_start: usize,
    /// Filter results of a batch; between batches every entry is a success.
    statuses: Vec<Status>,
    /// Set while a batch's results are in `statuses`: a cycle that did not finish (a
    /// plugin panicked) may have left rejections there.
    statuses_in_use: bool,
    scores: ScoreBuffers,
    /// Verdicts and scores kept for pods asking the same resources, when every node is
    /// examined.
    classes: ClassIndex,
}

impl CycleMemory {
    /// A memory that starts the next search where this one would (its buffers are not
    /// copied): a copy of the scheduler asked what it would do next searches the same nodes.
    pub fn fork(&self) -> CycleMemory {
        CycleMemory {
            next_start: self.next_start,
            ..CycleMemory::default()
        }
    }
}

/// Per-cycle score arrays, kept between cycles.
#[derive(Debug, Default)]
struct ScoreBuffers {
    /// Raw, then weighted, scores of the feasible nodes, in blocks of [`SCORE_BLOCK`] nodes;
    /// within a block, one run of scores per plugin, in plugin order. Plugins score a block
    /// at a time, so the block's nodes stay in the core's cache from one plugin to the next.
    cells: Vec<i64>,
    /// Score plugins (columns).
    width: usize,
    /// Feasible nodes (rows).
    len: usize,
    /// Sum of each row, the constant columns left out.
    totals: Vec<i64>,
    /// For each column whose plugin gave every node the same score, that weighted score,
    /// which its cells do not hold.
    constant: Vec<Option<i64>>,
    /// The sum of the constant columns, to add to every row's total.
    constant_total: i64,
    /// One plugin's scores, for its normalization.
    column: Vec<NodeScore>,
}

/// Feasible nodes a score plugin is given at a time.
const SCORE_BLOCK: usize = 256;
/// Nodes a filter plugin is given at a time, at most.
const FILTER_BLOCK: usize = 256;

/// The scores one feasible node received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeScores {
    /// The node.
    pub node: Arc<str>,
    /// Each score plugin's normalized score times its weight, in profile order.
    pub weighted: Vec<i64>,
    /// The sum.
    pub total: i64,
}

/// A successful cycle.
#[derive(Debug)]
pub struct Placement {
    /// The chosen node.
    pub node: Arc<str>,
    /// Nodes examined by filters.
    pub evaluated: usize,
    /// Nodes that passed every filter (among those examined).
    pub feasible: usize,
    /// Names of the score plugins, in the order of [`NodeScores::weighted`].
    pub score_plugins: Vec<&'static str>,
    /// Scores of the best feasible nodes (up to `CycleOptions::top_scores`), best first;
    /// empty when only one node was feasible and scoring was skipped.
    pub scores: Vec<NodeScores>,
    /// The examined nodes that filters rejected, counted per plugin and reason (for the
    /// decision log: a placed pod's record also says what was ruled out on the way).
    pub rejections: Vec<RejectionCount>,
    /// Per-cycle plugin state, for Reserve, Permit and Bind.
    pub state: CycleState,
}

/// Why no node could take the pod, as kube-scheduler reports it.
#[derive(Debug, Clone, Default)]
pub struct Diagnosis {
    /// Nodes in the cluster.
    pub num_all_nodes: usize,
    /// Each rejected node with the status of the plugin that rejected it.
    pub node_statuses: Vec<(Arc<str>, Status)>,
    /// Set when a PreFilter plugin rejected the pod for all nodes.
    pub pre_filter_msg: Option<String>,
    /// Set when a PostFilter plugin had something to say.
    pub post_filter_msg: Option<String>,
    /// What the PostFilter plugins decided (a nomination, evictions); boxed, as most
    /// diagnoses carry nothing here.
    pub post_filter: Box<PostFilterResult>,
    /// Plugins that rejected the pod (for requeueing on relevant cluster events).
    pub unschedulable_plugins: BTreeSet<&'static str>,
    /// For a pod of a PodGroup, how far its group has got (set by the scheduler; boxed, as
    /// most diagnoses carry nothing here).
    pub group: Option<Box<crate::cache::GroupProgress>>,
}

/// How many nodes one plugin rejected with one reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectionCount {
    /// The plugin; `None` for the nodes a PreFilter plugin left out of the search.
    pub plugin: Option<&'static str>,
    /// The reason, as the plugin worded it.
    pub reason: Cow<'static, str>,
    /// Nodes rejected so.
    pub nodes: usize,
}

/// Rejections (each status with the number of nodes carrying it) counted per (plugin,
/// reason), most nodes first, then by plugin and reason.
fn count_rejections<'a>(
    statuses: impl Iterator<Item = (&'a Status, usize)>,
) -> Vec<RejectionCount> {
    let mut counts: Vec<RejectionCount> = Vec::new();
    for (status, nodes) in statuses.filter(|&(_, nodes)| nodes > 0) {
        let plugin = status.plugin();
        for reason in status.reasons() {
            match counts.iter_mut().find(|c| {
                let same_plugin = match (c.plugin, plugin) {
                    (Some(a), Some(b)) => same_str(a, b),
                    (a, b) => a.is_none() && b.is_none(),
                };
                same_plugin && same_str(&c.reason, reason)
            }) {
                Some(c) => c.nodes += nodes,
                None => counts.push(RejectionCount {
                    plugin,
                    reason: reason.clone(),
                    nodes,
                }),
            }
        }
    }
    counts.sort_by(|a, b| {
        b.nodes
            .cmp(&a.nodes)
            .then_with(|| a.plugin.cmp(&b.plugin))
            .then_with(|| a.reason.cmp(&b.reason))
    });
    counts
}

/// String equality that first compares addresses: plugins' names and most reasons are
/// `'static` strings, the same few for thousands of rejected nodes.
fn same_str(a: &str, b: &str) -> bool {
    std::ptr::eq(a, b) || a == b
}

impl Diagnosis {
    /// The rejected nodes counted per (plugin, reason), most nodes first, then by plugin and
    /// reason: one entry per distinct reason, no per-node string.
    pub fn rejection_counts(&self) -> Vec<RejectionCount> {
        count_rejections(self.node_statuses.iter().map(|(_, s)| (s, 1)))
    }

    /// kube-scheduler's message: `0/5 nodes are available: 3 Insufficient cpu, 2 node(s) had
    /// untolerated taint(s).`, reasons counted and sorted as strings.
    pub fn message(&self) -> String {
        if self.num_all_nodes == 0 {
            return NO_NODES_AVAILABLE.to_string();
        }
        let mut msg = if let Some(pre) = &self.pre_filter_msg {
            format!("0/{} nodes are available: {pre}.", self.num_all_nodes)
        } else {
            nodes_available_message(self.num_all_nodes, &self.node_statuses, None)
        };
        if let Some(post) = &self.post_filter_msg {
            // Already ends with its own period (kube-scheduler 1.32+ adds none).
            msg.push_str(&format!(" {post}"));
        }
        msg
    }
}

/// kube-scheduler's `0/N nodes are available: <reasons>.`: the reasons of `statuses`
/// counted and sorted as strings, the nodes of the `num_all_nodes` that have no status
/// counted under `absent`'s reason.
pub fn nodes_available_message(
    num_all_nodes: usize,
    statuses: &[(Arc<str>, Status)],
    absent: Option<&str>,
) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, status) in statuses {
        for r in status.reasons() {
            *counts.entry(r).or_default() += 1;
        }
    }
    let missing = num_all_nodes.saturating_sub(statuses.len());
    if let Some(reason) = absent.filter(|_| missing > 0) {
        *counts.entry(reason).or_default() += missing;
    }
    let mut parts: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
    parts.sort();
    let mut msg = format!("0/{num_all_nodes} nodes are available:");
    if !parts.is_empty() {
        msg.push_str(&format!(" {}.", parts.join(", ")));
    }
    msg
}

/// A failed cycle.
#[derive(Debug, Clone)]
pub enum CycleError {
    /// No node fits; retry when the cluster changes.
    Unschedulable(Diagnosis),
    /// A plugin failed; retry with backoff.
    Error(Status),
}

impl std::fmt::Display for CycleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CycleError::Unschedulable(d) => f.write_str(&d.message()),
            CycleError::Error(s) => write!(f, "{s}"),
        }
    }
}

/// How many feasible nodes to look for before scoring: kube-scheduler's rule, with an
/// adaptive share (50% minus 1% per 125 nodes, at least 5%) when `percentage` is 0.
pub fn num_feasible_nodes_to_find(percentage: u32, num_all_nodes: usize) -> usize {
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND {
        return num_all_nodes;
    }
    let percentage = if percentage == 0 {
        50usize
            .saturating_sub(num_all_nodes / 125)
            .max(MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    } else {
        percentage.min(100) as usize
    };
    (num_all_nodes * percentage / 100).max(MIN_FEASIBLE_NODES_TO_FIND)
}

/// Schedules `pod` on `snapshot` with `profile`, in kube-scheduler's phases:
/// [`pre_filter`], [`find_feasible_nodes`] (Filter; PostFilter when none is found),
/// [`score_nodes`] (PreScore, Score, normalization, weights) and [`select_host`]. Reserve and
/// what follows it change the cluster state and are the caller's (the scheduler's).
pub fn schedule_one(
    profile: &Profile,
    snapshot: &Snapshot,
    pod: &PodInfo,
    memory: &mut CycleMemory,
    options: &CycleOptions<'_>,
) -> Result<Placement, CycleError> {
    let num_all_nodes = snapshot.len();
    if num_all_nodes == 0 {
        return Err(CycleError::Unschedulable(Diagnosis::default()));
    }
    let mut state = CycleState::observed_by(profile.observer.clone());
    let (pre, diagnosis) = pre_filter_or_post_filter(profile, &mut state, pod, snapshot, options)?;
    if let Some(node) = fits_nominated_node(profile, &state, pod, snapshot, options) {
        return Ok(Placement {
            node,
            evaluated: 1,
            feasible: 1,
            score_plugins: Vec::new(),
            scores: Vec::new(),
            rejections: Vec::new(),
            state,
        });
    }
    let cycle = Cycle {
        profile,
        pod,
        snapshot,
        options,
    };
    let pre_scored =
        match memory
            .classes
            .place(&cycle, &mut state, &pre, &diagnosis, &mut memory.next_start)
        {
            class_index::Outcome::Placed(chosen) => {
                return Ok(Placement {
                    node: chosen.node,
                    evaluated: chosen.evaluated,
                    feasible: chosen.feasible,
                    score_plugins: chosen.score_plugins,
                    scores: chosen.scores,
                    rejections: chosen.rejections,
                    state,
                });
            }
            class_index::Outcome::Plain(pre_scored) => pre_scored,
        };
    let found = find_feasible_nodes(&cycle, &state, &pre, diagnosis, memory)?;
    place(&cycle, state, found, memory, None, pre_scored)
}

/// A cycle stopped after the Filter plugins, for the extenders to filter and score the
/// nodes found (see [`crate::extender`]).
#[derive(Debug, Clone)]
pub struct Filtered {
    /// The feasible nodes, in examination order.
    pub feasible: Vec<Arc<str>>,
    /// Nodes examined.
    pub evaluated: usize,
    /// Why the Filter plugins rejected the others.
    pub diagnosis: Diagnosis,
}

/// The first half of [`schedule_one`] for a pod extenders filter or score: PreFilter and
/// Filter (PostFilter when no node is found). The node a preemption nominated the pod to
/// is not taken without the extenders: it is one of the nodes found, like any other.
pub fn filter_for_extenders(
    profile: &Profile,
    snapshot: &Snapshot,
    pod: &PodInfo,
    memory: &mut CycleMemory,
    options: &CycleOptions<'_>,
) -> Result<Filtered, CycleError> {
    if snapshot.is_empty() {
        return Err(CycleError::Unschedulable(Diagnosis::default()));
    }
    let mut state = CycleState::observed_by(profile.observer.clone());
    let (pre, diagnosis) = pre_filter_or_post_filter(profile, &mut state, pod, snapshot, options)?;
    let cycle = Cycle {
        profile,
        pod,
        snapshot,
        options,
    };
    let found = find_feasible_nodes(&cycle, &state, &pre, diagnosis, memory)?;
    let feasible: Vec<Arc<str>> = found.nodes.iter().map(|n| n.node.name.clone()).collect();
    let evaluated = found.evaluated;
    let mut diagnosis = found.into_diagnosis();
    if feasible.is_empty() {
        run_post_filter(profile, &state, pod, snapshot, options, &mut diagnosis);
        return Err(CycleError::Unschedulable(diagnosis));
    }
    Ok(Filtered {
        feasible,
        evaluated,
        diagnosis,
    })
}

/// The second half, once the extenders answered: the nodes they kept are filtered again on
/// `snapshot` (pods placed meanwhile count), the nodes they rejected join the diagnosis,
/// and the extenders' scores are added to the plugins' (see [`crate::extender::combine`]).
pub fn resume_after_extenders(
    profile: &Profile,
    snapshot: &Snapshot,
    pod: &PodInfo,
    memory: &mut CycleMemory,
    options: &CycleOptions<'_>,
    filtered: &Filtered,
    verdict: &Verdict,
) -> Result<Placement, CycleError> {
    if snapshot.is_empty() {
        return Err(CycleError::Unschedulable(Diagnosis::default()));
    }
    let mut state = CycleState::observed_by(profile.observer.clone());
    let (pre, _) = pre_filter_or_post_filter(profile, &mut state, pod, snapshot, options)?;
    let mut diagnosis = filtered.diagnosis.clone();
    diagnosis.num_all_nodes = snapshot.len();
    crate::extender::combine::merge_statuses(
        &mut diagnosis.node_statuses,
        verdict.statuses.clone(),
    );
    if verdict.rejected_any() {
        diagnosis
            .unschedulable_plugins
            .insert(crate::extender::NAME);
    }
    let positions: Vec<usize> = verdict
        .survivors
        .iter()
        .filter_map(|n| snapshot.position(n))
        .filter(|p| pre.candidates.as_ref().is_none_or(|c| c.contains(p)))
        .collect();
    let pre = PreFiltered {
        candidates: Some(positions),
        exhaustive: true,
        ..pre
    };
    let cycle = Cycle {
        profile,
        pod,
        snapshot,
        options,
    };
    let mut found = find_feasible_nodes(&cycle, &state, &pre, diagnosis, memory)?;
    found.evaluated = filtered.evaluated;
    place(&cycle, state, found, memory, Some(&verdict.scores), None)
}

/// PreFilter, and PostFilter when it rejects the pod on every node.
fn pre_filter_or_post_filter(
    profile: &Profile,
    state: &mut CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
    options: &CycleOptions<'_>,
) -> Result<(PreFiltered, Diagnosis), CycleError> {
    let diagnosis = Diagnosis {
        num_all_nodes: snapshot.len(),
        ..Default::default()
    };
    match pre_filter(profile, state, pod, snapshot, diagnosis) {
        Ok((pre, diagnosis)) => {
            state.insert(SkippedFilters(pre.skip_filter.clone()));
            Ok((pre, diagnosis))
        }
        Err(CycleError::Unschedulable(mut diagnosis)) => {
            run_post_filter(profile, state, pod, snapshot, options, &mut diagnosis);
            Err(CycleError::Unschedulable(diagnosis))
        }
        Err(e) => Err(e),
    }
}

/// The cycle's end once the feasible nodes are known: PostFilter when there is none, the
/// only one when there is one, else the best scored, `extra` scores (the extenders') added
/// to the plugins'.
fn place(
    cycle: &Cycle<'_>,
    mut state: CycleState,
    found: Feasible<'_>,
    memory: &mut CycleMemory,
    extra: Option<&HashMap<Arc<str>, i64>>,
    pre_scored: Option<Vec<&'static str>>,
) -> Result<Placement, CycleError> {
    let Cycle {
        profile,
        pod,
        snapshot,
        options,
    } = *cycle;
    if found.nodes.is_empty() {
        let mut diagnosis = found.into_diagnosis();
        run_post_filter(profile, &state, pod, snapshot, options, &mut diagnosis);
        return Err(CycleError::Unschedulable(diagnosis));
    }
    let rejections = found.rejection_counts();
    let Feasible {
        nodes: feasible,
        positions,
        evaluated,
        ..
    } = found;
    if feasible.len() == 1 {
        return Ok(Placement {
            node: feasible[0].node.name.clone(),
            evaluated,
            feasible: 1,
            score_plugins: Vec::new(),
            scores: Vec::new(),
            rejections,
            state,
        });
    }
    let buffers = &mut memory.scores;
    let mut score_plugins = score_nodes(
        cycle,
        &mut state,
        NodeBlock::of_snapshot(&feasible, &positions, snapshot),
        buffers,
        pre_scored,
    )?;
    let extra = extra.filter(|e| !e.is_empty());
    let extra_of = |node: &Arc<str>| extra.and_then(|e| e.get(node)).copied().unwrap_or(0);
    if extra.is_some() {
        for (total, node) in buffers.totals.iter_mut().zip(&feasible) {
            *total = total.saturating_add(extra_of(&node.node.name));
        }
    }
    let fixed_order = fixed_tie_order(profile, |name| score_plugins.contains(&name));
    let hashes = snapshot.name_hashes();
    let name_hash = |i: usize| hashes[positions[i]];
    let chosen = select_host(
        pod,
        buffers.totals.iter().copied().enumerate(),
        name_hash,
        |i| &feasible[i].node.name,
        fixed_order,
    );
    let mut scores = buffers.top(&feasible, options.top_scores);
    if extra.is_some() {
        score_plugins.push(crate::extender::NAME);
        for s in &mut scores {
            s.weighted.push(extra_of(&s.node));
        }
    }
    Ok(Placement {
        node: feasible[chosen].node.name.clone(),
        evaluated,
        feasible: feasible.len(),
        score_plugins,
        scores,
        rejections,
        state,
    })
}

/// The node a preemption nominated the pod to, when it passes the filters (with the pods
/// nominated ahead of it counted): kube-scheduler tries it before all others and takes it
/// without scoring, since the room there was made for this pod.
fn fits_nominated_node(
    profile: &Profile,
    state: &CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
    options: &CycleOptions<'_>,
) -> Option<Arc<str>> {
    let nominated = options.nominated?;
    let name = nominated.node_of(&pod.namespace, &pod.name)?;
    let node = snapshot.get(name)?;
    run_filters_with_nominated(profile, state, pod, node, nominated)
        .is_success()
        .then(|| name.clone())
}

/// What PreFilter left for Filter.
struct PreFiltered {
    /// Plugins whose PreFilter skipped the pod: their Filter is skipped too.
    skip_filter: Vec<&'static str>,
    /// The positions of the nodes PreFilter narrowed the search to; none: every node.
    candidates: Option<Vec<usize>>,
    /// Examine every candidate, in order, and leave the rotating start where it is: the
    /// second pass over the nodes the extenders kept.
    exhaustive: bool,
}

/// The refusal of a pod with resource claims by a profile without DynamicResources, which
/// would otherwise bind it without its devices (kube-scheduler would; its kubelet then fails
/// to start it).
fn claims_nobody_allocates(profile: &Profile, pod: &PodInfo) -> Option<Status> {
    if pod.resource_claims.is_empty() || resource_claims::refused_by(profile) {
        return None;
    }
    resource_claims::refusal(pod)
}

/// PreFilter: a pod with claims no plugin allocates is refused, then the PreFilter plugins
/// run ([`run_pre_filter`]). A rejection puts its status on every node; the nodes the
/// narrowing plugins leave out are recorded in the diagnosis as kube-scheduler reports them.
/// Errors end the cycle.
fn pre_filter(
    profile: &Profile,
    state: &mut CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
    mut diagnosis: Diagnosis,
) -> Result<(PreFiltered, Diagnosis), CycleError> {
    if let Some(status) = claims_nobody_allocates(profile, pod) {
        return Err(reject_all(snapshot, diagnosis, status));
    }
    let (skip_filter, allowed, narrowing_plugins) =
        match run_pre_filter(profile, state, pod, snapshot) {
            PreFilterRun::Passed {
                skip_filter,
                allowed,
                narrowing,
            } => (skip_filter, allowed, narrowing),
            PreFilterRun::Rejected(status) => return Err(reject_all(snapshot, diagnosis, status)),
            PreFilterRun::Failed(status) => return Err(CycleError::Error(status)),
        };
    let candidates = allowed.map(|names| {
        // kube-scheduler (1.32+) reports the nodes PreFilter left out as not satisfying the
        // narrowing plugins, listed sorted (Go's `%v` of a sorted string set).
        let mut plugins = narrowing_plugins.clone();
        plugins.sort_unstable();
        plugins.dedup();
        let left_out = Status::unresolvable(format!(
            "node(s) didn't satisfy plugin(s) [{}]",
            plugins.join(" ")
        ));
        for n in snapshot.nodes() {
            if !names.contains(&n.node.name) {
                diagnosis
                    .node_statuses
                    .push((n.node.name.clone(), left_out.clone()));
            }
        }
        names.iter().filter_map(|n| snapshot.position(n)).collect()
    });
    Ok((
        PreFiltered {
            skip_filter,
            candidates,
            exhaustive: false,
        },
        diagnosis,
    ))
}

/// What Filter found.
struct Feasible<'s> {
    /// The feasible nodes, in examination order.
    nodes: Vec<&'s NodeInfo>,
    /// Their positions in the snapshot.
    positions: Vec<usize>,
    /// Nodes examined, those PreFilter left out included.
    evaluated: usize,
    /// Why the others were rejected: the nodes PreFilter left out, by name.
    diagnosis: Diagnosis,
    /// The nodes Filter rejected, in examination order, named only when the diagnosis is
    /// wanted (the cycle failed, or the extenders carry it on): naming thousands of rejected
    /// nodes reads each node's memory, which a successful cycle never needs.
    rejected: Vec<(&'s NodeInfo, Status)>,
}

impl Feasible<'_> {
    /// The full diagnosis: the rejected nodes named and added after the nodes PreFilter left
    /// out, as they were examined.
    fn into_diagnosis(mut self) -> Diagnosis {
        let statuses = &mut self.diagnosis.node_statuses;
        statuses.reserve(self.rejected.len());
        statuses.extend(
            self.rejected
                .into_iter()
                .map(|(node, status)| (node.node.name.clone(), status)),
        );
        self.diagnosis
    }

    /// The rejections counted per (plugin, reason), as [`Diagnosis::rejection_counts`]
    /// would count them on the full diagnosis.
    fn rejection_counts(&self) -> Vec<RejectionCount> {
        count_rejections(
            self.diagnosis
                .node_statuses
                .iter()
                .map(|(_, s)| (s, 1))
                .chain(self.rejected.iter().map(|(_, s)| (s, 1))),
        )
    }
}

/// Runs the Filter plugins over the candidate nodes, from the rotating start the cycle's
/// memory keeps, until as many feasible nodes are found as `percentageOfNodesToScore` asks
/// for (kube-scheduler's `numFeasibleNodesToFind`), in blocks, on the pool's threads for
/// large ones. The result is the same as examining the nodes one by one in that order.
/// Advances the rotating start past the nodes examined.
fn find_feasible_nodes<'s>(
    cycle: &Cycle<'s>,
    state: &CycleState,
    pre: &PreFiltered,
    diagnosis: Diagnosis,
    memory: &mut CycleMemory,
) -> Result<Feasible<'s>, CycleError> {
    let Cycle {
        profile,
        pod,
        snapshot,
        options,
    } = *cycle;
    let num_all_nodes = snapshot.len();
    let candidates = &pre.candidates;
    let candidate_count = candidates.as_ref().map_or(num_all_nodes, Vec::len);
    let percentage = profile
        .percentage_of_nodes_to_score
        .unwrap_or(options.percentage_of_nodes_to_score);
    let to_find = if pre.exhaustive {
        candidate_count
    } else {
        num_feasible_nodes_to_find(percentage, candidate_count)
    };
    let start = if candidate_count == 0 || pre.exhaustive {
        0
    } else {
        memory.next_start % candidate_count
    };
    let mut progress = FilterProgress {
        feasible: Vec::with_capacity(to_find.min(candidate_count)),
        positions: Vec::with_capacity(to_find.min(candidate_count)),
        processed: 0,
        diagnosis,
        rejected: Vec::new(),
        last_plugin: None,
    };
    let position_at = |i: usize| {
        // `start + i` is below twice the length: a subtraction instead of a division.
        let j = start + i;
        let j = if j >= candidate_count {
            j - candidate_count
        } else {
            j
        };
        candidates.as_ref().map_or(j, |c| c[j])
    };
    let filters = active_filters(profile, state, pod, snapshot, &pre.skip_filter);
    // Each node's verdict: the Filter plugins on the node as it is, and where pods are
    // nominated ahead of this one, the first of kube-scheduler's two passes, with them
    // counted, whose rejection wins.
    let filter_block = |block: NodeBlock<'_>, statuses: &mut [Status]| {
        run_filter_block(&filters, state, pod, block, statuses, true);
        if let Some(nominated) = options.nominated {
            for (node, status) in block.nodes.iter().zip(statuses.iter_mut()) {
                let first = run_filters_with_nominated_ahead(profile, state, pod, node, nominated);
                if !first.is_success() {
                    *status = first;
                }
            }
        }
    };
    let mut block: Vec<&NodeInfo> = Vec::new();
    let mut positions: Vec<usize> = Vec::new();
    if memory.statuses_in_use {
        memory.statuses.clear();
    }
    memory.statuses_in_use = true;
    let statuses = &mut memory.statuses;
    while progress.processed < candidate_count && progress.feasible.len() < to_find {
        let remaining = candidate_count - progress.processed;
        let want = to_find - progress.feasible.len();
        // Never examine more nodes than could still be needed: a parallel batch is as long as
        // the number of feasible nodes still wanted, a sequential one a block at most.
        let threshold = match options.nominated {
            Some(_) => PARALLEL_THRESHOLD_NOMINATED,
            None => PARALLEL_THRESHOLD,
        };
        let pool = options.pool.filter(|_| want.min(remaining) >= threshold);
        let len = match pool {
            Some(_) => want,
            None => want.min(FILTER_BLOCK),
        }
        .min(remaining);
        positions.clear();
        positions.extend((progress.processed..progress.processed + len).map(position_at));
        block.clear();
        block.extend(positions.iter().map(|&p| &*snapshot.nodes()[p]));
        // Every status left from the last batch is a success again (see below).
        statuses.resize_with(len, Status::success);
        match pool {
            Some(pool) => pool.install(|| {
                block
                    .par_chunks(FILTER_BLOCK)
                    .zip(positions.par_chunks(FILTER_BLOCK))
                    .zip(statuses.par_chunks_mut(FILTER_BLOCK))
                    .for_each(|((nodes, positions), statuses)| {
                        filter_block(NodeBlock::of_snapshot(nodes, positions, snapshot), statuses)
                    })
            }),
            None => filter_block(
                NodeBlock::of_snapshot(&block, &positions, snapshot),
                statuses,
            ),
        }
        // Rejections are taken out, leaving successes behind: the buffer needs no refilling
        // (nor its statuses dropping) before the next batch.
        let mut taken = 0;
        for ((node, &position), status) in block.iter().zip(&positions).zip(statuses.iter_mut()) {
            taken += 1;
            if status.is_success() {
                progress.accept(node, position);
            } else {
                let status = std::mem::take(status);
                if let Err(e) = progress.record(node, position, status) {
                    statuses.clear();
                    memory.statuses_in_use = false;
                    return Err(e);
                }
            }
            if progress.feasible.len() >= to_find {
                break;
            }
        }
        for status in &mut statuses[taken..len] {
            if !status.is_success() {
                *status = Status::success();
            }
        }
    }
    memory.statuses_in_use = false;
    let FilterProgress {
        feasible,
        positions,
        processed,
        diagnosis,
        rejected,
        ..
    } = progress;
    if candidate_count > 0 && !pre.exhaustive {
        memory.next_start = (memory.next_start + processed) % candidate_count;
    }
    Ok(Feasible {
        nodes: feasible,
        positions,
        evaluated: processed + num_all_nodes - candidate_count,
        diagnosis,
        rejected,
    })
}

/// Filtering results so far, in examination order.
struct FilterProgress<'s> {
    feasible: Vec<&'s NodeInfo>,
    /// Their positions in the snapshot.
    positions: Vec<usize>,
    processed: usize,
    diagnosis: Diagnosis,
    /// The rejected nodes with their statuses (see [`Feasible::rejected`]).
    rejected: Vec<(&'s NodeInfo, Status)>,
    /// The plugin of the last rejection, already in the diagnosis: rejections come in runs
    /// from one plugin, and the set need not be searched for each.
    last_plugin: Option<&'static str>,
}

impl<'s> FilterProgress<'s> {
    /// `node` passed every filter.
    #[inline]
    fn accept(&mut self, node: &'s NodeInfo, position: usize) {
        self.processed += 1;
        self.feasible.push(node);
        self.positions.push(position);
    }

    fn record(
        &mut self,
        node: &'s NodeInfo,
        position: usize,
        status: Status,
    ) -> Result<(), CycleError> {
        self.processed += 1;
        match status.code() {
            Code::Success => {
                self.feasible.push(node);
                self.positions.push(position);
            }
            Code::Unschedulable | Code::UnschedulableAndUnresolvable => {
                if let Some(p) = status.plugin()
                    && self.last_plugin != Some(p)
                {
                    self.diagnosis.unschedulable_plugins.insert(p);
                    self.last_plugin = Some(p);
                }
                self.rejected.push((node, status));
            }
            _ => return Err(CycleError::Error(status)),
        }
        Ok(())
    }
}

/// The cycle's end when PreFilter rejects the pod: every node carries `status`.
fn reject_all(snapshot: &Snapshot, mut diagnosis: Diagnosis, status: Status) -> CycleError {
    if let Some(p) = status.plugin() {
        diagnosis.unschedulable_plugins.insert(p);
    }
    diagnosis.pre_filter_msg = Some(status.message());
    diagnosis.node_statuses = snapshot
        .nodes()
        .iter()
        .map(|n| (n.node.name.clone(), status.clone()))
        .collect();
    CycleError::Unschedulable(diagnosis)
}

/// Runs the PostFilter plugins after no node was found feasible, with what they read of the
/// cycle; their result and message go into the diagnosis.
fn run_post_filter(
    profile: &Profile,
    state: &CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
    options: &CycleOptions<'_>,
    diagnosis: &mut Diagnosis,
) {
    let no_nominations = NominatedPods::default();
    let no_waiting = WaitingPods::default();
    let input = PostFilterInput {
        profile,
        snapshot,
        nominated: options.nominated.unwrap_or(&no_nominations),
        rejections: &diagnosis.node_statuses,
        waiting: options.waiting.unwrap_or(&no_waiting),
        pool: options.pool,
        extenders_cut: options.preempt_extenders,
        preemption_running: options.preemption_running,
    };
    let (result, message) = run_post_filter_plugins(profile, state, pod, &input);
    if message.is_some() {
        diagnosis.post_filter_msg = message;
    }
    *diagnosis.post_filter = result;
}

impl ScoreBuffers {
    /// Position in `cells` of node `i`'s score from plugin `j`.
    fn at(&self, i: usize, j: usize) -> usize {
        let start = i - i % SCORE_BLOCK;
        let block_len = SCORE_BLOCK.min(self.len - start);
        start * self.width + j * block_len + (i - start)
    }

    /// The `k` best rows, best first (ties in examination order), with node names.
    fn top(&self, feasible: &[&NodeInfo], k: usize) -> Vec<NodeScores> {
        let mut best = TopK::new(k);
        for (i, &total) in self.totals.iter().enumerate() {
            best.offer(i, total);
        }
        best.into_best()
            .into_iter()
            .map(|(i, _)| NodeScores {
                node: feasible[i].node.name.clone(),
                weighted: (0..self.width)
                    .map(|j| self.constant[j].unwrap_or_else(|| self.cells[self.at(i, j)]))
                    .collect(),
                total: self.totals[i] + self.constant_total,
            })
            .collect()
    }
}

/// Weighs a run of one plugin's scores in place and adds them to the nodes' totals. A score
/// is in 0..=MAX_NODE_SCORE (checked first) and a configured weight in 1..=i32::MAX whose
/// products sum within i64 (checked when the profile is built), so neither operation can
/// overflow for a configured profile; for a profile built otherwise they saturate, staying
/// ordered instead of wrapping.
fn add_weighted(cells: &mut [i64], totals: &mut [i64], weight: i64) {
    if weight == 1 {
        for (cell, total) in cells.iter().zip(totals) {
            *total += *cell;
        }
    } else if plain_weight(weight) {
        for (cell, total) in cells.iter_mut().zip(totals) {
            *cell *= weight;
            *total += *cell;
        }
    } else {
        for (cell, total) in cells.iter_mut().zip(totals) {
            *cell = cell.saturating_mul(weight);
            *total = total.saturating_add(*cell);
        }
    }
}

/// Runs PreScore and Score with normalization over the feasible nodes into `buffers`, and
/// the weighted totals per node (each plugin's scores in `0..=100` times its weight, applied
/// here once); returns the names of the score plugins that ran, in column order. A plugin
/// whose PreScore skips the pod is left out of Score; with `pre_scored`, PreScore already
/// ran (with those names skipped).
fn score_nodes(
    cycle: &Cycle<'_>,
    state: &mut CycleState,
    found: NodeBlock<'_>,
    buffers: &mut ScoreBuffers,
    pre_scored: Option<Vec<&'static str>>,
) -> Result<Vec<&'static str>, CycleError> {
    let Cycle {
        profile,
        pod,
        snapshot,
        ..
    } = *cycle;
    let feasible = found.nodes;
    let skip_score = match pre_scored {
        Some(skipped) => skipped,
        None => {
            run_pre_score(profile, state, pod, snapshot, feasible).map_err(CycleError::Error)?
        }
    };
    let active: Vec<ActiveScore<'_>> = profile
        .score
        .iter()
        .filter(|(p, _)| !skip_score.contains(&p.name()))
        .filter_map(|(p, w)| p.as_score().map(|s| (s, p.name(), *w)))
        .collect();
    let state: &CycleState = state;
    let observer = state.observer();
    let started = observer.now();
    let scored = score_active(cycle, state, found, buffers, &active);
    if !active.is_empty() {
        let code = match &scored {
            Ok(()) => Code::Success,
            Err(CycleError::Error(status)) => status.code(),
            Err(_) => Code::Error,
        };
        let elapsed = observer.now().saturating_sub(started);
        observer.extension_point(Point::Score, code, elapsed);
    }
    scored?;
    for (_, name, _) in &active {
        observer.runs(name, Point::Score, feasible.len() as u64);
    }
    Ok(active.iter().map(|(_, n, _)| *n).collect())
}

/// A Score plugin the cycle runs, with its name and weight.
type ActiveScore<'p> = (&'p dyn crate::framework::ScorePlugin, &'static str, i64);

/// Scores the feasible nodes of `found` with `active` into `buffers`: each plugin's raw
/// scores, normalized, weighted and summed per node.
fn score_active(
    cycle: &Cycle<'_>,
    state: &CycleState,
    found: NodeBlock<'_>,
    buffers: &mut ScoreBuffers,
    active: &[ActiveScore<'_>],
) -> Result<(), CycleError> {
    let Cycle {
        pod,
        snapshot,
        options,
        ..
    } = *cycle;
    let NodeBlock {
        nodes: feasible,
        positions,
        ..
    } = found;
    // The raw score of each plugin that gives every node the same: neither asked for per
    // node nor added to each row, but kept once (see `ScoreBuffers::constant`).
    let uniform: Vec<Option<i64>> = active
        .iter()
        .map(|(s, _, w)| {
            plain_weight(*w)
                .then(|| s.uniform_score(state, pod, snapshot))
                .flatten()
        })
        .collect();
    let width = active.len();
    buffers.constant.clear();
    buffers.constant.resize(width, None);
    buffers.constant_total = 0;
    buffers.width = width;
    buffers.len = feasible.len();
    // Every cell of a column that is not constant is written by its plugin before it is
    // read: no need to clear the buffer.
    buffers.cells.resize(feasible.len() * width, 0);
    buffers.totals.clear();
    buffers.totals.resize(feasible.len(), 0);
    if width == 0 {
        return Ok(());
    }
    type Block<'b, 'n> = ((&'b [&'n NodeInfo], &'b [usize]), &'b mut [i64]);
    let score_block = |((nodes, positions), cells): Block<'_, '_>| -> Result<(), Status> {
        let block = NodeBlock::of_snapshot(nodes, positions, snapshot);
        run_score_block(active, &uniform, state, pod, block, cells)
    };
    let cells = &mut buffers.cells;
    match options.pool {
        Some(pool) if feasible.len() >= PARALLEL_THRESHOLD => pool.install(|| {
            feasible
                .par_chunks(SCORE_BLOCK)
                .zip(positions.par_chunks(SCORE_BLOCK))
                .zip(cells.par_chunks_mut(SCORE_BLOCK * width))
                .try_for_each(score_block)
        }),
        _ => feasible
            .chunks(SCORE_BLOCK)
            .zip(positions.chunks(SCORE_BLOCK))
            .zip(cells.chunks_mut(SCORE_BLOCK * width))
            .try_for_each(score_block),
    }
    .map_err(CycleError::Error)?;

    let ScoreBuffers {
        cells,
        totals,
        column,
        constant,
        constant_total,
        ..
    } = buffers;
    // Block `b` starts at row `b * SCORE_BLOCK`, at `b * SCORE_BLOCK * width` in `cells`;
    // plugin `j`'s run in it starts `j * len` further, `len` being the block's length.
    let runs = |j: usize| {
        (0..feasible.len()).step_by(SCORE_BLOCK).map(move |start| {
            let len = SCORE_BLOCK.min(feasible.len() - start);
            (start, start * width + j * len, len)
        })
    };
    for (j, (plugin, name, weight)) in active.iter().enumerate() {
        if let Some(raw) = uniform[j] {
            let weighted = uniform_weighted(*plugin, name, *weight, raw, state, pod)?;
            constant[j] = Some(weighted);
            *constant_total += weighted;
            continue;
        }
        if !plugin.normalizes() {
            for (start, at, len) in runs(j) {
                let run = &mut cells[at..at + len];
                check_scores(name, run).map_err(CycleError::Error)?;
                add_weighted(run, &mut totals[start..start + len], *weight);
            }
            continue;
        }
        column.clear();
        for (start, at, len) in runs(j) {
            column.extend(
                cells[at..at + len]
                    .iter()
                    .enumerate()
                    .map(|(k, &score)| NodeScore {
                        index: start + k,
                        score,
                    }),
            );
        }
        run_normalize(*plugin, name, state, pod, column).map_err(CycleError::Error)?;
        for (start, at, len) in runs(j) {
            let scored = &column[start..start + len];
            let run = &mut cells[at..at + len];
            for (cell, s) in run.iter_mut().zip(scored) {
                *cell = s.score;
            }
            add_weighted(run, &mut totals[start..start + len], *weight);
        }
    }
    Ok(())
}

/// The weighted score of a plugin whose raw score `raw` is the same on every node: equal raw
/// scores normalize to equal scores, so one node stands for all.
fn uniform_weighted(
    plugin: &dyn crate::framework::ScorePlugin,
    name: &'static str,
    weight: i64,
    raw: i64,
    state: &CycleState,
    pod: &PodInfo,
) -> Result<i64, CycleError> {
    let mut one = [NodeScore {
        index: 0,
        score: raw,
    }];
    run_normalize(plugin, name, state, pod, &mut one).map_err(CycleError::Error)?;
    Ok(one[0].score * weight)
}

/// True for a weight a configured profile can have (see `add_weighted` in [`score_nodes`]):
/// its products with scores, and their sums, cannot overflow.
fn plain_weight(weight: i64) -> bool {
    (0..=i64::from(i32::MAX)).contains(&weight)
}

/// True when a score plugin of `profile` that `ran` for the pod asks for the fixed order of
/// nodes among equal totals ([`crate::framework::ScorePlugin::fixed_tie_order`]).
fn fixed_tie_order(profile: &Profile, ran: impl Fn(&'static str) -> bool) -> bool {
    profile
        .score
        .iter()
        .filter(|(p, _)| ran(p.name()))
        .any(|(p, _)| p.as_score().is_some_and(|s| s.fixed_tie_order()))
}

/// The best-scored of `candidates` (an id and a total each, in examination order); ties are
/// broken by a hash of the pod's identity and the node's name (`name_hash` of an id), so a
/// replay makes the same choice whatever order the nodes were examined in; with
/// `fixed_order`, by the node's name alone (the smallest wins), the same order for every pod.
/// Returns the chosen id.
fn select_host<'n>(
    pod: &PodInfo,
    candidates: impl Iterator<Item = (usize, i64)>,
    name_hash: impl Fn(usize) -> u64,
    name: impl Fn(usize) -> &'n str,
    fixed_order: bool,
) -> usize {
    if fixed_order {
        let mut best: Option<(i64, usize)> = None;
        for (id, total) in candidates {
            match best {
                Some((b, chosen)) if total < b || (total == b && name(id) >= name(chosen)) => {}
                _ => best = Some((total, id)),
            }
        }
        return best.map_or(0, |(_, id)| id);
    }
    let pod_hash = pod_tie_hash(pod);
    // One pass: the best total so far, and among the nodes with it the smallest key (the
    // first of equal keys); a node below the best costs one comparison.
    let (mut best, mut best_key, mut chosen) = (i64::MIN, u64::MAX, 0);
    for (id, total) in candidates {
        if total < best {
            continue;
        }
        let key = tie_key(name_hash(id), pod_hash);
        if total > best || key < best_key {
            (best, best_key, chosen) = (total, key, id);
        }
    }
    chosen
}

/// The pod's part of [`tie_key`]: a hash of its identity.
fn pod_tie_hash(pod: &PodInfo) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    pod.namespace.hash(&mut h);
    pod.name.hash(&mut h);
    h.finish()
}

/// The order among nodes of equal totals for one pod (the smallest key wins): a
/// multiplicative mix of the node's name hash and the pod's, cheap, and it reorders nodes
/// per pod.
#[inline]
fn tie_key(name_hash: u64, pod_hash: u64) -> u64 {
    (name_hash ^ pod_hash).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The `k` best of the candidates offered (an id and a total each), best first, ties in
/// the order offered.
struct TopK {
    k: usize,
    best: Vec<(usize, i64)>,
}

impl TopK {
    fn new(k: usize) -> Self {
        TopK {
            k,
            best: Vec::with_capacity(k + 1),
        }
    }

    /// False when a candidate with `total` would not be among the best (it is no better
    /// than the k-th best so far).
    #[inline]
    fn would_take(&self, total: i64) -> bool {
        !(self.best.len() == self.k && self.best.last().is_none_or(|&(_, t)| t >= total))
    }

    /// Offers a candidate: most are below the k-th best and cost one comparison.
    #[inline]
    fn offer(&mut self, id: usize, total: i64) {
        if !self.would_take(total) {
            return;
        }
        let at = self.best.partition_point(|&(_, t)| t >= total);
        self.best.insert(at, (id, total));
        self.best.truncate(self.k);
    }

    fn into_best(self) -> Vec<(usize, i64)> {
        self.best
    }
}

#[cfg(test)]
mod reference_tests;
#[cfg(test)]
mod tests;
