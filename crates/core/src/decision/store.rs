//! The bounded in-memory store of decision records: the latest `capacity` attempts of all
//! pods, oldest evicted first, with each pod's attempts found without a scan.

use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

use super::record::DecisionRecord;

/// Records kept by default: at a few kilobytes each, a few tens of megabytes.
pub const DEFAULT_CAPACITY: usize = 10_000;

/// The latest records, in arrival order, indexed by pod.
#[derive(Debug)]
pub struct DecisionStore {
    capacity: usize,
    records: VecDeque<Arc<DecisionRecord>>,
    /// Sequence number of `records[0]`.
    first: u64,
    /// Sequence numbers of each pod's records, oldest first, by a hash of the pod's namespace
    /// and name (pods sharing a hash share a list; lookups compare the names).
    by_pod: HashMap<u64, VecDeque<u64>>,
}

/// A store shared between the thread that records and those that read.
pub type SharedStore = Arc<Mutex<DecisionStore>>;

fn pod_hash(namespace: &str, pod: &str) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    namespace.hash(&mut h);
    pod.hash(&mut h);
    h.finish()
}

impl DecisionStore {
    /// A store keeping at most `capacity` records (at least one).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        DecisionStore {
            capacity,
            records: VecDeque::with_capacity(capacity.min(DEFAULT_CAPACITY)),
            first: 0,
            by_pod: HashMap::new(),
        }
    }

    /// A store ready to share.
    pub fn shared(capacity: usize) -> SharedStore {
        Arc::new(Mutex::new(DecisionStore::new(capacity)))
    }

    /// The most records kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Records kept now.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// True when nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Adds a record, evicting the oldest one when full. Constant time (amortized).
    pub fn push(&mut self, record: Arc<DecisionRecord>) {
        if self.records.len() == self.capacity
            && let Some(old) = self.records.pop_front()
        {
            let h = pod_hash(&old.namespace, &old.pod);
            if let Some(seqs) = self.by_pod.get_mut(&h) {
                // The store's oldest record is the oldest of its pod's too.
                seqs.pop_front();
                if seqs.is_empty() {
                    self.by_pod.remove(&h);
                }
            }
            self.first += 1;
        }
        let seq = self.first + self.records.len() as u64;
        self.by_pod
            .entry(pod_hash(&record.namespace, &record.pod))
            .or_default()
            .push_back(seq);
        self.records.push_back(record);
    }

    /// The pod's latest `n` records, newest first.
    pub fn latest(&self, namespace: &str, pod: &str, n: usize) -> Vec<Arc<DecisionRecord>> {
        let Some(seqs) = self.by_pod.get(&pod_hash(namespace, pod)) else {
            return Vec::new();
        };
        seqs.iter()
            .rev()
            .filter_map(|&seq| self.records.get((seq - self.first) as usize))
            .filter(|r| r.namespace == namespace && r.pod == pod)
            .take(n)
            .cloned()
            .collect()
    }
}

/// Adds `record` to a shared store (a poisoned lock still holds consistent records: every
/// update completes before the lock is released).
pub fn push_shared(store: &SharedStore, record: Arc<DecisionRecord>) {
    store
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(record);
}

/// The pod's latest `n` records in a shared store, newest first.
pub fn latest_shared(
    store: &SharedStore,
    namespace: &str,
    pod: &str,
    n: usize,
) -> Vec<Arc<DecisionRecord>> {
    store
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .latest(namespace, pod, n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::record::Outcome;

    fn rec(ns: &str, pod: &str, attempt: u32) -> Arc<DecisionRecord> {
        Arc::new(DecisionRecord {
            timestamp_ms: 0,
            namespace: ns.to_string(),
            pod: pod.to_string(),
            profile: "default-scheduler".to_string(),
            attempt,
            result: Outcome::Unschedulable,
            node: None,
            message: None,
            nodes_total: 0,
            nodes_evaluated: 0,
            nodes_feasible: 0,
            rejections: Vec::new(),
            score_plugins: Vec::new(),
            top_nodes: Vec::new(),
            suggestions: Vec::new(),
            preemption: None,
            group: None,
            duration_micros: 0,
        })
    }

    fn attempts(s: &DecisionStore, ns: &str, pod: &str, n: usize) -> Vec<u32> {
        s.latest(ns, pod, n).iter().map(|r| r.attempt).collect()
    }

    #[test]
    fn latest_attempts_of_a_pod_newest_first() {
        let mut s = DecisionStore::new(10);
        for i in 1..=4 {
            s.push(rec("a", "p", i));
            s.push(rec("a", "q", i));
        }
        assert_eq!(attempts(&s, "a", "p", 3), vec![4, 3, 2]);
        assert_eq!(attempts(&s, "a", "p", 10), vec![4, 3, 2, 1]);
        assert_eq!(attempts(&s, "b", "p", 10), Vec::<u32>::new());
        assert_eq!(s.len(), 8);
    }

    #[test]
    fn the_oldest_records_are_evicted_at_capacity() {
        let mut s = DecisionStore::new(3);
        s.push(rec("a", "p", 1));
        s.push(rec("a", "q", 1));
        s.push(rec("a", "p", 2));
        s.push(rec("a", "p", 3));
        assert_eq!(s.len(), 3);
        assert_eq!(attempts(&s, "a", "q", 5), vec![1]);
        assert_eq!(attempts(&s, "a", "p", 5), vec![3, 2]);
        s.push(rec("a", "p", 4));
        assert_eq!(attempts(&s, "a", "q", 5), Vec::<u32>::new());
        assert_eq!(attempts(&s, "a", "p", 5), vec![4, 3, 2]);
        // The index forgets pods with nothing left.
        assert_eq!(s.by_pod.len(), 1);
        for i in 5..1000 {
            s.push(rec("a", "p", i));
        }
        assert_eq!(attempts(&s, "a", "p", 5), vec![999, 998, 997]);
        assert_eq!(s.by_pod[&pod_hash("a", "p")].len(), 3);
    }

    #[test]
    fn the_namespace_and_name_are_not_confused() {
        let mut s = DecisionStore::new(10);
        s.push(rec("ab", "c", 1));
        s.push(rec("a", "bc", 2));
        assert_eq!(attempts(&s, "ab", "c", 5), vec![1]);
        assert_eq!(attempts(&s, "a", "bc", 5), vec![2]);
    }

    #[test]
    fn a_zero_capacity_keeps_one_record() {
        let mut s = DecisionStore::new(0);
        s.push(rec("a", "p", 1));
        s.push(rec("a", "p", 2));
        assert_eq!(attempts(&s, "a", "p", 5), vec![2]);
    }
}
