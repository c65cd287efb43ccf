//! PodDisruptionBudgets as preemption reads them: kube-scheduler's DefaultPreemption prefers
//! victims whose eviction violates no budget (`filterPodsWithPDBViolation`), and of a
//! budget it reads only the namespace, the selector, `status.disruptionsAllowed` and the
//! names in `status.disruptedPods`. Those are all this model keeps.

use std::collections::BTreeSet;

use k8s_openapi::api::policy::v1 as policy;

use super::PodInfo;
use super::echo::echo_name;
use super::selector::LabelSelector;

/// One PodDisruptionBudget, compiled (read by DefaultPreemption, #20).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisruptionBudgetModel {
    /// Namespace: a budget covers only pods of its own namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `spec.selector`, compiled; an absent one matches nothing. An empty one (`{}`)
    /// compiles to a selector that matches everything, which [`DisruptionBudgetModel::covers`]
    /// treats as matching nothing.
    pub selector: LabelSelector,
    /// `status.disruptionsAllowed` (0 when the disruption controller has not set it): how
    /// many more of the covered pods may be evicted now.
    pub disruptions_allowed: i32,
    /// The keys of `status.disruptedPods`: pods whose eviction the API server has admitted
    /// and already counted against the budget, which preemption does not count again.
    pub disrupted_pods: BTreeSet<String>,
}

impl DisruptionBudgetModel {
    /// Reads a budget of `policy/v1` (or of `policy/v1beta1`, whose fields read here have
    /// the same schema). An invalid selector is an error naming the budget and the field:
    /// the API server validates selectors, so only input that did not pass it (the
    /// simulator's) can carry one, and a budget left out covers no pod, as kube-scheduler's
    /// `filterPodsWithPDBViolation` skips a budget whose selector does not compile.
    pub fn from_api(pdb: &policy::PodDisruptionBudget) -> Result<Self, String> {
        let meta = &pdb.metadata;
        let namespace = meta.namespace.clone().unwrap_or_default();
        let name = meta.name.clone().unwrap_or_default();
        let selector = pdb.spec.as_ref().and_then(|s| s.selector.as_ref());
        let selector = LabelSelector::compile(selector, "spec.selector").map_err(|e| {
            format!(
                "poddisruptionbudget {}/{}: {e}",
                echo_name(&namespace),
                echo_name(&name)
            )
        })?;
        let status = pdb.status.as_ref();
        Ok(DisruptionBudgetModel {
            selector,
            disruptions_allowed: status.and_then(|s| s.disruptions_allowed).unwrap_or(0),
            disrupted_pods: status
                .and_then(|s| s.disrupted_pods.as_ref())
                .map(|pods| pods.keys().cloned().collect())
                .unwrap_or_default(),
            namespace,
            name,
        })
    }

    /// True when the budget covers `pod`, as `filterPodsWithPDBViolation` decides: the same
    /// namespace, a pod with labels, and a selector that requires something and matches
    /// them. A budget without a selector or with an empty one covers no pod (in
    /// `policy/v1beta1` the disruption controller reads an empty selector as every pod of
    /// the namespace, but kube-scheduler, followed here, does not, in either version).
    pub fn covers(&self, pod: &PodInfo) -> bool {
        self.namespace == pod.namespace
            && !pod.labels.is_empty()
            && !self.selector.is_everything()
            && self.selector.matches(&pod.labels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;

    fn budget(yaml: &str) -> Result<DisruptionBudgetModel, String> {
        let pdb: policy::PodDisruptionBudget = serde_yaml::from_str(yaml).expect("YAML");
        DisruptionBudgetModel::from_api(&pdb)
    }

    #[test]
    fn reads_the_status_preemption_counts_with() {
        let b = budget(
            r#"
metadata: {name: web, namespace: shop}
spec: {minAvailable: 2, selector: {matchLabels: {app: web}}}
status:
  disruptionsAllowed: 1
  disruptedPods: {web-0: "2024-01-02T03:04:05Z", web-3: "2024-01-02T03:04:06Z"}
  currentHealthy: 3
  desiredHealthy: 2
  expectedPods: 3
"#,
        )
        .unwrap();
        assert_eq!((b.namespace.as_str(), b.name.as_str()), ("shop", "web"));
        assert_eq!(b.disruptions_allowed, 1);
        assert_eq!(
            b.disrupted_pods.iter().collect::<Vec<_>>(),
            ["web-0", "web-3"]
        );
        let web = pod("web-1").namespace("shop").label("app", "web").build();
        let db = pod("db-0").namespace("shop").label("app", "db").build();
        assert!(b.covers(&web));
        assert!(!b.covers(&db));
        let unset = budget(
            "{metadata: {name: web, namespace: shop}, spec: {selector: {matchLabels: {app: web}}}}",
        )
        .unwrap();
        assert_eq!(unset.disruptions_allowed, 0, "no status yet: none allowed");
        assert!(unset.disrupted_pods.is_empty());
    }

    #[test]
    fn a_budget_covers_pods_of_its_own_namespace_only() {
        let b = budget(
            "{metadata: {name: web, namespace: shop}, spec: {selector: {matchLabels: {app: web}}}}",
        )
        .unwrap();
        assert!(!b.covers(&pod("web-0").namespace("other").label("app", "web").build()));
        assert!(b.covers(&pod("web-0").namespace("shop").label("app", "web").build()));
    }

    #[test]
    fn a_nil_or_empty_selector_covers_nothing() {
        let nil =
            budget("{metadata: {name: a, namespace: shop}, spec: {minAvailable: 1}}").unwrap();
        let empty = budget("{metadata: {name: b, namespace: shop}, spec: {selector: {}}}").unwrap();
        let empty_lists = budget(
            "{metadata: {name: c, namespace: shop}, spec: {selector: {matchLabels: {}, matchExpressions: []}}}",
        )
        .unwrap();
        let labelled = pod("p").namespace("shop").label("app", "web").build();
        for b in [&nil, &empty, &empty_lists] {
            assert!(!b.covers(&labelled), "{}", b.name);
        }
        // A pod without labels is covered by no budget, even one that its (absent) labels
        // would satisfy.
        let not_web = budget(
            "{metadata: {name: d, namespace: shop}, spec: {selector: {matchExpressions: [{key: app, operator: DoesNotExist}]}}}",
        )
        .unwrap();
        assert!(!not_web.covers(&pod("bare").namespace("shop").build()));
        assert!(not_web.covers(&pod("other").namespace("shop").label("tier", "x").build()));
    }

    #[test]
    fn match_expressions_are_compiled() {
        let b = budget(
            r#"
metadata: {name: tiers, namespace: shop}
spec:
  selector:
    matchLabels: {team: shop}
    matchExpressions:
    - {key: tier, operator: In, values: [web, api]}
    - {key: canary, operator: DoesNotExist}
"#,
        )
        .unwrap();
        let p = |tier: &str| {
            pod("p")
                .namespace("shop")
                .label("team", "shop")
                .label("tier", tier)
        };
        assert!(b.covers(&p("web").build()));
        assert!(b.covers(&p("api").build()));
        assert!(!b.covers(&p("db").build()));
        assert!(!b.covers(&p("web").label("canary", "yes").build()));
        assert!(!b.covers(&pod("p").namespace("shop").label("tier", "web").build()));
    }

    #[test]
    fn an_invalid_selector_names_the_budget_and_the_field() {
        let e = budget(
            "{metadata: {name: bad, namespace: shop}, spec: {selector: {matchExpressions: [{key: a, operator: Near}]}}}",
        )
        .unwrap_err();
        assert_eq!(
            e,
            "poddisruptionbudget shop/bad: spec.selector.matchExpressions[0]: unsupported operator \"Near\""
        );
        let e = budget(
            "{metadata: {name: bad, namespace: shop}, spec: {selector: {matchExpressions: [{key: a, operator: In}]}}}",
        )
        .unwrap_err();
        assert!(
            e.starts_with("poddisruptionbudget shop/bad: spec.selector.matchExpressions[0]: "),
            "{e}"
        );
    }
}
