//! The plugins: kube-scheduler's defaults, and gantry's own. One module per plugin, each
//! holding the plugin, its arguments and its tests.

use crate::framework::Registry;

pub mod inter_pod_affinity;

/// Every plugin gantry knows, by the name configuration files use.
pub fn registry() -> Registry {
    let mut r = Registry::new();
    r.register(inter_pod_affinity::NAME, inter_pod_affinity::factory);
    r
}
