//! The plugin registry: names to factories, and the decoding of plugin arguments.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use super::plugin::Plugin;

/// Invalid plugin arguments; `field` is the path inside `args`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct ArgsError {
    /// Path of the offending field, relative to the plugin's `args`.
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

impl ArgsError {
    /// An error at `field`.
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        ArgsError {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// A plugin's arguments, as they appear under `pluginConfig[].args`.
pub trait PluginArgs: DeserializeOwned + serde::Serialize + Default {
    /// The `kind` Kubernetes gives these arguments (`NodeResourcesFitArgs`).
    const KIND: &'static str;

    /// Checks the values; the error names the field.
    fn validate(&self) -> Result<(), ArgsError>;
}

/// Decodes and validates a plugin's arguments; no arguments means the defaults. Unknown
/// fields are rejected (the args types deny them), and `apiVersion`/`kind`, which
/// Kubernetes allows in args, are checked and removed first.
pub fn decode_args<T: PluginArgs>(value: Option<&serde_json::Value>) -> Result<T, ArgsError> {
    let Some(value) = value else {
        let args = T::default();
        args.validate()?;
        return Ok(args);
    };
    let mut value = value.clone();
    if let Some(obj) = value.as_object_mut() {
        if let Some(kind) = obj.remove("kind")
            && kind.as_str() != Some(T::KIND)
        {
            return Err(ArgsError::new(
                "kind",
                format!("expected {}, got {kind}", T::KIND),
            ));
        }
        obj.remove("apiVersion");
    } else if !value.is_null() {
        return Err(ArgsError::new("", "must be a mapping"));
    }
    if value.is_null() {
        value = serde_json::Value::Object(Default::default());
    }
    let args: T = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        ArgsError::new(
            if path == "." { String::new() } else { path },
            e.inner().to_string(),
        )
    })?;
    args.validate()?;
    Ok(args)
}

/// A plugin's arguments with every default filled in, as `kind`/`apiVersion`-tagged
/// `pluginConfig[].args` (what `--write-config-to` writes, as kube-scheduler does).
pub fn resolved_args<T: PluginArgs>(
    value: Option<&serde_json::Value>,
) -> Result<serde_json::Value, ArgsError> {
    let args: T = decode_args(value)?;
    let mut out = serde_json::to_value(&args).map_err(|e| ArgsError::new("", e.to_string()))?;
    drop_nulls(&mut out);
    if let Some(obj) = out.as_object_mut() {
        obj.insert("kind".to_string(), T::KIND.into());
        obj.insert("apiVersion".to_string(), ARGS_API_VERSION.into());
    }
    Ok(out)
}

/// Removes the fields that are unset, as Go's `omitempty` leaves them out.
fn drop_nulls(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(drop_nulls);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// The `apiVersion` of the arguments gantry writes.
pub const ARGS_API_VERSION: &str = "kubescheduler.config.k8s.io/v1";

/// A plugin's arguments resolved with their defaults ([`resolved_args`] of its type).
pub type ArgsResolver = fn(Option<&serde_json::Value>) -> Result<serde_json::Value, ArgsError>;

/// Builds a plugin from its (optional) arguments.
pub type Factory = fn(Option<&serde_json::Value>) -> Result<Arc<dyn Plugin>, ArgsError>;

/// Where a plugin sits in kube-scheduler's default profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DefaultPlace {
    /// Its position among the default plugins: kube-scheduler's order, lowest first (in
    /// steps of ten, leaving room for plugins between).
    pub order: u32,
    /// Its default weight, for a Score plugin.
    pub weight: Option<i64>,
}

/// What a plugin's module tells the registry about it.
#[derive(Debug, Clone, Copy)]
pub struct PluginSpec {
    /// The name configuration files use.
    pub name: &'static str,
    /// How to build it.
    pub factory: Factory,
    /// Its place in the default profile; none for a plugin a profile must enable.
    pub default: Option<DefaultPlace>,
    /// Its arguments with their defaults, for a plugin that takes arguments.
    pub args: Option<ArgsResolver>,
}

/// Known plugins by name.
#[derive(Clone, Default)]
pub struct Registry {
    plugins: BTreeMap<&'static str, PluginSpec>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a plugin; a later registration under the same name replaces the earlier.
    pub fn register(&mut self, spec: PluginSpec) {
        self.plugins.insert(spec.name, spec);
    }

    /// The factory for `name`.
    pub fn get(&self, name: &str) -> Option<Factory> {
        self.plugins.get(name).map(|s| s.factory)
    }

    /// How `name`'s arguments get their defaults, if it takes arguments.
    pub fn args(&self, name: &str) -> Option<ArgsResolver> {
        self.plugins.get(name).and_then(|s| s.args)
    }

    /// Registered names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.plugins.keys().copied()
    }

    /// The plugins of the default profile, in kube-scheduler's order, with their default
    /// weights.
    pub fn defaults(&self) -> Vec<(&'static str, Option<i64>)> {
        let mut defaults: Vec<(DefaultPlace, &'static str)> = self
            .plugins
            .values()
            .filter_map(|s| Some((s.default?, s.name)))
            .collect();
        defaults.sort_by_key(|(place, name)| (place.order, *name));
        defaults
            .into_iter()
            .map(|(place, name)| (name, place.weight))
            .collect()
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.plugins.keys()).finish()
    }
}
