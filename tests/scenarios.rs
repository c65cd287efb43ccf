//! Scenario tests as data: each file in `tests/scenarios/` holds a cluster, pods, optionally a
//! scheduler configuration, and the expected placements and messages. One harness runs them
//! all through the simulator (the same core as the real scheduler) and reports every mismatch.
//!
//! Format (YAML):
//! ```yaml
//! description: what the scenario shows
//! config: { ... }          # optional KubeSchedulerConfiguration (v1)
//! configError: "..."       # instead of `expect`: the configuration must be rejected so
//! cluster: [ ... ]         # Kubernetes objects: Nodes, Pods (running ones have nodeName), ...
//! expect:
//!   pod-a: node-1          # placed on node-1 (pods named `name` or `namespace/name`)
//!   pod-b: {oneOf: [node-1, node-2]}
//!   pod-c: {pending: "0/3 nodes are available: 3 Insufficient cpu."}
//! kubeScheduler:           # optional; tests/kube_scheduler_parity.rs checks every scenario
//!   parity: false          # against kube-scheduler 1.37 unless it opts out here, saying
//!   why: "..."             # why (a plugin of gantry's own, a difference on purpose);
//!   messages: false        # or: check placements, but not the wording of pending messages
//! ```

use std::path::Path;

use gantry_core::config::Config;
use gantry_core::plugins;
use gantry_sim::{self as sim, ClusterInput};

mod scenario_schema;
use scenario_schema::{Detailed, Expect};

/// Runs one scenario; returns the mismatches.
fn run(path: &Path) -> Vec<String> {
    let scenario = match scenario_schema::read(path) {
        Ok(s) => s,
        Err(e) => return vec![e],
    };
    assert!(!scenario.description.is_empty());
    if let Some(k) = &scenario.kube_scheduler {
        let why = k.why.as_deref().unwrap_or("").trim();
        if (!k.parity || !k.messages) && why.is_empty() {
            return vec!["kubeScheduler: say why it is not (fully) checked".to_string()];
        }
    }
    let registry = plugins::registry();
    let config = match &scenario.config {
        Some(c) => Config::parse(&serde_yaml::to_string(c).expect("yaml"), &registry),
        None => Config::default_with(&registry),
    };
    let config = match (config, &scenario.config_error) {
        (Err(e), Some(want)) if e.to_string() == *want => return vec![],
        (Err(e), Some(want)) => {
            return vec![format!("config error:\n   got: {e}\n  want: {want}")];
        }
        (Ok(_), Some(want)) => return vec![format!("config accepted, want error: {want}")],
        (Err(e), None) => return vec![format!("config rejected: {e}")],
        (Ok(c), None) => c,
    };
    let mut input = ClusterInput::default();
    let docs: String = scenario
        .cluster
        .iter()
        .map(|o| format!("---\n{}", serde_yaml::to_string(o).expect("yaml")))
        .collect();
    if let Err(e) = input.add_yaml(&docs, &path.display().to_string()) {
        return vec![format!("invalid cluster: {e}")];
    }
    let report = sim::simulate(&input, config, None);
    let mut problems: Vec<String> = report
        .invalid
        .iter()
        .map(|i| format!("invalid: {i}"))
        .collect();
    if scenario.expect.is_empty() {
        problems.push("no expectations".to_string());
    }
    for (pod, want) in &scenario.expect {
        let (ns, name) = pod.split_once('/').unwrap_or(("default", pod));
        let Some(got) = report
            .pods
            .iter()
            .find(|p| p.namespace == ns && p.name == name)
        else {
            problems.push(format!("{pod}: not in the cluster"));
            continue;
        };
        let got_desc = match (&got.node, &got.message, &got.evicted) {
            (_, _, Some(by)) => format!("evicted by {by}"),
            (Some(n), _, _) => format!("on {n}"),
            (None, Some(m), _) => format!("pending: {m}"),
            (None, None, _) => "pending".to_string(),
        };
        let ok = match want {
            Expect::Evicted(e) => got.evicted.as_deref() == Some(e.evicted.as_str()),
            Expect::Node(n) => got.node.as_deref() == Some(n.as_str()),
            Expect::Detailed(Detailed {
                one_of: Some(nodes),
                pending: None,
                devices,
            }) => {
                let given: Vec<String> = got
                    .devices
                    .iter()
                    .map(|d| format!("{} {} {}", d.uuid, d.memory_mib, d.cores))
                    .collect();
                if devices.as_ref().is_some_and(|want| *want != given) {
                    problems.push(format!(
                        "{pod}: devices\n   got: {given:?}\n  want: {devices:?}"
                    ));
                }
                got.node.as_ref().is_some_and(|n| nodes.contains(n))
            }
            Expect::Detailed(Detailed {
                one_of: None,
                pending: Some(msg),
                devices: None,
            }) => got.node.is_none() && got.message.as_deref() == Some(msg.as_str()),
            Expect::Detailed(d) => {
                problems.push(format!(
                    "{pod}: give exactly one of oneOf or pending: {d:?}"
                ));
                continue;
            }
        };
        if !ok {
            problems.push(format!("{pod}:\n   got: {got_desc}\n  want: {want:?}"));
        }
    }
    problems
}

#[test]
fn scenarios() {
    let files = scenario_schema::files();
    let mut failures = Vec::new();
    for f in &files {
        let problems = run(f);
        if !problems.is_empty() {
            let name = f
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default();
            failures.push(format!("{name}:\n  {}", problems.join("\n  ")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} scenarios failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
    assert!(files.len() >= 40, "only {} scenarios", files.len());
}
