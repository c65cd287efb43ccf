//! `gantry run` survives its API server: kube-apiserver is killed and restarted while gantry
//! is binding; gantry's watchers reconnect (relisting where they must), failed bindings are
//! retried or dropped, pods deleted while it was cut off are forgotten, and in the end every
//! pod is bound exactly once with no node over capacity.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pod_is_bound_once_across_an_api_server_restart() {
    let plane = ControlPlane::start();
    let client = plane.client().await;
    let (ns, profile) = ("restart", "gantry-restart");
    create_namespace(&client, ns).await;
    let mut allocatable = BTreeMap::new();
    for i in 0..4 {
        let name = format!("restart-{i}");
        create_node(&client, &node(&name, ns, "4", "16Gi")).await;
        allocatable.insert(name, 4000);
    }
    // Leader election off: with it on, a leader that cannot renew its lease while the API
    // server is down gives up leadership and exits, as kube-scheduler does.
    let mut gantry = Gantry::start(
        plane.dir(),
        ns,
        &config(profile, ns, None, ""),
        &plane.kubeconfig(),
    );
    gantry.wait_ready().await;

    // 40 pods of 300m (12 cpus of 16), the API server killed while they are being bound.
    for i in 0..40 {
        create_pod(
            &client,
            &pod(ns, &format!("a{i:02}"), profile, "300m", "64Mi"),
        )
        .await;
    }
    plane.restart_apiserver(Duration::from_secs(2));
    let client = plane.client().await;
    // Deleted, and created, before gantry's watchers are back.
    for i in 0..5 {
        delete_pod(&client, ns, &format!("a{i:02}")).await;
    }
    for i in 0..10 {
        create_pod(
            &client,
            &pod(ns, &format!("b{i:02}"), profile, "300m", "64Mi"),
        )
        .await;
    }
    // 45 pods of 300m: 13.5 cpus fit into 16.
    let all = eventually(Duration::from_secs(60), "all 45 pods bound", || async {
        let ps = pods(&client, ns).await;
        (ps.len() == 45 && ps.iter().all(|p| node_of(p).is_some())).then_some(ps)
    })
    .await;
    assert_within_capacity(&all, &allocatable);

    // gantry's books match the cluster: a node takes 13 such pods, the cluster 52, so 7 more
    // fit and the last 2 do not.
    for i in 0..9 {
        create_pod(
            &client,
            &pod(ns, &format!("c{i:02}"), profile, "300m", "64Mi"),
        )
        .await;
    }
    let all = eventually(
        Duration::from_secs(30),
        "7 more bound, 2 rejected",
        || async {
            let ps = pods(&client, ns).await;
            let bound = ps.iter().filter(|p| node_of(p).is_some()).count();
            let rejected = ps
                .iter()
                .filter(|p| pod_scheduled(p).is_some_and(|c| c.0 == "False"))
                .count();
            (bound == 52 && rejected == 2).then_some(ps)
        },
    )
    .await;
    assert_within_capacity(&all, &allocatable);
    // Never two Scheduled events for one pod (a binding the server took but whose answer was
    // lost in the restart may have none).
    let evs = events(&client, ns).await;
    for p in &all {
        let name = p.metadata.name.as_deref().unwrap_or_default();
        let n = events_about(&evs, name, "Scheduled").len();
        assert!(n <= 1, "{n} Scheduled events for {name}");
    }
    let log = gantry.log_text();
    assert!(log.contains("watch failed"), "the watches broke:\n{log}");
    assert!(gantry.is_running(), "gantry survived:\n{log}");
    assert_eq!(gantry.terminate().code(), Some(0));
}
