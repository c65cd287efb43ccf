//! The control plane of the integration tests: etcd and kube-apiserver on free loopback ports,
//! started by `scripts/control-plane.sh` in a temporary directory and stopped by a drop guard
//! (also when a test panics, and by a watchdog process if the test process is killed); the
//! Kubernetes binaries it and the components run from; kubectl as its admin.

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use kube::Client;

use super::{client_for, on_test_exit};

/// The repository root.
pub fn repo() -> PathBuf {
    // This crate is crates/test-support of the repository.
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// The folder `scripts/install-kube.sh` fills, as `scripts/lib.sh` names it (one place says
/// which Kubernetes, and where it is built).
fn install_folder() -> PathBuf {
    let lib = repo().join("scripts/lib.sh");
    let out = Command::new("bash")
        .arg("-c")
        .arg(r#". "$1" && printf '%s' "${GANTRY_KUBE_BIN}""#)
        .arg("bash")
        .arg(&lib)
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "{}: {}",
        lib.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The Kubernetes binaries `names` (etcd, kube-apiserver, kube-scheduler, kubectl, ...), found
/// as `scripts/lib.sh` finds them: in `$KUBEBUILDER_ASSETS` when it has the binary, else in
/// the folder `scripts/install-kube.sh` fills. Panics naming every one that is missing, so a
/// machine without them fails with one message saying how to get them.
pub fn kube_bins<const N: usize>(names: [&str; N]) -> [PathBuf; N] {
    let assets = std::env::var_os("KUBEBUILDER_ASSETS")
        .filter(|a| !a.is_empty())
        .map(PathBuf::from);
    let cache = install_folder();
    let found = names.map(|name| {
        assets
            .iter()
            .chain([&cache])
            .map(|dir| dir.join(name))
            .find(|p| is_executable(p))
    });
    let missing: Vec<&str> = names
        .iter()
        .zip(&found)
        .filter(|(_, path)| path.is_none())
        .map(|(name, _)| *name)
        .collect();
    assert!(
        missing.is_empty(),
        "missing Kubernetes binaries: {} (looked in $KUBEBUILDER_ASSETS, {}, and in {}): run \
         scripts/install-kube.sh, or export KUBEBUILDER_ASSETS=\"$(scripts/install-kube.sh)\"",
        missing.join(", "),
        assets
            .as_ref()
            .map_or("unset".to_string(), |a| a.display().to_string()),
        cache.display()
    );
    found.map(|path| path.expect("checked above"))
}

/// True for a file with an execute bit, as the shell's `-x` tells.
fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `scripts/control-plane.sh`, which starts and stops the control plane.
fn script() -> PathBuf {
    repo().join("scripts/control-plane.sh")
}

/// etcd + kube-apiserver on free loopback ports, with an empty etcd.
pub struct ControlPlane {
    dir: tempfile::TempDir,
    env: Mutex<HashMap<String, String>>,
    /// Runs of components so far, numbering their files.
    runs: AtomicUsize,
}

static SHARED: Mutex<Weak<ControlPlane>> = Mutex::new(Weak::new());

impl ControlPlane {
    /// Starts a control plane; panics (failing the test) if it cannot, e.g. when the
    /// binaries are missing (`scripts/install-kube.sh` provides them).
    pub fn start() -> ControlPlane {
        // The script finds them alike; looked for here first for the message.
        kube_bins(["etcd", "kube-apiserver"]);
        let dir = tempfile::Builder::new()
            .prefix("gantry-it-")
            .tempdir()
            .expect("temp dir");
        let out = Command::new(script())
            .arg("start")
            .arg(dir.path())
            .output()
            .expect("run scripts/control-plane.sh");
        assert!(
            out.status.success(),
            "control-plane.sh start failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let plane = ControlPlane {
            env: Mutex::new(read_env(&dir.path().join("env"))),
            dir,
            runs: AtomicUsize::new(0),
        };
        // Stops the control plane when this test process dies, however it dies.
        on_test_exit(&format!(
            "exec '{}' stop '{}'",
            script().display(),
            plane.dir().display()
        ));
        plane
    }

    /// A control plane shared by the tests of one binary that run at the same time; it
    /// stops when the last of them drops it.
    pub fn shared() -> Arc<ControlPlane> {
        let mut slot = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(plane) = slot.upgrade() {
            return plane;
        }
        let plane = Arc::new(ControlPlane::start());
        *slot = Arc::downgrade(&plane);
        plane
    }

    /// The state directory (logs, kubeconfigs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A variable of the control plane's env file.
    pub fn var(&self, key: &str) -> String {
        self.env
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
            .unwrap_or_else(|| panic!("{key} not in the control plane's env"))
    }

    /// The admin kubeconfig (system:masters).
    pub fn kubeconfig(&self) -> PathBuf {
        PathBuf::from(self.var("KUBECONFIG"))
    }

    /// The kubeconfig of the user `gantry`, who has no rights until bound to a role.
    pub fn gantry_kubeconfig(&self) -> PathBuf {
        PathBuf::from(self.var("GANTRY_KUBECONFIG"))
    }

    /// The API server's address.
    pub fn api_addr(&self) -> SocketAddr {
        format!("127.0.0.1:{}", self.var("APISERVER_PORT"))
            .parse()
            .expect("address")
    }

    /// An admin client.
    pub async fn client(&self) -> Client {
        client_for(&self.kubeconfig()).await
    }

    /// Runs kubectl as admin; panics with its output if it fails.
    pub fn kubectl(&self, args: &[&str]) -> String {
        self.try_kubectl(args, None)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Creates or updates the objects of `yaml` with `kubectl apply`; panics with what
    /// kubectl said if it fails.
    pub fn apply(&self, yaml: &str) {
        self.try_kubectl(&["apply", "-f", "-"], Some(yaml))
            .unwrap_or_else(|e| panic!("kubectl apply: {e}"));
    }

    /// Runs kubectl as admin with `stdin` as its input (for `-f -`): its output, or what it
    /// said when it failed.
    pub fn try_kubectl(&self, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
        let [kubectl] = kube_bins(["kubectl"]);
        let mut child = Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(self.kubeconfig())
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run kubectl: {e}"))?;
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(input.as_bytes())
                .map_err(|e| format!("kubectl stdin: {e}"))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| format!("kubectl: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "kubectl {} failed: {}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// `kubectl <args> -o json` as admin, parsed.
    pub fn try_kubectl_json(&self, args: &[&str]) -> Result<serde_json::Value, String> {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let text = self.try_kubectl(&all, None)?;
        serde_json::from_str(&text).map_err(|e| format!("kubectl {}: {e}", args.join(" ")))
    }

    /// A path of its own in the state directory for one run of the component `name`,
    /// `<dir>/<name>-<n>`, to which the run adds `.log`, `.yaml` and so on: every run's files
    /// stay for inspection.
    pub fn run_files(&self, name: &str) -> PathBuf {
        let n = self.runs.fetch_add(1, Ordering::Relaxed);
        self.dir().join(format!("{name}-{n}"))
    }

    /// Kills kube-apiserver (SIGKILL) and starts it again with the same flags (same port,
    /// certificates and etcd). Returns once it is ready.
    pub fn restart_apiserver(&self, down_for: Duration) {
        let pid = self.var("APISERVER_PID");
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("apiserver cmdline");
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let status = Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -KILL {pid}");
        while Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(&pid) {
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(down_for);
        // Started from a shell that exits at once, so that the server is nobody's child here,
        // just like the first one; stop finds it by the pid written to the env file.
        let log = self.dir().join("kube-apiserver.log");
        let out = Command::new("sh")
            .arg("-c")
            .arg("log=$1; shift; setsid \"$@\" >>\"$log\" 2>&1 </dev/null & echo $!")
            .arg("sh")
            .arg(&log)
            .args(&args)
            .output()
            .expect("restart kube-apiserver");
        let new_pid = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(
            !new_pid.is_empty(),
            "no pid for the restarted kube-apiserver"
        );
        let env_file = self.dir().join("env");
        let text = std::fs::read_to_string(&env_file).expect("env");
        let text: String = text
            .lines()
            .map(|l| {
                if l.starts_with("APISERVER_PID=") {
                    format!("APISERVER_PID={new_pid}\n")
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        std::fs::write(&env_file, text).expect("write env");
        self.env
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert("APISERVER_PID".to_string(), new_pid);
        let deadline = Instant::now() + Duration::from_secs(90);
        while Instant::now() < deadline {
            let out = Command::new("curl")
                .args(["-sk", "--max-time", "2", "-H"])
                .arg(format!("Authorization: Bearer {}", self.var("ADMIN_TOKEN")))
                .arg(format!("{}/readyz", self.var("APISERVER_URL")))
                .output()
                .expect("curl");
            if out.stdout == b"ok" {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("kube-apiserver not ready 90 s after restart");
    }
}

/// True when process `pid` is gone or a zombie (in some containers nothing reaps orphans).
fn is_zombie(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('Z'))
        })
        .unwrap_or(true)
}

impl Drop for ControlPlane {
    /// Stops the control plane; after a failure keeps its directory (without etcd's data) and
    /// says where, so that the logs can be read.
    fn drop(&mut self) {
        let _ = Command::new(script())
            .arg("stop")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if std::thread::panicking() {
            self.dir.disable_cleanup(true);
            let _ = std::fs::remove_dir_all(self.dir.path().join("etcd"));
            eprintln!("kept {} (logs) for inspection", self.dir.path().display());
        }
    }
}

/// The `KEY=value` lines of the control plane's env file.
fn read_env(path: &Path) -> HashMap<String, String> {
    let text = std::fs::read_to_string(path).expect("control plane env file");
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim_matches('\'').to_string()))
        .collect()
}
