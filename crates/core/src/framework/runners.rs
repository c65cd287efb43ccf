//! Running a profile's Filter plugins on one node outside the cycle's batched pass: with the
//! pods nominated to the node counted as if they ran there (kube-scheduler's
//! `RunFilterPluginsWithNominatedPods`), and with pods added to or removed from a copy of the
//! node, the cycle state following through the PreFilter extensions (preemption's dry run).

use std::borrow::Cow;
use std::sync::Arc;

use crate::cache::NodeInfo;
use crate::model::PodInfo;

use super::cycle_state::CycleState;
use super::nominated::NominatedPods;
use super::plugin::Profile;
use super::status::{Code, Status};

/// The plugins whose PreFilter skipped the pod this cycle: their Filter and PreFilter
/// extensions do not run. The cycle keeps it in the cycle state.
#[derive(Debug, Clone, Default)]
pub struct SkippedFilters(pub Vec<&'static str>);

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
        let status = f.filter(state, pod, node);
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
