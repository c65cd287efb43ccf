//! Nodes.

use std::time::Duration;

use k8s_openapi::api::core::v1 as core;
use prost::Message;

use super::objects::node_object;
use super::{Change, Holding, Kind, ProtobufReader, ReadContext, Target, Written, protobuf};
use crate::cache::Tracked;
use crate::model::NodeModel;

/// Nodes, in protobuf when the API server is asked for it. One that cannot be read is
/// absent: no pod goes there.
pub struct Nodes;

impl Kind for Nodes {
    type Object = core::Node;
    type Model = NodeModel;
    const TRACKED: Option<Tracked> = None;
    const PROTOBUF: Option<ProtobufReader<core::Node>> = Some(decode_node);

    fn read(node: &core::Node, _: &ReadContext) -> Result<Option<NodeModel>, String> {
        NodeModel::from_api(node)
            .map(Some)
            .map_err(|e| e.to_string())
    }

    fn apply(change: Change<NodeModel>, target: &mut dyn Target, now: Duration) {
        match change {
            Change::Applied(node) => target.node_applied(node, now),
            Change::Deleted(key) => target.scheduler().remove_node(&key.name),
        }
    }

    fn write(holding: &Holding<'_>, out: &mut Written) {
        for node in holding.cache.nodes() {
            out.push(node_object(&node.node));
        }
    }
}

/// Reads a node from its protobuf message.
fn decode_node(raw: &[u8]) -> Result<core::Node, prost::DecodeError> {
    Ok(protobuf::node::Node::decode(raw)?.into())
}
