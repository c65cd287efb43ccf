//! PodGroups (`scheduling.x-k8s.io/v1alpha1`, scheduler-plugins' CRD), for gang scheduling.

use std::time::Duration;

use super::objects::pod_group_object;
use super::{Change, Holding, Kind, ObjectKey, ReadContext, Serving, Target, Unreadable, Written};
use crate::cache::Tracked;
use crate::model::pod_group::{PodGroup, PodGroupModel};

/// PodGroups. One that cannot be read (a `minMember` out of int32's range or not a number, a
/// quantity of `spec.minResources` that does not parse: the CRD's schema lets all of these
/// through) is absent, and its pods are refused with why.
pub struct PodGroups;

/// A PodGroup as read.
#[derive(Debug)]
pub enum GroupReading {
    /// Read.
    Group(PodGroupModel),
    /// It cannot be read, for this reason (naming the field).
    Unreadable(ObjectKey, String),
}

impl Kind for PodGroups {
    type Object = PodGroup;
    type Model = GroupReading;
    const TRACKED: Option<Tracked> = Some(Tracked::PodGroups);
    const SERVING: Serving = Serving::CustomResource;

    fn read(group: &PodGroup, _: &ReadContext) -> Result<Option<GroupReading>, String> {
        PodGroupModel::from_api(group).map(|g| Some(GroupReading::Group(g)))
    }

    fn unreadable(group: &Unreadable, _: &ReadContext) -> Option<Change<GroupReading>> {
        let reading = GroupReading::Unreadable(group.key(), group.error.clone());
        Some(Change::Applied(reading))
    }

    fn apply(change: Change<GroupReading>, target: &mut dyn Target, now: Duration) {
        let s = target.scheduler();
        match change {
            Change::Applied(GroupReading::Group(group)) => {
                // A change of status alone (gantry's own writes among them) changes nothing
                // the plugin reads, and wakes no pod.
                let known = s.cache().pod_groups().group(&group.namespace, &group.name);
                if known.is_none_or(|g| **g != group) {
                    s.upsert_pod_group(group, now);
                }
            }
            Change::Applied(GroupReading::Unreadable(key, error)) => {
                s.pod_group_unreadable(&key.namespace, &key.name, &error, now);
            }
            Change::Deleted(key) => s.remove_pod_group(&key.namespace, &key.name),
        }
    }

    fn write(holding: &Holding<'_>, out: &mut Written) {
        for group in holding.cache.pod_groups().groups() {
            out.push(pod_group_object(group));
        }
    }
}
