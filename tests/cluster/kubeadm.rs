//! `gantry run` with exactly the command line of kubeadm's kube-scheduler static pod (today's
//! kubeadm: `--authentication-kubeconfig`, `--authorization-kubeconfig`, `--bind-address`,
//! `--kubeconfig` and `--leader-elect`, the three kubeconfigs being `scheduler.conf`, here
//! the test's kubeconfig of a user with the deployed rights), against a real kube-apiserver;
//! then what kubeadm's probes do (HTTPS GET of /livez and /readyz on 127.0.0.1:10259, the
//! certificate not verified, as the kubelet does not) and what a Prometheus scraping
//! /metrics meets: a bad token 401, no token 401, a service account
//! the API server's RBAC does not allow 403, one allowed 200; and what the kubernetes-mixin
//! scheduler dashboard shows once a real Prometheus scrapes gantry with that token.

use crate::support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use support::prometheus::Prometheus;
use support::*;

/// kube-scheduler's (and kubeadm's probes') secure port.
const SECURE_PORT: u16 = 10259;

/// GET `https://127.0.0.1:10259<path>` without verifying the certificate, with `token` as
/// bearer token if given: (status, body), or None if nothing answers.
fn get(path: &str, token: Option<&str>) -> Option<(u16, String)> {
    let mut curl = Command::new("curl");
    curl.args(["-sk", "--max-time", "5", "-w", "\n%{http_code}"]);
    if let Some(t) = token {
        curl.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    let out = curl
        .arg(format!("https://127.0.0.1:{SECURE_PORT}{path}"))
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n')?;
    let code: u16 = code.trim().parse().ok()?;
    (code != 0).then(|| (code, body.to_string()))
}

/// A one-second CPU profile from /debug/pprof/profile, taken with `token`.
fn cpu_profile(token: &str) -> pprof::protos::Profile {
    use pprof::protos::Message;
    let out = Command::new("curl")
        .args(["-sk", "--fail", "--max-time", "20", "-H"])
        .arg(format!("Authorization: Bearer {token}"))
        .arg(format!(
            "https://127.0.0.1:{SECURE_PORT}/debug/pprof/profile?seconds=1"
        ))
        .output()
        .expect("curl");
    assert!(out.status.success(), "curl: {:?}", out.status);
    pprof::protos::Profile::decode(out.stdout.as_slice()).expect("a pprof profile")
}

/// The subject and subject alternative names of the served certificate.
fn served_certificate() -> String {
    let shown = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl s_client -connect 127.0.0.1:{SECURE_PORT} </dev/null 2>/dev/null \
             | openssl x509 -noout -subject -ext subjectAltName"
        ))
        .output()
        .expect("openssl");
    String::from_utf8_lossy(&shown.stdout).into_owned()
}

/// A token of the service account `name` in `default`, made by the API server.
async fn service_account_token(plane: &ControlPlane, name: &str) -> String {
    let client = plane.client().await;
    let accounts: Api<ServiceAccount> = Api::namespaced(client, "default");
    let account = ServiceAccount {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        ..Default::default()
    };
    accounts
        .create(&PostParams::default(), &account)
        .await
        .expect("create the service account");
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .expect("a token")
        .status
        .expect("a token status")
        .token
        .expect("a token")
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeadms_kube_scheduler_command_line_starts_gantry_and_passes_its_probes() {
    assert!(
        std::net::TcpListener::bind(("127.0.0.1", SECURE_PORT)).is_ok(),
        "port {SECURE_PORT} is taken: this test needs kube-scheduler's port"
    );
    let plane = ControlPlane::start();
    let deploy = repo().join("deploy");
    // The user "gantry" gets what the deployment gives gantry: the scheduler's ClusterRole
    // and system:auth-delegator; and its lease, kube-system/gantry here (no --config).
    plane.kubectl(&[
        "apply",
        "-f",
        &deploy.join("00-namespace.yaml").display().to_string(),
        "-f",
        &deploy.join("10-rbac.yaml").display().to_string(),
    ]);
    for (name, role) in [
        ("gantry-user", "gantry"),
        ("gantry-delegator", "system:auth-delegator"),
    ] {
        plane.kubectl(&[
            "create",
            "clusterrolebinding",
            name,
            &format!("--clusterrole={role}"),
            "--user=gantry",
        ]);
    }
    plane.kubectl(&[
        "create",
        "role",
        "gantry-lease",
        "--namespace=kube-system",
        "--verb=create,get,update",
        "--resource=leases.coordination.k8s.io",
    ]);
    plane.kubectl(&[
        "create",
        "rolebinding",
        "gantry-lease",
        "--namespace=kube-system",
        "--role=gantry-lease",
        "--user=gantry",
    ]);
    // Prometheus' service account may read /metrics (and take a CPU profile); another may not.
    plane.apply(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: metrics-reader}\n\
         rules:\n- nonResourceURLs: [/metrics, /debug/pprof/*]\n  verbs: [get]\n",
    );
    plane.kubectl(&[
        "create",
        "clusterrolebinding",
        "metrics-reader",
        "--clusterrole=metrics-reader",
        "--serviceaccount=default:prometheus",
    ]);
    let allowed = service_account_token(&plane, "prometheus").await;
    let not_allowed = service_account_token(&plane, "nobody").await;

    let conf = plane.gantry_kubeconfig().display().to_string();
    let log = plane.dir().join("gantry-kubeadm.log");
    // kubeadm's command, its flags as it writes them (sorted), the paths replaced.
    let command = [
        format!("--authentication-kubeconfig={conf}"),
        format!("--authorization-kubeconfig={conf}"),
        "--bind-address=127.0.0.1".to_string(),
        format!("--kubeconfig={conf}"),
        "--leader-elect=true".to_string(),
    ];
    let _gantry = Killed(
        Command::new(env!("CARGO_BIN_EXE_gantry"))
            .arg("run")
            .args(&command)
            .env_remove("KUBECONFIG")
            .env("GANTRY_LOG", "info,gantry=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("start gantry"),
    );
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();

    // The startup probe, then the liveness and readiness probes.
    let deadline = Instant::now() + Duration::from_secs(60);
    while get("/livez", None).map(|r| r.0) != Some(200) {
        assert!(
            Instant::now() < deadline,
            "/livez never answered 200:\n{}",
            log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    while get("/readyz", None).map(|r| r.0) != Some(200) {
        assert!(
            Instant::now() < deadline,
            "/readyz never answered 200:\n{}",
            log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(get("/healthz", None), Some((200, "ok".to_string())));

    // The self-signed certificate, made as kube-scheduler makes it.
    let certificate = served_certificate();
    assert!(certificate.contains("CN = localhost@"), "{certificate}");
    assert!(
        certificate.contains("DNS:localhost") && certificate.contains("IP Address:127.0.0.1"),
        "{certificate}"
    );

    // /metrics: refused without the right token, served with it.
    let (code, _) = get("/metrics", Some("not-a-token")).expect("an answer");
    assert_eq!(code, 401);
    let (code, body) = get("/metrics", None).expect("an answer");
    assert_eq!(code, 401, "{body}");
    let (code, body) = get("/metrics", Some(&not_allowed)).expect("an answer");
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains("system:serviceaccount:default:nobody"),
        "{body}"
    );
    let (code, body) = get("/metrics", Some(&allowed)).expect("an answer");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("scheduler_pending_pods"), "{body}");
    // The decision log is behind the same checks.
    let (code, _) = get("/debug/decisions/default/none", Some(&not_allowed)).expect("an answer");
    assert_eq!(code, 403);
    // So is profiling, on by default as in kube-scheduler: a CPU profile in pprof's format.
    let (code, _) = get("/debug/pprof/profile?seconds=1", None).expect("an answer");
    assert_eq!(code, 401);
    let (code, _) = get("/debug/pprof/profile?seconds=1", Some(&not_allowed)).expect("an answer");
    assert_eq!(code, 403);
    let profile = cpu_profile(&allowed);
    let unit = |i: i64| profile.string_table[i as usize].as_str();
    assert!(
        profile
            .sample_type
            .iter()
            .any(|t| unit(t.ty) == "cpu" && unit(t.unit) == "nanoseconds"),
        "{:?}",
        profile.sample_type
    );
    assert!(
        profile.duration_nanos >= 1_000_000_000,
        "{}",
        profile.duration_nanos
    );
    // It leads: the lease is its own (kube-system/gantry, not kube-scheduler's).
    let leases = plane.kubectl(&["get", "lease", "-n", "kube-system", "-o", "name"]);
    assert!(
        leases.contains("lease.coordination.k8s.io/gantry"),
        "{leases}"
    );

    // A cluster's Prometheus scrapes it as it scrapes kube-scheduler, and the
    // kubernetes-mixin scheduler dashboard finds data for every panel.
    let client = plane.client().await;
    create_node(&client, &node("n1", "kubeadm", "8", "16Gi")).await;
    let prometheus = Prometheus::with_scrape_configs(&format!(
        "- job_name: kube-scheduler\n  scheme: https\n  \
         tls_config: {{insecure_skip_verify: true}}\n  \
         authorization: {{credentials: {allowed}}}\n  \
         static_configs:\n  - targets: ['127.0.0.1:{SECURE_PORT}']\n"
    ));
    dashboard_panels_have_data(&prometheus, &client, &log_text).await;
}

/// The kubernetes-mixin scheduler dashboard's queries (its `scheduler.libsonnet`, single
/// cluster: `$cluster` empty, `$instance` all of `up{job="kube-scheduler"}`'s instances,
/// `$__rate_interval` a minute), each answered with data once Prometheus has scraped
/// gantry for a while, a pod being created every round so that the rates are not zero. `scheduler_volume_scheduling_duration_seconds`, one of the
/// Scheduling Rate and latency panels' four series, is left out: today's kube-scheduler
/// no longer serves it either (those panels show the other three).
async fn dashboard_panels_have_data(
    prometheus: &Prometheus,
    client: &kube::Client,
    log_text: &dyn Fn() -> String,
) {
    let sel = r#"cluster="", job="kube-scheduler", instance=~"$instance""#;
    let panels: Vec<(&str, String)> = vec![
        (
            "Up",
            r#"sum(up{cluster="", job="kube-scheduler"})"#.to_string(),
        ),
        (
            "Scheduling Rate (attempts)",
            format!(
                "sum(rate(scheduler_scheduling_attempt_duration_seconds_count{{{sel}}}[1m])) by (cluster, instance)"
            ),
        ),
        (
            "Scheduling Rate (SLI)",
            format!(
                "sum(rate(scheduler_pod_scheduling_sli_duration_seconds_count{{{sel}}}[1m])) by (cluster, instance)"
            ),
        ),
        (
            "Scheduling Rate (algorithm)",
            format!(
                "sum(rate(scheduler_scheduling_algorithm_duration_seconds_count{{{sel}}}[1m])) by (cluster, instance)"
            ),
        ),
        (
            "Scheduling latency (attempts)",
            format!(
                "histogram_quantile(0.99, sum(rate(scheduler_scheduling_attempt_duration_seconds_bucket{{{sel}}}[1m])) by (cluster, instance, le))"
            ),
        ),
        (
            "Scheduling latency (SLI)",
            format!(
                "histogram_quantile(0.99, sum(rate(scheduler_pod_scheduling_sli_duration_seconds_bucket{{{sel}}}[1m])) by (cluster, instance, le))"
            ),
        ),
        (
            "Scheduling latency (algorithm)",
            format!(
                "histogram_quantile(0.99, sum(rate(scheduler_scheduling_algorithm_duration_seconds_bucket{{{sel}}}[1m])) by (cluster, instance, le))"
            ),
        ),
        (
            "Kube API Request Rate",
            format!(r#"sum(rate(rest_client_requests_total{{{sel},code=~"2.."}}[1m]))"#),
        ),
        (
            "Post Request Latency",
            format!(
                r#"histogram_quantile(0.99, sum(rate(rest_client_request_duration_seconds_bucket{{{sel}, verb="POST"}}[1m])) by (verb, le))"#
            ),
        ),
        (
            "Get Request Latency",
            format!(
                r#"histogram_quantile(0.99, sum(rate(rest_client_request_duration_seconds_bucket{{{sel}, verb="GET"}}[1m])) by (verb, le))"#
            ),
        ),
        ("Memory", format!("process_resident_memory_bytes{{{sel}}}")),
        (
            "CPU usage",
            format!("rate(process_cpu_seconds_total{{{sel}}}[1m])"),
        ),
        ("Goroutines", format!("go_goroutines{{{sel}}}")),
    ];
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut missing: Vec<String> = Vec::new();
    let mut round = 0;
    while Instant::now() < deadline {
        round += 1;
        let p = pod(
            "default",
            &format!("p{round}"),
            "default-scheduler",
            "10m",
            "16Mi",
        );
        create_pod(client, &p).await;
        // The dashboard's instance variable: every instance `up` knows for the job.
        let instances: Vec<String> = prometheus
            .query_vector(r#"up{job="kube-scheduler", cluster=""}"#)
            .unwrap_or_default()
            .iter()
            .filter_map(|r| r["metric"]["instance"].as_str().map(str::to_string))
            .collect();
        let instance = if instances.is_empty() {
            ".+".to_string()
        } else {
            instances.join("|")
        };
        missing = panels
            .iter()
            .filter_map(|(panel, query)| {
                let query = query.replace("$instance", &instance);
                match prometheus.query_vector(&query) {
                    Ok(v) if v.iter().any(has_number) => None,
                    Ok(v) => Some(format!("{panel}: {query} -> {v:?}")),
                    Err(e) => Some(format!("{panel}: {query} -> {e}")),
                }
            })
            .collect();
        if missing.is_empty() && instances.len() == 1 {
            return;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    panic!(
        "dashboard panels without data:\n{}\ntargets: {}\n{}",
        missing.join("\n"),
        prometheus.targets(),
        log_text()
    );
}

/// Whether a result's value is a number (a quantile of nothing is NaN).
fn has_number(result: &serde_json::Value) -> bool {
    result["value"][1]
        .as_str()
        .and_then(|v| v.parse::<f64>().ok())
        .is_some_and(f64::is_finite)
}
