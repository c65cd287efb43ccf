//! Which scheduler a new pod goes to: the share that applies (pod annotation, then namespace
//! annotation, then the configuration), the pod's workload and the workload's bucket.
//!
//! The split is sticky per workload: every pod of one workload hashes to the same bucket, so
//! all of them go the same way, and a workload goes to gantry when its bucket is below the
//! share. Raising the share therefore only ever moves workloads towards gantry.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::Pod;

use super::config::{BUCKETS, DEFAULT_SCHEDULER, RolloutConfig, Share, ShareError};

/// The annotation (on a pod or a namespace) that overrides the share.
pub const ROLLOUT_ANNOTATION: &str = "gantry.io/rollout";
/// Another name accepted for [`ROLLOUT_ANNOTATION`], read after it.
pub const USE_NEW_SCHEDULER_ANNOTATION: &str = "scheduler.alpha.kubernetes.io/use-new-scheduler";
/// The annotations that set a share, in the order they are read on one object.
pub const SHARE_ANNOTATIONS: [&str; 2] = [ROLLOUT_ANNOTATION, USE_NEW_SCHEDULER_ANNOTATION];
/// The label the Deployment controller puts on its ReplicaSets' pods; the ReplicaSet's name
/// is `<deployment>-<this label's value>`.
pub const POD_TEMPLATE_HASH_LABEL: &str = "pod-template-hash";

/// The workload a pod belongs to: what the split is sticky for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Workload {
    /// The owner's kind (`Deployment`, `StatefulSet`, `Job`, ...), or `Pod` for a pod
    /// without a controller.
    pub kind: String,
    /// The namespace.
    pub namespace: String,
    /// The owner's name; for a pod without a controller its name, or its `generateName`
    /// when it has no name yet.
    pub name: String,
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
    }
}

impl Workload {
    /// The workload of `pod`, created in `namespace`: its controller (the `ownerReferences`
    /// entry with `controller: true`), with a ReplicaSet of a Deployment resolved to the
    /// Deployment (so that a rollout, which makes a new ReplicaSet, keeps the workload on
    /// its side); the pod itself when it has no controller.
    pub fn of(pod: &Pod, namespace: &str) -> Workload {
        let meta = &pod.metadata;
        let controller = meta
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true));
        let (kind, name) = match controller {
            Some(owner) => deployment_of(pod, &owner.kind, &owner.name)
                .map(|d| ("Deployment".to_string(), d.to_string()))
                .unwrap_or_else(|| (owner.kind.clone(), owner.name.clone())),
            None => (
                "Pod".to_string(),
                meta.name
                    .clone()
                    .filter(|n| !n.is_empty())
                    .or_else(|| meta.generate_name.clone())
                    .unwrap_or_default(),
            ),
        };
        Workload {
            kind,
            namespace: namespace.to_string(),
            name,
        }
    }

    /// The workload's bucket, 0..10000: the 64-bit FNV-1a hash of `kind/namespace/name`
    /// (UTF-8) modulo 10000. Stable across versions, processes and machines: changing it
    /// would move workloads between schedulers.
    pub fn bucket(&self) -> u16 {
        let mut h = Fnv1a::new();
        h.write(self.kind.as_bytes());
        h.write(b"/");
        h.write(self.namespace.as_bytes());
        h.write(b"/");
        h.write(self.name.as_bytes());
        (h.finish() % u64::from(BUCKETS)) as u16
    }
}

/// The Deployment behind a ReplicaSet owner: `<deployment>` when the owner is a ReplicaSet
/// named `<deployment>-<hash>` and the pod carries `pod-template-hash: <hash>`.
fn deployment_of<'a>(pod: &Pod, kind: &str, owner: &'a str) -> Option<&'a str> {
    if kind != "ReplicaSet" {
        return None;
    }
    let hash = pod.metadata.labels.as_ref()?.get(POD_TEMPLATE_HASH_LABEL)?;
    let deployment = owner.strip_suffix(hash.as_str())?.strip_suffix('-')?;
    (!hash.is_empty() && !deployment.is_empty()).then_some(deployment)
}

/// 64-bit FNV-1a (offset basis 0xcbf29ce484222325, prime 0x100000001b3).
struct Fnv1a(u64);

impl Fnv1a {
    fn new() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Where the share that applied came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// An annotation of the pod.
    Pod(&'static str),
    /// An annotation of the namespace.
    Namespace(&'static str),
    /// The configuration's `share`.
    Config,
}

impl Source {
    /// The metric label value: `pod`, `namespace` or `config`.
    pub fn level(self) -> &'static str {
        match self {
            Source::Pod(_) => "pod",
            Source::Namespace(_) => "namespace",
            Source::Config => "config",
        }
    }

    /// The annotation's name; empty for the configuration.
    pub fn annotation(self) -> &'static str {
        match self {
            Source::Pod(a) | Source::Namespace(a) => a,
            Source::Config => "",
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Pod(a) => write!(f, "pod annotation {a}"),
            Source::Namespace(a) => write!(f, "namespace annotation {a}"),
            Source::Config => f.write_str("configuration"),
        }
    }
}

/// Why a pod was left as it is without a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Its namespace is excluded by the configuration.
    ExcludedNamespace,
    /// It names a scheduler other than the default one: someone chose for it.
    OtherScheduler,
    /// It already names gantry's profile.
    AlreadyGantry,
}

impl Skip {
    /// The metric label value.
    pub fn reason(self) -> &'static str {
        match self {
            Skip::ExcludedNamespace => "excluded_namespace",
            Skip::OtherScheduler => "other_scheduler",
            Skip::AlreadyGantry => "already_gantry",
        }
    }
}

/// An annotation whose value is not a share; the next level applies instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidAnnotation {
    /// Which object carries it: a pod or a namespace.
    pub on: Source,
    /// Why it cannot be read.
    pub error: ShareError,
}

impl fmt::Display for InvalidAnnotation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "gantry rollout: ignoring {}: {}", self.on, self.error)
    }
}

/// Where a pod goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Left as it is.
    Skip(Skip),
    /// Decided by the split.
    Split {
        /// True: gantry's profile; false: the default scheduler.
        gantry: bool,
        /// The pod's workload.
        workload: Workload,
        /// Its bucket.
        bucket: u16,
        /// The share that applied.
        share: Share,
        /// Where that share came from.
        source: Source,
    },
}

/// The decision for one pod, with the annotations that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Where the pod goes.
    pub route: Route,
    /// Invalid share annotations met on the way (each was skipped).
    pub invalid: Vec<InvalidAnnotation>,
}

/// Decides for `pod`, created in `namespace`, whose annotations are `namespace_annotations`
/// (None when the namespace is unknown: then only the pod and the configuration count).
pub fn decide(
    config: &RolloutConfig,
    pod: &Pod,
    namespace: &str,
    namespace_annotations: Option<&BTreeMap<String, String>>,
) -> Decision {
    let skip = |s| Decision {
        route: Route::Skip(s),
        invalid: Vec::new(),
    };
    if config.excluded_namespaces.iter().any(|n| n == namespace) {
        return skip(Skip::ExcludedNamespace);
    }
    let scheduler = pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .unwrap_or("");
    if scheduler == config.scheduler_name {
        return skip(Skip::AlreadyGantry);
    }
    if !scheduler.is_empty() && scheduler != DEFAULT_SCHEDULER {
        return skip(Skip::OtherScheduler);
    }
    let mut invalid = Vec::new();
    let (share, source) = share_from(pod.metadata.annotations.as_ref(), Source::Pod, &mut invalid)
        .or_else(|| share_from(namespace_annotations, Source::Namespace, &mut invalid))
        .unwrap_or((config.share, Source::Config));
    let workload = Workload::of(pod, namespace);
    let bucket = workload.bucket();
    Decision {
        route: Route::Split {
            gantry: bucket < share.buckets(),
            workload,
            bucket,
            share,
            source,
        },
        invalid,
    }
}

/// The first valid share annotation of one object; invalid ones are recorded and skipped.
fn share_from(
    annotations: Option<&BTreeMap<String, String>>,
    on: fn(&'static str) -> Source,
    invalid: &mut Vec<InvalidAnnotation>,
) -> Option<(Share, Source)> {
    let annotations = annotations?;
    for name in SHARE_ANNOTATIONS {
        let Some(value) = annotations.get(name) else {
            continue;
        };
        match Share::parse(value) {
            Ok(share) => return Some((share, on(name))),
            Err(error) => invalid.push(InvalidAnnotation {
                on: on(name),
                error,
            }),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(share: &str) -> RolloutConfig {
        RolloutConfig {
            share: Share::parse(share).unwrap(),
            scheduler_name: "gantry".into(),
            excluded_namespaces: vec!["kube-system".into()],
        }
    }

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    fn owned(kind: &str, name: &str, labels: serde_json::Value) -> Pod {
        pod(serde_json::json!({
            "metadata": {
                "name": format!("{name}-x1"),
                "labels": labels,
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Other", "name": "not-the-controller", "uid": "0"},
                    {"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": "1", "controller": true}
                ]
            },
            "spec": {"containers": []}
        }))
    }

    fn workload(kind: &str, name: &str) -> Workload {
        Workload {
            kind: kind.into(),
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        let hash = |s: &str| {
            let mut h = Fnv1a::new();
            h.write(s.as_bytes());
            h.finish()
        };
        assert_eq!(hash(""), 0xcbf29ce484222325);
        assert_eq!(hash("a"), 0xaf63dc4c8601ec8c);
        assert_eq!(hash("foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn buckets_are_stable() {
        // Pinned: a change here moves running workloads between schedulers.
        let mut h = Fnv1a::new();
        h.write(b"Deployment/ns/web");
        assert_eq!(
            workload("Deployment", "web").bucket(),
            (h.finish() % 10_000) as u16
        );
        assert_eq!(workload("Deployment", "web").bucket(), 3661);
        assert_eq!(workload("StatefulSet", "db").bucket(), 9550);
    }

    #[test]
    fn the_controller_is_the_workload() {
        let p = owned("StatefulSet", "db", serde_json::json!({}));
        assert_eq!(Workload::of(&p, "ns"), workload("StatefulSet", "db"));
        let p = owned("Job", "backup-29000000", serde_json::json!({}));
        assert_eq!(Workload::of(&p, "ns"), workload("Job", "backup-29000000"));
    }

    #[test]
    fn a_replicaset_of_a_deployment_is_the_deployment() {
        let v1 = owned(
            "ReplicaSet",
            "web-5d8f7c9b4",
            serde_json::json!({"pod-template-hash": "5d8f7c9b4"}),
        );
        let v2 = owned(
            "ReplicaSet",
            "web-6c4b9f8d7",
            serde_json::json!({"pod-template-hash": "6c4b9f8d7"}),
        );
        assert_eq!(Workload::of(&v1, "ns"), workload("Deployment", "web"));
        assert_eq!(Workload::of(&v1, "ns"), Workload::of(&v2, "ns"));
        // Without the label, or when the name does not end with it: the ReplicaSet itself.
        let bare = owned("ReplicaSet", "web-5d8f7c9b4", serde_json::json!({}));
        assert_eq!(
            Workload::of(&bare, "ns"),
            workload("ReplicaSet", "web-5d8f7c9b4")
        );
        let other = owned(
            "ReplicaSet",
            "web-5d8f7c9b4",
            serde_json::json!({"pod-template-hash": "abc"}),
        );
        assert_eq!(
            Workload::of(&other, "ns"),
            workload("ReplicaSet", "web-5d8f7c9b4")
        );
        let glued = owned(
            "ReplicaSet",
            "web5d8f7c9b4",
            serde_json::json!({"pod-template-hash": "5d8f7c9b4"}),
        );
        assert_eq!(
            Workload::of(&glued, "ns"),
            workload("ReplicaSet", "web5d8f7c9b4")
        );
        let only_hash = owned(
            "ReplicaSet",
            "-5d8f7c9b4",
            serde_json::json!({"pod-template-hash": "5d8f7c9b4"}),
        );
        assert_eq!(
            Workload::of(&only_hash, "ns"),
            workload("ReplicaSet", "-5d8f7c9b4")
        );
        // Only ReplicaSets are resolved.
        let sts = owned(
            "StatefulSet",
            "web-5d8f7c9b4",
            serde_json::json!({"pod-template-hash": "5d8f7c9b4"}),
        );
        assert_eq!(
            Workload::of(&sts, "ns"),
            workload("StatefulSet", "web-5d8f7c9b4")
        );
    }

    #[test]
    fn a_pod_without_controller_is_its_own_workload() {
        let named = pod(
            serde_json::json!({"metadata": {"name": "solo", "ownerReferences": [
                {"apiVersion": "v1", "kind": "ReplicaSet", "name": "x", "uid": "1", "controller": false}
            ]}}),
        );
        assert_eq!(Workload::of(&named, "ns"), workload("Pod", "solo"));
        let generated = pod(serde_json::json!({"metadata": {"generateName": "batch-"}}));
        assert_eq!(Workload::of(&generated, "ns"), workload("Pod", "batch-"));
        let empty_name =
            pod(serde_json::json!({"metadata": {"name": "", "generateName": "batch-"}}));
        assert_eq!(Workload::of(&empty_name, "ns"), workload("Pod", "batch-"));
    }

    fn plain(annotations: serde_json::Value, scheduler: Option<&str>) -> Pod {
        let mut p = owned("StatefulSet", "db", serde_json::json!({}));
        p.metadata.annotations = serde_json::from_value(annotations).unwrap();
        p.spec.as_mut().unwrap().scheduler_name = scheduler.map(String::from);
        p
    }

    fn split(d: &Decision) -> (bool, Share, Source) {
        match &d.route {
            Route::Split {
                gantry,
                share,
                source,
                ..
            } => (*gantry, *share, *source),
            Route::Skip(s) => panic!("skipped: {s:?}"),
        }
    }

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_share_decides_by_bucket() {
        // StatefulSet/ns/db is in bucket 9550.
        let p = plain(serde_json::json!(null), None);
        assert!(!split(&decide(&config("95.5%"), &p, "ns", None)).0);
        assert!(split(&decide(&config("95.51%"), &p, "ns", None)).0);
        assert!(!split(&decide(&config("0%"), &p, "ns", None)).0);
        assert!(split(&decide(&config("100%"), &p, "ns", None)).0);
        let d = decide(&config("30%"), &p, "ns", None);
        assert_eq!(
            d.route,
            Route::Split {
                gantry: false,
                workload: workload("StatefulSet", "db"),
                bucket: 9550,
                share: Share::parse("30%").unwrap(),
                source: Source::Config,
            }
        );
    }

    #[test]
    fn precedence_pod_then_namespace_then_config() {
        let ns = annotations(&[(ROLLOUT_ANNOTATION, "0%")]);
        let p = plain(serde_json::json!(null), None);
        assert_eq!(
            split(&decide(&config("100%"), &p, "ns", Some(&ns))),
            (false, Share::NONE, Source::Namespace(ROLLOUT_ANNOTATION))
        );
        let p = plain(serde_json::json!({ROLLOUT_ANNOTATION: "100%"}), None);
        assert_eq!(
            split(&decide(&config("0%"), &p, "ns", Some(&ns))),
            (true, Share::ALL, Source::Pod(ROLLOUT_ANNOTATION))
        );
        let p = plain(
            serde_json::json!({USE_NEW_SCHEDULER_ANNOTATION: "100%"}),
            None,
        );
        assert_eq!(
            split(&decide(&config("0%"), &p, "ns", Some(&ns))),
            (true, Share::ALL, Source::Pod(USE_NEW_SCHEDULER_ANNOTATION))
        );
        // gantry.io/rollout is read first.
        let p = plain(
            serde_json::json!({ROLLOUT_ANNOTATION: "0%", USE_NEW_SCHEDULER_ANNOTATION: "100%"}),
            None,
        );
        assert!(!split(&decide(&config("100%"), &p, "ns", None)).0);
        let ns = annotations(&[(USE_NEW_SCHEDULER_ANNOTATION, "100%")]);
        let p = plain(serde_json::json!({"unrelated": "x"}), None);
        assert_eq!(
            split(&decide(&config("0%"), &p, "ns", Some(&ns))),
            (
                true,
                Share::ALL,
                Source::Namespace(USE_NEW_SCHEDULER_ANNOTATION)
            )
        );
    }

    #[test]
    fn invalid_annotations_fall_back_to_the_next_level() {
        let ns = annotations(&[
            (ROLLOUT_ANNOTATION, "abc"),
            (USE_NEW_SCHEDULER_ANNOTATION, "100%"),
        ]);
        let p = plain(serde_json::json!({ROLLOUT_ANNOTATION: "130%"}), None);
        let d = decide(&config("0%"), &p, "ns", Some(&ns));
        assert_eq!(
            split(&d),
            (
                true,
                Share::ALL,
                Source::Namespace(USE_NEW_SCHEDULER_ANNOTATION)
            )
        );
        let messages: Vec<String> = d.invalid.iter().map(ToString::to_string).collect();
        assert_eq!(
            messages,
            [
                "gantry rollout: ignoring pod annotation gantry.io/rollout: invalid share \"130%\": must be between 0% and 100%",
                "gantry rollout: ignoring namespace annotation gantry.io/rollout: invalid share \"abc\": expected a percentage such as \"30%\"",
            ]
        );
        let p = plain(
            serde_json::json!({USE_NEW_SCHEDULER_ANNOTATION: "yes"}),
            None,
        );
        let d = decide(&config("100%"), &p, "ns", None);
        assert_eq!(split(&d), (true, Share::ALL, Source::Config));
        assert_eq!(d.invalid.len(), 1);
        assert_eq!(d.invalid[0].on, Source::Pod(USE_NEW_SCHEDULER_ANNOTATION));
    }

    #[test]
    fn pods_that_chose_a_scheduler_or_live_in_excluded_namespaces_are_left_alone() {
        let c = config("100%");
        let skipped = |p: &Pod, ns: &str| decide(&c, p, ns, None).route;
        let p = plain(
            serde_json::json!({ROLLOUT_ANNOTATION: "bad"}),
            Some("other"),
        );
        let d = decide(&c, &p, "ns", None);
        assert_eq!(d.route, Route::Skip(Skip::OtherScheduler));
        assert!(d.invalid.is_empty());
        assert_eq!(
            skipped(&plain(serde_json::json!(null), Some("gantry")), "ns"),
            Route::Skip(Skip::AlreadyGantry)
        );
        assert_eq!(
            skipped(&plain(serde_json::json!(null), None), "kube-system"),
            Route::Skip(Skip::ExcludedNamespace)
        );
        assert!(
            split(&decide(
                &c,
                &plain(serde_json::json!(null), Some("")),
                "ns",
                None
            ))
            .0
        );
        assert!(
            split(&decide(
                &c,
                &plain(serde_json::json!(null), Some("default-scheduler")),
                "ns",
                None
            ))
            .0
        );
    }

    #[test]
    fn raising_the_share_only_moves_workloads_towards_gantry() {
        let workloads: Vec<Workload> = (0..2000)
            .map(|i| {
                workload(
                    ["Deployment", "StatefulSet", "Job"][i % 3],
                    &format!("w{i}"),
                )
            })
            .collect();
        let mut previous: Vec<bool> = vec![false; workloads.len()];
        for percent in 0..=100 {
            let share = Share::from_percent(percent).unwrap();
            let now: Vec<bool> = workloads
                .iter()
                .map(|w| w.bucket() < share.buckets())
                .collect();
            for (i, (was, is)) in previous.iter().zip(&now).enumerate() {
                assert!(!was || *is, "{} left gantry at {percent}%", workloads[i]);
            }
            // The hash spreads: the share of workloads is close to the configured one.
            let count = now.iter().filter(|g| **g).count() as f64;
            let expected = workloads.len() as f64 * percent as f64 / 100.0;
            assert!((count - expected).abs() < 80.0, "{count} at {percent}%");
            previous = now;
        }
        assert!(previous.iter().all(|g| *g));
    }
}
