//! `--write-config-to`: the effective configuration as a KubeSchedulerConfiguration (v1),
//! every field written with the value gantry runs with, as kube-scheduler writes its own.
//! Each profile's plugins are written per extension point exactly as resolved (with
//! `multiPoint` disabled), so that reading the file back gives the very same profiles.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use gantry_core::config::types::{self, KubeSchedulerConfiguration};
use gantry_core::config::{self, Config, ContentType, GoDuration};
use gantry_core::extender::Extender;
use gantry_core::framework::{Plugin, Profile, Registry};
use k8s_openapi::ByteString;
use serde_json::{Value, json};

/// Writes the effective configuration to `target` (`-`: standard output).
pub fn write(
    target: &Path,
    file: &KubeSchedulerConfiguration,
    config: &Config,
) -> anyhow::Result<()> {
    let text = serde_yaml::to_string(&effective(file, config))
        .context("cannot encode the configuration")?;
    if target == Path::new("-") {
        // A closed standard output is the reader's choice, not an error worth a panic.
        let _ = std::io::stdout().write_all(text.as_bytes());
        return Ok(());
    }
    std::fs::write(target, text)
        .with_context(|| format!("--write-config-to {}", target.display()))?;
    tracing::info!(file = %target.display(), "wrote the configuration");
    Ok(())
}

/// The configuration as kube-scheduler's v1 fields.
pub fn effective(file: &KubeSchedulerConfiguration, config: &Config) -> Value {
    let le = &config.leader_election;
    let cc = &config.client_connection;
    let given_cc = file.client_connection.clone().unwrap_or_default();
    let given_profiles = &file.profiles;
    let registry = gantry_core::plugins::registry();
    json!({
        "apiVersion": types::API_VERSION,
        "kind": types::KIND,
        "parallelism": config.parallelism,
        "percentageOfNodesToScore": config.percentage_of_nodes_to_score,
        "podInitialBackoffSeconds": config.pod_initial_backoff.as_secs(),
        "podMaxBackoffSeconds": config.pod_max_backoff.as_secs(),
        "enableProfiling": file.enable_profiling.unwrap_or(config::DEFAULT_PROFILING),
        "enableContentionProfiling":
            file.enable_contention_profiling.unwrap_or(config::DEFAULT_PROFILING),
        "delayCacheUntilActive": file.delay_cache_until_active.unwrap_or(false),
        "leaderElection": {
            "leaderElect": le.enabled,
            "leaseDuration": GoDuration(le.lease_duration).to_string(),
            "renewDeadline": GoDuration(le.renew_deadline).to_string(),
            "retryPeriod": GoDuration(le.retry_period).to_string(),
            "resourceLock": config::DEFAULT_RESOURCE_LOCK,
            "resourceName": le.resource_name,
            "resourceNamespace": le.resource_namespace,
        },
        "clientConnection": {
            "kubeconfig": cc.kubeconfig.clone().unwrap_or_default(),
            "acceptContentTypes": given_cc.accept_content_types.unwrap_or_default(),
            "contentType": match cc.content_type {
                ContentType::Protobuf => config::DEFAULT_CONTENT_TYPE,
                ContentType::Json => "application/json",
            },
            "qps": cc.qps,
            "burst": cc.burst,
        },
        "extenders": config.extenders.all().iter().map(extender).collect::<Vec<_>>(),
        "profiles": config.profiles.iter().enumerate().map(|(i, p)| {
            profile(p, given_profiles.get(i), &registry)
        }).collect::<Vec<_>>(),
    })
}

/// One extender as resolved, in call order, every default written (reading the list back
/// gives the same order: the ignorable ones are already last).
fn extender(e: &Extender) -> Value {
    let tls = &e.tls;
    let data = |bytes: &[u8]| {
        (!bytes.is_empty()).then(|| serde_json::to_value(ByteString(bytes.to_vec())).ok())
    };
    let mut tls_config = json!({
        "insecure": tls.insecure,
        "serverName": tls.server_name.clone().unwrap_or_default(),
        "certFile": tls.cert_file.clone().unwrap_or_default(),
        "keyFile": tls.key_file.clone().unwrap_or_default(),
        "caFile": tls.ca_file.clone().unwrap_or_default(),
    });
    if let Some(map) = tls_config.as_object_mut() {
        for (field, bytes) in [
            ("certData", &tls.cert_data),
            ("keyData", &tls.key_data),
            ("caData", &tls.ca_data),
        ] {
            if let Some(Some(value)) = data(bytes) {
                map.insert(field.to_string(), value);
            }
        }
    }
    json!({
        "urlPrefix": e.url_prefix,
        "filterVerb": e.filter_verb.clone().unwrap_or_default(),
        "preemptVerb": e.preempt_verb.clone().unwrap_or_default(),
        "prioritizeVerb": e.prioritize_verb.clone().unwrap_or_default(),
        "weight": e.weight,
        "bindVerb": e.bind_verb.clone().unwrap_or_default(),
        "enableHTTPS": e.enable_https,
        "tlsConfig": tls_config,
        "httpTimeout": GoDuration(e.http_timeout).to_string(),
        "nodeCacheCapable": e.node_cache_capable,
        "managedResources": e.managed_resources.iter().map(|m| json!({
            "name": m.name,
            "ignoredByScheduler": m.ignored_by_scheduler,
        })).collect::<Vec<_>>(),
        "ignorable": e.ignorable,
    })
}

fn names(plugins: &[Arc<dyn Plugin>]) -> Value {
    json!({
        "enabled": plugins.iter().map(|p| json!({"name": p.name()})).collect::<Vec<_>>()
    })
}

/// One profile: its plugins per extension point, as resolved, and the arguments of every
/// plugin that takes some, with their defaults filled in (those the file gave first, in its
/// order, then the profile's other plugins in the order they run).
fn profile(p: &Profile, given: Option<&types::ProfileConfig>, registry: &Registry) -> Value {
    let given_args: Vec<(&str, Option<&Value>)> = given
        .map(|g| {
            g.plugin_config
                .iter()
                .map(|pc| (pc.name.as_str(), pc.args.as_ref()))
                .collect()
        })
        .unwrap_or_default();
    let mut configured: Vec<&str> = given_args.iter().map(|(n, _)| *n).collect();
    for plugin in p.plugins() {
        if !configured.contains(&plugin.name()) {
            configured.push(plugin.name());
        }
    }
    let plugin_config: Vec<Value> = configured
        .into_iter()
        .filter_map(|name| {
            let given = given_args
                .iter()
                .find(|(n, _)| *n == name)
                .and_then(|(_, a)| *a);
            let args = match registry.args(name) {
                Some(resolve) => resolve(given).ok()?,
                None => given?.clone(),
            };
            Some(json!({"name": name, "args": args}))
        })
        .collect();
    let mut out = json!({
        "schedulerName": p.scheduler_name,
        "plugins": {
            "multiPoint": {"disabled": [{"name": "*"}]},
            "preEnqueue": names(&p.pre_enqueue),
            "queueSort": names(std::slice::from_ref(&p.queue_sort)),
            "preFilter": names(&p.pre_filter),
            "filter": names(&p.filter),
            "postFilter": names(&p.post_filter),
            "preScore": names(&p.pre_score),
            "score": {
                "enabled": p.score.iter().map(|(plugin, weight)| {
                    json!({"name": plugin.name(), "weight": weight})
                }).collect::<Vec<_>>()
            },
            "reserve": names(&p.reserve),
            "permit": names(&p.permit),
            "preBind": names(&p.pre_bind),
            "bind": names(&p.bind),
            "postBind": names(&p.post_bind),
        },
        "pluginConfig": plugin_config,
    });
    if let (Some(pct), Some(map)) = (p.percentage_of_nodes_to_score, out.as_object_mut()) {
        map.insert("percentageOfNodesToScore".to_string(), json!(pct));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a profile is made of, by name: to compare two resolutions.
    fn shape(config: &Config) -> Vec<String> {
        config.profiles.iter().map(|p| format!("{p:?}")).collect()
    }

    fn round_trip(file: &KubeSchedulerConfiguration) {
        let registry = gantry_core::plugins::registry();
        let config = Config::from_file_config(file, &registry).unwrap();
        let text = serde_yaml::to_string(&effective(file, &config)).unwrap();
        let again = Config::parse(&text, &registry).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(shape(&again), shape(&config), "{text}");
        assert_eq!(again.leader_election, config.leader_election);
        assert_eq!(again.client_connection, config.client_connection);
        assert_eq!(
            (
                again.parallelism,
                again.pod_initial_backoff,
                again.pod_max_backoff
            ),
            (
                config.parallelism,
                config.pod_initial_backoff,
                config.pod_max_backoff
            )
        );
        // Written again, the same text: nothing is lost or added on the way.
        let file_again = config::read_configuration(&text).unwrap();
        assert_eq!(
            serde_yaml::to_string(&effective(&file_again, &again)).unwrap(),
            text
        );
    }

    #[test]
    fn the_defaults_read_back_as_themselves() {
        round_trip(&KubeSchedulerConfiguration::default());
    }

    #[test]
    fn kube_schedulers_own_defaults_read_back_as_themselves() {
        let text =
            include_str!("../../../crates/core/src/config/testdata/kube_scheduler_defaults.yaml");
        round_trip(&config::read_configuration(text).unwrap());
    }

    #[test]
    fn hamis_extender_reads_back_as_itself() {
        let text =
            include_str!("../../../crates/core/src/config/testdata/hami_scheduler_config.yaml");
        let file = config::read_configuration(text).unwrap();
        round_trip(&file);
        let registry = gantry_core::plugins::registry();
        let config = Config::from_file_config(&file, &registry).unwrap();
        let written = serde_yaml::to_string(&effective(&file, &config)).unwrap();
        let again = Config::parse(&written, &registry).unwrap();
        assert_eq!(again.extenders.all(), config.extenders.all(), "{written}");
        assert!(written.contains("httpTimeout: "), "{written}");
    }

    #[test]
    fn every_default_is_written() {
        let registry = gantry_core::plugins::registry();
        let file = KubeSchedulerConfiguration::default();
        let config = Config::from_file_config(&file, &registry).unwrap();
        let text = serde_yaml::to_string(&effective(&file, &config)).unwrap();
        for line in [
            "leaseDuration: 15s",
            "resourceName: gantry",
            "qps: 5000.0",
            "contentType: application/vnd.kubernetes.protobuf",
            "parallelism: 16",
            "podMaxBackoffSeconds: 10",
            "schedulerName: default-scheduler",
            "- name: PrioritySort",
            "kind: DefaultPreemptionArgs",
            "minCandidateNodesPercentage: 10",
            "minCandidateNodesAbsolute: 100",
            "hardPodAffinityWeight: 1",
            "bindTimeoutSeconds: 600",
            "defaultingType: System",
            "type: LeastAllocated",
        ] {
            assert!(text.contains(line), "{line}: {text}");
        }
    }
}
