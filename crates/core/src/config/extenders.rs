//! `extenders:` validated with kube-scheduler's rules (`validateExtenders`) and messages,
//! and resolved with its defaults.

use std::collections::BTreeSet;

use super::{ConfigError, parse_go_duration, types};
use crate::extender::{DEFAULT_HTTP_TIMEOUT, Extender, Extenders, ManagedResource, TlsSettings};
use crate::model::labels::validate_qualified_name;
use crate::model::resources::is_extended_resource;

/// The extenders of the file, in kube-scheduler's call order.
pub fn resolve(list: &[types::Extender]) -> Result<Extenders, ConfigError> {
    let mut managed = BTreeSet::new();
    let mut binders = 0;
    let mut resolved = Vec::with_capacity(list.len());
    for (i, e) in list.iter().enumerate() {
        let base = format!("extenders[{i}]");
        let url_prefix = e.url_prefix.clone().unwrap_or_default();
        check_url(&url_prefix).map_err(|m| ConfigError::field(format!("{base}.urlPrefix"), m))?;
        let verb = |v: &Option<String>| v.clone().filter(|v| !v.is_empty());
        let weight = e.weight.unwrap_or(0);
        let prioritize_verb = verb(&e.prioritize_verb);
        if prioritize_verb.is_some() && weight <= 0 {
            return Err(ConfigError::field(
                format!("{base}.weight"),
                format!("Invalid value: {weight}: must have a positive weight applied to it"),
            ));
        }
        let bind_verb = verb(&e.bind_verb);
        if bind_verb.is_some() {
            binders += 1;
        }
        let mut managed_resources = Vec::with_capacity(e.managed_resources.len());
        for (j, m) in e.managed_resources.iter().enumerate() {
            let field = format!("{base}.managedResources[{j}].name");
            let name = m.name.clone().unwrap_or_default();
            if let Err(msg) = validate_qualified_name(&name) {
                return Err(ConfigError::field(
                    field,
                    format!("Invalid value: {name:?}: {msg}"),
                ));
            }
            if !is_extended_resource(&name) {
                return Err(ConfigError::field(
                    field,
                    format!("Invalid value: {name:?}: is an invalid extended resource name"),
                ));
            }
            if !managed.insert(name.clone()) {
                return Err(ConfigError::field(
                    field,
                    format!("Invalid value: {name:?}: duplicate extender managed resource name"),
                ));
            }
            managed_resources.push(ManagedResource {
                name,
                ignored_by_scheduler: m.ignored_by_scheduler.unwrap_or(false),
            });
        }
        let http_timeout = match e.http_timeout.as_deref() {
            None => DEFAULT_HTTP_TIMEOUT,
            Some(text) => parse_go_duration(text)
                .map_err(|m| ConfigError::field(format!("{base}.httpTimeout"), m))?,
        };
        let tls = e.tls_config.clone().unwrap_or_default();
        let tls = TlsSettings {
            insecure: tls.insecure.unwrap_or(false),
            server_name: tls.server_name.filter(|s| !s.is_empty()),
            cert_file: tls.cert_file.filter(|s| !s.is_empty()),
            key_file: tls.key_file.filter(|s| !s.is_empty()),
            ca_file: tls.ca_file.filter(|s| !s.is_empty()),
            cert_data: tls.cert_data.map(|b| b.0).unwrap_or_default(),
            key_data: tls.key_data.map(|b| b.0).unwrap_or_default(),
            ca_data: tls.ca_data.map(|b| b.0).unwrap_or_default(),
        };
        let has_cert = tls.cert_file.is_some() || !tls.cert_data.is_empty();
        let has_key = tls.key_file.is_some() || !tls.key_data.is_empty();
        if has_cert != has_key {
            return Err(ConfigError::field(
                format!("{base}.tlsConfig"),
                "a client certificate and its key go together: give both or neither",
            ));
        }
        resolved.push(Extender {
            url_prefix,
            filter_verb: verb(&e.filter_verb),
            preempt_verb: verb(&e.preempt_verb),
            prioritize_verb,
            weight,
            bind_verb,
            enable_https: e.enable_https.unwrap_or(false),
            tls,
            // Zero means the default, as in kube-scheduler.
            http_timeout: if http_timeout.is_zero() {
                DEFAULT_HTTP_TIMEOUT
            } else {
                http_timeout
            },
            node_cache_capable: e.node_cache_capable.unwrap_or(false),
            managed_resources,
            ignorable: e.ignorable.unwrap_or(false),
        });
    }
    if binders > 1 {
        return Err(ConfigError::field(
            "extenders",
            format!(
                "Invalid value: \"found {binders} extenders\": only one extender can implement bind"
            ),
        ));
    }
    Ok(Extenders::new(resolved))
}

/// An extender's URL must be an absolute `http` or `https` URL: gantry could not call
/// anything else (kube-scheduler finds out at the first call).
fn check_url(url: &str) -> Result<(), String> {
    let parsed: http::Uri = url
        .parse()
        .map_err(|e| format!("not a URL: {} ({e})", crate::model::echo::echo(url)))?;
    match parsed.scheme_str() {
        Some("http" | "https") if parsed.host().is_some() => Ok(()),
        _ => Err(format!(
            "must be an http:// or https:// URL with a host, got {}",
            crate::model::echo::echo(url)
        )),
    }
}

/// `profiles` with the extenders' `ignoredByScheduler` resources set as NodeResourcesFit's
/// `ignoredResources` (kube-scheduler's rule: they replace what the file gives there).
pub fn with_ignored_resources(
    profiles: &[types::ProfileConfig],
    ignored: &[String],
) -> Vec<types::ProfileConfig> {
    let fit = crate::plugins::node_resources_fit::NAME;
    profiles
        .iter()
        .cloned()
        .map(|mut p| {
            let list = serde_json::Value::from(ignored.to_vec());
            match p.plugin_config.iter_mut().find(|c| c.name == fit) {
                Some(c) => match c.args.as_mut().and_then(|a| a.as_object_mut()) {
                    Some(args) => {
                        args.insert("ignoredResources".to_string(), list);
                    }
                    None => c.args = Some(serde_json::json!({ "ignoredResources": list })),
                },
                None => p.plugin_config.push(types::PluginConfig {
                    name: fit.to_string(),
                    args: Some(serde_json::json!({ "ignoredResources": list })),
                }),
            }
            p
        })
        .collect()
}

/// `profiles` where those that enable GpuShare have HAMi's GPU resources
/// (`nvidia.com/gpumem`, `nvidia.com/gpumem-percentage`, `nvidia.com/gpucores`,
/// `nvidia.com/priority`) added to
/// NodeResourcesFit's `ignoredResources`: no node offers them as resources, GpuShare
/// measures them against HAMi's devices, as kube-scheduler leaves them to HAMi's extender
/// (`ignoredByScheduler`).
pub fn leave_hami_resources_to_gpu_share(
    profiles: &[types::ProfileConfig],
) -> Vec<types::ProfileConfig> {
    use crate::model::hami;
    let hami_resources = [
        hami::MEMORY_RESOURCE,
        hami::MEMORY_PERCENTAGE_RESOURCE,
        hami::CORES_RESOURCE,
        hami::PRIORITY_RESOURCE,
    ];
    let fit = crate::plugins::node_resources_fit::NAME;
    profiles
        .iter()
        .cloned()
        .map(|mut p| {
            let enables_gpu_share = p.plugins.as_ref().is_some_and(|plugins| {
                [&plugins.multi_point, &plugins.filter].iter().any(|set| {
                    set.enabled
                        .iter()
                        .any(|r| r.name == crate::plugins::gpu_share::NAME)
                })
            });
            if !enables_gpu_share {
                return p;
            }
            let config = match p.plugin_config.iter().position(|c| c.name == fit) {
                Some(i) => &mut p.plugin_config[i],
                None => {
                    p.plugin_config.push(types::PluginConfig {
                        name: fit.to_string(),
                        args: None,
                    });
                    p.plugin_config.last_mut().expect("just pushed")
                }
            };
            let args = config.args.get_or_insert_with(|| serde_json::json!({}));
            if let Some(args) = args.as_object_mut() {
                let list = args
                    .entry("ignoredResources")
                    .or_insert_with(|| serde_json::Value::Array(Vec::new()));
                if let Some(list) = list.as_array_mut() {
                    for name in hami_resources {
                        if !list.iter().any(|v| v == name) {
                            list.push(serde_json::Value::from(name));
                        }
                    }
                }
            }
            p
        })
        .collect()
}
