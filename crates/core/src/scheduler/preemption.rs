//! Preemption as the scheduler carries it on: nominations, preemptors held while their
//! victims go, and pods activated again.

use super::*;

/// A preemption the front end carries out: until it is done and its victims' deletions
/// show, the preemptor does not preempt again.
pub(super) struct Preempting {
    /// The victims, by namespace and name.
    victims: Vec<(String, String)>,
    /// The front end evicted them all.
    evicted: bool,
}

impl Scheduler {
    /// A preemption's victims held at Permit are rejected there (`preempted`, as
    /// kube-scheduler does: they are pending pods, not to be deleted), and moved from its
    /// victims to its released pods.
    pub(super) fn release_waiting_victims(&mut self, result: &mut PostFilterResult) {
        let Some(p) = result.preemption.as_mut() else {
            return;
        };
        let (held, deleted): (Vec<_>, Vec<_>) = std::mem::take(&mut p.victims)
            .into_iter()
            .partition(|v| self.waiting.get(&v.namespace, &v.name).is_some());
        p.victims = deleted;
        for v in &held {
            self.waiting
                .reject(&v.namespace, &v.name, "DefaultPreemption", "preempted");
        }
        p.released = held;
    }

    /// Records what a PostFilter run decided for `pod`'s nomination: the pod nominated to
    /// the node a preemption makes room on (and the lower-priority pods nominated there no
    /// longer), or its nomination dropped.
    pub(super) fn apply_nomination(&mut self, pod: &Arc<PodInfo>, result: &PostFilterResult) {
        match &result.nomination {
            Nomination::Keep => {}
            Nomination::Clear => {
                self.nominated.remove(&pod.namespace, &pod.name);
            }
            Nomination::Set(node) => {
                let mut nominated = (**pod).clone();
                nominated.nominated_node = Some(node.clone());
                self.nominated.nominate(Arc::new(nominated), node.clone());
            }
        }
        if let Some(p) = &result.preemption {
            for d in &p.denominated {
                self.nominated.remove(&d.namespace, &d.name);
            }
        }
    }

    /// Retries a parked pod without waiting for a cluster event, as kube-scheduler's
    /// `Activate` does: the front end asks for it when what it carries out for the pod (a
    /// preemption's evictions) failed, so that the pod does not wait for an event that may
    /// never come. Unlike kube-scheduler, the pod's backoff still holds (see
    /// [`SchedulingQueue::activate`]): a failure that repeats is not retried in a loop.
    /// Returns whether the pod moved.
    pub fn activate(&mut self, namespace: &str, name: &str, now: Duration) -> bool {
        self.queue.activate(namespace, name, now)
    }

    /// Holds a preemptor out of the queue while the front end evicts its `victims` (see
    /// [`SchedulingQueue::hold`]), until [`release_preemptor`](Self::release_preemptor). It
    /// does not preempt again until [`preemption_done`](Self::preemption_done) and, if every
    /// victim was evicted, until their deletions show: released to catch the last deletion,
    /// it may be tried before that (another change woke it, the API server was slow to
    /// answer), and its victims then count as terminating (kube-scheduler's eligibility
    /// check), so that it waits for them instead of evicting other pods as well.
    pub fn hold_preemptor(&mut self, preemptor: &PodInfo, victims: &[Arc<PodInfo>]) {
        self.queue.hold(&preemptor.namespace, &preemptor.name);
        let victims = victims
            .iter()
            .map(|v| (v.namespace.clone(), v.name.clone()))
            .collect();
        let preempting = Preempting {
            victims,
            evicted: false,
        };
        self.preempting.insert(preemptor.key(), preempting);
    }

    /// The front end finished carrying out the preemption of `namespace/name`: `evicted`
    /// when every victim was deleted (or gone), else it may preempt again at once.
    pub fn preemption_done(&mut self, namespace: &str, name: &str, evicted: bool) {
        let key = PodKey::new(namespace, name).text();
        match self.preempting.get_mut(&key) {
            Some(p) if evicted => p.evicted = true,
            _ => {
                self.preempting.remove(&key);
            }
        }
    }

    /// Whether the pod's preemption is still being carried out, or its victims' deletions
    /// have not shown yet.
    pub(super) fn preemption_running(&self, pod: &PodInfo) -> bool {
        self.preempting.get(&pod.key()).is_some_and(|p| {
            !p.evicted
                || p.victims
                    .iter()
                    .any(|(ns, name)| self.cache.pod_placement(ns, name).is_some())
        })
    }

    /// Ends [`hold_preemptor`](Self::hold_preemptor): the front end calls it before it
    /// evicts the last victim, whose deletion then wakes the pod. Returns whether it was
    /// held.
    pub fn release_preemptor(&mut self, namespace: &str, name: &str) -> bool {
        self.queue.release(namespace, name)
    }
}
