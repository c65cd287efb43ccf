//! The victims on one node and the choice among candidate nodes, by kube-scheduler's rules
//! (`SelectVictimsOnNode`, `filterPodsWithPDBViolation`, `pickOneNodeForPreemption`).

use std::borrow::Cow;
use std::cmp::Ordering;
use std::sync::Arc;

use crate::cache::{NodeInfo, Snapshot};
use crate::framework::runners::{
    add_pod, extensions_active, remove_pod, run_filters, with_nominated_ahead,
};
use crate::framework::{CycleState, NominatedPods, PostFilterInput, Profile, Status};
use crate::model::PodInfo;
use crate::model::disruption_budget::DisruptionBudgetModel;

use super::ERR_NO_VICTIMS;

/// The cluster's PodDisruptionBudgets, as the snapshot holds them.
pub fn budgets(snapshot: &Snapshot) -> Vec<Arc<DisruptionBudgetModel>> {
    snapshot.disruption_budgets().cloned().collect()
}

/// One node where preemption would let the pod fit.
pub type Candidate = crate::framework::PreemptionCandidate;

/// A pod's start time in nanoseconds; a pod not started yet counts as starting now, after
/// every pod that did.
fn start_nanos(pod: &PodInfo) -> i128 {
    pod.start_time.map_or(i128::MAX, |(s, n)| {
        i128::from(s) * 1_000_000_000 + i128::from(n)
    })
}

/// kube-scheduler's `MoreImportantPod` as an ordering: higher priority first, then the
/// earlier start.
pub fn more_important(a: &PodInfo, b: &PodInfo) -> Ordering {
    b.priority
        .cmp(&a.priority)
        .then_with(|| start_nanos(a).cmp(&start_nanos(b)))
}

/// Splits `pods` (in order) into those whose eviction would violate a budget and the
/// others: each budget covering a pod is charged for it (unless the API already counted
/// it), and a pod that takes a budget below zero violates it.
fn split_by_budget(
    pods: Vec<Arc<PodInfo>>,
    budgets: &[Arc<DisruptionBudgetModel>],
) -> (Vec<Arc<PodInfo>>, Vec<Arc<PodInfo>>) {
    let mut allowed: Vec<i32> = budgets.iter().map(|b| b.disruptions_allowed).collect();
    let (mut violating, mut other) = (Vec::new(), Vec::new());
    for pod in pods {
        let mut violates = false;
        for (b, left) in budgets.iter().zip(allowed.iter_mut()) {
            if !b.covers(&pod) || b.disrupted_pods.contains(&pod.name) {
                continue;
            }
            *left -= 1;
            if *left < 0 {
                violates = true;
            }
        }
        if violates {
            violating.push(pod);
        } else {
            other.push(pod);
        }
    }
    (violating, other)
}

/// The fewest victims on `node` that let `pod` fit: every pod of lower priority is taken
/// off, the pod must then fit; then they are put back one by one, most important first
/// (those protected by a budget before the others), each staying if the pod still fits.
/// A node where the pod fits even without them all is an error status of the filters; one
/// without lower-priority pods is unresolvable.
pub fn select_on_node(
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
    input: &PostFilterInput<'_>,
    budgets: &[Arc<DisruptionBudgetModel>],
) -> Result<Candidate, Status> {
    let mut potential: Vec<Arc<PodInfo>> = node
        .pods
        .iter()
        .filter(|p| p.priority < pod.priority)
        .cloned()
        .collect();
    if potential.is_empty() {
        return Err(Status::unresolvable(ERR_NO_VICTIMS));
    }
    let mut dry = DryRun::without(input.profile, state, pod, node, input.nominated, &potential)?;
    potential.sort_by(|a, b| more_important(a, b));
    let (violating, other) = split_by_budget(potential, budgets);
    let mixed = !violating.is_empty() && !other.is_empty();
    let mut victims: Vec<Arc<PodInfo>> = Vec::new();
    let mut pdb_violations = 0;
    let mut reprieve =
        |p: &Arc<PodInfo>, victims: &mut Vec<Arc<PodInfo>>| -> Result<bool, Status> {
            dry.add(p)?;
            if dry.fits().is_success() {
                return Ok(true);
            }
            dry.remove(p)?;
            victims.push(p.clone());
            Ok(false)
        };
    for p in &violating {
        if !reprieve(p, &mut victims)? {
            pdb_violations += 1;
        }
    }
    for p in &other {
        reprieve(p, &mut victims)?;
    }
    if mixed {
        victims.sort_by(|a, b| more_important(a, b));
    }
    Ok(Candidate {
        node: node.name().clone(),
        victims,
        pdb_violations,
    })
}

/// A copy of a node that the dry run takes pods off and puts back, with the cycle state
/// following; and, where pods of the preemptor's priority or higher are nominated to the
/// node, a second copy with them counted (kube-scheduler's first filter pass), kept in step
/// with the first so that no check copies the node again. The cycle state is copied only
/// when a PreFilter extension runs for the pod (else the changes leave it as it is).
struct DryRun<'a> {
    profile: &'a Profile,
    pod: &'a PodInfo,
    node: NodeInfo,
    state: Cow<'a, CycleState>,
    /// Whether some PreFilter extension runs for the pod.
    extensions: bool,
    /// The copy with the nominated pods, when there are any.
    ahead: Option<(NodeInfo, Cow<'a, CycleState>)>,
}

impl<'a> DryRun<'a> {
    /// `node` with `victims` taken off, if the pod then fits there; else the rejection. The
    /// copy with the nominated pods is checked first, as kube-scheduler's first pass is:
    /// where they take the room (most nodes a preemption is refused on, once many pods
    /// are nominated), the plain copy is never made.
    fn without(
        profile: &'a Profile,
        state: &'a CycleState,
        pod: &'a PodInfo,
        node: &NodeInfo,
        nominated: &NominatedPods,
        victims: &[Arc<PodInfo>],
    ) -> Result<Self, Status> {
        let extensions = extensions_active(profile, state);
        let take_off = |node: &mut NodeInfo, state: &mut Cow<'a, CycleState>| {
            for p in victims {
                node.remove_pod(&p.namespace, &p.name);
                if extensions {
                    check(remove_pod(profile, state.to_mut(), pod, p, node))?;
                }
            }
            Ok::<(), Status>(())
        };
        let ahead = match with_nominated_ahead(profile, state, pod, node, nominated) {
            None => None,
            Some(with) => {
                let (mut node_with, mut state_with) = with?;
                take_off(&mut node_with, &mut state_with)?;
                let status = run_filters(profile, &state_with, pod, &node_with);
                if !status.is_success() {
                    return Err(status);
                }
                Some((node_with, state_with))
            }
        };
        let mut plain = node.clone();
        let mut state = Cow::Borrowed(state);
        take_off(&mut plain, &mut state)?;
        let status = run_filters(profile, &state, pod, &plain);
        if !status.is_success() {
            return Err(status);
        }
        Ok(DryRun {
            profile,
            pod,
            node: plain,
            state,
            extensions,
            ahead,
        })
    }

    /// Takes `p` off the node.
    fn remove(&mut self, p: &PodInfo) -> Result<(), Status> {
        let (profile, pod) = (self.profile, self.pod);
        self.node.remove_pod(&p.namespace, &p.name);
        if self.extensions {
            check(remove_pod(profile, self.state.to_mut(), pod, p, &self.node))?;
        }
        if let Some((node, state)) = &mut self.ahead {
            node.remove_pod(&p.namespace, &p.name);
            if self.extensions {
                check(remove_pod(profile, state.to_mut(), pod, p, node))?;
            }
        }
        Ok(())
    }

    /// Puts `p` back on the node.
    fn add(&mut self, p: &Arc<PodInfo>) -> Result<(), Status> {
        let (profile, pod) = (self.profile, self.pod);
        self.node.add_pod(p.clone());
        if self.extensions {
            check(add_pod(profile, self.state.to_mut(), pod, p, &self.node))?;
        }
        if let Some((node, state)) = &mut self.ahead {
            node.add_pod(p.clone());
            if self.extensions {
                check(add_pod(profile, state.to_mut(), pod, p, node))?;
            }
        }
        Ok(())
    }

    /// Whether the pod fits the node as it now is: with the nominated pods counted, then
    /// without them; the first rejection wins.
    fn fits(&self) -> Status {
        if let Some((node, state)) = &self.ahead {
            let status = run_filters(self.profile, state, self.pod, node);
            if !status.is_success() {
                return status;
            }
        }
        run_filters(self.profile, &self.state, self.pod, &self.node)
    }
}

fn check(status: Status) -> Result<(), Status> {
    if status.is_success() {
        Ok(())
    } else {
        Err(status)
    }
}

/// The earliest start among the candidate's victims of the highest priority.
fn earliest_start_of_highest(c: &Candidate) -> i128 {
    let Some(first) = c.victims.first() else {
        return i128::MIN;
    };
    c.victims
        .iter()
        .filter(|p| p.priority == first.priority)
        .map(|p| start_nanos(p))
        .min()
        .unwrap_or(i128::MAX)
}

/// kube-scheduler's choice among candidates, criterion by criterion, each narrowing the
/// ties of the one before: fewest budget violations, lowest highest victim priority,
/// smallest sum of victim priorities, fewest victims, latest start of the most important
/// victims; the first left wins. Returns its index and the criterion that decided.
pub fn pick_one_node(candidates: &[Candidate]) -> (usize, String) {
    type Criterion = (&'static str, fn(&Candidate) -> i128);
    const CRITERIA: [Criterion; 5] = [
        ("fewest PodDisruptionBudget violations", |c| {
            -(c.pdb_violations as i128)
        }),
        ("lowest priority of its most important victim", |c| {
            -c.victims.first().map_or(0, |p| i128::from(p.priority))
        }),
        ("smallest sum of victim priorities", |c| {
            // As kube-scheduler, priorities are shifted to be non-negative first, so that
            // more victims of a negative priority do not sum lower than fewer.
            -c.victims
                .iter()
                .map(|p| i128::from(p.priority) + i128::from(i32::MAX) + 1)
                .sum::<i128>()
        }),
        ("fewest victims", |c| -(c.victims.len() as i128)),
        (
            "latest start of its most important victims",
            earliest_start_of_highest,
        ),
    ];
    let mut left: Vec<usize> = (0..candidates.len()).collect();
    if left.len() == 1 {
        return (0, "the only candidate".to_string());
    }
    for (name, score) in CRITERIA {
        let best = left
            .iter()
            .map(|&i| score(&candidates[i]))
            .max()
            .unwrap_or(0);
        left.retain(|&i| score(&candidates[i]) == best);
        if left.len() == 1 {
            return (left[0], name.to_string());
        }
    }
    (
        left.first().copied().unwrap_or(0),
        "first of the candidates tied on every criterion".to_string(),
    )
}
