//! What a Filter or Score plugin can say of every node at once when its answer for a pod
//! depends on nothing of a node but the node's values of some topology keys: a verdict per
//! domain ([`DomainVerdict`]) or a raw score summed from numbers per domain
//! ([`DomainScores`]). A cycle that examines every node then reads those answers from
//! per-position columns, and needs the plugin for no node (see
//! [`FilterPlugin::verdict_by_domain`](super::FilterPlugin::verdict_by_domain) and
//! [`ScorePlugin::score_by_domain`](super::ScorePlugin::score_by_domain)).

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::cache::TopologyValues;

use super::status::Status;

/// One check of a Filter plugin for one pod, by the node's value of one topology key: the
/// node at position `p` passes when `code(p)` is 0, else it is rejected with
/// `rejections[code(p) - 1]`.
#[derive(Debug, Clone)]
pub struct DomainVerdict {
    /// The key's value on every node of the snapshot, by position.
    pub values: Arc<TopologyValues>,
    /// The code of each value, by value number.
    pub by_value: Vec<u8>,
    /// The code of a node without the key.
    pub without: u8,
    /// The rejections the codes name (the plugin's statuses, not yet naming the plugin).
    pub rejections: Vec<Status>,
}

impl DomainVerdict {
    /// The code of the node at `position` of the snapshot the values were taken from.
    #[inline]
    pub fn code(&self, position: usize) -> u8 {
        match self.values.ids[position] {
            TopologyValues::NONE => self.without,
            id => self.by_value.get(id as usize).copied().unwrap_or(0),
        }
    }
}

/// A Score plugin's raw score of every node for one pod, as a sum over topology keys: each
/// key contributes the number listed for the node's value of it, or 0 (a value not listed,
/// or a node without the key).
#[derive(Debug, Clone, Copy)]
pub struct DomainScores<'s> {
    /// Per key: its values on every node, and the numbers of the values listed.
    pub keys: &'s [(Arc<TopologyValues>, FxHashMap<u32, i64>)],
}

impl DomainScores<'_> {
    /// The raw score of the node at `position` of the snapshot the values were taken from.
    pub fn at(&self, position: usize) -> i64 {
        self.keys
            .iter()
            .map(|(values, sums)| match values.ids[position] {
                TopologyValues::NONE => 0,
                id => sums.get(&id).copied().unwrap_or(0),
            })
            .sum()
    }

    /// The positions whose raw score may differ from 0, each once, in ascending order.
    pub fn listed_positions(&self, into: &mut Vec<usize>) {
        into.clear();
        for (values, sums) in self.keys {
            for &id in sums.keys() {
                into.extend(values.positions_of(id).iter().map(|&p| p as usize));
            }
        }
        into.sort_unstable();
        into.dedup();
    }
}
