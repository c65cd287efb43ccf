//! The plugins: kube-scheduler's defaults, and gantry's own. One module per plugin, each
//! holding the plugin, its arguments and its tests.

use crate::framework::Registry;

pub mod balanced_allocation;
pub mod node_resources_fit;
pub mod resource_allocation;

/// Every plugin gantry knows, by the name configuration files use.
pub fn registry() -> Registry {
    let mut r = Registry::new();
    r.register(node_resources_fit::NAME, node_resources_fit::factory);
    r.register(balanced_allocation::NAME, balanced_allocation::factory);
    r
}
