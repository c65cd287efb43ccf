use std::cmp::Ordering;

use super::*;
use crate::config::Config;
use crate::framework::{ClusterChange, QueueSortPlugin};
use crate::model::NodeModel;
use crate::plugins;
use crate::testing::{node, pod};

/// Priority first, then arrival.
struct Sort;
impl Plugin for Sort {
    fn name(&self) -> &'static str {
        "Sort"
    }
    fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        Some(self)
    }
}
impl QueueSortPlugin for Sort {
    fn compare(&self, a: &PodInfo, sa: u64, b: &PodInfo, sb: u64) -> Ordering {
        b.priority.cmp(&a.priority).then(sa.cmp(&sb))
    }
}

/// A queue that knows the events of kube-scheduler's default plugins.
fn queue() -> SchedulingQueue {
    let config = Config::default_with(&plugins::registry()).expect("defaults");
    SchedulingQueue::new(
        Arc::new(Sort),
        plugin_events(config.profiles[0].plugins()),
        Duration::from_secs(1),
        Duration::from_secs(10),
    )
}

fn a_node() -> NodeModel {
    node("n1").capacity("4", "8Gi").build()
}

fn a_placed_pod() -> Arc<PodInfo> {
    pod("placed").on("n1").build()
}

const T0: Duration = Duration::ZERO;
fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[test]
fn priority_then_fifo() {
    let mut q = queue();
    q.add(pod("a").build(), None, T0);
    q.add(pod("b").priority(10).build(), None, T0);
    q.add(pod("c").build(), None, T0);
    q.add(pod("d").priority(10).build(), None, T0);
    let order: Vec<String> = std::iter::from_fn(|| q.pop(T0))
        .map(|p| p.pod.name.clone())
        .collect();
    assert_eq!(order, ["b", "d", "a", "c"]);
    assert_eq!(q.in_flight(), 4);
}

#[test]
fn exponential_backoff_capped() {
    let mut q = queue();
    q.add(pod("a").build(), None, T0);
    let mut now = T0;
    let mut waits = Vec::new();
    for _ in 0..6 {
        let p = q.pop(now).expect("due");
        q.requeue_backoff(p, now);
        let due = q.next_wakeup().unwrap();
        assert!(
            q.pop(due - Duration::from_millis(1)).is_none(),
            "not before backoff ends"
        );
        waits.push((due - now).as_secs());
        now = due;
    }
    assert_eq!(waits, [1, 2, 4, 8, 10, 10]);
}

#[test]
fn unschedulable_pods_wait_for_a_helpful_event() {
    let mut q = queue();
    q.add(pod("a").build(), None, T0);
    let p = q.pop(T0).unwrap();
    q.requeue_unschedulable(p, ["TaintToleration"].into_iter().collect(), T0);
    assert_eq!(q.len(QueueName::Unschedulable), 1);
    q.on_event(&ClusterChange::PodRemoved(&a_placed_pod()), secs(5));
    assert!(
        q.pop(secs(5)).is_none(),
        "a pod deletion does not help a taint"
    );
    q.on_event(
        &ClusterChange::NodeUpdated {
            old: &a_node(),
            new: &a_node(),
        },
        secs(5),
    );
    assert_eq!(q.pop(secs(5)).unwrap().attempts, 2);
}

#[test]
fn event_during_backoff_goes_to_backoff_then_active() {
    let mut q = queue();
    q.add(pod("a").build(), None, T0);
    let p = q.pop(T0).unwrap();
    q.requeue_unschedulable(p, ["NodeResourcesFit"].into_iter().collect(), T0);
    q.on_event(
        &ClusterChange::NodeAdded(&a_node()),
        Duration::from_millis(100),
    );
    assert_eq!(q.len(QueueName::Backoff), 1);
    assert!(q.pop(Duration::from_millis(500)).is_none());
    assert!(q.pop(secs(1)).is_some());
}

#[test]
fn event_while_in_flight_means_retry_not_park() {
    let mut q = queue();
    q.add(pod("a").build(), None, T0);
    let p = q.pop(T0).unwrap();
    q.on_event(&ClusterChange::NodeAdded(&a_node()), T0);
    q.requeue_unschedulable(p, ["NodeResourcesFit"].into_iter().collect(), T0);
    assert_eq!(q.len(QueueName::Backoff), 1);
}

#[test]
fn parked_pods_are_flushed_after_five_minutes() {
    let mut q = queue();
    q.add(pod("a").build(), None, T0);
    let p = q.pop(T0).unwrap();
    q.requeue_unschedulable(p, ["NodeAffinity"].into_iter().collect(), T0);
    assert!(q.pop(secs(299)).is_none());
    assert!(q.pop(secs(300)).is_some());
}

#[test]
fn gated_pods_wait_for_an_update() {
    let mut q = queue();
    q.add(pod("a").build(), Some(Status::unresolvable("gated")), T0);
    assert!(q.pop(T0).is_none());
    q.on_event(&ClusterChange::NodeAdded(&a_node()), secs(1));
    assert!(q.pop(secs(400)).is_none(), "gated pods are not flushed");
    q.update(pod("a").build(), None, secs(400));
    assert!(q.pop(secs(400)).is_some());
}

#[test]
fn a_pod_gated_while_backing_off_waits_for_its_gate_not_its_backoff() {
    let mut q = queue();
    q.add(pod("a").build(), None, T0);
    let a = q.pop(T0).unwrap();
    q.requeue_backoff(a, T0);
    q.update(pod("a").build(), Some(Status::unresolvable("gated")), T0);
    assert_eq!(q.next_wakeup(), None, "a gated pod waits on no clock");
    assert!(
        q.pop(secs(400)).is_none(),
        "its backoff ended, its gate did not"
    );
    assert_eq!(q.waiting().count(), 1, "reported while gated");
    q.update(pod("a").build(), None, secs(400));
    assert!(q.pop(secs(400)).is_some(), "ungated with its backoff over");
}

#[test]
fn a_held_preemptor_moves_only_on_an_event_after_its_release() {
    let mut q = queue();
    q.add(pod("a").priority(10).build(), None, T0);
    let p = q.pop(T0).unwrap();
    q.requeue_unschedulable(p, ["NodeResourcesFit"].into_iter().collect(), T0);
    q.hold("default", "a");
    q.on_event(&ClusterChange::PodRemoved(&a_placed_pod()), secs(2));
    assert!(!q.activate("default", "a", secs(2)));
    q.update(pod("a").priority(10).build(), None, secs(2));
    assert!(
        q.pop(secs(400)).is_none(),
        "held: no event, activation, update or timeout"
    );
    assert_eq!(q.next_wakeup(), None, "a held pod waits on no clock");
    assert!(q.release("default", "a"));
    assert!(!q.release("default", "a"));
    assert_eq!(
        q.pop(secs(400)).unwrap().pod.name,
        "a",
        "released, the five-minute flush applies again"
    );
}

#[test]
fn a_held_preemptor_backing_off_is_parked_when_its_backoff_ends() {
    let mut q = queue();
    q.add(pod("a").build(), None, T0);
    let p = q.pop(T0).unwrap();
    q.requeue_backoff(p, T0);
    q.hold("default", "a");
    assert!(q.pop(secs(5)).is_none());
    assert_eq!(q.len(QueueName::Unschedulable), 1);
    q.release("default", "a");
    assert!(q.pop(secs(6)).is_none(), "released, it waits for an event");
    q.on_event(&ClusterChange::PodRemoved(&a_placed_pod()), secs(6));
    assert!(q.pop(secs(6)).is_some());
    q.hold("default", "gone");
    assert!(!q.delete("default", "gone"));
    assert!(
        !q.release("default", "gone"),
        "a deleted pod is held no more"
    );
}

#[test]
fn deleted_pods_disappear_even_in_flight() {
    let mut q = queue();
    q.add(pod("a").build(), None, T0);
    q.add(pod("b").build(), None, T0);
    assert!(q.delete("default", "a"));
    let p = q.pop(T0).unwrap();
    assert_eq!(p.pod.name, "b");
    assert!(q.delete("default", "b"));
    q.requeue_backoff(p, T0);
    assert_eq!(q.total(), 0, "a pod deleted in flight is not requeued");
}

#[test]
fn incoming_pods_are_counted_by_queue_and_event() {
    let mut q = queue();
    q.add(pod("a").build(), None, T0);
    q.add(pod("g").build(), Some(Status::unresolvable("gated")), T0);
    let p = q.pop(T0).unwrap();
    q.requeue_unschedulable(p, ["NodeResourcesFit"].into_iter().collect(), T0);
    q.on_event(&ClusterChange::NodeAdded(&a_node()), secs(5));
    let p = q.pop(secs(5)).unwrap();
    q.requeue_backoff(p, secs(5));
    assert!(q.pop(secs(6)).is_none());
    assert!(q.pop(secs(7)).is_some());
    let mut counts = q.take_incoming();
    counts.sort();
    let mut expected = vec![
        (QueueName::Active, EVENT_POD_ADD, 1),
        (QueueName::Unschedulable, EVENT_POD_ADD, 1),
        (QueueName::Unschedulable, EVENT_SCHEDULE_ATTEMPT_FAILURE, 1),
        (QueueName::Active, "NodeAdd", 1),
        (QueueName::Backoff, EVENT_SCHEDULE_ATTEMPT_FAILURE, 1),
        (QueueName::Active, EVENT_BACKOFF_COMPLETE, 1),
    ];
    expected.sort();
    assert_eq!(counts, expected);
    assert!(q.take_incoming().is_empty(), "taking resets the counts");
}

#[test]
fn parked_pods_flushed_count_as_unschedulable_timeout() {
    let mut q = queue();
    q.add(pod("a").build(), None, T0);
    let p = q.pop(T0).unwrap();
    q.requeue_unschedulable(p, ["NodeAffinity"].into_iter().collect(), T0);
    q.take_incoming();
    assert!(q.pop(secs(300)).is_some());
    assert_eq!(
        q.take_incoming(),
        [(QueueName::Active, EVENT_UNSCHEDULABLE_TIMEOUT, 1)]
    );
}

#[test]
fn sub_queue_counts_add_up_through_every_transition() {
    let mut q = queue();
    let check = |q: &SchedulingQueue| {
        let parts =
            q.len(QueueName::Active) + q.len(QueueName::Backoff) + q.len(QueueName::Unschedulable);
        assert_eq!(parts, q.total());
    };
    for i in 0..6 {
        q.add(pod(&format!("p{i}")).build(), None, T0);
    }
    q.add(
        pod("gated").build(),
        Some(Status::unresolvable("gated")),
        T0,
    );
    check(&q);
    let a = q.pop(T0).unwrap();
    let b = q.pop(T0).unwrap();
    let c = q.pop(T0).unwrap();
    q.requeue_unschedulable(a, ["NodeResourcesFit"].into_iter().collect(), T0);
    q.requeue_backoff(b, T0);
    q.requeue_unschedulable(c, ["TaintToleration"].into_iter().collect(), T0);
    check(&q);
    assert_eq!(q.len(QueueName::Unschedulable), 3);
    q.on_event(&ClusterChange::PodRemoved(&a_placed_pod()), secs(5));
    check(&q);
    assert_eq!(
        q.len(QueueName::Unschedulable),
        2,
        "only the cpu-starved pod moved"
    );
    q.update(
        pod("p5").build(),
        Some(Status::unresolvable("gated")),
        secs(5),
    );
    q.delete("default", "p4");
    check(&q);
    q.flush(secs(400));
    check(&q);
    assert_eq!(q.len(QueueName::Unschedulable), 2, "gated pods stay");
}

#[test]
fn a_plugins_hint_decides_whether_a_change_wakes_the_pods_it_rejected() {
    let mut q = queue();
    q.add(pod("a").build(), None, T0);
    let p = q.pop(T0).unwrap();
    q.requeue_unschedulable(p, ["NodeUnschedulable"].into_iter().collect(), T0);
    let open = a_node();
    let cordoned = node("n1").capacity("4", "8Gi").unschedulable().build();
    let updated = |new| ClusterChange::NodeUpdated { old: &open, new };
    q.on_event(&updated(&cordoned), secs(5));
    assert_eq!(q.len(QueueName::Unschedulable), 1, "still cordoned: stays");
    q.on_event(&ClusterChange::Other, secs(5));
    assert_eq!(
        q.len(QueueName::Unschedulable),
        1,
        "nothing it reads changed"
    );
    q.on_event(&updated(&open), secs(5));
    assert!(q.pop(secs(5)).is_some(), "uncordoned: retried");
}

#[test]
fn a_plugin_the_queue_does_not_know_is_helped_by_anything() {
    let mut q = queue();
    q.add(pod("a").build(), None, T0);
    let p = q.pop(T0).unwrap();
    q.requeue_unschedulable(p, ["SomeoneElses"].into_iter().collect(), T0);
    q.on_event(&ClusterChange::Other, secs(5));
    assert!(q.pop(secs(5)).is_some());
}

#[test]
fn activation_retries_a_parked_pod_within_its_backoff() {
    let mut q = queue();
    q.add(pod("early").build(), None, T0);
    q.add(pod("late").build(), None, T0);
    for _ in 0..2 {
        let p = q.pop(T0).unwrap();
        q.requeue_unschedulable(p, BTreeSet::from(["NodeResourcesFit"]), T0);
    }
    // Backing off for a second after its first attempt: activated at once, it waits that out.
    assert!(q.activate("default", "early", T0));
    assert!(!q.activate("default", "early", T0), "backing off already");
    assert!(q.pop(T0).is_none());
    assert_eq!(
        q.pop(secs(1)).map(|p| p.pod.name.clone()).as_deref(),
        Some("early")
    );
    // Activated after its backoff: tried at once.
    assert!(q.activate("default", "late", secs(2)));
    assert_eq!(
        q.pop(secs(2)).map(|p| p.pod.name.clone()).as_deref(),
        Some("late")
    );
    let incoming = q.take_incoming();
    assert!(incoming.contains(&(QueueName::Backoff, EVENT_FORCE_ACTIVATE, 1)));
    assert!(incoming.contains(&(QueueName::Active, EVENT_FORCE_ACTIVATE, 1)));
    // In flight, gated or unknown: nothing to move.
    assert!(!q.activate("default", "late", secs(2)), "in flight");
    q.add(
        pod("gated").build(),
        Some(Status::unresolvable("gated")),
        T0,
    );
    assert!(!q.activate("default", "gated", secs(2)));
    assert!(!q.activate("default", "unknown", secs(2)));
}

#[test]
fn a_change_of_its_status_alone_does_not_wake_a_parked_pod() {
    let mut q = queue();
    q.add(pod("a").build(), None, T0);
    let p = q.pop(T0).unwrap();
    q.requeue_unschedulable(p, BTreeSet::from(["NodeResourcesFit"]), T0);
    // The scheduler's own write comes back: the pod nominated to a node.
    let mut nominated = (*pod("a").build()).clone();
    nominated.nominated_node = Some(Arc::from("n1"));
    q.update(Arc::new(nominated), None, secs(5));
    assert!(q.pop(secs(5)).is_none(), "still parked");
    assert_eq!(
        q.waiting()
            .next()
            .and_then(|(p, _)| p.pod.nominated_node.clone()),
        Some(Arc::from("n1")),
        "with the pod as it is now"
    );
    // A change of the spec may help.
    q.update(pod("a").label("app", "web").build(), None, secs(6));
    assert!(q.pop(secs(6)).is_some());
}
