//! The pods of one node, in chunks that copies of the node share.
//!
//! The cache copies a node on write whenever a snapshot still holds it, which is after every
//! cycle. A plain list would then clone every pod's `Arc` (a cache miss each) for each pod
//! placed on or removed from the node: on a node with tens of thousands of pods that copy
//! dominates the cycle. In chunks, a copy clones one `Arc` per chunk, and a change copies
//! only the chunks it writes to (at most two).

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use rustc_hash::FxHasher;

use crate::model::PodInfo;

/// Pods per chunk: a node with the default pod limit keeps all of them in one.
const CHUNK: usize = 128;

/// Pods and the numbers they are looked up by, in the same order.
#[derive(Debug, Clone, Default)]
struct Chunk {
    pods: Vec<Arc<PodInfo>>,
    /// [`pod_key`] of each pod: removal scans these contiguous numbers rather than the
    /// pods.
    keys: Vec<u64>,
}

/// A node's pods (see the module docs). Every chunk but the last is full, so that the pod
/// at index `i` is found by division.
#[derive(Debug, Clone, Default)]
pub struct PodList {
    chunks: Vec<Arc<Chunk>>,
    len: usize,
}

impl PodList {
    /// How many pods.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True without pods.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The pods, in order.
    pub fn iter(&self) -> Pods<'_> {
        Pods {
            chunks: self.chunks.iter(),
            current: [].iter(),
            left: self.len,
        }
    }

    /// The pod at `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<&Arc<PodInfo>> {
        self.chunks.get(index / CHUNK)?.pods.get(index % CHUNK)
    }

    /// Adds `pod` at the end.
    pub fn push(&mut self, pod: Arc<PodInfo>) {
        if self.chunks.last().is_none_or(|c| c.pods.len() == CHUNK) {
            // Grown as pods come, not allocated whole: most nodes hold few pods.
            self.chunks.push(Arc::default());
        }
        let key = pod_key(&pod.namespace, &pod.name);
        let last = self.chunks.last_mut().map(Arc::make_mut);
        if let Some(chunk) = last {
            chunk.keys.push(key);
            chunk.pods.push(pod);
            self.len += 1;
        }
    }

    /// Removes the pod `namespace/name`, putting the last pod in its place; returns it if
    /// it was here.
    pub fn remove(&mut self, namespace: &str, name: &str) -> Option<Arc<PodInfo>> {
        let key = pod_key(namespace, name);
        let (c, i) = self.chunks.iter().enumerate().find_map(|(c, chunk)| {
            (0..chunk.keys.len())
                .find(|&i| {
                    chunk.keys[i] == key && {
                        let p = &chunk.pods[i];
                        p.namespace == namespace && p.name == name
                    }
                })
                .map(|i| (c, i))
        })?;
        let last = self.chunks.len() - 1;
        let (moved_key, moved_pod) = {
            let tail = Arc::make_mut(&mut self.chunks[last]);
            let key = tail.keys.pop()?;
            (key, tail.pods.pop()?)
        };
        if self.chunks[last].pods.is_empty() {
            self.chunks.pop();
        }
        self.len -= 1;
        if (c, i) == (last, self.chunks.get(last).map_or(0, |t| t.pods.len())) {
            // The pod removed was the last one.
            return Some(moved_pod);
        }
        let chunk = Arc::make_mut(&mut self.chunks[c]);
        chunk.keys[i] = moved_key;
        Some(std::mem::replace(&mut chunk.pods[i], moved_pod))
    }
}

impl std::ops::Index<usize> for PodList {
    type Output = Arc<PodInfo>;

    /// The pod at `index`; panics past the end, as a slice does.
    fn index(&self, index: usize) -> &Arc<PodInfo> {
        match self.get(index) {
            Some(pod) => pod,
            None => panic!("pod index {index} out of range for {} pods", self.len),
        }
    }
}

impl<'a> IntoIterator for &'a PodList {
    type Item = &'a Arc<PodInfo>;
    type IntoIter = Pods<'a>;

    fn into_iter(self) -> Pods<'a> {
        self.iter()
    }
}

/// The pods of a [`PodList`], in order.
#[derive(Debug, Clone)]
pub struct Pods<'a> {
    chunks: std::slice::Iter<'a, Arc<Chunk>>,
    current: std::slice::Iter<'a, Arc<PodInfo>>,
    left: usize,
}

impl<'a> Iterator for Pods<'a> {
    type Item = &'a Arc<PodInfo>;

    fn next(&mut self) -> Option<&'a Arc<PodInfo>> {
        loop {
            if let Some(pod) = self.current.next() {
                self.left -= 1;
                return Some(pod);
            }
            self.current = self.chunks.next()?.pods.iter();
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Pods<'_> {}

impl FromIterator<Arc<PodInfo>> for PodList {
    fn from_iter<I: IntoIterator<Item = Arc<PodInfo>>>(pods: I) -> Self {
        let mut list = PodList::default();
        for pod in pods {
            list.push(pod);
        }
        list
    }
}

/// The number a pod is looked up by for removal.
fn pod_key(namespace: &str, name: &str) -> u64 {
    let mut h = FxHasher::default();
    namespace.hash(&mut h);
    name.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;

    fn names(list: &PodList) -> Vec<String> {
        list.iter().map(|p| p.name.clone()).collect()
    }

    #[test]
    fn removal_puts_the_last_pod_in_the_hole_across_chunks() {
        let all: Vec<Arc<PodInfo>> = (0..CHUNK * 2 + 3)
            .map(|i| pod(&format!("p{i}")).build())
            .collect();
        let mut list: PodList = all.iter().cloned().collect();
        let mut model: Vec<Arc<PodInfo>> = all.clone();
        let copy = list.clone();
        for name in ["p5", "p300", "p130", "p0", "absent", "p255"] {
            let got = list.remove("default", name).map(|p| p.name.clone());
            let expected = model.iter().position(|p| p.name == name).map(|i| {
                let p = model.swap_remove(i);
                p.name.clone()
            });
            assert_eq!(got, expected, "{name}");
            assert_eq!(
                names(&list),
                model.iter().map(|p| p.name.clone()).collect::<Vec<_>>()
            );
            assert_eq!(list.len(), model.len());
            for (i, p) in model.iter().enumerate() {
                assert!(Arc::ptr_eq(list.get(i).unwrap(), p));
            }
        }
        // The copy made before is untouched.
        assert_eq!(
            names(&copy),
            all.iter().map(|p| p.name.clone()).collect::<Vec<_>>()
        );
        // Down to nothing and up again.
        for p in &model {
            assert!(list.remove(&p.namespace, &p.name).is_some());
        }
        assert!(list.is_empty() && list.chunks.is_empty());
        list.push(all[0].clone());
        assert_eq!(names(&list), ["p0"]);
        assert!(
            list.remove("other", "p0").is_none(),
            "namespaces tell pods apart"
        );
    }

    #[test]
    fn a_change_copies_only_the_chunks_it_writes() {
        let mut list: PodList = (0..CHUNK * 3)
            .map(|i| pod(&format!("p{i}")).build())
            .collect();
        let copy = list.clone();
        assert!(list.remove("default", "p1").is_some());
        let shared = list
            .chunks
            .iter()
            .zip(&copy.chunks)
            .filter(|(a, b)| Arc::ptr_eq(a, b))
            .count();
        assert_eq!(
            shared, 1,
            "the first and last chunks were written, the middle one not"
        );
    }
}
