//! HAMi's node lock, taken before a pod with HAMi devices is bound, as HAMi's scheduler takes
//! it: the node annotation `hami.io/mutex.lock` names the pod whose devices the node's device
//! plugin is to allocate (the device plugin finds the pod by it, and releases it once the
//! allocation succeeded or failed), so one pod at a time is bound there. A lock older than
//! HAMi's expiry, or held for a pod that no longer exists, is taken over; one held for another
//! live pod is waited for, off the scheduling thread, up to HAMi's retry timeout.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::model::hami;

/// How old a lock may be before it is taken over (HAMi's `NodeLockTimeout`).
pub const LOCK_EXPIRY: Duration = Duration::from_secs(5 * 60);
/// How long a lock held for another pod is waited for (HAMi's `--node-lock-retry-timeout`).
pub const LOCK_WAIT: Duration = Duration::from_secs(28);
/// Between looks at a held lock (HAMi's).
const RETRY: Duration = Duration::from_millis(100);

/// The node lock for the pod `namespace/name`, taken now (seconds, as HAMi writes RFC 3339).
fn lock_value(now: Timestamp, namespace: &str, name: &str) -> String {
    let seconds = Timestamp::from_second(now.as_second()).unwrap_or(now);
    hami::node_lock(&seconds.to_string(), namespace, name)
}

/// What to do about the lock a node carries.
#[derive(Debug, PartialEq, Eq)]
enum Held {
    /// No lock, or one that may be taken over.
    Free,
    /// This pod's already.
    Ours,
    /// Another pod's, still valid: wait.
    Other(String),
}

/// Judges the lock `value` for the pod `namespace/name` at `now`; `holder_exists` says
/// whether the pod the lock names still exists.
fn judge(
    value: Option<&str>,
    namespace: &str,
    name: &str,
    now: Timestamp,
    holder_exists: impl FnOnce(&str, &str) -> bool,
) -> Result<Held, String> {
    let Some(value) = value else {
        return Ok(Held::Free);
    };
    let (time, ns, pod) = hami::parse_node_lock(value)
        .map_err(|e| format!("annotation {}: {e}", hami::NODE_LOCK_ANNOTATION))?;
    let taken: Timestamp = time.parse().map_err(|e| {
        format!(
            "annotation {}: time {time:?} is not RFC 3339: {e}",
            hami::NODE_LOCK_ANNOTATION
        )
    })?;
    let expiry = SignedDuration::try_from(LOCK_EXPIRY).unwrap_or(SignedDuration::MAX);
    if now.duration_since(taken) > expiry {
        return Ok(Held::Free);
    }
    if ns == namespace && pod == name {
        return Ok(Held::Ours);
    }
    if !ns.is_empty() && !pod.is_empty() && !holder_exists(ns, pod) {
        return Ok(Held::Free);
    }
    Ok(Held::Other(format!("{ns}/{pod}")))
}

/// Takes the lock on `node` for the pod `namespace/name`, waiting up to [`LOCK_WAIT`] for a
/// lock another pod holds. The lock is written on the condition that the node did not
/// change since it was read, so two schedulers never both take it.
pub async fn lock(client: &Client, node: &str, namespace: &str, name: &str) -> Result<(), String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let deadline = tokio::time::Instant::now() + LOCK_WAIT;
    loop {
        let current = nodes
            .get(node)
            .await
            .map_err(|e| format!("reading node {node} for HAMi's lock: {e}"))?;
        let value = current
            .annotations()
            .get(hami::NODE_LOCK_ANNOTATION)
            .cloned();
        let exists = holder_exists(client, value.as_deref()).await;
        let held = judge(
            value.as_deref(),
            namespace,
            name,
            Timestamp::now(),
            |_, _| exists,
        )?;
        let waiting_for = match held {
            Held::Ours => return Ok(()),
            Held::Other(holder) => holder,
            Held::Free => {
                let patch = json!({"metadata": {
                    "resourceVersion": current.resource_version(),
                    "annotations": {
                        hami::NODE_LOCK_ANNOTATION: lock_value(Timestamp::now(), namespace, name),
                    },
                }});
                match nodes
                    .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => return Ok(()),
                    // Changed since read: look again.
                    Err(kube::Error::Api(s)) if s.code == 409 => continue,
                    Err(e) => return Err(format!("taking HAMi's lock on node {node}: {e}")),
                }
            }
        };
        if tokio::time::Instant::now() + RETRY > deadline {
            return Err(format!(
                "node {node} is locked by HAMi ({}) for pod {waiting_for}, whose devices are \
                 being allocated, for longer than {}s",
                hami::NODE_LOCK_ANNOTATION,
                LOCK_WAIT.as_secs()
            ));
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// Whether the pod a lock value names still exists (true when it cannot be told: a lock is
/// only taken over when its holder is known to be gone).
async fn holder_exists(client: &Client, value: Option<&str>) -> bool {
    let Some((_, ns, name)) = value.and_then(|v| hami::parse_node_lock(v).ok()) else {
        return true;
    };
    if ns.is_empty() || name.is_empty() {
        return true;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    !matches!(pods.get_opt(name).await, Ok(None))
}

/// Gives the lock on `node` back if the pod `namespace/name` holds it (its binding failed:
/// no device plugin will release it).
pub async fn release(client: &Client, node: &str, namespace: &str, name: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    let Ok(current) = nodes.get(node).await else {
        return;
    };
    let ours = current
        .annotations()
        .get(hami::NODE_LOCK_ANNOTATION)
        .and_then(|v| hami::parse_node_lock(v).ok())
        .is_some_and(|(_, ns, pod)| ns == namespace && pod == name);
    if !ours {
        return;
    }
    let patch = json!({"metadata": {
        "resourceVersion": current.resource_version(),
        "annotations": { hami::NODE_LOCK_ANNOTATION: null },
    }});
    if let Err(e) = nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        tracing::warn!(%node, error = %e, "cannot give HAMi's node lock back; it expires in 5 minutes");
    }
}

/// The annotations HAMi's scheduler writes on a pod as it binds it: the allocation starts
/// (`hami.io/bind-phase: allocating`), at `now` (Unix seconds, also as the time the devices
/// were chosen).
pub fn binding_annotations(now: Timestamp) -> Vec<(String, String)> {
    let seconds = now.as_second().to_string();
    vec![
        (
            hami::BIND_PHASE_ANNOTATION.to_string(),
            hami::BIND_ALLOCATING.to_string(),
        ),
        (hami::BIND_TIME_ANNOTATION.to_string(), seconds.clone()),
        (hami::ASSIGNED_TIME_ANNOTATION.to_string(), seconds),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn locks_are_written_as_hami_writes_them() {
        assert_eq!(
            lock_value(at("2024-01-23T04:31:04.5Z"), "default", "train"),
            "2024-01-23T04:31:04Z,default,train"
        );
        let b = binding_annotations(at("2024-01-12T10:19:56Z"));
        assert_eq!(
            b[0],
            ("hami.io/bind-phase".to_string(), "allocating".to_string())
        );
        assert_eq!(
            b[1],
            ("hami.io/bind-time".to_string(), "1705054796".to_string())
        );
    }

    #[test]
    fn a_lock_is_waited_for_only_while_valid_and_its_pod_exists() {
        let now = at("2024-01-23T04:40:00Z");
        let alive = |_: &str, _: &str| true;
        let gone = |_: &str, _: &str| false;
        assert_eq!(judge(None, "ns", "p", now, alive), Ok(Held::Free));
        let recent = "2024-01-23T04:39:00Z,ns,other";
        assert_eq!(
            judge(Some(recent), "ns", "p", now, alive),
            Ok(Held::Other("ns/other".to_string()))
        );
        assert_eq!(judge(Some(recent), "ns", "p", now, gone), Ok(Held::Free));
        assert_eq!(
            judge(Some("2024-01-23T04:39:00Z,ns,p"), "ns", "p", now, alive),
            Ok(Held::Ours)
        );
        assert_eq!(
            judge(Some("2024-01-23T04:30:00Z,ns,other"), "ns", "p", now, alive),
            Ok(Held::Free),
            "older than five minutes"
        );
        assert!(
            judge(Some("yesterday,ns,other"), "ns", "p", now, alive)
                .unwrap_err()
                .contains("is not RFC 3339")
        );
    }
}
