//! From a profile's plugin sets to the plugins at each extension point, by kube-scheduler's
//! rules: the default plugins are enabled through `multiPoint`; a user's `multiPoint` set is
//! merged into the defaults (a re-listed default keeps its place, `*` disables all); each
//! extension point then holds the plugins enabled there explicitly and, unless disabled
//! there, the `multiPoint` plugins that implement it.

use std::collections::HashMap;
use std::sync::Arc;

use crate::framework::{ArgsError, MAX_NODE_SCORE, Plugin, Profile, Registry};
use crate::model::echo::echo;

use super::ConfigError;
use super::types::{PluginRef, PluginSet, Plugins, ProfileConfig};

/// The largest score weight: kube-scheduler's `weight` is an int32. With at most a few dozen
/// score plugins, the highest total score (weights times [`MAX_NODE_SCORE`]) stays many
/// orders of magnitude below `i64::MAX`.
pub const MAX_WEIGHT: i64 = i32::MAX as i64;

/// kube-scheduler plugins gantry does not implement. Disabling them, or giving their
/// arguments, is accepted (a config written for kube-scheduler keeps working); enabling them
/// is an error.
pub const UNSUPPORTED_KUBE_PLUGINS: &[&str] = &[
    "EBSLimits",
    "GCEPDLimits",
    "AzureDiskLimits",
    "CinderLimits",
];

/// The extension points, in the order kube-scheduler lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Point {
    PreEnqueue,
    QueueSort,
    PreFilter,
    Filter,
    PostFilter,
    PreScore,
    Score,
    Reserve,
    Permit,
    PreBind,
    Bind,
    PostBind,
    PlacementGenerate,
    PlacementScore,
    PodGroupPostFilter,
}

/// Every extension point. The first twelve are in the order [`build_profile`] reads them by
/// index; the points of groups of pods follow, read and validated only.
const POINTS: [Point; 15] = [
    Point::PreEnqueue,
    Point::QueueSort,
    Point::PreFilter,
    Point::Filter,
    Point::PostFilter,
    Point::PreScore,
    Point::Score,
    Point::Reserve,
    Point::Permit,
    Point::PreBind,
    Point::Bind,
    Point::PostBind,
    Point::PlacementGenerate,
    Point::PlacementScore,
    Point::PodGroupPostFilter,
];

impl Point {
    fn key(self) -> &'static str {
        match self {
            Point::PreEnqueue => "preEnqueue",
            Point::QueueSort => "queueSort",
            Point::PreFilter => "preFilter",
            Point::Filter => "filter",
            Point::PostFilter => "postFilter",
            Point::PreScore => "preScore",
            Point::Score => "score",
            Point::Reserve => "reserve",
            Point::Permit => "permit",
            Point::PreBind => "preBind",
            Point::Bind => "bind",
            Point::PostBind => "postBind",
            Point::PlacementGenerate => "placementGenerate",
            Point::PlacementScore => "placementScore",
            Point::PodGroupPostFilter => "podGroupPostFilter",
        }
    }

    fn set(self, p: &Plugins) -> &PluginSet {
        match self {
            Point::PreEnqueue => &p.pre_enqueue,
            Point::QueueSort => &p.queue_sort,
            Point::PreFilter => &p.pre_filter,
            Point::Filter => &p.filter,
            Point::PostFilter => &p.post_filter,
            Point::PreScore => &p.pre_score,
            Point::Score => &p.score,
            Point::Reserve => &p.reserve,
            Point::Permit => &p.permit,
            Point::PreBind => &p.pre_bind,
            Point::Bind => &p.bind,
            Point::PostBind => &p.post_bind,
            Point::PlacementGenerate => &p.placement_generate,
            Point::PlacementScore => &p.placement_score,
            Point::PodGroupPostFilter => &p.pod_group_post_filter,
        }
    }

    fn implemented_by(self, p: &dyn Plugin) -> bool {
        match self {
            Point::PreEnqueue => p.as_pre_enqueue().is_some(),
            Point::QueueSort => p.as_queue_sort().is_some(),
            Point::PreFilter => p.as_pre_filter().is_some(),
            Point::Filter => p.as_filter().is_some(),
            Point::PostFilter => p.as_post_filter().is_some(),
            Point::PreScore => p.as_pre_score().is_some(),
            Point::Score => p.as_score().is_some(),
            Point::Reserve => p.as_reserve().is_some(),
            Point::Permit => p.as_permit().is_some(),
            Point::PreBind => p.as_pre_bind().is_some(),
            Point::Bind => p.as_bind().is_some(),
            Point::PostBind => p.as_post_bind().is_some(),
            // gantry places the pods of a group one by one (Coscheduling holds them at
            // Permit); it has no plugin for the Workload API's group cycle.
            Point::PlacementGenerate | Point::PlacementScore | Point::PodGroupPostFilter => false,
        }
    }
}

/// A plugin entry with where it came from, for error messages.
#[derive(Debug, Clone)]
struct Entry {
    name: String,
    weight: Option<i64>,
    field: String,
}

/// kube-scheduler's `mergePluginSet` for `multiPoint`: defaults not disabled keep their
/// order (replaced in place by a re-listed custom entry), then the other custom entries.
/// `disabled` only drops defaults: a plugin both enabled and disabled there is enabled, as
/// kube-scheduler has it.
fn merge_multi_point(custom: &PluginSet, base: &str, registry: &Registry) -> Vec<Entry> {
    let disabled: Vec<&str> = custom.disabled.iter().map(|p| p.name.as_str()).collect();
    let custom_index: HashMap<&str, usize> = custom
        .enabled
        .iter()
        .enumerate()
        .map(|(i, p)| (p.name.as_str(), i))
        .collect();
    let mut replaced = vec![false; custom.enabled.len()];
    let mut enabled = Vec::new();
    let custom_entry = |i: usize, p: &PluginRef| Entry {
        name: p.name.clone(),
        weight: p.weight,
        field: format!("{base}.multiPoint.enabled[{i}]"),
    };
    if !disabled.contains(&"*") {
        for (name, weight) in registry.defaults() {
            if disabled.contains(&name) {
                continue;
            }
            match custom_index.get(name) {
                Some(&i) => {
                    replaced[i] = true;
                    enabled.push(custom_entry(i, &custom.enabled[i]));
                }
                None => enabled.push(Entry {
                    name: name.to_string(),
                    weight,
                    field: format!("{base}.multiPoint (default {name})"),
                }),
            }
        }
    }
    for (i, p) in custom.enabled.iter().enumerate() {
        if !replaced[i] {
            enabled.push(custom_entry(i, p));
        }
    }
    enabled
}

/// A profile's plugin arguments by plugin name, each with its field: once each, as
/// kube-scheduler's `field.Duplicate` has it.
fn plugin_args<'c>(
    cfg: &'c ProfileConfig,
    base: &str,
) -> Result<HashMap<&'c str, (&'c Option<serde_json::Value>, String)>, ConfigError> {
    let mut args = HashMap::new();
    for (i, pc) in cfg.plugin_config.iter().enumerate() {
        let field = format!("{base}.pluginConfig[{i}]");
        if args.contains_key(pc.name.as_str()) {
            return Err(ConfigError::field(
                field,
                format!("Duplicate value: {}", echo(&pc.name)),
            ));
        }
        args.insert(pc.name.as_str(), (&pc.args, field));
    }
    Ok(args)
}

/// The weight of an enabled Score plugin entry at `field`: 1 when unset (or 0), at most
/// an int32 as in kube-scheduler, never negative.
fn entry_weight(weight: Option<i64>, field: &str) -> Result<i64, ConfigError> {
    let w = weight.unwrap_or(0);
    if w < 0 {
        return Err(ConfigError::field(
            format!("{field}.weight"),
            format!("must not be negative, got {w}"),
        ));
    }
    if w > MAX_WEIGHT {
        return Err(ConfigError::field(
            format!("{field}.weight"),
            format!("must be at most {MAX_WEIGHT} (an int32, as in kube-scheduler), got {w}"),
        ));
    }
    Ok(if w == 0 { 1 } else { w })
}

/// kube-scheduler's rule: the highest total score, every Score plugin's weight times the
/// highest node score, summed, must fit an int64. The cycle sums exactly these products.
fn check_score_total(
    score: &[(Arc<dyn Plugin>, i64)],
    plugins_field: &str,
) -> Result<(), ConfigError> {
    let max_total = score.iter().try_fold(0i64, |total, (_, w)| {
        w.checked_mul(MAX_NODE_SCORE)
            .and_then(|top| total.checked_add(top))
    });
    match max_total {
        Some(_) => Ok(()),
        None => Err(ConfigError::field(
            format!("{plugins_field}.score"),
            "total score of Score plugins could overflow",
        )),
    }
}

/// Builds one profile; `base` is its path (`profiles[0]`), `args` its decoded plugin configs.
pub(super) fn build_profile(
    cfg: &ProfileConfig,
    base: &str,
    registry: &Registry,
    percentage: Option<u32>,
) -> Result<Profile, ConfigError> {
    let plugins = cfg.plugins.clone().unwrap_or_default();
    let base_plugins = format!("{base}.plugins");

    let args = plugin_args(cfg, base)?;
    let mut instances: HashMap<String, Arc<dyn Plugin>> = HashMap::new();
    let mut instantiate = |name: &str, field: &str| -> Result<Arc<dyn Plugin>, ConfigError> {
        if let Some(p) = instances.get(name) {
            return Ok(p.clone());
        }
        let factory = registry
            .get(name)
            .ok_or_else(|| unknown_plugin(name, field))?;
        let (value, args_field) = match args.get(name) {
            Some((v, f)) => (v.as_ref(), format!("{f}.args")),
            None => (None, format!("{base}.pluginConfig[{name}].args")),
        };
        let plugin = factory(value).map_err(|e| args_error(&args_field, e))?;
        instances.insert(name.to_string(), plugin.clone());
        Ok(plugin)
    };
    // As in kube-scheduler, arguments of a kind it knows are decoded and validated whether or
    // not the plugin is enabled, and those of other names pass through unread. gantry knows
    // the registered plugins' (each is built from its arguments).
    for pc in &cfg.plugin_config {
        if registry.get(&pc.name).is_some() {
            instantiate(&pc.name, base)?;
        }
    }

    let multi = merge_multi_point(&plugins.multi_point, &base_plugins, registry);
    let mut multi_plugins = Vec::new();
    for e in &multi {
        multi_plugins.push((e, instantiate(&e.name, &e.field)?));
    }

    let mut resolved: Vec<Vec<(Arc<dyn Plugin>, i64)>> = Vec::new();
    for point in POINTS {
        let set = point.set(&plugins);
        let point_field = format!("{base_plugins}.{}", point.key());
        let mut explicit: Vec<(Entry, Arc<dyn Plugin>)> = Vec::new();
        for (i, p) in set.enabled.iter().enumerate() {
            let field = format!("{point_field}.enabled[{i}]");
            let plugin = instantiate(&p.name, &format!("{field}.name"))?;
            if !point.implemented_by(plugin.as_ref()) {
                return Err(ConfigError::field(
                    format!("{field}.name"),
                    format!(
                        "plugin {} does not extend the {} extension point",
                        echo(&p.name),
                        point.key()
                    ),
                ));
            }
            if explicit.iter().any(|(e, _)| e.name == p.name) {
                return Err(ConfigError::field(
                    format!("{field}.name"),
                    format!(
                        "plugin {} already registered as {}",
                        echo(&p.name),
                        point.key()
                    ),
                ));
            }
            explicit.push((
                Entry {
                    name: p.name.clone(),
                    weight: p.weight,
                    field,
                },
                plugin,
            ));
        }
        let disabled_here: Vec<&str> = set.disabled.iter().map(|d| d.name.as_str()).collect();
        let mut overrides: Vec<&str> = Vec::new();
        let mut from_multi: Vec<(&Entry, Arc<dyn Plugin>)> = Vec::new();
        if !disabled_here.contains(&"*") {
            for (e, plugin) in &multi_plugins {
                if !point.implemented_by(plugin.as_ref())
                    || disabled_here.contains(&e.name.as_str())
                {
                    continue;
                }
                if explicit.iter().any(|(x, _)| x.name == e.name) {
                    overrides.push(&e.name);
                    continue;
                }
                if from_multi.iter().any(|(x, _)| x.name == e.name) {
                    return Err(ConfigError::field(
                        e.field.clone(),
                        format!(
                            "plugin {} already registered as {}",
                            echo(&e.name),
                            point.key()
                        ),
                    ));
                }
                from_multi.push((e, plugin.clone()));
            }
        }
        // Order: explicit overrides of multiPoint plugins, then multiPoint, then the rest.
        // Each entry keeps its own weight: as in kube-scheduler, an explicit entry without
        // one weighs 1, it does not inherit the weight of the multiPoint entry it overrides.
        let mut list = Vec::new();
        for (e, p) in explicit
            .iter()
            .filter(|(e, _)| overrides.contains(&e.name.as_str()))
        {
            list.push((p.clone(), entry_weight(e.weight, &e.field)?));
        }
        for (e, p) in &from_multi {
            list.push((p.clone(), entry_weight(e.weight, &e.field)?));
        }
        for (e, p) in explicit
            .iter()
            .filter(|(e, _)| !overrides.contains(&e.name.as_str()))
        {
            list.push((p.clone(), entry_weight(e.weight, &e.field)?));
        }
        resolved.push(list);
    }
    check_score_total(&resolved[6], &base_plugins)?;
    assemble(cfg, &base_plugins, &resolved, percentage)
}

/// The profile of `cfg` from its plugins resolved at each extension point (in [`POINTS`]'
/// order): exactly one QueueSort plugin and at least one Bind plugin.
fn assemble(
    cfg: &ProfileConfig,
    base_plugins: &str,
    resolved: &[Vec<(Arc<dyn Plugin>, i64)>],
    percentage: Option<u32>,
) -> Result<Profile, ConfigError> {
    let take =
        |i: usize| -> Vec<Arc<dyn Plugin>> { resolved[i].iter().map(|(p, _)| p.clone()).collect() };
    let queue_sort = take(1);
    if queue_sort.len() != 1 {
        return Err(ConfigError::field(
            format!("{base_plugins}.queueSort"),
            format!(
                "exactly one queue sort plugin must be enabled, got {}",
                queue_sort.len()
            ),
        ));
    }
    let bind = take(10);
    if bind.is_empty() {
        return Err(ConfigError::field(
            format!("{base_plugins}.bind"),
            "at least one bind plugin is needed".to_string(),
        ));
    }
    Ok(Profile {
        scheduler_name: cfg
            .scheduler_name
            .clone()
            .unwrap_or_else(|| super::DEFAULT_SCHEDULER_NAME.to_string()),
        percentage_of_nodes_to_score: percentage,
        queue_sort: queue_sort[0].clone(),
        pre_enqueue: take(0),
        pre_filter: take(2),
        filter: take(3),
        post_filter: take(4),
        pre_score: take(5),
        score: resolved[6].clone(),
        reserve: take(7),
        permit: take(8),
        pre_bind: take(9),
        bind,
        post_bind: take(11),
        observer: Arc::new(crate::framework::Unobserved),
    })
}

/// A plugin's invalid arguments as a configuration error, under `args_field`.
fn args_error(args_field: &str, e: ArgsError) -> ConfigError {
    let field = if e.field.is_empty() {
        args_field.to_string()
    } else {
        format!("{args_field}.{}", e.field)
    };
    ConfigError::field(field, e.reason)
}

fn unknown_plugin(name: &str, field: &str) -> ConfigError {
    let reason = if UNSUPPORTED_KUBE_PLUGINS.contains(&name) {
        format!(
            "plugin {name:?} is a kube-scheduler plugin that gantry does not implement; disable it or remove it"
        )
    } else {
        format!("unknown plugin {}", echo(name))
    };
    ConfigError::field(field.to_string(), reason)
}
