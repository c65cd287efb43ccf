//! ZonePolicy: an organisation's data-residency and locality rules, held by the scheduler
//! rather than written into every workload.
//!
//! Each rule selects pods (by namespace name, namespace labels and pod labels; a selector left
//! out selects everything) and says where they must or should run:
//!
//! - `required`: zones and/or regions; a node must be in one of the zones (label
//!   `topology.kubernetes.io/zone`) and one of the regions (`topology.kubernetes.io/region`)
//!   listed, the beta `failure-domain.beta.kubernetes.io/*` labels standing in when the GA
//!   ones are absent. Every matching rule's requirement must hold. A node that fails is
//!   UnschedulableAndUnresolvable: evicting pods cannot move it.
//! - `preferred`: weighted terms (1..=100) of the same shape; a node scores the sum of the
//!   weights of the terms it satisfies over every matching rule, normalized to `0..=100` as
//!   kube-scheduler normalizes preferred node affinity.
//!
//! Pods no rule selects are left alone (both extension points skip).

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use serde::Deserialize;

use crate::cache::{NodeInfo, REGION_LABEL, Snapshot, Tracked, ZONE_LABEL};
use crate::framework::{
    ArgsError, ClusterEvent, CycleState, EventHint, FilterPlugin, MAX_NODE_SCORE, NodeScore,
    Plugin, PluginArgs, PluginSpec, PreFilterPlugin, PreFilterResult, PreScorePlugin, ScorePlugin,
    Status, decode_args, default_normalize_score,
};
use crate::model::selector::LabelSelector;
use crate::model::{Labels, PodInfo};

/// The plugin's name in configuration files.
pub const NAME: &str = "ZonePolicy";

/// Reason for a node outside the zones or regions a matching rule requires.
pub const ERR_REASON: &str = "node(s) didn't match the zone policy";

const BETA_ZONE_LABEL: &str = "failure-domain.beta.kubernetes.io/zone";
const BETA_REGION_LABEL: &str = "failure-domain.beta.kubernetes.io/region";

/// Zones and regions a node may be in; an empty list does not constrain.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct ZonePlacement {
    /// Allowed zones.
    pub zones: Vec<String>,
    /// Allowed regions.
    pub regions: Vec<String>,
}

/// A preferred placement and its weight.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct WeightedZonePlacement {
    /// 1..=100.
    pub weight: i32,
    /// Preferred zones.
    pub zones: Vec<String>,
    /// Preferred regions.
    pub regions: Vec<String>,
}

/// One rule: which pods, and where they must or should run.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct ZoneRule {
    /// A name for people reading the configuration.
    pub name: String,
    /// Namespaces the rule applies to; all when empty.
    pub namespaces: Vec<String>,
    /// Namespaces by their labels; all when absent.
    pub namespace_selector: Option<meta::LabelSelector>,
    /// Pods by their labels; all when absent.
    pub pod_selector: Option<meta::LabelSelector>,
    /// Where the pods must run.
    pub required: Option<ZonePlacement>,
    /// Where they should run, by weight.
    pub preferred: Vec<WeightedZonePlacement>,
}

/// `ZonePolicyArgs`.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct ZonePolicyArgs {
    /// The rules.
    pub rules: Vec<ZoneRule>,
}

impl PluginArgs for ZonePolicyArgs {
    const KIND: &'static str = "ZonePolicyArgs";

    fn validate(&self) -> Result<(), ArgsError> {
        ZonePolicy::new(self).map(|_| ())
    }
}

/// Zones and regions, compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Placement {
    zones: Vec<String>,
    regions: Vec<String>,
}

impl Placement {
    fn compile(zones: &[String], regions: &[String], field: &str) -> Result<Self, ArgsError> {
        if zones.is_empty() && regions.is_empty() {
            return Err(ArgsError::new(
                field,
                "Required value: at least one zone or region",
            ));
        }
        for (list, name) in [(zones, "zones"), (regions, "regions")] {
            if let Some(i) = list.iter().position(String::is_empty) {
                return Err(ArgsError::new(
                    format!("{field}.{name}[{i}]"),
                    "Required value: must not be empty",
                ));
            }
        }
        Ok(Placement {
            zones: zones.to_vec(),
            regions: regions.to_vec(),
        })
    }

    /// True for a node in `zone` and `region` (either may be unknown).
    fn holds(&self, zone: Option<&str>, region: Option<&str>) -> bool {
        let within = |list: &[String], value: Option<&str>| {
            list.is_empty() || value.is_some_and(|v| list.iter().any(|x| x == v))
        };
        within(&self.zones, zone) && within(&self.regions, region)
    }
}

/// A rule, compiled.
#[derive(Debug, Clone)]
struct Rule {
    namespaces: Vec<String>,
    namespace_selector: Option<LabelSelector>,
    pod_selector: Option<LabelSelector>,
    required: Option<Placement>,
    preferred: Vec<(i64, Placement)>,
}

impl Rule {
    fn matches(&self, pod: &PodInfo, namespace_labels: &Labels) -> bool {
        (self.namespaces.is_empty() || self.namespaces.contains(&pod.namespace))
            && self
                .namespace_selector
                .as_ref()
                .is_none_or(|s| s.matches(namespace_labels))
            && self
                .pod_selector
                .as_ref()
                .is_none_or(|s| s.matches(&pod.labels))
    }
}

/// The ZonePolicy plugin.
#[derive(Debug, Clone)]
pub struct ZonePolicy {
    rules: Vec<Rule>,
}

/// The plugin for the registry; not in kube-scheduler's default profile (a profile enables it).
pub const SPEC: PluginSpec = PluginSpec {
    name: NAME,
    factory,
    default: None,
    args: Some(crate::framework::resolved_args::<ZonePolicyArgs>),
};

/// Builds the plugin from its `ZonePolicyArgs`.
pub fn factory(args: Option<&serde_json::Value>) -> Result<Arc<dyn Plugin>, ArgsError> {
    let args = decode_args::<ZonePolicyArgs>(args)?;
    Ok(Arc::new(ZonePolicy::new(&args)?))
}

fn selector(
    s: Option<&meta::LabelSelector>,
    field: &str,
) -> Result<Option<LabelSelector>, ArgsError> {
    s.map(|s| LabelSelector::compile(Some(s), field).map_err(|e| ArgsError::new(e.field, e.reason)))
        .transpose()
}

impl ZonePolicy {
    /// Checks and compiles the rules; an error names the field.
    pub fn new(args: &ZonePolicyArgs) -> Result<Self, ArgsError> {
        let mut rules = Vec::with_capacity(args.rules.len());
        for (i, r) in args.rules.iter().enumerate() {
            let field = format!("rules[{i}]");
            if r.required.is_none() && r.preferred.is_empty() {
                return Err(ArgsError::new(
                    field,
                    "Required value: a rule needs required or preferred placement",
                ));
            }
            let required = r
                .required
                .as_ref()
                .map(|p| Placement::compile(&p.zones, &p.regions, &format!("{field}.required")))
                .transpose()?;
            let mut preferred = Vec::with_capacity(r.preferred.len());
            for (j, p) in r.preferred.iter().enumerate() {
                let f = format!("{field}.preferred[{j}]");
                if !(1..=100).contains(&p.weight) {
                    return Err(ArgsError::new(
                        format!("{f}.weight"),
                        format!("Invalid value: {}: must be in the range 1-100", p.weight),
                    ));
                }
                preferred.push((
                    i64::from(p.weight),
                    Placement::compile(&p.zones, &p.regions, &f)?,
                ));
            }
            rules.push(Rule {
                namespaces: r.namespaces.clone(),
                namespace_selector: selector(
                    r.namespace_selector.as_ref(),
                    &format!("{field}.namespaceSelector"),
                )?,
                pod_selector: selector(r.pod_selector.as_ref(), &format!("{field}.podSelector"))?,
                required,
                preferred,
            });
        }
        Ok(ZonePolicy { rules })
    }

    /// Indexes of the rules that select the pod and have what `has` looks for.
    fn matching(&self, pod: &PodInfo, snapshot: &Snapshot, has: fn(&Rule) -> bool) -> Vec<usize> {
        let ns_labels = snapshot.namespace_labels(&pod.namespace);
        self.rules
            .iter()
            .enumerate()
            .filter(|(_, r)| has(r) && r.matches(pod, ns_labels))
            .map(|(i, _)| i)
            .collect()
    }
}

/// The node's zone and region, GA labels first.
fn zone_and_region(node: &NodeInfo) -> (Option<&str>, Option<&str>) {
    let labels = &node.node.labels;
    (
        labels
            .get(ZONE_LABEL)
            .or_else(|| labels.get(BETA_ZONE_LABEL)),
        labels
            .get(REGION_LABEL)
            .or_else(|| labels.get(BETA_REGION_LABEL)),
    )
}

/// Rules whose requirement applies to this cycle's pod.
#[derive(Debug, Clone)]
struct RequiredRules(Vec<usize>);

/// Rules whose preferences apply to this cycle's pod.
#[derive(Debug, Clone)]
struct PreferredRules(Vec<usize>);

/// A node's zone and region are its labels; a rule selects pods by their namespace's labels.
const EVENTS: [EventHint; 3] = [
    EventHint::any(ClusterEvent::NodeAdd),
    EventHint::any(ClusterEvent::NodeUpdate),
    EventHint::any(ClusterEvent::Other),
];

impl Plugin for ZonePolicy {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [EventHint] {
        &EVENTS
    }
    fn cache_state(&self) -> &'static [Tracked] {
        &[Tracked::NamespaceLabels]
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

impl PreFilterPlugin for ZonePolicy {
    /// Finds the rules requiring something of this pod; skips when there are none.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let required = self.matching(pod, snapshot, |r| r.required.is_some());
        if required.is_empty() {
            return (PreFilterResult::default(), Status::skip());
        }
        state.insert(RequiredRules(required));
        (PreFilterResult::default(), Status::success())
    }
}

impl FilterPlugin for ZonePolicy {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(RequiredRules(rules)) = state.get::<RequiredRules>() else {
            return Status::error(
                "error reading \"PreFilterZonePolicy\" from cycleState: not found",
            );
        };
        let (zone, region) = zone_and_region(node);
        let holds = rules.iter().all(|&i| {
            self.rules[i]
                .required
                .as_ref()
                .is_none_or(|p| p.holds(zone, region))
        });
        if holds {
            Status::success()
        } else {
            Status::unresolvable(ERR_REASON)
        }
    }
}

impl PreScorePlugin for ZonePolicy {
    /// Finds the rules with preferences for this pod; skips when there are none.
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        _feasible: &[&NodeInfo],
    ) -> Status {
        let preferred = self.matching(pod, snapshot, |r| !r.preferred.is_empty());
        if preferred.is_empty() {
            return Status::skip();
        }
        state.insert(PreferredRules(preferred));
        Status::success()
    }
}

impl ScorePlugin for ZonePolicy {
    /// The sum of the weights of the preferred terms the node satisfies.
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(PreferredRules(rules)) = state.get::<PreferredRules>() else {
            return Err(Status::error(
                "error reading \"PreScoreZonePolicy\" from cycleState: not found",
            ));
        };
        let (zone, region) = zone_and_region(node);
        Ok(rules
            .iter()
            .flat_map(|&i| &self.rules[i].preferred)
            .filter(|(_, p)| p.holds(zone, region))
            .map(|(w, _)| w)
            .sum())
    }

    fn normalize(&self, _state: &CycleState, _pod: &PodInfo, scores: &mut [NodeScore]) -> Status {
        default_normalize_score(MAX_NODE_SCORE, false, scores);
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Cache;
    use crate::framework::Code;
    use crate::testing::{node, node_info, pod};

    fn plugin(args: serde_json::Value) -> ZonePolicy {
        ZonePolicy::new(&decode_args::<ZonePolicyArgs>(Some(&args)).expect("valid args"))
            .expect("compiles")
    }

    fn zoned(name: &str, region: &str, zone: &str) -> NodeInfo {
        let mut n = node(name).capacity("1", "1Gi");
        if !region.is_empty() {
            n = n.label(REGION_LABEL, region);
        }
        if !zone.is_empty() {
            n = n.label(ZONE_LABEL, zone);
        }
        node_info(n.build(), &[])
    }

    fn snapshot_with_namespace(name: &str, labels: &[(&str, &str)]) -> Snapshot {
        let mut cache = Cache::new();
        cache.set_namespace(name, labels.iter().copied().collect());
        let mut s = Snapshot::default();
        cache.update_snapshot(&mut s);
        s
    }

    fn filter(p: &ZonePolicy, pod: &PodInfo, snap: &Snapshot, info: &NodeInfo) -> Status {
        let mut state = CycleState::new();
        let (_, status) = p.pre_filter(&mut state, pod, snap);
        if status.is_skip() {
            return status;
        }
        p.filter(&state, pod, info)
    }

    fn scores(
        p: &ZonePolicy,
        pod: &PodInfo,
        snap: &Snapshot,
        nodes: &[NodeInfo],
    ) -> Option<Vec<i64>> {
        let mut state = CycleState::new();
        let refs: Vec<&NodeInfo> = nodes.iter().collect();
        if p.pre_score(&mut state, pod, snap, &refs).is_skip() {
            return None;
        }
        let mut out: Vec<NodeScore> = nodes
            .iter()
            .enumerate()
            .map(|(index, n)| NodeScore {
                index,
                score: p.score(&state, pod, n).expect("score"),
            })
            .collect();
        assert!(p.normalize(&state, pod, &mut out).is_success());
        Some(out.into_iter().map(|s| s.score).collect())
    }

    #[test]
    fn required_zones_and_regions_filter_matching_pods() {
        let p = plugin(serde_json::json!({"rules": [
            {"name": "eu-residency", "namespaces": ["payments"],
             "required": {"regions": ["eu-west"]}},
            {"podSelector": {"matchLabels": {"latency": "low"}},
             "required": {"zones": ["eu-west-1a", "us-east-1a"]}}
        ]}));
        let snap = Snapshot::default();
        let payments = pod("p").namespace("payments").build();
        let fast_payments = pod("f")
            .namespace("payments")
            .label("latency", "low")
            .build();
        let other = pod("o").namespace("web").build();
        let eu_a = zoned("a", "eu-west", "eu-west-1a");
        let eu_b = zoned("b", "eu-west", "eu-west-1b");
        let us_a = zoned("c", "us-east", "us-east-1a");
        let bare = zoned("d", "", "");
        assert!(filter(&p, &payments, &snap, &eu_a).is_success());
        assert!(filter(&p, &payments, &snap, &eu_b).is_success());
        let s = filter(&p, &payments, &snap, &us_a);
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(s.reasons(), [ERR_REASON]);
        // An unlabelled node is in no required zone or region.
        assert!(filter(&p, &payments, &snap, &bare).is_rejected());
        // Both rules hold at once.
        assert!(filter(&p, &fast_payments, &snap, &eu_a).is_success());
        assert!(filter(&p, &fast_payments, &snap, &eu_b).is_rejected());
        assert!(filter(&p, &fast_payments, &snap, &us_a).is_rejected());
        // Pods no rule selects: skipped.
        assert!(filter(&p, &other, &snap, &us_a).is_skip());
    }

    #[test]
    fn beta_labels_stand_in_for_missing_ga_labels() {
        let p = plugin(serde_json::json!({"rules": [
            {"required": {"zones": ["z1"], "regions": ["r1"]}}
        ]}));
        let beta = node_info(
            node("b")
                .label(BETA_ZONE_LABEL, "z1")
                .label(BETA_REGION_LABEL, "r1")
                .build(),
            &[],
        );
        let x = pod("x").build();
        assert!(filter(&p, &x, &Snapshot::default(), &beta).is_success());
        // The GA label wins over the beta one.
        let both = node_info(
            node("g")
                .label(BETA_ZONE_LABEL, "z1")
                .label(ZONE_LABEL, "z2")
                .label(REGION_LABEL, "r1")
                .build(),
            &[],
        );
        assert!(filter(&p, &x, &Snapshot::default(), &both).is_rejected());
    }

    #[test]
    fn namespace_selectors_use_namespace_labels() {
        let p = plugin(serde_json::json!({"rules": [
            {"namespaceSelector": {"matchLabels": {"residency": "eu"}},
             "required": {"regions": ["eu-west"]}}
        ]}));
        let snap = snapshot_with_namespace("shop", &[("residency", "eu")]);
        let us = zoned("u", "us-east", "us-east-1a");
        assert!(filter(&p, &pod("a").namespace("shop").build(), &snap, &us).is_rejected());
        assert!(filter(&p, &pod("b").namespace("blog").build(), &snap, &us).is_skip());
    }

    #[test]
    fn preferred_terms_add_up_and_normalize() {
        let p = plugin(serde_json::json!({"rules": [
            {"preferred": [
                {"weight": 60, "zones": ["z1"]},
                {"weight": 20, "regions": ["r1"]}
            ]},
            {"namespaces": ["other"], "preferred": [{"weight": 100, "zones": ["z2"]}]}
        ]}));
        let nodes = [
            zoned("a", "r1", "z1"),
            zoned("b", "r1", "z2"),
            zoned("c", "r2", "z3"),
        ];
        let snap = Snapshot::default();
        // Raw 80, 20, 0 -> 100, 25, 0.
        assert_eq!(
            scores(&p, &pod("x").build(), &snap, &nodes),
            Some(vec![100, 25, 0])
        );
        // Both rules for a pod of namespace "other": 80, 120, 0 -> 66, 100, 0.
        assert_eq!(
            scores(&p, &pod("y").namespace("other").build(), &snap, &nodes),
            Some(vec![66, 100, 0])
        );
        // A policy with no preferences skips scoring.
        let required_only = plugin(serde_json::json!({"rules": [{"required": {"zones": ["z1"]}}]}));
        assert_eq!(
            scores(&required_only, &pod("x").build(), &snap, &nodes),
            None
        );
        // No node satisfies anything: all 0.
        let none =
            plugin(serde_json::json!({"rules": [{"preferred": [{"weight": 5, "zones": ["zz"]}]}]}));
        assert_eq!(
            scores(&none, &pod("x").build(), &snap, &nodes),
            Some(vec![0, 0, 0])
        );
    }

    #[test]
    fn invalid_rules_name_the_field() {
        let err = |v: serde_json::Value| decode_args::<ZonePolicyArgs>(Some(&v)).unwrap_err();
        let e = err(serde_json::json!({"rules": [{"name": "empty"}]}));
        assert_eq!(
            (e.field.as_str(), e.reason.as_str()),
            (
                "rules[0]",
                "Required value: a rule needs required or preferred placement"
            )
        );
        let e = err(serde_json::json!({"rules": [{"required": {}}]}));
        assert_eq!(e.field, "rules[0].required");
        let e = err(serde_json::json!({"rules": [{"required": {"zones": [""]}}]}));
        assert_eq!(e.field, "rules[0].required.zones[0]");
        let e = err(serde_json::json!({"rules": [
            {"required": {"zones": ["a"]}},
            {"preferred": [{"weight": 1, "zones": ["a"]}, {"weight": 101, "zones": ["b"]}]}
        ]}));
        assert_eq!(
            (e.field.as_str(), e.reason.as_str()),
            (
                "rules[1].preferred[1].weight",
                "Invalid value: 101: must be in the range 1-100"
            )
        );
        assert_eq!(
            err(serde_json::json!({"rules": [{"preferred": [{"weight": 0, "zones": ["a"]}]}]}))
                .field,
            "rules[0].preferred[0].weight"
        );
        assert_eq!(
            err(serde_json::json!({"rules": [{"preferred": [{"weight": 3}]}]})).field,
            "rules[0].preferred[0]"
        );
        let e = err(serde_json::json!({"rules": [{"required": {"zones": ["a"]},
            "podSelector": {"matchExpressions": [{"key": "k", "operator": "In"}]}}]}));
        assert_eq!(e.field, "rules[0].podSelector.matchExpressions[0]");
        let e = err(serde_json::json!({"rules": [{"required": {"zones": ["a"]}, "zone": "x"}]}));
        assert_eq!(e.field, "rules[0].zone");
        // No rules at all is a valid (idle) policy.
        assert!(decode_args::<ZonePolicyArgs>(None).is_ok());
    }
}
