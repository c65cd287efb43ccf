//! A scheduler's state written in the simulator's input format (`gantry snapshot`), so that
//! a question about it can be replayed offline and attached to a bug report: every object of
//! every kind it holds ([`gantry_core::kinds`]), its nodes, the pods placed on them (bound or
//! assumed, with their node) and the pods in its queue (pending) among them.
//!
//! The scheduler keeps compact models, not API objects ([`NodeModel`], [`PodInfo`]): each
//! kind writes its objects back from them, with what the scheduler reads ([`Kind::write`]).
//! Read back, every node and pod is the model it was, except that a pod with several
//! containers of which some request no cpu or memory is scored as if one did not.

use std::fmt::Debug;
use std::sync::Arc;

use gantry_core::kinds::{self, Holding, Kind, Visitor, Written};
#[cfg(doc)]
use gantry_core::model::NodeModel;
use gantry_core::model::PodInfo;
use gantry_core::scheduler::ClusterView;

/// The state cannot be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the snapshot: {0}")]
pub struct SnapshotError(String);

/// `view` (nodes, placed pods, and the objects of every other kind it holds) and `queued`
/// (pending pods, in queue order) as a YAML `List`, which `gantry simulate` and `gantry
/// what-if --snapshot` read: kind by kind, in [`kinds::each`]'s order. Objects the cache
/// keeps unordered are written sorted by name.
pub fn write(view: &ClusterView, queued: &[Arc<PodInfo>]) -> Result<String, SnapshotError> {
    struct Writer<'a> {
        holding: Holding<'a>,
        out: Written,
    }
    impl Visitor for Writer<'_> {
        fn visit<K: Kind>(&mut self)
        where
            K::Model: Debug,
        {
            K::write(&self.holding, &mut self.out);
        }
    }
    let mut writer = Writer {
        holding: Holding {
            cache: view.cache(),
            queued,
        },
        out: Written::default(),
    };
    kinds::each(&mut writer);
    let items = writer
        .out
        .finish()
        .map_err(|e| SnapshotError(e.to_string()))?;
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    serde_yaml::to_string(&list).map_err(|e| SnapshotError(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ClusterInput, EXAMPLE, load};
    use gantry_core::config::Config;
    use gantry_core::model::NodeModel;

    /// Every node and placed pod of `input`, as the scheduler holds them, by name.
    fn models(input: &ClusterInput) -> (Vec<NodeModel>, Vec<PodInfo>, Vec<PodInfo>) {
        let config = Config::default_with(&gantry_core::plugins::registry()).expect("config");
        let loaded = load(input, config, None);
        let cache = loaded.scheduler.cache();
        let mut nodes: Vec<NodeModel> = cache.nodes().map(|n| (*n.node).clone()).collect();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let mut placed: Vec<PodInfo> = cache
            .nodes()
            .flat_map(|n| n.pods.iter().map(|p| (**p).clone()))
            .collect();
        placed.sort_by_key(|a| a.key());
        let pending = loaded.pending.iter().map(|p| (**p).clone()).collect();
        (nodes, placed, pending)
    }

    #[test]
    fn the_example_reads_back_as_the_same_models() {
        let mut input = ClusterInput::default();
        input.add_yaml(EXAMPLE, "example").expect("the example");
        let config = Config::default_with(&gantry_core::plugins::registry()).expect("config");
        let loaded = load(&input, config, None);
        let view = loaded.scheduler.view(std::time::Duration::ZERO);
        let yaml = write(&view, &loaded.pending).expect("written");
        let mut again = ClusterInput::default();
        again
            .add_yaml(&yaml, "snapshot")
            .expect("the snapshot reads");
        let (nodes, placed, pending) = models(&input);
        let (nodes2, placed2, pending2) = models(&again);
        assert_eq!(nodes, nodes2);
        assert_eq!(placed, placed2);
        assert_eq!(pending.len(), pending2.len());
        for (a, b) in pending.iter().zip(&pending2) {
            assert_eq!(a, b, "{}", a.key());
        }
    }
}
