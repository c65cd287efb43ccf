//! Placed pods indexed by their labels, and by the labels their own affinity terms ask for.
//!
//! PodTopologySpread and InterPodAffinity count, every cycle, the placed pods a selector
//! matches. kube-scheduler examines every pod in the cluster for that; with the index, a
//! selector that requires some `key=value` examines only the pods carrying that label (a
//! deployment's pods rather than the cluster's). The answers are the same: candidates are
//! still checked against the whole selector by the caller.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHasher};

use crate::model::PodInfo;
use crate::model::pod::AffinityTerm;
use crate::model::selector::LabelSelector;

/// A placed pod and the position of its node in the snapshot.
#[derive(Debug, Clone)]
pub struct IndexedPod {
    /// The pod.
    pub pod: Arc<PodInfo>,
    /// Its node's position in [`super::Snapshot::nodes`].
    pub node: usize,
}

/// Pods keyed by the address of their `PodInfo` (unique while the pod is placed).
type PodSet = FxHashMap<usize, IndexedPod>;

/// The index a snapshot keeps (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct PodIndex {
    /// Placed pods by `hash(key, value)` of each of their labels.
    by_label: FxHashMap<u64, PodSet>,
    /// Placed pods with pod affinity or anti-affinity terms, by `hash(key, value)` of the
    /// labels those terms require (a pod the terms could be about carries one of them).
    by_term_label: FxHashMap<u64, PodSet>,
    /// Placed pods with some term that requires no particular label: candidates for every
    /// pod.
    any_term: PodSet,
}

impl PodIndex {
    /// Adds a pod placed on the node at position `node`.
    pub(super) fn insert(&mut self, pod: &Arc<PodInfo>, node: usize) {
        let id = id(pod);
        let entry = || IndexedPod {
            pod: pod.clone(),
            node,
        };
        for (k, v) in pod.labels.iter() {
            self.by_label
                .entry(label_hash(k, v))
                .or_default()
                .insert(id, entry());
        }
        match term_labels(pod) {
            TermLabels::None => {}
            TermLabels::Any => {
                self.any_term.insert(id, entry());
            }
            TermLabels::Some(hashes) => {
                for h in hashes {
                    self.by_term_label.entry(h).or_default().insert(id, entry());
                }
            }
        }
    }

    /// Removes a pod added with [`PodIndex::insert`].
    pub(super) fn remove(&mut self, pod: &Arc<PodInfo>) {
        let id = id(pod);
        for (k, v) in pod.labels.iter() {
            remove_from(&mut self.by_label, label_hash(k, v), id);
        }
        match term_labels(pod) {
            TermLabels::None => {}
            TermLabels::Any => {
                self.any_term.remove(&id);
            }
            TermLabels::Some(hashes) => {
                for h in hashes {
                    remove_from(&mut self.by_term_label, h, id);
                }
            }
        }
    }

    /// Empties the index.
    pub(super) fn clear(&mut self) {
        self.by_label.clear();
        self.by_term_label.clear();
        self.any_term.clear();
    }

    /// Placed pods that may match `selector`, in any namespace: a superset of the matching
    /// pods, `None` when the selector requires no `key=value` (the caller must then look at
    /// every pod). Callers check each candidate against the selector and the namespace.
    pub fn candidates<'a>(
        &'a self,
        selector: &LabelSelector,
    ) -> Option<impl Iterator<Item = &'a IndexedPod> + 'a> {
        let sets: Vec<&PodSet> = if selector.is_nothing() {
            Vec::new()
        } else {
            // The required label with the fewest pods behind it; one key's values are
            // disjoint sets.
            selector
                .required_values()
                .map(|(key, values)| {
                    let sets: Vec<&PodSet> = values
                        .iter()
                        .filter_map(|v| self.by_label.get(&label_hash(key, v)))
                        .collect();
                    (sets.iter().map(|s| s.len()).sum::<usize>(), sets)
                })
                .min_by_key(|(n, _)| *n)?
                .1
        };
        Some(sets.into_iter().flat_map(|s| s.values()))
    }

    /// Placed pods with affinity terms that may be about a pod with `labels`: each such pod
    /// once. Callers check each term against the pod.
    pub fn term_candidates<'a>(
        &'a self,
        labels: &crate::model::Labels,
    ) -> impl Iterator<Item = &'a IndexedPod> + 'a {
        let mut sets: Vec<&PodSet> = labels
            .iter()
            .filter_map(|(k, v)| self.by_term_label.get(&label_hash(k, v)))
            .collect();
        sets.push(&self.any_term);
        // A pod is under as many label sets as its terms require labels; the first set that
        // holds it yields it.
        let later: Vec<&PodSet> = sets.clone();
        sets.into_iter().enumerate().flat_map(move |(i, set)| {
            let earlier = later[..i].to_vec();
            set.iter()
                .filter(move |(id, _)| !earlier.iter().any(|s| s.contains_key(id)))
                .map(|(_, p)| p)
        })
    }
}

fn id(pod: &Arc<PodInfo>) -> usize {
    Arc::as_ptr(pod) as usize
}

fn remove_from(map: &mut FxHashMap<u64, PodSet>, hash: u64, id: usize) {
    if let Some(set) = map.get_mut(&hash) {
        set.remove(&id);
        if set.is_empty() {
            map.remove(&hash);
        }
    }
}

/// The hash a `key=value` label is indexed by.
fn label_hash(key: &str, value: &str) -> u64 {
    let mut h = FxHasher::default();
    key.hash(&mut h);
    value.hash(&mut h);
    h.finish()
}

/// Which labels a pod's terms require of the pods they are about.
enum TermLabels {
    /// The pod has no pod affinity or anti-affinity term.
    None,
    /// Some term requires no particular label.
    Any,
    /// Every term requires one of these `key=value` pairs (hashed).
    Some(Vec<u64>),
}

fn term_labels(pod: &PodInfo) -> TermLabels {
    let a = &pod.affinity;
    let terms = a
        .required
        .iter()
        .chain(&a.required_anti)
        .chain(a.preferred.iter().map(|w| &w.term))
        .chain(a.preferred_anti.iter().map(|w| &w.term));
    let mut hashes = Vec::new();
    let mut any_term = false;
    for term in terms {
        any_term = true;
        match required_label(term) {
            Some((key, values)) => hashes.extend(values.iter().map(|v| label_hash(key, v))),
            None => return TermLabels::Any,
        }
    }
    if !any_term {
        return TermLabels::None;
    }
    hashes.sort_unstable();
    hashes.dedup();
    TermLabels::Some(hashes)
}

/// One label key a term's selector requires, with its allowed values.
fn required_label(term: &AffinityTerm) -> Option<(&str, &[String])> {
    if term.selector.is_nothing() {
        // Matches no pod: any label will do, none will match.
        return Some(("", &[]));
    }
    term.selector.required_values().next()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;

    fn names<'a>(it: impl Iterator<Item = &'a IndexedPod>) -> Vec<String> {
        let mut v: Vec<String> = it.map(|p| p.pod.name.clone()).collect();
        v.sort();
        v
    }

    #[test]
    fn candidates_are_the_pods_with_the_rarest_required_label() {
        let mut index = PodIndex::default();
        let a = pod("a").label("app", "web").label("tier", "front").build();
        let b = pod("b").label("app", "db").label("tier", "front").build();
        let c = pod("c").label("app", "web").label("tier", "back").build();
        for (p, n) in [(&a, 0), (&b, 1), (&c, 2)] {
            index.insert(p, n);
        }
        let sel = LabelSelector::from_map(
            [("app".to_string(), "web".to_string())]
                .iter()
                .map(|(k, v)| (k, v)),
        );
        assert_eq!(names(index.candidates(&sel).unwrap()), ["a", "c"]);
        index.remove(&c);
        assert_eq!(names(index.candidates(&sel).unwrap()), ["a"]);
        assert!(index.candidates(&LabelSelector::everything()).is_none());
        assert_eq!(
            index.candidates(&LabelSelector::nothing()).unwrap().count(),
            0
        );
    }

    #[test]
    fn term_candidates_yield_each_pod_once() {
        let mut index = PodIndex::default();
        let a = pod("a")
            .spec_yaml(
                r#"
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 10
      podAffinityTerm:
        labelSelector: {matchLabels: {app: web}}
        topologyKey: kubernetes.io/hostname
    - weight: 5
      podAffinityTerm:
        labelSelector: {matchLabels: {tier: front}}
        topologyKey: topology.kubernetes.io/zone
"#,
            )
            .build();
        let plain = pod("plain").label("app", "web").build();
        index.insert(&a, 0);
        index.insert(&plain, 1);
        let incoming = pod("in").label("app", "web").label("tier", "front").build();
        let web_only = pod("w").label("app", "web").build();
        assert_eq!(names(index.term_candidates(&web_only.labels)), ["a"]);
        assert_eq!(names(index.term_candidates(&incoming.labels)), ["a"]);
        let other = pod("o").label("app", "db").build();
        assert!(names(index.term_candidates(&other.labels)).is_empty());
        index.remove(&a);
        assert!(names(index.term_candidates(&incoming.labels)).is_empty());
    }
}
