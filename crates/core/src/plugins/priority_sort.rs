//! PrioritySort: kube-scheduler's default QueueSort. Pods with a higher priority are
//! scheduled first; among equal priorities, the one that arrived first goes first.

use std::cmp::Ordering;
use std::sync::Arc;

use crate::framework::{ArgsError, DefaultPlace, Plugin, PluginSpec, QueueSortPlugin};
use crate::model::PodInfo;

/// The name used in configuration files.
pub const NAME: &str = "PrioritySort";

/// Orders the active queue by priority (descending), then arrival (ascending).
#[derive(Debug, Default, Clone, Copy)]
pub struct PrioritySort;

impl Plugin for PrioritySort {
    fn name(&self) -> &'static str {
        NAME
    }

    fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        Some(self)
    }
}

impl QueueSortPlugin for PrioritySort {
    fn compare(&self, a: &PodInfo, a_seq: u64, b: &PodInfo, b_seq: u64) -> Ordering {
        b.priority.cmp(&a.priority).then_with(|| a_seq.cmp(&b_seq))
    }
}

/// The plugin for the registry, with its place in kube-scheduler's default profile.
pub const SPEC: PluginSpec = PluginSpec {
    name: NAME,
    factory,
    default: Some(DefaultPlace {
        order: 20,
        weight: None,
    }),
    args: None,
};

/// Builds the plugin; it takes no arguments, and ignores any given (as kube-scheduler does
/// for plugins without an arguments type).
pub fn factory(_args: Option<&serde_json::Value>) -> Result<Arc<dyn Plugin>, ArgsError> {
    Ok(Arc::new(PrioritySort))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;

    fn cmp(a_prio: i32, a_seq: u64, b_prio: i32, b_seq: u64) -> Ordering {
        let a = pod("a").priority(a_prio).build();
        let b = pod("b").priority(b_prio).build();
        PrioritySort.compare(&a, a_seq, &b, b_seq)
    }

    #[test]
    fn higher_priority_first_whatever_the_arrival() {
        assert_eq!(cmp(10, 5, 9, 1), Ordering::Less);
        assert_eq!(cmp(9, 1, 10, 5), Ordering::Greater);
        assert_eq!(
            cmp(0, 1, -1, 0),
            Ordering::Less,
            "negative priorities sort last"
        );
        assert_eq!(cmp(i32::MIN, 0, i32::MAX, 1), Ordering::Greater);
    }

    #[test]
    fn equal_priority_earlier_arrival_first() {
        assert_eq!(cmp(5, 1, 5, 2), Ordering::Less);
        assert_eq!(cmp(5, 2, 5, 1), Ordering::Greater);
        assert_eq!(cmp(5, 3, 5, 3), Ordering::Equal);
    }

    #[test]
    fn unset_priority_is_zero() {
        let unset = pod("u").build();
        let zero = pod("z").priority(0).build();
        assert_eq!(PrioritySort.compare(&unset, 1, &zero, 2), Ordering::Less);
        assert_eq!(PrioritySort.compare(&zero, 1, &unset, 2), Ordering::Less);
        let one = pod("o").priority(1).build();
        assert_eq!(PrioritySort.compare(&unset, 1, &one, 2), Ordering::Greater);
    }

    #[test]
    fn factory_builds_the_named_plugin() {
        let p = factory(None).unwrap();
        assert_eq!(p.name(), "PrioritySort");
        assert!(p.as_queue_sort().is_some());
        assert!(p.as_filter().is_none());
    }
}
