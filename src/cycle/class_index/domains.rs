//! The part of a cycle through the class index that its class does not keep: the verdicts
//! and raw scores that depend on a node's topology domains, which plugins give for every
//! node at once ([`DomainVerdict`], [`DomainScores`]) and the cycle reads by position.

use std::sync::Arc;

use super::{Class, SPAN};
use crate::cache::{Snapshot, TopologyValues};
use crate::cycle::{TopK, select_host, tie_key};
use crate::framework::{
    CycleState, DomainScores, DomainVerdict, MAX_NODE_SCORE, MIN_NODE_SCORE, NodeScore,
    ScorePlugin, Status,
};
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
    /// rejections than the codes can.
    pub fn add(&mut self, plugin: &'static str, verdicts: Vec<DomainVerdict>) -> Option<()> {
        for v in verdicts {
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
    /// more) that the checks reject; returns how many they reject in all.
    pub fn count(&self, totals: &[i32], counts: &mut Vec<usize>) -> usize {
        counts.clear();
        counts.resize(self.rejections.len(), 0);
        let mut rejected = 0;
        if let [(values, table)] = self.checks.as_slice() {
            let last = table.len() - 1;
            for (&total, &id) in totals.iter().zip(&values.ids) {
                if total >= 0 {
                    let c = table[(id as usize).min(last)];
                    if c != 0 {
                        counts[usize::from(c) - 1] += 1;
                        rejected += 1;
                    }
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
        state: &CycleState,
        pod: &PodInfo,
        raws: &[i64],
    ) -> Option<()> {
        let mut scores: Vec<NodeScore> = raws
            .iter()
            .enumerate()
            .map(|(index, &score)| NodeScore { index, score })
            .collect();
        if plugin.normalizes() && !plugin.normalize(state, pod, &mut scores).is_success() {
            return None;
        }
        self.weighted.clear();
        for (&raw, s) in raws.iter().zip(&scores) {
            if !(MIN_NODE_SCORE..=MAX_NODE_SCORE).contains(&s.score) {
                return None;
            }
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
}

/// A candidate for the choice: its position, total and place in the order of examination.
#[derive(Clone, Copy)]
struct Candidate {
    position: usize,
    total: i64,
    rank: usize,
}

impl Pick<'_> {
    /// The node the plain cycle would choose among the `feasible` nodes (those the class
    /// and the checks by domain accept), and the positions of its best rows, best first;
    /// `None` when a plugin fails to normalize (the plain cycle then reports it).
    /// `constant_total` is the weighted sum of the plugins that give every node one score;
    /// `live` are the plugins scoring by domain (`plugins`, in the same order).
    #[allow(clippy::too_many_arguments)]
    pub fn choose(
        &self,
        feasible: usize,
        constant_total: i64,
        live: &mut [DomainColumn<'_>],
        plugins: &[&dyn ScorePlugin],
        state: &CycleState,
        pod: &PodInfo,
        listed: &mut Vec<usize>,
    ) -> Option<(usize, Vec<usize>)> {
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
        for (c, plugin) in live.iter_mut().zip(plugins) {
            raws.clear();
            raws.extend(listed.iter().map(|&p| c.scores.at(p)));
            if others > 0 {
                raws.push(0);
            }
            raws.sort_unstable();
            raws.dedup();
            c.weigh(*plugin, state, pod, &raws)?;
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
        let mut top = TopK::new(self.top_scores);
        let (mut best, mut best_key, mut chosen) = (-1, u64::MAX, usize::MAX);
        let mut ties: Vec<usize> = Vec::new();
        for (from, to) in [(self.start, n), (0, self.start)] {
            let mut lo = from;
            while lo < to && others > 0 {
                let hi = ((lo / SPAN + 1) * SPAN).min(to);
                let span_max = self.class.span_max[lo / SPAN];
                if span_max >= best || top.would_take(i64::from(span_max)) {
                    for p in lo..hi {
                        let t = totals[p];
                        if t < 0
                            || (t < best && !top.would_take(i64::from(t)))
                            || marks[p / 64] & (1 << (p % 64)) != 0
                            || self.domains.code(p) != 0
                        {
                            continue;
                        }
                        top.offer(p, i64::from(t));
                        if t > best {
                            (best, chosen) = (t, p);
                            best_key = tie_key(hashes[p], self.pod_hash);
                            ties.clear();
                            ties.push(p);
                        } else if t == best {
                            ties.push(p);
                            let key = tie_key(hashes[p], self.pod_hash);
                            if key < best_key {
                                (best_key, chosen) = (key, p);
                            }
                        }
                    }
                }
                lo = hi;
            }
        }
        let name = |p: usize| &*self.snapshot.nodes()[p].node.name;
        if chosen != usize::MAX {
            if self.fixed_order {
                chosen = select_host(
                    pod,
                    ties.iter().map(|&p| (p, i64::from(best))),
                    |p| hashes[p],
                    name,
                    true,
                );
            }
            candidates.push(Candidate {
                position: chosen,
                total: i64::from(best) + base,
                rank: rank(chosen),
            });
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
            .chain(top.into_best().into_iter().map(|(p, t)| Candidate {
                position: p,
                total: t + base,
                rank: rank(p),
            }))
            .collect();
        rows.sort_by(|a, b| b.total.cmp(&a.total).then(a.rank.cmp(&b.rank)));
        rows.truncate(self.top_scores);
        Some((
            winner.position,
            rows.into_iter().map(|c| c.position).collect(),
        ))
    }
}
