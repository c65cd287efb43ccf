//! The plugins: kube-scheduler's defaults, and gantry's own. One module per plugin, each
//! holding the plugin, its arguments and its tests.

use crate::framework::Registry;

pub mod balanced_allocation;
pub mod default_binder;
pub mod gpu_share;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod load_aware;
pub mod node_affinity;
pub mod node_name;
pub mod node_ports;
pub mod node_resources_fit;
pub mod node_unschedulable;
pub mod overcommit;
pub mod pod_topology_spread;
pub mod priority_sort;
pub mod resource_allocation;
pub mod scheduling_gates;
pub mod taint_toleration;
pub mod zone_policy;

/// Every plugin gantry knows, by the name configuration files use.
pub fn registry() -> Registry {
    let mut r = Registry::new();
    r.register(balanced_allocation::NAME, balanced_allocation::factory);
    r.register(default_binder::NAME, default_binder::factory);
    r.register(gpu_share::NAME, gpu_share::factory);
    r.register(image_locality::NAME, image_locality::factory);
    r.register(inter_pod_affinity::NAME, inter_pod_affinity::factory);
    r.register(load_aware::NAME, load_aware::factory);
    r.register(node_affinity::NAME, node_affinity::factory);
    r.register(node_name::NAME, node_name::factory);
    r.register(node_ports::NAME, node_ports::factory);
    r.register(node_resources_fit::NAME, node_resources_fit::factory);
    r.register(node_unschedulable::NAME, node_unschedulable::factory);
    r.register(overcommit::NAME, overcommit::factory);
    r.register(pod_topology_spread::NAME, pod_topology_spread::factory);
    r.register(priority_sort::NAME, priority_sort::factory);
    r.register(scheduling_gates::NAME, scheduling_gates::factory);
    r.register(taint_toleration::NAME, taint_toleration::factory);
    r.register(zone_policy::NAME, zone_policy::factory);
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
        // itself, whatever the cluster does.
        let silent: Vec<&str> = plugins
            .iter()
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
}
