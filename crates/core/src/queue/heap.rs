//! A binary heap of queued pods ordered by a caller-supplied comparison (the QueueSort
//! plugin), with removal by key. Each element carries its pod, so that a comparison looks
//! nothing up: a pop from a queue of 10,000 pods makes some thirty of them.

use std::cmp::Ordering;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::model::PodInfo;

/// Compares two `(pod, sequence number)` pairs; `Less` means "schedule first".
pub(super) trait Compare: Fn((&PodInfo, u64), (&PodInfo, u64)) -> Ordering {}
impl<F: Fn((&PodInfo, u64), (&PodInfo, u64)) -> Ordering> Compare for F {}

/// One queued pod: its key, its sequence number (arrival order) and the pod.
#[derive(Debug)]
struct Item {
    key: Arc<str>,
    seq: u64,
    pod: Arc<PodInfo>,
}

/// Pods with their sequence numbers; the least element (by the comparison) on top.
#[derive(Debug, Default)]
pub(super) struct Heap {
    items: Vec<Item>,
    positions: FxHashMap<Arc<str>, usize>,
}

impl Heap {
    /// Inserts `key`, replacing an existing entry for it.
    pub fn push(&mut self, key: Arc<str>, seq: u64, pod: Arc<PodInfo>, cmp: impl Compare) {
        self.remove(&key, &cmp);
        self.items.push(Item {
            key: key.clone(),
            seq,
            pod,
        });
        let i = self.items.len() - 1;
        self.positions.insert(key, i);
        self.sift_up(i, &cmp);
    }

    /// Puts a newer version of a queued pod in its place, keeping its sequence number (an
    /// update does not make a pod arrive again); a key not queued is left alone.
    pub fn update(&mut self, key: &str, pod: Arc<PodInfo>, cmp: impl Compare) {
        let Some(&i) = self.positions.get(key) else {
            return;
        };
        self.items[i].pod = pod;
        self.sift_down(i, &cmp);
        self.sift_up(i, &cmp);
    }

    /// Removes and returns the least key.
    pub fn pop(&mut self, cmp: impl Compare) -> Option<Arc<str>> {
        let key = self.items.first()?.key.clone();
        self.remove(&key, &cmp);
        Some(key)
    }

    /// Removes `key` if present; true when it was.
    pub fn remove(&mut self, key: &str, cmp: &impl Compare) -> bool {
        let Some(i) = self.positions.remove(key) else {
            return false;
        };
        self.items.swap_remove(i);
        if i < self.items.len() {
            self.positions.insert(self.items[i].key.clone(), i);
            self.sift_down(i, cmp);
            self.sift_up(i, cmp);
        }
        true
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    fn less(&self, i: usize, j: usize, cmp: &impl Compare) -> bool {
        let (a, b) = (&self.items[i], &self.items[j]);
        cmp((&a.pod, a.seq), (&b.pod, b.seq)) == Ordering::Less
    }

    fn swap(&mut self, i: usize, j: usize) {
        self.items.swap(i, j);
        for k in [i, j] {
            if let Some(p) = self.positions.get_mut(&self.items[k].key) {
                *p = k;
            }
        }
    }

    fn sift_up(&mut self, mut i: usize, cmp: &impl Compare) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if !self.less(i, parent, cmp) {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize, cmp: &impl Compare) {
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut least = i;
            if l < self.items.len() && self.less(l, least, cmp) {
                least = l;
            }
            if r < self.items.len() && self.less(r, least, cmp) {
                least = r;
            }
            if least == i {
                break;
            }
            self.swap(i, least);
            i = least;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;

    fn by_seq(a: (&PodInfo, u64), b: (&PodInfo, u64)) -> Ordering {
        a.1.cmp(&b.1)
    }

    fn by_priority_then_seq(a: (&PodInfo, u64), b: (&PodInfo, u64)) -> Ordering {
        b.0.priority.cmp(&a.0.priority).then(a.1.cmp(&b.1))
    }

    fn push(h: &mut Heap, key: &str, seq: u64, priority: i32) {
        let p = pod(key).priority(priority).build();
        h.push(Arc::from(key), seq, p, by_priority_then_seq);
    }

    #[test]
    fn orders_and_removes() {
        let mut h = Heap::default();
        for (k, s) in [("c", 3), ("a", 1), ("e", 5), ("b", 2), ("d", 4)] {
            h.push(Arc::from(k), s, pod(k).build(), by_seq);
        }
        h.remove("b", &by_seq);
        h.push(Arc::from("e"), 0, pod("e").build(), by_seq);
        let order: Vec<_> = std::iter::from_fn(|| h.pop(by_seq)).collect();
        let order: Vec<&str> = order.iter().map(|k| &**k).collect();
        assert_eq!(order, ["e", "a", "c", "d"]);
        assert_eq!(h.len(), 0);
    }

    #[test]
    fn an_update_moves_the_pod_and_keeps_its_arrival() {
        let mut h = Heap::default();
        for (k, s) in [("a", 1), ("b", 2), ("c", 3), ("d", 4)] {
            push(&mut h, k, s, 0);
        }
        let raised = pod("c").priority(10).build();
        h.update("c", raised, by_priority_then_seq);
        let lowered = pod("a").priority(-1).build();
        h.update("a", lowered, by_priority_then_seq);
        h.update("x", pod("x").build(), by_priority_then_seq);
        assert_eq!(h.len(), 4, "an unknown key is not added");
        // b and d keep their order (arrival) between c (raised) and a (lowered).
        let order: Vec<_> = std::iter::from_fn(|| h.pop(by_priority_then_seq)).collect();
        let order: Vec<&str> = order.iter().map(|k| &**k).collect();
        assert_eq!(order, ["c", "b", "d", "a"]);
    }
}
