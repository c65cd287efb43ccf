//! InterPodAffinity: a pod's required and preferred affinity and anti-affinity to other pods,
//! and the symmetric terms of the pods already placed, with kube-scheduler's semantics.
//!
//! Each cycle counts, once, the existing pods that matter per topology pair (a node label key
//! and value), in PreFilter (`filtering`) and PreScore (`scoring`); Filter and Score then
//! only look up the node's values of the few topology keys involved.

mod filtering;
mod scoring;

#[cfg(test)]
mod tests;

use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

use serde::Deserialize;

use crate::cache::{Namespaces, Snapshot, Tracked};
use crate::framework::{
    ArgsError, DefaultPlace, EventHint, FilterPlugin, POD_AND_NODE_CHANGES, Plugin, PluginArgs,
    PluginSpec, PreFilterPlugin, PreScorePlugin, ScorePlugin, decode_args,
};
use crate::model::pod::AffinityTerm;
use crate::model::{Labels, PodInfo};

pub use filtering::{
    ERR_REASON_AFFINITY_RULES_NOT_MATCH, ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH,
    ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH,
};

/// The name configuration files use.
pub const NAME: &str = "InterPodAffinity";

/// Lowest valid `hardPodAffinityWeight`.
const MIN_HARD_POD_AFFINITY_WEIGHT: i32 = 0;
/// Highest valid `hardPodAffinityWeight`.
const MAX_HARD_POD_AFFINITY_WEIGHT: i32 = 100;

/// The plugin's arguments (`InterPodAffinityArgs`, kubescheduler.config.k8s.io/v1).
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct InterPodAffinityArgs {
    /// Score weight of an existing pod's required affinity term that the incoming pod
    /// matches: such pods want company, so their domains attract it. 0 disables it.
    pub hard_pod_affinity_weight: i32,
    /// When set, a pod without preferred (anti-)affinity terms of its own is not scored at
    /// all, trading the existing pods' preferences for throughput.
    pub ignore_preferred_terms_of_existing_pods: bool,
}

impl Default for InterPodAffinityArgs {
    fn default() -> Self {
        InterPodAffinityArgs {
            hard_pod_affinity_weight: 1,
            ignore_preferred_terms_of_existing_pods: false,
        }
    }
}

impl PluginArgs for InterPodAffinityArgs {
    const KIND: &'static str = "InterPodAffinityArgs";

    fn validate(&self) -> Result<(), ArgsError> {
        let w = self.hard_pod_affinity_weight;
        if !(MIN_HARD_POD_AFFINITY_WEIGHT..=MAX_HARD_POD_AFFINITY_WEIGHT).contains(&w) {
            return Err(ArgsError::new(
                "hardPodAffinityWeight",
                format!(
                    "Invalid value: {w}: not in valid range [{MIN_HARD_POD_AFFINITY_WEIGHT}, {MAX_HARD_POD_AFFINITY_WEIGHT}]"
                ),
            ));
        }
        Ok(())
    }
}

/// The plugin: filters by required terms, scores by preferred ones (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct InterPodAffinity {
    args: InterPodAffinityArgs,
}

impl InterPodAffinity {
    /// The plugin with validated arguments.
    pub fn new(args: InterPodAffinityArgs) -> Self {
        InterPodAffinity { args }
    }
}

/// The plugin for the registry, with its place in kube-scheduler's default profile.
pub const SPEC: PluginSpec = PluginSpec {
    name: NAME,
    factory,
    default: Some(DefaultPlace {
        order: 100,
        weight: Some(2),
    }),
    args: Some(crate::framework::resolved_args::<InterPodAffinityArgs>),
};

/// Builds the plugin from its (optional) arguments.
pub fn factory(args: Option<&serde_json::Value>) -> Result<Arc<dyn Plugin>, ArgsError> {
    Ok(Arc::new(InterPodAffinity::new(decode_args(args)?)))
}

impl Plugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [EventHint] {
        &POD_AND_NODE_CHANGES
    }
    fn cache_state(&self) -> &'static [Tracked] {
        &[Tracked::PodLabels, Tracked::NamespaceLabels]
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_pre_filter_extensions(&self) -> Option<&dyn crate::framework::PreFilterExtensions> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

/// Per-cycle sums by topology pair, grouped by topology key: a cycle involves only a few
/// keys (hostname, zone), each with many values, so a node's total is one label lookup and
/// one hash lookup per key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct TopologyCounts {
    pub(super) by_key: Vec<(String, HashMap<String, i64>)>,
}

impl TopologyCounts {
    /// Adds `delta` to the pair (`key`, the node's value of `key`), if the node has the label.
    fn add_on(&mut self, node_labels: &Labels, key: &str, delta: i64) {
        if let Some(value) = node_labels.get(key) {
            self.add(key, value, delta);
        }
    }

    /// Adds `delta` to the pair (`key`, `value`); only new pairs allocate.
    fn add(&mut self, key: &str, value: &str, delta: i64) {
        let i = match self.by_key.iter().position(|(k, _)| k == key) {
            Some(i) => i,
            None => {
                self.by_key.push((key.to_string(), HashMap::default()));
                self.by_key.len() - 1
            }
        };
        let values = &mut self.by_key[i].1;
        match values.get_mut(value) {
            Some(sum) => *sum += delta,
            None => {
                values.insert(value.to_string(), delta);
            }
        }
    }

    /// Adds `delta` to the pair (`key`, the node's value of `key`) as a pod comes to or
    /// leaves the node within a cycle; a pair whose count comes down to zero is dropped (as
    /// kube-scheduler drops it), so that a count emptied by removals reads as never counted.
    fn update_on(&mut self, node_labels: &Labels, key: &str, delta: i64) {
        let Some(value) = node_labels.get(key) else {
            return;
        };
        self.add(key, value, delta);
        if let Some(i) = self.by_key.iter().position(|(k, _)| k == key) {
            let values = &mut self.by_key[i].1;
            if values.get(value) == Some(&0) {
                values.remove(value);
            }
            if values.is_empty() {
                self.by_key.swap_remove(i);
            }
        }
    }

    /// The sum for the pair (`key`, the node's value of `key`); `None` when the node lacks
    /// the label.
    fn on(&self, node_labels: &Labels, key: &str) -> Option<i64> {
        let value = node_labels.get(key)?;
        Some(
            self.by_key
                .iter()
                .find(|(k, _)| k == key)
                .and_then(|(_, values)| values.get(value))
                .copied()
                .unwrap_or(0),
        )
    }

    /// The sums of `key`'s pairs, by value; `None` when no pair of it was counted.
    fn values_of(&self, key: &str) -> Option<&HashMap<String, i64>> {
        self.by_key.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// True when no pair was ever counted.
    fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// The node's sums over every key it has a value for.
    fn node_values<'a>(&'a self, node_labels: &'a Labels) -> impl Iterator<Item = i64> + 'a {
        self.by_key
            .iter()
            .filter_map(|(key, values)| node_labels.get(key).and_then(|v| values.get(v)).copied())
    }
}

/// The namespaces one of the incoming pod's terms is about. kube-scheduler resolves the
/// incoming pod's namespace selector against the namespaces it knows, once per cycle, and
/// merges them into the listed ones; an empty selector (`{}`) stays "every namespace".
#[derive(Debug, Clone)]
struct NamespaceScope {
    every: bool,
    /// Sorted, for binary search.
    names: Vec<Box<str>>,
}

impl NamespaceScope {
    fn new(term: &AffinityTerm, snapshot: &Snapshot) -> Self {
        let selector = &term.namespace_selector;
        let every = selector.is_everything();
        let mut names: Vec<Box<str>> = term.namespaces.iter().map(|n| n.as_str().into()).collect();
        if !every && !selector.is_nothing() {
            names.extend(
                snapshot
                    .namespaces()
                    .iter()
                    .filter(|(_, labels)| selector.matches(labels))
                    .map(|(name, _)| name.as_str().into()),
            );
        }
        names.sort_unstable();
        names.dedup();
        NamespaceScope { every, names }
    }

    /// The scope as the snapshot's pod index takes it.
    fn as_namespaces(&self) -> Namespaces<'_> {
        if self.every {
            Namespaces::Every
        } else {
            Namespaces::Listed(&self.names)
        }
    }

    fn contains(&self, namespace: &str) -> bool {
        self.as_namespaces().contains(namespace)
    }
}

/// One of the incoming pod's terms, ready to be matched against existing pods.
#[derive(Debug)]
struct IncomingTerm<'a> {
    term: &'a AffinityTerm,
    namespaces: NamespaceScope,
}

impl<'a> IncomingTerm<'a> {
    fn new(term: &'a AffinityTerm, snapshot: &'a Snapshot) -> Self {
        IncomingTerm {
            term,
            namespaces: NamespaceScope::new(term, snapshot),
        }
    }

    /// The namespaces of the pods this term is about.
    fn namespaces(&self) -> Namespaces<'_> {
        self.namespaces.as_namespaces()
    }

    /// True when `pod` is one this term is about.
    fn matches(&self, pod: &PodInfo) -> bool {
        self.namespaces.contains(&pod.namespace) && self.term.selector.matches(&pod.labels)
    }

    fn topology_key(&self) -> &'a str {
        &self.term.topology_key
    }
}
