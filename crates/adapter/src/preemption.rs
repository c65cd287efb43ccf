//! Preemption carried out: the evictions a DefaultPreemption run decided, made off the
//! scheduling thread as kube-scheduler makes them with asynchronous preemption (its
//! `prepareCandidateAsync`), one task per preemption while the next pods are scheduled.
//!
//! A preemption's task first writes the preemptor's `status.nominatedNodeName` (nothing is
//! evicted before it is written: a restart goes by the nominations on the API server), then
//! clears that of the pods of lower priority nominated to the node (the room is the
//! preemptor's now), then evicts the
//! victims but the last, [`MAX_PARALLEL_EVICTIONS`] at a time, then releases the preemptor,
//! which the scheduler holds out of its queue from the moment the preemption is decided,
//! and evicts the last victim, whose deletion wakes the preemptor: kube-scheduler's
//! asynchronous preemption, where the preemptor is not retried while its preemption
//! goroutine runs (so it does not preempt again over victims still being evicted), and is
//! let go just before the last eviction, so that the last deletion's event is not missed.
//! Evicting a pod is three calls: the
//! `DisruptionTarget` condition on its status (unless it has it already), its deletion on
//! the condition that it is still the same pod (a uid precondition), and a `Preempted`
//! event, written by the event writer ([`Record::Preempted`]). A victim found gone (deleted,
//! or replaced by a pod of the same name) is not an error. A call that fails for a reason
//! that may pass (the API server unreachable, a 5xx, a 429) is tried again, [`MAX_TRIES`]
//! times in all; a call that fails for good is logged with the pod, and the preemptor is
//! handed back to the scheduler to be tried again once its backoff allows
//! (kube-scheduler's `Activate`), since it may otherwise wait for a victim's deletion that
//! never comes; so is a preemptor whose last victim was found gone already.
//!
//! The preemptor's `PodScheduled` condition is written by the event writer, with the
//! nomination again.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::events::{PodRef, Record, Recorder};
use super::metrics::{GOROUTINE_ERROR, GOROUTINE_SUCCESS, Metrics};
use gantry_core::model::pod::{DISRUPTION_TARGET, PREEMPTION_BY_SCHEDULER};

/// Victims evicted at once by one preemption (kube-scheduler's parallelism).
pub const MAX_PARALLEL_EVICTIONS: usize = 16;
/// Preemptions carried out at once; the next wait their turn in the order they were
/// decided. Without a bound, a burst of preemptions interleaves its calls at the API server
/// and every one of them ends only when nearly all have, so the first preemptor waits for
/// the last one's evictions before it can be bound.
pub const MAX_PREEMPTIONS_AT_ONCE: usize = 64;
/// Tries of one call that keeps failing for a reason that may pass.
pub const MAX_TRIES: u32 = 4;
/// Wait before the second try; each later wait is [`RETRY_FACTOR`] times longer.
pub const FIRST_RETRY_WAIT: Duration = Duration::from_millis(100);
const RETRY_FACTOR: u32 = 5;
/// How long a shutdown waits for preemptions still being carried out.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(10);

/// A pod to evict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Victim {
    /// The pod.
    pub pod: PodRef,
    /// It carries the `DisruptionTarget` condition of a preemption already.
    pub marked: bool,
}

/// What one preemption decided, to carry out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreemptRequest {
    /// The pod the room is made for.
    pub preemptor: PodRef,
    /// Its profile (scheduler name): the condition's message and the events' reporter.
    pub profile: String,
    /// The node.
    pub node: Arc<str>,
    /// The pods to evict, those already terminating left out.
    pub victims: Vec<Victim>,
    /// The pods of lower priority nominated to the node, whose nomination is cleared.
    pub denominated: Vec<PodRef>,
}

/// Carries out every request from `requests`, each in a task of its own, at most
/// [`MAX_PREEMPTIONS_AT_ONCE`] at a time, until the channel closes and the tasks are done
/// (at most [`SHUTDOWN_WAIT`] longer). `release` is called
/// with the preemptor before its last victim is evicted (see [`carry_out`]), `done` once
/// its task is over (with whether every victim was evicted), then `activate` if its calls
/// failed or its last victim was gone already.
pub async fn run(
    calls: impl Calls + Clone + Send + 'static,
    mut requests: mpsc::UnboundedReceiver<PreemptRequest>,
    recorder: Recorder,
    release: impl Fn(&PodRef) + Clone + Send + 'static,
    activate: impl Fn(&PodRef) + Clone + Send + 'static,
    done: impl Fn(&PodRef, bool) + Clone + Send + 'static,
    metrics: Arc<Metrics>,
) {
    let mut tasks = JoinSet::new();
    while let Some(request) = requests.recv().await {
        while tasks.try_join_next().is_some() {}
        while tasks.len() >= MAX_PREEMPTIONS_AT_ONCE {
            tasks.join_next().await;
        }
        let (api, recorder, release, activate, done, metrics) = (
            calls.clone(),
            recorder.clone(),
            release.clone(),
            activate.clone(),
            done.clone(),
            metrics.clone(),
        );
        tasks.spawn(async move {
            let start = Instant::now();
            let preemptor = request.preemptor.clone();
            let outcome = carry_out(&api, &request, &recorder, FIRST_RETRY_WAIT, move || {
                release(&preemptor)
            })
            .await;
            let result = if outcome.succeeded {
                GOROUTINE_SUCCESS
            } else {
                GOROUTINE_ERROR
            };
            metrics.preemption_carried_out(result, start.elapsed());
            done(&request.preemptor, outcome.succeeded);
            if !outcome.succeeded || !outcome.wakes_preemptor {
                activate(&request.preemptor);
            }
        });
    }
    let all = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_WAIT, all).await.is_err() {
        tracing::warn!("stopping with preemptions still being carried out");
    }
}

/// The calls a preemption makes, so that tests can answer them.
pub trait Calls: Sync {
    /// Merges `patch` into the pod's status (strategic merge patch of `pods/status`).
    fn patch_status(
        &self,
        pod: &PodRef,
        patch: &serde_json::Value,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;
    /// Deletes the pod, on the condition that its uid is still `pod.uid`.
    fn delete(&self, pod: &PodRef) -> impl Future<Output = Result<(), kube::Error>> + Send;
}

/// The calls, made to the API server.
#[derive(Clone)]
pub struct PodApi(pub Client);

impl Calls for PodApi {
    async fn patch_status(
        &self,
        pod: &PodRef,
        patch: &serde_json::Value,
    ) -> Result<(), kube::Error> {
        Api::<Pod>::namespaced(self.0.clone(), &pod.namespace)
            .patch_status(&pod.name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .map(drop)
    }

    async fn delete(&self, pod: &PodRef) -> Result<(), kube::Error> {
        let params = DeleteParams {
            preconditions: (!pod.uid.is_empty()).then(|| Preconditions {
                uid: Some(pod.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        Api::<Pod>::namespaced(self.0.clone(), &pod.namespace)
            .delete(&pod.name, &params)
            .await
            .map(drop)
    }
}

/// How a preemption's calls went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Every call succeeded (or found its pod gone).
    pub succeeded: bool,
    /// The last victim was deleted after `release`, so its deletion's event wakes the
    /// preemptor (or there was no victim to wait for).
    pub wakes_preemptor: bool,
}

/// What became of one victim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Evicted {
    /// Deleted now.
    Deleted,
    /// Gone already (deleted, or replaced by a pod of the same name).
    Gone,
    /// A call failed for good.
    Failed,
}

/// Writes the preemptor's nomination, clears the nominations of the pods of lower priority,
/// evicts the victims but the last, calls `release` (the preemptor may be woken from now
/// on), then evicts the last victim. Nothing is evicted unless the nomination was written:
/// the nominations on the API server are what a restarted gantry, or the next leader, goes
/// by, and a victim evicted for a preemptor no one knows to be nominated leaves room that
/// others take, so that the preemptor evicts again. A call that fails for
/// a reason that may pass is tried again after `first_wait` ([`FIRST_RETRY_WAIT`]), then
/// after waits [`RETRY_FACTOR`] times longer.
pub async fn carry_out(
    calls: &impl Calls,
    request: &PreemptRequest,
    recorder: &Recorder,
    first_wait: Duration,
    release: impl FnOnce(),
) -> Outcome {
    let preemptor = request.preemptor.display();
    tracing::debug!(%preemptor, node = %request.node, victims = request.victims.len(), "carrying a preemption out");
    let nominate = nomination(&request.preemptor, &request.node);
    match retried(first_wait, || {
        calls.patch_status(&request.preemptor, &nominate)
    })
    .await
    {
        Ok(()) => {}
        Err(e) if is_not_found(&e) || is_replaced(&e) => {
            tracing::debug!(%preemptor, "preemptor gone; nothing evicted");
            release();
            return Outcome {
                succeeded: true,
                wakes_preemptor: true,
            };
        }
        Err(e) => {
            tracing::warn!(%preemptor, node = %request.node, error = %e, "cannot write the preemptor's nominated node; nothing evicted");
            release();
            return Outcome {
                succeeded: false,
                wakes_preemptor: false,
            };
        }
    }
    let mut ok = true;
    for pod in &request.denominated {
        let clear = json!({"status": {"nominatedNodeName": null}});
        match retried(first_wait, || calls.patch_status(pod, &clear)).await {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => {
                tracing::warn!(pod = %pod.display(), %preemptor, node = %request.node, error = %e, "cannot clear the nominated node of a pod of lower priority");
                ok = false;
            }
        }
    }
    let Some((last, others)) = request.victims.split_last() else {
        release();
        return Outcome {
            succeeded: ok,
            wakes_preemptor: true,
        };
    };
    // The futures are made before the stream, not by a closure of its (whose borrow the
    // compiler cannot prove general enough for a spawned task).
    let evictions: Vec<_> = others
        .iter()
        .map(|victim| evict(calls, request, victim, recorder, first_wait))
        .collect();
    let evictions = futures::stream::iter(evictions)
        .buffer_unordered(MAX_PARALLEL_EVICTIONS)
        .collect::<Vec<Evicted>>()
        .await;
    release();
    let last = evict(calls, request, last, recorder, first_wait).await;
    Outcome {
        succeeded: ok && last != Evicted::Failed && !evictions.contains(&Evicted::Failed),
        wakes_preemptor: last == Evicted::Deleted,
    }
}

/// Evicts one victim: its `DisruptionTarget` condition, its deletion, its `Preempted`
/// event.
async fn evict(
    calls: &impl Calls,
    request: &PreemptRequest,
    victim: &Victim,
    recorder: &Recorder,
    first_wait: Duration,
) -> Evicted {
    let (pod, preemptor) = (&victim.pod, request.preemptor.display());
    if !victim.marked {
        let patch = disruption_target(pod, &request.profile, Timestamp::now());
        match retried(first_wait, || calls.patch_status(pod, &patch)).await {
            Ok(()) => {}
            Err(e) if is_not_found(&e) || is_replaced(&e) => {
                tracing::debug!(victim = %pod.display(), %preemptor, "victim already gone");
                return Evicted::Gone;
            }
            Err(e) => {
                tracing::warn!(victim = %pod.display(), %preemptor, node = %request.node, error = %e, "cannot set the DisruptionTarget condition of a victim; not evicted");
                return Evicted::Failed;
            }
        }
    }
    match retried(first_wait, || calls.delete(pod)).await {
        Ok(()) => {}
        // A conflict: the uid precondition failed, the pod was replaced.
        Err(e) if is_not_found(&e) || status_code(&e) == Some(409) => {
            tracing::debug!(victim = %pod.display(), %preemptor, "victim already gone");
            return Evicted::Gone;
        }
        Err(e) => {
            tracing::warn!(victim = %pod.display(), %preemptor, node = %request.node, error = %e, "cannot delete a victim");
            return Evicted::Failed;
        }
    }
    tracing::info!(victim = %pod.display(), %preemptor, node = %request.node, "preempted");
    recorder.record(Record::Preempted {
        pod: pod.clone(),
        preemptor: request.preemptor.clone(),
        profile: request.profile.clone(),
        node: request.node.clone(),
    });
    Evicted::Deleted
}

/// The status patch that nominates the preemptor `pod` to `node`, naming its uid (so a pod
/// of the same name that replaced it is not nominated).
pub fn nomination(pod: &PodRef, node: &str) -> serde_json::Value {
    let mut patch = json!({"status": {"nominatedNodeName": node}});
    if !pod.uid.is_empty() {
        patch["metadata"] = json!({"uid": pod.uid});
    }
    patch
}

/// The status patch that marks `pod` as a victim of a preemption by `profile`, as
/// kube-scheduler words it. It names the pod's uid, which the API server refuses to change
/// (so a pod of the same name that replaced the victim is not marked).
pub fn disruption_target(pod: &PodRef, profile: &str, now: Timestamp) -> serde_json::Value {
    let mut patch = json!({"status": {"conditions": [{
        "type": DISRUPTION_TARGET,
        "status": "True",
        "reason": PREEMPTION_BY_SCHEDULER,
        "message": format!("{profile}: preempting to accommodate a higher priority pod"),
        "lastTransitionTime": Time(now),
    }]}});
    if !pod.uid.is_empty() {
        patch["metadata"] = json!({"uid": pod.uid});
    }
    patch
}

/// Runs `call` until it succeeds, fails for good, or has been tried [`MAX_TRIES`] times,
/// waiting `first_wait` before the second try.
async fn retried<F, Fut>(first_wait: Duration, mut call: F) -> Result<(), kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), kube::Error>>,
{
    let mut wait = first_wait;
    let mut tries = 1;
    loop {
        match call().await {
            Err(e) if tries < MAX_TRIES && may_pass(&e) => {
                tracing::debug!(error = %e, tries, "preemption call failed; retrying");
                tokio::time::sleep(wait).await;
                wait *= RETRY_FACTOR;
                tries += 1;
            }
            done => return done,
        }
    }
}

fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    status_code(e) == Some(404)
}

/// The API server refused a patch naming another uid than the pod's: the pod of that name
/// is another one now.
fn is_replaced(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) if s.code == 422 => s
            .details
            .as_ref()
            .is_some_and(|d| d.causes.iter().any(|c| c.field == "metadata.uid")),
        _ => false,
    }
}

/// A failure that may pass: the API server overloaded or failing, or no answer from it.
fn may_pass(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Mutex;

    /// Retries a millisecond apart.
    const FAST: Duration = Duration::from_millis(1);

    fn pod(name: &str) -> PodRef {
        PodRef {
            namespace: "ns".to_string(),
            name: name.to_string(),
            uid: format!("uid-{name}"),
        }
    }

    fn api_error(code: u16, field: Option<&str>) -> kube::Error {
        let details = field.map(|f| kube::core::response::StatusDetails {
            name: String::new(),
            group: String::new(),
            kind: "Pod".to_string(),
            uid: String::new(),
            causes: vec![kube::core::response::StatusCause {
                reason: "FieldValueInvalid".to_string(),
                message: "field is immutable".to_string(),
                field: f.to_string(),
            }],
            retry_after_seconds: 0,
        });
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            message: format!("code {code}"),
            details,
            ..Default::default()
        }))
    }

    /// A call: the pod's name and the kind of call.
    type Call = (String, &'static str);

    /// Answers calls from a script per pod and call kind (the last answer repeats), and
    /// records every call.
    #[derive(Default)]
    struct Script {
        /// Per call, the status codes to answer in turn (None: success).
        answers: Mutex<HashMap<Call, Vec<Option<u16>>>>,
        calls: Mutex<Vec<(String, &'static str)>>,
    }

    impl Script {
        /// `pod`'s `kind` calls answer `codes` in turn (None: success).
        fn answer(self, pod: &str, kind: &'static str, codes: &[Option<u16>]) -> Self {
            self.answers
                .lock()
                .unwrap()
                .insert((pod.to_string(), kind), codes.to_vec());
            self
        }

        fn next(
            &self,
            pod: &PodRef,
            kind: &'static str,
            field: Option<&str>,
        ) -> Result<(), kube::Error> {
            self.calls.lock().unwrap().push((pod.name.clone(), kind));
            let mut answers = self.answers.lock().unwrap();
            let script = answers.entry((pod.name.clone(), kind)).or_default();
            let code = if script.len() > 1 {
                script.remove(0)
            } else {
                script.first().copied().flatten()
            };
            match code {
                None => Ok(()),
                Some(code) => Err(api_error(code, field)),
            }
        }

        fn calls(&self) -> Vec<(String, &'static str)> {
            self.calls.lock().unwrap().clone()
        }

        /// The preemptor's release, recorded among the calls.
        fn release(&self) {
            self.calls
                .lock()
                .unwrap()
                .push(("vip".to_string(), "release"));
        }
    }

    const DONE: Outcome = Outcome {
        succeeded: true,
        wakes_preemptor: true,
    };

    impl Calls for Script {
        async fn patch_status(
            &self,
            pod: &PodRef,
            patch: &serde_json::Value,
        ) -> Result<(), kube::Error> {
            let kind = if patch["status"]["conditions"].is_array() {
                "mark"
            } else if patch["status"]["nominatedNodeName"].is_string() {
                assert_eq!(patch, &nomination(pod, "n1"));
                "nominate"
            } else {
                assert_eq!(patch, &json!({"status": {"nominatedNodeName": null}}));
                "denominate"
            };
            self.next(pod, kind, Some("metadata.uid"))
        }

        async fn delete(&self, pod: &PodRef) -> Result<(), kube::Error> {
            self.next(pod, "delete", None)
        }
    }

    fn request(victims: &[(&str, bool)], denominated: &[&str]) -> PreemptRequest {
        PreemptRequest {
            preemptor: pod("vip"),
            profile: "gantry".to_string(),
            node: "n1".into(),
            victims: victims
                .iter()
                .map(|(name, marked)| Victim {
                    pod: pod(name),
                    marked: *marked,
                })
                .collect(),
            denominated: denominated.iter().map(|n| pod(n)).collect(),
        }
    }

    fn preempted(records: &mut mpsc::UnboundedReceiver<Record>) -> Vec<String> {
        let mut names = Vec::new();
        while let Ok(r) = records.try_recv() {
            match r {
                Record::Preempted {
                    pod,
                    preemptor,
                    node,
                    ..
                } => {
                    assert_eq!((preemptor.name.as_str(), &*node), ("vip", "n1"));
                    names.push(pod.name);
                }
                other => panic!("unexpected record {other:?}"),
            }
        }
        names.sort();
        names
    }

    #[tokio::test]
    async fn nominations_are_cleared_then_each_victim_is_marked_deleted_and_reported() {
        let script = Script::default();
        let (recorder, mut records) = Recorder::channel();
        let req = request(&[("a", false), ("b", true)], &["low"]);
        let outcome = carry_out(&script, &req, &recorder, FAST, || script.release()).await;
        assert_eq!(outcome, DONE);
        let calls = script.calls();
        assert_eq!(calls[0], ("vip".to_string(), "nominate"));
        assert_eq!(calls[1], ("low".to_string(), "denominate"));
        let at = |call: (&str, &str)| calls.iter().position(|(n, k)| (n.as_str(), *k) == call);
        assert!(at(("a", "delete")) < at(("vip", "release")));
        assert!(
            at(("vip", "release")) < at(("b", "delete")),
            "released before the last victim is evicted: {calls:?}"
        );
        let of = |name: &str| -> Vec<&'static str> {
            calls
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, k)| *k)
                .collect()
        };
        assert_eq!(of("a"), ["mark", "delete"]);
        assert_eq!(of("b"), ["delete"], "already marked");
        assert_eq!(preempted(&mut records), ["a", "b"]);
    }

    #[tokio::test]
    async fn victims_found_gone_are_no_error_and_get_no_event() {
        let script = Script::default()
            .answer("deleted", "mark", &[Some(404)])
            .answer("replaced", "mark", &[Some(422)])
            .answer("gone-since", "delete", &[Some(404)])
            .answer("recreated", "delete", &[Some(409)])
            .answer("flaky", "delete", &[Some(503), Some(429), None]);
        let (recorder, mut records) = Recorder::channel();
        let req = request(
            &[
                ("deleted", false),
                ("replaced", false),
                ("gone-since", false),
                ("recreated", false),
                ("flaky", false),
            ],
            &["gone"],
        );
        let script = script.answer("gone", "denominate", &[Some(404)]);
        let outcome = carry_out(&script, &req, &recorder, FAST, || script.release()).await;
        assert_eq!(outcome, DONE);
        assert_eq!(preempted(&mut records), ["flaky"]);
        let deletes = script
            .calls()
            .iter()
            .filter(|c| c == &&("flaky".to_string(), "delete"))
            .count();
        assert_eq!(deletes, 3, "retried while the failure may pass");
        let calls = script.calls();
        assert!(!calls.contains(&("deleted".to_string(), "delete")));
        assert!(!calls.contains(&("replaced".to_string(), "delete")));
    }

    #[tokio::test]
    async fn a_call_failing_for_good_fails_the_preemption_but_not_the_other_victims() {
        let script = Script::default()
            .answer("forbidden", "delete", &[Some(403)])
            .answer("down", "mark", &[Some(500)])
            .answer("low", "denominate", &[Some(500)]);
        let (recorder, mut records) = Recorder::channel();
        let req = request(
            &[("forbidden", false), ("down", false), ("ok", false)],
            &["low"],
        );
        let outcome = carry_out(&script, &req, &recorder, FAST, || script.release()).await;
        assert_eq!(
            outcome,
            Outcome {
                succeeded: false,
                wakes_preemptor: true
            }
        );
        assert_eq!(preempted(&mut records), ["ok"]);
        let calls = script.calls();
        let count = |name: &str, kind| calls.iter().filter(|c| c.0 == name && c.1 == kind).count();
        assert_eq!(count("forbidden", "delete"), 1, "a refusal is not retried");
        assert_eq!(count("down", "mark"), MAX_TRIES as usize);
        assert_eq!(count("down", "delete"), 0, "not deleted unmarked");
        assert_eq!(count("low", "denominate"), MAX_TRIES as usize);
    }

    #[tokio::test]
    async fn a_last_victim_gone_already_wakes_no_one_and_no_victim_releases_at_once() {
        let script = Script::default().answer("last", "delete", &[Some(404)]);
        let (recorder, _records) = Recorder::channel();
        let req = request(&[("first", false), ("last", false)], &[]);
        let outcome = carry_out(&script, &req, &recorder, FAST, || script.release()).await;
        assert_eq!(
            outcome,
            Outcome {
                succeeded: true,
                wakes_preemptor: false
            },
            "the preemptor is activated instead"
        );

        let script = Script::default();
        let req = request(&[], &["low"]);
        let outcome = carry_out(&script, &req, &recorder, FAST, || script.release()).await;
        assert_eq!(outcome, DONE);
        assert_eq!(
            script.calls(),
            [
                ("vip".to_string(), "nominate"),
                ("low".to_string(), "denominate"),
                ("vip".to_string(), "release")
            ]
        );
    }

    #[tokio::test]
    async fn nothing_is_evicted_unless_the_nomination_is_written() {
        let (recorder, mut records) = Recorder::channel();
        let req = request(&[("a", false), ("b", false)], &["low"]);
        let script = Script::default().answer("vip", "nominate", &[Some(500)]);
        let outcome = carry_out(&script, &req, &recorder, FAST, || script.release()).await;
        assert_eq!(
            outcome,
            Outcome {
                succeeded: false,
                wakes_preemptor: false
            },
            "the preemptor is tried again"
        );
        let nominated = vec![("vip".to_string(), "nominate"); MAX_TRIES as usize];
        let released = [("vip".to_string(), "release")];
        assert_eq!(script.calls(), [nominated, released.to_vec()].concat());
        assert!(preempted(&mut records).is_empty());

        // A preemptor gone (or replaced) needs nothing evicted.
        let script = Script::default().answer("vip", "nominate", &[Some(404)]);
        let outcome = carry_out(&script, &req, &recorder, FAST, || script.release()).await;
        assert_eq!(outcome, DONE);
        assert_eq!(
            script.calls(),
            [("vip".to_string(), "nominate"), released[0].clone()]
        );
    }

    #[test]
    fn the_condition_is_kube_schedulers_and_names_the_uid() {
        let at = Timestamp::from_second(1_000).unwrap();
        assert_eq!(
            disruption_target(&pod("a"), "gantry", at),
            json!({
                "metadata": {"uid": "uid-a"},
                "status": {"conditions": [{
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "PreemptionByScheduler",
                    "message": "gantry: preempting to accommodate a higher priority pod",
                    "lastTransitionTime": "1970-01-01T00:16:40Z",
                }]}
            })
        );
        assert!(is_replaced(&api_error(422, Some("metadata.uid"))));
        assert!(!is_replaced(&api_error(422, Some("status.conditions"))));
        assert!(may_pass(&api_error(503, None)) && may_pass(&api_error(429, None)));
        assert!(!may_pass(&api_error(403, None)));
    }

    /// Holds every nomination until the gate opens, recording the preemptors whose
    /// preemption has started; every other call succeeds at once.
    #[derive(Clone)]
    struct Gate {
        started: Arc<Mutex<Vec<String>>>,
        open: tokio::sync::watch::Receiver<bool>,
    }

    impl Calls for Gate {
        async fn patch_status(
            &self,
            pod: &PodRef,
            patch: &serde_json::Value,
        ) -> Result<(), kube::Error> {
            if patch["status"]["nominatedNodeName"].is_string() {
                self.started.lock().unwrap().push(pod.name.clone());
                let mut open = self.open.clone();
                open.wait_for(|o| *o).await.expect("gate");
            }
            Ok(())
        }

        async fn delete(&self, _: &PodRef) -> Result<(), kube::Error> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn preemptions_beyond_the_bound_wait_their_turn_in_order() {
        let (open, gate) = tokio::sync::watch::channel(false);
        let gate = Gate {
            started: Arc::default(),
            open: gate,
        };
        let (requests, received) = mpsc::unbounded_channel();
        let (recorder, _records) = Recorder::channel();
        let finished = Arc::new(Mutex::new(Vec::new()));
        let done = {
            let finished = finished.clone();
            move |p: &PodRef, ok: bool| finished.lock().unwrap().push((p.name.clone(), ok))
        };
        let runner = tokio::spawn(run(
            gate.clone(),
            received,
            recorder,
            |_: &PodRef| {},
            |_: &PodRef| {},
            done,
            Arc::new(Metrics::new()),
        ));
        let names: Vec<String> = (0..MAX_PREEMPTIONS_AT_ONCE + 3)
            .map(|i| format!("p{i:03}"))
            .collect();
        for name in &names {
            let mut r = request(&[(&format!("victim-of-{name}"), false)], &[]);
            r.preemptor = pod(name);
            requests.send(r).unwrap();
        }
        let started = || gate.started.lock().unwrap().clone();
        tokio::time::timeout(Duration::from_secs(10), async {
            while started().len() < MAX_PREEMPTIONS_AT_ONCE {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("the first preemptions started");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut first = started();
        first.sort();
        assert_eq!(first, names[..MAX_PREEMPTIONS_AT_ONCE], "the rest wait");

        open.send(true).unwrap();
        drop(requests);
        runner.await.unwrap();
        assert_eq!(started().len(), names.len());
        assert_eq!(
            started()[MAX_PREEMPTIONS_AT_ONCE..],
            names[MAX_PREEMPTIONS_AT_ONCE..]
        );
        let finished = finished.lock().unwrap();
        assert_eq!(finished.len(), names.len());
        assert!(finished.iter().all(|(_, ok)| *ok));
    }
}
