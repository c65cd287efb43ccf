//! The plugins: kube-scheduler's defaults, and gantry's own. One module per plugin, each
//! holding the plugin, its arguments and its tests.

use crate::framework::Registry;

/// Every plugin gantry knows, by the name configuration files use.
pub fn registry() -> Registry {
    Registry::new()
}
