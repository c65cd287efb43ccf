//! Views of the scheduler's state, handed off the scheduling thread (what-if, explain).

use super::*;

/// The cluster as a scheduler holds it at one moment: its cache, its nominated pods and
/// where its next search starts (the snapshot its cycles read is rebuilt from the cache by
/// whoever uses the view, not copied by the scheduler). A question about placements
/// (`gantry what-if`) runs a scheduler built from a clone of it ([`Scheduler::from_view`]),
/// off the scheduling thread: the clone shares every node's [`NodeInfo`] and copies only
/// what it changes, so the scheduler's own state is untouched.
#[derive(Debug)]
pub struct ClusterView {
    cache: Cache,
    nominated: NominatedPods,
    next_start: CycleMemory,
    /// The scheduler's time when the view was taken.
    pub taken_at: Duration,
}

impl Clone for ClusterView {
    fn clone(&self) -> Self {
        ClusterView {
            cache: self.cache.clone(),
            nominated: self.nominated.clone(),
            next_start: self.next_start.fork(),
            taken_at: self.taken_at,
        }
    }
}

impl ClusterView {
    /// The cluster state.
    pub fn cache(&self) -> &Cache {
        &self.cache
    }
}

/// Views of a scheduler handed out at a bounded cost: a view is taken afresh only when the
/// state changed since the last one and that one is at least `reuse_for` old, or no one
/// holds it any more; otherwise the last one is shared. So the answers are at most
/// `reuse_for` behind. A view is a few pointer copies; what costs is letting one go (the
/// nodes and index paths the scheduler has replaced since are freed with it), so the
/// scheduling thread keeps none alive: the last question to hold a view frees it.
#[derive(Debug)]
pub struct Views {
    reuse_for: Duration,
    last: Option<(Duration, u64, Weak<ClusterView>)>,
}

impl Views {
    /// Views shared for `reuse_for` while the state changes.
    pub fn new(reuse_for: Duration) -> Self {
        Views {
            reuse_for,
            last: None,
        }
    }

    /// A view of `scheduler` at `now` (its time).
    pub fn get(&mut self, scheduler: &Scheduler, now: Duration) -> Arc<ClusterView> {
        let generation = scheduler.cache().generation();
        if let Some((taken, last_generation, view)) = &self.last
            && (*last_generation == generation || now.saturating_sub(*taken) < self.reuse_for)
            && let Some(view) = view.upgrade()
        {
            return view;
        }
        let view = Arc::new(scheduler.view(now));
        self.last = Some((now, generation, Arc::downgrade(&view)));
        view
    }
}

impl Scheduler {
    /// The cluster as this scheduler holds it now (see [`ClusterView`]); `now` is the
    /// scheduler's time.
    pub fn view(&self, now: Duration) -> ClusterView {
        ClusterView {
            cache: self.cache.clone(),
            nominated: self.nominated.clone(),
            next_start: self.memory.fork(),
            taken_at: now,
        }
    }

    /// A scheduler for `config` holding `view`'s cluster, with nothing queued: what a copy
    /// of the scheduler that took the view would do. `config` should be built from the same
    /// configuration (its own plugin instances, so that plugins keeping state between cycles
    /// keep it apart).
    pub fn from_view(
        config: Config,
        view: ClusterView,
        pool: Option<Arc<rayon::ThreadPool>>,
    ) -> Self {
        let mut scheduler = Scheduler::new(config, pool);
        // The scheduler's first cycle builds its snapshot from the whole cache, in the order
        // the view's scheduler built its own (the node list's, zones interleaved).
        scheduler.cache = view.cache;
        scheduler.nominated = view.nominated;
        scheduler.memory = view.next_start;
        scheduler
    }
}
