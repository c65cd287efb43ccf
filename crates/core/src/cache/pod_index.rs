//! Placed pods indexed by their namespace and labels, and by the labels their own affinity
//! terms ask for.
//!
//! PodTopologySpread and InterPodAffinity count, every cycle, the placed pods a selector
//! matches in some namespaces. kube-scheduler examines every pod in the cluster for that;
//! with the index, a selector that requires some `key=value` examines only the pods of those
//! namespaces carrying that label (a deployment's pods rather than the cluster's), and
//! checks only the selector's other requirements: the index knows each pod's namespace and
//! that label without reading the pod, whose scattered fields cost a cache miss each.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet, FxHasher};

use crate::model::PodInfo;
use crate::model::pod::AffinityTerm;
use crate::model::selector::LabelSelector;

use super::term_table::{PodTerm, TermId, TermTable};

/// A placed pod and the position of its node in the snapshot.
#[derive(Debug, Clone)]
struct IndexedPod {
    pod: Arc<PodInfo>,
    /// Its node's position in [`super::Snapshot::nodes`].
    node: usize,
    /// The pod's `terminating`, kept here so that counting pods need not read the pod.
    terminating: bool,
}

/// A placed pod a selector matched, as [`PodIndex::for_each_match`] names it.
#[derive(Debug, Clone, Copy)]
pub struct Matched<'a> {
    /// The pod.
    pub pod: &'a PodInfo,
    /// Its node's position in [`super::Snapshot::nodes`].
    pub node: usize,
    /// The pod's `terminating`, read without reading the pod.
    pub terminating: bool,
}

/// A placed pod with pod affinity or anti-affinity terms, and the numbers of its terms.
#[derive(Debug, Clone)]
pub struct TermPod {
    /// The pod.
    pub pod: Arc<PodInfo>,
    /// Its node's position in [`super::Snapshot::nodes`].
    pub node: usize,
    /// Its terms, numbered in the index's [`TermTable`] (see [`PodIndex::term`]).
    pub terms: Arc<[PodTerm]>,
}

/// Pods keyed by the address of their `PodInfo` (unique while the pod is placed).
type PodSet = FxHashMap<usize, IndexedPod>;

/// Pods with terms, keyed as in [`PodSet`].
type TermPodSet = FxHashMap<usize, TermPod>;

/// The placed pods of one namespace carrying one label.
#[derive(Debug, Clone)]
struct LabelSet {
    pods: PodSet,
    /// The namespace, key and value every pod of the set has; `None` once two such triples
    /// shared the set's hash, when each pod must be checked.
    exact: Option<Arc<[Box<str>; 3]>>,
}

/// A set found for a label: its pods, and whether they are exactly that label's (see
/// [`PodIndex::label_set`]).
type LabelSetRef<'a> = (&'a PodSet, bool);

/// The namespaces a selector's pods are looked for in.
#[derive(Debug, Clone, Copy)]
pub enum Namespaces<'a> {
    /// This one only.
    One(&'a str),
    /// These, sorted and without duplicates.
    Listed(&'a [Box<str>]),
    /// Every namespace.
    Every,
}

impl Namespaces<'_> {
    /// True when pods of `namespace` are looked for.
    pub fn contains(&self, namespace: &str) -> bool {
        match self {
            Namespaces::One(n) => *n == namespace,
            Namespaces::Listed(names) => names.binary_search_by(|n| (**n).cmp(namespace)).is_ok(),
            Namespaces::Every => true,
        }
    }
}

/// The index a snapshot keeps (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct PodIndex {
    /// Placed pods by `hash(namespace, key, value)` of each of their labels.
    by_label: FxHashMap<u64, LabelSet>,
    /// The namespaces of the placed pods, with how many each has.
    namespaces: FxHashMap<Box<str>, usize>,
    /// Placed pods with pod affinity or anti-affinity terms, by `hash(key, value)` of the
    /// labels those terms require (a pod the terms could be about carries one of them).
    by_term_label: FxHashMap<u64, TermPodSet>,
    /// Placed pods with some term that requires no particular label: candidates for every
    /// pod.
    any_term: TermPodSet,
    /// The distinct terms of the placed pods.
    terms: TermTable,
    /// The pods in the index, by address: adding a pod twice or removing one never added
    /// leaves the counts above as they are.
    ids: FxHashSet<usize>,
}

impl PodIndex {
    /// Adds a pod placed on the node at position `node`.
    pub(super) fn insert(&mut self, pod: &Arc<PodInfo>, node: usize) {
        let id = id(pod);
        if !self.ids.insert(id) {
            return;
        }
        let entry = || IndexedPod {
            pod: pod.clone(),
            node,
            terminating: pod.terminating,
        };
        for (k, v) in pod.labels.iter() {
            let set = self
                .by_label
                .entry(namespaced_label_hash(&pod.namespace, k, v))
                .or_insert_with(|| LabelSet {
                    pods: PodSet::default(),
                    exact: Some(Arc::new([
                        pod.namespace.as_str().into(),
                        k.into(),
                        v.into(),
                    ])),
                });
            if set
                .exact
                .as_ref()
                .is_some_and(|e| (&*e[0], &*e[1], &*e[2]) != (pod.namespace.as_str(), k, v))
            {
                set.exact = None;
            }
            set.pods.insert(id, entry());
        }
        *self
            .namespaces
            .entry(pod.namespace.as_str().into())
            .or_default() += 1;
        let labels = term_labels(pod);
        if matches!(labels, TermLabels::None) {
            return;
        }
        let with_terms = TermPod {
            pod: pod.clone(),
            node,
            terms: self.terms.acquire(pod),
        };
        match labels {
            TermLabels::None => {}
            TermLabels::Any => {
                self.any_term.insert(id, with_terms);
            }
            TermLabels::Some(hashes) => {
                for h in hashes {
                    self.by_term_label
                        .entry(h)
                        .or_default()
                        .insert(id, with_terms.clone());
                }
            }
        }
    }

    /// Removes a pod added with [`PodIndex::insert`].
    pub(super) fn remove(&mut self, pod: &Arc<PodInfo>) {
        let id = id(pod);
        if !self.ids.remove(&id) {
            return;
        }
        for (k, v) in pod.labels.iter() {
            let hash = namespaced_label_hash(&pod.namespace, k, v);
            if let Some(set) = self.by_label.get_mut(&hash) {
                set.pods.remove(&id);
                if set.pods.is_empty() {
                    self.by_label.remove(&hash);
                }
            }
        }
        if let Some(n) = self.namespaces.get_mut(pod.namespace.as_str()) {
            *n -= 1;
            if *n == 0 {
                self.namespaces.remove(pod.namespace.as_str());
            }
        }
        match term_labels(pod) {
            TermLabels::None => return,
            TermLabels::Any => {
                self.any_term.remove(&id);
            }
            TermLabels::Some(hashes) => {
                for h in hashes {
                    remove_from(&mut self.by_term_label, h, id);
                }
            }
        }
        self.terms.release(pod);
    }

    /// Empties the index.
    pub(super) fn clear(&mut self) {
        self.by_label.clear();
        self.namespaces.clear();
        self.by_term_label.clear();
        self.any_term.clear();
        self.terms.clear();
        self.ids.clear();
    }

    /// Calls `f` with each placed pod of `namespaces` whose labels `selector` matches, and
    /// returns true; returns false without calling it when the selector requires no
    /// `key=value` (the caller must then look at every pod).
    pub fn for_each_match(
        &self,
        selector: &LabelSelector,
        namespaces: Namespaces<'_>,
        mut f: impl FnMut(Matched<'_>),
    ) -> bool {
        if selector.is_nothing() {
            return true;
        }
        let mut best: Option<(usize, usize, Vec<LabelSetRef<'_>>)> = None;
        for (i, key, values) in selector.required_values() {
            let mut sets = Vec::new();
            let mut add = |ns: &str| {
                sets.extend(values.iter().filter_map(|v| self.label_set(ns, key, v)));
            };
            match namespaces {
                Namespaces::One(ns) => add(ns),
                Namespaces::Listed(names) => names.iter().for_each(|ns| add(ns)),
                Namespaces::Every => self.namespaces.keys().for_each(|ns| add(ns)),
            }
            // The required label with the fewest pods behind it; one key's values are
            // disjoint sets.
            let size = sets.iter().map(|(pods, _)| pods.len()).sum();
            if best.as_ref().is_none_or(|(_, n, _)| size < *n) {
                best = Some((i, size, sets));
            }
        }
        let Some((chosen, _, sets)) = best else {
            return false;
        };
        let only = selector.only(chosen);
        for (pods, exact) in sets {
            for p in pods.values() {
                let matched = if exact {
                    only || selector.matches_except(&p.pod.labels, chosen)
                } else {
                    namespaces.contains(&p.pod.namespace) && selector.matches(&p.pod.labels)
                };
                if matched {
                    f(Matched {
                        pod: &p.pod,
                        node: p.node,
                        terminating: p.terminating,
                    });
                }
            }
        }
        true
    }

    /// The placed pods of `namespace` labelled `key=value`, and whether that is exactly what
    /// they are (false: the set also holds pods of another triple with the same hash, each
    /// to be checked).
    fn label_set(&self, namespace: &str, key: &str, value: &str) -> Option<LabelSetRef<'_>> {
        let set = self
            .by_label
            .get(&namespaced_label_hash(namespace, key, value))?;
        match &set.exact {
            Some(e) if (&*e[0], &*e[1], &*e[2]) != (namespace, key, value) => None,
            exact => Some((&set.pods, exact.is_some())),
        }
    }

    /// The term numbered `id` in a [`TermPod`]'s terms.
    pub fn term(&self, id: TermId) -> Option<&AffinityTerm> {
        self.terms.get(id)
    }

    /// Placed pods with affinity terms that may be about a pod with `labels`: each such pod
    /// once. Callers check each term against the pod.
    pub fn term_candidates<'a>(
        &'a self,
        labels: &crate::model::Labels,
    ) -> impl Iterator<Item = &'a TermPod> + 'a {
        let mut sets: Vec<&TermPodSet> = labels
            .iter()
            .filter_map(|(k, v)| self.by_term_label.get(&label_hash(k, v)))
            .collect();
        sets.push(&self.any_term);
        // A pod is under as many label sets as its terms require labels; the first set that
        // holds it yields it.
        let later: Vec<&TermPodSet> = sets.clone();
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

fn remove_from(map: &mut FxHashMap<u64, TermPodSet>, hash: u64, id: usize) {
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

/// The hash a `key=value` label of a pod in `namespace` is indexed by.
fn namespaced_label_hash(namespace: &str, key: &str, value: &str) -> u64 {
    let mut h = FxHasher::default();
    namespace.hash(&mut h);
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
    term.selector
        .required_values()
        .next()
        .map(|(_, key, values)| (key, values))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;

    fn term_names<'a>(it: impl Iterator<Item = &'a TermPod>) -> Vec<String> {
        let mut v: Vec<String> = it.map(|p| p.pod.name.clone()).collect();
        v.sort();
        v
    }

    fn matched(index: &PodIndex, selector: &LabelSelector, ns: Namespaces<'_>) -> Vec<String> {
        let mut v = Vec::new();
        assert!(index.for_each_match(selector, ns, |m| v.push(m.pod.name.clone())));
        v.sort();
        v
    }

    fn selector(yaml: &str) -> LabelSelector {
        LabelSelector::compile(Some(&serde_yaml::from_str(yaml).unwrap()), "selector").unwrap()
    }

    #[test]
    fn matches_are_the_pods_of_the_namespaces_the_whole_selector_matches() {
        let mut index = PodIndex::default();
        let a = pod("a").label("app", "web").label("tier", "front").build();
        let b = pod("b").label("app", "db").label("tier", "front").build();
        let c = pod("c").label("app", "web").label("tier", "back").build();
        let d = pod("d").namespace("other").label("app", "web").build();
        for (p, n) in [(&a, 0), (&b, 1), (&c, 2), (&d, 3)] {
            index.insert(p, n);
        }
        let web = selector("matchLabels: {app: web}");
        let default = Namespaces::One("default");
        assert_eq!(matched(&index, &web, default), ["a", "c"]);
        assert_eq!(matched(&index, &web, Namespaces::Every), ["a", "c", "d"]);
        let listed: Vec<Box<str>> = vec!["nobody".into(), "other".into()];
        assert_eq!(matched(&index, &web, Namespaces::Listed(&listed)), ["d"]);
        // The requirements the index did not look the pods up by are checked.
        let front = selector(
            "{matchLabels: {tier: front}, matchExpressions: [{key: app, operator: NotIn, values: [db]}]}",
        );
        assert_eq!(matched(&index, &front, default), ["a"]);
        let either = selector(
            "matchExpressions: [{key: app, operator: In, values: [db, web]}, {key: tier, operator: Exists}]",
        );
        assert_eq!(matched(&index, &either, default), ["a", "b", "c"]);
        index.remove(&c);
        assert_eq!(matched(&index, &web, default), ["a"]);
        index.remove(&d);
        assert_eq!(matched(&index, &web, Namespaces::Every), ["a"]);
        assert!(!index.for_each_match(&LabelSelector::everything(), default, |_| ()));
        assert!(matched(&index, &LabelSelector::nothing(), default).is_empty());
    }

    #[test]
    fn adding_a_pod_twice_or_removing_one_never_added_changes_nothing() {
        let mut index = PodIndex::default();
        let a = pod("a").label("app", "web").build();
        let b = pod("b")
            .label("app", "web")
            .spec_yaml(
                r#"
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 10
      podAffinityTerm:
        labelSelector: {matchLabels: {app: web}}
        topologyKey: kubernetes.io/hostname
"#,
            )
            .build();
        let twin = pod("c").label("app", "web").spec_yaml(
            r#"
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 10
      podAffinityTerm:
        labelSelector: {matchLabels: {app: web}}
        topologyKey: kubernetes.io/hostname
"#,
        );
        let c = twin.build();
        index.insert(&a, 0);
        index.insert(&b, 1);
        index.insert(&b, 1);
        // c, never added, holds a term equal to b's.
        index.remove(&c);
        index.remove(&a);
        let web = selector("matchLabels: {app: web}");
        assert_eq!(matched(&index, &web, Namespaces::Every), ["b"]);
        let incoming = pod("in").label("app", "web").build();
        let found: Vec<_> = index.term_candidates(&incoming.labels).collect();
        assert_eq!(found.len(), 1);
        assert!(index.term(found[0].terms[0].id).is_some());
        index.remove(&b);
        assert!(matched(&index, &web, Namespaces::Every).is_empty());
        assert!(index.namespaces.is_empty());
        assert!(index.term(0).is_none());
    }

    #[test]
    fn a_set_two_labels_share_by_hash_checks_each_pod() {
        let mut index = PodIndex::default();
        let a = pod("a").label("app", "web").build();
        let b = pod("b").label("app", "db").build();
        index.insert(&a, 0);
        index.insert(&b, 1);
        // Put b's pods under a's hash, as a collision would.
        let moved = index
            .by_label
            .remove(&namespaced_label_hash("default", "app", "db"))
            .unwrap();
        let set = index
            .by_label
            .get_mut(&namespaced_label_hash("default", "app", "web"))
            .unwrap();
        set.pods.extend(moved.pods);
        set.exact = None;
        let web = selector("matchLabels: {app: web}");
        assert_eq!(matched(&index, &web, Namespaces::One("default")), ["a"]);
        // A set whose exact triple is another's holds none of the asked label's pods.
        let set = index
            .by_label
            .get_mut(&namespaced_label_hash("default", "app", "web"))
            .unwrap();
        set.exact = Some(Arc::new(["default".into(), "app".into(), "db".into()]));
        assert!(matched(&index, &web, Namespaces::One("default")).is_empty());
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
        assert_eq!(term_names(index.term_candidates(&web_only.labels)), ["a"]);
        assert_eq!(term_names(index.term_candidates(&incoming.labels)), ["a"]);
        let other = pod("o").label("app", "db").build();
        assert!(term_names(index.term_candidates(&other.labels)).is_empty());
        index.remove(&a);
        assert!(term_names(index.term_candidates(&incoming.labels)).is_empty());
    }
}
