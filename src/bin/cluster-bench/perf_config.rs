//! Reading one workload of a scheduler_perf `performance-config.yaml` (Kubernetes'
//! `test/integration/scheduler_perf/*/`): its test case's op list with the workload's `params`
//! substituted (`countParam: $initNodes` becomes `count: 5000`), each op typed and checked.
//! Only the ops and fields the replayer carries out are accepted; any other op or field is an
//! error naming the op and the field, so that no workload is replayed with a part silently
//! left out.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde_yaml::{Mapping, Value};

/// The op fields holding a `$param` reference, and the field each one sets.
const PARAM_FIELDS: [(&str, &str); 3] = [
    ("countParam", "count"),
    ("durationParam", "duration"),
    ("steadyStateParam", "steadyState"),
];

/// One workload, ready to replay: its ops in order, template paths resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// `<test case>/<workload>`, as the results name it.
    pub name: String,
    /// The ops with the workload's parameters in place.
    pub ops: Vec<Op>,
}

/// One op of a workload.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    CreateNodes(CreateNodes),
    CreateNamespaces(CreateNamespaces),
    CreatePods(CreatePods),
    Barrier(Barrier),
    Churn(Churn),
    Sleep(Duration),
    DeletePods(DeletePods),
}

/// `createNodes`: `count` nodes of a template (scheduler_perf's base node without one), with
/// at most one prepare strategy.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CreateNodes {
    pub count: usize,
    #[serde(default)]
    pub node_template_path: Option<PathBuf>,
    #[serde(default)]
    pub label_node_prepare_strategy: Option<LabelStrategy>,
    #[serde(default)]
    pub unique_node_label_strategy: Option<UniqueLabelStrategy>,
    #[serde(default)]
    pub node_allocatable_strategy: Option<AllocatableStrategy>,
    #[serde(default)]
    pub template_params: BTreeMap<String, Value>,
}

/// `labelNodePrepareStrategy`: the nodes get `labelKey`, its values round-robin.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LabelStrategy {
    pub label_key: String,
    pub label_values: Vec<String>,
}

/// `uniqueNodeLabelStrategy`: every node gets `labelKey` with a value of its own.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UniqueLabelStrategy {
    pub label_key: String,
}

/// `nodeAllocatableStrategy`, its node part: these allocatable quantities on every node (its
/// CSINode parts are the volume workloads', which `scripts/bench-volumes.sh` runs).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AllocatableStrategy {
    pub node_allocatable: BTreeMap<String, String>,
}

/// `createNamespaces`: `<prefix>-0` to `<prefix>-<count-1>`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CreateNamespaces {
    pub prefix: String,
    pub count: usize,
}

/// `createPods`: `count` pods of a template in `namespace` (scheduler_perf's default:
/// `namespace-<op index>`, filled in when the workload is read).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CreatePods {
    pub count: usize,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub pod_template_path: Option<PathBuf>,
    #[serde(default)]
    pub collect_metrics: bool,
    #[serde(default)]
    pub skip_wait_to_completion: bool,
    /// Accepted only as false: the replayer creates every measured pod before the scheduler
    /// starts, so it has no steady state to keep.
    #[serde(default)]
    pub steady_state: bool,
    #[serde(default)]
    pub template_params: BTreeMap<String, Value>,
}

/// `barrier`: wait until the pods of `namespaces` (all so far if empty) reach a stage.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Barrier {
    #[serde(default)]
    pub namespaces: Vec<String>,
    #[serde(default)]
    pub stage_requirement: Option<Stage>,
}

/// How far a barrier waits: bound, or only tried once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Stage {
    Scheduled,
    Attempted,
}

/// `churn`: objects of `templatePaths` created (and, in recreate mode, deleted) every interval
/// in the background.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Churn {
    pub mode: ChurnMode,
    #[serde(default)]
    pub number: usize,
    #[serde(default)]
    pub interval_milliseconds: Option<u64>,
    #[serde(default)]
    pub namespace: Option<String>,
    pub template_paths: Vec<PathBuf>,
}

/// `create`: up to `number` objects per template (0: no limit); `recreate`: `number` slots per
/// template, each tick deleting the slot's object if it has one, else creating one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChurnMode {
    Create,
    Recreate,
}

/// `deletePods`: the pods of `namespace` (those matching `labelSelector`) deleted, at
/// `deletePodsPerSecond` if set.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DeletePods {
    pub namespace: String,
    #[serde(default)]
    pub label_selector: BTreeMap<String, String>,
    #[serde(default)]
    pub skip_wait_to_completion: bool,
    #[serde(default)]
    pub delete_pods_per_second: u32,
}

/// A test case as the file has it; its ops stay untyped until the parameters are in. The
/// fields only scheduler_perf's own reporting reads (labels, thresholds, its metrics
/// collector) are taken and ignored.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawTestCase {
    name: String,
    #[serde(default)]
    feature_gates: BTreeMap<String, bool>,
    #[serde(default)]
    scheduler_config_path: Option<String>,
    #[serde(default, rename = "metricsCollectorConfig")]
    _metrics_collector_config: IgnoredAny,
    #[serde(default)]
    default_pod_template_path: Option<PathBuf>,
    #[serde(default, rename = "labels")]
    _labels: IgnoredAny,
    #[serde(default, rename = "defaultThresholdMetricSelector")]
    _default_threshold_metric_selector: IgnoredAny,
    workload_template: Vec<Mapping>,
    workloads: Vec<RawWorkload>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawWorkload {
    name: String,
    #[serde(default)]
    params: BTreeMap<String, Value>,
    #[serde(default, rename = "labels")]
    _labels: IgnoredAny,
    #[serde(default, rename = "threshold")]
    _threshold: IgnoredAny,
    #[serde(default, rename = "thresholdMetricSelector")]
    _threshold_metric_selector: IgnoredAny,
    #[serde(default)]
    feature_gates: BTreeMap<String, bool>,
}

/// Reads workload `workload` of test case `test_case` from the configuration file `path`;
/// template paths become paths relative to the file's folder joined to it, as scheduler_perf
/// (which runs in that folder) reads them. `overrides` replace workload parameters.
pub fn read(
    path: &Path,
    test_case: &str,
    workload: &str,
    overrides: &BTreeMap<String, Value>,
) -> anyhow::Result<Workload> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let base = path.parent().unwrap_or(Path::new("."));
    parse(&text, test_case, workload, overrides, base)
        .with_context(|| format!("{}: {test_case}/{workload}", path.display()))
}

/// [`read`] on the file's text, template paths joined to `base`.
pub fn parse(
    text: &str,
    test_case: &str,
    workload: &str,
    overrides: &BTreeMap<String, Value>,
    base: &Path,
) -> anyhow::Result<Workload> {
    let cases: Vec<RawTestCase> =
        serde_yaml::from_str(text).context("not a scheduler_perf configuration")?;
    let case = cases
        .into_iter()
        .find(|c| c.name == test_case)
        .with_context(|| format!("no test case {test_case}"))?;
    let raw = case
        .workloads
        .iter()
        .find(|w| w.name == workload)
        .with_context(|| format!("test case {test_case} has no workload {workload}"))?;
    refuse_settings(&case, raw)?;
    let mut params = raw.params.clone();
    params.extend(overrides.clone());
    let mut ops = Vec::with_capacity(case.workload_template.len());
    for (index, op) in case.workload_template.iter().enumerate() {
        let opcode = op
            .get("opcode")
            .and_then(Value::as_str)
            .with_context(|| format!("op {index} has no opcode"))?;
        let typed = typed_op(
            op,
            index,
            &params,
            case.default_pod_template_path.as_deref(),
        )
        .with_context(|| format!("op {index} ({opcode})"))?;
        ops.push(resolve_paths(typed, base));
    }
    Ok(Workload {
        name: format!("{test_case}/{workload}"),
        ops,
    })
}

/// Fails on the test case's or workload's settings the replayer cannot honour: feature gates
/// (both schedulers run with their defaults), a scheduler configuration of its own.
fn refuse_settings(case: &RawTestCase, workload: &RawWorkload) -> anyhow::Result<()> {
    if let Some(gates) = [&case.feature_gates, &workload.feature_gates]
        .into_iter()
        .find(|g| !g.is_empty())
    {
        bail!("featureGates {gates:?}: not replayed (the schedulers run with their default gates)");
    }
    if let Some(config) = &case.scheduler_config_path {
        bail!(
            "schedulerConfigPath {config}: not replayed (the schedulers run the default profile)"
        );
    }
    Ok(())
}

/// The op `op` (index `index`) with `params` substituted, typed by its opcode; createPods and
/// churn get their default namespace, createPods the test case's default template.
fn typed_op(
    op: &Mapping,
    index: usize,
    params: &BTreeMap<String, Value>,
    default_template: Option<&Path>,
) -> anyhow::Result<Op> {
    let mut fields = substitute(op, params)?;
    let opcode = fields
        .remove("opcode")
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let default_namespace = format!("namespace-{index}");
    Ok(match opcode.as_str() {
        "createNodes" => Op::CreateNodes(fields_as(fields)?),
        "createNamespaces" => Op::CreateNamespaces(fields_as(fields)?),
        "createPods" => {
            let mut pods: CreatePods = fields_as(fields)?;
            anyhow::ensure!(
                !pods.steady_state,
                "steadyState: true is not replayed (every measured pod is created before the scheduler starts)"
            );
            pods.namespace.get_or_insert(default_namespace);
            if pods.pod_template_path.is_none() {
                pods.pod_template_path = default_template.map(Path::to_path_buf);
            }
            Op::CreatePods(pods)
        }
        "barrier" => Op::Barrier(fields_as(fields)?),
        "churn" => {
            let mut churn: Churn = fields_as(fields)?;
            anyhow::ensure!(
                churn.mode == ChurnMode::Create || churn.number > 0,
                "number must be positive in recreate mode"
            );
            churn.namespace.get_or_insert(default_namespace);
            Op::Churn(churn)
        }
        "sleep" => Op::Sleep(sleep_duration(fields)?),
        "deletePods" => Op::DeletePods(fields_as(fields)?),
        other => bail!(
            "unsupported opcode {other} (supported: createNodes, createNamespaces, createPods, barrier, churn, sleep, deletePods)"
        ),
    })
}

/// The op's fields with every `xParam: $name` replaced by `x: <params[name]>`, and every
/// `$name` value of its `templateParams` by the parameter.
fn substitute(op: &Mapping, params: &BTreeMap<String, Value>) -> anyhow::Result<Mapping> {
    let mut fields = op.clone();
    for (param_field, target) in PARAM_FIELDS {
        if let Some(reference) = fields.remove(param_field) {
            let value =
                param_value(&reference, params).with_context(|| format!("field {param_field}"))?;
            fields.insert(Value::from(target), value);
        }
    }
    if let Some(Value::Mapping(template)) = fields.get_mut("templateParams") {
        for (key, value) in template.iter_mut() {
            if value.as_str().is_some_and(|s| s.starts_with('$')) {
                *value = param_value(value, params)
                    .with_context(|| format!("templateParams {}", key.as_str().unwrap_or("?")))?;
            }
        }
    }
    Ok(fields)
}

/// The parameter `reference` (`$name`) names.
fn param_value(reference: &Value, params: &BTreeMap<String, Value>) -> anyhow::Result<Value> {
    let name = reference
        .as_str()
        .and_then(|s| s.strip_prefix('$'))
        .with_context(|| format!("{reference:?} is not a $parameter"))?;
    params
        .get(name)
        .cloned()
        .with_context(|| format!("the workload has no parameter {name}"))
}

/// `fields` as op type `T`, refusing unknown fields (serde names them).
fn fields_as<T: DeserializeOwned>(fields: Mapping) -> anyhow::Result<T> {
    Ok(serde_yaml::from_value(Value::Mapping(fields))?)
}

/// A sleep op's duration (`duration: 5s`, Go's notation: h, m, s, ms).
fn sleep_duration(mut fields: Mapping) -> anyhow::Result<Duration> {
    let value = fields.remove("duration").context("no duration")?;
    if let Some((key, _)) = fields.iter().next() {
        bail!("unknown field {}", key.as_str().unwrap_or("?"));
    }
    let text = value.as_str().context("duration is not a string")?;
    go_duration(text).with_context(|| format!("duration {text}"))
}

/// A Go duration of one unit: `500ms`, `5s`, `2m`, `1h`.
fn go_duration(text: &str) -> anyhow::Result<Duration> {
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .context("no unit")?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().context("not a number")?;
    let seconds = match unit {
        "ms" => number / 1000.0,
        "s" => number,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        other => bail!("unit {other} not supported (h, m, s, ms)"),
    };
    Ok(Duration::from_secs_f64(seconds))
}

/// `op` with its template paths joined to `base`.
fn resolve_paths(op: Op, base: &Path) -> Op {
    let join = |p: &mut Option<PathBuf>| {
        if let Some(path) = p.as_mut() {
            *path = base.join(&*path);
        }
    };
    match op {
        Op::CreateNodes(mut nodes) => {
            join(&mut nodes.node_template_path);
            Op::CreateNodes(nodes)
        }
        Op::CreatePods(mut pods) => {
            join(&mut pods.pod_template_path);
            Op::CreatePods(pods)
        }
        Op::Churn(mut churn) => {
            churn.template_paths = churn.template_paths.iter().map(|p| base.join(p)).collect();
            Op::Churn(churn)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
- name: SchedulingBasic
  defaultPodTemplatePath: ../templates/pod-default.yaml
  workloadTemplate:
  - opcode: createNodes
    countParam: $initNodes
    labelNodePrepareStrategy:
      labelKey: "topology.kubernetes.io/zone"
      labelValues: ["moon-1", "moon-2"]
  - opcode: createPods
    countParam: $initPods
  - opcode: churn
    mode: recreate
    number: 1
    templatePaths: [../templates/churn/node-default.yaml]
    intervalMilliseconds: 1000
  - opcode: sleep
    duration: 500ms
  - opcode: createPods
    countParam: $measurePods
    podTemplatePath: templates/pod.yaml
    namespace: sched-1
    collectMetrics: true
  workloads:
  - name: 5Nodes
    labels: [integration-test, short]
    params: {initNodes: 5, initPods: 5, measurePods: 10}
  - name: Gated
    featureGates: {SchedulerAsyncAPICalls: false}
    params: {initNodes: 5, initPods: 5, measurePods: 10}
"#;

    fn workload(text: &str, name: &str) -> anyhow::Result<Workload> {
        parse(
            text,
            "SchedulingBasic",
            name,
            &BTreeMap::new(),
            Path::new("perf/misc"),
        )
    }

    #[test]
    fn params_are_substituted_and_defaults_filled_in() {
        let w = workload(CONFIG, "5Nodes").unwrap();
        assert_eq!(w.name, "SchedulingBasic/5Nodes");
        let Op::CreateNodes(nodes) = &w.ops[0] else {
            panic!("{:?}", w.ops[0])
        };
        assert_eq!(nodes.count, 5);
        assert_eq!(
            nodes
                .label_node_prepare_strategy
                .as_ref()
                .unwrap()
                .label_values,
            ["moon-1", "moon-2"]
        );
        let Op::CreatePods(init) = &w.ops[1] else {
            panic!("{:?}", w.ops[1])
        };
        assert_eq!(init.count, 5);
        assert_eq!(init.namespace.as_deref(), Some("namespace-1"));
        assert_eq!(
            init.pod_template_path.as_deref(),
            Some(Path::new("perf/misc/../templates/pod-default.yaml"))
        );
        let Op::Churn(churn) = &w.ops[2] else {
            panic!("{:?}", w.ops[2])
        };
        assert_eq!(churn.namespace.as_deref(), Some("namespace-2"));
        assert_eq!(churn.mode, ChurnMode::Recreate);
        assert_eq!(w.ops[3], Op::Sleep(Duration::from_millis(500)));
        let Op::CreatePods(measured) = &w.ops[4] else {
            panic!("{:?}", w.ops[4])
        };
        assert!(measured.collect_metrics);
        assert_eq!(measured.count, 10);
        assert_eq!(measured.namespace.as_deref(), Some("sched-1"));
        assert_eq!(
            measured.pod_template_path.as_deref(),
            Some(Path::new("perf/misc/templates/pod.yaml"))
        );
    }

    #[test]
    fn overrides_replace_params() {
        let overrides = BTreeMap::from([("measurePods".to_string(), Value::from(3))]);
        let w = parse(
            CONFIG,
            "SchedulingBasic",
            "5Nodes",
            &overrides,
            Path::new("."),
        )
        .unwrap();
        let Op::CreatePods(measured) = &w.ops[4] else {
            panic!()
        };
        assert_eq!(measured.count, 3);
    }

    #[test]
    fn unknown_ops_fields_and_params_are_named() {
        let error = |text: &str| format!("{:#}", workload(text, "5Nodes").unwrap_err());
        let op = CONFIG.replace("opcode: sleep", "opcode: createPodSets");
        assert!(
            error(&op).contains("op 3 (createPodSets): unsupported opcode createPodSets"),
            "{}",
            error(&op)
        );
        let field = CONFIG.replace(
            "collectMetrics: true",
            "collectMetrics: true\n    persistentVolumeTemplatePath: pv.yaml",
        );
        assert!(
            error(&field)
                .contains("op 4 (createPods): unknown field `persistentVolumeTemplatePath`"),
            "{}",
            error(&field)
        );
        let param = CONFIG.replace("$initPods", "$missing");
        assert!(
            error(&param).contains(
                "op 1 (createPods): field countParam: the workload has no parameter missing"
            ),
            "{}",
            error(&param)
        );
        let steady = CONFIG.replace("collectMetrics: true", "steadyState: true");
        assert!(error(&steady).contains("steadyState: true is not replayed"));
    }

    #[test]
    fn feature_gates_and_missing_workloads_are_refused() {
        let gated = format!("{:#}", workload(CONFIG, "Gated").unwrap_err());
        assert!(gated.contains("featureGates"), "{gated}");
        let missing = format!("{:#}", workload(CONFIG, "50Nodes").unwrap_err());
        assert!(missing.contains("has no workload 50Nodes"), "{missing}");
    }

    #[test]
    fn go_durations() {
        assert_eq!(go_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(go_duration("1.5m").unwrap(), Duration::from_secs(90));
        assert!(go_duration("5").is_err());
        assert!(go_duration("5d").is_err());
    }
}
