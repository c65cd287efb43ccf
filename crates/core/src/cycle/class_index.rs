//! What cycles that examine every node keep between them for pods asking the same
//! resources: each node's verdict from the Filter plugins and weighted score from the Score
//! plugins whose answers depend on nothing else (see [`FilterPlugin::verdict_by_requests`](crate::framework::FilterPlugin::verdict_by_requests)
//! and [`ScorePlugin::score_by_requests`](crate::framework::ScorePlugin::score_by_requests)). A cycle of such a pod brings its class up to date
//! for the nodes changed since the class's last cycle (the snapshot's
//! [`ChangeLog`](crate::cache::ChangeLog)) and
//! chooses among the kept totals, instead of filtering and scoring the whole cluster again:
//! between two pods of a class only the nodes placements changed need the plugins.
//!
//! The result is the plain cycle's in every respect (node, feasible count, best scores,
//! rejections); wherever the class cannot be used as it stands (another plugin has something
//! to say about the pod, a plugin errs, at most one node is feasible) the cycle runs plainly.

use std::hash::{Hash, Hasher};

use rustc_hash::{FxHashMap, FxHasher};

use alike::Alike;
use domains::{DomainChecks, DomainColumn, FeasibleByValue, Pick};

use super::{
    ActiveFilter, Cycle, CycleOptions, Diagnosis, NodeScores, PreFiltered, RejectionCount, TopK,
    active_filters, count_rejections, fixed_tie_order, num_feasible_nodes_to_find, plain_weight,
    pod_tie_hash, run_filter_block, run_pre_score, select_host, tie_key, uniform_weighted,
};
use crate::cache::{NodeInfo, Snapshot};
use crate::framework::runners::{check_scores, run_score_block};
use crate::framework::{
    Code, CycleState, MAX_NODE_SCORE, NodeBlock, Observer, Point, Profile, ScorePlugin, Status,
};
use crate::model::{PodInfo, Resources};

/// Totals (nodes times classes) kept at most: 32 MiB.
const MAX_CELLS: usize = 1 << 23;
/// A node's entry in a class: 32 bits, half the memory the cycle's 64-bit totals would take,
/// which matters because a class's entries are read whole each time it is used, long after
/// its last use (see [`ClassIndex::place`]'s check that the kept columns' sum fits).
type Total = i32;
/// Classes remembered as seen once: once the index is full, a class is kept from its second
/// cycle on, so that pods asking resources no other pod asks do not push out the classes
/// that recur.
const SEEN_SLOTS: usize = 4096;
/// Nodes handed to a plugin at once.
const BLOCK: usize = 256;
/// Positions summed up by one entry of [`Class::span_max`]: as many as the bits of a
/// word, so that a span's positions are one word of a bitmap of all positions.
const SPAN: usize = u64::BITS as usize;

/// The classes kept, by hash of their key.
#[derive(Debug)]
pub(super) struct ClassIndex {
    classes: FxHashMap<u64, Class>,
    /// Hashes of classes seen once, each in the slot its value picks.
    seen: Vec<u64>,
    /// Cycles served, for choosing the least recently used class to drop.
    clock: u64,
    /// Totals kept at most, all classes together.
    max_cells: usize,
    /// Buffers a cycle fills and the next reuses.
    scratch: Scratch,
}

/// The buffers of [`ClassIndex::place`], kept between cycles: a cycle of a large cluster
/// would otherwise allocate and free them every time.
#[derive(Debug, Default)]
struct Scratch {
    /// The positions changed since the class's last cycle.
    changed: Vec<usize>,
    /// The feasible ones among them (or all feasible nodes), to score.
    to_score: Vec<usize>,
    statuses: Vec<Status>,
    /// The class's entries for a block of changed positions, before the block's verdicts.
    olds: Vec<Total>,
    /// One plugin's raw scores of a block.
    cells: Vec<i64>,
    /// A block's weighted sums.
    sums: Vec<i64>,
    /// How many of the nodes the class accepts each rejection by domain rejects.
    domain_counts: Vec<usize>,
    /// The positions whose raw scores by domain may differ from 0.
    listed: Vec<usize>,
    /// One bit per position, for reading the changed positions off in order.
    seen: Vec<u64>,
    /// The nodes alike to the class's plugins, in a pass over every node.
    alike: Alike,
}

impl Default for ClassIndex {
    fn default() -> Self {
        ClassIndex {
            classes: FxHashMap::default(),
            seen: vec![0; SEEN_SLOTS],
            clock: 0,
            max_cells: MAX_CELLS,
            scratch: Scratch::default(),
        }
    }
}

/// What a class is: the profile and what the plugins read of the pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ClassKey {
    profile: String,
    requests: Resources,
    non_zero_milli_cpu: i64,
    non_zero_memory: i64,
}

impl ClassKey {
    fn of(profile: &Profile, pod: &PodInfo) -> ClassKey {
        ClassKey {
            profile: profile.scheduler_name.clone(),
            requests: pod.requests.clone(),
            non_zero_milli_cpu: pod.non_zero_milli_cpu,
            non_zero_memory: pod.non_zero_memory,
        }
    }

    fn hash_value(&self) -> u64 {
        let mut h = FxHasher::default();
        self.hash(&mut h);
        h.finish()
    }
}

/// One class's verdicts and totals, by snapshot position.
#[derive(Debug)]
struct Class {
    key: ClassKey,
    /// The snapshot layout and generation the entries are true to.
    layout: u64,
    synced: u64,
    /// The Filter plugins whose verdicts these are, in order.
    filters: Vec<&'static str>,
    /// For a feasible node, the weighted sum of the `scored_by` plugins' scores (once
    /// scored); for a rejected one, `-(k + 1)` for the status `rejected[k]`.
    totals: Vec<Total>,
    /// Each distinct rejection, and how many nodes carry it.
    rejected: Vec<(Status, usize)>,
    /// The largest of each [`SPAN`] consecutive totals: the choice looks only into the
    /// spans that hold the best total (or one of the best few).
    span_max: Vec<Total>,
    /// For each span, one bit per position whose total is the span's largest: the
    /// tie-break reads these and the name hashes, not the totals.
    span_ties: Vec<u64>,
    /// The Score plugins the totals of feasible nodes sum, in order; empty when the totals
    /// of feasible nodes are not up to date (they are rescored whole at the next use).
    scored_by: Vec<&'static str>,
    /// The feasible nodes counted by value of the topology keys checks by domain asked
    /// for, kept in step with `totals`.
    by_value: Vec<FeasibleByValue>,
    used: u64,
}

/// What the class's totals are scored with: the columns, and the cycle's pod and state, on
/// the snapshot's nodes.
struct Scoring<'a, 'p> {
    columns: &'a [(Column<'p>, &'static str)],
    state: &'a CycleState,
    pod: &'a PodInfo,
    snapshot: &'a Snapshot,
}

/// Each rejection by domain with the number of the class's nodes it rejects.
fn domain_rejections<'a>(
    domains: &'a DomainChecks,
    counts: &'a [usize],
) -> impl Iterator<Item = (&'a Status, usize)> + Clone + 'a {
    domains.rejections.iter().zip(counts.iter().copied())
}

/// The Score plugins whose weighted scores the class's totals sum, in order.
fn kept_names(columns: &[(Column<'_>, &'static str)]) -> Vec<&'static str> {
    columns
        .iter()
        .filter(|(c, _)| matches!(c, Column::Kept(..)))
        .map(|(_, name)| *name)
        .collect()
}

/// The weighted scores that are the same on every node, summed.
fn constant_total(columns: &[(Column<'_>, &'static str)]) -> i64 {
    columns
        .iter()
        .map(|(c, _)| match c {
            Column::Constant(_, w) => *w,
            Column::Kept(..) | Column::Domain(..) => 0,
        })
        .sum()
}

/// True when the kept columns' sum fits an entry (it does unless the weights are in the
/// millions).
fn kept_sum_fits(columns: &[(Column<'_>, &'static str)]) -> bool {
    let most: i64 = columns
        .iter()
        .map(|(c, _)| match c {
            Column::Kept(_, weight) => weight.saturating_mul(MAX_NODE_SCORE),
            Column::Constant(..) | Column::Domain(..) => 0,
        })
        .fold(0, i64::saturating_add);
    most <= i64::from(Total::MAX)
}

/// The order in which the plain cycle would examine the nodes, and how many of the best it
/// records.
#[derive(Clone, Copy)]
struct Order {
    /// The first position examined.
    start: usize,
    /// Ties broken by name in a fixed order rather than by the nodes' keys.
    fixed_order: bool,
    top_scores: usize,
}

/// What the kept filters are run with: the cycle's pod and state, on the snapshot's nodes.
struct Filtered<'a, 'p> {
    filters: &'a [ActiveFilter<'p>],
    state: &'a CycleState,
    pod: &'a PodInfo,
    snapshot: &'a Snapshot,
}

impl Class {
    /// Brings the class's verdicts up to date with the snapshot (see
    /// [`list_changed`](Self::list_changed) and [`refresh_verdicts`](Self::refresh_verdicts)):
    /// whether it was used afresh, or None when a plugin failed.
    fn update_verdicts(
        &mut self,
        filtered: &Filtered<'_, '_>,
        scratch: &mut Scratch,
    ) -> Option<bool> {
        let names = filtered
            .filters
            .iter()
            .filter(|f| f.called)
            .map(|f| f.name)
            .collect();
        let Scratch {
            changed,
            statuses,
            olds,
            seen,
            alike,
            ..
        } = scratch;
        let fresh = self.list_changed(filtered.snapshot, names, changed, seen, alike);
        self.refresh_verdicts(filtered, changed, olds, statuses, &alike.followers)
            .then_some(fresh)
    }

    /// Lists in `changed` the positions whose verdicts must be found again, each once and
    /// in order: those the snapshot changed since the class's last use, or, for a class
    /// used afresh (new, another layout, other filters), one node of each set of alike
    /// nodes, the others in `alike`'s followers to take its verdict. True when afresh.
    fn list_changed(
        &mut self,
        snapshot: &Snapshot,
        filters: Vec<&'static str>,
        changed: &mut Vec<usize>,
        seen: &mut Vec<u64>,
        alike: &mut Alike,
    ) -> bool {
        let n = snapshot.len();
        changed.clear();
        alike.followers.clear();
        let fresh = match snapshot.changes().since(self.layout, self.synced) {
            Some(since) if self.filters == filters && self.totals.len() == n => {
                // Marked in a bitmap, then read off it, rather than sorting the log's
                // entries (a node changes more than once between two cycles of a class:
                // its pod assumed, then bound).
                seen.clear();
                seen.resize(n.div_ceil(64), 0);
                for p in since.filter(|&p| p < n) {
                    seen[p / 64] |= 1 << (p % 64);
                }
                for (w, &word) in seen.iter().enumerate() {
                    changed.extend(bit_positions(word).map(|i| w * 64 + i));
                }
                false
            }
            _ => {
                self.filters = filters;
                self.totals.clear();
                self.totals.resize(n, 0);
                self.rejected.clear();
                self.scored_by.clear();
                self.by_value.clear();
                alike.split(snapshot.rows(), 0..n, changed);
                true
            }
        };
        self.layout = snapshot.changes().layout();
        self.synced = snapshot.generation();
        fresh
    }

    /// Runs the kept filters on the `changed` positions and records their verdicts (a
    /// feasible node's total is scored afterwards), then gives each follower its first
    /// node's verdict; false when a plugin failed.
    fn refresh_verdicts(
        &mut self,
        filtered: &Filtered<'_, '_>,
        changed: &[usize],
        olds: &mut Vec<Total>,
        statuses: &mut Vec<Status>,
        followers: &[(usize, usize)],
    ) -> bool {
        let snapshot = filtered.snapshot;
        for positions in changed.chunks(BLOCK) {
            // The class's entries for the block, read in one go before the filters run:
            // the class was last used many cycles ago and its entries are far from the
            // cache, and read apart, one by one, each would be waited for.
            olds.clear();
            olds.extend(positions.iter().map(|&p| self.totals[p]));
            let nodes = nodes_at(snapshot, positions);
            statuses.clear();
            statuses.resize_with(positions.len(), Status::success);
            let block = NodeBlock::of_snapshot(&nodes, positions, snapshot);
            run_filter_block(
                filtered.filters,
                filtered.state,
                filtered.pod,
                block,
                statuses,
                false,
            );
            for ((&p, &old), status) in positions.iter().zip(olds.iter()).zip(statuses.drain(..)) {
                self.forget(old);
                if (old >= 0) != status.is_success() {
                    for counts in &mut self.by_value {
                        counts.count(p, status.is_success());
                    }
                }
                match status.code() {
                    Code::Success => self.totals[p] = 0,
                    Code::Unschedulable | Code::UnschedulableAndUnresolvable => {
                        self.set_rejected(p, status)
                    }
                    _ => return false,
                }
            }
        }
        // A fresh class's entries were all feasible and uncounted before.
        for &(p, first) in followers {
            let entry = self.totals[first];
            self.totals[p] = entry;
            if entry < 0 {
                self.rejected[(-entry - 1) as usize].1 += 1;
            }
        }
        true
    }

    /// Brings the feasible nodes' totals and the spans up to date after the verdicts: every
    /// one again when the class is fresh or its kept plugins changed, else the changed
    /// ones; false when the kept columns' sum could overflow an entry or a plugin failed.
    fn refresh_totals(
        &mut self,
        scoring: &Scoring<'_, '_>,
        fresh: bool,
        scratch: &mut Scratch,
    ) -> bool {
        let kept = kept_names(scoring.columns);
        if !kept_sum_fits(scoring.columns) {
            return false;
        }
        let spans = self.totals.len().div_ceil(SPAN);
        let whole = fresh || self.scored_by != kept || self.span_max.len() != spans;
        let Scratch {
            changed,
            to_score,
            cells,
            sums,
            alike,
            ..
        } = scratch;
        self.positions_to_score(scoring.snapshot, whole && !fresh, changed, to_score, alike);
        self.scored_by.clear();
        if !self.score_positions(scoring, to_score, &alike.followers, cells, sums) {
            return false;
        }
        self.scored_by = kept;
        self.sum_up_spans(whole, changed);
        true
    }

    /// Lists in `to_score` the feasible positions whose totals must be scored: every one
    /// (one of each set of alike nodes, the others as followers) when `all`, else the
    /// changed ones, with the followers of those that are feasible.
    fn positions_to_score(
        &self,
        snapshot: &Snapshot,
        all: bool,
        changed: &[usize],
        to_score: &mut Vec<usize>,
        alike: &mut Alike,
    ) {
        to_score.clear();
        if all {
            let feasible = (0..self.totals.len()).filter(|&p| self.totals[p] >= 0);
            alike.split(snapshot.rows(), feasible, to_score);
        } else {
            // The changed nodes (of a fresh class, one of each set of amounts): the
            // feasible ones are scored, and the alike ones of those take their totals.
            to_score.extend(changed.iter().copied().filter(|&p| self.totals[p] >= 0));
            alike
                .followers
                .retain(|&(_, first)| self.totals[first] >= 0);
        }
    }

    /// Scores the `to_score` positions into their totals, then gives each follower its
    /// first node's total; false when a plugin failed.
    fn score_positions(
        &mut self,
        scoring: &Scoring<'_, '_>,
        to_score: &[usize],
        followers: &[(usize, usize)],
        cells: &mut Vec<i64>,
        sums: &mut Vec<i64>,
    ) -> bool {
        let snapshot = scoring.snapshot;
        for positions in to_score.chunks(BLOCK) {
            let nodes = nodes_at(snapshot, positions);
            let block = NodeBlock::of_snapshot(&nodes, positions, snapshot);
            let (state, pod) = (scoring.state, scoring.pod);
            if weighted_sums(scoring.columns, state, pod, block, cells, sums).is_none() {
                return false;
            }
            for (&p, &sum) in positions.iter().zip(sums.iter()) {
                // Within range: see `kept_sum_fits`.
                self.totals[p] = Total::try_from(sum).unwrap_or(Total::MAX);
            }
        }
        for &(p, first) in followers {
            self.totals[p] = self.totals[first];
        }
        true
    }

    /// Brings the spans' maxima and ties up to date: all of them when `whole`, else those
    /// of the changed positions.
    fn sum_up_spans(&mut self, whole: bool, changed: &[usize]) {
        if whole {
            let spans = self.totals.len().div_ceil(SPAN);
            self.span_max.clear();
            self.span_max.resize(spans, 0);
            self.span_ties.clear();
            self.span_ties.resize(spans, 0);
            for b in 0..spans {
                self.sum_up_span(b);
            }
        } else {
            for &p in changed {
                self.note_total(p);
            }
        }
    }

    /// The feasible positions (by the class's verdicts and the checks by domain) in the plain
    /// cycle's order of examination from `start`.
    fn feasible_from<'c>(
        &'c self,
        start: usize,
        domains: &'c DomainChecks,
    ) -> impl Iterator<Item = usize> + 'c {
        let n = self.totals.len();
        (start..n)
            .chain(0..start)
            .filter(move |&p| self.totals[p] >= 0 && domains.code(p) == 0)
    }

    /// The record's rows for the `best` positions: each plugin's weighted score and the
    /// total; None when a plugin failed.
    fn best_rows(
        &self,
        scoring: &Scoring<'_, '_>,
        live: &[DomainColumn<'_>],
        best: &[usize],
        cells: &mut Vec<i64>,
    ) -> Option<Vec<NodeScores>> {
        let snapshot = scoring.snapshot;
        let nodes = nodes_at(snapshot, best);
        let block = NodeBlock::of_snapshot(&nodes, best, snapshot);
        let (state, pod) = (scoring.state, scoring.pod);
        let per_plugin = weighted_columns(scoring.columns, live, state, pod, block, cells)?;
        let constant = constant_total(scoring.columns);
        let rows = best
            .iter()
            .enumerate()
            .map(|(i, &p)| NodeScores {
                node: snapshot.nodes()[p].node.name.clone(),
                weighted: per_plugin.iter().map(|column| column[i]).collect(),
                total: i64::from(self.totals[p])
                    + constant
                    + live.iter().map(|c| c.at(p)).sum::<i64>(),
            })
            .collect();
        Some(rows)
    }

    /// The node chosen and the positions of the best rows: from the spans' maxima when
    /// nothing is checked or scored by domain, else through [`Pick`]; None when a plugin
    /// failed.
    fn choose(
        &self,
        domains: &DomainChecks,
        scoring: &Scoring<'_, '_>,
        live: &mut [DomainColumn<'_>],
        order: &Order,
        feasible: usize,
        listed: &mut Vec<usize>,
    ) -> Option<(usize, Vec<usize>)> {
        let (snapshot, pod) = (scoring.snapshot, scoring.pod);
        if domains.is_empty() && live.is_empty() {
            return Some(self.choose_by_spans(snapshot, pod, order));
        }
        let plugins: Vec<(&dyn ScorePlugin, &'static str)> = scoring
            .columns
            .iter()
            .filter(|(c, _)| matches!(c, Column::Domain(..)))
            .map(|(c, name)| (c.plugin(), *name))
            .collect();
        let pick = Pick {
            class: self,
            domains,
            start: order.start,
            fixed_order: order.fixed_order,
            pod_hash: pod_tie_hash(pod),
            snapshot,
            top_scores: order.top_scores,
            pod,
            state: scoring.state,
        };
        let constant = constant_total(scoring.columns);
        pick.choose(feasible, constant, live, &plugins, listed)
    }

    /// The node chosen among those with the best total, and the positions of the best
    /// `top_scores` totals, reading only the spans that can hold them, in the plain cycle's
    /// order of examination from `start`; the tie-break is by the nodes' keys, or by name
    /// in a fixed order when a plugin asks for it.
    fn choose_by_spans(
        &self,
        snapshot: &Snapshot,
        pod: &PodInfo,
        order: &Order,
    ) -> (usize, Vec<usize>) {
        let Order {
            start,
            fixed_order,
            top_scores,
        } = *order;
        let max = self.span_max.iter().copied().max().unwrap_or(0);
        let hashes = snapshot.name_hashes();
        let mut ties: Vec<usize> = Vec::new();
        let mut least = LeastKey::new(hashes, pod_tie_hash(pod));
        let mut top = TopK::new(top_scores);
        for (lo, hi) in examination_spans(start, snapshot.len()) {
            let b = lo / SPAN;
            let span_max = self.span_max[b];
            if span_max == max {
                // The tied positions of `lo..hi`, one bit each from `lo`.
                let tied = (self.span_ties[b] >> (lo % SPAN)) & low_bits(hi - lo);
                if fixed_order {
                    ties.extend(bit_positions(tied).map(|i| lo + i));
                } else {
                    least.offer(lo, hi, tied);
                }
            }
            if span_max >= 0 && top.would_take(i64::from(span_max)) {
                for (p, &total) in (lo..hi).zip(&self.totals[lo..hi]) {
                    if total >= 0 {
                        top.offer(p, i64::from(total));
                    }
                }
            }
        }
        let mut chosen = least.chosen;
        if fixed_order || chosen == usize::MAX {
            chosen = select_host(
                pod,
                ties.into_iter().map(|p| (p, i64::from(max))),
                |p| hashes[p],
                |p| &snapshot.nodes()[p].node.name,
                fixed_order,
            );
        }
        let best = top.into_best().into_iter().map(|(p, _)| p).collect();
        (chosen, best)
    }

    /// A class with no entries yet: its first use examines every node.
    fn new(key: ClassKey) -> Self {
        Class {
            key,
            layout: 0,
            synced: 0,
            filters: Vec::new(),
            totals: Vec::new(),
            rejected: Vec::new(),
            span_max: Vec::new(),
            span_ties: Vec::new(),
            scored_by: Vec::new(),
            by_value: Vec::new(),
            used: 0,
        }
    }

    fn feasible(&self) -> usize {
        self.totals.len() - self.rejected.iter().map(|(_, n)| n).sum::<usize>()
    }

    /// Marks the node at `position`, its old entry forgotten, rejected with `status`.
    fn set_rejected(&mut self, position: usize, status: Status) {
        let k = match self.rejected.iter().position(|(s, _)| *s == status) {
            Some(k) => k,
            None => {
                self.rejected.push((status, 0));
                self.rejected.len() - 1
            }
        };
        self.rejected[k].1 += 1;
        self.totals[position] = -Total::try_from(k).unwrap_or(Total::MAX - 1) - 1;
    }

    /// Tells each of `filters` (the cycle's, in order) how many nodes it examined, as the
    /// plain cycle's pass over every node would: those no earlier plugin rejected, the
    /// class's rejections and those by domain (`by_domain`, each status with its nodes).
    fn count_filter_runs<'s>(
        &'s self,
        filters: &[ActiveFilter<'_>],
        observer: &dyn Observer,
        by_domain: impl Iterator<Item = (&'s Status, usize)> + Clone,
    ) {
        let mut left = self.totals.len();
        for f in filters {
            observer.runs(f.name, Point::Filter, left as u64);
            let rejected: usize = self
                .rejected
                .iter()
                .map(|(s, n)| (s, *n))
                .chain(by_domain.clone())
                .filter(|(s, _)| s.plugin() == Some(f.name))
                .map(|(_, n)| n)
                .sum();
            left = left.saturating_sub(rejected);
        }
    }

    /// Sums span `b` up afresh: its largest total and the positions holding it.
    fn sum_up_span(&mut self, b: usize) {
        let lo = b * SPAN;
        let totals = &self.totals[lo..(lo + SPAN).min(self.totals.len())];
        let max = totals.iter().copied().max().unwrap_or(-1);
        self.span_max[b] = max;
        self.span_ties[b] = totals
            .iter()
            .enumerate()
            .fold(0, |ties, (i, &t)| ties | (u64::from(t == max) << i));
    }

    /// Keeps the summary of the span holding `position` in step with its new total.
    fn note_total(&mut self, position: usize) {
        let (b, bit) = (position / SPAN, 1 << (position % SPAN));
        let (total, max) = (self.totals[position], self.span_max[b]);
        if total > max {
            (self.span_max[b], self.span_ties[b]) = (total, bit);
        } else if total == max {
            self.span_ties[b] |= bit;
        } else {
            self.span_ties[b] &= !bit;
            if self.span_ties[b] == 0 {
                self.sum_up_span(b);
            }
        }
    }

    /// Takes a node's old entry `old`, if a rejection, out of the counts.
    fn forget(&mut self, old: Total) {
        if old < 0 {
            self.rejected[(-old - 1) as usize].1 -= 1;
        }
    }
}

/// What the cycle should do instead of examining every node itself.
pub(super) enum Outcome {
    /// The node, as the plain cycle would choose it.
    Placed(Chosen),
    /// Run the plain cycle; with the names PreScore skipped when it already ran (it is
    /// not run twice).
    Plain(Option<Vec<&'static str>>),
}

/// A placement without its cycle state.
pub(super) struct Chosen {
    pub node: std::sync::Arc<str>,
    pub evaluated: usize,
    pub feasible: usize,
    pub score_plugins: Vec<&'static str>,
    pub scores: Vec<NodeScores>,
    pub rejections: Vec<RejectionCount>,
}

/// A Score plugin the class's totals sum, one whose weighted score is the same on every
/// node, or one whose raw scores are sums by domain (the cycle's [`DomainColumn`] of that
/// number).
enum Column<'p> {
    Kept(&'p dyn ScorePlugin, i64),
    Constant(&'p dyn ScorePlugin, i64),
    Domain(&'p dyn ScorePlugin, usize),
}

impl Column<'_> {
    fn plugin(&self) -> &dyn ScorePlugin {
        match self {
            Column::Kept(plugin, _) | Column::Constant(plugin, _) | Column::Domain(plugin, _) => {
                *plugin
            }
        }
    }
}

impl ClassIndex {
    /// Places `pod` from its class when every node is to be examined and every plugin with
    /// something to say about the pod is one whose answers its class keeps; otherwise (or,
    /// once the index is full, for a class's first pod) says to run the plain cycle.
    /// `next_start` is the cycle memory's rotating start, left as a full pass over the nodes
    /// leaves it.
    pub(super) fn place(
        &mut self,
        cycle: &Cycle<'_>,
        state: &mut CycleState,
        pre: &PreFiltered,
        diagnosis: &Diagnosis,
        next_start: &mut usize,
    ) -> Outcome {
        let Cycle {
            profile,
            pod,
            snapshot,
            options,
        } = *cycle;
        let n = snapshot.len();
        if !examines_every_node(profile, pre, diagnosis, options, n) {
            return Outcome::Plain(None);
        }
        let filters = active_filters(profile, state, pod, snapshot, &pre.skip_filter);
        let reads_feasible = profile
            .pre_score
            .iter()
            .filter_map(|p| p.as_pre_score())
            .any(|p| p.reads_feasible(pod, snapshot));
        let Some((kept_filters, domains)) = class_filters(&filters, state, pod, snapshot) else {
            return Outcome::Plain(None);
        };
        let Some(hash) = self.admit(ClassKey::of(profile, pod), n) else {
            return Outcome::Plain(None);
        };
        let Some(class) = self.classes.get_mut(&hash) else {
            return Outcome::Plain(None);
        };
        let filtered = Filtered {
            filters: &kept_filters,
            state,
            pod,
            snapshot,
        };
        let scratch = &mut self.scratch;
        let Some(fresh) = class.update_verdicts(&filtered, scratch) else {
            // A plugin failed: the plain cycle reports it.
            self.classes.remove(&hash);
            return Outcome::Plain(None);
        };
        let start = *next_start % n;
        let counts = &mut scratch.domain_counts;
        let feasible = if domains.is_empty() {
            class.feasible()
        } else {
            class.feasible() - domains.count(&class.totals, &mut class.by_value, counts)
        };
        // The changed nodes have verdicts but no totals yet: what follows scores them, or
        // leaves every total to be scored again.
        if feasible <= 1 {
            class.scored_by.clear();
            if feasible == 0 {
                return Outcome::Plain(None);
            }
            *next_start = start;
            class.count_filter_runs(
                &filters,
                state.observer(),
                domain_rejections(&domains, &scratch.domain_counts),
            );
            let only = class.feasible_from(0, &domains).next().unwrap_or(0);
            return Outcome::Placed(Chosen {
                node: snapshot.nodes()[only].node.name.clone(),
                evaluated: n,
                feasible: 1,
                score_plugins: Vec::new(),
                scores: Vec::new(),
                rejections: class_rejections(
                    class,
                    domain_rejections(&domains, &scratch.domain_counts),
                ),
            });
        }
        // The feasible nodes in the plain cycle's order of examination, for PreScore
        // plugins that read them.
        let feasible_nodes: Vec<&NodeInfo> = if reads_feasible {
            (class.feasible_from(start, &domains))
                .map(|p| &*snapshot.nodes()[p])
                .collect()
        } else {
            Vec::new()
        };
        let skipped = match run_pre_score(profile, state, pod, snapshot, &feasible_nodes) {
            Ok(skipped) => skipped,
            Err(_) => {
                class.scored_by.clear();
                return Outcome::Plain(None);
            }
        };
        // A PreScore that read the feasible nodes runs again in the plain cycle, if the
        // cycle is left to it, so that nothing depends on their order being its own.
        let to_plain = (!reads_feasible).then(|| skipped.clone());
        let state: &CycleState = state;
        let mut live: Vec<DomainColumn<'_>> = Vec::new();
        let score_started = state.observer().now();
        let Some(columns) = score_columns(profile, &skipped, state, pod, snapshot, &mut live)
        else {
            class.scored_by.clear();
            return Outcome::Plain(to_plain);
        };
        let scoring = Scoring {
            columns: &columns,
            state,
            pod,
            snapshot,
        };
        if !class.refresh_totals(&scoring, fresh, scratch) {
            class.scored_by.clear();
            return Outcome::Plain(to_plain);
        }

        // The choice, and the best rows, over the feasible nodes in the plain cycle's
        // order of examination (from the rotating start): only the nodes with the best total
        // can be chosen, and the tie-break looks at them alone: by their keys as the spans
        // are read (by name, gathered first, with the fixed order).
        let order = Order {
            start,
            fixed_order: fixed_tie_order(profile, |name| columns.iter().any(|(_, n)| *n == name)),
            top_scores: options.top_scores,
        };
        let Some((chosen, best)) = class.choose(
            &domains,
            &scoring,
            &mut live,
            &order,
            feasible,
            &mut scratch.listed,
        ) else {
            return Outcome::Plain(to_plain);
        };
        *next_start = start;
        let Some(scores) = class.best_rows(&scoring, &live, &best, &mut scratch.cells) else {
            return Outcome::Plain(to_plain);
        };
        class.count_filter_runs(
            &filters,
            state.observer(),
            domain_rejections(&domains, &scratch.domain_counts),
        );
        let observer = state.observer();
        if !columns.is_empty() {
            let elapsed = observer.now().saturating_sub(score_started);
            observer.extension_point(Point::Score, Code::Success, elapsed);
        }
        for (_, name) in &columns {
            observer.runs(name, Point::Score, feasible as u64);
        }
        Outcome::Placed(Chosen {
            node: snapshot.nodes()[chosen].node.name.clone(),
            evaluated: n,
            feasible,
            score_plugins: columns.iter().map(|(_, name)| *name).collect(),
            scores,
            rejections: class_rejections(
                class,
                domain_rejections(&domains, &scratch.domain_counts),
            ),
        })
    }

    /// Keeps a class for `key`, dropping the least recently used ones to make room, and
    /// returns its hash; None (run the plain cycle) for a class's first pod once the index
    /// is full, and for a class whose hash another class kept has.
    fn admit(&mut self, key: ClassKey, n: usize) -> Option<u64> {
        let hash = key.hash_value();
        self.clock += 1;
        if !self.classes.contains_key(&hash) {
            if self.is_full(n) {
                let slot = &mut self.seen[(hash % SEEN_SLOTS as u64) as usize];
                if *slot != hash {
                    *slot = hash;
                    return None;
                }
            }
            self.make_room(n);
            self.classes.insert(hash, Class::new(key.clone()));
        }
        let class = self.classes.get_mut(&hash)?;
        if class.key != key {
            return None;
        }
        class.used = self.clock;
        Some(hash)
    }

    /// True when one more class of `n` nodes would not fit.
    fn is_full(&self, n: usize) -> bool {
        self.classes.len() >= (self.max_cells / n.max(1)).max(1)
    }

    /// Drops the least recently used classes until one more of `n` nodes fits.
    fn make_room(&mut self, n: usize) {
        while self.is_full(n) {
            let Some(oldest) = self
                .classes
                .iter()
                .min_by_key(|(_, c)| c.used)
                .map(|(h, _)| *h)
            else {
                return;
            };
            self.classes.remove(&oldest);
        }
    }
}

/// The least [`tie_key`] among the nodes whose bit is set in `tied` (bit `i` for
/// `hashes[i]`, their name hashes; at most 64); `u64::MAX` when there is none.
///
/// The plain choice reads every node holding the class's best total, thousands per cycle
/// in a large cluster of empty nodes, so this is built for the vector units the CPU has
/// (chosen when the program starts): eight nodes at a time, 64-bit multiplications and
/// all, where the baseline x86-64 instruction set has no 64-bit vector multiplication and
/// does one node at a time.
#[multiversion::multiversion(targets("x86_64+avx512f+avx512dq+avx512vl", "x86_64+avx2"))]
fn least_tied_key(hashes: &[u64], tied: u64, pod_hash: u64) -> u64 {
    // All ones for a node that is not tied: a mask rather than a branch. Eight minimums
    // apart, each lane shifting its bit out by a constant, which the compiler turns into
    // vector lanes.
    let key = |h: u64, bit: u64| tie_key(h, pod_hash) | (bit & 1 ^ 1).wrapping_neg();
    let (hashes, left) = hashes.as_chunks::<8>();
    let mut least = [u64::MAX; 8];
    let mut bits = tied;
    for h in hashes {
        for (i, l) in least.iter_mut().enumerate() {
            *l = (*l).min(key(h[i], bits >> i));
        }
        bits = bits.checked_shr(8).unwrap_or(0);
    }
    left.iter()
        .enumerate()
        .fold(least.into_iter().min().unwrap_or(u64::MAX), |m, (i, &h)| {
            m.min(key(h, bits >> i))
        })
}

/// The tie-break by key over the tied positions of spans offered in the order of
/// examination: the least key so far and the position holding it (the first offered of
/// equal keys; `usize::MAX` before any).
pub(super) struct LeastKey<'h> {
    hashes: &'h [u64],
    pod_hash: u64,
    key: u64,
    pub chosen: usize,
}

impl<'h> LeastKey<'h> {
    /// Over the nodes of name hashes `hashes` (by position), for the pod of `pod_hash`.
    pub fn new(hashes: &'h [u64], pod_hash: u64) -> Self {
        LeastKey {
            hashes,
            pod_hash,
            key: u64::MAX,
            chosen: usize::MAX,
        }
    }

    /// Offers the positions of `lo..hi` whose bit (from `lo`) is set in `tied`: the span's
    /// least key first, without a branch per node (about one node in two or three ties,
    /// which no branch predicts); the node holding it is looked for only when it is the
    /// least so far, a few times per cycle.
    pub fn offer(&mut self, lo: usize, hi: usize, tied: u64) {
        let (hashes, pod_hash) = (self.hashes, self.pod_hash);
        let key = least_tied_key(&hashes[lo..hi], tied, pod_hash);
        if key < self.key || self.chosen == usize::MAX {
            let holder = bit_positions(tied)
                .map(|i| lo + i)
                .find(|&p| tie_key(hashes[p], pod_hash) == key);
            if let Some(p) = holder {
                (self.key, self.chosen) = (key, p);
            }
        }
    }
}

/// The lowest `len` bits set (all 64 for 64).
/// How the class scores with each Score plugin that runs (not skipped at PreScore): a
/// column its totals keep, one the same on every node, or one by domain (whose scores go
/// into `live`); None when a plugin's scores can be none of these, or fail.
fn score_columns<'p, 's>(
    profile: &'p Profile,
    skipped: &[&'static str],
    state: &'s CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
    live: &mut Vec<DomainColumn<'s>>,
) -> Option<Vec<(Column<'p>, &'static str)>> {
    let n = snapshot.len();
    let mut columns = Vec::new();
    for (plugin, weight) in &profile.score {
        let name = plugin.name();
        let Some(s) = plugin.as_score().filter(|_| !skipped.contains(&name)) else {
            continue;
        };
        let plain = plain_weight(*weight);
        let uniform = plain
            .then(|| s.uniform_score(state, pod, snapshot))
            .flatten();
        let column = match uniform {
            Some(raw) => {
                Column::Constant(s, uniform_weighted(s, name, *weight, raw, state, pod).ok()?)
            }
            None if plain && !s.normalizes() && s.score_by_requests(state, pod) => {
                Column::Kept(s, *weight)
            }
            None if plain => {
                let scores = s.score_by_domain(state, pod, snapshot)?;
                // Values of the cycle's snapshot only: they are read by its positions.
                if !scores.keys.iter().all(|(values, _)| values.ids.len() == n) {
                    return None;
                }
                live.push(DomainColumn::new(scores, *weight));
                Column::Domain(s, live.len() - 1)
            }
            None => return None,
        };
        columns.push((column, name));
    }
    Some(columns)
}

/// True when the cycle would examine every node and nothing limits it to some of them
/// (PreFilter's candidates, a nominated node, statuses already given): only then can a
/// class's verdicts on every node stand for the cycle's.
fn examines_every_node(
    profile: &Profile,
    pre: &PreFiltered,
    diagnosis: &Diagnosis,
    options: &CycleOptions<'_>,
    n: usize,
) -> bool {
    let percentage = profile
        .percentage_of_nodes_to_score
        .unwrap_or(options.percentage_of_nodes_to_score);
    n > 0
        && num_feasible_nodes_to_find(percentage, n) >= n
        && pre.candidates.is_none()
        && !pre.exhaustive
        && diagnosis.node_statuses.is_empty()
        && options.nominated.is_none()
}

/// The filters whose verdicts a class keeps (those that answer by the pod's requests, and
/// those not called), and the checks read by domain; None when a filter answers neither
/// way, or a kept verdict would come after one by domain (which would change the plugin a
/// node's rejection names).
fn class_filters<'p>(
    filters: &[ActiveFilter<'p>],
    state: &CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
) -> Option<(Vec<ActiveFilter<'p>>, DomainChecks)> {
    let n = snapshot.len();
    let mut domains = DomainChecks::new();
    let mut kept = Vec::with_capacity(filters.len());
    for f in filters {
        if !f.called || f.plugin.verdict_by_requests(state, pod) {
            if f.called && !domains.is_empty() {
                return None;
            }
            kept.push(*f);
        } else {
            let verdicts = f.plugin.verdict_by_domain(state, pod, snapshot)?;
            domains.add(f.name, verdicts, n)?;
        }
    }
    Some((kept, domains))
}

fn low_bits(len: usize) -> u64 {
    u64::MAX
        .checked_shr(64u32.saturating_sub(len as u32))
        .unwrap_or(0)
}

/// The positions of the bits set in `bits`, lowest first.
fn bit_positions(mut bits: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (bits != 0).then(|| {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            i
        })
    })
}

/// The spans of positions `lo..hi` in the plain cycle's order of examination over `n`
/// nodes from `start`: up to the end, then from the first node, each cut at a multiple
/// of [`SPAN`] (the spans [`Class::span_max`] sums up).
fn examination_spans(start: usize, n: usize) -> impl Iterator<Item = (usize, usize)> {
    [(start, n), (0, start)].into_iter().flat_map(|(from, to)| {
        std::iter::successors(Some(from), move |&lo| {
            let hi = (lo / SPAN + 1) * SPAN;
            (hi < to).then_some(hi)
        })
        .take_while(move |&lo| lo < to)
        .map(move |lo| (lo, ((lo / SPAN + 1) * SPAN).min(to)))
    })
}

/// The snapshot's nodes at `positions`.
fn nodes_at<'s>(snapshot: &'s Snapshot, positions: &[usize]) -> Vec<&'s NodeInfo> {
    positions.iter().map(|&p| &*snapshot.nodes()[p]).collect()
}

/// The class's rejections and those by domain (`by_domain`) counted as the plain cycle
/// counts its diagnosis's.
fn class_rejections<'s>(
    class: &'s Class,
    by_domain: impl Iterator<Item = (&'s Status, usize)>,
) -> Vec<RejectionCount> {
    count_rejections(class.rejected.iter().map(|(s, n)| (s, *n)).chain(by_domain))
}

/// Each node's sum of the kept columns' weighted scores, into `sums`; `None` when a plugin
/// fails or gives a score out of range (the plain cycle then reports it).
fn weighted_sums(
    columns: &[(Column<'_>, &'static str)],
    state: &CycleState,
    pod: &PodInfo,
    block: NodeBlock<'_>,
    cells: &mut Vec<i64>,
    sums: &mut Vec<i64>,
) -> Option<()> {
    let len = block.nodes.len();
    sums.clear();
    sums.resize(len, 0);
    for (column, name) in columns {
        let Column::Kept(plugin, weight) = column else {
            continue;
        };
        kept_scores(*plugin, name, state, pod, block, cells)?;
        for (sum, &raw) in sums.iter_mut().zip(cells.iter()) {
            *sum += raw * weight;
        }
    }
    Some(())
}

/// Each column's weighted scores of the block's nodes, in column order (a constant column
/// repeated); `None` when a plugin fails or gives a score out of range.
fn weighted_columns(
    columns: &[(Column<'_>, &'static str)],
    live: &[DomainColumn<'_>],
    state: &CycleState,
    pod: &PodInfo,
    block: NodeBlock<'_>,
    cells: &mut Vec<i64>,
) -> Option<Vec<Vec<i64>>> {
    let len = block.nodes.len();
    columns
        .iter()
        .map(|(column, name)| match column {
            Column::Constant(_, weighted) => Some(vec![*weighted; len]),
            Column::Domain(_, i) => Some(block.positions.iter().map(|&p| live[*i].at(p)).collect()),
            Column::Kept(plugin, weight) => {
                kept_scores(*plugin, name, state, pod, block, cells)?;
                Some(cells.iter().map(|&raw| raw * weight).collect())
            }
        })
        .collect()
}

/// The raw scores of a kept column's plugin (`name`) on the block's nodes, into `cells`,
/// through Score's runner; `None` when the plugin fails or a score is out of range (the
/// plain cycle then reports it).
fn kept_scores(
    plugin: &dyn ScorePlugin,
    name: &'static str,
    state: &CycleState,
    pod: &PodInfo,
    block: NodeBlock<'_>,
    cells: &mut Vec<i64>,
) -> Option<()> {
    cells.clear();
    cells.resize(block.nodes.len(), 0);
    run_score_block(&[(plugin, name, 0)], &[None], state, pod, block, cells).ok()?;
    check_scores(name, cells).ok()
}

mod alike;
mod domains;
#[cfg(test)]
mod tests;
