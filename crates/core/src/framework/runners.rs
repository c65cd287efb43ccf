//! The runners of the extension points: each runs a profile's plugins at one point, in
//! order, and combines what they say, as kube-scheduler's framework runtime does
//! (`RunPreEnqueuePlugins`, `RunFilterPlugins`, `RunReservePluginsReserve`, ...). The cycle
//! decides which nodes are examined, in which order and on which threads; the scheduler
//! decides what follows from an outcome; plugins that run others (preemption's dry runs)
//! call these too. The Filter runners here also count the pods nominated to a node
//! (kube-scheduler's `RunFilterPluginsWithNominatedPods`) and follow pods added to or
//! removed from a copy of a node through the PreFilter extensions.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use crate::cache::{NodeInfo, Snapshot};
use crate::model::PodInfo;

use super::cycle_state::CycleState;
use super::nominated::NominatedPods;
use super::observer::{Observer, Point, PointRun, timed_call};
use super::plugin::{
    BindPlan, FilterPlugin, MAX_NODE_SCORE, MIN_NODE_SCORE, NodeBlock, NodeScore, Nomination,
    PostFilterInput, PostFilterResult, PreBindAction, Profile, ScorePlugin,
};
use super::status::{Code, Status};
use super::waiting::WaitingPods;

/// The plugins whose PreFilter skipped the pod this cycle: their Filter and PreFilter
/// extensions do not run. The cycle keeps it in the cycle state.
#[derive(Debug, Clone, Default)]
pub struct SkippedFilters(pub Vec<&'static str>);

/// Runs the PreEnqueue plugins: the status of the first that keeps the pod out of the
/// active queue, if one does.
pub fn run_pre_enqueue(profile: &Profile, pod: &PodInfo) -> Option<Status> {
    profile.pre_enqueue.iter().find_map(|p| {
        let s = p.as_pre_enqueue()?.pre_enqueue(pod);
        (!s.is_success()).then(|| s.with_plugin(p.name()))
    })
}

/// What the PreFilter plugins said of a pod.
#[derive(Debug)]
pub enum PreFilterRun {
    /// No plugin rejected it.
    Passed {
        /// The plugins that skip the pod: their Filter and PreFilter extensions do not run.
        skip_filter: Vec<&'static str>,
        /// The nodes the narrowing plugins allow (what all of them allow); `None`: every node.
        allowed: Option<BTreeSet<Arc<str>>>,
        /// The plugins that narrowed the nodes, in order.
        narrowing: Vec<&'static str>,
    },
    /// A plugin rejects the pod on every node, or the narrowing plugins together allow none.
    Rejected(Status),
    /// A plugin failed.
    Failed(Status),
}

/// Runs every PreFilter plugin, as kube-scheduler's `RunPreFilterPlugins`: a plugin may
/// reject the pod outright, skip itself for the pod, or narrow the search to some nodes.
pub fn run_pre_filter(
    profile: &Profile,
    state: &mut CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
) -> PreFilterRun {
    let mut skip_filter: Vec<&'static str> = Vec::new();
    let mut allowed: Option<BTreeSet<Arc<str>>> = None;
    let mut narrowing_plugins: Vec<&'static str> = Vec::new();
    let observer = &*profile.observer;
    let mut run = PointRun::start(observer, Point::PreFilter);
    for plugin in &profile.pre_filter {
        let Some(pf) = plugin.as_pre_filter() else {
            continue;
        };
        let (result, status) = run.call(
            plugin.name(),
            || pf.pre_filter(state, pod, snapshot),
            |(_, s)| s.code(),
        );
        let status = status.with_plugin(plugin.name());
        if status.code() != Code::Skip {
            observer.runs(plugin.name(), Point::PreFilter, 1);
        }
        match status.code() {
            Code::Success => {}
            Code::Skip => {
                skip_filter.push(plugin.name());
                continue;
            }
            Code::Unschedulable | Code::UnschedulableAndUnresolvable => {
                run.end(status.code());
                return PreFilterRun::Rejected(status);
            }
            code => {
                run.end(code);
                return PreFilterRun::Failed(status);
            }
        }
        if let Some(names) = result.node_names {
            narrowing_plugins.push(plugin.name());
            allowed = Some(match allowed {
                Some(prev) => prev.intersection(&names).cloned().collect(),
                None => names,
            });
            if allowed.as_ref().is_some_and(|a| a.is_empty()) {
                let msg = if narrowing_plugins.len() == 1 {
                    format!("node(s) didn't satisfy plugin {}", narrowing_plugins[0])
                } else {
                    format!(
                        "node(s) didn't satisfy plugin(s) [{}] simultaneously",
                        narrowing_plugins.join(" ")
                    )
                };
                run.end(Code::UnschedulableAndUnresolvable);
                return PreFilterRun::Rejected(
                    Status::unresolvable(msg).with_plugin(plugin.name()),
                );
            }
        }
    }
    run.end(Code::Success);
    PreFilterRun::Passed {
        skip_filter,
        allowed,
        narrowing: narrowing_plugins,
    }
}

/// A Filter plugin of the pass over the nodes, in profile order.
#[derive(Clone, Copy)]
pub struct ActiveFilter<'p> {
    /// The plugin.
    pub plugin: &'p dyn FilterPlugin,
    /// Its name.
    pub name: &'static str,
    /// False when the plugin accepts every node of the snapshot: it is not called, only
    /// told how many nodes it examined.
    pub called: bool,
}

/// The Filter plugins the pass over the nodes runs for `pod`, in order: those PreFilter did
/// not skip, with those that accept every node of the snapshot marked not to be called.
pub fn active_filters<'p>(
    profile: &'p Profile,
    state: &CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
    skip: &[&'static str],
) -> Vec<ActiveFilter<'p>> {
    profile
        .filter
        .iter()
        .filter(|p| !skip.contains(&p.name()))
        .filter_map(|p| {
            p.as_filter().map(|f| ActiveFilter {
                plugin: f,
                name: p.name(),
                called: !f.passes_all(state, pod, snapshot),
            })
        })
        .collect()
}

/// Runs `filters` over a block whose statuses are all successes, each node's status naming
/// the plugin that rejected it. With `count`, tells the observer how many nodes each plugin
/// examined: those no earlier plugin rejected, whether it was called or accepts every node.
pub fn run_filter_block(
    filters: &[ActiveFilter<'_>],
    state: &CycleState,
    pod: &PodInfo,
    block: NodeBlock<'_>,
    statuses: &mut [Status],
    count: bool,
) {
    let observer = state.observer();
    let mut left = statuses.len();
    for f in filters {
        if count {
            observer.runs(f.name, Point::Filter, left as u64);
        }
        if !f.called {
            continue;
        }
        let rejected = filter_nodes_timed(f, observer, state, pod, block, statuses);
        if rejected > 0 {
            left = left.saturating_sub(rejected);
            for s in statuses.iter_mut() {
                if !s.is_success() && s.plugin().is_none() {
                    s.set_plugin(f.name);
                }
            }
        }
    }
}

/// Runs one Filter plugin over a block. In a sampled cycle the block is timed as a whole,
/// and each node it examined counts as one call with its own code and the block's mean
/// duration: the count and the sum are kube-scheduler's, who times every call; reading the
/// clock around every node would cost a tenth of the scheduling thread.
fn filter_nodes_timed(
    f: &ActiveFilter<'_>,
    observer: &dyn Observer,
    state: &CycleState,
    pod: &PodInfo,
    block: NodeBlock<'_>,
    statuses: &mut [Status],
) -> usize {
    if !observer.sampled() {
        return f.plugin.filter_nodes(state, pod, block, statuses);
    }
    let examined: Vec<usize> = (0..statuses.len())
        .filter(|&i| statuses[i].is_success())
        .collect();
    let start = observer.now();
    let rejected = f.plugin.filter_nodes(state, pod, block, statuses);
    let each = mean(observer.now().saturating_sub(start), examined.len());
    // Most nodes pass: those are counted at once, the others one by one.
    let mut passed = 0;
    for i in examined {
        match statuses[i].code() {
            Code::Success => passed += 1,
            code => observer.plugin_calls(f.name, Point::Filter, code, each, 1),
        }
    }
    if passed > 0 {
        observer.plugin_calls(f.name, Point::Filter, Code::Success, each, passed);
    }
    rejected
}

/// `total` shared evenly by `calls` calls.
fn mean(total: Duration, calls: usize) -> Duration {
    total / u32::try_from(calls.max(1)).unwrap_or(u32::MAX)
}

/// Runs the profile's Filter plugins on `node`, the first rejection winning; plugins whose
/// PreFilter skipped the pod are left out.
pub fn run_filters(
    profile: &Profile,
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
) -> Status {
    let skipped = state.get::<SkippedFilters>();
    for plugin in &profile.filter {
        if skipped.is_some_and(|s| s.0.contains(&plugin.name())) {
            continue;
        }
        let Some(f) = plugin.as_filter() else {
            continue;
        };
        let observer = &*profile.observer;
        observer.runs(plugin.name(), Point::Filter, 1);
        let status = timed_call(
            observer,
            plugin.name(),
            Point::Filter,
            || f.filter(state, pod, node),
            Status::code,
        );
        if !status.is_success() {
            return status.with_plugin(plugin.name());
        }
    }
    Status::success()
}

/// The pods nominated to `node` that `pod` must leave room for: those of higher priority,
/// and those of its priority unless `pod` was nominated to the node before them.
///
/// kube-scheduler counts every other pod of the same priority nominated to the node. When
/// room made for several such pods is not all there yet (after a restart, a victim still
/// being evicted), each then counts the others, finds no room, and preempts again elsewhere,
/// leaving the room it made idle. The pod nominated first keeps its room here, so no
/// eviction is made twice; a pod not nominated to the node still leaves room for them all.
pub fn nominated_ahead<'a>(
    nominated: &'a NominatedPods,
    pod: &'a PodInfo,
    node: &str,
) -> impl Iterator<Item = &'a Arc<PodInfo>> + 'a {
    let on = nominated.on(node);
    let is_pod = |p: &PodInfo| p.namespace == pod.namespace && p.name == pod.name;
    let own_place = on.iter().position(|p| is_pod(p)).unwrap_or(on.len());
    on.iter().enumerate().filter_map(move |(i, p)| {
        let ahead = p.priority > pod.priority || (p.priority == pod.priority && i < own_place);
        (ahead && !is_pod(p)).then_some(p)
    })
}

/// The first of kube-scheduler's two filter passes: the Filter plugins on `node` with the
/// pods of the same or higher priority nominated to it counted there (they must keep the
/// room made for them). A success when there are none.
pub fn run_filters_with_nominated_ahead(
    profile: &Profile,
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
    nominated: &NominatedPods,
) -> Status {
    if nominated.is_empty() {
        return Status::success();
    }
    match with_nominated_ahead(profile, state, pod, node, nominated) {
        None => Status::success(),
        Some(Err(status)) => status,
        Some(Ok((node_with, state_with))) => run_filters(profile, &state_with, pod, &node_with),
    }
}

/// A copy of `node` with the pods nominated ahead of `pod` added, and the cycle state
/// following (copied only when a PreFilter extension runs for the pod); `None` when there
/// are no such pods, an error status when an extension failed.
pub fn with_nominated_ahead<'a>(
    profile: &Profile,
    state: &'a CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
    nominated: &NominatedPods,
) -> Option<Result<(NodeInfo, Cow<'a, CycleState>), Status>> {
    let mut ahead = nominated_ahead(nominated, pod, node.name()).peekable();
    ahead.peek()?;
    let mut node_with = node.clone();
    let mut state_with = Cow::Borrowed(state);
    let extensions = extensions_active(profile, state);
    for p in ahead {
        node_with.add_pod(p.clone());
        if extensions {
            let status = add_pod(profile, state_with.to_mut(), pod, p, &node_with);
            if !status.is_success() {
                return Some(Err(status));
            }
        }
    }
    Some(Ok((node_with, state_with)))
}

/// Runs the Filter plugins on `node` twice when pods of the same or higher priority are
/// nominated to it: first with them counted on the node, then as the node is (a filter
/// such as pod affinity may pass only with them); both must pass. Without such pods, once.
pub fn run_filters_with_nominated(
    profile: &Profile,
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
    nominated: &NominatedPods,
) -> Status {
    let first = run_filters_with_nominated_ahead(profile, state, pod, node, nominated);
    if !first.is_success() {
        return first;
    }
    run_filters(profile, state, pod, node)
}

/// Tells the PreFilter extensions that `added` now runs on `node` (already added to it).
pub fn add_pod(
    profile: &Profile,
    state: &mut CycleState,
    pod: &PodInfo,
    added: &PodInfo,
    node: &NodeInfo,
) -> Status {
    run_extensions(profile, state, |e, state| {
        e.add_pod(state, pod, added, node)
    })
}

/// Tells the PreFilter extensions that `removed` no longer runs on `node` (already removed
/// from it).
pub fn remove_pod(
    profile: &Profile,
    state: &mut CycleState,
    pod: &PodInfo,
    removed: &PodInfo,
    node: &NodeInfo,
) -> Status {
    run_extensions(profile, state, |e, state| {
        e.remove_pod(state, pod, removed, node)
    })
}

/// Whether the plugin named `name` skipped the pod at PreFilter.
fn skipped(state: &CycleState, name: &str) -> bool {
    state
        .get::<SkippedFilters>()
        .is_some_and(|s| s.0.contains(&name))
}

/// Whether some PreFilter extension runs for the pod: only then do pods added to or taken
/// off a node change the cycle state, so that a copy of it is needed.
pub fn extensions_active(profile: &Profile, state: &CycleState) -> bool {
    profile
        .pre_filter
        .iter()
        .any(|p| p.as_pre_filter_extensions().is_some() && !skipped(state, p.name()))
}

fn run_extensions(
    profile: &Profile,
    state: &mut CycleState,
    mut call: impl FnMut(&dyn super::plugin::PreFilterExtensions, &mut CycleState) -> Status,
) -> Status {
    for plugin in &profile.pre_filter {
        let Some(e) = plugin.as_pre_filter_extensions() else {
            continue;
        };
        if skipped(state, plugin.name()) {
            continue;
        }
        let status = call(e, state);
        if !status.is_success() {
            let message = format!(
                "running {} PreFilter extension: {}",
                plugin.name(),
                status.message()
            );
            return Status::new(Code::Error, message).with_plugin(plugin.name());
        }
    }
    Status::success()
}

/// Runs the PostFilter plugins after no node was found feasible, as kube-scheduler does:
/// the first that succeeds (or finds the pod unresolvable) ends the run with its result;
/// otherwise the last result that changes the nomination is kept. Returns the result and
/// the message for the diagnosis (that plugin's, or the reasons of all), if any.
pub fn run_post_filter_plugins(
    profile: &Profile,
    state: &CycleState,
    pod: &PodInfo,
    input: &PostFilterInput<'_>,
) -> (PostFilterResult, Option<String>) {
    let mut reject_waiting = Vec::new();
    let mut group_failed = false;
    let mut reasons: Vec<String> = Vec::new();
    let mut kept = PostFilterResult::default();
    let observer = &*profile.observer;
    let mut run = PointRun::start(observer, Point::PostFilter);
    let mut last = Code::Unschedulable;
    for plugin in &profile.post_filter {
        let Some(pf) = plugin.as_post_filter() else {
            continue;
        };
        observer.runs(plugin.name(), Point::PostFilter, 1);
        let (mut result, status) = run.call(
            plugin.name(),
            || pf.post_filter(state, pod, input),
            |(_, s)| s.code(),
        );
        reject_waiting.append(&mut result.reject_waiting);
        group_failed |= result.group_failed;
        last = status.code();
        if status.is_success()
            || !status.is_rejected()
            || status.code() == Code::UnschedulableAndUnresolvable
        {
            run.end(status.code());
            let message = (!status.reasons().is_empty()).then(|| status.message());
            result.reject_waiting = reject_waiting;
            result.group_failed = group_failed;
            return (result, message);
        }
        if result.nomination != Nomination::Keep {
            kept = result;
        }
        reasons.extend(status.reasons().iter().map(|r| r.to_string()));
    }
    run.end(last);
    kept.reject_waiting = reject_waiting;
    kept.group_failed = group_failed;
    (kept, (!reasons.is_empty()).then(|| reasons.join(", ")))
}

/// Runs every PreScore plugin; returns the names of those that skip the pod, or the status
/// of the first that fails.
pub fn run_pre_score(
    profile: &Profile,
    state: &mut CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
    feasible: &[&NodeInfo],
) -> Result<Vec<&'static str>, Status> {
    let mut skipped = Vec::new();
    let observer = &*profile.observer;
    let mut run = PointRun::start(observer, Point::PreScore);
    for plugin in &profile.pre_score {
        let Some(ps) = plugin.as_pre_score() else {
            continue;
        };
        let status = run
            .call(
                plugin.name(),
                || ps.pre_score(state, pod, snapshot, feasible),
                Status::code,
            )
            .with_plugin(plugin.name());
        match status.code() {
            Code::Success => observer.runs(plugin.name(), Point::PreScore, 1),
            Code::Skip => skipped.push(plugin.name()),
            code => {
                observer.runs(plugin.name(), Point::PreScore, 1);
                run.end(code);
                return Err(status);
            }
        }
    }
    run.end(Code::Success);
    Ok(skipped)
}

/// Runs the Score plugins of `active` (each with its name and weight) on the nodes of
/// `block`, each into its column of `cells` (the block's length apart, in order); a plugin
/// whose score is the same on every node (`uniform`) is not called. In a sampled cycle
/// each block is timed as a whole, as Filter's are: one call per node with the block's
/// mean duration (a failed block counts as one failed call).
pub fn run_score_block(
    active: &[(&dyn ScorePlugin, &'static str, i64)],
    uniform: &[Option<i64>],
    state: &CycleState,
    pod: &PodInfo,
    block: NodeBlock<'_>,
    cells: &mut [i64],
) -> Result<(), Status> {
    let observer = state.observer();
    let len = block.nodes.len();
    let sampled = observer.sampled();
    for (j, (s, name, _)) in active.iter().enumerate() {
        if uniform[j].is_some() {
            continue;
        }
        let column = &mut cells[j * len..(j + 1) * len];
        if !sampled {
            s.score_nodes(state, pod, block, column)
                .map_err(|e| e.with_plugin(name))?;
            continue;
        }
        let start = observer.now();
        let result = s.score_nodes(state, pod, block, column);
        let elapsed = observer.now().saturating_sub(start);
        match result {
            Ok(()) => {
                let each = mean(elapsed, len);
                observer.plugin_calls(name, Point::Score, Code::Success, each, len as u64);
            }
            Err(status) => {
                observer.plugin_calls(name, Point::Score, status.code(), elapsed, 1);
                return Err(status.with_plugin(name));
            }
        }
    }
    Ok(())
}

/// Runs NormalizeScore of `plugin` (named `name`) on `scores` when it normalizes, then
/// checks that every score is within `MIN_NODE_SCORE..=MAX_NODE_SCORE`, as kube-scheduler's
/// `RunScorePlugins` does.
pub fn run_normalize(
    plugin: &dyn ScorePlugin,
    name: &'static str,
    state: &CycleState,
    pod: &PodInfo,
    scores: &mut [NodeScore],
) -> Result<(), Status> {
    if plugin.normalizes() {
        let status = timed_call(
            state.observer(),
            name,
            Point::Normalize,
            || plugin.normalize(state, pod, scores),
            Status::code,
        );
        if !status.is_success() {
            return Err(status.with_plugin(name));
        }
    }
    match scores
        .iter()
        .find(|s| !(MIN_NODE_SCORE..=MAX_NODE_SCORE).contains(&s.score))
    {
        Some(bad) => Err(out_of_range(name, bad.score)),
        None => Ok(()),
    }
}

/// Checks the raw scores of a plugin that does not normalize: each within
/// `MIN_NODE_SCORE..=MAX_NODE_SCORE` (tested on their bounds first, the common case).
pub fn check_scores(name: &'static str, scores: &[i64]) -> Result<(), Status> {
    let (low, high) = scores
        .iter()
        .fold((MAX_NODE_SCORE, MIN_NODE_SCORE), |(l, h), &c| {
            (l.min(c), h.max(c))
        });
    if low < MIN_NODE_SCORE || high > MAX_NODE_SCORE {
        let bad = scores
            .iter()
            .find(|c| !(MIN_NODE_SCORE..=MAX_NODE_SCORE).contains(c));
        return Err(out_of_range(name, bad.copied().unwrap_or(low)));
    }
    Ok(())
}

/// A score out of `MIN_NODE_SCORE..=MAX_NODE_SCORE`, in kube-scheduler's words.
fn out_of_range(name: &'static str, score: i64) -> Status {
    Status::error(format!(
        "plugin {name} returns an invalid score {score}, it should be in the range of [{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] after normalizing"
    ))
    .with_plugin(name)
}

/// Runs the Reserve plugins in order; when one fails, those before it (and it) are
/// unreserved in reverse order, and its status is returned.
pub fn run_reserve(
    profile: &Profile,
    state: &mut CycleState,
    assumed: &PodInfo,
    node: &NodeInfo,
) -> Result<(), Status> {
    let mut run = PointRun::start(&*profile.observer, Point::Reserve);
    for (i, plugin) in profile.reserve.iter().enumerate() {
        let Some(r) = plugin.as_reserve() else {
            continue;
        };
        let status = run.call(
            plugin.name(),
            || r.reserve(state, assumed, node),
            Status::code,
        );
        if !status.is_success() {
            run.end(status.code());
            unreserve(profile, state, assumed, node.name(), i + 1);
            return Err(status.with_plugin(plugin.name()));
        }
    }
    run.end(Code::Success);
    Ok(())
}

/// Runs Unreserve on the Reserve plugins before position `upto`, in reverse order.
pub fn unreserve(
    profile: &Profile,
    state: &mut CycleState,
    pod: &PodInfo,
    node: &str,
    upto: usize,
) {
    let observer = &*profile.observer;
    for plugin in profile.reserve[..upto].iter().rev() {
        if let Some(r) = plugin.as_reserve() {
            timed_call(
                observer,
                plugin.name(),
                Point::Unreserve,
                || r.unreserve(state, pod, node),
                |()| Code::Success,
            );
        }
    }
}

/// Runs the Permit plugins, as kube-scheduler's `RunPermitPlugins`: the first that rejects
/// the pod (or fails) ends it; the waits the others ask for are returned, one per plugin
/// (none: the pod may be bound now).
pub fn run_permit(
    profile: &Profile,
    state: &mut CycleState,
    assumed: &PodInfo,
    node: &str,
    waiting: &mut WaitingPods,
) -> Result<Vec<(&'static str, Duration)>, Status> {
    let mut waits = Vec::new();
    let mut run = PointRun::start(&*profile.observer, Point::Permit);
    for plugin in &profile.permit {
        let Some(p) = plugin.as_permit() else {
            continue;
        };
        let (status, timeout) = run.call(
            plugin.name(),
            || p.permit(state, assumed, node, waiting),
            |(s, _)| s.code(),
        );
        match status.code() {
            Code::Success => {}
            Code::Wait => waits.push((plugin.name(), timeout)),
            code => {
                run.end(code);
                return Err(status.with_plugin(plugin.name()));
            }
        }
    }
    run.end(if waits.is_empty() {
        Code::Success
    } else {
        Code::Wait
    });
    Ok(waits)
}

/// Tells the Permit plugins that `pod` will not be bound (see
/// [`PermitPlugin::unreserved`](super::PermitPlugin::unreserved)).
pub fn run_unreserved(profile: &Profile, pod: &PodInfo, waiting: &mut WaitingPods) {
    for plugin in &profile.permit {
        if let Some(p) = plugin.as_permit() {
            p.unreserved(pod, waiting);
        }
    }
}

/// The work the PreBind plugins ask for before the binding, in order.
pub fn run_pre_bind(
    profile: &Profile,
    state: &CycleState,
    assumed: &PodInfo,
    node: &str,
) -> Result<Vec<PreBindAction>, Status> {
    let mut actions = Vec::new();
    for plugin in &profile.pre_bind {
        let Some(p) = plugin.as_pre_bind() else {
            continue;
        };
        if let Some(action) = p
            .pre_bind(state, assumed, node)
            .map_err(|s| s.with_plugin(plugin.name()))?
        {
            actions.push(action);
        }
    }
    Ok(actions)
}

/// The binding the first Bind plugin that does not skip the pod plans.
pub fn run_bind(
    profile: &Profile,
    state: &CycleState,
    assumed: &PodInfo,
    node: &Arc<str>,
) -> Result<BindPlan, Status> {
    for plugin in &profile.bind {
        let Some(b) = plugin.as_bind() else { continue };
        match b.bind(state, assumed, node) {
            Ok(plan) => return Ok(plan),
            Err(s) if s.is_skip() => continue,
            Err(s) => return Err(s.with_plugin(plugin.name())),
        }
    }
    Err(Status::error("no bind plugin bound the pod"))
}

/// Runs the PostBind plugins once `pod` is bound to `node`.
pub fn run_post_bind(profile: &Profile, pod: &PodInfo, node: &str) {
    for plugin in &profile.post_bind {
        if let Some(p) = plugin.as_post_bind() {
            p.post_bind(pod, node);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;

    fn ahead(nominated: &NominatedPods, pod: &PodInfo, node: &str) -> Vec<String> {
        nominated_ahead(nominated, pod, node)
            .map(|p| p.name.clone())
            .collect()
    }

    #[test]
    fn pods_nominated_first_keep_their_room_from_pods_of_their_priority() {
        let mut n = NominatedPods::default();
        let (first, second) = (pod("first").build(), pod("second").build());
        let (high, low) = (
            pod("high").priority(10).build(),
            pod("low").priority(-1).build(),
        );
        for p in [&first, &high, &second, &low] {
            n.nominate(p.clone(), "n1".into());
        }
        assert_eq!(ahead(&n, &first, "n1"), ["high"]);
        assert_eq!(ahead(&n, &second, "n1"), ["first", "high"]);
        assert_eq!(ahead(&n, &low, "n1"), ["first", "high", "second"]);
        // A pod not nominated to the node leaves room for every pod of its priority or
        // higher there.
        let other = pod("other").build();
        assert_eq!(ahead(&n, &other, "n1"), ["first", "high", "second"]);
        assert!(ahead(&n, &other, "n2").is_empty());

        // Nominated again to the same node (its status read back), a pod keeps its place;
        // to another node, it goes last there.
        n.nominate(pod("first").label("read", "back").build(), "n1".into());
        assert_eq!(ahead(&n, &second, "n1"), ["first", "high"]);
        n.nominate(first.clone(), "n2".into());
        n.nominate(first.clone(), "n1".into());
        assert_eq!(ahead(&n, &second, "n1"), ["high"]);
        assert_eq!(ahead(&n, &first, "n1"), ["high", "second"]);
    }
}
