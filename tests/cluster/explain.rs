//! `gantry explain` against a running `gantry run` on a real kube-apiserver: a pod that was
//! placed (where and why that node won, what was ruled out) and one that cannot be placed
//! (why, and the single change that would let it fit), through the HTTP endpoint and the
//! decision log file; and the errors for an unknown pod and bad input.

use crate::support;

use std::process::{Command, Output};
use std::time::Duration;

use k8s_openapi::api::core::v1::Taint;
use support::*;

fn explain(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gantry"))
        .arg("explain")
        .args(args)
        .output()
        .expect("run gantry explain")
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "gantry explain failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explains_a_placed_pod_and_a_pending_one() {
    let plane = ControlPlane::start();
    let client = plane.client().await;
    let (ns, profile) = ("explain", "gantry-explain");
    create_namespace(&client, ns).await;
    create_node(&client, &node("explain-big", ns, "2", "4Gi")).await;
    create_node(&client, &node("explain-small", ns, "1", "4Gi")).await;
    let mut tainted = node("explain-gpu", ns, "8", "4Gi");
    tainted.spec.get_or_insert_with(Default::default).taints = Some(vec![Taint {
        key: "dedicated".to_string(),
        value: Some("gpu".to_string()),
        effect: "NoSchedule".to_string(),
        ..Default::default()
    }]);
    create_node(&client, &tainted).await;
    let log = plane.dir().join("explain-decisions.jsonl");
    let mut gantry = Gantry::start_with_args(
        plane.dir(),
        ns,
        &config(profile, ns, None, ""),
        &plane.kubeconfig(),
        &[
            "--decision-log".to_string(),
            log.display().to_string(),
            "--decision-log-max-size".to_string(),
            "1Mi".to_string(),
        ],
    );
    gantry.wait_ready().await;
    let server = format!("http://{}", gantry.addr);

    // 600m fits both untainted nodes; the bigger one is less allocated and wins.
    create_pod(&client, &pod(ns, "placed", profile, "600m", "64Mi")).await;
    let placed = eventually(Duration::from_secs(30), "placed bound", || async {
        let p = get_pod(&client, ns, "placed").await;
        node_of(&p).map(str::to_string)
    })
    .await;
    assert_eq!(placed, "explain-big");
    let out = stdout(&explain(&[&format!("{ns}/placed"), "--server", &server]));
    assert!(
        out.starts_with(
            "explain/placed  attempt 1: scheduled on explain-big  (profile gantry-explain,"
        ),
        "{out}"
    );
    assert!(
        out.contains("Nodes: 3 in the cluster, 3 evaluated, 2 feasible"),
        "{out}"
    );
    assert!(
        out.contains("Why explain-big: highest total score"),
        "{out}"
    );
    assert!(out.contains("more than explain-small ("), "{out}");
    assert!(
        out.contains("TaintToleration      1  node(s) had untolerated taint(s)"),
        "{out}"
    );

    // 2500m fits no node: explain-big has 1400m left, explain-small 1000m, and the large
    // node is tainted.
    create_pod(&client, &pod(ns, "stuck", profile, "2500m", "64Mi")).await;
    eventually(Duration::from_secs(30), "stuck unschedulable", || async {
        let p = get_pod(&client, ns, "stuck").await;
        pod_scheduled(&p).filter(|c| c.0 == "False")
    })
    .await;
    let out = stdout(&explain(&[&format!("{ns}/stuck"), "--server", &server]));
    for line in [
        ": unschedulable  (profile gantry-explain,",
        "  0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient cpu.",
        "    NodeResourcesFit      2  Insufficient cpu",
        "    TaintToleration       1  node(s) had untolerated taint(s)",
        "  What single change would let it fit:",
        "    - explain-big would fit with 1100m more cpu",
        "    - explain-gpu is rejected only by TaintToleration: untolerated taint {dedicated: gpu}",
    ] {
        assert!(out.contains(line), "missing {line:?} in\n{out}");
    }

    // The same records as JSON, and from the log file.
    let json = stdout(&explain(&[
        &format!("{ns}/stuck"),
        "--server",
        &server,
        "--output",
        "json",
    ]));
    let records: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let first = &records[0];
    assert_eq!(first["result"], "unschedulable");
    assert_eq!(first["nodesTotal"], 3);
    assert_eq!(first["suggestions"][0]["kind"], "moreResources");
    assert_eq!(first["suggestions"][0]["node"], "explain-big");
    assert_eq!(first["suggestions"][0]["shortfalls"][0]["amount"], 1100);
    let from_file = eventually(Duration::from_secs(10), "records in the file", || {
        let log = log.clone();
        async move {
            let out = explain(&["explain/stuck", "--file", &log.display().to_string()]);
            out.status.success().then(|| stdout(&out))
        }
    })
    .await;
    assert!(
        from_file.contains("    - explain-big would fit with 1100m more cpu"),
        "{from_file}"
    );

    // The endpoint itself, and the errors.
    let (status, body) = gantry.get("/debug/decisions/explain/nope").expect("answer");
    assert_eq!(status, 404);
    assert!(
        body.contains("no scheduling attempt of pod explain/nope is recorded"),
        "{body}"
    );
    let out = explain(&["explain/nope", "--server", &server]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("answered 404: no scheduling attempt of pod explain/nope is recorded"),
        "{err}"
    );
    let out = explain(&["nope", "--server", &server]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("expected the pod as <namespace>/<name>, got \"nope\""),
        "{err}"
    );
    let closed = format!("http://127.0.0.1:{}", free_port());
    let out = explain(&["explain/stuck", "--server", &closed]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot reach gantry at {closed}")),
        "{err}"
    );
    gantry.terminate();
}
