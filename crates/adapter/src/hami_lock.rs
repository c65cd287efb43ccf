//! HAMi's node lock, taken before a pod with HAMi devices is bound, as HAMi's scheduler takes
//! it: the node annotation `hami.io/mutex.lock` names the pod whose devices the node's device
//! plugin is to allocate (the device plugin finds the pod by it, and releases it once the
//! allocation succeeded or failed), so one pod at a time is bound there. A lock older than
//! HAMi's expiry, or held for a pod that no longer exists, is taken over; one held for another
//! live pod is waited for, off the scheduling thread, up to HAMi's retry timeout. Unlike
//! HAMi, a lock that cannot be read is taken over too once the API server's record of its
//! write is older than the expiry: HAMi would never take that node again.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use gantry_core::model::hami;

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
    /// A lock whose value cannot be read (or is dated in the future), written less than
    /// [`LOCK_EXPIRY`] ago: wait, as for another pod's.
    Unreadable(String),
}

impl Held {
    /// Who holds the lock, as the scheduler is told: a pod's `namespace/name`, or why the
    /// lock cannot be read.
    fn holder(&self) -> Option<&str> {
        match self {
            Held::Other(holder) | Held::Unreadable(holder) => Some(holder),
            Held::Free | Held::Ours => None,
        }
    }
}

/// Judges the lock `value` for the pod `namespace/name` at `now`; `holder_exists` says
/// whether the pod the lock names still exists. `written` is when the API server last
/// recorded a write of the lock: it stands in for the lock's own time when that cannot be
/// read, so that a lock HAMi would wait on for ever is taken over after HAMi's expiry too.
fn judge(
    value: Option<&str>,
    namespace: &str,
    name: &str,
    now: Timestamp,
    written: Option<Timestamp>,
    holder_exists: impl FnOnce(&str, &str) -> bool,
) -> Held {
    let Some(value) = value else {
        return Held::Free;
    };
    let expired = |t: Timestamp| now.duration_since(t) > expiry();
    let (taken, ns, pod) = match read_lock(value, now) {
        Ok(lock) => lock,
        Err(why) if written.is_some_and(expired) => {
            tracing::info!(%why, "taking over an unreadable HAMi node lock older than HAMi's expiry");
            return Held::Free;
        }
        Err(why) => return Held::Unreadable(why),
    };
    if expired(taken) {
        return Held::Free;
    }
    if ns == namespace && pod == name {
        return Held::Ours;
    }
    if !ns.is_empty() && !pod.is_empty() && !holder_exists(ns, pod) {
        return Held::Free;
    }
    Held::Other(format!("{ns}/{pod}"))
}

/// [`LOCK_EXPIRY`] as a span between timestamps.
fn expiry() -> SignedDuration {
    SignedDuration::try_from(LOCK_EXPIRY).unwrap_or(SignedDuration::MAX)
}

/// The time and holder of the lock `value`, or why it cannot be read: not HAMi's form, a time
/// that is not RFC 3339, or a time further in the future than HAMi's expiry (no clock is
/// that far off).
fn read_lock(value: &str, now: Timestamp) -> Result<(Timestamp, &str, &str), String> {
    let annotation = hami::NODE_LOCK_ANNOTATION;
    let (time, ns, pod) =
        hami::parse_node_lock(value).map_err(|e| format!("annotation {annotation}: {e}"))?;
    let taken: Timestamp = time
        .parse()
        .map_err(|e| format!("annotation {annotation}: time {time:?} is not RFC 3339: {e}"))?;
    if taken.duration_since(now) > expiry() {
        return Err(format!(
            "annotation {annotation}: time {time:?} is in the future"
        ));
    }
    Ok((taken, ns, pod))
}

/// When the API server last recorded a write of the node's lock annotation: the newest time
/// of the field managers that own it, or, when none is recorded as owning it, of any (a
/// write that changed the node happened no earlier than the lock's).
fn lock_written(node: &Node) -> Option<Timestamp> {
    let entries = node.metadata.managed_fields.as_deref().unwrap_or_default();
    let field = format!(
        "/f:metadata/f:annotations/f:{}",
        hami::NODE_LOCK_ANNOTATION
            .replace('~', "~0")
            .replace('/', "~1")
    );
    let owns = |e: &&ManagedFieldsEntry| {
        e.fields_v1
            .as_ref()
            .is_some_and(|f| f.0.pointer(&field).is_some())
    };
    let newest = |of: &mut dyn Iterator<Item = &ManagedFieldsEntry>| {
        of.filter_map(|e| e.time.as_ref().map(|t| t.0)).max()
    };
    newest(&mut entries.iter().filter(owns)).or_else(|| newest(&mut entries.iter()))
}

/// Takes the lock on `node` for the pod `namespace/name`, waiting up to [`LOCK_WAIT`] for a
/// lock another pod holds (or one that cannot be read). The lock is written on the condition
/// that the node did not change since it was read, so two schedulers never both take it.
/// `seen` hears who holds the lock when it is first found held (and is then told `None`
/// once it is taken), so that other pods can avoid the node meanwhile.
pub async fn lock(
    client: &Client,
    node: &str,
    namespace: &str,
    name: &str,
    seen: &(dyn Fn(Option<&str>) + Send + Sync),
) -> Result<(), String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let deadline = tokio::time::Instant::now() + LOCK_WAIT;
    let mut told = false;
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
            lock_written(&current),
            |_, _| exists,
        );
        let taken = match held {
            Held::Ours => Ok(()),
            Held::Free => take(&nodes, &current, namespace, name).await,
            Held::Other(_) | Held::Unreadable(_) => Err(None),
        };
        match taken {
            Ok(()) => {
                if told {
                    seen(None);
                }
                return Ok(());
            }
            Err(Some(e)) => return Err(format!("taking HAMi's lock on node {node}: {e}")),
            // Changed since read, or held: look again.
            Err(None) => {}
        }
        if let Some(holder) = held.holder()
            && !told
        {
            seen(Some(holder));
            told = true;
        }
        if tokio::time::Instant::now() + RETRY > deadline {
            let annotation = hami::NODE_LOCK_ANNOTATION;
            let wait = LOCK_WAIT.as_secs();
            return Err(match held {
                Held::Unreadable(why) => format!(
                    "node {node} carries a HAMi lock that cannot be read ({why}), written less \
                     than {}s ago; waited {wait}s",
                    LOCK_EXPIRY.as_secs()
                ),
                _ => format!(
                    "node {node} is locked by HAMi ({annotation}) for pod {}, whose devices are \
                     being allocated, for longer than {wait}s",
                    held.holder().unwrap_or_default()
                ),
            });
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// Writes the lock for the pod `namespace/name` on the node as read; `Err(None)` when the
/// node changed since (look again).
async fn take(
    nodes: &Api<Node>,
    current: &Node,
    namespace: &str,
    name: &str,
) -> Result<(), Option<kube::Error>> {
    let patch = json!({"metadata": {
        "resourceVersion": current.resource_version(),
        "annotations": {
            hami::NODE_LOCK_ANNOTATION: lock_value(Timestamp::now(), namespace, name),
        },
    }});
    match nodes
        .patch(
            &current.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Err(None),
        Err(e) => Err(Some(e)),
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
        assert_eq!(judge(None, "ns", "p", now, None, alive), Held::Free);
        let recent = "2024-01-23T04:39:00Z,ns,other";
        assert_eq!(
            judge(Some(recent), "ns", "p", now, None, alive),
            Held::Other("ns/other".to_string())
        );
        assert_eq!(judge(Some(recent), "ns", "p", now, None, gone), Held::Free);
        assert_eq!(
            judge(
                Some("2024-01-23T04:39:00Z,ns,p"),
                "ns",
                "p",
                now,
                None,
                alive
            ),
            Held::Ours
        );
        assert_eq!(
            judge(
                Some("2024-01-23T04:30:00Z,ns,other"),
                "ns",
                "p",
                now,
                None,
                alive
            ),
            Held::Free,
            "older than five minutes"
        );
    }

    #[test]
    fn an_unreadable_lock_is_taken_over_once_its_write_is_older_than_the_expiry() {
        let now = at("2024-01-23T04:40:00Z");
        let alive = |_: &str, _: &str| true;
        let recently = Some(at("2024-01-23T04:39:00Z"));
        let long_ago = Some(at("2024-01-23T04:34:59Z"));
        for value in [
            "garbage",
            "yesterday,ns,other",
            "a,b",
            "2024-01-23T05:00:00Z,ns,other",
        ] {
            let held = judge(Some(value), "ns", "p", now, recently, alive);
            assert!(
                matches!(&held, Held::Unreadable(why) if why.starts_with("annotation hami.io/mutex.lock: ")),
                "{value}: {held:?}"
            );
            assert_eq!(judge(Some(value), "ns", "p", now, None, alive), held);
            assert_eq!(
                judge(Some(value), "ns", "p", now, long_ago, alive),
                Held::Free,
                "{value}"
            );
        }
        assert!(
            matches!(judge(Some("garbage"), "ns", "p", now, None, alive), Held::Unreadable(why) if why.contains("is not RFC 3339"))
        );
        assert!(
            matches!(judge(Some("2024-01-23T05:00:00Z,ns,other"), "ns", "p", now, None, alive), Held::Unreadable(why) if why.contains("in the future"))
        );
        // A lock dated a little ahead (a skewed clock) is read as it is.
        assert_eq!(
            judge(
                Some("2024-01-23T04:41:00Z,ns,other"),
                "ns",
                "p",
                now,
                None,
                alive
            ),
            Held::Other("ns/other".to_string())
        );
    }

    #[test]
    fn the_write_of_a_lock_is_dated_by_the_managers_that_own_it() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "managedFields": [
                {"manager": "kubelet", "operation": "Update", "subresource": "status",
                 "time": "2024-01-23T04:39:50Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:status": {}}},
                {"manager": "hami", "operation": "Update", "time": "2024-01-23T04:30:00Z",
                 "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:annotations": {"f:hami.io/mutex.lock": {}}}}},
            ]},
        }))
        .unwrap();
        assert_eq!(lock_written(&node), Some(at("2024-01-23T04:30:00Z")));
        let mut unowned = node.clone();
        unowned.metadata.managed_fields.as_mut().unwrap().pop();
        assert_eq!(lock_written(&unowned), Some(at("2024-01-23T04:39:50Z")));
        assert_eq!(lock_written(&Node::default()), None);
    }
}
