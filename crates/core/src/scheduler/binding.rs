//! After a node is chosen: the Reserve, Permit, PreBind and Bind plugins' runs that plan
//! the binding, and what the scheduler does with the binding's outcome.

use super::*;

/// A decision to carry out: bind `queued.pod` as `plan` says.
#[derive(Debug)]
pub struct BindTask {
    /// The pod as it was queued, with its attempt count.
    pub queued: QueuedPod,
    /// The pod as assumed in the cache (with its node set).
    pub assumed: Arc<PodInfo>,
    /// What binding means for it.
    pub plan: BindPlan,
    /// The profile that scheduled it.
    pub profile: String,
    /// Per-cycle plugin state, kept for Unreserve if the binding fails.
    pub state: CycleState,
    /// The extender that binds the pod instead of the Bind plugins (its position among
    /// the configured extenders), if one is interested in it.
    pub extender_binder: Option<usize>,
}

/// The binding of a pod that passed Permit: the Bind plugins' plan ([`run_bind`]) with
/// the PreBind work ([`run_pre_bind`]) and the annotations its Reserve plugins set.
pub(super) fn plan(
    profile: &Profile,
    assumed: &PodInfo,
    node: &Arc<str>,
    state: &CycleState,
    reserved: Vec<(String, String)>,
) -> Result<BindPlan, Status> {
    let mut plan = run_bind(profile, state, assumed, node)?;
    plan.pre_bind = run_pre_bind(profile, state, assumed, node)?;
    for (k, v) in reserved {
        plan.annotations.retain(|(pk, _)| *pk != k);
        plan.annotations.push((k, v));
    }
    Ok(plan)
}

/// The task binding `assumed` as `plan` says. Only Unreserve reads the state from here on;
/// without Reserve plugins nothing will, and a binding may wait in the binder's queue for a
/// while: the per-cycle counts of PreFilter and PreScore (maps by topology domain) are not
/// kept that long.
pub(super) fn bind_task(
    profile: &Profile,
    queued: QueuedPod,
    assumed: Arc<PodInfo>,
    plan: BindPlan,
    state: CycleState,
    extenders: &Extenders,
) -> BindTask {
    BindTask {
        extender_binder: extenders.binder_for(&assumed),
        queued,
        assumed,
        plan,
        profile: profile.scheduler_name.clone(),
        state: if profile.reserve.is_empty() {
            CycleState::new()
        } else {
            state
        },
    }
}

impl Scheduler {
    /// The binding was carried out: the pod is bound (confirmed in the cache).
    pub fn binding_succeeded(&mut self, task: &BindTask, now: Duration) -> Result<(), CacheError> {
        let pod = &task.assumed;
        self.queue.done(&pod.namespace, &pod.name);
        // A pod deleted while its binding was in flight is no longer in the cache, and one the
        // watch already reported bound is confirmed (with the watch's newer copy).
        if matches!(
            self.cache.pod_placement(&pod.namespace, &pod.name),
            Some((_, true))
        ) {
            self.cache.add_bound_pod(pod.clone())?;
            self.queue.on_event(&ClusterChange::PodAdded(pod), now);
        }
        if let Some(profile) = self.profile(&task.profile) {
            run_post_bind(profile, pod, &task.plan.node);
        }
        Ok(())
    }

    /// The binding did not take effect: undo the assumption (unless the watch has meanwhile
    /// reported the pod bound) and retry the pod after its backoff.
    pub fn binding_failed(&mut self, mut task: BindTask, now: Duration) {
        let (namespace, name) = (task.assumed.namespace.clone(), task.assumed.name.clone());
        if self.is_assumed(&namespace, &name)
            && let Some(profile) = self.profile(&task.profile).cloned()
        {
            let node = task.plan.node.clone();
            self.forget(&profile, &mut task.state, &task.assumed, &node);
            self.queue
                .on_event(&ClusterChange::PodRemoved(&task.assumed), now);
        }
        self.queue.requeue_backoff(task.queued, now);
    }

    /// The pod turned out to be bound to `node`, not to the node planned (someone else bound
    /// it first): what was reserved on the planned node is released, and the pod counts on
    /// `node` (as it was queued, without the plan's annotations) until the watch reports it.
    pub fn binding_landed_elsewhere(
        &mut self,
        mut task: BindTask,
        node: Arc<str>,
        now: Duration,
    ) -> Result<(), CacheError> {
        let (namespace, name) = (task.assumed.namespace.clone(), task.assumed.name.clone());
        self.queue.done(&namespace, &name);
        if !self.is_assumed(&namespace, &name) {
            return Ok(());
        }
        if let Some(profile) = self.profile(&task.profile).cloned() {
            let planned = task.plan.node.clone();
            self.forget(&profile, &mut task.state, &task.assumed, &planned);
        }
        let mut bound = (*task.queued.pod).clone();
        bound.node_name = Some(node);
        self.cache.add_bound_pod(Arc::new(bound))?;
        self.queue
            .on_event(&ClusterChange::PodRemoved(&task.assumed), now);
        Ok(())
    }

    pub(super) fn is_assumed(&self, namespace: &str, name: &str) -> bool {
        matches!(self.cache.pod_placement(namespace, name), Some((_, true)))
    }

    /// The pod is gone (deleted, or replaced by a new pod of the same name): undo the
    /// assumption without retrying. The watch reports the new pod, if there is one.
    pub fn binding_dropped(&mut self, mut task: BindTask, now: Duration) {
        let (namespace, name) = (task.assumed.namespace.clone(), task.assumed.name.clone());
        self.queue.done(&namespace, &name);
        if let Some(profile) = self.profile(&task.profile).cloned() {
            let node = task.plan.node.clone();
            unreserve(
                &profile,
                &mut task.state,
                &task.assumed,
                &node,
                profile.reserve.len(),
            );
        }
        // Still assumed unless the watch already reported the pod bound (or deleted).
        if self.is_assumed(&namespace, &name) {
            let _ = self.cache.forget_pod(&namespace, &name);
            self.queue
                .on_event(&ClusterChange::PodRemoved(&task.assumed), now);
        }
    }
}
