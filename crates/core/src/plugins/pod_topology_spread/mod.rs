//! PodTopologySpread: spreads matching pods evenly across topology domains (zones, nodes, any
//! node label). Hard constraints (`DoNotSchedule`) filter nodes whose domain would exceed the
//! allowed skew; soft ones (`ScheduleAnyway`) score nodes so that the least crowded domains
//! win. A pod without constraints of its own gets the configured default constraints, which
//! spread it among the pods of the Services and controller that select it.

mod filtering;
mod scoring;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use serde::Deserialize;

use crate::cache::{PodList, Snapshot, Tracked, ZONE_LABEL};
use crate::framework::{
    ArgsError, DefaultPlace, EventHint, FilterPlugin, POD_AND_NODE_CHANGES, Plugin, PluginArgs,
    PluginSpec, PreFilterPlugin, PreScorePlugin, ScorePlugin, decode_args,
};
use crate::model::labels::validate_qualified_name;
use crate::model::pod::{InclusionPolicy, TopologySpreadConstraint, WhenUnsatisfiable};
use crate::model::selector::LabelSelector;
use crate::model::taint::{TaintEffect, find_untolerated};
use crate::model::{NodeModel, PodInfo};

/// The name configuration files use.
pub const NAME: &str = "PodTopologySpread";

/// Rejection when placing the pod on the node would exceed a constraint's `maxSkew`.
pub const ERR_REASON_CONSTRAINTS_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints";

/// Rejection when the node lacks the label of a hard constraint's `topologyKey`.
pub const ERR_REASON_NODE_LABEL_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";

/// The node label kube-scheduler treats specially: one domain per node, so soft counts are
/// taken per node at Score time instead of per domain at PreScore.
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// Where the default constraints come from.
#[derive(Debug, Clone, Copy, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
pub enum DefaultingType {
    /// kube-scheduler's built-in defaults: spread by hostname (maxSkew 3) and zone (maxSkew 5),
    /// both `ScheduleAnyway`. An empty string means this too, as in kube-scheduler's v1 API.
    #[default]
    #[serde(alias = "")]
    System,
    /// `defaultConstraints` from the arguments.
    List,
}

/// One default constraint: a `v1.TopologySpreadConstraint` whose selector is deduced for each
/// pod, so it must not set `labelSelector`.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct DefaultConstraint {
    /// Largest allowed difference between domains' matching pod counts; must be positive.
    pub max_skew: i32,
    /// The node label that defines the domains.
    pub topology_key: String,
    /// `DoNotSchedule` or `ScheduleAnyway`.
    pub when_unsatisfiable: String,
    /// Forbidden here; accepted by the decoder only so validation can name it.
    pub label_selector: Option<meta::LabelSelector>,
    /// Minimum number of eligible domains for a hard constraint.
    pub min_domains: Option<i32>,
    /// `Honor` (default) or `Ignore`.
    pub node_affinity_policy: Option<String>,
    /// `Honor` or `Ignore` (default).
    pub node_taints_policy: Option<String>,
    /// Accepted for compatibility; unused, since the deduced selector replaces the selector.
    pub match_label_keys: Vec<String>,
}

/// kube-scheduler's `PodTopologySpreadArgs` (v1).
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct PodTopologySpreadArgs {
    /// Constraints for pods that set none; only with `defaultingType: List`.
    pub default_constraints: Vec<DefaultConstraint>,
    /// Where the default constraints come from (default `System`).
    pub defaulting_type: DefaultingType,
}

impl PluginArgs for PodTopologySpreadArgs {
    const KIND: &'static str = "PodTopologySpreadArgs";

    /// kube-scheduler's checks, in its order; the first failure is reported.
    fn validate(&self) -> Result<(), ArgsError> {
        if self.defaulting_type == DefaultingType::System && !self.default_constraints.is_empty() {
            return Err(ArgsError::new(
                "defaultingType",
                "Invalid value: \"System\": when .defaultConstraints are not empty",
            ));
        }
        for (i, c) in self.default_constraints.iter().enumerate() {
            let field = |f: &str| format!("defaultConstraints[{i}].{f}");
            if c.max_skew <= 0 {
                return Err(ArgsError::new(
                    field("maxSkew"),
                    format!("Invalid value: {}: not in valid range (0, inf)", c.max_skew),
                ));
            }
            if c.topology_key.is_empty() {
                return Err(ArgsError::new(
                    field("topologyKey"),
                    "Required value: can not be empty",
                ));
            }
            validate_qualified_name(&c.topology_key).map_err(|reason| {
                ArgsError::new(
                    field("topologyKey"),
                    format!("Invalid value: {:?}: {reason}", c.topology_key),
                )
            })?;
            match c.when_unsatisfiable.as_str() {
                "DoNotSchedule" | "ScheduleAnyway" => {}
                "" => {
                    return Err(ArgsError::new(
                        field("whenUnsatisfiable"),
                        "Required value: can not be empty",
                    ));
                }
                other => {
                    return Err(ArgsError::new(
                        field("whenUnsatisfiable"),
                        format!(
                            "Unsupported value: {other:?}: supported values: \"DoNotSchedule\", \"ScheduleAnyway\""
                        ),
                    ));
                }
            }
            // As the API server checks a pod's own constraints (kube-scheduler leaves the
            // defaults unchecked): a minimum of no domain means nothing.
            if let Some(m) = c.min_domains
                && m <= 0
            {
                return Err(ArgsError::new(
                    field("minDomains"),
                    format!("Invalid value: {m}: must be greater than zero"),
                ));
            }
            if c.label_selector.is_some() {
                return Err(ArgsError::new(
                    field("labelSelector"),
                    "Forbidden: constraint must not define a selector, as they deduced for each pod",
                ));
            }
            for (name, value) in [
                ("nodeAffinityPolicy", &c.node_affinity_policy),
                ("nodeTaintsPolicy", &c.node_taints_policy),
            ] {
                if let Some(v) = value
                    && v != "Honor"
                    && v != "Ignore"
                {
                    return Err(ArgsError::new(
                        field(name),
                        format!(
                            "Unsupported value: {v:?}: supported values: \"Honor\", \"Ignore\""
                        ),
                    ));
                }
            }
            if self.default_constraints[..i].iter().any(|o| {
                o.topology_key == c.topology_key && o.when_unsatisfiable == c.when_unsatisfiable
            }) {
                return Err(ArgsError::new(
                    format!("defaultConstraints[{i}]"),
                    format!(
                        "Duplicate value: \"{{{}, {}}}\"",
                        c.topology_key, c.when_unsatisfiable
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The plugin: the default constraints (selectors left to be deduced per pod), and whether
/// they are the system defaults, which relax the soft constraints' label requirement.
#[derive(Debug, Clone)]
pub struct PodTopologySpread {
    defaults: Vec<TopologySpreadConstraint>,
    system_defaulted: bool,
}

impl PodTopologySpread {
    /// Builds the plugin, validating the arguments first.
    pub fn new(args: &PodTopologySpreadArgs) -> Result<Self, ArgsError> {
        args.validate()?;
        let defaults = match args.defaulting_type {
            DefaultingType::System => vec![
                system_default(3, HOSTNAME_LABEL),
                system_default(5, ZONE_LABEL),
            ],
            DefaultingType::List => args
                .default_constraints
                .iter()
                .map(|c| TopologySpreadConstraint {
                    max_skew: c.max_skew,
                    topology_key: c.topology_key.clone(),
                    when_unsatisfiable: if c.when_unsatisfiable == "DoNotSchedule" {
                        WhenUnsatisfiable::DoNotSchedule
                    } else {
                        WhenUnsatisfiable::ScheduleAnyway
                    },
                    selector: LabelSelector::nothing(),
                    min_domains: c.min_domains,
                    node_affinity_policy: policy(
                        c.node_affinity_policy.as_deref(),
                        InclusionPolicy::Honor,
                    ),
                    node_taints_policy: policy(
                        c.node_taints_policy.as_deref(),
                        InclusionPolicy::Ignore,
                    ),
                })
                .collect(),
        };
        Ok(PodTopologySpread {
            defaults,
            system_defaulted: args.defaulting_type == DefaultingType::System,
        })
    }

    /// The pod's constraints of one kind, each with the selector to count pods by. A pod that
    /// sets any constraint of its own gets no defaults, of either kind. Defaults need the
    /// pod's deduced selector (Services and controller); without one, or with an empty one,
    /// there are none.
    fn constraints<'a>(
        &'a self,
        pod: &'a PodInfo,
        snapshot: &Snapshot,
        when: WhenUnsatisfiable,
    ) -> Vec<Constraint<'a>> {
        if !pod.topology_spread.is_empty() {
            return pod
                .topology_spread
                .iter()
                .filter(|c| c.when_unsatisfiable == when)
                .map(|c| Constraint {
                    spec: c,
                    selector: Cow::Borrowed(&c.selector),
                })
                .collect();
        }
        if !self.defaults.iter().any(|c| c.when_unsatisfiable == when) {
            return Vec::new();
        }
        let Some(selector) = snapshot
            .workloads()
            .default_selector(pod)
            .filter(|s| !s.is_everything())
        else {
            return Vec::new();
        };
        self.defaults
            .iter()
            .filter(|c| c.when_unsatisfiable == when)
            .map(|c| Constraint {
                spec: c,
                selector: Cow::Owned(selector.clone()),
            })
            .collect()
    }
}

fn system_default(max_skew: i32, key: &str) -> TopologySpreadConstraint {
    TopologySpreadConstraint {
        max_skew,
        topology_key: key.to_string(),
        when_unsatisfiable: WhenUnsatisfiable::ScheduleAnyway,
        selector: LabelSelector::nothing(),
        min_domains: None,
        node_affinity_policy: InclusionPolicy::Honor,
        node_taints_policy: InclusionPolicy::Ignore,
    }
}

fn policy(value: Option<&str>, default: InclusionPolicy) -> InclusionPolicy {
    match value {
        Some("Honor") => InclusionPolicy::Honor,
        Some("Ignore") => InclusionPolicy::Ignore,
        _ => default,
    }
}

/// A constraint in force for this cycle and the selector its pods are counted by.
struct Constraint<'a> {
    spec: &'a TopologySpreadConstraint,
    selector: Cow<'a, LabelSelector>,
}

/// Whether one node counts for a constraint under its node inclusion policies. The pod's
/// required node affinity and its toleration of the node's taints are each evaluated at most
/// once per node, however many constraints ask.
struct Inclusion<'a> {
    pod: &'a PodInfo,
    node: &'a NodeModel,
    affinity: Option<bool>,
    taints: Option<bool>,
}

impl<'a> Inclusion<'a> {
    fn new(pod: &'a PodInfo, node: &'a NodeModel) -> Self {
        Inclusion {
            pod,
            node,
            affinity: None,
            taints: None,
        }
    }

    /// True when every node passes the policies for `pod`: it has no node selector or
    /// required node affinity to honour, and taints are ignored.
    fn admits_every_node(
        pod: &PodInfo,
        affinity: InclusionPolicy,
        taints: InclusionPolicy,
    ) -> bool {
        let no_affinity = pod.node_selector.is_empty() && pod.required_node_affinity.is_none();
        (affinity == InclusionPolicy::Ignore || no_affinity) && taints == InclusionPolicy::Ignore
    }

    /// True when the node passes the policies: with `Honor`, the pod's nodeSelector and
    /// required node affinity must match it, and the pod must tolerate its `NoSchedule` and
    /// `NoExecute` taints (the rules of TaintToleration's filter).
    fn admits(&mut self, affinity: InclusionPolicy, taints: InclusionPolicy) -> bool {
        let (pod, node) = (self.pod, self.node);
        if affinity == InclusionPolicy::Honor
            && !*self.affinity.get_or_insert_with(|| {
                pod.node_selector
                    .iter()
                    .all(|(k, v)| node.labels.get(k) == Some(v))
                    && pod
                        .required_node_affinity
                        .as_ref()
                        .is_none_or(|s| s.matches(&node.name, &node.labels))
            })
        {
            return false;
        }
        taints == InclusionPolicy::Ignore
            || *self.taints.get_or_insert_with(|| {
                find_untolerated(&node.taints, &pod.tolerations, |t| {
                    matches!(t.effect, TaintEffect::NoSchedule | TaintEffect::NoExecute)
                })
                .is_none()
            })
    }
}

/// True when the node has every constraint's topology label.
fn has_all_keys<'c>(node: &NodeModel, mut keys: impl Iterator<Item = &'c str>) -> bool {
    keys.all(|k| node.labels.contains_key(k))
}

/// Pods on a node that a constraint counts: not terminating, matching the selector, and in
/// the incoming pod's namespace. The selector is checked before the namespace: it rejects
/// more pods of the same namespace, and either rejects most pods of another one.
fn count_matching(pods: &PodList, selector: &LabelSelector, namespace: &str) -> i64 {
    if selector.is_nothing() {
        return 0;
    }
    pods.iter()
        .filter(|p| !p.terminating && selector.matches(&p.labels) && p.namespace == namespace)
        .count() as i64
}

impl Plugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [EventHint] {
        &POD_AND_NODE_CHANGES
    }
    fn cache_state(&self) -> &'static [Tracked] {
        &[Tracked::PodLabels, Tracked::Workloads]
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

/// The plugin for the registry, with its place in kube-scheduler's default profile.
pub const SPEC: PluginSpec = PluginSpec {
    name: NAME,
    factory,
    default: Some(DefaultPlace {
        order: 90,
        weight: Some(2),
    }),
    args: Some(crate::framework::resolved_args::<PodTopologySpreadArgs>),
};

/// Builds the plugin from its (optional) `PodTopologySpreadArgs`.
pub fn factory(args: Option<&serde_json::Value>) -> Result<Arc<dyn Plugin>, ArgsError> {
    let args = decode_args::<PodTopologySpreadArgs>(args)?;
    Ok(Arc::new(PodTopologySpread::new(&args)?))
}
