//! Gang scheduling by `gantry run` against a real kube-apiserver with the PodGroup CRD
//! of `deploy/05-podgroup-crd.yaml` installed, and a profile that enables Coscheduling
//! (multiPoint, PrioritySort disabled): a gang that fits is bound entirely and its PodGroup's
//! status says `Scheduled` (gantry running with only the deployed ClusterRole); a gang that cannot fit holds nothing once its wait at Permit ran
//! out, and smaller pods created after it are bound; of two gangs that cannot both fit,
//! exactly one is bound and the other holds nothing; gantry killed while a gang waits at
//! Permit has bound none of it, and once restarted binds it all when room appears.
//! Under the shipped CRD, a `minMember` or `scheduleTimeoutSeconds` beyond int32 is refused
//! where the API server enforces `format: int32` (1.37 does, 1.35 does not); PodGroups
//! gantry cannot read (those, `2.5` and `"abc"` under a schemaless CRD, on a control plane
//! of their own) stop nothing: pods with no group are bound before and after,
//! `/readyz` stays ready, a gantry started while they exist becomes ready, and their own
//! pods are told why until the group is fixed.
//!
//! The tests share one control plane; each has its own namespace, nodes (by label) and
//! gantry with a profile of its own. No kubelet runs: bound pods stay `Pending`, so a group
//! whose pods are all bound stays `Scheduled`.

use crate::support;

use std::time::{Duration, Instant};

use gantry_core::model::pod_group::{POD_GROUP_LABEL, PodGroup, PodGroupStatus};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, PostParams};
use support::*;

/// The CRD file, applied once per control plane (the tests of other modules may have
/// started and stopped the shared one in between, so a flag per process would not do).
fn install_crd(plane: &ControlPlane) {
    static INSTALLED: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());
    let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    if installed.iter().any(|dir| dir == plane.dir()) {
        return;
    }
    let crd = repo().join("deploy/05-podgroup-crd.yaml");
    plane.kubectl(&["apply", "-f", &crd.display().to_string()]);
    plane.kubectl(&[
        "wait",
        "--for",
        "condition=Established",
        "--timeout=30s",
        "crd/podgroups.scheduling.x-k8s.io",
    ]);
    wait_served(plane);
    installed.push(plane.dir().to_path_buf());
}

/// The configuration of a test: profile `profile` on the nodes labelled `label`, with
/// Coscheduling instead of PrioritySort, and `args` for it (YAML flow map) if any.
fn gang_config(profile: &str, label: &str, args: Option<&str>) -> String {
    let mut c = config_with_plugins(profile, label, &["Coscheduling"], &["PrioritySort"]);
    if let Some(args) = args {
        c.push_str(&format!("  - name: Coscheduling\n    args: {args}\n"));
    }
    c
}

/// Creates PodGroup `name` in `ns`.
async fn create_group(client: &Client, ns: &str, name: &str, min_member: i32, timeout: i32) {
    let pg: PodGroup = serde_json::from_value(serde_json::json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"minMember": min_member, "scheduleTimeoutSeconds": timeout}
    }))
    .expect("PodGroup");
    Api::<PodGroup>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pg)
        .await
        .expect("create PodGroup");
}

/// The status of PodGroup `name`.
async fn group_status(client: &Client, ns: &str, name: &str) -> PodGroupStatus {
    Api::<PodGroup>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .expect("get PodGroup")
        .status
        .unwrap_or_default()
}

/// A pod of `profile` in group `group` requesting `cpu`.
fn member(ns: &str, name: &str, profile: &str, group: &str, cpu: &str) -> Pod {
    let mut p = pod(ns, name, profile, cpu, "64Mi");
    p.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(POD_GROUP_LABEL.to_string(), group.to_string());
    p
}

/// The pods of `ns` in `group` that are bound.
async fn bound_in(client: &Client, ns: &str, group: &str) -> usize {
    bound_pods(client, ns)
        .await
        .iter()
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(POD_GROUP_LABEL))
                .is_some_and(|g| g == group)
        })
        .count()
}

/// Waits until group `name`'s status is `phase` with `scheduled` pods bound; returns it.
async fn wait_status(
    client: &Client,
    ns: &str,
    name: &str,
    phase: &str,
    scheduled: i32,
) -> PodGroupStatus {
    eventually(
        Duration::from_secs(20),
        &format!("PodGroup {ns}/{name} {phase} with {scheduled} scheduled"),
        || async {
            let s = group_status(client, ns, name).await;
            (s.phase == phase && s.scheduled == scheduled).then_some(s)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_that_fits_is_bound_entirely() {
    let plane = ControlPlane::shared();
    install_crd(&plane);
    let (ns, profile) = ("gang-fit", "gantry-fit");
    let client = client_with_namespace(&plane, ns).await;
    create_nodes(&client, &["fit-1", "fit-2"], ns, "2", "4Gi").await;
    // As the user "gantry" with only the deployed ClusterRole: reading PodGroups and
    // writing their status is all it needs more.
    let deploy = repo().join("deploy");
    plane.kubectl(&[
        "apply",
        "-f",
        &deploy.join("00-namespace.yaml").display().to_string(),
        "-f",
        &deploy.join("10-rbac.yaml").display().to_string(),
    ]);
    plane.kubectl(&[
        "create",
        "clusterrolebinding",
        "gantry-user",
        "--clusterrole=gantry",
        "--user=gantry",
    ]);
    let gantry = Gantry::start_ready(
        plane.dir(),
        "fit",
        &gang_config(profile, ns, None),
        &plane.gantry_kubeconfig(),
    )
    .await;
    create_group(&client, ns, "train", 3, 30).await;
    for i in 0..3 {
        create_pod(
            &client,
            &member(ns, &format!("train-{i}"), profile, "train", "1"),
        )
        .await;
    }
    eventually(Duration::from_secs(20), "the gang bound", || async {
        (bound_in(&client, ns, "train").await == 3).then_some(())
    })
    .await;
    let status = wait_status(&client, ns, "train", "Scheduled", 3).await;
    assert_eq!((status.running, status.succeeded, status.failed), (0, 0, 0));
    assert!(status.schedule_start_time.is_some(), "{status:?}");
    assert!(
        gantry.metric("scheduler_permit_wait_duration_seconds_count{result=\"Success\"}") >= 2.0,
        "the first two waited at Permit for the third"
    );
    let log = gantry.log_text();
    assert!(
        !log.to_lowercase().contains("forbidden"),
        "a request was refused:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_that_cannot_fit_holds_nothing_after_its_timeout() {
    let plane = ControlPlane::shared();
    install_crd(&plane);
    let (ns, profile) = ("gang-timeout", "gantry-timeout");
    let client = client_with_namespace(&plane, ns).await;
    create_node(&client, &node("timeout-1", ns, "3", "4Gi")).await;
    // The member that fits nowhere leaves the others waiting (a third of the group missing
    // is within 50%): they are released by their timeout. Tried again, the group finds room
    // for one member only, too few: PostFilter rejects it, and podGroupBackoffSeconds keeps
    // it from taking room again for a while (else a member placed would always hold some
    // while its siblings back off).
    let args = "{podGroupRejectPercentage: 50, podGroupBackoffSeconds: 60}";
    let gantry = Gantry::start_ready(
        plane.dir(),
        "timeout",
        &gang_config(profile, ns, Some(args)),
        &plane.kubeconfig(),
    )
    .await;
    create_group(&client, ns, "big", 3, 3).await;
    for i in 0..3 {
        create_pod(
            &client,
            &member(ns, &format!("big-{i}"), profile, "big", "1500m"),
        )
        .await;
    }
    eventually(
        Duration::from_secs(20),
        "two members waiting at Permit",
        || async { (gantry.metric("gantry_permit_waiting_pods") == 2.0).then_some(()) },
    )
    .await;
    // A plain pod behind the gang: room only once the gang's waiting pods are released.
    create_pod(&client, &pod(ns, "small", profile, "1", "64Mi")).await;
    wait_bound(&client, ns, "small", Duration::from_secs(20)).await;
    assert!(
        gantry.metric("scheduler_permit_wait_duration_seconds_count{result=\"Unschedulable\"}")
            >= 2.0,
        "the waiting members were released by their timeout"
    );
    // What is left (2 cpu) takes a pod only while no member of the gang holds any of it.
    create_pod(&client, &pod(ns, "second", profile, "2", "64Mi")).await;
    wait_bound(&client, ns, "second", Duration::from_secs(20)).await;
    assert_eq!(bound_in(&client, ns, "big").await, 0, "no member bound");
    let status = wait_status(&client, ns, "big", "Scheduling", 0).await;
    assert!(status.schedule_start_time.is_some(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_gangs_that_cannot_both_fit_exactly_one_is_bound() {
    let plane = ControlPlane::shared();
    install_crd(&plane);
    let (ns, profile) = ("gang-two", "gantry-two");
    let client = client_with_namespace(&plane, ns).await;
    create_nodes(&client, &["two-1", "two-2"], ns, "2", "4Gi").await;
    let _gantry = Gantry::start_ready(
        plane.dir(),
        "two",
        &gang_config(profile, ns, None),
        &plane.kubeconfig(),
    )
    .await;
    for g in ["alpha", "beta"] {
        create_group(&client, ns, g, 3, 5).await;
    }
    // Interleaved: each group's pods arrive between the other's.
    for i in 0..3 {
        for g in ["alpha", "beta"] {
            create_pod(&client, &member(ns, &format!("{g}-{i}"), profile, g, "1")).await;
        }
    }
    let winner = eventually(Duration::from_secs(30), "one gang bound", || async {
        let alpha = bound_in(&client, ns, "alpha").await;
        let beta = bound_in(&client, ns, "beta").await;
        match (alpha, beta) {
            (3, _) => Some(("alpha", "beta")),
            (_, 3) => Some(("beta", "alpha")),
            _ => None,
        }
    })
    .await;
    let (won, lost) = winner;
    // The other keeps trying, and never gets a member bound.
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        assert_eq!(
            bound_in(&client, ns, lost).await,
            0,
            "{lost} has a member bound"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(bound_in(&client, ns, won).await, 3);
    wait_status(&client, ns, won, "Scheduled", 3).await;
    wait_status(&client, ns, lost, "Scheduling", 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_waiting_when_gantry_is_killed_is_bound_after_a_restart() {
    let plane = ControlPlane::shared();
    install_crd(&plane);
    let (ns, profile) = ("gang-restart", "gantry-restart");
    let client = client_with_namespace(&plane, ns).await;
    create_node(&client, &node("restart-1", ns, "2", "4Gi")).await;
    let config = gang_config(profile, ns, Some("{podGroupRejectPercentage: 50}"));
    let mut gantry =
        Gantry::start_ready(plane.dir(), "restart", &config, &plane.kubeconfig()).await;
    create_group(&client, ns, "job", 3, 60).await;
    for i in 0..3 {
        create_pod(
            &client,
            &member(ns, &format!("job-{i}"), profile, "job", "1"),
        )
        .await;
    }
    eventually(
        Duration::from_secs(20),
        "two members waiting at Permit",
        || async { (gantry.metric("gantry_permit_waiting_pods") == 2.0).then_some(()) },
    )
    .await;
    gantry.kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        bound_in(&client, ns, "job").await,
        0,
        "a member bound alone"
    );

    let gantry = Gantry::start_ready(plane.dir(), "restart", &config, &plane.kubeconfig()).await;
    eventually(
        Duration::from_secs(20),
        "two members waiting again",
        || async { (gantry.metric("gantry_permit_waiting_pods") == 2.0).then_some(()) },
    )
    .await;
    assert_eq!(
        bound_in(&client, ns, "job").await,
        0,
        "a member bound alone"
    );
    // Room for the third.
    create_node(&client, &node("restart-2", ns, "2", "4Gi")).await;
    eventually(Duration::from_secs(20), "the gang bound", || async {
        (bound_in(&client, ns, "job").await == 3).then_some(())
    })
    .await;
    wait_status(&client, ns, "job", "Scheduled", 3).await;
    assert_eq!(gantry.metric("gantry_permit_waiting_pods"), 0.0);
}

/// Creates PodGroup `name` in `ns` with `spec` (JSON) through kubectl, bypassing the typed
/// client: its fields may be out of what gantry (and the typed struct) can read.
fn apply_group(plane: &ControlPlane, ns: &str, name: &str, spec: &str) {
    plane.apply(&format!(
        r#"{{"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {{"name": "{name}", "namespace": "{ns}"}}, "spec": {spec}}}"#
    ));
}

/// Creates `count` pods named `<prefix>-<i>` with no group and waits until all are bound.
async fn bind_plain_pods(client: &Client, ns: &str, profile: &str, prefix: &str, count: usize) {
    for i in 0..count {
        create_pod(
            client,
            &pod(ns, &format!("{prefix}-{i}"), profile, "10m", "8Mi"),
        )
        .await;
    }
    for i in 0..count {
        wait_bound(
            client,
            ns,
            &format!("{prefix}-{i}"),
            Duration::from_secs(20),
        )
        .await;
    }
}

/// Waits until pod `name`'s `PodScheduled` condition is False with a message containing
/// `text`; returns the message.
async fn wait_told(client: &Client, ns: &str, name: &str, text: &str) -> String {
    eventually(
        Duration::from_secs(20),
        &format!("{name} told {text:?}"),
        || async {
            pod_scheduled(&get_pod(client, ns, name).await)
                .filter(|c| c.0 == "False" && c.2.contains(text))
                .map(|c| c.2)
        },
    )
    .await
}

/// The check of one plane: bad groups `bad` (name, spec) stop no scheduling, in a running
/// gantry and in one started while they exist; each bad group's member is told why, and
/// once its group is fixed, bound.
async fn unreadable_groups_stop_nothing(
    plane: &ControlPlane,
    ns: &str,
    profile: &str,
    bad: &[(&str, &str)],
) {
    let client = client_with_namespace(plane, ns).await;
    create_nodes(&client, &[&format!("{ns}-1")], ns, "4", "4Gi").await;
    let config = gang_config(profile, ns, None);
    let mut gantry = Gantry::start_ready(plane.dir(), ns, &config, &plane.kubeconfig()).await;
    bind_plain_pods(&client, ns, profile, "before", 5).await;
    for (name, spec) in bad {
        apply_group(plane, ns, name, spec);
        create_pod(
            &client,
            &member(ns, &format!("{name}-0"), profile, name, "10m"),
        )
        .await;
    }
    bind_plain_pods(&client, ns, profile, "after", 5).await;
    for (name, _) in bad {
        let told = wait_told(&client, ns, &format!("{name}-0"), "cannot be read").await;
        assert!(
            told.contains(&format!("PodGroup {ns}/{name} cannot be read: spec")),
            "{told}"
        );
    }
    assert_eq!(gantry.get("/readyz").map(|(code, _)| code), Some(200));
    let unreadable = gantry.metric("gantry_unreadable_objects{resource=\"podgroups\"}");
    assert!(unreadable >= bad.len() as f64, "counted: {unreadable}");
    let log = gantry.log_text();
    for (name, _) in bad {
        let warnings = log
            .lines()
            .filter(|l| l.contains("cannot read") && l.contains(&format!("{ns}/{name}")))
            .count();
        assert_eq!(warnings, 1, "{name} logged once:\n{log}");
    }
    gantry.terminate();

    // Started while they exist: ready, and scheduling.
    let gantry = Gantry::start_ready(plane.dir(), ns, &config, &plane.kubeconfig()).await;
    bind_plain_pods(&client, ns, profile, "restarted", 3).await;
    // Fixed, a group's member is bound.
    let (name, _) = bad[0];
    apply_group(plane, ns, name, r#"{"minMember": 1}"#);
    wait_bound(&client, ns, &format!("{name}-0"), Duration::from_secs(20)).await;
    drop(gantry);
}

/// PodGroups beyond int32 under the shipped CRD: an API server that enforces the schema's
/// `format: int32` (1.37 does, 1.35 does not) refuses them, naming the format; those it
/// stores stop nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podgroups_beyond_int32_under_the_shipped_crd_stop_nothing() {
    let plane = ControlPlane::shared();
    install_crd(&plane);
    let hostile = [
        ("huge", r#"{"minMember": 2147483648}"#),
        (
            "forever",
            r#"{"minMember": 1, "scheduleTimeoutSeconds": 1000000000000000000}"#,
        ),
    ];
    let mut stored = Vec::new();
    for (name, spec) in hostile {
        let probe = format!("probe-{name}");
        let group = format!(
            r#"{{"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                "metadata": {{"name": "{probe}", "namespace": "default"}}, "spec": {spec}}}"#
        );
        match plane.try_kubectl(&["apply", "-f", "-"], Some(&group)) {
            Err(refused) => assert!(refused.contains("format int32"), "{name}: {refused}"),
            Ok(_) => {
                plane.kubectl(&["delete", "podgroup", &probe, "-n", "default"]);
                stored.push((name, spec));
            }
        }
    }
    if !stored.is_empty() {
        unreadable_groups_stop_nothing(&plane, "gang-hostile", "gantry-hostile", &stored).await;
    }
}

/// A PodGroup CRD whose schema keeps any field: the API server stores whatever is sent.
const SCHEMALESS_CRD: &str = r#"{"apiVersion": "apiextensions.k8s.io/v1",
  "kind": "CustomResourceDefinition",
  "metadata": {"name": "podgroups.scheduling.x-k8s.io"},
  "spec": {"group": "scheduling.x-k8s.io", "scope": "Namespaced",
    "names": {"kind": "PodGroup", "listKind": "PodGroupList", "plural": "podgroups",
      "singular": "podgroup"},
    "versions": [{"name": "v1alpha1", "served": true, "storage": true,
      "subresources": {"status": {}},
      "schema": {"openAPIV3Schema": {"type": "object",
        "x-kubernetes-preserve-unknown-fields": true}}}]}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podgroups_of_any_shape_under_a_schemaless_crd_stop_nothing() {
    // A plane of its own: the shared one has the shipped CRD.
    let plane = ControlPlane::start();
    plane.apply(SCHEMALESS_CRD);
    wait_served(&plane);
    unreadable_groups_stop_nothing(
        &plane,
        "gang-schemaless",
        "gantry-schemaless",
        &[
            ("huge", r#"{"minMember": 2147483648}"#),
            (
                "forever",
                r#"{"minMember": 1, "scheduleTimeoutSeconds": 1000000000000000000}"#,
            ),
            ("fraction", r#"{"minMember": 2.5}"#),
            ("text", r#"{"minMember": "abc"}"#),
            ("spec-text", r#""everything""#),
        ],
    )
    .await;
}

/// Waits until the API server's discovery, where gantry looks at start, serves PodGroups.
fn wait_served(plane: &ControlPlane) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while plane
        .try_kubectl(
            &["get", "--raw", "/apis/scheduling.x-k8s.io/v1alpha1"],
            None,
        )
        .map_or(true, |out| !out.contains("podgroups"))
    {
        assert!(Instant::now() < deadline, "PodGroups not served after 30 s");
        std::thread::sleep(Duration::from_millis(200));
    }
}
