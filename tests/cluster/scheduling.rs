//! `gantry run` against a real kube-apiserver: binding, capacity, unschedulable pods and their
//! events and conditions, pods deleted while queued or in flight, binding conflicts, metrics
//! and health endpoints. The tests share one control plane; each has its own namespace, nodes
//! (labelled for it) and gantry process (with its own profile, restricted to its nodes).

use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binds_pods_without_overcommitting_nodes() {
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let (ns, profile) = ("fill", "gantry-fill");
    create_namespace(&client, ns).await;
    let mut allocatable = BTreeMap::new();
    for i in 0..3 {
        let name = format!("fill-{i}");
        create_node(&client, &node(&name, ns, "2", "8Gi")).await;
        allocatable.insert(name, 2000);
    }
    let mut gantry = Gantry::start(
        plane.dir(),
        ns,
        &config(profile, ns, None, ""),
        &plane.kubeconfig(),
    );
    gantry.wait_ready().await;
    // 30 pods of 250m on 6 cpus: 24 fit.
    for i in 0..30 {
        create_pod(
            &client,
            &pod(ns, &format!("p{i:02}"), profile, "250m", "64Mi"),
        )
        .await;
    }
    let all = eventually(
        Duration::from_secs(30),
        "24 pods bound, 6 rejected",
        || async {
            let ps = pods(&client, ns).await;
            let bound = ps.iter().filter(|p| node_of(p).is_some()).count();
            let rejected = ps
                .iter()
                .filter(|p| pod_scheduled(p).is_some_and(|c| c.0 == "False"))
                .count();
            (bound == 24 && rejected == 6).then_some(ps)
        },
    )
    .await;
    assert_within_capacity(&all, &allocatable);
    for p in all.iter().filter(|p| node_of(p).is_none()) {
        let (_, reason, message) = pod_scheduled(p).expect("condition");
        assert_eq!(reason, "Unschedulable");
        assert!(message.contains("3 Insufficient cpu"), "{message}");
    }
    let evs = eventually(Duration::from_secs(10), "24 Scheduled events", || async {
        let evs = events(&client, ns).await;
        let scheduled = evs
            .iter()
            .filter(|e| e.reason.as_deref() == Some("Scheduled"))
            .count();
        (scheduled == 24).then_some(evs)
    })
    .await;
    for p in all.iter().filter_map(|p| {
        let name = p.metadata.name.as_deref()?;
        Some((name, node_of(p)?))
    }) {
        let e = events_about(&evs, p.0, "Scheduled");
        assert_eq!(e.len(), 1, "one Scheduled event for {}", p.0);
        assert_eq!(
            e[0].note.as_deref(),
            Some(format!("Successfully assigned {ns}/{} to {}", p.0, p.1).as_str())
        );
        assert_eq!(e[0].reporting_controller.as_deref(), Some(profile));
    }

    // Health endpoints and kube-scheduler's metrics.
    for path in ["/healthz", "/livez", "/readyz"] {
        assert_eq!(gantry.get(path).map(|r| r.0), Some(200), "{path}");
    }
    let metrics = gantry.metrics();
    let attempts = |result: &str| {
        metric_value(
            &metrics,
            &format!(
                "scheduler_schedule_attempts_total{{result=\"{result}\",profile=\"{profile}\"}}"
            ),
        )
    };
    assert_eq!(attempts("scheduled"), 24.0, "{metrics}");
    assert!(attempts("unschedulable") >= 6.0, "{metrics}");
    for name in [
        "scheduler_scheduling_attempt_duration_seconds_bucket",
        "scheduler_pod_scheduling_sli_duration_seconds_bucket",
        "scheduler_pending_pods{queue=\"unschedulable\"}",
        "scheduler_pending_pods{queue=\"active\"}",
        "scheduler_queue_incoming_pods_total{queue=\"active\",event=\"UnschedulablePodAdd\"}",
        "scheduler_framework_extension_point_duration_seconds_bucket",
        "scheduler_plugin_execution_duration_seconds_bucket",
    ] {
        assert!(metrics.contains(name), "no {name} in\n{metrics}");
    }
    let pending = eventually(Duration::from_secs(5), "pending gauge", || async {
        let v = gantry.metric("scheduler_pending_pods{queue=\"unschedulable\"}");
        (v == 6.0).then_some(v)
    })
    .await;
    assert_eq!(pending, 6.0);
    assert_eq!(gantry.terminate().code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unschedulable_pod_gets_event_and_condition_then_binds_when_a_node_fits() {
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let (ns, profile) = ("grow", "gantry-grow");
    create_namespace(&client, ns).await;
    create_node(&client, &node("grow-small", ns, "1", "2Gi")).await;
    let mut gantry = Gantry::start(
        plane.dir(),
        ns,
        &config(profile, ns, None, ""),
        &plane.kubeconfig(),
    );
    gantry.wait_ready().await;
    create_pod(&client, &pod(ns, "big", profile, "4", "1Gi")).await;
    let (status, reason, message) =
        eventually(Duration::from_secs(15), "PodScheduled=False", || async {
            pod_scheduled(&get_pod(&client, ns, "big").await)
        })
        .await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "Unschedulable")
    );
    assert!(message.starts_with("0/"), "{message}");
    assert!(message.contains("1 Insufficient cpu"), "{message}");
    let evs = eventually(
        Duration::from_secs(10),
        "FailedScheduling event",
        || async {
            let evs = events(&client, ns).await;
            (!events_about(&evs, "big", "FailedScheduling").is_empty()).then_some(evs)
        },
    )
    .await;
    let failed = events_about(&evs, "big", "FailedScheduling");
    assert_eq!(
        failed[0].note.as_deref(),
        Some(message.as_str()),
        "event and condition agree"
    );
    assert_eq!(failed[0].type_.as_deref(), Some("Warning"));
    assert_eq!(failed[0].action.as_deref(), Some("Scheduling"));

    let added = Instant::now();
    create_node(&client, &node("grow-big", ns, "8", "16Gi")).await;
    let node = eventually(
        Duration::from_secs(10),
        "the pod bound to the new node",
        || async { node_of(&get_pod(&client, ns, "big").await).map(str::to_string) },
    )
    .await;
    let took = added.elapsed();
    assert_eq!(node, "grow-big");
    assert!(
        took < Duration::from_secs(5),
        "bound {took:?} after the node was added"
    );
    let p = get_pod(&client, ns, "big").await;
    assert_eq!(pod_scheduled(&p).map(|c| c.0), Some("True".to_string()));
    assert_eq!(gantry.terminate().code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_deleted_while_queued_is_dropped() {
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let (ns, profile) = ("gone", "gantry-gone");
    create_namespace(&client, ns).await;
    create_node(&client, &node("gone-small", ns, "1", "2Gi")).await;
    let mut gantry = Gantry::start(
        plane.dir(),
        ns,
        &config(profile, ns, None, ""),
        &plane.kubeconfig(),
    );
    gantry.wait_ready().await;
    create_pod(&client, &pod(ns, "doomed", profile, "4", "1Gi")).await;
    eventually(
        Duration::from_secs(15),
        "the pod parked as unschedulable",
        || async {
            (gantry.metric("scheduler_pending_pods{queue=\"unschedulable\"}") == 1.0).then_some(())
        },
    )
    .await;
    delete_pod(&client, ns, "doomed").await;
    eventually(
        Duration::from_secs(10),
        "the queue to forget the pod",
        || async {
            (gantry.metric("scheduler_pending_pods{queue=\"unschedulable\"}") == 0.0).then_some(())
        },
    )
    .await;
    // A node it would fit on, and a pod that proves gantry still schedules.
    create_node(&client, &node("gone-big", ns, "8", "16Gi")).await;
    create_pod(&client, &pod(ns, "after", profile, "4", "1Gi")).await;
    eventually(Duration::from_secs(10), "the next pod bound", || async {
        node_of(&get_pod(&client, ns, "after").await).map(str::to_string)
    })
    .await;
    let metrics = gantry.metrics();
    let errors = metric_value(
        &metrics,
        &format!("scheduler_schedule_attempts_total{{result=\"error\",profile=\"{profile}\"}}"),
    );
    assert_eq!(errors, 0.0, "{metrics}");
    assert_eq!(pods(&client, ns).await.len(), 1);
    let log = gantry.log_text();
    assert!(
        !log.lines()
            .any(|l| l.contains("WARN") && l.contains("doomed")),
        "no warning about the deleted pod:\n{log}"
    );
    assert_eq!(gantry.terminate().code(), Some(0));
}

/// Someone else binds a pod, and another pod is deleted, while gantry's bindings of them are
/// in flight (held by a proxy): both are dropped without error or retry, and gantry's
/// accounting follows the real placement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_conflicts_are_read_back_and_pods_deleted_in_flight_dropped() {
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let (ns, profile) = ("race", "gantry-race");
    create_namespace(&client, ns).await;
    // Two nodes with room for exactly one 1-cpu pod each.
    create_node(&client, &node("race-a", ns, "1", "4Gi")).await;
    create_node(&client, &node("race-b", ns, "1", "4Gi")).await;
    let proxy = Proxy::start(plane.api_addr());
    let kubeconfig = proxy.kubeconfig(&plane.kubeconfig(), plane.dir());
    let mut gantry = Gantry::start(plane.dir(), ns, &config(profile, ns, None, ""), &kubeconfig);
    gantry.wait_ready().await;
    let in_flight = "scheduler_goroutines{operation=\"binding\"}";

    // Conflict: gantry decides, its binding is held, we bind the pod to the other node.
    proxy.pause();
    create_pod(&client, &pod(ns, "contested", profile, "1", "1Gi")).await;
    eventually(
        Duration::from_secs(10),
        "gantry's binding in flight",
        || async { (gantry.metric(in_flight) == 1.0).then_some(()) },
    )
    .await;
    // Both nodes are empty: gantry chose one of them; take the pod to the other... or the
    // same one: either way gantry's binding meets a conflict, which may be its own binding
    // committed by an earlier try, so gantry reads the pod back and takes it where it is.
    bind(&client, ns, "contested", "race-b")
        .await
        .expect("our binding wins");
    proxy.resume();
    eventually(
        Duration::from_secs(10),
        "gantry's binding read back after the conflict",
        || async {
            (gantry.metric(in_flight) == 0.0
                && gantry.metric("gantry_bindings_unconfirmed_total") == 1.0)
                .then_some(())
        },
    )
    .await;
    // gantry now counts the pod on race-b: a second 1-cpu pod must go to race-a, a third
    // must not fit anywhere.
    create_pod(&client, &pod(ns, "second", profile, "1", "1Gi")).await;
    let second = eventually(Duration::from_secs(10), "the second pod bound", || async {
        node_of(&get_pod(&client, ns, "second").await).map(str::to_string)
    })
    .await;
    assert_eq!(second, "race-a");
    create_pod(&client, &pod(ns, "third", profile, "1", "1Gi")).await;
    let (_, _, message) = eventually(
        Duration::from_secs(10),
        "the third pod rejected",
        || async { pod_scheduled(&get_pod(&client, ns, "third").await).filter(|c| c.0 == "False") },
    )
    .await;
    assert!(message.contains("2 Insufficient cpu"), "{message}");

    // Deletion in flight: gantry's binding of the pod is held while the pod is deleted.
    delete_pod(&client, ns, "second").await;
    let bound_third = eventually(
        Duration::from_secs(10),
        "the third pod bound after the delete",
        || async { node_of(&get_pod(&client, ns, "third").await).map(str::to_string) },
    )
    .await;
    assert_eq!(bound_third, "race-a");
    // The API server shows the binding before gantry has read its answer: wait until gantry
    // has, so that the binding counted in flight below can only be the next pod's.
    eventually(
        Duration::from_secs(10),
        "the third pod's binding answered",
        || async { (gantry.metric(in_flight) == 0.0).then_some(()) },
    )
    .await;
    proxy.pause();
    create_node(&client, &node("race-c", ns, "1", "4Gi")).await;
    create_pod(&client, &pod(ns, "ephemeral", profile, "1", "1Gi")).await;
    eventually(
        Duration::from_secs(10),
        "gantry's binding in flight",
        || async { (gantry.metric(in_flight) == 1.0).then_some(()) },
    )
    .await;
    delete_pod(&client, ns, "ephemeral").await;
    proxy.resume();
    eventually(
        Duration::from_secs(10),
        "the binding of the deleted pod refused",
        || async {
            (gantry.metric(in_flight) == 0.0
                && gantry.log_text().matches("binding refused").count() == 1)
                .then_some(())
        },
    )
    .await;
    // race-c is free again in gantry's books.
    create_pod(&client, &pod(ns, "last", profile, "1", "1Gi")).await;
    let last = eventually(Duration::from_secs(10), "the last pod bound", || async {
        node_of(&get_pod(&client, ns, "last").await).map(str::to_string)
    })
    .await;
    assert_eq!(last, "race-c");
    let log = gantry.log_text();
    assert!(
        !log.contains("binding failed"),
        "no binding was retried:\n{log}"
    );
    let all = pods(&client, ns).await;
    let allocatable = ["race-a", "race-b", "race-c"]
        .into_iter()
        .map(|n| (n.to_string(), 1000))
        .collect();
    assert_within_capacity(&all, &allocatable);
    assert_eq!(gantry.terminate().code(), Some(0));
}

/// A pod that finishes (Succeeded) leaves gantry's pod watch and frees its node for a pod
/// that was waiting for room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_pod_frees_its_node() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, Patch, PatchParams};

    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let (ns, profile) = ("done", "gantry-done");
    create_namespace(&client, ns).await;
    create_node(&client, &node("done-1", ns, "1", "2Gi")).await;
    let mut gantry = Gantry::start(
        plane.dir(),
        ns,
        &config(profile, ns, None, ""),
        &plane.kubeconfig(),
    );
    gantry.wait_ready().await;
    create_pod(&client, &pod(ns, "job", profile, "1", "1Gi")).await;
    eventually(Duration::from_secs(10), "the job bound", || async {
        node_of(&get_pod(&client, ns, "job").await).map(str::to_string)
    })
    .await;
    create_pod(&client, &pod(ns, "next", profile, "1", "1Gi")).await;
    eventually(Duration::from_secs(10), "the next pod rejected", || async {
        pod_scheduled(&get_pod(&client, ns, "next").await).filter(|c| c.0 == "False")
    })
    .await;
    Api::<Pod>::namespaced(client.clone(), ns)
        .patch_status(
            "job",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"phase": "Succeeded"}})),
        )
        .await
        .expect("finish the job");
    let node = eventually(Duration::from_secs(10), "the next pod bound", || async {
        node_of(&get_pod(&client, ns, "next").await).map(str::to_string)
    })
    .await;
    assert_eq!(node, "done-1");
    assert_eq!(gantry.terminate().code(), Some(0));
}

/// gantry's API client negotiates HTTP/2, as client-go does: requests and watches share one
/// connection, and more requests than the server allows streams at once (250) queue on the
/// client instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_client_multiplexes_requests_over_http2() {
    let plane = ControlPlane::shared();
    let settings = gantry_core::config::ClientConnection {
        kubeconfig: None,
        qps: 0.0,
        burst: 0,
        content_type: Default::default(),
    };
    let client = gantry_adapter::connect(Some(&plane.kubeconfig()), &settings, None)
        .await
        .expect("client");
    let version = |client: kube::Client| async move {
        let request = http::Request::get("/version")
            .body(kube::client::Body::empty())
            .expect("request");
        client.send(request).await.expect("GET /version")
    };
    assert_eq!(
        version(client.clone()).await.version(),
        http::Version::HTTP_2
    );
    let responses = futures::future::join_all((0..400).map(|_| version(client.clone()))).await;
    assert!(
        responses
            .iter()
            .all(|r| r.status() == http::StatusCode::OK && r.version() == http::Version::HTTP_2)
    );
}
