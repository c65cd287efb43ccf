//! DefaultPreemption: kube-scheduler's PostFilter plugin. When no node fits a pod, it looks
//! for nodes where evicting pods of lower priority would let the pod fit, picks on each the
//! fewest such victims (reprieving the most important first, PodDisruptionBudgets respected
//! where possible), chooses the node whose eviction hurts least, and nominates the pod
//! there. The evictions themselves are the front end's: the core only decides.

mod args;
mod victims;

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use rayon::prelude::*;

use crate::cache::{NodeInfo, Tracked};
use crate::framework::{
    ArgsError, Code, CycleState, DefaultPlace, NominatedPods, Nomination, PendingCandidates,
    Plugin, PluginSpec, PostFilterInput, PostFilterPlugin, PostFilterResult, Preemption, Status,
    decode_args,
};
use crate::model::PodInfo;

pub use args::DefaultPreemptionArgs;
pub use victims::{Candidate, more_important, pick_one_node};

/// The name used in configuration files.
pub const NAME: &str = "DefaultPreemption";

/// A node with no pod of lower priority than the preemptor.
pub const ERR_NO_VICTIMS: &str = "No preemption victims found for incoming pod";
/// A node where evicting cannot help (the filters rejected it as unresolvable).
pub const ERR_NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
/// A pod that never preempts.
pub const ERR_POLICY_NEVER: &str = "not eligible due to preemptionPolicy=Never.";
/// A pod whose earlier victims are still terminating on its nominated node.
pub const ERR_TERMINATING_VICTIM: &str =
    "not eligible due to a terminating pod on the nominated node.";

/// Nodes the dry run tries at a time, at least: fewer would hand too little to the pool.
const MIN_DRY_RUN_BATCH: usize = 16;
/// From this many nodes in a batch, the dry run runs on the pool's threads.
const PARALLEL_DRY_RUN: usize = 32;

/// The DefaultPreemption plugin.
#[derive(Debug, Clone)]
pub struct DefaultPreemption {
    args: DefaultPreemptionArgs,
}

impl DefaultPreemption {
    /// The plugin with `args`.
    pub fn new(args: DefaultPreemptionArgs) -> Self {
        DefaultPreemption { args }
    }

    /// How many candidates a search wants out of `nodes` potential ones:
    /// `minCandidateNodesPercentage` of them, at least `minCandidateNodesAbsolute`, at most
    /// all.
    pub fn candidates_wanted(&self, nodes: usize) -> usize {
        let n = i64::try_from(nodes).unwrap_or(i64::MAX);
        let share = n * i64::from(self.args.min_candidate_nodes_percentage) / 100;
        let wanted = share.max(i64::from(self.args.min_candidate_nodes_absolute));
        usize::try_from(wanted.min(n)).unwrap_or(nodes)
    }

    /// kube-scheduler's eligibility check: a pod with `preemptionPolicy: Never` never
    /// preempts, and one already nominated waits while a victim of its earlier preemption
    /// still terminates there (unless that node now rejects it as unresolvable). Victims
    /// whose eviction is still being carried out count as terminating.
    fn eligible(&self, pod: &PodInfo, input: &PostFilterInput<'_>) -> Result<(), &'static str> {
        if pod.never_preempts {
            return Err(ERR_POLICY_NEVER);
        }
        if input.preemption_running {
            return Err(ERR_TERMINATING_VICTIM);
        }
        let nominated = input
            .nominated
            .node_of(&pod.namespace, &pod.name)
            .or(pod.nominated_node.as_ref());
        let Some(name) = nominated else {
            return Ok(());
        };
        let unresolvable = input
            .rejections
            .iter()
            .any(|(n, s)| n == name && s.code() == Code::UnschedulableAndUnresolvable);
        if unresolvable {
            return Ok(());
        }
        let terminating = input.snapshot.get(name).is_some_and(|node| {
            node.pods
                .iter()
                .any(|p| p.priority < pod.priority && p.terminating && p.preempted_by_scheduler)
        });
        if terminating {
            return Err(ERR_TERMINATING_VICTIM);
        }
        Ok(())
    }
}

impl Plugin for DefaultPreemption {
    fn name(&self) -> &'static str {
        NAME
    }

    fn cache_state(&self) -> &'static [Tracked] {
        &[Tracked::DisruptionBudgets]
    }

    fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        Some(self)
    }
}

/// Where the search starts among the potential nodes: kube-scheduler draws it at random
/// for every attempt; gantry derives it from the pod, so that a replay finds the same
/// candidates.
fn start_offset(pod: &PodInfo, len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    let mut h = rustc_hash::FxHasher::default();
    pod.namespace.hash(&mut h);
    pod.name.hash(&mut h);
    usize::try_from(h.finish() % len as u64).unwrap_or(0)
}

/// kube-scheduler's message when no candidate was found: every node the search rejected
/// with its reason, the others as not helped by preemption.
fn no_candidates_message(all_nodes: usize, rejected: &[(Arc<str>, Status)]) -> String {
    crate::cycle::nodes_available_message(all_nodes, rejected, Some(ERR_NOT_HELPFUL))
}

impl PostFilterPlugin for DefaultPreemption {
    /// Tries preemption for a pod no node fits. On success the pod is nominated to the
    /// chosen node and the result names the victims; otherwise the status says why, after
    /// `preemption: `, as kube-scheduler words it.
    fn post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        input: &PostFilterInput<'_>,
    ) -> (PostFilterResult, Status) {
        let fail =
            |result, code, msg: String| (result, Status::new(code, format!("preemption: {msg}")));
        if let Err(msg) = self.eligible(pod, input) {
            return fail(
                PostFilterResult::default(),
                Code::Unschedulable,
                msg.to_string(),
            );
        }
        let all_nodes = input.snapshot.len();
        let potential: Vec<&Arc<NodeInfo>> = input
            .rejections
            .iter()
            .filter(|(_, s)| s.code() == Code::Unschedulable)
            .filter_map(|(n, _)| input.snapshot.get(n))
            .collect();
        let cleared = PostFilterResult {
            nomination: Nomination::Clear,
            ..PostFilterResult::default()
        };
        if potential.is_empty() {
            return fail(
                cleared,
                Code::Unschedulable,
                no_candidates_message(all_nodes, &[]),
            );
        }
        let budgets = victims::budgets(input.snapshot);
        let wanted = self.candidates_wanted(potential.len());
        let offset = start_offset(pod, potential.len());
        let mut clean: Vec<Candidate> = Vec::new();
        let mut violating: Vec<Candidate> = Vec::new();
        let mut rejected: Vec<(Arc<str>, Status)> = Vec::new();
        let mut examined = 0;
        'search: while examined < potential.len() {
            // The nodes are tried in a fixed order and the search stops as soon as enough
            // candidates are found. Each node gives one candidate at most, so as many nodes
            // as candidates are still wanted are tried at a time (on the pool's threads when
            // they are many), and their results taken in order: the outcome is that of one
            // node at a time.
            let still_wanted = wanted.saturating_sub(clean.len() + violating.len());
            let min_batch = if input.pool.is_some() {
                MIN_DRY_RUN_BATCH
            } else {
                1
            };
            let len = still_wanted.max(min_batch).min(potential.len() - examined);
            let batch: Vec<&Arc<NodeInfo>> = (examined..examined + len)
                .map(|i| potential[(offset + i) % potential.len()])
                .collect();
            examined += len;
            let select =
                |node: &&Arc<NodeInfo>| victims::select_on_node(state, pod, node, input, &budgets);
            let results: Vec<Result<Candidate, Status>> = match input.pool {
                Some(pool) if len >= PARALLEL_DRY_RUN => {
                    pool.install(|| batch.par_iter().map(select).collect())
                }
                _ => batch.iter().map(select).collect(),
            };
            for (node, result) in batch.iter().zip(results) {
                match result {
                    Ok(c) if c.pdb_violations == 0 => {
                        if clean.len() < wanted {
                            clean.push(c);
                        }
                    }
                    Ok(c) => {
                        if violating.len() < wanted {
                            violating.push(c);
                        }
                    }
                    Err(status) if status.code() == Code::Error => {
                        return (PostFilterResult::default(), status.with_plugin(NAME));
                    }
                    Err(status) => rejected.push((node.name().clone(), status)),
                }
                if !clean.is_empty() && clean.len() + violating.len() >= wanted {
                    break 'search;
                }
            }
        }
        clean.append(&mut violating);
        let candidates = clean;
        if candidates.is_empty() {
            return fail(
                cleared,
                Code::Unschedulable,
                no_candidates_message(all_nodes, &rejected),
            );
        }
        if input.extenders_cut {
            let pending = PendingCandidates {
                plugin: NAME,
                candidates,
            };
            let result = PostFilterResult {
                candidates: Some(Box::new(pending)),
                ..PostFilterResult::default()
            };
            return (result, Status::success());
        }
        chosen(pod, &candidates, input.nominated)
    }

    /// What the extenders left of the candidates, by kube-scheduler's same criteria; none
    /// left is `preemption: no candidate node for preemption`, the nomination cleared.
    fn choose(
        &self,
        pod: &PodInfo,
        mut candidates: Vec<Candidate>,
        nominated: &NominatedPods,
    ) -> (PostFilterResult, Status) {
        if candidates.is_empty() {
            let cleared = PostFilterResult {
                nomination: Nomination::Clear,
                ..PostFilterResult::default()
            };
            return (
                cleared,
                Status::unschedulable("preemption: no candidate node for preemption"),
            );
        }
        for c in &mut candidates {
            c.victims.sort_by(|a, b| more_important(a, b));
        }
        chosen(pod, &candidates, nominated)
    }
}

/// The best of `candidates` (not empty), the pod nominated there and its victims evicted.
fn chosen(
    pod: &PodInfo,
    candidates: &[Candidate],
    nominated: &NominatedPods,
) -> (PostFilterResult, Status) {
    let (chosen, reason) = pick_one_node(candidates);
    let chosen = &candidates[chosen];
    let denominated = nominated
        .on(&chosen.node)
        .iter()
        .filter(|p| p.priority < pod.priority)
        .cloned()
        .collect();
    let result = PostFilterResult {
        nomination: Nomination::Set(chosen.node.clone()),
        preemption: Some(Preemption {
            node: chosen.node.clone(),
            victims: chosen.victims.clone(),
            denominated,
            reason,
            released: Vec::new(),
        }),
        ..PostFilterResult::default()
    };
    (result, Status::success())
}

/// The plugin for the registry, with its place in kube-scheduler's default profile. The
/// simulator and `gantry run` (`adapter::preemption`: evictions and nominations) carry its
/// decisions out.
pub const SPEC: PluginSpec = PluginSpec {
    name: NAME,
    factory,
    default: Some(DefaultPlace {
        order: 105,
        weight: None,
    }),
    args: Some(crate::framework::resolved_args::<DefaultPreemptionArgs>),
};

/// Builds the plugin from its arguments.
pub fn factory(args: Option<&serde_json::Value>) -> Result<Arc<dyn Plugin>, ArgsError> {
    let args: DefaultPreemptionArgs = decode_args(args)?;
    Ok(Arc::new(DefaultPreemption::new(args)))
}
