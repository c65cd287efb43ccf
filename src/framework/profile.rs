//! A profile: one scheduler name and the plugins at each extension point.

use std::sync::Arc;

use super::plugin::Plugin;

/// A configured scheduler profile, ready to run cycles.
#[derive(Clone)]
pub struct Profile {
    /// The `spec.schedulerName` this profile serves.
    pub scheduler_name: String,
    /// Share of nodes to find feasible before scoring (1..=100); `None` for the adaptive
    /// default.
    pub percentage_of_nodes_to_score: Option<u32>,
    /// The one QueueSort plugin.
    pub queue_sort: Arc<dyn Plugin>,
    /// PreEnqueue plugins, in order.
    pub pre_enqueue: Vec<Arc<dyn Plugin>>,
    /// PreFilter plugins, in order.
    pub pre_filter: Vec<Arc<dyn Plugin>>,
    /// Filter plugins, in order.
    pub filter: Vec<Arc<dyn Plugin>>,
    /// PostFilter plugins, in order.
    pub post_filter: Vec<Arc<dyn Plugin>>,
    /// PreScore plugins, in order.
    pub pre_score: Vec<Arc<dyn Plugin>>,
    /// Score plugins with their weights.
    pub score: Vec<(Arc<dyn Plugin>, i64)>,
    /// Reserve plugins, in order.
    pub reserve: Vec<Arc<dyn Plugin>>,
    /// Permit plugins, in order.
    pub permit: Vec<Arc<dyn Plugin>>,
    /// PreBind plugins, in order.
    pub pre_bind: Vec<Arc<dyn Plugin>>,
    /// Bind plugins, in order: the first that does not skip binds.
    pub bind: Vec<Arc<dyn Plugin>>,
    /// PostBind plugins, in order.
    pub post_bind: Vec<Arc<dyn Plugin>>,
}

impl std::fmt::Debug for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |v: &[Arc<dyn Plugin>]| v.iter().map(|p| p.name()).collect::<Vec<_>>();
        f.debug_struct("Profile")
            .field("scheduler_name", &self.scheduler_name)
            .field("queue_sort", &self.queue_sort.name())
            .field("pre_enqueue", &names(&self.pre_enqueue))
            .field("pre_filter", &names(&self.pre_filter))
            .field("filter", &names(&self.filter))
            .field("post_filter", &names(&self.post_filter))
            .field("pre_score", &names(&self.pre_score))
            .field(
                "score",
                &self
                    .score
                    .iter()
                    .map(|(p, w)| (p.name(), *w))
                    .collect::<Vec<_>>(),
            )
            .field("reserve", &names(&self.reserve))
            .field("permit", &names(&self.permit))
            .field("pre_bind", &names(&self.pre_bind))
            .field("bind", &names(&self.bind))
            .field("post_bind", &names(&self.post_bind))
            .finish()
    }
}

impl Profile {
    /// Every plugin of the profile, at whichever extension points (a plugin at several
    /// points comes once per point).
    pub fn plugins(&self) -> impl Iterator<Item = &Arc<dyn Plugin>> {
        std::iter::once(&self.queue_sort)
            .chain(&self.pre_enqueue)
            .chain(&self.pre_filter)
            .chain(&self.filter)
            .chain(&self.post_filter)
            .chain(&self.pre_score)
            .chain(self.score.iter().map(|(p, _)| p))
            .chain(&self.reserve)
            .chain(&self.permit)
            .chain(&self.pre_bind)
            .chain(&self.bind)
            .chain(&self.post_bind)
    }
}
