//! "Which single change would have let it fit": from an unschedulable pod's per-node
//! statuses, the node that lacks the least of some resources (and nothing else), and the
//! nodes that one plugin alone rejects. Pure: it reads the snapshot the cycle ran against and
//! re-runs the profile's own PreFilter and Filter plugins to check that nothing else stands in
//! the way.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::cache::{NodeInfo, Snapshot};
use crate::cycle::Diagnosis;
use crate::framework::{Code, CycleState, Profile};
use crate::model::PodInfo;
use crate::model::resources::{CPU, EPHEMERAL_STORAGE, MEMORY, PODS};
use crate::plugins::node_resources_fit::{self, INSUFFICIENT_PREFIX, TOO_MANY_PODS};
use crate::plugins::taint_toleration;

/// Most nodes of one kind whose other filters are checked before giving up on that kind:
/// bounds the work on a large cluster where every candidate fails something else.
const MAX_CHECKS: usize = 16;
/// Most suggestions one attempt reports.
pub const MAX_SUGGESTIONS: usize = 4;

/// One change that would let the pod fit one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Suggestion {
    /// The node lacks only resources: with this much more of each it would fit.
    #[serde(rename_all = "camelCase")]
    MoreResources {
        /// The node.
        #[serde(with = "crate::model::arc_str")]
        node: Arc<str>,
        /// What it lacks, per resource.
        shortfalls: Vec<Shortfall>,
    },
    /// One plugin alone rejects the node: every other filter accepts it.
    #[serde(rename_all = "camelCase")]
    OnlyPlugin {
        /// The node.
        #[serde(with = "crate::model::arc_str")]
        node: Arc<str>,
        /// The plugin.
        plugin: Cow<'static, str>,
        /// Its reasons, as it worded them.
        reasons: Vec<Cow<'static, str>>,
    },
}

/// How much of one resource a node lacks for the pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Shortfall {
    /// The resource (`cpu`, `memory`, `pods`, `nvidia.com/gpu`, ...).
    pub resource: Cow<'static, str>,
    /// The amount missing, in the resource's base unit: millicores for cpu, bytes for memory
    /// and storage, a count for pods and extended resources.
    pub amount: i64,
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &*self.resource {
            CPU => write!(f, "{} more cpu", format_milli(self.amount)),
            PODS if self.amount == 1 => f.write_str("room for 1 more pod"),
            PODS => write!(f, "room for {} more pods", self.amount),
            r if is_bytes(r) => write!(f, "{} more {r}", format_bytes(self.amount)),
            r => write!(f, "{} more {r}", self.amount),
        }
    }
}

impl fmt::Display for Suggestion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Suggestion::MoreResources { node, shortfalls } => {
                write!(f, "{node} would fit with ")?;
                for (i, s) in shortfalls.iter().enumerate() {
                    if i > 0 {
                        f.write_str(" and ")?;
                    }
                    write!(f, "{s}")?;
                }
                Ok(())
            }
            Suggestion::OnlyPlugin {
                node,
                plugin,
                reasons,
            } => write!(
                f,
                "{node} is rejected only by {plugin}: {}",
                reasons.join(", ")
            ),
        }
    }
}

/// True for resources counted in bytes.
fn is_bytes(resource: &str) -> bool {
    resource == MEMORY || resource == EPHEMERAL_STORAGE || resource.starts_with("hugepages-")
}

/// Millicores as a Kubernetes quantity: `200m`, `2`.
pub fn format_milli(milli: i64) -> String {
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

/// Bytes as a Kubernetes quantity, rounded up to a whole `Mi` from 1Mi on so that the amount
/// stays sufficient: `512Mi`, `2Gi`, `100Ki`, `10`.
pub fn format_bytes(bytes: i64) -> String {
    const KI: i64 = 1024;
    const MI: i64 = 1024 * KI;
    const GI: i64 = 1024 * MI;
    if bytes > 0 && bytes % GI == 0 {
        format!("{}Gi", bytes / GI)
    } else if bytes >= MI {
        format!("{}Mi", (bytes + MI - 1) / MI)
    } else if bytes > 0 && bytes % KI == 0 {
        format!("{}Ki", bytes / KI)
    } else {
        bytes.to_string()
    }
}

/// What `node` lacks for `pod`, one entry per resource reason of NodeResourcesFit (`Too many
/// pods`, `Insufficient cpu`, ...); `None` when some reason is not about a resource or the
/// node has in fact room for it (a shortfall another plugin took over).
pub fn shortfalls(
    pod: &PodInfo,
    node: &NodeInfo,
    reasons: &[Cow<'static, str>],
) -> Option<Vec<Shortfall>> {
    let allocatable = &node.node.allocatable;
    let mut out = Vec::with_capacity(reasons.len());
    for reason in reasons {
        let (resource, amount) = if reason == TOO_MANY_PODS {
            (
                Cow::Borrowed(PODS),
                node.pods.len() as i64 + 1 - allocatable.allowed_pods,
            )
        } else {
            let name = reason.strip_prefix(INSUFFICIENT_PREFIX)?;
            let free = allocatable.get(name) - node.requested.get(name);
            let resource = match name {
                CPU => Cow::Borrowed(CPU),
                MEMORY => Cow::Borrowed(MEMORY),
                EPHEMERAL_STORAGE => Cow::Borrowed(EPHEMERAL_STORAGE),
                other => Cow::Owned(other.to_string()),
            };
            (resource, pod.requests.get(name) - free)
        };
        if amount <= 0 {
            return None;
        }
        out.push(Shortfall { resource, amount });
    }
    (!out.is_empty()).then_some(out)
}

/// How far a node is from fitting: fewer resources short first, then the smaller share of the
/// node's allocatable amounts missing.
fn distance(node: &NodeInfo, shortfalls: &[Shortfall]) -> (usize, f64) {
    let share: f64 = shortfalls
        .iter()
        .map(|s| s.amount as f64 / node.node.allocatable.get(&s.resource).max(1) as f64)
        .sum();
    (shortfalls.len(), share)
}

/// The single changes that would let `pod` fit, computed from the statuses of `diagnosis`
/// (the failed cycle of `pod` against `snapshot` under `profile`): the resource-short node
/// closest to fitting, then one node per plugin that alone rejects some nodes (the plugins
/// rejecting most nodes first), each checked against the profile's other filters. Empty when
/// no single change can be computed: PreFilter rejected the pod outright, or every rejected
/// node fails more than one filter.
pub fn suggest(
    profile: &Profile,
    snapshot: &Snapshot,
    pod: &PodInfo,
    diagnosis: &Diagnosis,
) -> Vec<Suggestion> {
    if diagnosis.pre_filter_msg.is_some() || diagnosis.node_statuses.is_empty() {
        return Vec::new();
    }
    let Some(checker) = FilterChecker::new(profile, snapshot, pod) else {
        return Vec::new();
    };
    let mut out = Vec::new();

    // Nodes short of resources only, closest first.
    let mut short: Vec<ShortNode<'_>> = Vec::new();
    // Nodes rejected by another plugin, per plugin.
    let mut others: Vec<(&'static str, Vec<usize>)> = Vec::new();
    for (i, (name, status)) in diagnosis.node_statuses.iter().enumerate() {
        let Some(plugin) = status.plugin() else {
            continue;
        };
        if plugin == node_resources_fit::NAME {
            let Some(node) = snapshot.get(name) else {
                continue;
            };
            if let Some(shortfalls) = shortfalls(pod, node, status.reasons()) {
                let (count, share) = distance(node, &shortfalls);
                short.push(ShortNode {
                    count,
                    share,
                    node: name,
                    shortfalls,
                });
            }
        } else {
            match others.iter_mut().find(|(p, _)| *p == plugin) {
                Some((_, nodes)) => nodes.push(i),
                None => others.push((plugin, vec![i])),
            }
        }
    }
    smallest_sorted(&mut short, MAX_CHECKS, |a, b| {
        a.count
            .cmp(&b.count)
            .then_with(|| a.share.total_cmp(&b.share))
            .then_with(|| a.node.cmp(b.node))
    });
    if let Some(best) = short
        .into_iter()
        .find(|s| checker.only_rejected_by(s.node, node_resources_fit::NAME))
    {
        out.push(Suggestion::MoreResources {
            node: best.node.clone(),
            shortfalls: best.shortfalls,
        });
    }

    others.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(b.0)));
    for (plugin, mut nodes) in others {
        if out.len() >= MAX_SUGGESTIONS {
            break;
        }
        smallest_sorted(&mut nodes, MAX_CHECKS, |&a, &b| {
            diagnosis.node_statuses[a]
                .0
                .cmp(&diagnosis.node_statuses[b].0)
        });
        let found = nodes
            .iter()
            .find(|&&i| checker.only_rejected_by(&diagnosis.node_statuses[i].0, plugin));
        if let Some(&i) = found {
            let (node, status) = &diagnosis.node_statuses[i];
            out.push(Suggestion::OnlyPlugin {
                node: node.clone(),
                plugin: Cow::Borrowed(plugin),
                reasons: detailed_reasons(snapshot, pod, node, plugin)
                    .unwrap_or_else(|| status.reasons().to_vec()),
            });
        }
    }
    out
}

/// What a plugin's reason leaves out and a person needs to change: the taint to tolerate,
/// where kube-scheduler's message says only that there is one.
fn detailed_reasons(
    snapshot: &Snapshot,
    pod: &PodInfo,
    node: &str,
    plugin: &str,
) -> Option<Vec<Cow<'static, str>>> {
    if plugin != taint_toleration::NAME {
        return None;
    }
    let taint = taint_toleration::first_untolerated(pod, snapshot.get(node)?)?;
    Some(vec![Cow::Owned(format!("untolerated taint {taint}"))])
}

/// Keeps the `n` first of `items` in `order`, sorted: a cluster has thousands of rejected
/// nodes, and only the first few are ever checked.
fn smallest_sorted<T>(items: &mut Vec<T>, n: usize, order: impl Fn(&T, &T) -> Ordering) {
    if items.len() > n {
        items.select_nth_unstable_by(n, &order);
        items.truncate(n);
    }
    items.sort_by(order);
}

/// A node that lacks only resources, with how far it is from fitting.
struct ShortNode<'a> {
    /// Resources short.
    count: usize,
    /// The sum of the shares of allocatable missing.
    share: f64,
    node: &'a Arc<str>,
    shortfalls: Vec<Shortfall>,
}

/// The profile's filters with a fresh PreFilter state for the pod.
struct FilterChecker<'a> {
    profile: &'a Profile,
    snapshot: &'a Snapshot,
    pod: &'a PodInfo,
    state: CycleState,
    skipped: Vec<&'static str>,
}

impl<'a> FilterChecker<'a> {
    /// Runs PreFilter as the cycle does; `None` if it no longer passes.
    fn new(profile: &'a Profile, snapshot: &'a Snapshot, pod: &'a PodInfo) -> Option<Self> {
        let mut state = CycleState::new();
        let mut skipped = Vec::new();
        for plugin in &profile.pre_filter {
            let Some(pf) = plugin.as_pre_filter() else {
                continue;
            };
            let (_, status) = pf.pre_filter(&mut state, pod, snapshot);
            match status.code() {
                Code::Success => {}
                Code::Skip => skipped.push(plugin.name()),
                _ => return None,
            }
        }
        Some(FilterChecker {
            profile,
            snapshot,
            pod,
            state,
            skipped,
        })
    }

    /// True when every filter after `plugin` accepts `node`. The cycle stops at the first
    /// filter that rejects a node, so the filters before `plugin` accepted it already.
    fn only_rejected_by(&self, node: &str, plugin: &str) -> bool {
        let Some(info) = self.snapshot.get(node) else {
            return false;
        };
        self.profile
            .filter
            .iter()
            .skip_while(|p| p.name() != plugin)
            .skip(1)
            .filter(|p| !self.skipped.contains(&p.name()))
            .filter_map(|p| p.as_filter())
            .all(|f| f.filter(&self.state, self.pod, info).is_success())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Cache;
    use crate::config::Config;
    use crate::cycle::{self, CycleError, CycleMemory, CycleOptions};
    use crate::plugins;
    use crate::testing::{node, pod};

    fn diagnose(cache: &mut Cache, pod: &PodInfo) -> (Profile, Snapshot, Diagnosis) {
        let config = Config::default_with(&plugins::registry()).expect("defaults");
        let profile = config.profiles[0].clone();
        let mut snapshot = Snapshot::default();
        cache.update_snapshot(&mut snapshot);
        let options = CycleOptions {
            pool: None,
            percentage_of_nodes_to_score: 0,
            top_scores: 0,
            nominated: None,
            waiting: None,
            preempt_extenders: false,
            preemption_running: false,
        };
        match cycle::schedule_one(
            &profile,
            &snapshot,
            pod,
            &mut CycleMemory::default(),
            &options,
        ) {
            Err(CycleError::Unschedulable(d)) => (profile, snapshot, d),
            other => panic!("expected unschedulable, got {other:?}"),
        }
    }

    fn texts(s: &[Suggestion]) -> Vec<String> {
        s.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn the_node_closest_to_fitting_is_named_with_its_shortfall() {
        let mut cache = Cache::new();
        cache.upsert_node(node("n1").capacity("1", "4Gi").build());
        cache.upsert_node(node("n2").capacity("1800m", "4Gi").build());
        cache.upsert_node(node("n3").capacity("4", "1Gi").build());
        let p = pod("a").req("cpu", "2").req("memory", "1536Mi").build();
        let (profile, snapshot, d) = diagnose(&mut cache, &p);
        assert_eq!(
            texts(&suggest(&profile, &snapshot, &p, &d)),
            vec!["n2 would fit with 200m more cpu"]
        );
    }

    #[test]
    fn a_node_short_of_two_resources_comes_after_one_short_of_one() {
        let mut cache = Cache::new();
        cache.upsert_node(node("n1").capacity("1", "1Gi").build());
        cache.upsert_node(node("n2").capacity("4", "1Gi").build());
        let p = pod("a").req("cpu", "2").req("memory", "1536Mi").build();
        let (profile, snapshot, d) = diagnose(&mut cache, &p);
        assert_eq!(
            texts(&suggest(&profile, &snapshot, &p, &d)),
            vec!["n2 would fit with 512Mi more memory"]
        );
        // Alone, the node short of both is named with both.
        let mut cache = Cache::new();
        cache.upsert_node(node("n1").capacity("1", "1Gi").build());
        let (profile, snapshot, d) = diagnose(&mut cache, &p);
        assert_eq!(
            texts(&suggest(&profile, &snapshot, &p, &d)),
            vec!["n1 would fit with 1 more cpu and 512Mi more memory"]
        );
    }

    #[test]
    fn a_full_node_needs_room_for_one_more_pod() {
        let mut cache = Cache::new();
        cache.upsert_node(node("n1").capacity("4", "4Gi").alloc("pods", "1").build());
        cache
            .add_bound_pod(pod("old").on("n1").build())
            .expect("bound");
        let p = pod("a").build();
        let (profile, snapshot, d) = diagnose(&mut cache, &p);
        assert_eq!(
            texts(&suggest(&profile, &snapshot, &p, &d)),
            vec!["n1 would fit with room for 1 more pod"]
        );
    }

    #[test]
    fn a_node_rejected_only_by_a_taint_is_named_with_the_plugin() {
        let mut cache = Cache::new();
        cache.upsert_node(node("n1").capacity("1", "4Gi").build());
        cache.upsert_node(
            node("n3")
                .capacity("4", "4Gi")
                .taint("dedicated", "gpu", "NoSchedule")
                .build(),
        );
        cache.upsert_node(
            node("n4")
                .capacity("4", "4Gi")
                .taint("dedicated", "gpu", "NoSchedule")
                .build(),
        );
        let p = pod("a").req("cpu", "2").build();
        let (profile, snapshot, d) = diagnose(&mut cache, &p);
        assert_eq!(
            texts(&suggest(&profile, &snapshot, &p, &d)),
            vec![
                "n1 would fit with 1 more cpu",
                "n3 is rejected only by TaintToleration: untolerated taint {dedicated: gpu}",
            ]
        );
    }

    #[test]
    fn a_later_filter_rejecting_the_node_too_rules_it_out() {
        let mut cache = Cache::new();
        // Tainted and too small: only the taint is reported, but fixing it is not enough.
        cache.upsert_node(
            node("n1")
                .capacity("1", "4Gi")
                .taint("dedicated", "gpu", "NoSchedule")
                .build(),
        );
        let p = pod("a").req("cpu", "2").build();
        let (profile, snapshot, d) = diagnose(&mut cache, &p);
        assert_eq!(d.node_statuses.len(), 1);
        assert_eq!(d.node_statuses[0].1.plugin(), Some("TaintToleration"));
        assert!(suggest(&profile, &snapshot, &p, &d).is_empty());
    }

    #[test]
    fn pre_filter_rejections_give_no_suggestion() {
        let d = Diagnosis {
            num_all_nodes: 1,
            pre_filter_msg: Some("whatever".into()),
            node_statuses: vec![("n1".into(), crate::framework::Status::unresolvable("x"))],
            ..Default::default()
        };
        let config = Config::default_with(&plugins::registry()).expect("defaults");
        let p = pod("a").build();
        assert!(suggest(&config.profiles[0], &Snapshot::default(), &p, &d).is_empty());
    }

    #[test]
    fn shortfall_amounts_are_exact_and_formatted_as_quantities() {
        let n = crate::cache::NodeInfo::new(Arc::new(node("n").capacity("1", "1Gi").build()));
        let p = pod("a").req("cpu", "1500m").req("memory", "1Gi").build();
        let reasons = [
            Cow::Borrowed("Insufficient cpu"),
            Cow::Borrowed("Insufficient memory"),
        ];
        // Memory fits exactly: not a shortfall, so no single-resource answer either.
        assert_eq!(shortfalls(&p, &n, &reasons), None);
        assert_eq!(
            shortfalls(&p, &n, &reasons[..1]),
            Some(vec![Shortfall {
                resource: Cow::Borrowed("cpu"),
                amount: 500
            }])
        );
        assert_eq!(shortfalls(&p, &n, &[Cow::Borrowed("Too many pods")]), None);
        assert_eq!(
            shortfalls(&p, &n, &[Cow::Borrowed("node(s) were unschedulable")]),
            None
        );
        assert_eq!(format_milli(200), "200m");
        assert_eq!(format_milli(2000), "2");
        assert_eq!(format_bytes(512 * 1024 * 1024), "512Mi");
        assert_eq!(format_bytes(2 * 1024 * 1024 * 1024), "2Gi");
        assert_eq!(format_bytes(1024 * 1024 + 1), "2Mi");
        assert_eq!(format_bytes(100 * 1024), "100Ki");
        assert_eq!(format_bytes(10), "10");
        let gpu = Shortfall {
            resource: Cow::Borrowed("nvidia.com/gpu"),
            amount: 2,
        };
        assert_eq!(gpu.to_string(), "2 more nvidia.com/gpu");
        let pods = Shortfall {
            resource: Cow::Borrowed("pods"),
            amount: 3,
        };
        assert_eq!(pods.to_string(), "room for 3 more pods");
    }

    #[test]
    fn suggestions_serialize_with_a_kind_and_read_back() {
        let s = Suggestion::MoreResources {
            node: "n7".into(),
            shortfalls: vec![Shortfall {
                resource: Cow::Borrowed("cpu"),
                amount: 200,
            }],
        };
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(
            json,
            r#"{"kind":"moreResources","node":"n7","shortfalls":[{"resource":"cpu","amount":200}]}"#
        );
        assert_eq!(serde_json::from_str::<Suggestion>(&json).unwrap(), s);
    }
}
