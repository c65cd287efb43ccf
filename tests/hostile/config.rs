//! The built `gantry` binary refuses invalid input before it does anything with it: `gantry
//! run` with a configuration that fails validation exits non-zero, names the field on
//! stderr, and never contacts the API server its kubeconfig points to; `gantry webhook` and
//! `gantry simulate` refuse theirs the same way. The configuration kube-scheduler writes out
//! is taken whole, and means what gantry's defaults mean.

use std::io::ErrorKind;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support;

const HEADER: &str =
    "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n";

/// Runs the binary with `args`, killing it (and failing) if it is still running after 30 s.
fn gantry(args: &[&std::ffi::OsStr]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args(args)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start gantry");
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().expect("wait for gantry").is_none() {
        if Instant::now() > deadline {
            child.kill().expect("kill gantry");
            panic!("gantry {args:?} still running after 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("gantry's output")
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write a file");
    path
}

/// An "API server" that only counts connections: a listening socket nobody answers on.
struct Server {
    listener: TcpListener,
}

impl Server {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
        listener.set_nonblocking(true).expect("non-blocking");
        Server { listener }
    }

    fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let port = self.listener.local_addr().expect("address").port();
        write(
            dir,
            "kubeconfig",
            &format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\n\
                 users:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n\
                 current-context: x\n"
            ),
        )
    }

    fn was_contacted(&self) -> bool {
        match self.listener.accept() {
            Ok(_) => true,
            Err(e) if e.kind() == ErrorKind::WouldBlock => false,
            Err(e) => panic!("accept: {e}"),
        }
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn gantry_run_refuses_an_invalid_configuration_before_contacting_the_api_server() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let server = Server::start();
    let kubeconfig = server.kubeconfig(dir.path());
    let cases = [
        (
            "weight.yaml",
            format!(
                "{HEADER}profiles:\n- plugins:\n    score:\n      enabled:\n      - {{name: ImageLocality, weight: 9223372036854775807}}\n"
            ),
            "profiles[0].plugins.score.enabled[0].weight: must be at most 2147483647",
        ),
        (
            "qps.yaml",
            format!("{HEADER}clientConnection: {{qps: 1e-300, burst: 0}}\n"),
            "clientConnection.qps: must be 0 (no throttling) or between 0.01",
        ),
        (
            "burst.yaml",
            format!("{HEADER}clientConnection: {{qps: 50, burst: 0}}\n"),
            "clientConnection.burst: must be at least 1",
        ),
        (
            "renew.yaml",
            format!("{HEADER}leaderElection: {{renewDeadline: 2s, retryPeriod: 2s}}\n"),
            "leaderElection.renewDeadline: must be greater than retryPeriod * 1.2",
        ),
        (
            "lease.yaml",
            format!("{HEADER}leaderElection: {{resourceName: Gantry_Lease}}\n"),
            "leaderElection.resourceName: \"Gantry_Lease\" must be a lowercase RFC 1123 subdomain",
        ),
        (
            "namespace.yaml",
            format!("{HEADER}leaderElection: {{resourceNamespace: kube.system}}\n"),
            "leaderElection.resourceNamespace: \"kube.system\" must be a lowercase RFC 1123 label",
        ),
        (
            "parallelism.yaml",
            format!("{HEADER}parallelism: 0\n"),
            "parallelism: must be between 1 and 1024, got 0",
        ),
        (
            "preemption_args.yaml",
            format!(
                "{HEADER}profiles:\n- pluginConfig:\n  - name: DefaultPreemption\n    args: {{minCandidateNodesPercentage: 0, minCandidateNodesAbsolute: 0}}\n"
            ),
            "profiles[0].pluginConfig[0].args: minCandidateNodesPercentage: Invalid value: 0: cannot be zero at the same time as minCandidateNodesAbsolute, minCandidateNodesAbsolute: Invalid value: 0: cannot be zero at the same time as minCandidateNodesPercentage",
        ),
        (
            "preemption_range.yaml",
            format!(
                "{HEADER}profiles:\n- pluginConfig:\n  - name: DefaultPreemption\n    args: {{minCandidateNodesPercentage: 150}}\n"
            ),
            "profiles[0].pluginConfig[0].args.minCandidateNodesPercentage: Invalid value: 150: not in valid range [0, 100]",
        ),
        (
            "duplicate_args.yaml",
            format!(
                "{HEADER}profiles:\n- pluginConfig:\n  - name: VolumeBinding\n    args: {{bindTimeoutSeconds: 600}}\n  - name: VolumeBinding\n"
            ),
            "profiles[0].pluginConfig[1]: Duplicate value: \"VolumeBinding\"",
        ),
        (
            "extenders.yaml",
            format!(
                "{HEADER}extenders:\n- urlPrefix: http://127.0.0.1:8888\n  prioritizeVerb: prioritize\n"
            ),
            "extenders[0].weight: Invalid value: 0: must have a positive weight applied to it",
        ),
        (
            "deep.yaml",
            format!("{HEADER}profiles: {}\n", "[".repeat(100_000)),
            "nested deeper than 128 levels at line 3",
        ),
    ];
    for (name, text, want) in cases {
        let config = write(dir.path(), name, &text);
        let out = gantry(&[
            "run".as_ref(),
            "--config".as_ref(),
            config.as_os_str(),
            "--kubeconfig".as_ref(),
            kubeconfig.as_os_str(),
            "--address".as_ref(),
            "127.0.0.1:0".as_ref(),
            "--secure-port=0".as_ref(),
        ]);
        let err = stderr(&out);
        assert!(!out.status.success(), "{name}: gantry run succeeded: {err}");
        assert!(
            err.contains(want),
            "{name}: stderr does not say {want:?}: {err}"
        );
        assert!(
            !server.was_contacted(),
            "{name}: gantry run contacted the API server"
        );
    }
}

#[test]
fn gantry_webhook_refuses_an_invalid_configuration() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = write(
        dir.path(),
        "rollout.yaml",
        "apiVersion: gantry.io/v1alpha1\nkind: RolloutConfiguration\nschedulerName: Gantry\n",
    );
    let missing = dir.path().join("missing.pem");
    let out = gantry(&[
        "webhook".as_ref(),
        "--config".as_ref(),
        config.as_os_str(),
        "--tls-cert-file".as_ref(),
        missing.as_os_str(),
        "--tls-private-key-file".as_ref(),
        missing.as_os_str(),
    ]);
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("schedulerName: \"Gantry\" must be a lowercase RFC 1123 subdomain"),
        "{err}"
    );
}

#[test]
fn gantry_simulate_refuses_a_pod_defined_twice_and_deep_nesting() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: shop}\nspec: {containers: []}\n";
    let first = write(dir.path(), "a.yaml", pod);
    let second = write(dir.path(), "b.yaml", &format!("---\n{pod}"));
    let out = gantry(&["simulate".as_ref(), first.as_os_str(), second.as_os_str()]);
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "pod shop/web is defined twice: in {}: document 1 and in {}: document 1",
            first.display(),
            second.display()
        )),
        "{err}"
    );
    let deep = write(dir.path(), "deep.yaml", &"- ".repeat(100_000));
    let out = gantry(&["simulate".as_ref(), deep.as_os_str()]);
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("nested deeper than 128 levels at line 1"),
        "{err}"
    );
}

#[test]
fn an_error_names_its_cause_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("missing.yaml");
    for command in ["run", "simulate"] {
        let args: Vec<&std::ffi::OsStr> = match command {
            "run" => vec!["run".as_ref(), "--config".as_ref(), missing.as_os_str()],
            _ => vec!["simulate".as_ref(), missing.as_os_str()],
        };
        let out = gantry(&args);
        assert!(!out.status.success());
        let text = stderr(&out);
        assert_eq!(
            text.matches("os error 2").count(),
            1,
            "gantry {command}: the cause once:\n{text}"
        );
    }
}

/// What kube-scheduler writes with `--write-config-to`: its default profile in full.
const KUBE_SCHEDULER_DEFAULTS: &str =
    include_str!("../../crates/core/src/config/testdata/kube_scheduler_defaults.yaml");

#[test]
fn kube_schedulers_written_defaults_are_accepted_entirely() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let server = Server::start();
    let kubeconfig = server.kubeconfig(dir.path());
    let written = write(dir.path(), "written.yaml", KUBE_SCHEDULER_DEFAULTS);
    assert!(
        KUBE_SCHEDULER_DEFAULTS.contains("      - name: DefaultPreemption\n"),
        "DefaultPreemption is enabled"
    );
    // gantry run takes it, DefaultPreemption included, and goes on to the API server.
    let mut child = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args(["run".as_ref(), "--config".as_ref(), written.as_os_str()])
        .args(["--kubeconfig".as_ref(), kubeconfig.as_os_str()])
        .args(["--address", "127.0.0.1:0", "--secure-port=0"])
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start gantry");
    let deadline = Instant::now() + Duration::from_secs(30);
    let contacted = loop {
        if server.was_contacted() {
            break true;
        }
        if child.try_wait().expect("wait for gantry").is_some() || Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = child.kill();
    let out = child.wait_with_output().expect("gantry's output");
    assert!(
        contacted,
        "gantry run did not get past the configuration: {}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains(
            "profile default-scheduler: DynamicResources: gantry does not allocate devices"
        ),
        "a warning at start for the plugin gantry takes by name: {}",
        stderr(&out)
    );

    // gantry simulate runs with it too.
    let out = gantry(&[
        "simulate".as_ref(),
        "--config".as_ref(),
        written.as_os_str(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// The text of a configuration file without its comment lines.
fn without_comments(text: &str) -> String {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The profiles of what `gantry run --write-config-to` writes, given `extra` arguments, with
/// each profile's plugin arguments in name order (gantry writes those a file gives first).
fn effective_profiles(dir: &Path, name: &str, extra: &[&std::ffi::OsStr]) -> serde_yaml::Value {
    let target = dir.join(name);
    let mut args: Vec<&std::ffi::OsStr> = vec!["run".as_ref()];
    args.extend(extra);
    args.extend(["--write-config-to".as_ref(), target.as_os_str()]);
    let out = gantry(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&target).expect("the written configuration");
    let mut written: serde_yaml::Value = serde_yaml::from_str(&text).expect("YAML");
    for profile in written["profiles"].as_sequence_mut().into_iter().flatten() {
        if let Some(args) = profile["pluginConfig"].as_sequence_mut() {
            args.sort_by_key(|a| a["name"].as_str().unwrap_or_default().to_string());
        }
    }
    written["profiles"].clone()
}

#[test]
fn kube_schedulers_own_dump_is_the_copy_and_means_gantrys_defaults() {
    let dir = tempfile::tempdir().expect("temporary directory");
    // kube-scheduler writes its configuration before it would contact anything.
    let kubeconfig = write(
        dir.path(),
        "kubeconfig",
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n\
         contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: t}}]\n\
         current-context: c\n",
    );
    let dump = dir.path().join("dump.yaml");
    let [scheduler] = support::kube_bins(["kube-scheduler"]);
    let out = Command::new(&scheduler)
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--write-config-to={}", dump.display()))
        .output()
        .expect("run kube-scheduler");
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&dump).expect("kube-scheduler's dump");
    let text = text.replace(
        &format!("  kubeconfig: {}\n", kubeconfig.display()),
        "  kubeconfig: \"\"\n",
    );
    assert_eq!(
        text,
        without_comments(KUBE_SCHEDULER_DEFAULTS),
        "crates/core/src/config/testdata/kube_scheduler_defaults.yaml is not what {} writes",
        scheduler.display()
    );
    let from_dump = effective_profiles(
        dir.path(),
        "from-dump.yaml",
        &["--config".as_ref(), dump.as_os_str()],
    );
    let defaults = effective_profiles(dir.path(), "defaults.yaml", &[]);
    assert_eq!(from_dump, defaults);
}
