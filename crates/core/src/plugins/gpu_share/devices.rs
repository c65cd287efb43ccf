//! A node's GPUs as the scoring arithmetic sees them: free milli per device, sorted, and the
//! changes a pod would make.

use crate::cache::NodeInfo;
use crate::model::gpu::MILLI_PER_GPU;

/// Nodes with up to this many GPUs are handled without allocating.
const INLINE: usize = 16;

/// Free milli of a node's GPUs, in decreasing order.
#[derive(Debug, Clone)]
pub struct FreeList {
    inline: [u32; INLINE],
    heap: Vec<u32>,
    len: usize,
}

impl FreeList {
    /// The free milli of `node`'s GPUs.
    pub fn of(node: &NodeInfo) -> Self {
        let len = node.gpu_used.len();
        let mut out = FreeList {
            inline: [0; INLINE],
            heap: if len > INLINE {
                vec![0; len]
            } else {
                Vec::new()
            },
            len,
        };
        let slice = out.as_mut_slice();
        for (i, f) in slice.iter_mut().enumerate() {
            *f = node.gpu_free(i);
        }
        // Insertion sort: a handful of devices.
        for i in 1..slice.len() {
            let v = slice[i];
            let mut j = i;
            while j > 0 && slice[j - 1] < v {
                slice[j] = slice[j - 1];
                j -= 1;
            }
            slice[j] = v;
        }
        out
    }

    /// The values, largest first.
    pub fn as_slice(&self) -> &[u32] {
        if self.len > INLINE {
            &self.heap
        } else {
            &self.inline[..self.len]
        }
    }

    fn as_mut_slice(&mut self) -> &mut [u32] {
        if self.len > INLINE {
            &mut self.heap
        } else {
            &mut self.inline[..self.len]
        }
    }

    /// Sum of the free milli.
    pub fn total(&self) -> u32 {
        self.as_slice().iter().sum()
    }

    /// The list after `count` whole GPUs are taken (the caller checked there are as many
    /// fully free).
    pub fn without_whole(&self, count: usize) -> FreeList {
        let mut out = self.clone();
        let s = out.as_mut_slice();
        let count = count.min(s.len());
        for f in &mut s[..count] {
            *f = 0;
        }
        s.rotate_left(count);
        out
    }

    /// The list after `milli` is taken from the GPU at position `at` (of the sorted list).
    pub fn with_share_taken(&self, at: usize, milli: u32) -> FreeList {
        let mut out = self.clone();
        let s = out.as_mut_slice();
        let v = s[at].saturating_sub(milli);
        let mut j = at;
        while j + 1 < s.len() && s[j + 1] > v {
            s[j] = s[j + 1];
            j += 1;
        }
        s[j] = v;
        out
    }

    /// Positions of the distinct values that have room for `milli`, largest first (GPUs with
    /// the same free milli are interchangeable for scoring).
    pub fn share_candidates(&self, milli: u32) -> impl Iterator<Item = usize> + '_ {
        let s = self.as_slice();
        (0..s.len())
            .take_while(move |&i| s[i] >= milli)
            .filter(move |&i| i == 0 || s[i - 1] != s[i])
    }
}

/// The lowest-indexed `count` fully free devices of `node`, if it has as many.
pub fn whole_devices(node: &NodeInfo, count: usize) -> Option<Vec<u16>> {
    let out: Vec<u16> = (0..node.gpu_used.len())
        .filter(|&i| node.gpu_free(i) >= MILLI_PER_GPU)
        .take(count)
        .filter_map(|i| u16::try_from(i).ok())
        .collect();
    (out.len() == count).then_some(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::gpu::GPU_RESOURCE;
    use crate::testing::{node, pod};

    fn node_with(used: &[(u16, u32)], count: &str) -> NodeInfo {
        let mut n = NodeInfo::new(Arc::new(node("n").alloc(GPU_RESOURCE, count).build()));
        for (i, (d, m)) in used.iter().enumerate() {
            n.add_pod(
                pod(&format!("p{i}"))
                    .annotation("gantry.io/gpu-milli", &m.to_string())
                    .annotation("gantry.io/gpu-assignment", &format!("{d}:{m}"))
                    .on("n")
                    .build(),
            );
        }
        n
    }

    #[test]
    fn sorted_free_and_changes() {
        let n = node_with(&[(1, 300), (3, 1000), (2, 600)], "4");
        let f = FreeList::of(&n);
        assert_eq!(f.as_slice(), &[1000, 700, 400, 0]);
        assert_eq!(f.total(), 2100);
        assert_eq!(f.without_whole(1).as_slice(), &[700, 400, 0, 0]);
        assert_eq!(f.with_share_taken(0, 500).as_slice(), &[700, 500, 400, 0]);
        assert_eq!(f.with_share_taken(1, 700).as_slice(), &[1000, 400, 0, 0]);
        let c: Vec<usize> = f.share_candidates(400).collect();
        assert_eq!(c, vec![0, 1, 2]);
        assert_eq!(whole_devices(&n, 1), Some(vec![0]));
        assert_eq!(whole_devices(&n, 2), None);
    }

    #[test]
    fn equal_values_are_one_candidate_and_large_nodes_work() {
        let n = node_with(&[], "20");
        let f = FreeList::of(&n);
        assert_eq!(f.as_slice().len(), 20);
        assert_eq!(f.share_candidates(1).count(), 1);
        assert_eq!(f.without_whole(3).as_slice()[16..], [1000, 0, 0, 0]);
        assert_eq!(whole_devices(&n, 3), Some(vec![0, 1, 2]));
    }
}
