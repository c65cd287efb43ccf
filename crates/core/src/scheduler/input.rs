//! What the front ends tell the scheduler of the cluster: each watched kind's upsert and
//! removal, and the cluster events they raise for the queue.

use super::*;

impl Scheduler {
    /// A node appeared or changed.
    pub fn upsert_node(&mut self, node: NodeModel, now: Duration) {
        let old = self.cache.node(&node.name).map(|n| n.node.clone());
        let name = node.name.clone();
        self.cache.upsert_node(node);
        let Some(new) = self.cache.node(&name).map(|n| n.node.clone()) else {
            return;
        };
        let change = match &old {
            Some(old) => ClusterChange::NodeUpdated { old, new: &new },
            None => ClusterChange::NodeAdded(&new),
        };
        self.queue.on_event(&change, now);
    }

    /// A node disappeared.
    pub fn remove_node(&mut self, name: &str) {
        self.cache.remove_node(name);
    }

    /// A pod appeared or changed: bound pods go to the cache, pending pods this scheduler
    /// serves go to the queue, others are ignored.
    pub fn upsert_pod(&mut self, pod: Arc<PodInfo>, now: Duration) -> Result<(), CacheError> {
        self.cache.note_pod(&pod);
        if pod.node_name.is_some() {
            // Bound (by us or anyone else): no longer ours to schedule.
            self.release_held(&pod.namespace, &pod.name);
            self.stop_asking(&pod.namespace, &pod.name);
            self.queue.delete(&pod.namespace, &pod.name);
            self.nominated.remove(&pod.namespace, &pod.name);
            self.preempting.remove(&pod.key());
            let was_placed = self
                .cache
                .pod_placement(&pod.namespace, &pod.name)
                .is_some();
            self.cache.add_bound_pod(pod.clone())?;
            let change = if was_placed {
                ClusterChange::PodUpdated(&pod)
            } else {
                ClusterChange::PodAdded(&pod)
            };
            self.queue.on_event(&change, now);
            return Ok(());
        }
        let Some(profile) = self.profile(&pod.scheduler_name) else {
            return Ok(());
        };
        let gated = run_pre_enqueue(profile, &pod);
        // A nomination the API reports is taken; one this scheduler made and the API does
        // not show yet is kept (the pod's status is written after the decision).
        if let Some(node) = &pod.nominated_node {
            self.nominated.nominate(pod.clone(), node.clone());
        } else if let Some(node) = self.nominated.node_of(&pod.namespace, &pod.name).cloned() {
            self.nominated.nominate(pod.clone(), node);
        }
        if self.queue.contains(&pod.namespace, &pod.name) {
            self.queue.update(pod, gated, now);
        } else {
            if self.queue.listens(ClusterEvent::PendingPodAdd) {
                self.queue
                    .on_event(&ClusterChange::PendingPodAdded(&pod), now);
            }
            self.queue.add(pod, gated, now);
        }
        Ok(())
    }

    /// Stops trying to schedule the pending pod `namespace/name`, which otherwise stays as it
    /// is (a member of its group, say): the simulator's way to end retries that cannot
    /// change anything. A pod held at Permit is released first.
    pub fn stop_trying(&mut self, namespace: &str, name: &str) {
        self.release_held(namespace, name);
        self.stop_asking(namespace, name);
        self.queue.delete(namespace, name);
        self.nominated.remove(namespace, name);
    }

    /// A pod was deleted (or finished).
    pub fn remove_pod(&mut self, namespace: &str, name: &str, now: Duration) {
        self.preempting.remove(&PodKey::new(namespace, name).text());
        self.release_held(namespace, name);
        self.stop_asking(namespace, name);
        self.cache.forget_member(namespace, name);
        self.queue.delete(namespace, name);
        self.nominated.remove(namespace, name);
        if let Some(pod) = self.cache.remove_pod(namespace, name) {
            self.queue.on_event(&ClusterChange::PodRemoved(&pod), now);
        }
    }

    /// Nodes' measured load changed (see [`crate::model::load`]): records each sample and
    /// wakes the pods that load-aware plugins parked.
    pub fn set_node_loads<'a>(
        &mut self,
        samples: impl IntoIterator<Item = (&'a str, LoadSample)>,
        now: Duration,
    ) {
        let mut changed = false;
        for (node, sample) in samples {
            changed |= self.cache.set_node_load(node, sample);
        }
        if changed {
            self.queue.on_event(&ClusterChange::NodeLoadChanged, now);
        }
    }

    /// A PersistentVolumeClaim appeared or changed.
    pub fn upsert_claim(&mut self, claim: ClaimModel, now: Duration) {
        let key = (claim.namespace.clone(), claim.name.clone());
        let old = self.cache.storage().api_claim(&key.0, &key.1).cloned();
        self.cache.upsert_claim(claim);
        if let Some(new) = self.cache.storage().api_claim(&key.0, &key.1).cloned() {
            let change = ClusterChange::Claim {
                old: old.as_deref(),
                new: &new,
            };
            self.queue.on_event(&change, now);
        }
    }

    /// A PersistentVolumeClaim was deleted.
    pub fn remove_claim(&mut self, namespace: &str, name: &str) {
        self.cache.remove_claim(namespace, name);
    }

    /// A PersistentVolume appeared or changed.
    pub fn upsert_volume(&mut self, volume: VolumeModel, now: Duration) {
        let name = volume.name.clone();
        let old = self.cache.storage().api_volume(&name).cloned();
        self.cache.upsert_volume(volume);
        if let Some(new) = self.cache.storage().api_volume(&name).cloned() {
            let change = ClusterChange::Volume {
                old: old.as_deref(),
                new: &new,
            };
            self.queue.on_event(&change, now);
        }
    }

    /// A PersistentVolume was deleted.
    pub fn remove_volume(&mut self, name: &str) {
        self.cache.remove_volume(name);
    }

    /// A StorageClass appeared or changed.
    pub fn upsert_storage_class(&mut self, class: StorageClassModel, now: Duration) {
        let name = class.name.clone();
        let old = self.cache.storage().class(&name).cloned();
        self.cache.upsert_storage_class(class);
        if let Some(new) = self.cache.storage().class(&name).cloned() {
            let change = ClusterChange::StorageClass {
                old: old.as_deref(),
                new: &new,
            };
            self.queue.on_event(&change, now);
        }
    }

    /// A StorageClass was deleted.
    pub fn remove_storage_class(&mut self, name: &str) {
        self.cache.remove_storage_class(name);
    }

    /// A CSINode appeared or changed.
    pub fn upsert_csi_node(&mut self, node: CsiNodeModel, now: Duration) {
        let name = node.name.clone();
        let old = self.cache.storage().csi_node(&name).cloned();
        self.cache.upsert_csi_node(node);
        if let Some(new) = self.cache.storage().csi_node(&name).cloned() {
            let change = ClusterChange::CsiNode {
                old: old.as_deref(),
                new: &new,
            };
            self.queue.on_event(&change, now);
        }
    }

    /// A CSINode was deleted.
    pub fn remove_csi_node(&mut self, name: &str) {
        self.cache.remove_csi_node(name);
    }

    /// A CSIDriver appeared or changed.
    pub fn upsert_csi_driver(&mut self, driver: CsiDriverModel, now: Duration) {
        let name = driver.name.clone();
        let old = self.cache.storage().csi_driver(&name).cloned();
        self.cache.upsert_csi_driver(driver);
        if let Some(new) = self.cache.storage().csi_driver(&name).cloned() {
            let change = ClusterChange::CsiDriver {
                old: old.as_deref(),
                new: &new,
            };
            self.queue.on_event(&change, now);
        }
    }

    /// A CSIDriver was deleted.
    pub fn remove_csi_driver(&mut self, name: &str) {
        self.cache.remove_csi_driver(name);
    }

    /// A CSIStorageCapacity appeared or changed.
    pub fn upsert_capacity(&mut self, capacity: StorageCapacityModel, now: Duration) {
        let key = (capacity.namespace.clone(), capacity.name.clone());
        let old = self.cache.storage().capacity(&key.0, &key.1).cloned();
        self.cache.upsert_capacity(capacity);
        if let Some(new) = self.cache.storage().capacity(&key.0, &key.1).cloned() {
            let change = ClusterChange::StorageCapacity {
                old: old.as_deref(),
                new: &new,
            };
            self.queue.on_event(&change, now);
        }
    }

    /// A CSIStorageCapacity was deleted.
    pub fn remove_capacity(&mut self, namespace: &str, name: &str) {
        self.cache.remove_capacity(namespace, name);
    }

    /// A PodDisruptionBudget appeared or changed. No pod is moved in the queue: a budget
    /// limits whom preemption evicts, never where a pod fits, and kube-scheduler registers
    /// no event for budgets either.
    pub fn upsert_disruption_budget(&mut self, budget: DisruptionBudgetModel) {
        self.cache.upsert_disruption_budget(budget);
    }

    /// A PodDisruptionBudget was deleted (or can no longer be read).
    pub fn remove_disruption_budget(&mut self, namespace: &str, name: &str) {
        self.cache.remove_disruption_budget(namespace, name);
    }

    /// A PodGroup appeared or changed.
    pub fn upsert_pod_group(&mut self, group: PodGroupModel, now: Duration) {
        let (namespace, name) = (group.namespace.clone(), group.name.clone());
        let old = self.cache.pod_groups().group(&namespace, &name).cloned();
        self.cache.upsert_pod_group(group);
        if let Some(new) = self.cache.pod_groups().group(&namespace, &name).cloned() {
            let change = ClusterChange::PodGroup {
                old: old.as_deref(),
                new: &new,
            };
            self.queue.on_event(&change, now);
        }
    }

    /// A PodGroup was deleted: its pods waiting at Permit are released at once.
    pub fn remove_pod_group(&mut self, namespace: &str, name: &str) {
        self.cache.remove_pod_group(namespace, name);
        self.pod_group_gone(namespace, name);
    }

    /// A PodGroup cannot be read (`error` says why): it is absent, its pods waiting at
    /// Permit are released, and its pods are refused with why until it can be read again;
    /// those parked before (told only that their group was not found) are tried again
    /// within their backoff, to be told why.
    pub fn pod_group_unreadable(
        &mut self,
        namespace: &str,
        name: &str,
        error: &str,
        now: Duration,
    ) {
        self.cache.pod_group_unreadable(namespace, name, error);
        self.pod_group_gone(namespace, name);
        let members = self.cache.pod_groups().members(namespace, name);
        for pod in members.pending() {
            self.queue.activate(namespace, pod, now);
        }
    }

    /// Tells every profile's Permit plugins that the PodGroup `namespace/name` is gone.
    pub(super) fn pod_group_gone(&mut self, namespace: &str, name: &str) {
        for profile in &self.profiles {
            for plugin in &profile.permit {
                if let Some(p) = plugin.as_permit() {
                    p.pod_group_gone(namespace, name, &mut self.waiting);
                }
            }
        }
    }

    /// gantry, binding a pod to `node`, found the node's HAMi lock held for another pod's
    /// allocation (`holder`): the pods that want HAMi devices avoid the node for
    /// [`LOCK_AVOIDANCE`], or until gantry takes its lock, so that they go elsewhere
    /// instead of queueing behind a lock that may never be given back.
    pub fn hami_lock_held(&mut self, node: &str, holder: &str, now: Duration) {
        if self
            .cache
            .set_hami_lock_holder(node, Some(Arc::from(holder)))
            || self.lock_avoided.contains_key(node)
        {
            self.lock_avoided
                .insert(Arc::from(node), now + LOCK_AVOIDANCE);
        }
    }

    /// gantry took `node`'s HAMi lock: the node is no longer avoided.
    pub fn hami_lock_taken(&mut self, node: &str, now: Duration) {
        if self.lock_avoided.remove(node).is_some() {
            self.cache.set_hami_lock_holder(node, None);
            self.queue.on_event(&ClusterChange::NodeLockFreed, now);
        }
    }

    /// Ends the avoidance of the nodes whose time is up.
    pub(super) fn end_lock_avoidance(&mut self, now: Duration) {
        let mut freed = false;
        while let Some(entry) = self.lock_avoided.first_entry() {
            if *entry.get() > now {
                break;
            }
            let node = entry.remove_entry().0;
            freed |= self.cache.set_hami_lock_holder(&node, None);
        }
        if freed {
            self.queue.on_event(&ClusterChange::NodeLockFreed, now);
        }
    }

    /// Something else changed that may help parked pods (namespaces, workload selectors).
    pub fn notify(&mut self, now: Duration) {
        self.queue.on_event(&ClusterChange::Other, now);
    }
}
