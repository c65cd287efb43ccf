//! Parity with the real kube-scheduler: the scenario suite (`tests/scenarios/*.yaml`, run
//! through gantry's simulator by `tests/scenarios.rs`) states placements, messages and
//! evictions derived from kube-scheduler's semantics; this test checks them against
//! kube-scheduler 1.37 itself (the release `scripts/install-kube.sh` builds).
//!
//! For every eligible scenario it loads the cluster into a throw-away kube-apiserver
//! (`scripts/control-plane.sh`), starts kube-scheduler with the scenario's configuration as it
//! is (leader election off; every node scored unless the scenario says otherwise, as gantry
//! does), creates the pending pods one at a time in the order gantry's queue takes them
//! (priority, then file order), waiting for each to be bound or marked `PodScheduled=False`,
//! lets retries settle, and compares with the scenario's `expect`: nodes, messages word for
//! word, and evictions (the victim gone, with kube-scheduler's `Preempted` event naming the
//! preemptor's uid and the node). A scenario whose configuration gantry refuses
//! (`configError`) must be refused by kube-scheduler too. All mismatches are reported together
//! at the end. One defect of kube-scheduler 1.37 is forgiven where it shows (see
//! [`dra_post_filter_failed`]).
//!
//! Where gantry differs on purpose, the scenario says so and why:
//! `kubeScheduler: {parity: false, why: "..."}`; `messages: false` (with `why`) keeps the
//! placement check but compares only that a pod stays pending, not why.
//!
//! What the simulator reads from the scenario directly goes through the API server's rules:
//! `spec.priority` becomes a PriorityClass, `spec.overhead` a RuntimeClass, and a pod shown
//! terminating is created and then deleted (no kubelet ever finishes it); every other running
//! pod gets `terminationGracePeriodSeconds: 0` (unless it has one), so that a victim goes at
//! once, as its kubelet would end it. Statuses the API server ignores on create (a pod's
//! `startTime`, by which victims are ordered; a PodDisruptionBudget's allowed disruptions) are
//! written through the status subresource, as is a volume's phase. Claims and volumes are
//! created as the scenario shows them (bound ones already bound), and their protection
//! finalizers are taken off before they are deleted. No controller runs, except where a
//! StorageClass delays binding until a pod uses the claim: kube-scheduler then binds and
//! provisions in PreBind and waits for others to finish, so kube-controller-manager's
//! PersistentVolume controller runs for that scenario, and the test plays a CSI driver's
//! external provisioner (`support::while_provisioning`), whose volumes are deleted with the
//! scenario's.
//!
//! The binaries come from `$KUBEBUILDER_ASSETS` or `scripts/install-kube.sh`'s folder.
//! `GANTRY_PARITY_FILTER=text` checks only the scenarios whose file name contains `text`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod scenario_schema;
use gantry_test_support as support;
use scenario_schema::{Detailed, Expect};
use support::{
    ControlPlane, KubeControllerManager, KubeScheduler, kube_bins, metric, while_provisioning,
};

/// The minor release of kube-scheduler whose decisions and words the scenarios state.
const ORACLE: &str = "v1.37.";
/// How long one pending pod may take to be bound or rejected.
const POD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the retries after the last pod may take to settle.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Polling interval for pod states.
const POLL: Duration = Duration::from_millis(50);

// ------------------------------------------------------------------ scenarios

/// The scenario files, or those whose name contains `GANTRY_PARITY_FILTER`.
fn scenario_files() -> Vec<PathBuf> {
    let filter = std::env::var("GANTRY_PARITY_FILTER").unwrap_or_default();
    scenario_schema::files()
        .into_iter()
        .filter(|p| file_name(p).contains(&filter))
        .collect()
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default()
}

// ------------------------------------------------------------------ kube-scheduler and kubectl

/// Checks that the Kubernetes binaries are there, and that kube-scheduler is the release the
/// scenarios are written against.
fn check_binaries() {
    let [_, _, scheduler, _] = kube_bins(["etcd", "kube-apiserver", "kube-scheduler", "kubectl"]);
    let version = Command::new(&scheduler)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", scheduler.display()));
    assert!(
        version.starts_with(&format!("Kubernetes {ORACLE}")),
        "{} is {version:?}; the scenarios state kube-scheduler {ORACLE}x's outcomes \
         (run scripts/install-kube.sh)",
        scheduler.display()
    );
}

/// A scenario's configuration as kube-scheduler is given it: the scenario's own (its defaults
/// without one), leader election off, and every node scored unless the scenario sets a
/// percentage, as gantry does (kube-scheduler's adaptive default examines every node of a
/// cluster this small anyway).
fn scheduler_config(config: Option<&Value>) -> Value {
    let mut config = config.cloned().unwrap_or_else(|| json!({}));
    config["apiVersion"] = json!("kubescheduler.config.k8s.io/v1");
    config["kind"] = json!("KubeSchedulerConfiguration");
    config["leaderElection"] = json!({"leaderElect": false});
    if config.get("percentageOfNodesToScore").is_none() {
        config["percentageOfNodesToScore"] = json!(100);
    }
    config
}

/// The profiles' scheduler names in `config` (`default-scheduler` without profiles).
fn profile_names(config: &Value) -> BTreeSet<String> {
    let names: BTreeSet<String> = config["profiles"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            p["schedulerName"]
                .as_str()
                .unwrap_or("default-scheduler")
                .to_string()
        })
        .collect();
    if names.is_empty() {
        BTreeSet::from(["default-scheduler".to_string()])
    } else {
        names
    }
}

/// Gauges from kube-scheduler's metrics, e.g. `scheduler_pending_pods{queue="active"}`, read
/// from one scrape; `None` for one not (yet) set.
fn gauges(scheduler: &KubeScheduler, names: &[&str]) -> Result<Vec<Option<u64>>, String> {
    let text = scheduler.metrics()?;
    Ok(names
        .iter()
        .map(|name| metric(&text, name).map(|v| v as u64))
        .collect())
}

/// Creates the objects (in order).
fn create(plane: &ControlPlane, objects: &[Value]) -> Result<(), String> {
    if objects.is_empty() {
        return Ok(());
    }
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    plane
        .try_kubectl(&["create", "-f", "-"], Some(&list.to_string()))
        .map(|_| ())
}

// ------------------------------------------------------------------ messages

/// Whether kube-scheduler's message `got` is the expected `want` but for the end a defect of
/// kube-scheduler 1.37 gives it: when a PreFilter plugin rejects a pod, DynamicResources'
/// PostFilter (before DefaultPreemption, in the default profile) finds none of the state its
/// own PreFilter never wrote, fails with "not found", and preemption never runs; gantry ends
/// the message with what preemption found, as kube-scheduler does for a rejection at Filter.
fn dra_post_filter_failed(got: &str, want: &str) -> bool {
    let Some(head) = got.strip_suffix(" not found") else {
        return false;
    };
    want.strip_prefix(head).is_some_and(|tail| {
        tail.starts_with(" preemption: ")
            && tail.ends_with(" Preemption is not helpful for scheduling.")
    })
}

// ------------------------------------------------------------------ one scenario

/// How a scenario ended.
enum Outcome {
    Passed,
    Ineligible(String),
    Failed(Vec<String>),
}

/// What a pod's state is in the API.
#[derive(Debug, Clone, PartialEq)]
enum PodState {
    Bound(String),
    Unschedulable(String),
    Waiting,
}

fn pod_state(pod: &Value) -> PodState {
    if let Some(n) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
        return PodState::Bound(n.to_string());
    }
    for c in pod["status"]["conditions"].as_array().into_iter().flatten() {
        if c["type"] == "PodScheduled" && c["status"] == "False" {
            return PodState::Unschedulable(c["message"].as_str().unwrap_or("").to_string());
        }
    }
    PodState::Waiting
}

fn ns_name(obj: &Value) -> (String, String) {
    (
        obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string(),
        obj["metadata"]["name"].as_str().unwrap_or("").to_string(),
    )
}

/// The objects of a scenario, prepared for the API server.
#[derive(Default)]
struct Objects {
    /// Namespaces to create, with their labels (pre-existing ones get their labels set).
    namespaces: BTreeMap<String, Value>,
    /// PriorityClasses and RuntimeClasses standing in for `spec.priority`/`spec.overhead`.
    classes: Vec<Value>,
    /// Services, workloads and other namespaced objects, created as they are.
    others: Vec<Value>,
    nodes: Vec<Value>,
    running: Vec<Value>,
    /// Running pods the scenario shows terminating (`metadata.deletionTimestamp`): created,
    /// then deleted gracefully, which without a kubelet leaves them terminating.
    terminating: Vec<(String, String)>,
    /// Pending pods in the order gantry's queue takes them.
    pending: Vec<Value>,
    /// Statuses the scenario shows (a pod's start time, a budget's allowed disruptions),
    /// written through the status subresource at these paths once the objects exist: the
    /// API server ignores them on create.
    statuses: Vec<(String, Value)>,
}

/// Namespaces every apiserver has; never created nor deleted here.
const BUILTIN_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

fn prepare(cluster: &[Value]) -> Result<Objects, String> {
    let mut objects = Objects::default();
    let mut priorities: BTreeSet<(i64, bool)> = BTreeSet::new();
    let mut runtime_classes: BTreeMap<String, Value> = BTreeMap::new();
    let mut pending: Vec<(i64, Value)> = Vec::new();
    let mut flat: Vec<Value> = Vec::new();
    for o in cluster {
        match o["items"].as_array() {
            Some(items) if o["kind"].as_str().is_some_and(|k| k.ends_with("List")) => {
                flat.extend(items.iter().cloned())
            }
            _ => flat.push(o.clone()),
        }
    }
    for mut o in flat {
        let kind = o["kind"].as_str().unwrap_or("").to_string();
        let (ns, name) = ns_name(&o);
        match kind.as_str() {
            "Namespace" => {
                objects.namespaces.insert(name, o);
                continue;
            }
            "Node" => {
                objects.nodes.push(o);
                continue;
            }
            _ => {}
        }
        objects.namespaces.entry(ns.clone()).or_insert_with(
            || json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        );
        if kind == "PodDisruptionBudget"
            && let Some(status) = o.as_object_mut().and_then(|m| m.remove("status"))
        {
            objects.statuses.push((
                format!("/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{name}"),
                status,
            ));
        }
        if kind == "PersistentVolume"
            && let Some(status) = o.as_object_mut().and_then(|m| m.remove("status"))
        {
            objects
                .statuses
                .push((format!("/api/v1/persistentvolumes/{name}"), status));
        }
        if kind != "Pod" {
            objects.others.push(o);
            continue;
        }
        let phase = o["status"]["phase"].as_str().unwrap_or("");
        if phase == "Succeeded" || phase == "Failed" {
            continue; // neither scheduler counts finished pods
        }
        let status = o.as_object_mut().and_then(|m| m.remove("status"));
        // The Priority admission plugin computes spec.priority and spec.preemptionPolicy
        // from priorityClassName.
        let priority = o["spec"]["priority"].as_i64().unwrap_or(0);
        let never = o["spec"]["preemptionPolicy"] == "Never";
        if (priority != 0 || never) && o["spec"].get("priorityClassName").is_none() {
            priorities.insert((priority, never));
            o["spec"]["priorityClassName"] = json!(priority_class(priority, never));
            if let Some(spec) = o["spec"].as_object_mut() {
                spec.remove("preemptionPolicy");
            }
        }
        // The RuntimeClass admission plugin sets spec.overhead from the pod's RuntimeClass.
        if let Some(overhead) = o["spec"].get("overhead").cloned() {
            let rc = o["spec"]["runtimeClassName"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| format!("parity-overhead-{name}"));
            o["spec"]["runtimeClassName"] = json!(rc);
            if let Some(previous) = runtime_classes.insert(rc.clone(), overhead.clone())
                && previous != overhead
            {
                return Err(format!("RuntimeClass {rc} with two different overheads"));
            }
        }
        let bound = o["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| !n.is_empty());
        // The API server ignores these on create; the pod is deleted once created instead.
        let terminating = o["metadata"].as_object_mut().is_some_and(|m| {
            m.remove("deletionGracePeriodSeconds");
            m.remove("deletionTimestamp").is_some()
        });
        if terminating {
            if !bound {
                return Err(format!(
                    "pending pod {ns}/{name} is terminating: not translated"
                ));
            }
            objects.terminating.push((ns.clone(), name.clone()));
        }
        if bound {
            // What only a kubelet sets: the start time preemption orders victims by, and the
            // resources an in-place resize has allocated and actuated.
            let kubelets = [
                "startTime",
                "containerStatuses",
                "allocatedResources",
                "resources",
            ];
            if let Some(status) = status.filter(|s| kubelets.iter().any(|k| s.get(*k).is_some())) {
                objects
                    .statuses
                    .push((format!("/api/v1/namespaces/{ns}/pods/{name}"), status));
            }
            // A victim kube-scheduler deletes is gone at once, as its kubelet would end it
            // (no kubelet runs here), unless the scenario gives it a grace period.
            if !terminating && o["spec"].get("terminationGracePeriodSeconds").is_none() {
                o["spec"]["terminationGracePeriodSeconds"] = json!(0);
            }
            objects.running.push(o);
        } else {
            pending.push((priority, o));
        }
    }
    for (p, never) in priorities {
        let policy = if never {
            "Never"
        } else {
            "PreemptLowerPriority"
        };
        objects.classes.push(json!({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": priority_class(p, never)}, "value": p,
            "preemptionPolicy": policy,
        }));
    }
    for (name, overhead) in runtime_classes {
        objects.classes.push(json!({
            "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
            "metadata": {"name": name}, "handler": "runc",
            "overhead": {"podFixed": overhead},
        }));
    }
    // PrioritySort: higher priority first, then arrival (file) order; stable.
    pending.sort_by_key(|(p, _)| std::cmp::Reverse(*p));
    objects.pending = pending.into_iter().map(|(_, o)| o).collect();
    Ok(objects)
}

fn priority_class(p: i64, never: bool) -> String {
    let value = if p < 0 {
        format!("minus-{}", p.unsigned_abs())
    } else {
        p.to_string()
    };
    let policy = if never { "-never" } else { "" };
    format!("parity-{value}{policy}")
}

/// Checks one scenario; leaves the cluster empty again.
fn check(plane: &ControlPlane, path: &Path) -> Outcome {
    let mut scenario = match scenario_schema::read(path) {
        Ok(s) => s,
        Err(e) => return Outcome::Failed(vec![e]),
    };
    let parity = scenario.kube_scheduler.take().unwrap_or_default();
    let why = parity.why.clone().unwrap_or_default();
    if (!parity.parity || !parity.messages) && why.trim().is_empty() {
        return Outcome::Failed(vec!["kubeScheduler: say why".to_string()]);
    }
    if !parity.parity {
        return Outcome::Ineligible(why);
    }
    let config = scheduler_config(scenario.config_json().as_ref());
    if let Some(error) = &scenario.config_error {
        return refused(plane, &config, error);
    }
    let objects = match prepare(&scenario.cluster_json()) {
        Ok(o) => o,
        Err(e) => return Outcome::Failed(vec![e]),
    };
    let result = run(plane, &objects, &config, &scenario.expect, parity.messages);
    let cleaned = cleanup(plane, &objects);
    let mut problems = match result {
        Ok(p) => p,
        Err(e) => vec![e],
    };
    if let Err(e) = cleaned {
        problems.push(format!("cleanup: {e}"));
    }
    if problems.is_empty() {
        Outcome::Passed
    } else {
        Outcome::Failed(problems)
    }
}

/// Checks that kube-scheduler refuses a configuration gantry refuses with `error`.
fn refused(plane: &ControlPlane, config: &Value, error: &str) -> Outcome {
    match KubeScheduler::start(plane, config) {
        Err(_) => Outcome::Passed,
        Ok(_) => Outcome::Failed(vec![format!(
            "kube-scheduler accepts the configuration gantry refuses with: {error}"
        )]),
    }
}

/// Loads the cluster, then schedules the pending pods with kube-scheduler and compares, with
/// the PersistentVolume controller and a CSI provisioner running where claims wait for their
/// first consumer; all of them are stopped again when it returns.
fn run(
    plane: &ControlPlane,
    objects: &Objects,
    config: &Value,
    expect: &BTreeMap<String, Expect>,
    compare_messages: bool,
) -> Result<Vec<String>, String> {
    // Setup, all before the scheduler starts: it then lists everything before scheduling.
    let mut namespaces = Vec::new();
    for (name, ns) in &objects.namespaces {
        if BUILTIN_NAMESPACES.contains(&name.as_str()) {
            let labels = ns["metadata"]["labels"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            if !labels.is_empty() {
                let mut args = vec![
                    "label".to_string(),
                    "--overwrite".into(),
                    format!("namespace/{name}"),
                ];
                args.extend(
                    labels
                        .iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))),
                );
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                plane.try_kubectl(&args, None)?;
            }
        } else {
            namespaces.push(ns.clone());
        }
    }
    create(plane, &namespaces)?;
    create(plane, &objects.classes)?;
    create(plane, &objects.others)?;
    create(plane, &objects.nodes)?;
    create(plane, &objects.running)?;
    for (path, status) in &objects.statuses {
        let mut current: Value =
            serde_json::from_str(&plane.try_kubectl(&["get", "--raw", path], None)?)
                .map_err(|e| format!("{path}: {e}"))?;
        current["status"] = status.clone();
        plane.try_kubectl(
            &["replace", "--raw", &format!("{path}/status"), "-f", "-"],
            Some(&current.to_string()),
        )?;
    }
    // The victims' uids, while they are there.
    let uids = pod_uids(plane)?;
    for (ns, name) in &objects.terminating {
        plane.try_kubectl(&["delete", "pod", "-n", ns, name, "--wait=false"], None)?;
    }
    // kube-scheduler's informers start from the apiserver's watch cache, which may lag
    // behind what was just written (or deleted by the previous scenario): wait until it
    // holds exactly this cluster.
    wait_for_watch_cache(plane, &watched(objects, true))?;

    if !delays_binding(objects) {
        return schedule_and_compare(plane, objects, config, expect, compare_messages, uids);
    }
    // kube-scheduler binds claims of delayed binding in PreBind, and then waits for the
    // PersistentVolume controller to complete the bindings, and for the CSI driver's
    // provisioner where it asked for a volume to be provisioned.
    let _controller = KubeControllerManager::start(plane, &[])?;
    while_provisioning(plane, || {
        schedule_and_compare(plane, objects, config, expect, compare_messages, uids)
    })?
}

/// True when the cluster has a StorageClass of delayed binding (`WaitForFirstConsumer`).
fn delays_binding(objects: &Objects) -> bool {
    objects
        .others
        .iter()
        .any(|o| o["kind"] == "StorageClass" && o["volumeBindingMode"] == "WaitForFirstConsumer")
}

/// Starts kube-scheduler on the loaded cluster, creates the pending pods one at a time, lets
/// retries settle and compares the outcome with `expect`; kube-scheduler is stopped again
/// when it returns. `uids` are the pods' uids before any was evicted.
fn schedule_and_compare(
    plane: &ControlPlane,
    objects: &Objects,
    config: &Value,
    expect: &BTreeMap<String, Expect>,
    compare_messages: bool,
    mut uids: HashMap<String, String>,
) -> Result<Vec<String>, String> {
    let profiles = profile_names(config);
    let scheduler = KubeScheduler::start(plane, config)?;

    // Pending pods one at a time, each waited for, so the order is the simulator's.
    for pod in &objects.pending {
        let (ns, name) = ns_name(pod);
        create(plane, std::slice::from_ref(pod))?;
        let scheduler = pod["spec"]["schedulerName"]
            .as_str()
            .unwrap_or("default-scheduler");
        if !profiles.contains(scheduler) {
            continue; // no profile of ours takes it: it stays pending
        }
        let deadline = Instant::now() + POD_TIMEOUT;
        loop {
            let state = pod_state(&plane.try_kubectl_json(&["get", "pod", "-n", &ns, &name])?);
            if state != PodState::Waiting {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{ns}/{name}: neither bound nor unschedulable after {POD_TIMEOUT:?}"
                ));
            }
            std::thread::sleep(POLL);
        }
    }

    // Retries (pods moved back by the placements that followed them) until nothing is queued
    // but unschedulable pods, and the pods' states hold still.
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    let mut previous: Option<BTreeMap<String, PodState>> = None;
    let states = loop {
        let queued = gauges(
            &scheduler,
            &[
                "scheduler_pending_pods{queue=\"active\"}",
                "scheduler_pending_pods{queue=\"backoff\"}",
            ],
        )?;
        let (Some(active), Some(backoff)) = (queued[0], queued[1]) else {
            return Err("no scheduler_pending_pods in kube-scheduler's metrics".to_string());
        };
        let pods = plane.try_kubectl_json(&["get", "pods", "--all-namespaces"])?;
        let states: BTreeMap<String, PodState> = pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                let (ns, name) = ns_name(p);
                (format!("{ns}/{name}"), pod_state(p))
            })
            .collect();
        if active == 0 && backoff == 0 && previous.as_ref() == Some(&states) {
            break states;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "kube-scheduler did not settle in {SETTLE_TIMEOUT:?}"
            ));
        }
        previous = Some(states);
        std::thread::sleep(Duration::from_millis(if active + backoff > 0 {
            200
        } else {
            300
        }));
    };

    // The preemptors' uids too, by which the events name them.
    uids.extend(pod_uids(plane)?);
    let names: HashMap<&str, &str> = uids
        .iter()
        .map(|(name, uid)| (uid.as_str(), name.as_str()))
        .collect();
    let preempted = preempted_events(plane, &names)?;
    let mut problems = Vec::new();
    for (pod, want) in expect {
        let key = if pod.contains('/') {
            pod.clone()
        } else {
            format!("default/{pod}")
        };
        if let Expect::Evicted(e) = want {
            let (preemptor, node) = e.evicted.split_once(" on ").unwrap_or((&e.evicted, ""));
            let wanted = format!("Preempted by {preemptor} on node {node}");
            let event = uids.get(&key).and_then(|uid| preempted.get(uid));
            if states.contains_key(&key) || event != Some(&wanted) {
                let got = match (states.get(&key), event) {
                    (Some(state), _) => format!("not evicted ({state:?})"),
                    (None, Some(event)) => format!("evicted: {event}"),
                    (None, None) => "gone, with no Preempted event".to_string(),
                };
                problems.push(format!(
                    "{pod}:\n      kube-scheduler:   {got}\n      scenario expects: {wanted}"
                ));
            }
            continue;
        }
        let Some(got) = states.get(&key) else {
            problems.push(format!("{pod}: not in the cluster"));
            continue;
        };
        let ok = match (want, got) {
            (Expect::Node(n), PodState::Bound(g)) => n == g,
            (
                Expect::Detailed(Detailed {
                    one_of: Some(ns),
                    pending: None,
                    ..
                }),
                PodState::Bound(g),
            ) => ns.contains(g),
            (
                Expect::Detailed(Detailed {
                    one_of: None,
                    pending: Some(_),
                    ..
                }),
                PodState::Waiting,
            ) => true,
            (
                Expect::Detailed(Detailed {
                    one_of: None,
                    pending: Some(msg),
                    ..
                }),
                PodState::Unschedulable(m),
            ) => !compare_messages || m == msg || dra_post_filter_failed(m, msg),
            _ => false,
        };
        if !ok {
            let got = match got {
                PodState::Bound(n) => format!("on {n}"),
                PodState::Unschedulable(m) => format!("pending: {m}"),
                PodState::Waiting => "pending, never tried".to_string(),
            };
            let want = match want {
                Expect::Node(n) => format!("on {n}"),
                Expect::Detailed(Detailed {
                    one_of: Some(ns), ..
                }) => format!("on one of {}", ns.join(", ")),
                Expect::Detailed(Detailed {
                    pending: Some(m), ..
                }) => format!("pending: {m}"),
                Expect::Detailed(_) => "?".to_string(),
                Expect::Evicted(e) => format!("evicted by {}", e.evicted),
            };
            problems.push(format!(
                "{pod}:\n      kube-scheduler:   {got}\n      scenario expects: {want}"
            ));
        }
    }
    Ok(problems)
}

/// Every pod's uid, by "namespace/name".
fn pod_uids(plane: &ControlPlane) -> Result<HashMap<String, String>, String> {
    Ok(
        plane.try_kubectl_json(&["get", "pods", "--all-namespaces"])?["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                let (ns, name) = ns_name(p);
                let uid = p["metadata"]["uid"].as_str().unwrap_or("").to_string();
                (format!("{ns}/{name}"), uid)
            })
            .collect(),
    )
}

/// The messages of the `Preempted` events kube-scheduler recorded, by the victim's uid, with
/// the preemptor's uid (`Preempted by pod <uid> on node <node>`) replaced by its name in
/// `names`.
fn preempted_events(
    plane: &ControlPlane,
    names: &HashMap<&str, &str>,
) -> Result<HashMap<String, String>, String> {
    let events = plane.try_kubectl_json(&["get", "events", "--all-namespaces"])?;
    Ok(events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["reason"] == "Preempted")
        .filter_map(|e| {
            let uid = e["involvedObject"]["uid"].as_str()?;
            let message = e["message"].as_str().or_else(|| e["note"].as_str())?;
            Some((uid.to_string(), with_pod_names(message, names)))
        })
        .collect())
}

/// `message` with the pod uid after "Preempted by pod " replaced by that pod's name.
fn with_pod_names(message: &str, names: &HashMap<&str, &str>) -> String {
    let Some(rest) = message.strip_prefix("Preempted by pod ") else {
        return message.to_string();
    };
    let (uid, tail) = rest.split_once(' ').unwrap_or((rest, ""));
    let name = names.get(uid).copied().unwrap_or(uid);
    format!("Preempted by {name} {tail}")
}

/// Deletes everything the scenario created (once kube-scheduler is stopped).
fn cleanup(plane: &ControlPlane, objects: &Objects) -> Result<(), String> {
    // No kubelet: a bound pod would wait forever for graceful termination.
    plane.try_kubectl(
        &[
            "delete",
            "pods",
            "--all",
            "--all-namespaces",
            "--grace-period=0",
            "--force",
            "--wait=false",
        ],
        None,
    )?;
    for o in &objects.others {
        let Some((_, resource)) = PROTECTED_KINDS.iter().find(|(k, _)| o["kind"] == *k) else {
            continue;
        };
        let (ns, name) = ns_name(o);
        let mut args = vec!["patch", resource, &name, "--type=merge"];
        if o["kind"] == "PersistentVolumeClaim" {
            args.extend(["-n", &ns]);
        }
        args.extend(["-p", r#"{"metadata":{"finalizers":null}}"#]);
        // One the API server refused to create is no reason to leave the rest behind.
        if let Err(e) = plane.try_kubectl(&args, None)
            && !e.contains("(NotFound)")
        {
            return Err(e);
        }
    }
    delete_provisioned_volumes(plane, objects)?;
    let mut rest = objects.others.clone();
    rest.extend(objects.classes.iter().cloned());
    if !rest.is_empty() {
        let list = json!({"apiVersion": "v1", "kind": "List", "items": rest});
        plane.try_kubectl(
            &["delete", "--ignore-not-found", "--wait=false", "-f", "-"],
            Some(&list.to_string()),
        )?;
    }
    plane.try_kubectl(&["delete", "nodes", "--all", "--wait=false"], None)?;
    for (name, ns) in &objects.namespaces {
        if BUILTIN_NAMESPACES.contains(&name.as_str()) {
            let labels = ns["metadata"]["labels"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            if !labels.is_empty() {
                let mut args = vec!["label".to_string(), format!("namespace/{name}")];
                args.extend(labels.keys().map(|k| format!("{k}-")));
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                plane.try_kubectl(&args, None)?;
            }
            continue;
        }
        // No namespace controller runs: mark it terminating, empty its finalizers (its
        // contents are gone already) and delete it for good.
        plane.try_kubectl(&["delete", "namespace", name, "--wait=false"], None)?;
        let mut current = plane.try_kubectl_json(&["get", "namespace", name])?;
        current["spec"]["finalizers"] = json!([]);
        plane.try_kubectl(
            &[
                "replace",
                "--raw",
                &format!("/api/v1/namespaces/{name}/finalize"),
                "-f",
                "-",
            ],
            Some(&current.to_string()),
        )?;
        plane.try_kubectl(
            &[
                "delete",
                "namespace",
                name,
                "--ignore-not-found",
                "--wait=false",
            ],
            None,
        )?;
    }
    // Everything gone, also from where the next kube-scheduler will start.
    wait_for_watch_cache(plane, &watched(objects, false))
}

/// Deletes the volumes the scenario does not show (those the test's provisioner made),
/// protection finalizer and all.
fn delete_provisioned_volumes(plane: &ControlPlane, objects: &Objects) -> Result<(), String> {
    let shown: BTreeSet<String> = objects
        .others
        .iter()
        .filter(|o| o["kind"] == "PersistentVolume")
        .map(|o| ns_name(o).1)
        .collect();
    let volumes = plane.try_kubectl_json(&["get", "persistentvolumes"])?;
    for volume in volumes["items"].as_array().into_iter().flatten() {
        let name = ns_name(volume).1;
        if shown.contains(&name) {
            continue;
        }
        plane.try_kubectl(
            &[
                "patch",
                "persistentvolume",
                &name,
                "--type=merge",
                "-p",
                r#"{"metadata":{"finalizers":null}}"#,
            ],
            None,
        )?;
        plane.try_kubectl(&["delete", "persistentvolume", &name, "--wait=false"], None)?;
    }
    Ok(())
}

/// The API paths of the kinds kube-scheduler watches, by kind.
const WATCHED_KINDS: &[(&str, &str)] = &[
    ("Node", "/api/v1/nodes"),
    ("Pod", "/api/v1/pods"),
    ("Service", "/api/v1/services"),
    ("ReplicationController", "/api/v1/replicationcontrollers"),
    ("ReplicaSet", "/apis/apps/v1/replicasets"),
    ("StatefulSet", "/apis/apps/v1/statefulsets"),
    ("PersistentVolumeClaim", "/api/v1/persistentvolumeclaims"),
    ("PersistentVolume", "/api/v1/persistentvolumes"),
    ("StorageClass", "/apis/storage.k8s.io/v1/storageclasses"),
    ("CSINode", "/apis/storage.k8s.io/v1/csinodes"),
];

/// The kinds of [`WATCHED_KINDS`] that are not namespaced.
const CLUSTER_SCOPED_KINDS: &[&str] = &["Node", "PersistentVolume", "StorageClass", "CSINode"];

/// The kinds the StorageObjectInUseProtection admission plugin gives a finalizer, which only
/// kube-controller-manager would remove.
const PROTECTED_KINDS: &[(&str, &str)] = &[
    ("PersistentVolumeClaim", "persistentvolumeclaim"),
    ("PersistentVolume", "persistentvolume"),
];

/// What the watch cache must hold of the kinds the scenario touches: with the scenario
/// loaded (`loaded`), or after its cleanup. Keys are "namespace/name", with " (terminating)"
/// for objects being deleted.
fn watched(objects: &Objects, loaded: bool) -> BTreeMap<&'static str, BTreeSet<String>> {
    let mut want: BTreeMap<&'static str, BTreeSet<String>> = BTreeMap::new();
    want.insert("/api/v1/nodes", BTreeSet::new());
    want.insert("/api/v1/pods", BTreeSet::new());
    for o in &objects.others {
        if let Some((_, path)) = WATCHED_KINDS.iter().find(|(k, _)| o["kind"] == *k) {
            want.entry(path).or_default();
        }
    }
    if let Some(services) = want.get_mut("/api/v1/services") {
        // The apiserver's own.
        services.insert("default/kubernetes".to_string());
    }
    if !loaded {
        return want;
    }
    for o in objects
        .nodes
        .iter()
        .chain(&objects.running)
        .chain(&objects.others)
    {
        let Some((_, path)) = WATCHED_KINDS.iter().find(|(k, _)| o["kind"] == *k) else {
            continue;
        };
        let (ns, name) = ns_name(o);
        let key = if CLUSTER_SCOPED_KINDS.iter().any(|k| o["kind"] == *k) {
            format!("/{name}")
        } else {
            format!("{ns}/{name}")
        };
        let terminating = o["kind"] == "Pod"
            && objects
                .terminating
                .iter()
                .any(|(n, m)| *n == ns && *m == name);
        want.entry(path).or_default().insert(if terminating {
            format!("{key} (terminating)")
        } else {
            key
        });
    }
    want
}

/// Waits until the apiserver's watch cache (`resourceVersion=0` lists, where informers start)
/// holds exactly `want`.
fn wait_for_watch_cache(
    plane: &ControlPlane,
    want: &BTreeMap<&'static str, BTreeSet<String>>,
) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    for (path, keys) in want {
        loop {
            let text = plane.try_kubectl(
                &["get", "--raw", &format!("{path}?resourceVersion=0")],
                None,
            )?;
            let list: Value = serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
            let got: BTreeSet<String> = list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|o| {
                    let meta = &o["metadata"];
                    let key = format!(
                        "{}/{}",
                        meta["namespace"].as_str().unwrap_or(""),
                        meta["name"].as_str().unwrap_or("")
                    );
                    if meta.get("deletionTimestamp").is_some() {
                        format!("{key} (terminating)")
                    } else {
                        key
                    }
                })
                .collect();
            if got == *keys {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the apiserver's watch cache of {path} holds {got:?}, not {keys:?}"
                ));
            }
            std::thread::sleep(POLL);
        }
    }
    Ok(())
}

// ------------------------------------------------------------------ the test

#[test]
fn scenarios_match_kube_scheduler() {
    let started = Instant::now();
    check_binaries();
    let files = scenario_files();
    let plane = ControlPlane::start();
    eprintln!(
        "kube-scheduler parity: control plane up in {:.1}s; {} scenarios",
        started.elapsed().as_secs_f64(),
        files.len()
    );
    let mut passed = Vec::new();
    let mut ineligible = Vec::new();
    let mut failed = Vec::new();
    for f in &files {
        let name = file_name(f);
        let t = Instant::now();
        match check(&plane, f) {
            Outcome::Passed => {
                eprintln!("  ok          {name} ({:.1}s)", t.elapsed().as_secs_f64());
                passed.push(name);
            }
            Outcome::Ineligible(why) => {
                eprintln!("  ineligible  {name}: {why}");
                ineligible.push(name);
            }
            Outcome::Failed(problems) => {
                eprintln!("  MISMATCH    {name} ({:.1}s)", t.elapsed().as_secs_f64());
                failed.push(format!("{name}:\n  {}", problems.join("\n  ")));
            }
        }
    }
    eprintln!(
        "kube-scheduler parity: {} passed, {} ineligible, {} mismatched, in {:.0}s",
        passed.len(),
        ineligible.len(),
        failed.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        failed.is_empty(),
        "{} of {} scenarios differ from kube-scheduler {ORACLE}x:\n{}",
        failed.len(),
        files.len(),
        failed.join("\n")
    );
    assert!(
        !passed.is_empty() || std::env::var_os("GANTRY_PARITY_FILTER").is_some(),
        "no scenario was checked against kube-scheduler"
    );
}

#[test]
fn the_configuration_is_the_scenarios_own_without_leader_election() {
    let config: Value = serde_yaml::from_str(
        r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
percentageOfNodesToScore: 30
profiles:
- schedulerName: batch
  plugins:
    score:
      enabled: [{name: TaintToleration, weight: 5}]
"#,
    )
    .expect("yaml");
    let c = scheduler_config(Some(&config));
    assert_eq!(c["leaderElection"], json!({"leaderElect": false}));
    assert_eq!(c["percentageOfNodesToScore"], 30);
    assert_eq!(c["profiles"], config["profiles"]);
    assert_eq!(profile_names(&c), BTreeSet::from(["batch".to_string()]));

    let defaults = scheduler_config(None);
    assert_eq!(defaults["apiVersion"], "kubescheduler.config.k8s.io/v1");
    assert_eq!(defaults["percentageOfNodesToScore"], 100);
    assert_eq!(
        profile_names(&defaults),
        BTreeSet::from(["default-scheduler".to_string()])
    );
}

#[test]
fn only_the_end_of_the_failed_post_filter_is_forgiven() {
    let want = "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims. \
                preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.";
    assert!(dra_post_filter_failed(
        "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims. not found",
        want
    ));
    assert!(!dra_post_filter_failed(
        "0/2 nodes are available: persistentvolumeclaim \"x\" not found. not found",
        want
    ));
    assert!(!dra_post_filter_failed(
        "0/2 nodes are available: 2 Insufficient cpu. not found",
        "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: \
         2 No preemption victims found for incoming pod."
    ));
}

#[test]
fn preemptors_are_named_in_place_of_their_uids() {
    let names = HashMap::from([("u-1", "default/big")]);
    assert_eq!(
        with_pod_names("Preempted by pod u-1 on node n1", &names),
        "Preempted by default/big on node n1"
    );
    assert_eq!(
        with_pod_names("Preempted by pod u-2 on node n1", &names),
        "Preempted by u-2 on node n1"
    );
}
