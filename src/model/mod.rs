//! The compact model: nodes and pods converted once, at the edge, into the views the
//! scheduler computes with. No full API object is kept.

pub mod gpu;
pub mod labels;
pub mod load;
pub mod node;
pub mod pod;
pub mod quantity;
pub mod resources;
pub mod selector;
pub mod taint;

#[cfg(test)]
mod pod_tests;
#[cfg(test)]
mod quantity_fuzz_tests;

pub use labels::Labels;
pub use node::NodeModel;
pub use pod::PodInfo;
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
