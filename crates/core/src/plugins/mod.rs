//! The plugins: kube-scheduler's defaults, and gantry's own. One module per plugin, each
//! holding the plugin, its arguments and its tests.

use crate::framework::Registry;

pub mod balanced_allocation;
pub mod coscheduling;
pub mod default_binder;
pub mod default_preemption;
pub mod dynamic_resources;
pub mod gpu_share;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod load_aware;
pub mod node_affinity;
pub mod node_declared_features;
pub mod node_name;
pub mod node_ports;
pub mod node_resources_fit;
pub mod node_unschedulable;
pub mod node_volume_limits;
pub mod overcommit;
pub mod pod_topology_spread;
pub mod priority_sort;
pub mod resource_allocation;
pub mod scheduling_gates;
pub mod shape;
pub mod taint_toleration;
pub mod volume_binding;
pub mod volume_restrictions;
pub mod volume_zone;
pub mod zone_policy;

/// Every plugin gantry knows, by the name configuration files use.
pub fn registry() -> Registry {
    let mut r = Registry::new();
    for spec in [
        balanced_allocation::SPEC,
        coscheduling::SPEC,
        default_binder::SPEC,
        default_preemption::SPEC,
        dynamic_resources::SPEC,
        gpu_share::SPEC,
        image_locality::SPEC,
        inter_pod_affinity::SPEC,
        load_aware::SPEC,
        node_affinity::SPEC,
        node_declared_features::SPEC,
        node_name::SPEC,
        node_ports::SPEC,
        node_resources_fit::SPEC,
        node_unschedulable::SPEC,
        node_volume_limits::SPEC,
        overcommit::SPEC,
        pod_topology_spread::SPEC,
        priority_sort::SPEC,
        scheduling_gates::SPEC,
        taint_toleration::SPEC,
        volume_binding::SPEC,
        volume_restrictions::SPEC,
        volume_zone::SPEC,
        zone_policy::SPEC,
    ] {
        r.register(spec);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Plugin;

    /// Every registered plugin, built with its default arguments.
    fn every_plugin() -> Vec<std::sync::Arc<dyn Plugin>> {
        let r = registry();
        r.names()
            .map(|name| {
                let factory = r.get(name).expect("registered");
                factory(None).unwrap_or_else(|e| panic!("{name} with default args: {e}"))
            })
            .collect()
    }

    #[test]
    fn every_plugin_that_can_reject_a_pod_declares_the_events_that_may_help_it() {
        let plugins = every_plugin();
        assert!(plugins.len() >= 17);
        // PreEnqueue plugins are asked again whenever their pod changes: the queue does that
        // itself, whatever the cluster does. Nothing gantry sees lets a pod with resource
        // claims in until it allocates them (issue 52).
        let silent: Vec<&str> = plugins
            .iter()
            .filter(|p| p.name() != dynamic_resources::NAME)
            .filter(|p| {
                p.as_pre_filter().is_some()
                    || p.as_filter().is_some()
                    || p.as_reserve().is_some()
                    || p.as_permit().is_some()
            })
            .filter(|p| p.events().is_empty())
            .map(|p| p.name())
            .collect();
        assert!(
            silent.is_empty(),
            "plugins that declare no events: {silent:?}"
        );
    }

    #[test]
    fn the_default_profile_is_kube_schedulers_in_its_order_and_weights() {
        assert_eq!(
            registry().defaults(),
            [
                (scheduling_gates::NAME, None),
                (priority_sort::NAME, None),
                (node_name::NAME, None),
                (node_unschedulable::NAME, None),
                (taint_toleration::NAME, Some(3)),
                (node_affinity::NAME, Some(2)),
                (node_ports::NAME, None),
                (node_resources_fit::NAME, Some(1)),
                (volume_restrictions::NAME, None),
                (node_volume_limits::NAME, None),
                (volume_binding::NAME, None),
                (volume_zone::NAME, None),
                (pod_topology_spread::NAME, Some(2)),
                (inter_pod_affinity::NAME, Some(2)),
                (dynamic_resources::NAME, None),
                (default_preemption::NAME, None),
                (balanced_allocation::NAME, Some(1)),
                (image_locality::NAME, Some(1)),
                (default_binder::NAME, None),
                (node_declared_features::NAME, None),
            ]
        );
    }
}
