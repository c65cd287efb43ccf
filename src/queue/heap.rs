//! A binary heap of pod keys ordered by a caller-supplied comparison (the QueueSort plugin),
//! with removal by key.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

/// Compares two `(key, sequence number)` pairs; `Less` means "schedule first".
pub(super) trait Compare: Fn((&str, u64), (&str, u64)) -> Ordering {}
impl<F: Fn((&str, u64), (&str, u64)) -> Ordering> Compare for F {}

/// Keys with their sequence numbers; the least element (by the comparison) on top.
#[derive(Debug, Default)]
pub(super) struct Heap {
    items: Vec<(Arc<str>, u64)>,
    positions: HashMap<Arc<str>, usize>,
}

impl Heap {
    /// Inserts `key`, replacing an existing entry for it.
    pub fn push(&mut self, key: Arc<str>, seq: u64, cmp: impl Compare) {
        self.remove(&key, &cmp);
        self.items.push((key.clone(), seq));
        let i = self.items.len() - 1;
        self.positions.insert(key, i);
        self.sift_up(i, &cmp);
    }

    /// Removes and returns the least key.
    pub fn pop(&mut self, cmp: impl Compare) -> Option<Arc<str>> {
        let key = self.items.first()?.0.clone();
        self.remove(&key, &cmp);
        Some(key)
    }

    /// Removes `key` if present.
    pub fn remove(&mut self, key: &str, cmp: &impl Compare) {
        let Some(i) = self.positions.remove(key) else {
            return;
        };
        self.items.swap_remove(i);
        if i < self.items.len() {
            self.positions.insert(self.items[i].0.clone(), i);
            self.sift_down(i, cmp);
            self.sift_up(i, cmp);
        }
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    fn less(&self, i: usize, j: usize, cmp: &impl Compare) -> bool {
        let (a, b) = (&self.items[i], &self.items[j]);
        cmp((&a.0, a.1), (&b.0, b.1)) == Ordering::Less
    }

    fn swap(&mut self, i: usize, j: usize) {
        self.items.swap(i, j);
        for k in [i, j] {
            if let Some(p) = self.positions.get_mut(&self.items[k].0) {
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

    fn by_seq(a: (&str, u64), b: (&str, u64)) -> Ordering {
        a.1.cmp(&b.1)
    }

    #[test]
    fn orders_and_removes() {
        let mut h = Heap::default();
        for (k, s) in [("c", 3), ("a", 1), ("e", 5), ("b", 2), ("d", 4)] {
            h.push(Arc::from(k), s, by_seq);
        }
        h.remove("b", &by_seq);
        h.push(Arc::from("e"), 0, by_seq);
        let order: Vec<_> = std::iter::from_fn(|| h.pop(by_seq)).collect();
        let order: Vec<&str> = order.iter().map(|k| &**k).collect();
        assert_eq!(order, ["e", "a", "c", "d"]);
        assert_eq!(h.len(), 0);
    }
}
