//! Pods a Permit plugin holds: assumed on their node (the room is theirs), their binding not
//! yet planned, until every plugin that asked them to wait allows them, one rejects them, or
//! a plugin's wait times out (kube-scheduler's waiting pods, without a thread blocked on
//! each: the scheduler applies the verdicts between cycles).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::model::PodInfo;

use super::status::{Code, Status};

/// Longest wait a Permit plugin may ask for (kube-scheduler's `maxTimeout`).
pub const MAX_PERMIT_WAIT: Duration = Duration::from_secs(15 * 60);

/// A pod held at Permit.
#[derive(Debug, Clone)]
pub struct WaitingPod {
    /// The pod as assumed on its node.
    pub pod: Arc<PodInfo>,
    /// The node it holds room on.
    pub node: Arc<str>,
    /// When it began to wait.
    pub since: Duration,
    /// The plugins yet to allow it, each with the time its wait runs out.
    pending: Vec<(&'static str, Duration)>,
}

impl WaitingPod {
    /// The plugins that have not allowed the pod yet.
    pub fn pending_plugins(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.pending.iter().map(|(p, _)| *p)
    }

    /// When the first of its waits runs out.
    pub fn deadline(&self) -> Option<Duration> {
        self.pending.iter().map(|(_, d)| *d).min()
    }
}

/// What became of a waiting pod.
#[derive(Debug)]
pub enum Verdict {
    /// Every plugin allowed it: it is bound now.
    Allowed,
    /// A plugin rejected it, or a wait ran out (an Unschedulable status naming the plugin).
    Rejected(Status),
}

/// The pods held at Permit, and the verdicts reached on them not yet carried out. Permit
/// plugins read and decide on them through this (kube-scheduler's `IterateOverWaitingPods`,
/// `Allow` and `Reject`); the scheduler takes the decided pods out.
#[derive(Debug, Default)]
pub struct WaitingPods {
    pods: BTreeMap<(String, String), WaitingPod>,
    decided: Vec<(WaitingPod, Verdict)>,
}

impl WaitingPods {
    /// The pods waiting now (those decided on are no longer listed).
    pub fn iter(&self) -> impl Iterator<Item = &WaitingPod> {
        self.pods.values()
    }

    /// The waiting pod `namespace/name`, if it waits.
    pub fn get(&self, namespace: &str, name: &str) -> Option<&WaitingPod> {
        self.pods.get(&(namespace.to_string(), name.to_string()))
    }

    /// How many pods wait.
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    /// True when no pod waits.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// `plugin` allows the pod; once every plugin that made it wait has, it is bound.
    pub fn allow(&mut self, namespace: &str, name: &str, plugin: &'static str) {
        let key = (namespace.to_string(), name.to_string());
        let Some(w) = self.pods.get_mut(&key) else {
            return;
        };
        w.pending.retain(|(p, _)| *p != plugin);
        if w.pending.is_empty()
            && let Some(w) = self.pods.remove(&key)
        {
            self.decided.push((w, Verdict::Allowed));
        }
    }

    /// `plugin` rejects the pod: its room is given back and it is tried again later.
    pub fn reject(&mut self, namespace: &str, name: &str, plugin: &'static str, message: &str) {
        let key = (namespace.to_string(), name.to_string());
        if let Some(w) = self.pods.remove(&key) {
            let status = Status::new(Code::Unschedulable, message.to_string()).with_plugin(plugin);
            self.decided.push((w, Verdict::Rejected(status)));
        }
    }

    /// Holds `pod` on `node` for `plugins`, each with its wait (capped at
    /// [`MAX_PERMIT_WAIT`]), from `now`.
    pub(crate) fn hold(
        &mut self,
        pod: Arc<PodInfo>,
        node: Arc<str>,
        plugins: &[(&'static str, Duration)],
        now: Duration,
    ) {
        let pending = plugins
            .iter()
            .map(|(p, wait)| (*p, now + (*wait).min(MAX_PERMIT_WAIT)))
            .collect();
        let key = (pod.namespace.clone(), pod.name.clone());
        self.pods.insert(
            key,
            WaitingPod {
                pod,
                node,
                since: now,
                pending,
            },
        );
    }

    /// Rejects the pods whose wait has run out by `now`, with kube-scheduler's message.
    pub(crate) fn expire(&mut self, now: Duration) {
        let expired: Vec<(String, String)> = self
            .pods
            .iter()
            .filter(|(_, w)| w.deadline().is_some_and(|d| d <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for key in expired {
            let Some(w) = self.pods.remove(&key) else {
                continue;
            };
            let Some(&(plugin, deadline)) = w.pending.iter().min_by_key(|(_, d)| *d) else {
                continue;
            };
            let message = format!(
                "rejected due to timeout after waiting {} at plugin {plugin}",
                go_duration(deadline.saturating_sub(w.since))
            );
            let status = Status::new(Code::Unschedulable, message).with_plugin(plugin);
            self.decided.push((w, Verdict::Rejected(status)));
        }
    }

    /// The pod no longer waits (deleted, or bound by someone else): dropped without a
    /// verdict.
    pub(crate) fn remove(&mut self, namespace: &str, name: &str) -> Option<WaitingPod> {
        self.pods.remove(&(namespace.to_string(), name.to_string()))
    }

    /// The next decided pod, in the order the verdicts were reached.
    pub(crate) fn take_decided(&mut self) -> Option<(WaitingPod, Verdict)> {
        (!self.decided.is_empty()).then(|| self.decided.remove(0))
    }

    /// When the earliest wait runs out.
    pub fn next_deadline(&self) -> Option<Duration> {
        self.pods.values().filter_map(WaitingPod::deadline).min()
    }
}

/// A duration as Go's `time.Duration` prints it (`30s`, `1m30s`, `1.5s`, `500ms`), as
/// kube-scheduler's timeout message shows the wait.
fn go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos < 1_000_000_000 {
        let (unit, per) = match nanos {
            n if n < 1_000 => ("ns", 1),
            n if n < 1_000_000 => ("µs", 1_000),
            _ => ("ms", 1_000_000),
        };
        return format!("{}{unit}", decimal(nanos, per));
    }
    let total = d.as_secs();
    let (h, m) = (total / 3600, (total % 3600) / 60);
    let seconds = decimal(nanos % 60_000_000_000, 1_000_000_000);
    match (h, m) {
        (0, 0) => format!("{seconds}s"),
        (0, m) => format!("{m}m{seconds}s"),
        (h, m) => format!("{h}h{m}m{seconds}s"),
    }
}

/// `value / per` in decimal, without trailing zeros.
fn decimal(value: u128, per: u128) -> String {
    let (whole, rest) = (value / per, value % per);
    if rest == 0 {
        return whole.to_string();
    }
    let width = per.to_string().len() - 1;
    let fraction = format!("{rest:0width$}");
    format!("{whole}.{}", fraction.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;

    fn held(w: &mut WaitingPods, name: &str, plugins: &[(&'static str, u64)]) {
        let plugins: Vec<_> = plugins
            .iter()
            .map(|(p, s)| (*p, Duration::from_secs(*s)))
            .collect();
        w.hold(pod(name).build(), Arc::from("n1"), &plugins, Duration::ZERO);
    }

    #[test]
    fn a_pod_is_allowed_once_every_plugin_that_held_it_has_allowed_it() {
        let mut w = WaitingPods::default();
        held(&mut w, "a", &[("Gang", 10), ("Quota", 20)]);
        w.allow("default", "a", "Gang");
        assert!(w.take_decided().is_none());
        assert_eq!(
            w.get("default", "a")
                .unwrap()
                .pending_plugins()
                .collect::<Vec<_>>(),
            ["Quota"]
        );
        w.allow("default", "a", "Quota");
        let (pod, verdict) = w.take_decided().unwrap();
        assert_eq!(pod.pod.name, "a");
        assert!(matches!(verdict, Verdict::Allowed));
        assert!(w.is_empty());
    }

    #[test]
    fn a_rejection_ends_the_wait_with_the_plugins_message() {
        let mut w = WaitingPods::default();
        held(&mut w, "a", &[("Gang", 10)]);
        w.reject("default", "a", "Gang", "group gone");
        w.allow("default", "a", "Gang");
        let (_, verdict) = w.take_decided().unwrap();
        let Verdict::Rejected(s) = verdict else {
            panic!("rejected");
        };
        assert_eq!(
            (s.code(), s.plugin(), s.message().as_str()),
            (Code::Unschedulable, Some("Gang"), "group gone")
        );
        assert!(w.take_decided().is_none(), "decided once");
    }

    #[test]
    fn the_first_wait_to_run_out_rejects_the_pod_as_kube_scheduler_words_it() {
        let mut w = WaitingPods::default();
        held(&mut w, "a", &[("Quota", 90), ("Gang", 30)]);
        held(&mut w, "b", &[("Gang", 3600)]);
        assert_eq!(w.next_deadline(), Some(Duration::from_secs(30)));
        w.expire(Duration::from_secs(29));
        assert!(w.take_decided().is_none());
        w.expire(Duration::from_secs(30));
        let (pod, verdict) = w.take_decided().unwrap();
        let Verdict::Rejected(s) = verdict else {
            panic!("rejected");
        };
        assert_eq!(pod.pod.name, "a");
        assert_eq!(
            s.message(),
            "rejected due to timeout after waiting 30s at plugin Gang"
        );
        // b asked for an hour and gets kube-scheduler's cap of 15 minutes.
        assert_eq!(w.next_deadline(), Some(MAX_PERMIT_WAIT));
    }

    #[test]
    fn waits_are_printed_as_go_prints_durations() {
        let s = Duration::from_secs;
        assert_eq!(go_duration(s(0)), "0s");
        assert_eq!(go_duration(s(30)), "30s");
        assert_eq!(go_duration(s(90)), "1m30s");
        assert_eq!(go_duration(s(900)), "15m0s");
        assert_eq!(go_duration(s(3661)), "1h1m1s");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_millis(500)), "500ms");
        assert_eq!(go_duration(Duration::from_micros(1500)), "1.5ms");
    }
}
