//! NodeAffinity: the pod's `nodeSelector` and required node affinity, plus the
//! scheduler-enforced `addedAffinity` of the plugin's arguments, filter nodes; preferred terms
//! (the pod's and the added ones) score them.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use serde::{Deserialize, Serialize};

use crate::cache::{NodeInfo, Snapshot};
use crate::framework::{
    ArgsError, CycleState, DefaultPlace, EventHint, FilterPlugin, MAX_NODE_SCORE, NODE_CHANGES,
    NodeScore, Plugin, PluginArgs, PluginSpec, PreFilterPlugin, PreFilterResult, PreScorePlugin,
    ScorePlugin, Status, decode_args, default_normalize_score,
};
use crate::model::PodInfo;
use crate::model::selector::{NodeSelector, NodeSelectorTerm, Operator, SelectorError};

/// The name used in configuration files.
pub const NAME: &str = "NodeAffinity";

/// Reason given for a node that fails the pod's `nodeSelector` or required node affinity.
pub const ERR_REASON_POD: &str = "node(s) didn't match Pod's node affinity/selector";

/// Reason given for a node that fails the required part of `addedAffinity`.
pub const ERR_REASON_ENFORCED: &str = "node(s) didn't match scheduler-enforced node affinity";

/// PreFilter reason when every required term names nodes by `metadata.name` and no node can
/// satisfy any of them.
pub const ERR_REASON_CONFLICT: &str = "pod affinity terms conflict";

/// The only node field node selectors may use.
const NODE_NAME_FIELD: &str = "metadata.name";

/// `NodeAffinityArgs`: node affinity the scheduler adds to every pod of the profile.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct NodeAffinityArgs {
    /// Required terms every pod must also satisfy, and preferred terms added to every pod's.
    pub added_affinity: Option<core::NodeAffinity>,
}

impl PluginArgs for NodeAffinityArgs {
    const KIND: &'static str = "NodeAffinityArgs";

    /// kube-scheduler's rules: every added term must compile as a node selector term would
    /// (known operators, values as the operator needs, `matchFields` only on `metadata.name`
    /// with `In`/`NotIn` and exactly one value). Preferred terms of weight 0 are ignored
    /// unchecked, as kube-scheduler does; negative weights are refused.
    fn validate(&self) -> Result<(), ArgsError> {
        NodeAffinity::new(self).map(|_| ())
    }
}

/// Filters on required node affinity and scores on preferred node affinity.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeAffinity {
    /// `addedAffinity.requiredDuringSchedulingIgnoredDuringExecution`, compiled.
    added_required: Option<NodeSelector>,
    /// `addedAffinity.preferredDuringSchedulingIgnoredDuringExecution` without its weight-0
    /// terms; `None` when the list is absent or empty (then PreScore may skip).
    added_preferred: Option<Vec<(i32, NodeSelectorTerm)>>,
}

impl NodeAffinity {
    /// Compiles the arguments; an error names the offending field inside the args.
    pub fn new(args: &NodeAffinityArgs) -> Result<Self, ArgsError> {
        let Some(added) = &args.added_affinity else {
            return Ok(NodeAffinity::default());
        };
        let to_args_error = |e: SelectorError| ArgsError::new(e.field, e.reason);
        let added_required = added
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .map(|sel| {
                let path = "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution";
                for (i, term) in sel.node_selector_terms.iter().enumerate() {
                    check_field_values(term, &format!("{path}.nodeSelectorTerms[{i}]"))?;
                }
                NodeSelector::compile(sel, path).map_err(to_args_error)
            })
            .transpose()?;
        let added_preferred = match &added.preferred_during_scheduling_ignored_during_execution {
            Some(terms) if !terms.is_empty() => {
                let mut compiled = Vec::with_capacity(terms.len());
                for (i, t) in terms.iter().enumerate() {
                    let path = format!(
                        "addedAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
                    );
                    if t.weight < 0 {
                        return Err(ArgsError::new(
                            format!("{path}.weight"),
                            format!("must not be negative, got {}", t.weight),
                        ));
                    }
                    if t.weight == 0 {
                        continue;
                    }
                    let path = format!("{path}.preference");
                    check_field_values(&t.preference, &path)?;
                    let term =
                        NodeSelectorTerm::compile(&t.preference, &path).map_err(to_args_error)?;
                    compiled.push((t.weight, term));
                }
                Some(compiled)
            }
            _ => None,
        };
        Ok(NodeAffinity {
            added_required,
            added_preferred,
        })
    }
}

/// kube-scheduler's rule for node field selectors, which the model's compiler leaves to the
/// API server for pods: `In` and `NotIn` on a field take exactly one value.
fn check_field_values(term: &core::NodeSelectorTerm, path: &str) -> Result<(), ArgsError> {
    for (i, r) in term.match_fields.iter().flatten().enumerate() {
        let count = r.values.as_ref().map_or(0, Vec::len);
        if matches!(r.operator.as_str(), "In" | "NotIn") && count != 1 {
            return Err(ArgsError::new(
                format!("{path}.matchFields[{i}].values"),
                "must have one element",
            ));
        }
    }
    Ok(())
}

impl Plugin for NodeAffinity {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [EventHint] {
        &NODE_CHANGES
    }

    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
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

impl PreFilterPlugin for NodeAffinity {
    /// Skips when nothing is required of the node. When every required term names nodes with
    /// `metadata.name In`, narrows the search to those nodes: a term's `In` requirements are
    /// intersected, the terms' sets united; a single term without such a requirement allows
    /// every node. No node left means the terms conflict.
    fn pre_filter(
        &self,
        _: &mut CycleState,
        pod: &PodInfo,
        _: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let required = pod.required_node_affinity.as_ref();
        if required.is_none() && self.added_required.is_none() && pod.node_selector.is_empty() {
            return (PreFilterResult::default(), Status::skip());
        }
        let Some(required) = required.filter(|r| !r.terms.is_empty()) else {
            return (PreFilterResult::default(), Status::success());
        };
        let mut node_names: BTreeSet<Arc<str>> = BTreeSet::new();
        for term in &required.terms {
            let mut term_names: Option<BTreeSet<&str>> = None;
            for r in &term.fields {
                if r.key != NODE_NAME_FIELD || r.operator != Operator::In {
                    continue;
                }
                let values = r.values.iter().map(String::as_str).collect();
                term_names = Some(match term_names {
                    None => values,
                    Some(names) => names.intersection(&values).copied().collect(),
                });
            }
            let Some(term_names) = term_names else {
                return (PreFilterResult::default(), Status::success());
            };
            node_names.extend(term_names.into_iter().map(Arc::from));
        }
        if node_names.is_empty() {
            return (
                PreFilterResult::default(),
                Status::unresolvable(ERR_REASON_CONFLICT),
            );
        }
        (
            PreFilterResult {
                node_names: Some(node_names),
            },
            Status::success(),
        )
    }
}

impl FilterPlugin for NodeAffinity {
    /// The added required affinity first, then the pod's `nodeSelector` and required
    /// affinity. Reads only the pod, so it needs no PreFilter state.
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let (name, labels) = (&*node.node.name, &node.node.labels);
        if let Some(added) = &self.added_required
            && !added.matches(name, labels)
        {
            return Status::unresolvable(ERR_REASON_ENFORCED);
        }
        let selector_ok = pod
            .node_selector
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v));
        let affinity_ok = pod
            .required_node_affinity
            .as_ref()
            .is_none_or(|r| r.matches(name, labels));
        if selector_ok && affinity_ok {
            Status::success()
        } else {
            Status::unresolvable(ERR_REASON_POD)
        }
    }
}

impl PreScorePlugin for NodeAffinity {
    /// Skips when neither the pod nor the arguments prefer anything.
    fn pre_score(
        &self,
        _: &mut CycleState,
        pod: &PodInfo,
        _: &Snapshot,
        _: &[&NodeInfo],
    ) -> Status {
        if pod.preferred_node_affinity.is_empty() && self.added_preferred.is_none() {
            Status::skip()
        } else {
            Status::success()
        }
    }

    fn reads_feasible(&self, _pod: &PodInfo, _snapshot: &Snapshot) -> bool {
        false
    }
}

impl ScorePlugin for NodeAffinity {
    /// The sum of the weights of the preferred terms (added and the pod's) the node matches.
    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let (name, labels) = (&*node.node.name, &node.node.labels);
        let sum = self
            .added_preferred
            .iter()
            .flatten()
            .chain(pod.preferred_node_affinity.iter())
            .filter(|(_, term)| term.matches(name, labels))
            .map(|(weight, _)| i64::from(*weight))
            .sum();
        Ok(sum)
    }

    /// Scaled so that the best node gets 100.
    fn normalize(&self, _: &CycleState, _: &PodInfo, scores: &mut [NodeScore]) -> Status {
        default_normalize_score(MAX_NODE_SCORE, false, scores);
        Status::success()
    }
}

/// The plugin for the registry, with its place in kube-scheduler's default profile.
pub const SPEC: PluginSpec = PluginSpec {
    name: NAME,
    factory,
    default: Some(DefaultPlace {
        order: 60,
        weight: Some(2),
    }),
    args: Some(crate::framework::resolved_args::<NodeAffinityArgs>),
};

/// Builds the plugin from `NodeAffinityArgs`.
pub fn factory(args: Option<&serde_json::Value>) -> Result<Arc<dyn Plugin>, ArgsError> {
    let args: NodeAffinityArgs = decode_args(args)?;
    Ok(Arc::new(NodeAffinity::new(&args)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Cache;
    use crate::framework::Code;
    use crate::model::NodeModel;
    use crate::testing::{NodeBuilder, PodBuilder, node, pod};

    fn plugin(args: serde_json::Value) -> NodeAffinity {
        let args: NodeAffinityArgs = decode_args(Some(&args)).unwrap();
        NodeAffinity::new(&args).unwrap()
    }

    fn info(n: NodeBuilder) -> NodeInfo {
        NodeInfo::new(Arc::new(n.build()))
    }

    fn snapshot(nodes: Vec<NodeModel>) -> Snapshot {
        let mut cache = Cache::new();
        for n in nodes {
            cache.upsert_node(n);
        }
        let mut snap = Snapshot::default();
        cache.update_snapshot(&mut snap);
        snap
    }

    fn pre_filter(pl: &NodeAffinity, p: &PodInfo) -> (PreFilterResult, Status) {
        pl.pre_filter(&mut CycleState::new(), p, &Snapshot::default())
    }

    /// PreFilter then Filter, as the cycle runs them.
    fn filter(pl: &NodeAffinity, p: PodBuilder, n: NodeBuilder) -> Status {
        let p = p.build();
        let mut state = CycleState::new();
        let (_, st) = pl.pre_filter(&mut state, &p, &Snapshot::default());
        if st.is_skip() {
            return st;
        }
        assert!(st.is_success(), "{st}");
        pl.filter(&state, &p, &info(n))
    }

    fn required(yaml_terms: &str) -> PodBuilder {
        pod("p").spec_yaml(&format!(
            "affinity:\n  nodeAffinity:\n    requiredDuringSchedulingIgnoredDuringExecution:\n      nodeSelectorTerms:\n{yaml_terms}"
        ))
    }

    fn names(r: &PreFilterResult) -> Option<Vec<&str>> {
        r.node_names
            .as_ref()
            .map(|s| s.iter().map(|n| &**n).collect())
    }

    // --- arguments ---

    #[test]
    fn default_args_add_nothing() {
        let pl = factory(None).unwrap();
        assert_eq!(pl.name(), "NodeAffinity");
        assert!(pl.as_pre_filter().is_some() && pl.as_filter().is_some());
        assert!(pl.as_pre_score().is_some() && pl.as_score().is_some());
        assert_eq!(
            NodeAffinity::new(&NodeAffinityArgs::default()),
            Ok(NodeAffinity::default())
        );
        assert!(factory(Some(&serde_json::json!({"addedAffinity": null}))).is_ok());
    }

    #[test]
    fn unknown_field_and_kind_are_refused() {
        let e = factory(Some(&serde_json::json!({"addedAfinity": {}})))
            .err()
            .unwrap();
        assert!(e.reason.contains("unknown field"), "{e}");
        let e = factory(Some(&serde_json::json!({"kind": "NodeResourcesFitArgs"})))
            .err()
            .unwrap();
        assert_eq!(e.field, "kind");
        assert!(
            factory(Some(&serde_json::json!({
                "kind": "NodeAffinityArgs",
                "apiVersion": "kubescheduler.config.k8s.io/v1",
            })))
            .is_ok()
        );
    }

    fn args_error(args: serde_json::Value) -> ArgsError {
        factory(Some(&args)).err().expect("args must be refused")
    }

    #[test]
    fn required_terms_are_validated_with_their_path() {
        let e = args_error(serde_json::json!({"addedAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
            {"matchExpressions": [
                {"key": "zone", "operator": "Exists"},
                {"key": "zone", "operator": "Near", "values": ["a"]}]}
        ]}}}));
        assert_eq!(
            e.field,
            "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[1].matchExpressions[1]"
        );
        assert_eq!(e.reason, "unsupported operator \"Near\"");
        let e = args_error(serde_json::json!({"addedAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["x"]}]}
        ]}}}));
        assert_eq!(
            e.field,
            "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]"
        );
    }

    #[test]
    fn match_fields_take_exactly_one_value() {
        for values in [serde_json::json!([]), serde_json::json!(["a", "b"])] {
            let e = args_error(serde_json::json!({"addedAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": values}]}
            ]}}}));
            assert_eq!(
                e.field,
                "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields[0].values"
            );
            assert_eq!(e.reason, "must have one element");
        }
        let e = args_error(serde_json::json!({"addedAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "Exists"}]}
        ]}}}));
        assert_eq!(
            e.field,
            "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields[0]"
        );
        let e = args_error(serde_json::json!({"addedAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["x"]}]}
        ]}}}));
        assert!(
            e.field.ends_with("nodeSelectorTerms[0].matchFields[0]"),
            "{e}"
        );
        assert!(
            factory(Some(&serde_json::json!({"addedAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
            ]}}})))
            .is_ok()
        );
    }

    #[test]
    fn preferred_terms_are_validated_with_their_path() {
        let e = args_error(serde_json::json!({"addedAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}},
            {"weight": 2, "preference": {"matchExpressions": [{"key": "a", "operator": "In"}]}}
        ]}}));
        assert_eq!(
            e.field,
            "addedAffinity.preferredDuringSchedulingIgnoredDuringExecution[1].preference.matchExpressions[0]"
        );
        assert_eq!(e.reason, "values must be non-empty for In");
        let e = args_error(serde_json::json!({"addedAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": -1, "preference": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}}
        ]}}));
        assert_eq!(
            e.field,
            "addedAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight"
        );
        assert_eq!(e.reason, "must not be negative, got -1");
    }

    #[test]
    fn weight_zero_preferred_terms_are_dropped_unchecked() {
        let pl = plugin(serde_json::json!({"addedAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 0, "preference": {"matchExpressions": [{"key": "a", "operator": "Bogus"}]}}
        ]}}));
        assert_eq!(pl.added_preferred, Some(vec![]));
        let pl = plugin(serde_json::json!({"addedAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": []}}));
        assert_eq!(pl.added_preferred, None);
    }

    #[test]
    fn args_fields_are_read_from_yaml_configuration() {
        let yaml = r#"
addedAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    nodeSelectorTerms:
    - matchExpressions:
      - {key: pool, operator: In, values: [batch]}
  preferredDuringSchedulingIgnoredDuringExecution:
  - weight: 7
    preference:
      matchExpressions:
      - {key: disk, operator: In, values: [ssd]}
"#;
        let value: serde_json::Value = serde_yaml::from_str(yaml).unwrap();
        let pl = plugin(value);
        assert_eq!(pl.added_required.as_ref().map(|r| r.terms.len()), Some(1));
        assert_eq!(pl.added_preferred.as_ref().map(|p| p[0].0), Some(7));
    }

    // --- PreFilter ---

    #[test]
    fn pre_filter_skips_when_nothing_is_required() {
        let pl = NodeAffinity::default();
        assert!(pre_filter(&pl, &pod("p").build()).1.is_skip());
        let preferred_only = pod("p").spec_yaml(
            "affinity: {nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 1, preference: {matchExpressions: [{key: a, operator: Exists}]}}]}}",
        );
        assert!(pre_filter(&pl, &preferred_only.build()).1.is_skip());
        let (r, s) = pre_filter(&pl, &pod("p").node_selector("a", "b").build());
        assert!(s.is_success());
        assert_eq!(r, PreFilterResult::default());
        let added = plugin(serde_json::json!({"addedAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}));
        assert!(pre_filter(&added, &pod("p").build()).1.is_success());
        let added_preferred_only = plugin(serde_json::json!({"addedAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}}]}}));
        assert!(
            pre_filter(&added_preferred_only, &pod("p").build())
                .1
                .is_skip()
        );
    }

    #[test]
    fn pre_filter_narrows_to_named_nodes() {
        let pl = NodeAffinity::default();
        let p = required(
            "      - matchFields: [{key: metadata.name, operator: In, values: [n1]}]\n      - matchFields: [{key: metadata.name, operator: In, values: [n2]}]\n",
        );
        let (r, s) = pre_filter(&pl, &p.build());
        assert!(s.is_success());
        assert_eq!(names(&r), Some(vec!["n1", "n2"]));
    }

    #[test]
    fn pre_filter_intersects_requirements_within_a_term() {
        let pl = NodeAffinity::default();
        let p = required(
            "      - matchExpressions: [{key: zone, operator: In, values: [a]}]\n        matchFields:\n        - {key: metadata.name, operator: In, values: [n1]}\n        - {key: metadata.name, operator: NotIn, values: [n2]}\n        - {key: metadata.name, operator: In, values: [n1]}\n",
        );
        let (r, s) = pre_filter(&pl, &p.build());
        assert!(s.is_success());
        assert_eq!(
            names(&r),
            Some(vec!["n1"]),
            "expressions and NotIn do not narrow"
        );
    }

    #[test]
    fn pre_filter_any_term_without_names_allows_all_nodes() {
        let pl = NodeAffinity::default();
        for second in [
            "      - matchExpressions: [{key: zone, operator: In, values: [a]}]\n",
            "      - matchFields: [{key: metadata.name, operator: NotIn, values: [n2]}]\n",
        ] {
            let p = required(&format!(
                "      - matchFields: [{{key: metadata.name, operator: In, values: [n1]}}]\n{second}"
            ));
            let (r, s) = pre_filter(&pl, &p.build());
            assert!(s.is_success());
            assert_eq!(r, PreFilterResult::default());
        }
    }

    #[test]
    fn pre_filter_conflicting_names_are_unresolvable() {
        let pl = NodeAffinity::default();
        let p = required(
            "      - matchFields:\n        - {key: metadata.name, operator: In, values: [n1]}\n        - {key: metadata.name, operator: In, values: [n2]}\n",
        );
        let (r, s) = pre_filter(&pl, &p.build());
        assert_eq!(r, PreFilterResult::default());
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(s.message(), "pod affinity terms conflict");
    }

    #[test]
    fn pre_filter_with_empty_required_terms_does_not_narrow() {
        let pl = NodeAffinity::default();
        let p = pod("p").spec_yaml(
            "affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: []}}}",
        );
        let (r, s) = pre_filter(&pl, &p.build());
        assert!(s.is_success());
        assert_eq!(r, PreFilterResult::default());
    }

    // --- Filter ---

    #[test]
    fn node_selector_requires_every_label() {
        let pl = NodeAffinity::default();
        let p = || {
            pod("p")
                .node_selector("zone", "a")
                .node_selector("disk", "ssd")
        };
        assert!(
            filter(
                &pl,
                p(),
                node("n")
                    .label("zone", "a")
                    .label("disk", "ssd")
                    .label("x", "y")
            )
            .is_success()
        );
        let s = filter(&pl, p(), node("n").label("zone", "a"));
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(
            s.message(),
            "node(s) didn't match Pod's node affinity/selector"
        );
        assert!(filter(&pl, p(), node("n").label("zone", "b").label("disk", "ssd")).is_rejected());
    }

    #[test]
    fn required_terms_are_ored_and_expressions_anded() {
        let pl = NodeAffinity::default();
        let p = || {
            required(
                "      - matchExpressions:\n        - {key: zone, operator: In, values: [a, b]}\n        - {key: gpu, operator: DoesNotExist}\n      - matchExpressions: [{key: gen, operator: Gt, values: ['5']}]\n",
            )
        };
        assert!(filter(&pl, p(), node("n").label("zone", "b")).is_success());
        assert!(filter(&pl, p(), node("n").label("zone", "b").label("gpu", "1")).is_rejected());
        assert!(filter(&pl, p(), node("n").label("gen", "6")).is_success());
        assert!(filter(&pl, p(), node("n").label("gen", "5")).is_rejected());
        let s = filter(&pl, p(), node("n").label("zone", "c"));
        assert_eq!(s.message(), ERR_REASON_POD);
    }

    #[test]
    fn node_selector_and_affinity_must_both_hold() {
        let pl = NodeAffinity::default();
        let p = || {
            required("      - matchExpressions: [{key: zone, operator: Exists}]\n")
                .node_selector("disk", "ssd")
        };
        assert!(filter(&pl, p(), node("n").label("zone", "a").label("disk", "ssd")).is_success());
        assert!(filter(&pl, p(), node("n").label("zone", "a")).is_rejected());
        assert!(filter(&pl, p(), node("n").label("disk", "ssd")).is_rejected());
    }

    #[test]
    fn empty_required_terms_match_no_node() {
        let pl = NodeAffinity::default();
        let no_terms = pod("p").spec_yaml(
            "affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: []}}}",
        );
        assert!(filter(&pl, no_terms, node("n")).is_rejected());
        let empty_term = required("      - {}\n");
        assert!(filter(&pl, empty_term, node("n")).is_rejected());
    }

    #[test]
    fn match_fields_filter_by_node_name() {
        let pl = NodeAffinity::default();
        let not_in = || {
            required("      - matchFields: [{key: metadata.name, operator: NotIn, values: [n1]}]\n")
        };
        assert!(filter(&pl, not_in(), node("n1")).is_rejected());
        assert!(filter(&pl, not_in(), node("n2")).is_success());
        let is_in = || {
            required("      - matchFields: [{key: metadata.name, operator: In, values: [n1]}]\n")
        };
        assert!(filter(&pl, is_in(), node("n1")).is_success());
        assert!(filter(&pl, is_in(), node("n2")).is_rejected());
    }

    #[test]
    fn added_affinity_is_enforced_first() {
        let pl = plugin(serde_json::json!({"addedAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["batch"]}]}
        ]}}}));
        assert!(filter(&pl, pod("p"), node("n").label("pool", "batch")).is_success());
        let s = filter(&pl, pod("p"), node("n").label("pool", "web"));
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(
            s.message(),
            "node(s) didn't match scheduler-enforced node affinity"
        );
        let s = filter(&pl, pod("p").node_selector("zone", "a"), node("n"));
        assert_eq!(
            s.message(),
            ERR_REASON_ENFORCED,
            "both fail: the added affinity is reported"
        );
        let s = filter(
            &pl,
            pod("p").node_selector("zone", "a"),
            node("n").label("pool", "batch"),
        );
        assert_eq!(s.message(), ERR_REASON_POD);
    }

    #[test]
    fn pods_without_constraints_fit_any_node_in_filter() {
        let pl = NodeAffinity::default();
        assert!(
            pl.filter(&CycleState::new(), &pod("p").build(), &info(node("n")))
                .is_success()
        );
    }

    // --- PreScore, Score, normalize ---

    fn preferred(terms: &str) -> PodBuilder {
        pod("p").spec_yaml(&format!(
            "affinity:\n  nodeAffinity:\n    preferredDuringSchedulingIgnoredDuringExecution:\n{terms}"
        ))
    }

    /// PreScore, Score and normalize over `nodes`; `None` when PreScore skips.
    fn scores(
        pl: &NodeAffinity,
        p: PodBuilder,
        nodes: Vec<NodeBuilder>,
    ) -> Option<(Vec<i64>, Vec<i64>)> {
        let p = p.build();
        let snap = snapshot(nodes.into_iter().map(|n| n.build()).collect());
        let refs: Vec<&NodeInfo> = snap.nodes().iter().map(|n| &**n).collect();
        let mut state = CycleState::new();
        let st = pl.pre_score(&mut state, &p, &snap, &refs);
        if st.is_skip() {
            return None;
        }
        assert!(st.is_success());
        let raw: Vec<i64> = refs
            .iter()
            .map(|n| pl.score(&state, &p, n).unwrap())
            .collect();
        let mut ns: Vec<NodeScore> = raw
            .iter()
            .enumerate()
            .map(|(index, &score)| NodeScore { index, score })
            .collect();
        assert!(pl.normalize(&state, &p, &mut ns).is_success());
        Some((raw, ns.iter().map(|s| s.score).collect()))
    }

    #[test]
    fn pre_score_skips_without_preferred_terms() {
        let pl = NodeAffinity::default();
        assert_eq!(
            scores(&pl, pod("p").node_selector("a", "b"), vec![node("n")]),
            None
        );
        let added = plugin(serde_json::json!({"addedAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 0, "preference": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}}]}}));
        assert_eq!(
            scores(&added, pod("p"), vec![node("n")]),
            Some((vec![0], vec![0])),
            "a non-empty added list does not skip, even with weight 0 only"
        );
    }

    #[test]
    fn score_sums_matching_weights_and_normalizes_to_the_best() {
        let pl = NodeAffinity::default();
        let p = preferred(
            "    - {weight: 2, preference: {matchExpressions: [{key: zone, operator: In, values: [a]}]}}\n    - {weight: 5, preference: {matchExpressions: [{key: disk, operator: In, values: [ssd]}]}}\n    - {weight: 3, preference: {matchFields: [{key: metadata.name, operator: In, values: [n4]}]}}\n",
        );
        let (raw, norm) = scores(
            &pl,
            p,
            vec![
                node("n1"),
                node("n2").label("zone", "a"),
                node("n3").label("zone", "a").label("disk", "ssd"),
                node("n4").label("disk", "ssd"),
            ],
        )
        .unwrap();
        let mut pairs: Vec<(i64, i64)> = raw.into_iter().zip(norm).collect();
        pairs.sort();
        // 100 * raw / 8, integer division.
        assert_eq!(pairs, [(0, 0), (2, 25), (7, 87), (8, 100)]);
    }

    #[test]
    fn added_preferred_terms_add_to_the_pods() {
        let pl = plugin(serde_json::json!({"addedAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "preference": {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["batch"]}]}}]}}));
        let p = preferred(
            "    - {weight: 30, preference: {matchExpressions: [{key: zone, operator: In, values: [a]}]}}\n",
        );
        let (raw, norm) = scores(
            &pl,
            p,
            vec![
                node("both").label("pool", "batch").label("zone", "a"),
                node("added").label("pool", "batch"),
                node("none"),
            ],
        )
        .unwrap();
        let mut pairs: Vec<(i64, i64)> = raw.into_iter().zip(norm).collect();
        pairs.sort();
        assert_eq!(pairs, [(0, 0), (10, 25), (40, 100)]);
        let (raw, _) = scores(&pl, pod("p"), vec![node("added").label("pool", "batch")]).unwrap();
        assert_eq!(raw, [10], "added terms alone still score");
    }

    #[test]
    fn all_zero_scores_stay_zero() {
        let pl = NodeAffinity::default();
        let p = preferred(
            "    - {weight: 4, preference: {matchExpressions: [{key: zone, operator: In, values: [a]}]}}\n",
        );
        assert_eq!(
            scores(&pl, p, vec![node("n1"), node("n2")]),
            Some((vec![0, 0], vec![0, 0]))
        );
    }
}
