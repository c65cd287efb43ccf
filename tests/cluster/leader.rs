//! Two gantry replicas with Lease leader election: only the leader binds; when it is killed
//! the other takes over once the lease expires; a leader stopped with SIGTERM releases the
//! lease so that a standby takes over at once.

use crate::support;

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use support::*;

const LEASE: &str = "gantry-leader-test";

fn leader_config(profile: &str, label: &str) -> String {
    let le = format!(
        "leaderElect: true\nleaseDuration: 4s\nrenewDeadline: 3s\nretryPeriod: 500ms\nresourceNamespace: kube-system\nresourceName: {LEASE}"
    );
    config(profile, label, Some(&le), "")
}

async fn holder(client: &kube::Client) -> Option<String> {
    let lease = Api::<Lease>::namespaced(client.clone(), "kube-system")
        .get_opt(LEASE)
        .await
        .ok()??;
    lease.spec?.holder_identity.filter(|h| !h.is_empty())
}

/// Creates pods `names` and waits until they are bound; returns the `reportingInstance` of
/// each one's Scheduled event.
async fn bind_all(client: &kube::Client, ns: &str, profile: &str, names: &[String]) -> Vec<String> {
    for n in names {
        create_pod(client, &pod(ns, n, profile, "100m", "64Mi")).await;
    }
    eventually(
        Duration::from_secs(30),
        "the pods bound, with events",
        || async {
            let ps = pods(client, ns).await;
            let evs = events(client, ns).await;
            let mut instances = Vec::new();
            for n in names {
                let p = ps
                    .iter()
                    .find(|p| p.metadata.name.as_deref() == Some(n.as_str()))?;
                node_of(p)?;
                let e = events_about(&evs, n, "Scheduled");
                if e.len() != 1 {
                    return None;
                }
                instances.push(e[0].reporting_instance.clone().unwrap_or_default());
            }
            Some(instances)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_binds_and_a_standby_takes_over() {
    let plane = ControlPlane::start();
    let client = plane.client().await;
    let (ns, profile) = ("ha", "gantry-ha");
    create_namespace(&client, ns).await;
    create_node(&client, &node("ha-1", ns, "8", "16Gi")).await;
    let cfg = leader_config(profile, ns);
    let mut replicas = vec![
        Gantry::start(plane.dir(), "ha-a", &cfg, &plane.kubeconfig()),
        Gantry::start(plane.dir(), "ha-b", &cfg, &plane.kubeconfig()),
    ];
    for r in &mut replicas {
        r.wait_ready().await;
    }
    let first = eventually(Duration::from_secs(15), "a leader", || async {
        holder(&client).await
    })
    .await;
    let leader = replicas
        .iter()
        .position(|r| r.identity().as_deref() == Some(first.as_str()))
        .expect("the lease holder is one of the replicas");
    let standby = 1 - leader;

    // Only the leader binds; the standby is ready (caches warm) but makes no attempt.
    let names: Vec<String> = (0..10).map(|i| format!("one-{i}")).collect();
    let instances = bind_all(&client, ns, profile, &names).await;
    assert!(
        instances.iter().all(|i| *i == first),
        "{instances:?} vs leader {first}"
    );
    let attempts =
        format!("scheduler_schedule_attempts_total{{result=\"scheduled\",profile=\"{profile}\"}}");
    assert_eq!(replicas[leader].metric(&attempts), 10.0);
    assert_eq!(replicas[standby].metric(&attempts), 0.0);
    assert_eq!(replicas[standby].get("/readyz").map(|r| r.0), Some(200));

    // The leader dies without releasing the lease: the standby waits for it to expire.
    replicas[leader].kill();
    let killed = Instant::now();
    let names: Vec<String> = (0..10).map(|i| format!("two-{i}")).collect();
    let instances = bind_all(&client, ns, profile, &names).await;
    let second = replicas[standby].identity().expect("identity");
    assert!(
        instances.iter().all(|i| *i == second),
        "{instances:?} vs new leader {second}"
    );
    assert!(
        killed.elapsed() >= Duration::from_secs(3),
        "took over {:?} after the kill, before the 4 s lease could expire",
        killed.elapsed()
    );
    assert_eq!(holder(&client).await.as_deref(), Some(second.as_str()));

    // A third replica stands by; the leader stops cleanly and hands over at once.
    let mut third = Gantry::start(plane.dir(), "ha-c", &cfg, &plane.kubeconfig());
    third.wait_ready().await;
    let third_id = third.identity().expect("identity");
    let stopped = Instant::now();
    assert_eq!(replicas[standby].terminate().code(), Some(0));
    assert!(replicas[standby].log_text().contains("lease released"));
    let next = eventually(
        Duration::from_secs(10),
        "the third replica leading",
        || async { holder(&client).await.filter(|h| *h == third_id) },
    )
    .await;
    assert!(
        stopped.elapsed() < Duration::from_secs(3),
        "handed over {:?} after SIGTERM: the lease was not released",
        stopped.elapsed()
    );
    let names: Vec<String> = (0..5).map(|i| format!("three-{i}")).collect();
    let instances = bind_all(&client, ns, profile, &names).await;
    assert!(
        instances.iter().all(|i| *i == next),
        "{instances:?} vs {next}"
    );
    // No pod was bound twice (each has exactly one Scheduled event, checked above) and all
    // 25 are bound.
    assert_eq!(
        pods(&client, ns)
            .await
            .iter()
            .filter(|p| node_of(p).is_some())
            .count(),
        25
    );
    assert_eq!(third.terminate().code(), Some(0));
}
