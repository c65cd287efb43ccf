//! The distinct pod (anti-)affinity terms of the placed pods, each numbered once.
//!
//! The pods of one workload carry equal terms, each pod its own copy. InterPodAffinity's
//! PreScore asks, for every placed pod whose terms may be about the incoming pod, whether
//! each term is; numbered terms let a cycle answer once per distinct term and read a pod's
//! terms as a few numbers kept with the index, instead of reading every pod's copies
//! (scattered in memory: several cache misses per pod).

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHasher};
use smallvec::SmallVec;

use crate::model::PodInfo;
use crate::model::pod::AffinityTerm;

/// The number of a term in a [`TermTable`].
pub type TermId = u32;

/// How a pod holds one of its terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TermKind {
    /// Required affinity.
    Required,
    /// Required anti-affinity.
    RequiredAnti,
    /// Preferred affinity, with its weight.
    Preferred(i32),
    /// Preferred anti-affinity, with its weight.
    PreferredAnti(i32),
}

/// One term of a placed pod: its number and how the pod holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodTerm {
    /// The term's number.
    pub id: TermId,
    /// How the pod holds it.
    pub kind: TermKind,
}

#[derive(Debug, Clone)]
struct Entry {
    term: AffinityTerm,
    hash: u64,
    /// How many placed pods' terms are this one.
    holders: usize,
}

/// The table (see the module docs). A number is reused once no placed pod holds its term.
#[derive(Debug, Clone, Default)]
pub struct TermTable {
    entries: Vec<Option<Entry>>,
    by_hash: FxHashMap<u64, SmallVec<[TermId; 1]>>,
    free: Vec<TermId>,
}

impl TermTable {
    /// Numbers the terms of a pod being placed, counting the pod as a holder of each.
    pub fn acquire(&mut self, pod: &PodInfo) -> Arc<[PodTerm]> {
        terms_of(pod)
            .map(|(term, kind)| PodTerm {
                id: self.acquire_one(term),
                kind,
            })
            .collect()
    }

    /// Gives up the terms a pod acquired with [`TermTable::acquire`].
    pub fn release(&mut self, pod: &PodInfo) {
        for (term, _) in terms_of(pod) {
            let hash = hash_of(term);
            let Some(id) = self.find(term, hash) else {
                continue;
            };
            let entry = self.entries[id as usize]
                .as_mut()
                .expect("a found term has an entry");
            entry.holders -= 1;
            if entry.holders == 0 {
                self.entries[id as usize] = None;
                self.free.push(id);
                if let Some(ids) = self.by_hash.get_mut(&hash) {
                    ids.retain(|i| *i != id);
                    if ids.is_empty() {
                        self.by_hash.remove(&hash);
                    }
                }
            }
        }
    }

    /// The term numbered `id`, while a placed pod holds it.
    pub fn get(&self, id: TermId) -> Option<&AffinityTerm> {
        self.entries
            .get(id as usize)
            .and_then(|e| e.as_ref())
            .map(|e| &e.term)
    }

    /// Forgets every term.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.by_hash.clear();
        self.free.clear();
    }

    fn acquire_one(&mut self, term: &AffinityTerm) -> TermId {
        let hash = hash_of(term);
        if let Some(id) = self.find(term, hash) {
            if let Some(e) = self.entries[id as usize].as_mut() {
                e.holders += 1;
            }
            return id;
        }
        let entry = Entry {
            term: term.clone(),
            hash,
            holders: 1,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.entries[id as usize] = Some(entry);
                id
            }
            None => {
                self.entries.push(Some(entry));
                TermId::try_from(self.entries.len() - 1).expect("fewer than 2^32 distinct terms")
            }
        };
        self.by_hash.entry(hash).or_default().push(id);
        id
    }

    fn find(&self, term: &AffinityTerm, hash: u64) -> Option<TermId> {
        self.by_hash.get(&hash)?.iter().copied().find(|&id| {
            self.entries[id as usize]
                .as_ref()
                .is_some_and(|e| e.hash == hash && e.term == *term)
        })
    }
}

/// A pod's terms with how it holds each.
fn terms_of(pod: &PodInfo) -> impl Iterator<Item = (&AffinityTerm, TermKind)> {
    let a = &pod.affinity;
    a.required
        .iter()
        .map(|t| (t, TermKind::Required))
        .chain(a.required_anti.iter().map(|t| (t, TermKind::RequiredAnti)))
        .chain(
            a.preferred
                .iter()
                .map(|w| (&w.term, TermKind::Preferred(w.weight))),
        )
        .chain(
            a.preferred_anti
                .iter()
                .map(|w| (&w.term, TermKind::PreferredAnti(w.weight))),
        )
}

fn hash_of(term: &AffinityTerm) -> u64 {
    let mut h = FxHasher::default();
    term.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;

    fn with_terms(name: &str, app: &str, weight: i32) -> Arc<PodInfo> {
        pod(name)
            .spec_yaml(&format!(
                r#"
affinity:
  podAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - labelSelector: {{matchLabels: {{app: {app}}}}}
      topologyKey: topology.kubernetes.io/zone
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: {weight}
      podAffinityTerm:
        labelSelector: {{matchLabels: {{app: {app}}}}}
        topologyKey: kubernetes.io/hostname
"#
            ))
            .build()
    }

    #[test]
    fn equal_terms_share_a_number_until_no_pod_holds_them() {
        let mut table = TermTable::default();
        let a = with_terms("a", "web", 10);
        let b = with_terms("b", "web", 30);
        let c = with_terms("c", "db", 10);
        let ta = table.acquire(&a);
        let tb = table.acquire(&b);
        let tc = table.acquire(&c);
        // The weight is the pod's, not the term's: the same two terms.
        assert_eq!(ta.iter().map(|t| t.id).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(tb.iter().map(|t| t.id).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(tb[1].kind, TermKind::PreferredAnti(30));
        assert_eq!(ta[0].kind, TermKind::Required);
        assert_eq!(tc.iter().map(|t| t.id).collect::<Vec<_>>(), [2, 3]);
        let held = |t: &TermTable| t.entries.iter().flatten().count();
        assert_eq!(held(&table), 4);
        assert_eq!(table.get(1).unwrap().topology_key, "kubernetes.io/hostname");
        table.release(&a);
        assert_eq!(held(&table), 4);
        table.release(&b);
        assert_eq!(held(&table), 2);
        assert!(table.get(0).is_none());
        // A freed number is reused.
        let d = with_terms("d", "cache", 10);
        let mut ids: Vec<_> = table.acquire(&d).iter().map(|t| t.id).collect();
        ids.sort();
        assert_eq!(ids, [0, 1]);
        table.release(&c);
        table.release(&d);
        assert_eq!(held(&table), 0);
        assert!(table.by_hash.is_empty());
    }
}
