//! DefaultBinder: binds the pod to the chosen node and nothing else (kube-scheduler's default
//! Bind plugin). The core only plans; the front end writes the binding.

use std::sync::Arc;

use crate::framework::{
    ArgsError, BindPlan, BindPlugin, CycleState, DefaultPlace, Plugin, PluginSpec, Status,
};
use crate::model::PodInfo;

/// The name used in configuration files.
pub const NAME: &str = "DefaultBinder";

/// Plans a plain binding: the node, with no annotations.
#[derive(Debug, Default, Clone, Copy)]
pub struct DefaultBinder;

impl Plugin for DefaultBinder {
    fn name(&self) -> &'static str {
        NAME
    }

    fn as_bind(&self) -> Option<&dyn BindPlugin> {
        Some(self)
    }
}

impl BindPlugin for DefaultBinder {
    fn bind(&self, _: &CycleState, _: &PodInfo, node: &Arc<str>) -> Result<BindPlan, Status> {
        Ok(BindPlan {
            node: node.clone(),
            annotations: Vec::new(),
            pre_bind: Vec::new(),
        })
    }
}

/// The plugin for the registry, with its place in kube-scheduler's default profile.
pub const SPEC: PluginSpec = PluginSpec {
    name: NAME,
    factory,
    default: Some(DefaultPlace {
        order: 130,
        weight: None,
    }),
    args: None,
};

/// Builds the plugin; it takes no arguments, and ignores any given (as kube-scheduler does
/// for plugins without an arguments type).
pub fn factory(_args: Option<&serde_json::Value>) -> Result<Arc<dyn Plugin>, ArgsError> {
    Ok(Arc::new(DefaultBinder))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;

    #[test]
    fn binds_to_the_node_without_annotations() {
        let node: Arc<str> = Arc::from("node-1");
        let plan = DefaultBinder
            .bind(&CycleState::new(), &pod("p").build(), &node)
            .unwrap();
        assert_eq!(
            plan,
            BindPlan {
                node: Arc::from("node-1"),
                annotations: vec![],
                pre_bind: vec![],
            }
        );
    }

    #[test]
    fn factory_builds_the_named_plugin() {
        let p = factory(None).unwrap();
        assert_eq!(p.name(), "DefaultBinder");
        assert!(p.as_bind().is_some());
    }
}
