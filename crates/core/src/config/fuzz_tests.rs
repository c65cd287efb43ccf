//! Properties of the configuration loader: whatever the text, `Config::parse` returns a
//! configuration or an error that names a field; it never panics. The text is arbitrary,
//! generated from the file's structure (plugin names, weights, durations, arguments of any
//! shape), or a valid configuration of the scenarios mutated.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::{Config, ConfigError, UNSUPPORTED_KUBE_PLUGINS, types};
use crate::framework::Registry;
use gantry_test_support::fuzz;

/// The top-level fields of the file, and `config` (the file as a whole).
const TOP_LEVEL: &[&str] = &[
    "config",
    "apiVersion",
    "kind",
    "parallelism",
    "leaderElection",
    "clientConnection",
    "enableProfiling",
    "enableContentionProfiling",
    "percentageOfNodesToScore",
    "podInitialBackoffSeconds",
    "podMaxBackoffSeconds",
    "profiles",
    "extenders",
    "delayCacheUntilActive",
];

/// The extension points of `plugins`.
const EXTENSION_POINTS: &[&str] = &[
    "preEnqueue",
    "queueSort",
    "preFilter",
    "filter",
    "postFilter",
    "preScore",
    "score",
    "reserve",
    "permit",
    "preBind",
    "bind",
    "postBind",
    "placementGenerate",
    "placementScore",
    "podGroupPostFilter",
    "multiPoint",
];

/// Checks one outcome of `Config::parse`: a configuration, or an error naming a field:
/// one of the file's, or the unknown one, when `structured`.
fn named(outcome: Result<Config, ConfigError>, structured: bool) -> Result<(), TestCaseError> {
    match outcome {
        Ok(config) => prop_assert!(!config.profiles.is_empty()),
        Err(ConfigError::Field { field, reason }) => {
            prop_assert!(
                !field.is_empty() && !reason.is_empty(),
                "{field:?}: {reason:?}"
            );
            let first = field.split(['.', '[']).next().unwrap_or_default();
            // An unknown field is named by its own name.
            prop_assert!(
                !structured || TOP_LEVEL.contains(&first) || reason.starts_with("unknown field"),
                "error outside the file's fields: {field}: {reason}"
            );
        }
        // Text nested too deep is refused before it is parsed, with the line it reached.
        Err(ConfigError::TooDeep(deep)) => prop_assert!(deep.to_string().contains("line")),
        // Only files are read.
        Err(e @ (ConfigError::Read { .. } | ConfigError::TooLarge { .. })) => {
            prop_assert!(false, "{e}")
        }
    }
    Ok(())
}

/// An object of the fields that are present.
fn object(fields: Vec<(&str, Option<Value>)>) -> Value {
    Value::Object(
        fields
            .into_iter()
            .filter_map(|(k, v)| Some((k.to_string(), v?)))
            .collect::<Map<_, _>>(),
    )
}

fn plugin_name(registry: &Registry) -> impl Strategy<Value = String> + use<> {
    let mut known: Vec<String> = registry.names().map(str::to_string).collect();
    known.extend(UNSUPPORTED_KUBE_PLUGINS.iter().map(|s| s.to_string()));
    known.push("*".to_string());
    prop_oneof![4 => prop::sample::select(known), 1 => fuzz::text()]
}

fn weight() -> impl Strategy<Value = Value> {
    prop_oneof![
        (-2i64..=10).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        fuzz::any_json(),
    ]
}

fn plugin_set(registry: &Registry) -> impl Strategy<Value = Value> + use<> {
    let entry = || {
        (plugin_name(registry), prop::option::of(weight())).prop_map(|(name, weight)| {
            object(vec![("name", Some(json!(name))), ("weight", weight)])
        })
    };
    (
        prop::option::of(prop::collection::vec(entry(), 0..4)),
        prop::option::of(prop::collection::vec(entry(), 0..3)),
    )
        .prop_map(|(enabled, disabled)| {
            object(vec![
                ("enabled", enabled.map(Value::Array)),
                ("disabled", disabled.map(Value::Array)),
            ])
        })
}

fn plugins(registry: &Registry) -> impl Strategy<Value = Value> + use<> {
    prop::collection::vec(
        (prop::sample::select(EXTENSION_POINTS), plugin_set(registry)),
        0..4,
    )
    .prop_map(|sets| {
        Value::Object(
            sets.into_iter()
                .map(|(point, set)| (point.to_string(), set))
                .collect(),
        )
    })
}

/// The `args` of the scenarios' `pluginConfig` entries, by plugin name.
fn seed_args() -> Vec<(String, Value)> {
    fuzz::scenarios()
        .iter()
        .filter_map(|s| s.pointer("/config/profiles")?.as_array().cloned())
        .flatten()
        .filter_map(|p| p.get("pluginConfig")?.as_array().cloned())
        .flatten()
        .filter_map(|c| Some((c.get("name")?.as_str()?.to_string(), c.get("args")?.clone())))
        .collect()
}

fn plugin_config(registry: &Registry) -> impl Strategy<Value = Value> + use<> {
    let seeds = seed_args();
    let args: Vec<Value> = seeds.iter().map(|(_, a)| a.clone()).collect();
    let seeded = (any::<prop::sample::Index>(), fuzz::mutated(args.clone()))
        .prop_map(move |(i, args)| json!({"name": i.get(&seeds).0, "args": args}));
    let anything = (plugin_name(registry), prop::option::of(fuzz::any_json()))
        .prop_map(|(name, args)| object(vec![("name", Some(json!(name))), ("args", args)]));
    prop_oneof![seeded, anything]
}

fn profile(registry: &Registry) -> impl Strategy<Value = Value> + use<> {
    (
        prop::option::of(prop_oneof![
            Just(json!("default-scheduler")),
            Just(json!("gantry")),
            fuzz::text().prop_map(Value::String),
        ]),
        prop::option::of(weight()),
        prop::option::of(plugins(registry)),
        prop::option::of(prop::collection::vec(plugin_config(registry), 0..4)),
    )
        .prop_map(|(name, percentage, plugins, config)| {
            object(vec![
                ("schedulerName", name),
                ("percentageOfNodesToScore", percentage),
                ("plugins", plugins),
                ("pluginConfig", config.map(Value::Array)),
            ])
        })
}

fn duration() -> impl Strategy<Value = Value> {
    prop_oneof![
        "[0-9]{1,3}(ms|s|m|h)".prop_map(Value::String),
        fuzz::text().prop_map(Value::String),
        fuzz::any_json(),
    ]
}

fn leader_election() -> impl Strategy<Value = Value> {
    (
        prop::option::of(any::<bool>().prop_map(Value::Bool)),
        prop::option::of(duration()),
        prop::option::of(duration()),
        prop::option::of(duration()),
        prop::option::of(prop_oneof![Just(json!("leases")), fuzz::any_json()]),
        prop::option::of(fuzz::text().prop_map(Value::String)),
    )
        .prop_map(|(elect, lease, renew, retry, lock, name)| {
            object(vec![
                ("leaderElect", elect),
                ("leaseDuration", lease),
                ("renewDeadline", renew),
                ("retryPeriod", retry),
                ("resourceLock", lock),
                ("resourceName", name.clone()),
                ("resourceNamespace", name),
            ])
        })
}

fn client_connection() -> impl Strategy<Value = Value> {
    (
        prop::option::of(weight()),
        prop::option::of(weight()),
        prop::option::of(prop_oneof![
            Just(json!("application/json")),
            Just(json!("application/vnd.kubernetes.protobuf")),
            fuzz::any_json(),
        ]),
    )
        .prop_map(|(qps, burst, content_type)| {
            object(vec![
                ("qps", qps),
                ("burst", burst),
                ("contentType", content_type),
            ])
        })
}

/// A configuration built from the file's structure, every field optional and every value
/// either plausible or anything.
fn structured(registry: &Registry) -> impl Strategy<Value = Value> + use<> {
    (
        prop_oneof![9 => Just(Some(json!(types::API_VERSION))), 1 => prop::option::of(fuzz::any_json())],
        prop_oneof![9 => Just(Some(json!(types::KIND))), 1 => prop::option::of(fuzz::any_json())],
        (
            prop::option::of(weight()),
            prop::option::of(weight()),
            prop::option::of(weight()),
            prop::option::of(weight()),
        ),
        prop::option::of(leader_election()),
        prop::option::of(client_connection()),
        prop::option::of(prop::collection::vec(profile(registry), 0..4)),
        prop::option::of(prop::collection::vec(fuzz::any_json(), 0..2)),
    )
        .prop_map(
            |(api_version, kind, numbers, leader, client, profiles, extenders)| {
                let (parallelism, percentage, initial, max) = numbers;
                object(vec![
                    ("apiVersion", api_version),
                    ("kind", kind),
                    ("parallelism", parallelism),
                    ("percentageOfNodesToScore", percentage),
                    ("podInitialBackoffSeconds", initial),
                    ("podMaxBackoffSeconds", max),
                    ("leaderElection", leader),
                    ("clientConnection", client),
                    ("profiles", profiles.map(Value::Array)),
                    ("extenders", extenders.map(Value::Array)),
                ])
            },
        )
}

/// The configurations of the scenarios and of `deploy/`.
fn seed_configs() -> Vec<Value> {
    let mut seeds: Vec<Value> = fuzz::scenarios()
        .iter()
        .filter_map(|s| s.get("config").cloned())
        .collect();
    let deploy =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/20-configmap.yaml");
    let map: Value = serde_yaml::from_str(&std::fs::read_to_string(deploy).expect("the ConfigMap"))
        .expect("the ConfigMap is YAML");
    let text = map
        .pointer("/data/config.yaml")
        .and_then(Value::as_str)
        .expect("the ConfigMap's configuration");
    seeds.push(serde_yaml::from_str(text).expect("the configuration is YAML"));
    seeds
}

/// The document as YAML or as JSON (both are read).
fn written(doc: &Value, as_json: bool) -> String {
    if as_json {
        doc.to_string()
    } else {
        serde_yaml::to_string(doc).unwrap_or_default()
    }
}

#[test]
fn fuzz_config_parse_any_text() {
    let registry = crate::plugins::registry();
    proptest!(|(text in prop_oneof![any::<String>(), "[ -~\n]{0,200}"])| {
        named(Config::parse(&text, &registry), false)?;
    });
}

#[test]
fn fuzz_config_parse_structured() {
    let registry = crate::plugins::registry();
    proptest!(|(doc in structured(&registry), as_json in any::<bool>())| {
        named(Config::parse(&written(&doc, as_json), &registry), true)?;
    });
}

#[test]
fn fuzz_config_parse_mutated() {
    let registry = crate::plugins::registry();
    let mut seeds = seed_configs();
    // The scenarios of configuration errors are left out: mutations start from valid files.
    seeds.retain(|seed| Config::parse(&written(seed, false), &registry).is_ok());
    assert!(seeds.len() > 10, "{} valid seeds", seeds.len());
    proptest!(|(doc in fuzz::mutated(seeds.clone()), as_json in any::<bool>())| {
        named(Config::parse(&written(&doc, as_json), &registry), true)?;
    });
}
