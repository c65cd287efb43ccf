//! The extension points, one trait each, with kube-scheduler's contracts, and the profile
//! that holds a scheduler's plugins at each (one file: each names the other).
//!
//! A plugin is one value implementing [`Plugin`] and any of the extension-point traits; it
//! announces which through the `as_*` methods, so a profile can place it at every point it
//! implements (kube-scheduler's `multiPoint`).

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use crate::cache::{ClaimKey, NodeInfo, NodeRow, Snapshot, Tracked, VolumeDecision};
use crate::model::PodInfo;

use super::by_domain::{DomainScores, DomainVerdict};
use super::cycle_state::CycleState;
use super::events::EventHint;
use super::nominated::NominatedPods;
use super::observer::Observer;
use super::status::Status;
use super::waiting::WaitingPods;

/// Highest score a plugin may give a node after normalization.
pub const MAX_NODE_SCORE: i64 = 100;
/// Lowest score a plugin may give a node after normalization.
pub const MIN_NODE_SCORE: i64 = 0;

/// What every plugin is: a name, and the extension points it implements.
pub trait Plugin: Send + Sync + 'static {
    /// The name used in configuration files (`NodeResourcesFit`, ...).
    fn name(&self) -> &'static str;

    /// The QueueSort implementation, if any.
    fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        None
    }
    /// The PreEnqueue implementation, if any.
    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        None
    }
    /// The PreFilter implementation, if any.
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        None
    }
    /// The PreFilter extensions (keeping the PreFilter state right as pods are added to or
    /// removed from a node), if any.
    fn as_pre_filter_extensions(&self) -> Option<&dyn PreFilterExtensions> {
        None
    }
    /// The Filter implementation, if any.
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        None
    }
    /// The PostFilter implementation, if any.
    fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        None
    }
    /// The PreScore implementation, if any.
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        None
    }
    /// The Score implementation, if any.
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        None
    }
    /// The Reserve implementation, if any.
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        None
    }
    /// The Permit implementation, if any.
    fn as_permit(&self) -> Option<&dyn PermitPlugin> {
        None
    }
    /// The PreBind implementation, if any.
    fn as_pre_bind(&self) -> Option<&dyn PreBindPlugin> {
        None
    }
    /// The Bind implementation, if any.
    fn as_bind(&self) -> Option<&dyn BindPlugin> {
        None
    }
    /// The PostBind implementation, if any.
    fn as_post_bind(&self) -> Option<&dyn PostBindPlugin> {
        None
    }
    /// The cluster changes that can make a pod this plugin rejected schedulable, each with
    /// a hint for one change and one pod (kube-scheduler's `EventsToRegister`). A plugin that
    /// can reject a pod (in PreFilter, Filter, Reserve or Permit) declares at least one; a pod
    /// it rejected is retried on nothing else (and after five minutes parked).
    fn events(&self) -> &'static [EventHint] {
        &[]
    }
    /// The parts of the cluster state this plugin reads beyond nodes and the pods on them:
    /// the cache keeps (and the adapter watches) a part only when some plugin of a profile
    /// declares it.
    fn cache_state(&self) -> &'static [Tracked] {
        &[]
    }
}

/// Orders the active queue: `less(a, b)` is true when `a` should be scheduled before `b`.
/// A profile has exactly one, and all profiles must agree on it.
pub trait QueueSortPlugin: Send + Sync {
    /// Compares two queued pods; `a_seq` and `b_seq` are their arrival sequence numbers
    /// (shared by the pods of a group, see [`QueueSortPlugin::group_label`]).
    fn compare(&self, a: &PodInfo, a_seq: u64, b: &PodInfo, b_seq: u64) -> Ordering;

    /// The label whose value puts pods of a namespace in one group, whose pods in the
    /// active queue then share the arrival number of the first of them, so that they are
    /// taken one after the other (Coscheduling's). None: every pod arrives alone.
    fn group_label(&self) -> Option<&'static str> {
        None
    }
}

/// Decides whether a pod may enter the active queue at all (e.g. scheduling gates). A
/// non-success status keeps the pod parked, with the status as the reason.
pub trait PreEnqueuePlugin: Send + Sync {
    /// Checks the pod.
    fn pre_enqueue(&self, pod: &PodInfo) -> Status;
}

/// What a PreFilter plugin can narrow the search to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PreFilterResult {
    /// When set, only these nodes can possibly fit; the sets of all plugins are intersected.
    pub node_names: Option<BTreeSet<Arc<str>>>,
}

/// Runs once per cycle before filtering: precomputes state, or rejects the pod outright.
pub trait PreFilterPlugin: Send + Sync {
    /// A rejection here fails the cycle for every node with this status; `Skip` skips this
    /// plugin's Filter for the cycle.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status);
}

/// Nodes a Filter or Score plugin examines at once, with their positions in the cycle's
/// snapshot ([`Snapshot::nodes`]): a plugin may keep per-node data indexed by position in
/// its cycle state (the topology domain of each node, say) and read it here without looking
/// the node's labels up.
#[derive(Debug, Clone, Copy)]
pub struct NodeBlock<'a> {
    /// The nodes.
    pub nodes: &'a [&'a NodeInfo],
    /// Their positions, as long as `nodes`.
    pub positions: &'a [usize],
    /// When the nodes are the snapshot's own (not copies changed within the cycle), the
    /// snapshot's rows ([`Snapshot::rows`]), indexed by position: the node at
    /// `positions[k]` reads the same in `rows[positions[k]]` as in `nodes[k]`, at a fraction
    /// of the memory traffic.
    pub rows: Option<&'a [NodeRow]>,
}

impl<'a> NodeBlock<'a> {
    /// A block of `nodes` at `positions`.
    pub fn new(nodes: &'a [&'a NodeInfo], positions: &'a [usize]) -> Self {
        debug_assert_eq!(nodes.len(), positions.len());
        NodeBlock {
            nodes,
            positions,
            rows: None,
        }
    }

    /// The block of the snapshot's own nodes at `positions`, with the snapshot's rows.
    pub fn of_snapshot(
        nodes: &'a [&'a NodeInfo],
        positions: &'a [usize],
        snapshot: &'a Snapshot,
    ) -> Self {
        debug_assert!(
            nodes
                .iter()
                .zip(positions)
                .all(|(n, &p)| std::ptr::eq(*n, &*snapshot.nodes()[p]))
        );
        NodeBlock {
            rows: Some(snapshot.rows()),
            ..NodeBlock::new(nodes, positions)
        }
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when the block holds no node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

/// Decides whether one node can run the pod. Called concurrently for many nodes, so it only
/// reads `state`. A rejected node is a normal status, not an error.
pub trait FilterPlugin: Send + Sync {
    /// Checks `node`.
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status;

    /// Checks a block of nodes: each node whose entry in `statuses` (as long as the block)
    /// is still a success gets this plugin's verdict, the others keep the rejection an
    /// earlier plugin gave; returns how many nodes this plugin rejected. The cycle calls this
    /// rather than [`FilterPlugin::filter`], so that a plugin run on every node of a large
    /// cluster can read its cycle state once per block, and per-node data it computed at
    /// PreFilter by position. Must agree with `filter`.
    fn filter_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        block: NodeBlock<'_>,
        statuses: &mut [Status],
    ) -> usize {
        let mut rejected = 0;
        for (node, status) in block.nodes.iter().zip(statuses) {
            if status.is_success() && !self.passes_outright(node) {
                *status = self.filter(state, pod, node);
                rejected += usize::from(!status.is_success());
            }
        }
        rejected
    }

    /// True when `filter` accepts every node of `snapshot` for `pod` (no node is cordoned,
    /// the pod names no node): the cycle then leaves this plugin out of its pass over the
    /// nodes, for this pod. Asked after PreFilter; must never be true when `filter` could
    /// reject a node of `snapshot`.
    fn passes_all(&self, _state: &CycleState, _pod: &PodInfo, _snapshot: &Snapshot) -> bool {
        false
    }

    /// True when `filter` accepts the node whatever the pod (an uncordoned node for
    /// NodeUnschedulable, an untainted one for TaintToleration): the default `filter_nodes`
    /// then passes it without the call, which matters for plugins run on every node of
    /// every cycle. Must never be true of a node `filter` could reject.
    fn passes_outright(&self, _node: &NodeInfo) -> bool {
        false
    }

    /// True when, for `pod` (after PreFilter), `filter`'s verdict on a node depends on
    /// nothing of the pod but its resource requests (`requests` and the non-zero cpu and
    /// memory) and nothing of the cluster but that node's resource amounts (allocatable
    /// and requested, with the non-zero cpu and memory) and pod count: the cycle may then
    /// keep the verdict between cycles and give it to a pod asking the same resources, for
    /// as long as the node does not change, and give one node's verdict to the nodes with
    /// the same amounts ([`NodeRow::same_amounts`]; see the cycle's class index).
    fn verdict_by_requests(&self, _state: &CycleState, _pod: &PodInfo) -> bool {
        false
    }

    /// For `pod` (after PreFilter), `filter`'s verdict on every node of `snapshot` as a
    /// function of the node's values of some topology keys, when it depends on nothing
    /// else of the node, or of values the plugin works out for every node itself
    /// ([`TopologyValues::computed`](crate::cache::TopologyValues::computed)): one check per
    /// key, in order, the first rejection winning. The cycle may then read the verdicts by
    /// position instead of calling the plugin (see the cycle's class index). Must agree
    /// with `filter` on every node of `snapshot`.
    fn verdict_by_domain(
        &self,
        _state: &CycleState,
        _pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> Option<Vec<DomainVerdict>> {
        None
    }
}

/// Keeps a PreFilter plugin's cycle state true to a node whose pods change within the
/// cycle: a nominated pod counted on a node, a victim taken off one in preemption's dry run
/// (kube-scheduler's `PreFilterExtensions`). The node is given as it is after the change.
/// A plugin whose Filter reads only the node needs none.
pub trait PreFilterExtensions: Send + Sync {
    /// `added` now runs on `node`.
    fn add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        added: &PodInfo,
        node: &NodeInfo,
    ) -> Status;
    /// `removed` no longer runs on `node`.
    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        removed: &PodInfo,
        node: &NodeInfo,
    ) -> Status;
}

/// What PostFilter plugins are given when no node fits the pod.
pub struct PostFilterInput<'a> {
    /// The cycle's profile, whose filters a plugin may run on changed nodes.
    pub profile: &'a Profile,
    /// The cluster as the cycle saw it.
    pub snapshot: &'a Snapshot,
    /// Pods nominated to nodes.
    pub nominated: &'a NominatedPods,
    /// Each node the cycle rejected, with the status that rejected it.
    pub rejections: &'a [(Arc<str>, Status)],
    /// The pods held at Permit.
    pub waiting: &'a WaitingPods,
    /// Threads a plugin may spread its work over (preemption's dry run on many nodes);
    /// `None` keeps it on the scheduling thread.
    pub pool: Option<&'a rayon::ThreadPool>,
    /// Extenders with a preempt verb are interested in the pod: a preemption lists its
    /// candidates ([`PostFilterResult::candidates`]) for them to cut, and chooses a node
    /// only once they answered ([`PostFilterPlugin::choose`]).
    pub extenders_cut: bool,
    /// The pod's earlier preemption is still being carried out: its victims, not yet seen
    /// deleted, are as good as terminating.
    pub preemption_running: bool,
}

/// A node where evicting some pods would let the preemptor fit.
#[derive(Debug, Clone)]
pub struct PreemptionCandidate {
    /// The node.
    pub node: Arc<str>,
    /// The pods to evict, most important first.
    pub victims: Vec<Arc<PodInfo>>,
    /// How many of them are evicted against a PodDisruptionBudget.
    pub pdb_violations: usize,
}

/// A preemption's candidates waiting for the extenders to cut them.
#[derive(Debug, Clone)]
pub struct PendingCandidates {
    /// The PostFilter plugin that found them, which chooses among what is left.
    pub plugin: &'static str,
    /// The candidates.
    pub candidates: Vec<PreemptionCandidate>,
}

/// What the pod's nominated node becomes after a PostFilter plugin ran.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Nomination {
    /// Unchanged.
    #[default]
    Keep,
    /// None: the pod no longer waits for room on a node.
    Clear,
    /// This node, where room is being made for the pod.
    Set(Arc<str>),
}

/// Pods to evict so that a pod fits on a node, as a preemption decided it.
#[derive(Debug, Clone)]
pub struct Preemption {
    /// The node.
    pub node: Arc<str>,
    /// The pods to evict from it, most important first; those already terminating are
    /// waited for, not evicted again.
    pub victims: Vec<Arc<PodInfo>>,
    /// Pods of lower priority nominated to the node, whose nomination is cleared: the room
    /// is the preemptor's now.
    pub denominated: Vec<Arc<PodInfo>>,
    /// Why this node won, for the decision log.
    pub reason: String,
    /// Victims held at Permit (assumed on the node, not bound): the scheduler rejects them
    /// there, as kube-scheduler does, and moves them here out of `victims`, which are
    /// deleted.
    pub released: Vec<Arc<PodInfo>>,
}

/// What a PostFilter plugin did.
#[derive(Debug, Clone, Default)]
pub struct PostFilterResult {
    /// The pod's nomination.
    pub nomination: Nomination,
    /// The evictions it decided, if any.
    pub preemption: Option<Preemption>,
    /// Pods held at Permit it rejects (a gang whose member cannot be placed); those of
    /// every PostFilter plugin that ran are rejected.
    pub reject_waiting: Vec<WaitingRejection>,
    /// The pod's group (by the QueueSort plugin's group label) failed: its queued pods go
    /// behind those that came before.
    pub group_failed: bool,
    /// Candidates for the extenders to cut before a node is chosen (only when
    /// [`PostFilterInput::extenders_cut`]); no nomination or eviction is decided yet.
    pub candidates: Option<Box<PendingCandidates>>,
}

/// A pod held at Permit that a plugin rejects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitingRejection {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The plugin rejecting it.
    pub plugin: &'static str,
    /// Why, in the plugin's words.
    pub message: String,
}

/// Pods a plugin asks to be tried again now, out of backoff or the unschedulable pods
/// (kube-scheduler's `PodsToActivate`: Coscheduling's siblings of a pod that waits for
/// them), written to the cycle state by Permit; the scheduler activates them after Permit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodsToActivate(pub Vec<(String, String)>);

/// Runs when no node fits (e.g. preemption): may decide evictions and nominate a node.
pub trait PostFilterPlugin: Send + Sync {
    /// Tries to make the pod schedulable; a success status means it did (on the nominated
    /// node, once the evictions are done).
    fn post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        input: &PostFilterInput<'_>,
    ) -> (PostFilterResult, Status);

    /// Chooses among `candidates`, what the extenders left of those this plugin listed,
    /// as [`PostFilterPlugin::post_filter`] would have chosen; `nominated` are the pods
    /// nominated to nodes now. A plugin that never lists candidates is never asked.
    fn choose(
        &self,
        pod: &PodInfo,
        candidates: Vec<PreemptionCandidate>,
        nominated: &NominatedPods,
    ) -> (PostFilterResult, Status) {
        let _ = (pod, candidates, nominated);
        (
            PostFilterResult::default(),
            Status::unschedulable("no candidate node for preemption"),
        )
    }
}

/// Runs once per cycle before scoring, with the feasible nodes; `Skip` skips this plugin's
/// Score for the cycle.
pub trait PreScorePlugin: Send + Sync {
    /// Precomputes scoring state.
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        feasible: &[&NodeInfo],
    ) -> Status;

    /// False when `pre_score` for `pod` reads nothing of `feasible` (it skips the pod
    /// first, or never looks at the nodes): a cycle that has not listed the feasible nodes
    /// may then call it with none.
    fn reads_feasible(&self, _pod: &PodInfo, _snapshot: &Snapshot) -> bool {
        true
    }
}

/// A node and the score a plugin gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeScore {
    /// Index of the node among the feasible nodes of this cycle.
    pub index: usize,
    /// The score.
    pub score: i64,
}

/// Ranks feasible nodes. Raw scores may be on any scale if `normalize` maps them into
/// `0..=MAX_NODE_SCORE`; the profile applies the plugin's weight afterwards, once.
pub trait ScorePlugin: Send + Sync {
    /// Scores one node; called concurrently, so it only reads `state`.
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status>;

    /// Scores each node of `block` into the same position of `scores` (as long as the
    /// block). The cycle calls this rather than [`ScorePlugin::score`], a block of nodes at
    /// a time, so a plugin scored on every node of a large cluster can read its cycle state
    /// once per block instead of once per node, and per-node data it computed at PreScore by
    /// position. Must give the same scores as `score`.
    fn score_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        block: NodeBlock<'_>,
        scores: &mut [i64],
    ) -> Result<(), Status> {
        for (node, score) in block.nodes.iter().zip(scores) {
            *score = self.score(state, pod, node)?;
        }
        Ok(())
    }

    /// Maps the raw scores of all feasible nodes into `0..=MAX_NODE_SCORE`, in place: the
    /// entries keep their order.
    fn normalize(&self, _state: &CycleState, _pod: &PodInfo, _scores: &mut [NodeScore]) -> Status {
        Status::success()
    }

    /// The raw score `score` gives every node of `snapshot` for `pod`, when it is the same
    /// for all of them (no node has what the plugin counts): the cycle then writes it for
    /// each node instead of asking, and normalizes it once. Asked after PreScore. A plugin
    /// answering it must normalize equal raw scores to equal scores, whatever their number.
    fn uniform_score(
        &self,
        _state: &CycleState,
        _pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> Option<i64> {
        None
    }

    /// False when [`ScorePlugin::normalize`] leaves every score as it is: the cycle then
    /// adds the raw scores up without handing them to it. Only a plugin that does not
    /// override `normalize` may answer false.
    fn normalizes(&self) -> bool {
        true
    }

    /// True when, for `pod` (after PreScore), the raw score of a node depends on nothing of
    /// the pod but its resource requests and nothing of the cluster but that node's resource
    /// amounts and pod count, as [`FilterPlugin::verdict_by_requests`] says of verdicts. Only a plugin that does not
    /// normalize may answer true.
    fn score_by_requests(&self, _state: &CycleState, _pod: &PodInfo) -> bool {
        false
    }

    /// For `pod` (after PreScore), `score`'s raw score of every node of `snapshot` as a
    /// sum of numbers per topology domain (see [`DomainScores`]), when it depends on
    /// nothing else of the node: the cycle may then read the raw scores by position and
    /// ask the plugin for none. A plugin answering it must normalize each score from its
    /// raw value and the set of distinct raw values present alone (not their number or
    /// order), so that the cycle can normalize the distinct values once.
    fn score_by_domain<'s>(
        &self,
        _state: &'s CycleState,
        _pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> Option<DomainScores<'s>> {
        None
    }

    /// True when nodes with the best total score should be told apart by one fixed order of
    /// nodes (by name), the same for every pod, rather than by an order drawn per pod. Packing policies ask for it: among equals they keep choosing the same nodes, so
    /// placements concentrate instead of scattering over the cluster. The cycle uses the
    /// fixed order when any score plugin it runs asks for it.
    fn fixed_tie_order(&self) -> bool {
        false
    }
}

/// Claims resources for the pod on the chosen node before binding; `unreserve` releases them
/// if a later step fails. Unreserve must be idempotent.
pub trait ReservePlugin: Send + Sync {
    /// Reserves on `node`, the chosen node as the cycle saw it; a failure aborts the attempt.
    /// What the plugin claims is recorded on the pod through [`ReservedAnnotations`].
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &NodeInfo) -> Status;
    /// Releases what `reserve` claimed.
    fn unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str);
}

/// Annotations Reserve plugins set on the pod (e.g. the GPU devices it was given), kept in the
/// cycle state. The scheduler applies them to the pod it assumes in the cache, so that the
/// next cycle sees what was claimed, and adds them to the binding, so that the claim is
/// written on the pod and survives a restart.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReservedAnnotations(pub Vec<(String, String)>);

impl ReservedAnnotations {
    /// Sets `key` to `value` in the cycle state's reserved annotations.
    pub fn set(state: &mut CycleState, key: &str, value: String) {
        if state.get::<ReservedAnnotations>().is_none() {
            state.insert(ReservedAnnotations::default());
        }
        if let Some(r) = state.get_mut::<ReservedAnnotations>() {
            r.0.retain(|(k, _)| k != key);
            r.0.push((key.to_string(), value));
        }
    }

    /// Removes `key` from the cycle state's reserved annotations (for Unreserve).
    pub fn remove(state: &mut CycleState, key: &str) {
        if let Some(r) = state.get_mut::<ReservedAnnotations>() {
            r.0.retain(|(k, _)| k != key);
        }
    }
}

/// Approves, rejects, or delays the binding of a pod assumed on its node.
pub trait PermitPlugin: Send + Sync {
    /// Success lets the pod be bound; a rejection gives its room back. `Wait` with a
    /// timeout holds the pod, room and all, until this plugin allows it through
    /// [`WaitingPods::allow`] (in a later call, for instance when the pod that completes a
    /// group arrives), rejects it, or the timeout passes. The plugin may decide on other
    /// waiting pods through `waiting`.
    fn permit(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        node: &str,
        waiting: &mut WaitingPods,
    ) -> (Status, Duration);

    /// The pod will not be bound after all (a later plugin rejected it, its wait ended in a
    /// rejection, its binding failed): called after the Reserve plugins' Unreserve, so that
    /// a plugin may reject the pods it holds with it (kube-scheduler plugins do this in
    /// Unreserve).
    fn unreserved(&self, pod: &PodInfo, waiting: &mut WaitingPods) {
        let _ = (pod, waiting);
    }

    /// The PodGroup `namespace/name` is gone (deleted, or no longer readable): a plugin
    /// holding its pods rejects them now, so that their room is given back at once rather
    /// than when their wait runs out.
    fn pod_group_gone(&self, namespace: &str, name: &str, waiting: &mut WaitingPods) {
        let _ = (namespace, name, waiting);
    }
}

/// The volume decisions a Reserve plugin took for the pod (VolumeBinding's choice of a
/// volume, or of the node to provision on, for each claim not bound yet), kept in the cycle
/// state. The scheduler assumes them in the cache with the pod, so that the next cycle does
/// not give the same volume to another claim, and drops them if the pod is not bound.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReservedVolumes(pub Vec<VolumeDecision>);

/// Volume bindings to write before the pod is bound, and the wait for the PV controller to
/// complete them (VolumeBinding's PreBind).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeBinding {
    /// What to write: a volume's `claimRef` for each chosen volume, a claim's selected-node
    /// annotation for each claim to provision.
    pub decisions: Vec<VolumeDecision>,
    /// Every claim of the pod that must be bound before the pod is.
    pub claims: Vec<ClaimKey>,
    /// How long to wait for the PV controller (`bindTimeoutSeconds`).
    pub timeout: Duration,
}

/// Work a PreBind plugin asks for before the pod is bound. The core stays free of I/O: the
/// front end carries it out (the adapter writes to the API and waits, off the scheduling
/// thread; the simulator completes it at once, as the PV controller would).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreBindAction {
    /// Write volume bindings and wait until the pod's claims are bound.
    BindVolumes(VolumeBinding),
    /// Take HAMi's lock on the node (one pod's devices are allocated at a time there, and the
    /// node's device plugin finds the pod by it), then bind with HAMi's bind phase and times,
    /// as HAMi's scheduler binds.
    LockHamiNode(Arc<str>),
}

/// Prepares the binding of a pod to its node, after Permit: says what must be done in the
/// API first. A failure (or a failure of the work, when carried out) unreserves the pod and
/// retries it after its backoff.
pub trait PreBindPlugin: Send + Sync {
    /// The work needed before `pod` is bound to `node`; `None` when there is none.
    fn pre_bind(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &str,
    ) -> Result<Option<PreBindAction>, Status>;
}

/// Hears that a pod was bound (informational: nothing can fail any more).
pub trait PostBindPlugin: Send + Sync {
    /// `pod` is bound to `node`.
    fn post_bind(&self, pod: &PodInfo, node: &str);
}

/// What binding a pod means: the node, annotations to set on the pod as it is bound, and
/// the work to do before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindPlan {
    /// The node to bind to.
    pub node: Arc<str>,
    /// Annotations to write on the pod with the binding (e.g. device assignments).
    pub annotations: Vec<(String, String)>,
    /// What PreBind plugins asked to be done first, in order.
    pub pre_bind: Vec<PreBindAction>,
}

/// Decides how the pod is bound. The core stays free of I/O: a bind plugin returns a plan
/// that the front end (the Kubernetes adapter, or the simulator) carries out. `Err(Skip)`
/// passes the decision to the next bind plugin.
pub trait BindPlugin: Send + Sync {
    /// Plans the binding of `pod` to `node`.
    fn bind(&self, state: &CycleState, pod: &PodInfo, node: &Arc<str>) -> Result<BindPlan, Status>;
}

/// `scores` scaled into `0..=max`, proportionally to the highest one; with `reverse`, the
/// highest raw score maps to 0. kube-scheduler's `DefaultNormalizeScore`.
pub fn default_normalize_score(max: i64, reverse: bool, scores: &mut [NodeScore]) {
    let highest = scores.iter().map(|s| s.score).max().unwrap_or(0);
    if highest == 0 {
        if reverse {
            for s in scores.iter_mut() {
                s.score = max;
            }
        }
        return;
    }
    for s in scores.iter_mut() {
        let scaled = max * s.score / highest;
        s.score = if reverse { max - scaled } else { scaled };
    }
}

/// A configured scheduler profile, ready to run cycles.
#[derive(Clone)]
pub struct Profile {
    /// The `spec.schedulerName` this profile serves.
    pub scheduler_name: String,
    /// Share of nodes to find feasible before scoring (1..=100); `None` for the adaptive
    /// default.
    pub percentage_of_nodes_to_score: Option<u32>,
    /// The one QueueSort plugin.
    pub queue_sort: Arc<dyn Plugin>,
    /// PreEnqueue plugins, in order.
    pub pre_enqueue: Vec<Arc<dyn Plugin>>,
    /// PreFilter plugins, in order.
    pub pre_filter: Vec<Arc<dyn Plugin>>,
    /// Filter plugins, in order.
    pub filter: Vec<Arc<dyn Plugin>>,
    /// PostFilter plugins, in order.
    pub post_filter: Vec<Arc<dyn Plugin>>,
    /// PreScore plugins, in order.
    pub pre_score: Vec<Arc<dyn Plugin>>,
    /// Score plugins with their weights.
    pub score: Vec<(Arc<dyn Plugin>, i64)>,
    /// Reserve plugins, in order.
    pub reserve: Vec<Arc<dyn Plugin>>,
    /// Permit plugins, in order.
    pub permit: Vec<Arc<dyn Plugin>>,
    /// PreBind plugins, in order.
    pub pre_bind: Vec<Arc<dyn Plugin>>,
    /// Bind plugins, in order: the first that does not skip binds.
    pub bind: Vec<Arc<dyn Plugin>>,
    /// PostBind plugins, in order.
    pub post_bind: Vec<Arc<dyn Plugin>>,
    /// What measures the plugins as the runners call them ([`Unobserved`](super::Unobserved)
    /// but in `gantry run`).
    pub observer: Arc<dyn Observer>,
}

impl std::fmt::Debug for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |v: &[Arc<dyn Plugin>]| v.iter().map(|p| p.name()).collect::<Vec<_>>();
        f.debug_struct("Profile")
            .field("scheduler_name", &self.scheduler_name)
            .field("queue_sort", &self.queue_sort.name())
            .field("pre_enqueue", &names(&self.pre_enqueue))
            .field("pre_filter", &names(&self.pre_filter))
            .field("filter", &names(&self.filter))
            .field("post_filter", &names(&self.post_filter))
            .field("pre_score", &names(&self.pre_score))
            .field(
                "score",
                &self
                    .score
                    .iter()
                    .map(|(p, w)| (p.name(), *w))
                    .collect::<Vec<_>>(),
            )
            .field("reserve", &names(&self.reserve))
            .field("permit", &names(&self.permit))
            .field("pre_bind", &names(&self.pre_bind))
            .field("bind", &names(&self.bind))
            .field("post_bind", &names(&self.post_bind))
            .finish()
    }
}

impl Profile {
    /// Every plugin of the profile, at whichever extension points (a plugin at several
    /// points comes once per point).
    pub fn plugins(&self) -> impl Iterator<Item = &Arc<dyn Plugin>> {
        std::iter::once(&self.queue_sort)
            .chain(&self.pre_enqueue)
            .chain(&self.pre_filter)
            .chain(&self.filter)
            .chain(&self.post_filter)
            .chain(&self.pre_score)
            .chain(self.score.iter().map(|(p, _)| p))
            .chain(&self.reserve)
            .chain(&self.permit)
            .chain(&self.pre_bind)
            .chain(&self.bind)
            .chain(&self.post_bind)
    }
}
