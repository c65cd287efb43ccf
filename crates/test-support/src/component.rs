//! Kubernetes components that a test runs against its control plane: kube-scheduler and
//! kube-controller-manager (its PersistentVolume controller), and any other the same way,
//! through [`Component`]. Each one is a child process of the test with its output in a log
//! file in the control plane's directory, stopped when dropped, and killed by a watchdog if the
//! test process dies first.

use std::ffi::OsString;
use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{ControlPlane, free_port, kube_bins, on_test_exit};

/// How long a component may take to exit after SIGTERM before it gets SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// A Kubernetes binary running as a child of the test.
pub struct Component {
    /// The binary's name, for messages.
    name: String,
    child: Child,
    /// Kills the component if the test process dies before dropping it.
    watchdog: Option<Child>,
    /// Its stdout and stderr.
    log: PathBuf,
}

impl Component {
    /// Starts the Kubernetes binary `binary` (found by [`kube_bins`]) with `args`; its output
    /// goes to `<files>.log`, `files` being the run's path from [`ControlPlane::run_files`].
    pub fn start(binary: &str, args: &[String], files: &Path) -> Result<Component, String> {
        let [path] = kube_bins([binary]);
        let log = with_suffix(files, ".log");
        let out = File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out
            .try_clone()
            .map_err(|e| format!("{}: {e}", log.display()))?;
        let child = Command::new(&path)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", path.display()))?;
        let watchdog = on_test_exit(&format!("kill -KILL {}", child.id()));
        Ok(Component {
            name: binary.to_string(),
            child,
            watchdog,
            log,
        })
    }

    /// The last `lines` lines of its log.
    fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Polls `ready` every 100 ms until it holds; fails with the end of the log if the
    /// process exits first or `timeout` passes.
    pub fn wait_until(
        &mut self,
        timeout: Duration,
        mut ready: impl FnMut() -> bool,
    ) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        while !ready() {
            let problem = if let Ok(Some(status)) = self.child.try_wait() {
                format!("exited during startup ({status})")
            } else if Instant::now() > deadline {
                format!("not ready after {timeout:?}")
            } else {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            };
            return Err(format!(
                "{} {problem}; the end of {}:\n{}",
                self.name,
                self.log.display(),
                self.log_tail(30)
            ));
        }
        Ok(())
    }
}

impl Drop for Component {
    /// Stops it (SIGTERM, then SIGKILL if it is still running [`STOP_TIMEOUT`] later), then
    /// its watchdog.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        while matches!(self.child.try_wait(), Ok(None)) {
            if Instant::now() > deadline {
                eprintln!(
                    "{} still running {STOP_TIMEOUT:?} after SIGTERM; sending SIGKILL",
                    self.name
                );
                let _ = self.child.kill();
                let _ = self.child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }
}

/// `path` with `suffix` appended to its file name (`kube-scheduler-0` to
/// `kube-scheduler-0.log`).
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = OsString::from(path);
    name.push(suffix);
    PathBuf::from(name)
}

/// kube-scheduler (the version `scripts/install-kube.sh` builds) running against a control
/// plane as its admin.
pub struct KubeScheduler {
    component: Component,
    /// Its HTTPS port, where /healthz and /metrics are served to anyone.
    secure: SocketAddr,
}

impl KubeScheduler {
    /// Starts kube-scheduler with `config` (a `KubeSchedulerConfiguration` as JSON, `v1`),
    /// which gets the admin kubeconfig as its client connection's; its files are
    /// `kube-scheduler-<n>.yaml` and `.log` in the control plane's directory. Returns once
    /// /healthz answers ok; fails with the end of its log if it exits first (a configuration
    /// it refuses, say) or is not healthy within 60 s.
    pub fn start(plane: &ControlPlane, config: &Value) -> Result<KubeScheduler, String> {
        let files = plane.run_files("kube-scheduler");
        let kubeconfig = plane.kubeconfig().display().to_string();
        let secure: SocketAddr = format!("127.0.0.1:{}", free_port())
            .parse()
            .expect("address");
        let mut config = config.clone();
        config["clientConnection"]["kubeconfig"] = json!(kubeconfig);
        let config_file = with_suffix(&files, ".yaml");
        let text = serde_yaml::to_string(&config).map_err(|e| e.to_string())?;
        std::fs::write(&config_file, text)
            .map_err(|e| format!("{}: {e}", config_file.display()))?;
        let args = [
            format!("--config={}", config_file.display()),
            // Its HTTPS port on loopback, on a free port instead of the fixed 10259, with a
            // self-signed certificate made in memory.
            "--bind-address=127.0.0.1".to_string(),
            format!("--secure-port={}", secure.port()),
            // Delegated authn/authz on that port; without them it looks for an in-cluster
            // configuration and warns.
            format!("--authentication-kubeconfig={kubeconfig}"),
            // Bearer tokens are checked by TokenReview against the apiserver; otherwise the
            // scheduler also looks for client CA settings in the configmap
            // kube-system/extension-apiserver-authentication, which this apiserver (no
            // --client-ca-file) never writes, and logs an error per retry.
            "--authentication-skip-lookup".to_string(),
            format!("--authorization-kubeconfig={kubeconfig}"),
            // /metrics to anyone too, as /healthz is by default: the tests read it.
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics".to_string(),
        ];
        let mut component = Component::start("kube-scheduler", &args, &files)?;
        component.wait_until(Duration::from_secs(60), || https_ok(secure, "/healthz"))?;
        Ok(KubeScheduler { component, secure })
    }

    /// Its metrics (Prometheus text exposition).
    pub fn metrics(&self) -> Result<String, String> {
        let problem = match https_get(self.secure, "/metrics") {
            Some((200, body)) => return Ok(body),
            Some((status, _)) => format!("status {status}"),
            None => "no answer".to_string(),
        };
        Err(format!(
            "kube-scheduler's /metrics at {}: {problem} (log: {})",
            self.secure,
            self.component.log.display()
        ))
    }
}

/// A GET over HTTPS to a component's self-signed port (curl, as the control plane's script
/// uses): the status and the body, none when nothing answers.
fn https_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let out = Command::new("curl")
        .args(["-sk", "--max-time", "5", "-w", "\n%{http_code}"])
        .arg(format!("https://{addr}{path}"))
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let (body, status) = text.rsplit_once('\n')?;
    Some((
        status.trim().parse().ok().filter(|s| *s != 0)?,
        body.to_string(),
    ))
}

/// kube-controller-manager (the version `scripts/install-kube.sh` builds) running
/// against a control plane as its admin, with only the PersistentVolume controller: it binds
/// claims to volumes, completes the bindings a scheduler starts, and provisions volumes, in
/// directories of the test machine, for StorageClasses of `kubernetes.io/host-path`.
pub struct KubeControllerManager {
    /// The process, held for its drop, which stops it.
    _component: Component,
}

impl KubeControllerManager {
    /// Starts kube-controller-manager with the flags below and then `extra_args` (a
    /// single-value flag given again there wins); its log is `kube-controller-manager-<n>.log`
    /// in the control plane's directory. Returns once /healthz answers ok; fails with the end
    /// of its log if it exits first or is not healthy within 60 s.
    pub fn start(
        plane: &ControlPlane,
        extra_args: &[&str],
    ) -> Result<KubeControllerManager, String> {
        let files = plane.run_files("kube-controller-manager");
        let kubeconfig = plane.kubeconfig().display().to_string();
        let secure: SocketAddr = format!("127.0.0.1:{}", free_port())
            .parse()
            .expect("address");
        let mut args = vec![
            format!("--kubeconfig={kubeconfig}"),
            // The PersistentVolume controller alone (not even the pv- and pvc-protection
            // controllers: a claim or volume deleted keeps its protection finalizer).
            "--controllers=persistentvolume-binder".to_string(),
            // Its in-tree provisioner for kubernetes.io/host-path, meant for testing only: a
            // volume is a new directory /tmp/hostpath_pv/<uuid> of this machine (the path is
            // fixed in 1.20), removed when the volume is reclaimed with policy Delete.
            "--enable-hostpath-provisioner".to_string(),
            // One instance, active at once: no lease to wait for.
            "--leader-elect=false".to_string(),
            // Every claim and volume is synced again each second (15 s by default), so that
            // what waits for a resync in the controller takes a second in a test.
            "--pvclaimbinder-sync-period=1s".to_string(),
            // Its HTTPS port (/healthz) on loopback, on a free port instead of the fixed 10257,
            // with a self-signed certificate made in memory.
            "--bind-address=127.0.0.1".to_string(),
            format!("--secure-port={}", secure.port()),
            // Delegated authn/authz on the secure port (where /healthz is always allowed), as
            // for kube-scheduler: without them it warns that it can check neither tokens nor
            // client certificates; without the skip it looks for client CA settings in the
            // configmap kube-system/extension-apiserver-authentication, which this apiserver
            // (no --client-ca-file) never writes, and logs an error per retry.
            format!("--authentication-kubeconfig={kubeconfig}"),
            "--authentication-skip-lookup".to_string(),
            format!("--authorization-kubeconfig={kubeconfig}"),
            // The controller's decisions (binding, provisioning) in the log.
            "--v=2".to_string(),
        ];
        args.extend(extra_args.iter().map(|a| a.to_string()));
        let mut component = Component::start("kube-controller-manager", &args, &files)?;
        component.wait_until(Duration::from_secs(60), || https_ok(secure, "/healthz"))?;
        Ok(KubeControllerManager {
            _component: component,
        })
    }
}

/// True when `GET https://<addr><path>` answers `ok` (see [`https_get`]).
fn https_ok(addr: SocketAddr, path: &str) -> bool {
    matches!(https_get(addr, path), Some((200, body)) if body == "ok")
}
