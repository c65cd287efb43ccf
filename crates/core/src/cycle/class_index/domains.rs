//! The part of a cycle through the class index that its class does not keep: the verdicts
//! and raw scores that depend on a node's topology domains, which plugins give for every
//! node at once ([`DomainVerdict`], [`DomainScores`]) and the cycle reads by position.

use std::sync::Arc;

use super::{Class, LeastKey, SPAN, Total, bit_positions, examination_spans, low_bits};
use crate::cache::{Snapshot, TopologyValues};
use crate::cycle::{TopK, select_host, tie_key};
use crate::framework::runners::run_normalize;
use crate::framework::{CycleState, DomainScores, DomainVerdict, NodeScore, ScorePlugin, Status};
use crate::model::PodInfo;

/// The Filter plugins' verdicts by domain for one cycle, checked in order.
pub(super) struct DomainChecks {
    /// Per check, the key's values and, by value number, 0 for a node that passes or
    /// `k + 1` for the rejection `rejections[k]`; the last entry is for a node without
    /// the key.
    checks: Vec<(Arc<TopologyValues>, Vec<u16>)>,
    /// The rejections, each naming its plugin.
    pub rejections: Vec<Status>,
}

impl DomainChecks {
    pub fn new() -> Self {
        DomainChecks {
            checks: Vec::new(),
            rejections: Vec::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.checks.is_empty()
    }

    /// Adds `plugin`'s checks, after those added before; `None` when they name more
    /// rejections than the codes can, or hold values of another snapshot than the cycle's
    /// (of `nodes` nodes).
    pub fn add(
        &mut self,
        plugin: &'static str,
        verdicts: Vec<DomainVerdict>,
        nodes: usize,
    ) -> Option<()> {
        for v in verdicts {
            if v.values.ids.len() != nodes {
                return None;
            }
            let first = self.rejections.len();
            let named = v.rejections.len();
            self.rejections
                .extend(v.rejections.into_iter().map(|s| s.with_plugin(plugin)));
            // A code naming no rejection makes the plugin's answer unusable.
            let code = |c: u8| match usize::from(c) {
                0 => Some(0),
                c if c <= named => u16::try_from(first + c).ok(),
                _ => None,
            };
            let table = (0..v.values.values.len())
                .map(|id| v.by_value.get(id).copied().unwrap_or(0))
                .chain(std::iter::once(v.without))
                .map(code)
                .collect::<Option<Vec<u16>>>()?;
            self.checks.push((v.values, table));
        }
        Some(())
    }

    /// The one check's values by position and codes by value number (see
    /// [`DomainChecks::code`]), when there is one check.
    pub fn single(&self) -> Option<(&[u32], &[u16])> {
        match self.checks.as_slice() {
            [(values, table)] => Some((&values.ids, table)),
            _ => None,
        }
    }

    /// The code of the node at `position`: 0 when it passes every check, else one more
    /// than the index of its first rejection.
    #[inline]
    pub fn code(&self, position: usize) -> u16 {
        for (values, table) in &self.checks {
            let id = values.ids[position] as usize;
            let c = table[id.min(table.len() - 1)];
            if c != 0 {
                return c;
            }
        }
        0
    }

    /// Counts, per rejection, the nodes of `totals` the class accepts (a total of 0 or
    /// more) that the checks reject; returns how many they reject in all. With one check,
    /// from the class's counts by value (`by_value`, made for the check's key when it has
    /// none).
    pub fn count(
        &self,
        totals: &[Total],
        by_value: &mut Vec<FeasibleByValue>,
        counts: &mut Vec<usize>,
    ) -> usize {
        counts.clear();
        counts.resize(self.rejections.len(), 0);
        let mut rejected = 0;
        if let [(values, table)] = self.checks.as_slice() {
            let feasible = match by_value.iter().position(|f| Arc::ptr_eq(&f.values, values)) {
                Some(k) => &by_value[k],
                None => {
                    if by_value.len() >= KEYS_COUNTED {
                        by_value.remove(0);
                    }
                    by_value.push(FeasibleByValue::new(values, totals));
                    &by_value[by_value.len() - 1]
                }
            };
            for (&code, &n) in table.iter().zip(&feasible.counts) {
                if code != 0 {
                    counts[usize::from(code) - 1] += n as usize;
                    rejected += n as usize;
                }
            }
        } else {
            for (p, &total) in totals.iter().enumerate() {
                if total >= 0 {
                    let c = self.code(p);
                    if c != 0 {
                        counts[usize::from(c) - 1] += 1;
                        rejected += 1;
                    }
                }
            }
        }
        rejected
    }
}

/// Topology keys a class counts its feasible nodes by, at most (see [`FeasibleByValue`]).
const KEYS_COUNTED: usize = 4;

/// A class's feasible nodes counted by their value of one topology key (the last count for
/// the nodes without the key): what a check by domain rejects among them is then counted
/// per value, not node by node.
#[derive(Debug)]
pub(super) struct FeasibleByValue {
    values: Arc<TopologyValues>,
    counts: Vec<u32>,
}

impl FeasibleByValue {
    /// The counts of the nodes with a total of 0 or more in `totals`.
    fn new(values: &Arc<TopologyValues>, totals: &[Total]) -> Self {
        let mut counts = vec![0u32; values.values.len() + 1];
        let last = counts.len() - 1;
        for (&id, &total) in values.ids.iter().zip(totals) {
            counts[(id as usize).min(last)] += u32::from(total >= 0);
        }
        FeasibleByValue {
            values: values.clone(),
            counts,
        }
    }

    /// Counts the node at `position` in (`feasible`) or out.
    pub fn count(&mut self, position: usize, feasible: bool) {
        let last = self.counts.len() - 1;
        let at = (self.values.ids[position] as usize).min(last);
        if feasible {
            self.counts[at] += 1;
        } else {
            self.counts[at] -= 1;
        }
    }
}

/// A Score plugin whose raw scores are sums per domain, and, once the cycle knows the
/// feasible nodes, the weighted score of each raw score among them.
pub(super) struct DomainColumn<'s> {
    pub scores: DomainScores<'s>,
    pub weight: i64,
    /// Each distinct raw score among the feasible nodes and its weighted score, by raw
    /// score.
    weighted: Vec<(i64, i64)>,
}

impl<'s> DomainColumn<'s> {
    pub fn new(scores: DomainScores<'s>, weight: i64) -> Self {
        DomainColumn {
            scores,
            weight,
            weighted: Vec::new(),
        }
    }

    /// Normalizes the distinct raw scores `raws` (sorted, each once) of the feasible nodes
    /// as the plugin would normalize every feasible node's, and weighs them; `None` when
    /// the plugin fails or gives a score out of range (the plain cycle then reports it).
    pub fn weigh(
        &mut self,
        plugin: &dyn ScorePlugin,
        name: &'static str,
        state: &CycleState,
        pod: &PodInfo,
        raws: &[i64],
    ) -> Option<()> {
        let mut scores: Vec<NodeScore> = raws
            .iter()
            .enumerate()
            .map(|(index, &score)| NodeScore { index, score })
            .collect();
        run_normalize(plugin, name, state, pod, &mut scores).ok()?;
        self.weighted.clear();
        for (&raw, s) in raws.iter().zip(&scores) {
            self.weighted.push((raw, s.score * self.weight));
        }
        Some(())
    }

    /// The weighted score of a feasible node whose raw score is `raw`.
    pub fn weighted(&self, raw: i64) -> i64 {
        match self.weighted.binary_search_by_key(&raw, |&(r, _)| r) {
            Ok(i) => self.weighted[i].1,
            // Not among the feasible nodes' raw scores: never asked of a feasible node.
            Err(_) => 0,
        }
    }

    /// The weighted score of the feasible node at `position`.
    pub fn at(&self, position: usize) -> i64 {
        self.weighted(self.scores.at(position))
    }
}

/// What the choice among a class's nodes with verdicts and scores by domain reads.
pub(super) struct Pick<'a> {
    pub class: &'a Class,
    pub domains: &'a DomainChecks,
    /// The plain cycle's first position examined.
    pub start: usize,
    pub fixed_order: bool,
    pub pod_hash: u64,
    pub snapshot: &'a Snapshot,
    pub top_scores: usize,
    /// The pod and its cycle's state, which the scores by domain are weighed for.
    pub pod: &'a PodInfo,
    pub state: &'a CycleState,
}

/// The best of the feasible nodes that no score by domain sets apart, by their class
/// totals alone.
struct Others {
    total: Total,
    /// The one the tie-break by key picks among those with `total` (`usize::MAX`: none).
    chosen: usize,
    /// With the fixed order of names, all of those, for the tie-break by name.
    ties: Vec<usize>,
    /// The best rows among them, best first, ties in the order of examination.
    top: Vec<(usize, i64)>,
}

/// A candidate for the choice: its position, total and place in the order of examination.
#[derive(Clone, Copy)]
struct Candidate {
    position: usize,
    total: i64,
    rank: usize,
}

impl Pick<'_> {
    /// The spans of positions in the plain cycle's order of examination, from its start.
    fn spans(&self) -> impl Iterator<Item = (usize, usize)> + use<> {
        examination_spans(self.start, self.class.totals.len())
    }

    /// True when the node at `p` passes the checks by domain and is not `marks`ed.
    #[inline]
    fn passes(&self, p: usize, marks: &[u64]) -> bool {
        marks[p / 64] & (1 << (p % 64)) == 0 && self.domains.code(p) == 0
    }

    /// One bit per position (word `w` for the positions of span `w`), set for the nodes
    /// that pass the checks by domain and are not `marks`ed: what [`Pick::passes`] says
    /// of each, for a whole span at once.
    fn passing(&self, marks: &[u64]) -> Vec<u64> {
        let n = self.class.totals.len();
        let mut bits = vec![0u64; n.div_ceil(64)];
        match self.domains.single() {
            Some((ids, table)) => {
                let last = table.len() - 1;
                for ((word, ids), &marked) in bits.iter_mut().zip(ids.chunks(64)).zip(marks) {
                    let passes = ids.iter().enumerate().fold(0, |bits, (i, &id)| {
                        bits | u64::from(table[(id as usize).min(last)] == 0) << i
                    });
                    *word = passes & !marked;
                }
            }
            None => {
                for p in (0..n).filter(|&p| self.passes(p, marks)) {
                    bits[p / 64] |= 1 << (p % 64);
                }
            }
        }
        bits
    }

    /// [`Others`] when at least as many of them as the best rows take (one at least) have
    /// the class's best total, which is then theirs: the best rows are the first of them
    /// in the order of examination, and the tie-break reads only the spans holding it.
    fn others_at_class_max(&self, marks: &[u64]) -> Option<Others> {
        let max = self
            .class
            .span_max
            .iter()
            .copied()
            .max()
            .filter(|&m| m >= 0)?;
        let passing = self.passing(marks);
        // The positions of `lo..hi` with the class's best total that pass, one bit each
        // from `lo` (a span of the order of examination lies within one span of the class).
        let candidates = |lo: usize, hi: usize| {
            let b = lo / SPAN;
            if self.class.span_max[b] != max {
                return 0;
            }
            (self.class.span_ties[b] & passing[b]) >> (lo % SPAN) & low_bits(hi - lo)
        };
        let want = self.top_scores.max(1);
        let mut first = Vec::with_capacity(want);
        for (lo, hi) in self.spans() {
            let room = want - first.len();
            first.extend(
                bit_positions(candidates(lo, hi))
                    .take(room)
                    .map(|i| (lo + i, i64::from(max))),
            );
            if first.len() == want {
                break;
            }
        }
        if first.len() < want {
            return None;
        }
        first.truncate(self.top_scores);
        let mut least = LeastKey::new(self.snapshot.name_hashes(), self.pod_hash);
        let mut ties = Vec::new();
        for (lo, hi) in self.spans() {
            let tied = candidates(lo, hi);
            if self.fixed_order {
                ties.extend(bit_positions(tied).map(|i| lo + i));
            } else {
                least.offer(lo, hi, tied);
            }
        }
        Some(Others {
            total: max,
            chosen: least.chosen,
            ties,
            top: first,
        })
    }

    /// [`Others`] by a pass over every span that may hold one of them or a best row.
    fn others_scanned(&self, marks: &[u64]) -> Others {
        let totals = &self.class.totals;
        let hashes = self.snapshot.name_hashes();
        let mut top = TopK::new(self.top_scores);
        let (mut best, mut best_key, mut chosen) = (-1, u64::MAX, usize::MAX);
        let mut ties: Vec<usize> = Vec::new();
        for (lo, hi) in self.spans() {
            let span_max = self.class.span_max[lo / SPAN];
            if span_max < best && !top.would_take(i64::from(span_max)) {
                continue;
            }
            for p in lo..hi {
                let t = totals[p];
                if t < 0 || (t < best && !top.would_take(i64::from(t))) || !self.passes(p, marks) {
                    continue;
                }
                top.offer(p, i64::from(t));
                if t > best {
                    (best, chosen) = (t, p);
                    best_key = tie_key(hashes[p], self.pod_hash);
                    ties.clear();
                } else if t == best {
                    let key = tie_key(hashes[p], self.pod_hash);
                    if key < best_key {
                        (best_key, chosen) = (key, p);
                    }
                } else {
                    continue;
                }
                if self.fixed_order {
                    ties.push(p);
                }
            }
        }
        Others {
            total: best,
            chosen,
            ties,
            top: top.into_best(),
        }
    }

    /// The node the plain cycle would choose among the `feasible` nodes (those the class
    /// and the checks by domain accept), and the positions of its best rows, best first;
    /// `None` when a plugin fails to normalize (the plain cycle then reports it).
    /// `constant_total` is the weighted sum of the plugins that give every node one score;
    /// `live` are the plugins scoring by domain (`plugins`, in the same order).
    pub fn choose(
        &self,
        feasible: usize,
        constant_total: i64,
        live: &mut [DomainColumn<'_>],
        plugins: &[(&dyn ScorePlugin, &'static str)],
        listed: &mut Vec<usize>,
    ) -> Option<(usize, Vec<usize>)> {
        let (state, pod) = (self.state, self.pod);
        let totals = &self.class.totals;
        let n = totals.len();
        // The feasible nodes a score by domain may set apart from the others, which all
        // get the raw score 0 from every such plugin.
        listed.clear();
        let mut positions = Vec::new();
        for c in live.iter() {
            c.scores.listed_positions(&mut positions);
            listed.extend_from_slice(&positions);
        }
        listed.sort_unstable();
        listed.dedup();
        listed.retain(|&p| totals[p] >= 0 && self.domains.code(p) == 0);
        let others = feasible - listed.len();
        let mut base = constant_total;
        let mut raws = Vec::new();
        for (c, &(plugin, name)) in live.iter_mut().zip(plugins) {
            raws.clear();
            raws.extend(listed.iter().map(|&p| c.scores.at(p)));
            if others > 0 {
                raws.push(0);
            }
            raws.sort_unstable();
            raws.dedup();
            c.weigh(plugin, name, state, pod, &raws)?;
            if others > 0 {
                base += c.weighted(0);
            }
        }
        let rank = |p: usize| (p + n - self.start) % n;
        let mut marks = vec![0u64; n.div_ceil(64)];
        for &p in listed.iter() {
            marks[p / 64] |= 1 << (p % 64);
        }
        let listed_rows: Vec<Candidate> = listed
            .iter()
            .map(|&p| Candidate {
                position: p,
                total: i64::from(totals[p])
                    + constant_total
                    + live.iter().map(|c| c.at(p)).sum::<i64>(),
                rank: rank(p),
            })
            .collect();
        let mut candidates = listed_rows.clone();
        // The other feasible nodes, by their class totals alone.
        let hashes = self.snapshot.name_hashes();
        let name = |p: usize| &*self.snapshot.nodes()[p].node.name;
        let mut top = Vec::new();
        if others > 0 {
            let best = self
                .others_at_class_max(&marks)
                .unwrap_or_else(|| self.others_scanned(&marks));
            let mut chosen = best.chosen;
            if self.fixed_order {
                chosen = select_host(
                    pod,
                    best.ties.iter().map(|&p| (p, i64::from(best.total))),
                    |p| hashes[p],
                    name,
                    true,
                );
            }
            if chosen != usize::MAX {
                candidates.push(Candidate {
                    position: chosen,
                    total: i64::from(best.total) + base,
                    rank: rank(chosen),
                });
            }
            top = best.top;
        }
        // The choice: the best total, then the tie-break, then the order of examination.
        let ahead = |a: &Candidate, b: &Candidate| {
            let by_tie = if self.fixed_order {
                name(a.position).cmp(name(b.position))
            } else {
                tie_key(hashes[a.position], self.pod_hash)
                    .cmp(&tie_key(hashes[b.position], self.pod_hash))
            };
            b.total.cmp(&a.total).then(by_tie).then(a.rank.cmp(&b.rank))
        };
        let winner = candidates.iter().copied().min_by(|a, b| ahead(a, b))?;
        // The best rows: the best of the others and the listed ones, ties in the order of
        // examination.
        let mut rows: Vec<Candidate> = listed_rows
            .into_iter()
            .chain(top.into_iter().map(|(p, t)| Candidate {
                position: p,
                total: t + base,
                rank: rank(p),
            }))
            .collect();
        // Only the best few are kept: selected first, then sorted, rather than sorting
        // every listed node (all of a zone's).
        let order = |a: &Candidate, b: &Candidate| b.total.cmp(&a.total).then(a.rank.cmp(&b.rank));
        if self.top_scores < rows.len() {
            rows.select_nth_unstable_by(self.top_scores, order);
            rows.truncate(self.top_scores);
        }
        rows.sort_by(order);
        Some((
            winner.position,
            rows.into_iter().map(|c| c.position).collect(),
        ))
    }
}
