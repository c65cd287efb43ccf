//! The typical workload and FGD's fragmentation measure.
//!
//! FGD (Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
//! Fragmentation Gradient Descent", USENIX ATC 2023) measures a node's fragmentation against
//! the *typical* pods: the most frequent pod shapes that together make up a share (95%) of
//! the workload, weighted by frequency. For one shape, the node's free GPU milli is all
//! fragment when the shape cannot run there (too little cpu, a GPU model it does not accept,
//! not enough GPUs with room, or no GPU asked at all); when it can run, only the free milli
//! of the GPUs too full for it is fragment. A node's fragmentation is the weighted sum over
//! the shapes. With weights summing to one this is
//! `free - sum over the shapes that fit of weight * (free milli on GPUs with room for it)`,
//! which is how [`ShapeTable::fragmentation`] computes it in one pass.
//!
//! The typical workload is given in the configuration, or learned online from the pods the
//! scheduler sees, over a sliding window ([`Learner`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, RwLock};

use crate::model::PodInfo;
use crate::model::gpu::{GpuRequest, HamiMemory, MILLI_PER_GPU, Models};

/// A pod shape as FGD counts them: cpu, GPU request and accepted models.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShapeKey {
    /// cpu in millicores (the non-zero request, as kube-scheduler scores).
    pub cpu: i64,
    /// Milli of each GPU (0 for a pod without GPU, or one asking by memory).
    pub milli: u32,
    /// Number of GPUs (0 for a pod without GPU).
    pub count: u32,
    /// Memory of one GPU in MiB, for a share asked by memory (else 0).
    pub memory_mib: u64,
    /// Accepted models, as the pod lists them (empty: any).
    pub models: Models,
}

impl ShapeKey {
    /// The shape of a pod; `None` for a pod whose GPU annotations are invalid.
    pub fn of(pod: &PodInfo) -> Option<Self> {
        if pod.gpu.error.is_some() {
            return None;
        }
        let (count, milli, memory_mib) = match pod.gpu.request {
            GpuRequest::None => (0, 0, 0),
            GpuRequest::Whole(n) => (n, MILLI_PER_GPU, 0),
            GpuRequest::Milli(m) => (1, m, 0),
            GpuRequest::MemoryMib(mib) => (1, 0, mib),
            // Shares of several GPUs count as whole GPUs in the typical workload, whose
            // shares are of one GPU; a share of one is its memory, or the larger of its
            // memory and compute percentages.
            GpuRequest::Hami(share) if share.count > 1 => (share.count, MILLI_PER_GPU, 0),
            GpuRequest::Hami(share) => match share.memory {
                HamiMemory::Mib(mib) => (1, 0, mib),
                HamiMemory::Percent(p) => (1, (p.max(share.cores) * 10).min(MILLI_PER_GPU), 0),
            },
        };
        Some(ShapeKey {
            cpu: pod.non_zero_milli_cpu,
            milli,
            count,
            memory_mib,
            models: pod.gpu.models.clone(),
        })
    }

    fn accepts(&self, model: Option<&str>) -> bool {
        self.models.is_empty() || model.is_some_and(|m| self.models.iter().any(|a| &**a == m))
    }
}

/// One shape of a [`ShapeTable`]: only shapes that ask for GPUs a node's model accepts.
#[derive(Debug, Clone, Copy, PartialEq)]
struct TableShape {
    milli: u32,
    count: u32,
    cpu: i64,
    weight: f64,
}

/// The typical shapes as they apply to nodes of one GPU model, ready for arithmetic.
#[derive(Debug, Clone, PartialEq)]
pub struct ShapeTable {
    /// By decreasing milli, so one pass over a node's GPUs sorted by decreasing free milli
    /// finds, for each shape, the GPUs with room for it.
    shapes: Vec<TableShape>,
    /// Sum of the weights of all typical shapes (those in no table included).
    total_weight: f64,
    /// GPU milli the typical GPU pods (of the shapes in this table, by frequency) ask per
    /// millicore of cpu: how much GPU a millicore left on a node can put to use.
    gpu_per_cpu: f64,
}

impl ShapeTable {
    /// Fragmentation of a node with `cpu_left` free cpu and GPUs with `free_desc` milli free,
    /// sorted in decreasing order.
    pub fn fragmentation(&self, cpu_left: i64, free_desc: &[u32]) -> f64 {
        let total: u32 = free_desc.iter().sum();
        if total == 0 {
            return 0.0;
        }
        let mut usable_sum = 0.0;
        let (mut j, mut room, mut usable) = (0usize, 0u32, 0u32);
        for s in &self.shapes {
            while j < free_desc.len() && free_desc[j] >= s.milli {
                room += 1;
                usable += free_desc[j];
                j += 1;
            }
            if room >= s.count && s.cpu <= cpu_left {
                usable_sum += s.weight * f64::from(usable);
            }
        }
        f64::from(total) * self.total_weight - usable_sum
    }

    /// GPU milli on a node with `cpu_left` and `free_total` free that its cpu cannot feed:
    /// the typical GPU pods take `gpu_per_cpu` GPU milli per millicore, so once the cpu left
    /// cannot carry the free GPUs, the excess will stay idle however well it is shaped.
    pub fn stranded(&self, cpu_left: i64, free_total: u32) -> f64 {
        if !self.gpu_per_cpu.is_finite() {
            // GPU pods that need no cpu (or no GPU pods at all): cpu strands nothing.
            return 0.0;
        }
        (f64::from(free_total) - self.gpu_per_cpu * cpu_left.max(0) as f64).max(0.0)
    }

    /// True when no typical shape asks for GPUs of this table's model.
    pub fn is_empty(&self) -> bool {
        self.shapes.is_empty()
    }
}

/// The typical pods: the most frequent shapes covering the configured share of the
/// workload, with weights summing to one.
#[derive(Debug)]
pub struct TypicalWorkload {
    shapes: Vec<(ShapeKey, f64)>,
    /// Tables built so far, by model and GPU memory.
    tables: RwLock<Vec<(TableKey, Arc<ShapeTable>)>>,
}

type TableKey = (Option<Box<str>>, Option<u64>);

impl TypicalWorkload {
    /// The typical shapes among `counts` (shape and how often it was seen): FGD's rule takes
    /// the most frequent shapes, largest first among equally frequent ones, until they make
    /// up `coverage` (0..=1) of the total, and renormalizes their weights to sum to one.
    pub fn from_counts(counts: impl IntoIterator<Item = (ShapeKey, f64)>, coverage: f64) -> Self {
        let mut all: Vec<(ShapeKey, f64)> = counts.into_iter().filter(|(_, c)| *c > 0.0).collect();
        all.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| b.0.cmp(&a.0)));
        let total: f64 = all.iter().map(|(_, c)| c).sum();
        let mut taken = 0.0;
        let mut n = 0;
        while n < all.len() && taken < coverage * total {
            taken += all[n].1;
            n += 1;
        }
        all.truncate(n);
        for (_, c) in all.iter_mut() {
            *c /= taken;
        }
        TypicalWorkload {
            shapes: all,
            tables: RwLock::new(Vec::new()),
        }
    }

    /// The shapes with their weights, most frequent first.
    pub fn shapes(&self) -> &[(ShapeKey, f64)] {
        &self.shapes
    }

    /// True when any typical shape restricts GPU models.
    pub fn restricts_models(&self) -> bool {
        self.shapes.iter().any(|(s, _)| !s.models.is_empty())
    }

    /// The table for nodes whose GPUs are of `model` with `memory_mib` each.
    pub fn table(&self, model: Option<&str>, memory_mib: Option<u64>) -> Arc<ShapeTable> {
        let found = |tables: &[(TableKey, Arc<ShapeTable>)]| {
            tables
                .iter()
                .find(|((m, mem), _)| m.as_deref() == model && *mem == memory_mib)
                .map(|(_, t)| t.clone())
        };
        if let Ok(tables) = self.tables.read()
            && let Some(t) = found(&tables)
        {
            return t;
        }
        let table = Arc::new(self.build_table(model, memory_mib));
        if let Ok(mut tables) = self.tables.write()
            && found(&tables).is_none()
        {
            tables.push(((model.map(Box::from), memory_mib), table.clone()));
        }
        table
    }

    fn build_table(&self, model: Option<&str>, memory_mib: Option<u64>) -> ShapeTable {
        let mut shapes: Vec<TableShape> = Vec::new();
        for (s, weight) in &self.shapes {
            if s.count == 0 || !s.accepts(model) {
                continue;
            }
            let milli = if s.memory_mib > 0 {
                match memory_mib.filter(|m| *m >= s.memory_mib) {
                    // At most 1,000 (the shape needs no more than the GPU has); in u128 the
                    // product cannot overflow whatever the sizes.
                    Some(m) => (u128::from(s.memory_mib) * u128::from(MILLI_PER_GPU))
                        .div_ceil(u128::from(m)) as u32,
                    None => continue,
                }
            } else {
                s.milli
            };
            match shapes
                .iter_mut()
                .find(|t| t.milli == milli && t.count == s.count && t.cpu == s.cpu)
            {
                Some(t) => t.weight += weight,
                None => shapes.push(TableShape {
                    milli,
                    count: s.count,
                    cpu: s.cpu,
                    weight: *weight,
                }),
            }
        }
        shapes.sort_by(|a, b| b.milli.cmp(&a.milli).then(a.count.cmp(&b.count)));
        let gpu: f64 = shapes
            .iter()
            .map(|s| s.weight * f64::from(s.milli * s.count))
            .sum();
        let cpu: f64 = shapes.iter().map(|s| s.weight * s.cpu as f64).sum();
        ShapeTable {
            gpu_per_cpu: if cpu > 0.0 { gpu / cpu } else { f64::INFINITY },
            shapes,
            total_weight: self.shapes.iter().map(|(_, w)| w).sum(),
        }
    }
}

/// Learns the typical workload from the pods the scheduler sees: the shapes of the last
/// `window` distinct pods, re-ranked every `window / 16` new pods (and at the first ones).
#[derive(Debug)]
pub struct Learner {
    window: usize,
    coverage: f64,
    seen: VecDeque<(u64, ShapeKey)>,
    keys: HashMap<u64, ()>,
    counts: HashMap<ShapeKey, f64>,
    since_rebuild: usize,
    current: Arc<TypicalWorkload>,
}

impl Learner {
    /// A learner over the last `window` pods, keeping the shapes that cover `coverage`.
    pub fn new(window: usize, coverage: f64) -> Self {
        Learner {
            window: window.max(1),
            coverage,
            seen: VecDeque::new(),
            keys: HashMap::new(),
            counts: HashMap::new(),
            since_rebuild: 0,
            current: Arc::new(TypicalWorkload::from_counts([], coverage)),
        }
    }

    /// Records a pod (`key` identifies it, so that a retried pod counts once) and returns the
    /// typical workload as of now.
    pub fn observe(&mut self, key: u64, shape: ShapeKey) -> Arc<TypicalWorkload> {
        if self.keys.insert(key, ()).is_none() {
            *self.counts.entry(shape.clone()).or_default() += 1.0;
            self.seen.push_back((key, shape));
            if self.seen.len() > self.window
                && let Some((old_key, old)) = self.seen.pop_front()
            {
                self.keys.remove(&old_key);
                if let Some(c) = self.counts.get_mut(&old) {
                    *c -= 1.0;
                    if *c <= 0.0 {
                        self.counts.remove(&old);
                    }
                }
            }
            self.since_rebuild += 1;
            // Re-rank often while the window fills, then every 1/16 of a window.
            let every = (self.seen.len() / 16).clamp(1, (self.window / 16).max(1));
            if self.since_rebuild >= every {
                self.since_rebuild = 0;
                self.current = Arc::new(TypicalWorkload::from_counts(
                    self.counts.iter().map(|(k, v)| (k.clone(), *v)),
                    self.coverage,
                ));
            }
        }
        self.current.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(cpu: i64, milli: u32, count: u32) -> ShapeKey {
        ShapeKey {
            cpu,
            milli,
            count,
            memory_mib: 0,
            models: Box::default(),
        }
    }

    #[test]
    fn typical_shapes_cover_the_share_and_renormalize() {
        let w = TypicalWorkload::from_counts(
            [
                (shape(1000, 500, 1), 50.0),
                (shape(2000, 1000, 1), 30.0),
                (shape(4000, 0, 0), 15.0),
                (shape(8000, 1000, 8), 5.0),
            ],
            0.95,
        );
        let got: Vec<(i64, f64)> = w.shapes().iter().map(|(s, f)| (s.cpu, *f)).collect();
        assert_eq!(
            got,
            vec![
                (1000, 50.0 / 95.0),
                (2000, 30.0 / 95.0),
                (4000, 15.0 / 95.0)
            ]
        );
        // Equally frequent shapes: the larger comes first, and the cut may fall between them.
        let w =
            TypicalWorkload::from_counts([(shape(1, 100, 1), 1.0), (shape(2, 100, 1), 1.0)], 0.5);
        assert_eq!(w.shapes().len(), 1);
        assert_eq!(w.shapes()[0].0.cpu, 2);
        assert_eq!(w.shapes()[0].1, 1.0);
    }

    #[test]
    fn fragmentation_per_fgd() {
        // Half the pods want 0.5 GPU and 2 cpus, a quarter a whole GPU, a quarter no GPU.
        let w = TypicalWorkload::from_counts(
            [
                (shape(2000, 500, 1), 2.0),
                (shape(1000, 1000, 1), 1.0),
                (shape(1000, 0, 0), 1.0),
            ],
            1.0,
        );
        let t = w.table(Some("T4"), None);
        // Two GPUs: one free, one with 300 left; plenty of cpu.
        // 0.5-shape fits: fragment is the 300 piece; whole shape fits: fragment 300;
        // cpu-only shape: everything (1300) is fragment.
        let f = t.fragmentation(10_000, &[1000, 300]);
        assert!(
            (f - (0.5 * 300.0 + 0.25 * 300.0 + 0.25 * 1300.0)).abs() < 1e-9,
            "{f}"
        );
        // Without cpu for the 0.5-shape (needs 2000), all is fragment for it.
        let f = t.fragmentation(1500, &[1000, 300]);
        assert!(
            (f - (0.5 * 1300.0 + 0.25 * 300.0 + 0.25 * 1300.0)).abs() < 1e-9,
            "{f}"
        );
        // No GPU free: no fragment.
        assert_eq!(t.fragmentation(10_000, &[0, 0]), 0.0);
        // 0.6 free on each of two GPUs: the whole-GPU shape cannot run.
        let f = t.fragmentation(10_000, &[600, 600]);
        assert!(
            (f - (0.5 * 0.0 + 0.25 * 1200.0 + 0.25 * 1200.0)).abs() < 1e-9,
            "{f}"
        );
    }

    #[test]
    fn stranded_gpu_follows_the_typical_cpu_per_gpu() {
        // GPU pods take 1000 milli per 4000 cpu (and 500 per 4000): 0.1875 milli per
        // millicore on average; cpu-only shapes do not count.
        let w = TypicalWorkload::from_counts(
            [
                (shape(4000, 1000, 1), 1.0),
                (shape(4000, 500, 1), 1.0),
                (shape(32000, 0, 0), 2.0),
            ],
            1.0,
        );
        let t = w.table(None, None);
        assert!((t.stranded(16_000, 8000) - (8000.0 - 3000.0)).abs() < 1e-9);
        assert_eq!(t.stranded(64_000, 8000), 0.0);
        assert_eq!(t.stranded(-5, 100), 100.0);
        let none = TypicalWorkload::from_counts([(shape(1000, 0, 0), 1.0)], 1.0);
        assert_eq!(
            none.table(None, None).stranded(0, 1000),
            0.0,
            "no GPU demand, no ratio"
        );
    }

    #[test]
    fn multi_gpu_shapes_need_enough_free_gpus() {
        let w = TypicalWorkload::from_counts([(shape(0, 1000, 2), 1.0)], 1.0);
        let t = w.table(None, None);
        assert_eq!(t.fragmentation(0, &[1000, 1000, 500]), 500.0);
        assert_eq!(t.fragmentation(0, &[1000, 500, 500]), 2000.0);
    }

    #[test]
    fn model_restrictions_and_memory_shares() {
        let mut v100 = shape(0, 500, 1);
        v100.models = vec![Box::from("V100")].into_boxed_slice();
        let mut by_memory = shape(0, 0, 1);
        by_memory.memory_mib = 8192;
        let w = TypicalWorkload::from_counts([(v100, 1.0), (by_memory, 1.0)], 1.0);
        assert!(w.restricts_models());
        let t4 = w.table(Some("T4"), Some(16384));
        // Only the memory shape applies to T4; it takes 500 milli of a 16 GiB GPU.
        assert_eq!(t4.fragmentation(0, &[400]), 400.0);
        assert_eq!(t4.fragmentation(0, &[500]), 0.5 * 500.0);
        let v = w.table(Some("V100"), None);
        // No memory label: the memory shape never fits.
        assert_eq!(v.fragmentation(0, &[500]), 0.5 * 500.0);
        assert!(
            Arc::ptr_eq(&v, &w.table(Some("V100"), None)),
            "tables are cached"
        );
        assert!(w.table(Some("A100"), None).is_empty());
    }

    #[test]
    fn learner_windows_and_dedups() {
        let mut l = Learner::new(2, 1.0);
        l.observe(1, shape(1, 100, 1));
        l.observe(1, shape(1, 100, 1));
        let t = l.observe(2, shape(2, 100, 1));
        assert_eq!(t.shapes().len(), 2);
        assert_eq!(t.shapes()[0].1, 0.5, "the retried pod counted once");
        let t = l.observe(3, shape(3, 100, 1));
        let cpus: Vec<i64> = t.shapes().iter().map(|(s, _)| s.cpu).collect();
        assert_eq!(cpus, vec![3, 2], "the oldest pod left the window");
    }
}
