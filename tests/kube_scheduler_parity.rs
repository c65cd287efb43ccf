//! Parity with the real kube-scheduler: the scenario suite (`tests/scenarios/*.yaml`, run
//! through gantry's simulator by `tests/scenarios.rs`) states placements derived from
//! kube-scheduler's semantics; this test checks those expectations against kube-scheduler
//! 1.20.2 itself (the version `scripts/install-kube.sh` can build on these machines).
//!
//! For every eligible scenario it loads the cluster into a throw-away kube-apiserver
//! (`scripts/control-plane.sh`), starts kube-scheduler with the scenario's configuration
//! translated to 1.20's `v1beta1`, creates the pending pods one at a time in the order gantry's
//! queue takes them (priority, then file order), waiting for each to be bound or marked
//! `PodScheduled=False`, lets retries settle, and compares with the scenario's `expect`. All
//! mismatches are reported together at the end.
//!
//! Where 1.20 differs from today's kube-scheduler (1.30+), which gantry follows:
//! - Today's default score weights are given to 1.20 (TaintToleration 3, NodeAffinity 2,
//!   PodTopologySpread 2, InterPodAffinity 2, the rest 1), and the resolution of a profile's
//!   plugins (multiPoint, explicit extension points, weights) follows today's rules; the result
//!   is written out for 1.20 point by point.
//! - 1.20 scores resources with separate plugins (NodeResourcesLeastAllocated/MostAllocated,
//!   RequestedToCapacityRatio) where today NodeResourcesFit has a scoring strategy.
//! - NodePreferAvoidPods and SelectorSpread (gone today) are not enabled.
//! - DefaultPreemption runs as in today's default profile. The part of today's message that
//!   preemption adds (`preemption: ...`, which 1.20 does not write) is left out of the
//!   comparison. An `evicted` expectation holds when the pod is gone and kube-scheduler's
//!   `Preempted` event on it names the preemptor and the node (1.20 names the preemptor by
//!   namespace/name, today by uid). 1.20 tries a preemptor's nominated node like any other
//!   (today's tries it first): the scenarios leave the preemptor one node to go to.
//! - Today's NodeVolumeLimits also counts the in-tree volumes migrated to CSI, which 1.20
//!   counted with EBSLimits, GCEPDLimits and AzureDiskLimits: 1.20 runs those with it.
//! - Reasons 1.20 words differently are rewritten to today's wording before messages are
//!   compared (see [`todays_wording`]).
//! - 1.20 freezes, per node, how many nodes hold each image when the node enters its cache
//!   (kubernetes#116673, fixed in 1.28); the nodes holding images get the status update a
//!   kubelet would send before any pod is scheduled (see [`refresh_image_nodes`]).
//! - Features 1.20 lacks, and formulas that changed since (BalancedAllocation), make a scenario
//!   ineligible. That is stated in the scenario itself:
//!   `kubeScheduler: {parity: false, why: "..."}`; `messages: false` (with `why`) keeps the
//!   placement check but compares only that a pod stays pending, not why.
//!
//! What the simulator reads from the scenario directly goes through the API server's rules:
//! `spec.priority` becomes a PriorityClass, `spec.overhead` a RuntimeClass, and a pod shown
//! terminating is created and then deleted (no kubelet ever finishes it); every other running
//! pod gets `terminationGracePeriodSeconds: 0` (unless it has one), so that a victim goes at
//! once, as its kubelet would end it. Statuses the API server ignores on create (a pod's
//! `startTime`, by which victims are ordered; a PodDisruptionBudget's allowed disruptions,
//! served as `policy/v1beta1` before 1.21) are written through the status subresource. No controller
//! runs: claims and volumes are created as the scenario shows them (bound ones already
//! bound), and their protection finalizers are taken off before they are deleted.
//!
//! The binaries come from `$KUBEBUILDER_ASSETS` or `.cache/kube/bin`; run
//! `scripts/install-kube.sh` to provide them. `GANTRY_PARITY_FILTER=text` checks only the
//! scenarios whose file name contains `text`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod scenario_schema;
mod support;
use scenario_schema::{Detailed, Expect};
use support::{ControlPlane, KubeScheduler, kube_bins, metric};

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

/// Checks that the Kubernetes binaries are there, and that kube-scheduler is 1.20, for which
/// this test translates the configurations.
fn check_binaries() {
    let [_, _, scheduler, _] = kube_bins(["etcd", "kube-apiserver", "kube-scheduler", "kubectl"]);
    let version = Command::new(&scheduler)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", scheduler.display()));
    assert!(
        version.starts_with("Kubernetes v1.20."),
        "{} is {version:?}; this test translates configurations for kube-scheduler 1.20 \
         (run scripts/install-kube.sh)",
        scheduler.display()
    );
}

/// Starts kube-scheduler 1.20 with `config` (a v1beta1 configuration), leader election off.
fn start_scheduler(plane: &ControlPlane, config: &Value) -> Result<KubeScheduler, String> {
    let mut config = config.clone();
    config["leaderElection"] = json!({"leaderElect": false});
    KubeScheduler::start(plane, &config)
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

/// `kubectl <args> -o json`, parsed.
fn kubectl_json(plane: &ControlPlane, args: &[&str]) -> Result<Value, String> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let text = plane.try_kubectl(&all, None)?;
    serde_json::from_str(&text).map_err(|e| format!("kubectl {}: {e}", args.join(" ")))
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

// ------------------------------------------------------------------ configuration

/// Extension points of a plugin, today and in 1.20 (only those this test writes out): a
/// default multiPoint weight (0: not a score plugin) and [`FILTER`]-style flags.
struct PluginPoints {
    name: &'static str,
    weight: i64,
    points: u8,
}

/// Today: implements nothing this test writes out but its queue sort or binding.
const NONE: u8 = 0;
/// Today: implements Filter.
const FILTER: u8 = 1;
/// Today: implements Score.
const SCORE: u8 = 1 << 1;
/// Today: implements PostFilter (in 1.20 too, where it exists).
const POST_FILTER: u8 = 1 << 2;
/// 1.20: implements PreFilter and Filter (else only Filter), when it filters.
const PRE_FILTER_1_20: u8 = 1 << 3;
/// 1.20: implements PreScore, when it scores.
const PRE_SCORE_1_20: u8 = 1 << 4;
/// Exists in 1.20 (else it is dropped from the 1.20 profile).
const IN_1_20: u8 = 1 << 5;

const fn plugin(name: &'static str, weight: i64, points: u8) -> PluginPoints {
    PluginPoints {
        name,
        weight,
        points,
    }
}

impl PluginPoints {
    fn has(&self, point: u8) -> bool {
        self.points & point != 0
    }
}

/// Today's default plugins (kube-scheduler 1.30+, `getDefaultPlugins`), in order.
/// SchedulingGates has no 1.20 counterpart (gated pods are not eligible). VolumeBinding
/// scores only with an alpha feature gate today, and gantry gives it no Score; in 1.20 it
/// also reserves and prebinds, and is written out there too. VolumeRestrictions,
/// NodeVolumeLimits and VolumeZone are Filter plugins only in 1.20, where NodeVolumeLimits
/// brings the in-tree limit plugins along (see [`LIMITS_1_20`]).
const TODAY_DEFAULTS: &[PluginPoints] = &[
    plugin("SchedulingGates", 0, NONE),
    plugin("PrioritySort", 0, NONE),
    plugin("NodeUnschedulable", 0, FILTER | IN_1_20),
    plugin("NodeName", 0, FILTER | IN_1_20),
    plugin(
        "TaintToleration",
        3,
        FILTER | SCORE | PRE_SCORE_1_20 | IN_1_20,
    ),
    plugin("NodeAffinity", 2, FILTER | SCORE | IN_1_20),
    plugin("NodePorts", 0, FILTER | PRE_FILTER_1_20 | IN_1_20),
    plugin(
        "NodeResourcesFit",
        1,
        FILTER | SCORE | PRE_FILTER_1_20 | IN_1_20,
    ),
    plugin("VolumeRestrictions", 0, FILTER | IN_1_20),
    plugin("NodeVolumeLimits", 0, FILTER | IN_1_20),
    plugin("VolumeBinding", 0, FILTER | PRE_FILTER_1_20 | IN_1_20),
    plugin("VolumeZone", 0, FILTER | IN_1_20),
    plugin(
        "PodTopologySpread",
        2,
        FILTER | SCORE | PRE_FILTER_1_20 | PRE_SCORE_1_20 | IN_1_20,
    ),
    plugin(
        "InterPodAffinity",
        2,
        FILTER | SCORE | PRE_FILTER_1_20 | PRE_SCORE_1_20 | IN_1_20,
    ),
    plugin("DefaultPreemption", 0, POST_FILTER | IN_1_20),
    plugin("NodeResourcesBalancedAllocation", 1, SCORE | IN_1_20),
    plugin("ImageLocality", 1, SCORE | IN_1_20),
    plugin("DefaultBinder", 0, NONE),
];

/// The 1.20 Filter plugins that today's NodeVolumeLimits stands for, in 1.20's default
/// order: today it also counts the in-tree volumes (through their migration to CSI) that
/// 1.20 counted with EBSLimits, GCEPDLimits and AzureDiskLimits, which are gone today.
/// CinderLimits was not a 1.20 default and is left out.
const LIMITS_1_20: [&str; 4] = [
    "EBSLimits",
    "GCEPDLimits",
    "NodeVolumeLimits",
    "AzureDiskLimits",
];

fn known_plugin(name: &str) -> Result<&'static PluginPoints, String> {
    TODAY_DEFAULTS
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| format!("plugin {name:?} has no known 1.20 counterpart"))
}

/// A plugin set of a v1 configuration: enabled (name, weight) and disabled names.
#[derive(Debug, Default)]
struct PluginSet {
    enabled: Vec<(String, i64)>,
    disabled: Vec<String>,
}

impl PluginSet {
    fn parse(v: Option<&Value>, path: &str) -> Result<PluginSet, String> {
        let mut set = PluginSet::default();
        let Some(v) = v else { return Ok(set) };
        for key in object_keys(v) {
            if key != "enabled" && key != "disabled" {
                return Err(format!("{path}.{key}: not translated"));
            }
        }
        for p in v["enabled"].as_array().into_iter().flatten() {
            let name = p["name"]
                .as_str()
                .ok_or(format!("{path}.enabled: no name"))?;
            set.enabled
                .push((name.to_string(), p["weight"].as_i64().unwrap_or(0)));
        }
        for p in v["disabled"].as_array().into_iter().flatten() {
            let name = p["name"]
                .as_str()
                .ok_or(format!("{path}.disabled: no name"))?;
            set.disabled.push(name.to_string());
        }
        Ok(set)
    }

    fn disables(&self, name: &str) -> bool {
        self.disabled.iter().any(|d| d == name || d == "*")
    }

    fn enables(&self, name: &str) -> bool {
        self.enabled.iter().any(|(n, _)| n == name)
    }
}

fn object_keys(v: &Value) -> Vec<String> {
    v.as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

/// Today's merge of a user's plugin set into the defaults (`mergePluginSet`): a re-listed
/// default keeps its place with the user's entry, `*` drops all defaults, new ones follow.
fn merge_defaults(defaults: &[(String, i64)], custom: &PluginSet) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    let mut replaced = BTreeSet::new();
    for (name, weight) in defaults {
        if custom.disables(name) {
            continue;
        }
        match custom.enabled.iter().position(|(n, _)| n == name) {
            Some(i) => {
                replaced.insert(i);
                out.push(custom.enabled[i].clone());
            }
            None => out.push((name.clone(), *weight)),
        }
    }
    for (i, p) in custom.enabled.iter().enumerate() {
        if !replaced.contains(&i) {
            out.push(p.clone());
        }
    }
    out
}

/// Today's expansion of multiPoint plugins into one extension point
/// (`expandMultiPointPlugins`): explicit entries that re-list a multiPoint plugin first, then
/// the other multiPoint plugins, then the remaining explicit ones; `*` disabled at the point
/// keeps only the explicit ones.
fn expand(
    multi: &[(String, i64)],
    explicit: &PluginSet,
    implements: impl Fn(&PluginPoints) -> bool,
) -> Result<Vec<String>, String> {
    for (name, _) in &explicit.enabled {
        if !implements(known_plugin(name)?) {
            return Err(format!("{name} does not implement that extension point"));
        }
    }
    let explicit_names = explicit.enabled.iter().map(|(n, _)| n.clone());
    if explicit.disabled.iter().any(|d| d == "*") {
        return Ok(explicit_names.collect());
    }
    let mut overrides = Vec::new();
    let mut from_multi = Vec::new();
    for (name, _) in multi {
        if !implements(known_plugin(name)?) || explicit.disables(name) {
            continue;
        }
        if explicit.enables(name) {
            overrides.push(name.clone());
        } else {
            from_multi.push(name.clone());
        }
    }
    let rest: Vec<String> = explicit_names.filter(|n| !overrides.contains(n)).collect();
    Ok(overrides
        .into_iter()
        .chain(from_multi)
        .chain(rest)
        .collect())
}

/// A v1 profile translated to a 1.20 v1beta1 profile; `names` collects its schedulerName.
fn translate_profile(profile: &Value, node_count: usize) -> Result<Value, String> {
    for key in object_keys(profile) {
        match key.as_str() {
            "schedulerName" | "plugins" | "pluginConfig" => {}
            // 1.20 has it only globally; with fewer than 100 nodes both versions examine
            // every node whatever the percentage (minFeasibleNodesToFind = 100).
            "percentageOfNodesToScore" if node_count < 100 => {}
            _ => return Err(format!("profile field {key}: not translated")),
        }
    }
    let name = profile["schedulerName"]
        .as_str()
        .unwrap_or("default-scheduler");
    let plugins = &profile["plugins"];
    for key in object_keys(plugins) {
        if !["multiPoint", "filter", "postFilter", "score"].contains(&key.as_str()) {
            return Err(format!("plugins.{key}: not translated"));
        }
    }
    let defaults: Vec<(String, i64)> = TODAY_DEFAULTS
        .iter()
        .map(|p| (p.name.to_string(), p.weight))
        .collect();
    let multi = merge_defaults(
        &defaults,
        &PluginSet::parse(plugins.get("multiPoint"), "plugins.multiPoint")?,
    );
    let filter_set = PluginSet::parse(plugins.get("filter"), "plugins.filter")?;
    let score_set = PluginSet::parse(plugins.get("score"), "plugins.score")?;
    let post_filter_set = PluginSet::parse(plugins.get("postFilter"), "plugins.postFilter")?;
    let filters = expand(&multi, &filter_set, |p| p.has(FILTER))?;
    let post_filters = expand(&multi, &post_filter_set, |p| p.has(POST_FILTER))?;
    let scores = expand(&multi, &score_set, |p| p.has(SCORE))?;
    // Weights: an explicit Score entry wins over multiPoint; 0 (unset) weighs 1.
    let mut weights: HashMap<String, i64> = HashMap::new();
    for (n, w) in score_set.enabled.iter().chain(multi.iter()) {
        weights
            .entry(n.clone())
            .or_insert(if *w == 0 { 1 } else { *w });
    }

    // Plugin arguments.
    let mut args: BTreeMap<String, Value> = BTreeMap::new();
    for pc in profile["pluginConfig"].as_array().into_iter().flatten() {
        let n = pc["name"]
            .as_str()
            .ok_or("pluginConfig entry without name")?;
        args.insert(n.to_string(), pc["args"].clone());
    }
    let mut config_1_20 = Vec::new();
    let mut fit_score = ("NodeResourcesLeastAllocated".to_string(), None);
    for (plugin, a) in &args {
        match plugin.as_str() {
            "NodeResourcesFit" => {
                let mut fit = serde_json::Map::new();
                for key in object_keys(a) {
                    match key.as_str() {
                        "ignoredResources" | "ignoredResourceGroups" => {
                            fit.insert(key.clone(), a[&key].clone());
                        }
                        "scoringStrategy" => fit_score = translate_scoring(&a[&key])?,
                        _ => return Err(format!("NodeResourcesFit args.{key}: not translated")),
                    }
                }
                if !fit.is_empty() {
                    config_1_20.push(json!({"name": "NodeResourcesFit", "args": fit}));
                }
            }
            "InterPodAffinity" | "NodeAffinity" | "PodTopologySpread" => {
                let allowed: &[&str] = match plugin.as_str() {
                    "InterPodAffinity" => &["hardPodAffinityWeight"],
                    "NodeAffinity" => &["addedAffinity"],
                    _ => &["defaultConstraints", "defaultingType"],
                };
                if let Some(k) = object_keys(a)
                    .into_iter()
                    .find(|k| !allowed.contains(&k.as_str()))
                {
                    return Err(format!("{plugin} args.{k}: not in 1.20"));
                }
                config_1_20.push(json!({"name": plugin, "args": a}));
            }
            "DefaultPreemption" => {
                let allowed = ["minCandidateNodesPercentage", "minCandidateNodesAbsolute"];
                if let Some(k) = object_keys(a)
                    .into_iter()
                    .find(|k| !allowed.contains(&k.as_str()))
                {
                    return Err(format!("{plugin} args.{k}: not in 1.20"));
                }
                config_1_20.push(json!({"name": plugin, "args": a}));
            }
            _ => return Err(format!("{plugin} args: not translated")),
        }
    }
    if let Some(a) = fit_score.1.take() {
        config_1_20.push(json!({"name": fit_score.0, "args": a}));
    }

    // The 1.20 profile, every point written out in full.
    let mut filter_1_20 = Vec::new();
    let mut pre_filter_1_20 = Vec::new();
    for n in &filters {
        let p = known_plugin(n)?;
        if n == "NodeVolumeLimits" {
            filter_1_20.extend(LIMITS_1_20.iter().map(|l| json!({"name": l})));
        } else if p.has(IN_1_20) {
            filter_1_20.push(json!({"name": n}));
            if p.has(PRE_FILTER_1_20) {
                pre_filter_1_20.push(json!({"name": n}));
            }
        }
    }
    let mut score_1_20 = Vec::new();
    let mut pre_score_1_20 = Vec::new();
    for n in &scores {
        let p = known_plugin(n)?;
        if !p.has(IN_1_20) {
            continue;
        }
        let weight = weights.get(n).copied().unwrap_or(1);
        let name_1_20 = if n == "NodeResourcesFit" {
            fit_score.0.clone()
        } else {
            n.clone()
        };
        score_1_20.push(json!({"name": name_1_20, "weight": weight}));
        if p.has(PRE_SCORE_1_20) {
            pre_score_1_20.push(json!({"name": n}));
        }
    }
    let all = |enabled: Vec<Value>| json!({"disabled": [{"name": "*"}], "enabled": enabled});
    let volume_binding: Vec<Value> = filters
        .iter()
        .filter(|n| *n == "VolumeBinding")
        .map(|n| json!({"name": n}))
        .collect();
    let mut out = json!({
        "schedulerName": name,
        "plugins": {
            "queueSort": all(vec![json!({"name": "PrioritySort"})]),
            "preFilter": all(pre_filter_1_20),
            "filter": all(filter_1_20),
            "postFilter": all(post_filters.iter().map(|n| json!({"name": n})).collect()),
            "preScore": all(pre_score_1_20),
            "score": all(score_1_20),
            "reserve": all(volume_binding.clone()),
            "permit": all(vec![]),
            "preBind": all(volume_binding),
            "bind": all(vec![json!({"name": "DefaultBinder"})]),
            "postBind": all(vec![]),
        },
    });
    if !config_1_20.is_empty() {
        out["pluginConfig"] = Value::Array(config_1_20);
    }
    Ok(out)
}

/// NodeResourcesFit's scoringStrategy as 1.20's score plugin and its args.
fn translate_scoring(s: &Value) -> Result<(String, Option<Value>), String> {
    let mut resources: Vec<Value> = Vec::new();
    for r in s["resources"].as_array().into_iter().flatten() {
        let weight = r["weight"].as_i64().filter(|w| *w != 0).unwrap_or(1);
        resources.push(json!({"name": r["name"], "weight": weight}));
    }
    let mut args = serde_json::Map::new();
    if !resources.is_empty() {
        args.insert("resources".into(), Value::Array(resources));
    }
    let plugin = match s["type"].as_str().unwrap_or("LeastAllocated") {
        "LeastAllocated" => "NodeResourcesLeastAllocated",
        "MostAllocated" => "NodeResourcesMostAllocated",
        "RequestedToCapacityRatio" => {
            // Shape scores are 0..10 in both versions.
            args.insert(
                "shape".into(),
                s["requestedToCapacityRatio"]["shape"].clone(),
            );
            "RequestedToCapacityRatio"
        }
        t => return Err(format!("scoringStrategy.type {t}: not translated")),
    };
    for key in object_keys(s) {
        if !["type", "resources", "requestedToCapacityRatio"].contains(&key.as_str()) {
            return Err(format!("scoringStrategy.{key}: not translated"));
        }
    }
    Ok((
        plugin.to_string(),
        (!args.is_empty()).then_some(Value::Object(args)),
    ))
}

/// A scenario's configuration (v1, today's semantics) as a 1.20 v1beta1 configuration.
fn translate_config(config: Option<&Value>, node_count: usize) -> Result<Value, String> {
    let empty = json!({});
    let config = config.unwrap_or(&empty);
    let mut out = json!({
        "apiVersion": "kubescheduler.config.k8s.io/v1beta1",
        "kind": "KubeSchedulerConfiguration",
    });
    for key in object_keys(config) {
        match key.as_str() {
            "apiVersion" | "kind" | "profiles" => {}
            "parallelism"
            | "percentageOfNodesToScore"
            | "podInitialBackoffSeconds"
            | "podMaxBackoffSeconds" => out[&key] = config[&key].clone(),
            _ => return Err(format!("{key}: not translated")),
        }
    }
    // gantry scores every node unless told otherwise, 1.20 an adaptive share; below 100
    // nodes both examine every node, and the translation says what gantry does.
    if config.get("percentageOfNodesToScore").is_none() {
        out["percentageOfNodesToScore"] = json!(100);
    }
    let default_profile = vec![json!({"schedulerName": "default-scheduler"})];
    let profiles = config["profiles"]
        .as_array()
        .filter(|p| !p.is_empty())
        .unwrap_or(&default_profile);
    let mut translated = Vec::new();
    for (i, p) in profiles.iter().enumerate() {
        translated
            .push(translate_profile(p, node_count).map_err(|e| format!("profiles[{i}]: {e}"))?);
    }
    out["profiles"] = Value::Array(translated);
    Ok(out)
}

// ------------------------------------------------------------------ messages

/// Today's message without its PostFilter part (`... preemption: 0/3 nodes are available:
/// ...`): kube-scheduler 1.20 runs preemption as today's does, but does not add what it
/// found to the message.
fn without_preemption(message: &str) -> &str {
    message
        .split_once(" preemption: ")
        .map_or(message, |(head, _)| head)
}

/// Rewrites the reasons of a 1.20 "0/N nodes are available: ..." message that 1.20 words
/// differently from today's kube-scheduler, and sorts them again as both versions do.
fn todays_wording(message: &str) -> String {
    let Some((head, rest)) = message.split_once(" nodes are available: ") else {
        return message.to_string();
    };
    let body = rest.strip_suffix('.').unwrap_or(rest);
    // Items are "<count> <reason>" joined by ", "; a reason may itself hold ", ".
    let mut items: Vec<String> = Vec::new();
    for part in body.split(", ") {
        let starts_item = part
            .split_once(' ')
            .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        match items.last_mut() {
            Some(last) if !starts_item => {
                last.push_str(", ");
                last.push_str(part);
            }
            _ => items.push(part.to_string()),
        }
    }
    let mut out: Vec<String> = items
        .into_iter()
        .filter_map(|item| {
            let (count, reason) = item.split_once(' ')?;
            let reason = if let Some(taint) = reason
                .strip_prefix("node(s) had taint ")
                .and_then(|t| t.strip_suffix(", that the pod didn't tolerate"))
            {
                format!("node(s) had untolerated taint {taint}")
            } else {
                match reason {
                    // 1.20 adds this beside the specific affinity reason; today does not.
                    "node(s) didn't match pod affinity/anti-affinity" => return None,
                    "node(s) didn't match Pod's node affinity" => {
                        "node(s) didn't match Pod's node affinity/selector".to_string()
                    }
                    "node(s) didn't match the requested hostname" => {
                        "node(s) didn't match the requested node name".to_string()
                    }
                    "node(s) had volume node affinity conflict" => {
                        "node(s) didn't match PersistentVolume's node affinity".to_string()
                    }
                    "pvc(s) bound to non-existent pv(s)" => {
                        "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
                            .to_string()
                    }
                    r => r.to_string(),
                }
            };
            Some(format!("{count} {reason}"))
        })
        .collect();
    out.sort();
    // 1.20 counts a rejection at PreFilter on every node; today gives its reason once.
    if let [only] = out.as_slice()
        && let Some((count, reason)) = only.split_once(' ')
        && count == head.trim_start_matches("0/")
        && (reason.starts_with("persistentvolumeclaim \"")
            || reason == "pod has unbound immediate PersistentVolumeClaims")
    {
        return format!("{head} nodes are available: {reason}.");
    }
    format!("{head} nodes are available: {}.", out.join(", "))
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
        if kind == "PodDisruptionBudget" {
            // policy/v1 is served from 1.21; 1.20 serves the same budget as v1beta1.
            o["apiVersion"] = json!("policy/v1beta1");
            if let Some(status) = o.as_object_mut().and_then(|m| m.remove("status")) {
                objects.statuses.push((
                    format!("/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets/{name}"),
                    status,
                ));
            }
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
            // Preemption's victims are ordered by start time, which only a kubelet sets.
            if let Some(status) = status.filter(|s| s.get("startTime").is_some()) {
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

/// Features a scenario may use that kube-scheduler 1.20 lacks: such a scenario must say
/// `kubeScheduler: {parity: false, why: ...}`.
fn features_1_20_lacks(cluster: &[Value]) -> Vec<&'static str> {
    let mut found = BTreeSet::new();
    let listed = |o: &Value| o["kind"].as_str().is_some_and(|k| k.ends_with("List"));
    let objects = cluster.iter().flat_map(|o| match o["items"].as_array() {
        Some(items) if listed(o) => items.iter().collect::<Vec<_>>(),
        _ => vec![o],
    });
    for o in objects {
        if ["PersistentVolumeClaim", "PersistentVolume"].contains(&o["kind"].as_str().unwrap_or(""))
            && o["spec"]["accessModes"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|m| m == "ReadWriteOncePod")
        {
            found.insert("the ReadWriteOncePod access mode (1.22)");
        }
        if o["kind"] != "Pod" {
            continue;
        }
        let spec = &o["spec"];
        if spec.get("schedulingGates").is_some() {
            found.insert("schedulingGates (1.26)");
        }
        for v in spec["volumes"].as_array().into_iter().flatten() {
            if v.get("ephemeral").is_some() {
                found.insert("generic ephemeral volumes (1.21)");
            }
        }
        for c in spec["topologySpreadConstraints"]
            .as_array()
            .into_iter()
            .flatten()
        {
            for (field, what) in [
                ("minDomains", "minDomains (1.24)"),
                ("nodeAffinityPolicy", "nodeAffinityPolicy (1.25)"),
                ("nodeTaintsPolicy", "nodeTaintsPolicy (1.25)"),
                (
                    "matchLabelKeys",
                    "matchLabelKeys in spread constraints (1.25)",
                ),
            ] {
                if c.get(field).is_some() {
                    found.insert(what);
                }
            }
        }
        for kind in ["podAffinity", "podAntiAffinity"] {
            let a = &spec["affinity"][kind];
            let required = a["requiredDuringSchedulingIgnoredDuringExecution"].as_array();
            let preferred = a["preferredDuringSchedulingIgnoredDuringExecution"].as_array();
            let terms = required.into_iter().flatten().chain(
                preferred
                    .into_iter()
                    .flatten()
                    .map(|w| &w["podAffinityTerm"]),
            );
            for t in terms {
                if t.get("namespaceSelector").is_some() {
                    found.insert("namespaceSelector in affinity terms (1.21)");
                }
                if t.get("matchLabelKeys").is_some() || t.get("mismatchLabelKeys").is_some() {
                    found.insert("matchLabelKeys/mismatchLabelKeys in affinity terms (1.29)");
                }
            }
        }
        for c in spec["initContainers"].as_array().into_iter().flatten() {
            if c.get("restartPolicy").is_some() {
                found.insert("restartable init containers (1.28)");
            }
        }
    }
    found.into_iter().collect()
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
    if scenario.config_error.is_some() {
        return Outcome::Ineligible(
            "checks gantry's configuration validation; nothing is placed".to_string(),
        );
    }
    let cluster = scenario.cluster_json();
    let lacking = features_1_20_lacks(&cluster);
    if !lacking.is_empty() {
        return Outcome::Failed(vec![format!(
            "uses {}, which kube-scheduler 1.20 lacks: mark it kubeScheduler: {{parity: false, why: ...}}",
            lacking.join(", ")
        )]);
    }
    let objects = match prepare(&cluster) {
        Ok(o) => o,
        Err(e) => return Outcome::Failed(vec![e]),
    };
    let config = match translate_config(scenario.config_json().as_ref(), objects.nodes.len()) {
        Ok(c) => c,
        Err(e) => {
            return Outcome::Failed(vec![format!(
                "cannot translate its config for 1.20 ({e}): extend the translation or mark it \
                 kubeScheduler: {{parity: false, why: ...}}"
            )]);
        }
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

/// Loads the cluster, schedules the pending pods with kube-scheduler 1.20 and compares;
/// kube-scheduler is stopped again when it returns.
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
    let uids: HashMap<String, String> = kubectl_json(plane, &["get", "pods", "--all-namespaces"])?
        ["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let (ns, name) = ns_name(p);
            (
                format!("{ns}/{name}"),
                p["metadata"]["uid"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    for (ns, name) in &objects.terminating {
        plane.try_kubectl(&["delete", "pod", "-n", ns, name, "--wait=false"], None)?;
    }
    // kube-scheduler's informers start from the apiserver's watch cache, which may lag
    // behind what was just written (or deleted by the previous scenario): wait until it
    // holds exactly this cluster.
    wait_for_watch_cache(plane, &watched(objects, true))?;

    let profiles: BTreeSet<String> = config["profiles"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["schedulerName"].as_str().map(str::to_string))
        .collect();
    let scheduler = start_scheduler(plane, config)?;
    refresh_image_nodes(plane, &scheduler, objects)?;

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
            let state = pod_state(&kubectl_json(plane, &["get", "pod", "-n", &ns, &name])?);
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
        let pods = kubectl_json(plane, &["get", "pods", "--all-namespaces"])?;
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

    let preempted = preempted_events(plane)?;
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
                    "{pod}:\n      kube-scheduler 1.20: {got}\n      scenario expects:    {wanted}"
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
            ) => {
                !compare_messages
                    || !msg.contains(" nodes are available: ")
                    || todays_wording(m) == without_preemption(msg)
            }
            _ => false,
        };
        if !ok {
            let got = match got {
                PodState::Bound(n) => format!("on {n}"),
                PodState::Unschedulable(m) => format!(
                    "pending: {m}{}",
                    if todays_wording(m) == *m {
                        String::new()
                    } else {
                        format!(" (today's wording: {})", todays_wording(m))
                    }
                ),
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
                "{pod}:\n      kube-scheduler 1.20: {got}\n      scenario expects:    {want}"
            ));
        }
    }
    Ok(problems)
}

/// The messages of the `Preempted` events kube-scheduler recorded, by the victim's uid
/// (1.20 words them `Preempted by <namespace>/<preemptor> on node <node>`).
fn preempted_events(plane: &ControlPlane) -> Result<HashMap<String, String>, String> {
    let events = kubectl_json(plane, &["get", "events", "--all-namespaces"])?;
    Ok(events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["reason"] == "Preempted")
        .filter_map(|e| {
            let uid = e["involvedObject"]["uid"].as_str()?;
            let message = e["message"].as_str().or_else(|| e["note"].as_str())?;
            Some((uid.to_string(), message.to_string()))
        })
        .collect())
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
        plane.try_kubectl(&args, None)?;
    }
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
        let mut current = kubectl_json(plane, &["get", "namespace", name])?;
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

/// A node created and deleted again by [`refresh_image_nodes`].
const BARRIER_NODE: &str = "parity-barrier";

/// kube-scheduler 1.20 keeps, for each node, how many nodes hold each of its images as it was
/// when the node entered its cache (kubernetes#116673, fixed in 1.28), so ImageLocality
/// depends on the random order of its initial list; in a real cluster the kubelets' status
/// updates refresh it within minutes. Does what they would: updates the nodes holding images
/// once kube-scheduler runs, then waits until it has seen a barrier node created behind the
/// updates (same watch, so in order) and its removal, before any pod is scheduled.
fn refresh_image_nodes(
    plane: &ControlPlane,
    scheduler: &KubeScheduler,
    objects: &Objects,
) -> Result<(), String> {
    let with_images: Vec<&str> = objects
        .nodes
        .iter()
        .filter(|n| {
            n["status"]["images"]
                .as_array()
                .is_some_and(|i| !i.is_empty())
        })
        .filter_map(|n| n["metadata"]["name"].as_str())
        .collect();
    if with_images.is_empty() {
        return Ok(());
    }
    let mut args = vec!["annotate", "--overwrite", "nodes"];
    args.extend(&with_images);
    args.push("parity.gantry.dev/status-refreshed=true");
    plane.try_kubectl(&args, None)?;
    create(
        plane,
        &[json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": BARRIER_NODE}})],
    )?;
    let cached_nodes = |want: usize| -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        // The gauge is set once a second, the first time a second after the start.
        while gauges(
            scheduler,
            &["scheduler_scheduler_cache_size{type=\"nodes\"}"],
        )?[0]
            != Some(want as u64)
        {
            if Instant::now() > deadline {
                return Err(format!("kube-scheduler's cache never held {want} nodes"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    };
    cached_nodes(objects.nodes.len() + 1)?;
    plane.try_kubectl(&["delete", "node", BARRIER_NODE, "--wait=false"], None)?;
    cached_nodes(objects.nodes.len())
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
fn scenarios_match_kube_scheduler_1_20() {
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
        "{} of {} scenarios differ from kube-scheduler 1.20.2:\n{}",
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
fn the_preemption_part_of_todays_message_is_left_out_for_1_20() {
    assert_eq!(
        without_preemption(
            "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
        ),
        "0/2 nodes are available: 2 Insufficient cpu."
    );
    assert_eq!(
        without_preemption("0/2 nodes are available: 2 Insufficient cpu."),
        "0/2 nodes are available: 2 Insufficient cpu."
    );
}

#[test]
fn wording_of_1_20_is_rewritten_to_todays() {
    assert_eq!(
        todays_wording(
            "0/3 nodes are available: 1 node(s) had taint {spot: true}, that the pod didn't tolerate, 2 Insufficient cpu."
        ),
        "0/3 nodes are available: 1 node(s) had untolerated taint {spot: true}, 2 Insufficient cpu."
    );
    assert_eq!(
        todays_wording(
            "0/2 nodes are available: 2 node(s) didn't match pod affinity rules, 2 node(s) didn't match pod affinity/anti-affinity."
        ),
        "0/2 nodes are available: 2 node(s) didn't match pod affinity rules."
    );
    assert_eq!(
        todays_wording(
            "0/4 nodes are available: 3 node(s) didn't match Pod's node affinity, 1 node(s) didn't match the requested hostname."
        ),
        "0/4 nodes are available: 1 node(s) didn't match the requested node name, 3 node(s) didn't match Pod's node affinity/selector."
    );
    assert_eq!(
        todays_wording("0/2 nodes are available: 2 Insufficient cpu."),
        "0/2 nodes are available: 2 Insufficient cpu."
    );
    assert_eq!(
        todays_wording("0/2 nodes are available: 2 persistentvolumeclaim \"data\" not found."),
        "0/2 nodes are available: persistentvolumeclaim \"data\" not found."
    );
    assert_eq!(
        todays_wording(
            "0/3 nodes are available: 1 node(s) had volume node affinity conflict, 2 Insufficient cpu."
        ),
        "0/3 nodes are available: 1 node(s) didn't match PersistentVolume's node affinity, 2 Insufficient cpu."
    );
}

#[test]
fn default_profile_gets_todays_weights() {
    let c = translate_config(None, 3).expect("translates");
    let profile = &c["profiles"][0];
    assert_eq!(profile["schedulerName"], "default-scheduler");
    let score: Vec<(String, i64)> = profile["plugins"]["score"]["enabled"]
        .as_array()
        .expect("score plugins")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or("").to_string(),
                p["weight"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    let want: Vec<(String, i64)> = [
        ("TaintToleration", 3),
        ("NodeAffinity", 2),
        ("NodeResourcesLeastAllocated", 1),
        ("PodTopologySpread", 2),
        ("InterPodAffinity", 2),
        ("NodeResourcesBalancedAllocation", 1),
        ("ImageLocality", 1),
    ]
    .iter()
    .map(|(n, w)| (n.to_string(), *w))
    .collect();
    assert_eq!(score, want);
    let filters: Vec<&str> = profile["plugins"]["filter"]["enabled"]
        .as_array()
        .expect("filters")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(
        filters,
        [
            "NodeUnschedulable",
            "NodeName",
            "TaintToleration",
            "NodeAffinity",
            "NodePorts",
            "NodeResourcesFit",
            "VolumeRestrictions",
            "EBSLimits",
            "GCEPDLimits",
            "NodeVolumeLimits",
            "AzureDiskLimits",
            "VolumeBinding",
            "VolumeZone",
            "PodTopologySpread",
            "InterPodAffinity"
        ]
    );
    assert_eq!(
        profile["plugins"]["postFilter"]["enabled"],
        json!([{"name": "DefaultPreemption"}])
    );
}

#[test]
fn explicit_score_entries_override_multipoint() {
    let config: Value = serde_yaml::from_str(
        r#"
profiles:
- schedulerName: relisted
  plugins:
    score:
      enabled: [{name: TaintToleration}]
- schedulerName: only-fit
  plugins:
    multiPoint:
      disabled: [{name: "*"}]
      enabled: [{name: PrioritySort}, {name: NodeResourcesFit}, {name: DefaultBinder}]
  pluginConfig:
  - name: NodeResourcesFit
    args: {scoringStrategy: {type: MostAllocated}}
"#,
    )
    .expect("yaml");
    let c = translate_config(Some(&config), 3).expect("translates");
    let weight = |profile: usize, name: &str| {
        c["profiles"][profile]["plugins"]["score"]["enabled"]
            .as_array()
            .expect("score")
            .iter()
            .find(|p| p["name"] == name)
            .map(|p| p["weight"].clone())
    };
    assert_eq!(weight(0, "TaintToleration"), Some(json!(1)));
    assert_eq!(weight(0, "NodeAffinity"), Some(json!(2)));
    assert_eq!(
        c["profiles"][1]["plugins"]["score"]["enabled"],
        json!([{"name": "NodeResourcesMostAllocated", "weight": 1}])
    );
    assert_eq!(
        c["profiles"][1]["plugins"]["filter"]["enabled"],
        json!([{"name": "NodeResourcesFit"}])
    );
    assert_eq!(
        c["profiles"][1]["plugins"]["preScore"]["enabled"],
        json!([])
    );
}
