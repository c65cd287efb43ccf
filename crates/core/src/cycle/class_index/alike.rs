//! Nodes alike to the plugins a class keeps: those plugins read nothing of a node but its
//! resource amounts and pod count (see
//! [`FilterPlugin::verdict_by_requests`](crate::framework::FilterPlugin::verdict_by_requests)),
//! so a pass over every node evaluates one node of each distinct set of amounts and gives
//! its answers to the others. A cluster is mostly nodes of a few shapes, and a new class's
//! first pass meets most of them empty: thousands of nodes, a handful of evaluations.

use std::collections::hash_map::Entry;

use rustc_hash::FxHashMap;

use crate::cache::NodeRow;

/// The grouping of one pass, its buffers kept between passes.
#[derive(Debug, Default)]
pub(super) struct Alike {
    /// The first position met with each [`NodeRow::amounts_hash`].
    first: FxHashMap<u64, usize>,
    /// The positions that take an earlier position's answers: (position, earlier).
    pub followers: Vec<(usize, usize)>,
}

impl Alike {
    /// Puts into `leaders` each of `positions` whose node is the first met with its
    /// amounts, or whose row does not hold them all ([`NodeRow::same_amounts`]), and
    /// keeps the others as followers of the first.
    pub fn split(
        &mut self,
        rows: &[NodeRow],
        positions: impl Iterator<Item = usize>,
        leaders: &mut Vec<usize>,
    ) {
        self.first.clear();
        self.followers.clear();
        // The last group met, asked first: alike nodes tend to come in runs.
        let mut last = usize::MAX;
        for p in positions {
            let row = &rows[p];
            if row.amounts_hash == 0 {
                leaders.push(p);
                continue;
            }
            if last != usize::MAX && row.same_amounts(&rows[last]) {
                self.followers.push((p, last));
                continue;
            }
            match self.first.entry(row.amounts_hash) {
                Entry::Occupied(first) if row.same_amounts(&rows[*first.get()]) => {
                    last = *first.get();
                    self.followers.push((p, last));
                }
                // Another set of amounts with the same hash: evaluated on its own.
                Entry::Occupied(_) => leaders.push(p),
                Entry::Vacant(slot) => {
                    slot.insert(p);
                    leaders.push(p);
                    last = p;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, node_info, pod};

    #[test]
    fn nodes_alike_in_amounts_and_pods_are_alike_whatever_else_differs() {
        let plain = |name: &str| node(name).capacity("8", "16Gi");
        let row =
            |n: crate::testing::NodeBuilder, pods: &[_]| NodeRow::of(&node_info(n.build(), pods));
        let busy = [pod("a").req("cpu", "1").build()];
        let empty = row(plain("a"), &[]);
        assert_ne!(empty.amounts_hash, 0);
        assert!(empty.same_amounts(&row(plain("b").label("zone", "z1"), &[])));
        assert!(row(plain("a"), &busy).same_amounts(&row(plain("b"), &busy)));
        assert!(!empty.same_amounts(&row(plain("b"), &busy)));
        assert!(!empty.same_amounts(&row(node("b").capacity("8", "32Gi"), &[])));
        // Extended resources are not in the row: such a node is alike to none.
        let dongles = row(plain("c").alloc("example.com/dongle", "2"), &[]);
        assert_eq!(dongles.amounts_hash, 0);
        assert!(!dongles.same_amounts(&dongles));
        let asks = [pod("d").req("example.com/dongle", "1").build()];
        assert_eq!(row(plain("d"), &asks).amounts_hash, 0);
    }

    fn row(requested_cpu: i64, scalars: bool) -> NodeRow {
        let mut row = NodeRow {
            allocatable_cpu: 4000,
            allocatable_memory: 1 << 34,
            allowed_pods: 110,
            requested_cpu,
            ..NodeRow::default()
        };
        row.amounts_hash = if scalars { 0 } else { 1 + requested_cpu as u64 };
        row
    }

    #[test]
    fn each_set_of_amounts_is_evaluated_once_and_rows_missing_amounts_always() {
        let mut rows = vec![
            row(0, false),
            row(100, false),
            row(0, false),
            row(0, true),
            row(0, true),
            row(100, false),
        ];
        rows[2].name_hash = 7;
        let (mut alike, mut leaders) = (Alike::default(), Vec::new());
        alike.split(&rows, 0..rows.len(), &mut leaders);
        assert_eq!(leaders, [0, 1, 3, 4]);
        assert_eq!(alike.followers, [(2, 0), (5, 1)]);

        // Equal hashes of other amounts are told apart.
        let mut other = row(200, false);
        other.amounts_hash = rows[0].amounts_hash;
        rows.push(other);
        leaders.clear();
        alike.split(&rows, 0..rows.len(), &mut leaders);
        assert_eq!(leaders, [0, 1, 3, 4, 6]);

        // A second pass forgets the first's groups.
        leaders.clear();
        alike.split(&rows, [5, 2].into_iter(), &mut leaders);
        assert_eq!(leaders, [5, 2]);
        assert!(alike.followers.is_empty());
    }
}
