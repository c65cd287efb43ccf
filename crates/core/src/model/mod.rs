//! The compact model: nodes and pods converted once, at the edge, into the views the
//! scheduler computes with. No full API object is kept.

pub(crate) mod arc_str;
pub mod disruption_budget;
pub mod dra;
pub mod duration;
pub mod echo;
pub mod gpu;
pub mod hami;
pub mod labels;
pub mod load;
pub mod node;
pub mod node_features;
pub mod pod;
pub mod pod_group;
pub mod quantity;
pub mod resources;
pub mod selector;
pub mod taint;
pub mod volume;

#[cfg(test)]
mod pod_tests;
#[cfg(test)]
mod quantity_fuzz_tests;

pub use labels::Labels;
pub use node::NodeModel;
pub use pod::{PodInfo, PodKey};
pub use resources::Resources;

/// An API object the scheduler cannot use, with the object and field named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// A malformed pod.
    #[error("pod {pod}: {reason}")]
    Pod {
        /// `namespace/name`.
        pod: String,
        /// The field and what is wrong with it.
        reason: String,
    },
    /// A malformed node.
    #[error("node {node}: {reason}")]
    Node {
        /// Node name.
        node: String,
        /// The field and what is wrong with it.
        reason: String,
    },
}

impl ModelError {
    /// A malformed pod, its name and the reason cut to a bounded size (both come from the
    /// input).
    pub fn pod(namespace: &str, name: &str, reason: &str) -> Self {
        ModelError::Pod {
            pod: format!("{}/{}", echo::echo_name(namespace), echo::echo_name(name)),
            reason: echo::bound_message(reason),
        }
    }

    /// A malformed node, its name and the reason cut to a bounded size.
    pub fn node(name: &str, reason: &str) -> Self {
        ModelError::Node {
            node: echo::echo_name(name).to_string(),
            reason: echo::bound_message(reason),
        }
    }
}
