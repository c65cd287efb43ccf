use super::*;
use crate::plugins::registry;

fn parse(yaml: &str) -> Result<Config, ConfigError> {
    Config::parse(yaml, &registry())
}

fn err(yaml: &str) -> String {
    parse(yaml)
        .expect_err("config should be rejected")
        .to_string()
}

fn names(v: &[std::sync::Arc<dyn crate::framework::Plugin>]) -> Vec<&'static str> {
    v.iter().map(|p| p.name()).collect()
}

const HEADER: &str =
    "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n";

#[test]
fn defaults_match_kube_scheduler() {
    let c = Config::default_with(&registry()).unwrap();
    assert_eq!(c.parallelism, 16);
    // gantry's own default: every node (kube-scheduler's adaptive share with an explicit 0).
    assert_eq!(c.percentage_of_nodes_to_score, 100);
    assert_eq!(c.pod_initial_backoff, Duration::from_secs(1));
    assert_eq!(c.pod_max_backoff, Duration::from_secs(10));
    assert_eq!(c.leader_election.lease_duration, Duration::from_secs(15));
    assert_eq!(c.leader_election.renew_deadline, Duration::from_secs(10));
    assert_eq!(c.leader_election.retry_period, Duration::from_secs(2));
    let p = &c.profiles[0];
    assert_eq!(p.scheduler_name, "default-scheduler");
    assert_eq!(p.queue_sort.name(), "PrioritySort");
    assert_eq!(names(&p.pre_enqueue), ["SchedulingGates"]);
    assert_eq!(
        names(&p.filter),
        [
            "NodeName",
            "NodeUnschedulable",
            "TaintToleration",
            "NodeAffinity",
            "NodePorts",
            "NodeResourcesFit",
            "VolumeRestrictions",
            "NodeVolumeLimits",
            "VolumeBinding",
            "VolumeZone",
            "PodTopologySpread",
            "InterPodAffinity",
            "DynamicResources",
            "NodeDeclaredFeatures"
        ]
    );
    assert_eq!(
        names(&p.pre_filter),
        [
            "NodeAffinity",
            "NodePorts",
            "NodeResourcesFit",
            "VolumeRestrictions",
            "NodeVolumeLimits",
            "VolumeBinding",
            "VolumeZone",
            "PodTopologySpread",
            "InterPodAffinity",
            "DynamicResources",
            "NodeDeclaredFeatures"
        ]
    );
    let weights: Vec<(&str, i64)> = p.score.iter().map(|(p, w)| (p.name(), *w)).collect();
    assert_eq!(
        weights,
        [
            ("TaintToleration", 3),
            ("NodeAffinity", 2),
            ("NodeResourcesFit", 1),
            ("VolumeBinding", 1),
            ("PodTopologySpread", 2),
            ("InterPodAffinity", 2),
            ("NodeResourcesBalancedAllocation", 1),
            ("ImageLocality", 1)
        ]
    );
    assert_eq!(names(&p.bind), ["DefaultBinder"]);
}

#[test]
fn an_explicit_zero_keeps_kube_schedulers_adaptive_share() {
    let c = parse(&format!("{HEADER}percentageOfNodesToScore: 0\n")).unwrap();
    assert_eq!(c.percentage_of_nodes_to_score, 0);
}

#[test]
fn several_profiles_with_overrides() {
    let c = parse(&format!(
        "{HEADER}percentageOfNodesToScore: 50
parallelism: 4
podInitialBackoffSeconds: 2
podMaxBackoffSeconds: 20
profiles:
- schedulerName: default-scheduler
- schedulerName: packer
  percentageOfNodesToScore: 100
  plugins:
    score:
      enabled:
      - name: NodeResourcesFit
        weight: 5
      disabled:
      - name: NodeResourcesBalancedAllocation
      - name: ImageLocality
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
        resources: [{{name: cpu, weight: 1}}, {{name: memory, weight: 1}}]
"
    ))
    .unwrap();
    assert_eq!(c.parallelism, 4);
    assert_eq!(c.percentage_of_nodes_to_score, 50);
    assert_eq!(c.pod_max_backoff, Duration::from_secs(20));
    let packer = c.profile("packer").unwrap();
    assert_eq!(packer.percentage_of_nodes_to_score, Some(100));
    let weights: Vec<(&str, i64)> = packer.score.iter().map(|(p, w)| (p.name(), *w)).collect();
    assert_eq!(
        weights,
        [
            ("NodeResourcesFit", 5),
            ("TaintToleration", 3),
            ("NodeAffinity", 2),
            ("VolumeBinding", 1),
            ("PodTopologySpread", 2),
            ("InterPodAffinity", 2)
        ],
        "an explicit entry overrides the multiPoint one and comes first"
    );
    assert_eq!(c.profile("default-scheduler").unwrap().score.len(), 8);
}

#[test]
fn explicit_score_entry_without_weight_weighs_one() {
    let c = parse(&format!(
        "{HEADER}profiles:
- plugins:
    score:
      enabled: [{{name: TaintToleration}}, {{name: NodeAffinity, weight: 4}}]
    multiPoint:
      enabled: [{{name: ImageLocality, weight: 6}}]
"
    ))
    .unwrap();
    let weights: Vec<(&str, i64)> = c.profiles[0]
        .score
        .iter()
        .map(|(p, w)| (p.name(), *w))
        .collect();
    assert_eq!(
        weights,
        [
            ("TaintToleration", 1),
            ("NodeAffinity", 4),
            ("NodeResourcesFit", 1),
            ("VolumeBinding", 1),
            ("PodTopologySpread", 2),
            ("InterPodAffinity", 2),
            ("NodeResourcesBalancedAllocation", 1),
            ("ImageLocality", 6)
        ],
        "an explicit Score entry keeps its own weight (none means 1), never the multiPoint one"
    );
}

#[test]
fn multi_point_disable_all_and_enable_some() {
    let c = parse(&format!(
        "{HEADER}profiles:
- schedulerName: minimal
  plugins:
    multiPoint:
      enabled: [{{name: PrioritySort}}, {{name: NodeResourcesFit, weight: 3}}, {{name: DefaultBinder}}]
      disabled: [{{name: '*'}}]
"
    ))
    .unwrap();
    let p = &c.profiles[0];
    assert_eq!(names(&p.filter), ["NodeResourcesFit"]);
    assert_eq!(p.score.len(), 1);
    assert_eq!(p.score[0].1, 3);
    assert!(p.pre_enqueue.is_empty());
}

#[test]
fn disabling_a_kube_plugin_gantry_lacks_is_fine() {
    parse(&format!(
        "{HEADER}profiles:
- plugins:
    multiPoint:
      disabled: [{{name: VolumeBinding}}, {{name: DefaultPreemption}}]
"
    ))
    .unwrap();
}

#[test]
fn errors_name_the_field() {
    assert_eq!(
        err(&format!("{HEADER}percentageOfNodesToScroe: 5\n")),
        "percentageOfNodesToScroe: unknown field `percentageOfNodesToScroe`, expected one of `apiVersion`, `kind`, `parallelism`, `leaderElection`, `clientConnection`, `enableProfiling`, `enableContentionProfiling`, `percentageOfNodesToScore`, `podInitialBackoffSeconds`, `podMaxBackoffSeconds`, `profiles`, `extenders`, `delayCacheUntilActive` at line 3 column 1"
    );
    assert_eq!(
        err(&format!(
            "{HEADER}profiles:\n- plugins:\n    score:\n      enabled:\n      - name: Nope\n"
        )),
        "profiles[0].plugins.score.enabled[0].name: unknown plugin \"Nope\""
    );
    assert_eq!(
        err(&format!(
            "{HEADER}profiles:\n- plugins:\n    filter:\n      enabled:\n      - name: EBSLimits\n"
        )),
        "profiles[0].plugins.filter.enabled[0].name: plugin \"EBSLimits\" is a kube-scheduler plugin that gantry does not implement; disable it or remove it"
    );
    assert_eq!(
        err(&format!(
            "{HEADER}profiles:\n- plugins:\n    placementScore:\n      enabled:\n      - name: PodGroupPodsCount\n"
        )),
        "profiles[0].plugins.placementScore.enabled[0].name: unknown plugin \"PodGroupPodsCount\""
    );
    assert_eq!(
        err(&format!(
            "{HEADER}profiles:\n- plugins:\n    placementScore:\n      enabled:\n      - name: ImageLocality\n"
        )),
        "profiles[0].plugins.placementScore.enabled[0].name: plugin \"ImageLocality\" does not extend the placementScore extension point"
    );
    assert_eq!(
        err(&format!(
            "{HEADER}profiles:\n- plugins:\n    score:\n      enabled:\n      - name: NodePorts\n"
        )),
        "profiles[0].plugins.score.enabled[0].name: plugin \"NodePorts\" does not extend the score extension point"
    );
    assert_eq!(
        err(&format!(
            "{HEADER}profiles:\n- plugins:\n    score:\n      enabled:\n      - {{name: ImageLocality, weight: -1}}\n"
        )),
        "profiles[0].plugins.score.enabled[0].weight: must not be negative, got -1"
    );
    assert_eq!(
        err(&format!(
            "{HEADER}profiles:\n- plugins:\n    score:\n      enabled:\n      - {{name: ImageLocality, wieght: 1}}\n"
        )),
        "profiles[0].plugins.score.enabled[0]: unknown field `wieght`, expected `name` or `weight` at line 7 column 31"
    );
    assert_eq!(
        err(&format!(
            "{HEADER}profiles:\n- pluginConfig:\n  - name: NodeResourcesFit\n    args: {{scoringStrategy: {{type: Cheapest}}}}\n"
        )),
        "profiles[0].pluginConfig[0].args.scoringStrategy.type: unknown variant `Cheapest`, expected one of `LeastAllocated`, `MostAllocated`, `RequestedToCapacityRatio`"
    );
    assert_eq!(
        err(&format!(
            "{HEADER}profiles:\n- schedulerName: a\n- schedulerName: a\n"
        )),
        "profiles[1].schedulerName: duplicate profile \"a\""
    );
    assert_eq!(
        err(&format!("{HEADER}percentageOfNodesToScore: 101\n")),
        "percentageOfNodesToScore: not in valid range [0-100], got 101"
    );
    assert_eq!(
        err(&format!(
            "{HEADER}podInitialBackoffSeconds: 5\npodMaxBackoffSeconds: 2\n"
        )),
        "podMaxBackoffSeconds: must be greater than or equal to podInitialBackoffSeconds (5), got 2"
    );
    assert_eq!(
        err("apiVersion: kubescheduler.config.k8s.io/v1beta1\nkind: KubeSchedulerConfiguration\n"),
        "apiVersion: must be \"kubescheduler.config.k8s.io/v1\", got \"kubescheduler.config.k8s.io/v1beta1\""
    );
    assert_eq!(
        err(&format!("{HEADER}leaderElection: {{leaseDuration: 5s}}\n")),
        "leaderElection.leaseDuration: must be greater than renewDeadline"
    );
    assert_eq!(
        err(&format!(
            "{HEADER}profiles:\n- plugins:\n    queueSort:\n      disabled: [{{name: '*'}}]\n"
        )),
        "profiles[0].plugins.queueSort: exactly one queue sort plugin must be enabled, got 0"
    );
    assert_eq!(
        err(&format!("{HEADER}profiles: [\n")),
        "profiles: did not find expected node content at line 4 column 1, while parsing a flow node"
    );
}

#[test]
fn content_type_is_protobuf_unless_json_is_asked_for() {
    let c = Config::default_with(&registry()).unwrap();
    assert_eq!(c.client_connection.content_type, ContentType::Protobuf);
    let with = |t: &str| parse(&format!("{HEADER}clientConnection:\n  contentType: {t}\n"));
    assert_eq!(
        with("application/vnd.kubernetes.protobuf")
            .unwrap()
            .client_connection
            .content_type,
        ContentType::Protobuf
    );
    assert_eq!(
        with("application/json")
            .unwrap()
            .client_connection
            .content_type,
        ContentType::Json
    );
    assert_eq!(
        err(&format!(
            "{HEADER}clientConnection:\n  contentType: application/yaml\n"
        )),
        "clientConnection.contentType: must be application/vnd.kubernetes.protobuf or application/json, got \"application/yaml\""
    );
}

fn score_weight(weight: &str) -> String {
    format!(
        "{HEADER}profiles:\n- plugins:\n    score:\n      enabled:\n      - {{name: ImageLocality, weight: {weight}}}\n"
    )
}

#[test]
fn weights_are_kube_scheduler_int32s() {
    assert_eq!(
        err(&score_weight("9223372036854775807")),
        "profiles[0].plugins.score.enabled[0].weight: must be at most 2147483647 (an int32, as in kube-scheduler), got 9223372036854775807"
    );
    assert_eq!(
        err(&score_weight("2147483648")),
        "profiles[0].plugins.score.enabled[0].weight: must be at most 2147483647 (an int32, as in kube-scheduler), got 2147483648"
    );
    assert_eq!(
        err(&format!(
            "{HEADER}profiles:\n- plugins:\n    multiPoint:\n      enabled:\n      - {{name: TaintToleration, weight: 9223372036854775807}}\n"
        )),
        "profiles[0].plugins.multiPoint.enabled[0].weight: must be at most 2147483647 (an int32, as in kube-scheduler), got 9223372036854775807"
    );
    let top = parse(&score_weight("2147483647")).unwrap();
    let weights: Vec<i64> = top.profiles[0].score.iter().map(|(_, w)| *w).collect();
    assert!(weights.contains(&2_147_483_647), "{weights:?}");
    let max_total: i64 = weights
        .iter()
        .map(|w| w * crate::framework::MAX_NODE_SCORE)
        .sum();
    assert!(max_total > 0, "the highest total score fits an i64");
    assert!(
        err(&score_weight("1e3"))
            .starts_with("profiles[0].plugins.score.enabled[0].weight: invalid type"),
        "a weight is an integer"
    );
}

fn client(settings: &str) -> Result<ClientConnection, ConfigError> {
    parse(&format!("{HEADER}clientConnection: {{{settings}}}\n")).map(|c| c.client_connection)
}

#[test]
fn qps_and_burst_are_ranged() {
    let c = client("qps: 0, burst: 0").unwrap();
    assert_eq!((c.qps, c.burst), (0.0, 0), "qps 0 turns throttling off");
    let c = client("qps: 0.01, burst: 1").unwrap();
    assert_eq!((c.qps, c.burst), (0.01, 1));
    let c = client("qps: 50, burst: 2147483647").unwrap();
    assert_eq!(c.burst, 2_147_483_647);
    for qps in ["1e-300", "0.001", "-1", "1e300", ".inf", ".nan"] {
        let e = client(&format!("qps: {qps}, burst: 10"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(
                "clientConnection.qps: must be 0 (no throttling) or between 0.01 and 3.4028235e38 requests per second, got "
            ),
            "{qps}: {e}"
        );
    }
    assert_eq!(
        client("qps: 5, burst: 0").unwrap_err().to_string(),
        "clientConnection.burst: must be at least 1 when qps is not 0: a burst of 0 would let no request through"
    );
    assert_eq!(
        client("burst: -1").unwrap_err().to_string(),
        "clientConnection.burst: must be between 0 and 2147483647, got -1"
    );
    assert_eq!(
        client("burst: 2147483648").unwrap_err().to_string(),
        "clientConnection.burst: must be between 0 and 2147483647, got 2147483648"
    );
}

fn leader(settings: &str) -> Result<LeaderElection, ConfigError> {
    parse(&format!("{HEADER}leaderElection: {{{settings}}}\n")).map(|c| c.leader_election)
}

#[test]
fn leader_election_follows_client_go() {
    let l = leader("leaseDuration: 60s, renewDeadline: 13s, retryPeriod: 10s").unwrap();
    assert_eq!(l.renew_deadline, Duration::from_secs(13));
    assert_eq!(
        leader("leaseDuration: 60s, renewDeadline: 12s, retryPeriod: 10s")
            .unwrap_err()
            .to_string(),
        "leaderElection.renewDeadline: must be greater than retryPeriod * 1.2",
        "a retry up to 20% late must fit in the deadline"
    );
    assert_eq!(
        leader("renewDeadline: 2400ms").unwrap_err().to_string(),
        "leaderElection.renewDeadline: must be greater than retryPeriod * 1.2"
    );
    assert!(leader("renewDeadline: 2401ms").is_ok());
    assert_eq!(
        leader("leaseDuration: 10s").unwrap_err().to_string(),
        "leaderElection.leaseDuration: must be greater than renewDeadline"
    );
    for (field, value) in [
        ("leaseDuration", "0s"),
        ("renewDeadline", "0"),
        ("retryPeriod", "0ms"),
    ] {
        assert_eq!(
            leader(&format!("{field}: {value}"))
                .unwrap_err()
                .to_string(),
            format!("leaderElection.{field}: must be greater than zero")
        );
    }
    assert_eq!(
        leader("leaseDuration: 900ms, renewDeadline: 500ms, retryPeriod: 100ms")
            .unwrap_err()
            .to_string(),
        "leaderElection.leaseDuration: must be between 1s and 2147483647s: a Lease holds it as a whole number of seconds (int32), got 900ms"
    );
    assert!(
        leader("leaseDuration: 600000h")
            .unwrap_err()
            .to_string()
            .starts_with("leaderElection.leaseDuration: must be between 1s and 2147483647s")
    );
    assert_eq!(
        leader("retryPeriod: 2562048h").unwrap_err().to_string(),
        "leaderElection.retryPeriod: duration \"2562048h\" out of range (at most 9223372036.854775807s)"
    );
    assert_eq!(
        leader("retryPeriod: -1s").unwrap_err().to_string(),
        "leaderElection.retryPeriod: negative duration \"-1s\""
    );
}

#[test]
fn leader_election_names_are_object_names() {
    let l = leader("resourceName: gantry.example.com, resourceNamespace: gantry-system").unwrap();
    assert_eq!(
        (l.resource_name.as_str(), l.resource_namespace.as_str()),
        ("gantry.example.com", "gantry-system")
    );
    for name in ["", "Gantry", "gantry_lease", "-gantry", "a/b"] {
        let e = leader(&format!("resourceName: {name:?}"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("leaderElection.resourceName: ") && e.contains("RFC 1123 subdomain"),
            "{name:?}: {e}"
        );
    }
    for namespace in ["", "kube.system", "Kube", &"x".repeat(64)] {
        let e = leader(&format!("resourceNamespace: {namespace:?}"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("leaderElection.resourceNamespace: "),
            "{namespace:?}: {e}"
        );
    }
    assert_eq!(
        leader("resourceLock: endpoints").unwrap_err().to_string(),
        "leaderElection.resourceLock: only \"leases\" is supported, got \"endpoints\""
    );
}

#[test]
fn scheduler_names_are_what_a_pod_can_name() {
    let e = err(&format!(
        "{HEADER}profiles:\n- schedulerName: My_Scheduler\n"
    ));
    assert!(
        e.starts_with(
            "profiles[0].schedulerName: \"My_Scheduler\" must be a lowercase RFC 1123 subdomain"
        ),
        "{e}"
    );
    assert_eq!(
        err(&format!("{HEADER}profiles:\n- schedulerName: \"\"\n")),
        "profiles[0].schedulerName: must not be empty"
    );
    assert!(
        parse(&format!(
            "{HEADER}profiles:\n- schedulerName: gantry.io-batch\n"
        ))
        .is_ok()
    );
}

#[test]
fn numeric_settings_are_ranged() {
    for (setting, want) in [
        (
            "parallelism: 0",
            "parallelism: must be between 1 and 1024, got 0",
        ),
        (
            "parallelism: 1025",
            "parallelism: must be between 1 and 1024, got 1025",
        ),
        (
            "percentageOfNodesToScore: -1",
            "percentageOfNodesToScore: not in valid range [0-100], got -1",
        ),
        (
            "podInitialBackoffSeconds: 0",
            "podInitialBackoffSeconds: must be greater than 0, got 0",
        ),
        (
            "profiles:\n- percentageOfNodesToScore: 200",
            "profiles[0].percentageOfNodesToScore: not in valid range [0-100], got 200",
        ),
    ] {
        assert_eq!(err(&format!("{HEADER}{setting}\n")), want);
    }
    let long = parse(&format!(
        "{HEADER}podInitialBackoffSeconds: 9223372036854775807\npodMaxBackoffSeconds: 9223372036854775807\n"
    ))
    .unwrap();
    assert_eq!(long.pod_max_backoff, Duration::from_secs(i64::MAX as u64));
}

#[test]
fn echoed_values_are_cut() {
    let long = "x".repeat(100_000);
    let e = err(&format!(
        "apiVersion: {long}\nkind: KubeSchedulerConfiguration\n"
    ));
    assert_eq!(
        e,
        format!(
            "apiVersion: must be \"kubescheduler.config.k8s.io/v1\", got \"{}\"... (100000 bytes)",
            "x".repeat(64)
        )
    );
    let e = err(&format!("{HEADER}parallelism: \"{long}\"\n"));
    assert!(e.len() < 300, "{e}");
    assert!(
        e.starts_with("parallelism: invalid type: string \"xxxx"),
        "{e}"
    );
    assert!(e.contains("... (100000 bytes), expected i64"), "{e}");
    let e = err(&format!("{HEADER}{long}: 1\n"));
    assert!(e.len() < 1200, "{}", e.len());
    let e = err(&format!(
        "{HEADER}profiles:\n- plugins:\n    score:\n      enabled:\n      - name: {long}\n"
    ));
    assert_eq!(
        e,
        format!(
            "profiles[0].plugins.score.enabled[0].name: unknown plugin \"{}\"... (100000 bytes)",
            "x".repeat(64)
        )
    );
}

#[test]
fn deep_nesting_is_refused_before_parsing() {
    let text = format!("{HEADER}profiles: {}\n", "[".repeat(100_000));
    assert_eq!(err(&text), "nested deeper than 128 levels at line 3");
}

#[test]
fn a_byte_order_mark_is_accepted() {
    let c = parse(&format!("\u{feff}{HEADER}parallelism: 4\n")).unwrap();
    assert_eq!(c.parallelism, 4);
}

#[test]
fn oversized_files_are_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.yaml");
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(MAX_FILE_BYTES + 1).unwrap();
    let e = Config::load(&path, &registry()).unwrap_err();
    assert!(matches!(e, ConfigError::TooLarge { .. }), "{e}");
    assert!(
        e.to_string()
            .ends_with("big.yaml: larger than 16777216 bytes"),
        "{e}"
    );
    let path = dir.path().join("ok.yaml");
    std::fs::write(&path, format!("\u{feff}{HEADER}")).unwrap();
    assert!(Config::load(&path, &registry()).is_ok());
}

#[test]
fn an_unknown_field_without_a_name_is_named_config() {
    // Found by fuzz_config_parse_mutated: the error named the field "" (its path is empty).
    let e = err("\"\": null\n");
    assert!(e.starts_with("config: unknown field ``"), "{e}");
}

/// What kube-scheduler writes with `--write-config-to`: its default profile in full.
const KUBE_SCHEDULER_DEFAULTS: &str = include_str!("testdata/kube_scheduler_defaults.yaml");

/// The plugins a text enables through `profiles[0].plugins.multiPoint`, in order.
fn multi_point_names(text: &str) -> Vec<String> {
    let file: KubeSchedulerConfiguration = decode(text).unwrap();
    let plugins = file.profiles[0].plugins.clone().unwrap_or_default();
    plugins
        .multi_point
        .enabled
        .into_iter()
        .map(|p| p.name)
        .collect()
}

/// `text` without the multiPoint entry of `name`: the plugin is no longer enabled. (Listing
/// it under `multiPoint.disabled` as well would not do: kube-scheduler enables a plugin its
/// multiPoint set both enables and disables.)
fn without_multi_point_entry(text: &str, name: &str) -> String {
    let entry = format!("      - name: {name}\n        weight: ");
    let at = text
        .find(&entry)
        .unwrap_or_else(|| panic!("{name} is enabled"));
    let end = at + text[at..].match_indices('\n').nth(1).unwrap().0 + 1;
    format!("{}{}", &text[..at], &text[end..])
}

/// The plugins at each extension point, with the score weights.
fn layout(p: &crate::framework::Profile) -> Vec<Vec<(&'static str, i64)>> {
    let unweighted = |v: &[std::sync::Arc<dyn crate::framework::Plugin>]| {
        v.iter().map(|p| (p.name(), 0)).collect::<Vec<_>>()
    };
    vec![
        unweighted(&p.pre_enqueue),
        vec![(p.queue_sort.name(), 0)],
        unweighted(&p.pre_filter),
        unweighted(&p.filter),
        unweighted(&p.post_filter),
        unweighted(&p.pre_score),
        p.score.iter().map(|(p, w)| (p.name(), *w)).collect(),
        unweighted(&p.reserve),
        unweighted(&p.permit),
        unweighted(&p.pre_bind),
        unweighted(&p.bind),
        unweighted(&p.post_bind),
    ]
}

#[test]
fn kube_schedulers_written_defaults_are_refused_only_for_the_plugins_gantry_lacks() {
    let written = multi_point_names(KUBE_SCHEDULER_DEFAULTS);
    assert_eq!(written.len(), 20);
    // Each refusal names one multiPoint entry; without it, the next refusal, until none.
    let mut text = KUBE_SCHEDULER_DEFAULTS.to_string();
    let mut refused: Vec<(String, String)> = Vec::new();
    let config = loop {
        match parse(&text) {
            Ok(config) => break config,
            Err(ConfigError::Field { field, reason }) => {
                assert!(refused.len() < written.len(), "{field}: {reason}");
                let index: usize = field
                    .strip_prefix("profiles[0].plugins.multiPoint.enabled[")
                    .and_then(|rest| rest.strip_suffix(']'))
                    .and_then(|i| i.parse().ok())
                    .unwrap_or_else(|| panic!("not a multiPoint entry: {field}: {reason}"));
                let name = multi_point_names(&text)[index].clone();
                assert_eq!(
                    reason,
                    format!(
                        "plugin {name:?} is a kube-scheduler plugin that gantry does not implement; disable it or remove it"
                    )
                );
                let original = written.iter().position(|n| *n == name).unwrap();
                refused.push((
                    format!("profiles[0].plugins.multiPoint.enabled[{original}]"),
                    name.clone(),
                ));
                text = without_multi_point_entry(&text, &name);
            }
            Err(e) => panic!("{e}"),
        }
    };
    let refused: Vec<(&str, &str)> = refused
        .iter()
        .map(|(f, n)| (f.as_str(), n.as_str()))
        .collect();
    assert!(refused.is_empty(), "nothing refused: {refused:?}");
    // What comes out is gantry's own default profile (DefaultPreemption at PostFilter
    // included), with kube-scheduler's client settings.
    let defaults = Config::default_with(&registry()).unwrap();
    assert_eq!(config.profiles.len(), 1);
    assert_eq!(config.profiles[0].scheduler_name, "default-scheduler");
    let mut expected = defaults.profiles[0].clone();
    expected.post_filter = config.profiles[0].post_filter.clone();
    assert_eq!(
        config.profiles[0]
            .post_filter
            .iter()
            .map(|p| p.name())
            .collect::<Vec<_>>(),
        ["DefaultPreemption"]
    );
    assert_eq!(layout(&config.profiles[0]), layout(&expected));
    assert_eq!(config.parallelism, 16);
    // kube-scheduler writes its adaptive 0 out: an explicit 0 stays adaptive.
    assert_eq!(config.percentage_of_nodes_to_score, 0);
    assert_eq!(config.pod_max_backoff, Duration::from_secs(10));
    assert_eq!(
        (config.client_connection.qps, config.client_connection.burst),
        (50.0, 100)
    );
    assert_eq!(config.client_connection.content_type, ContentType::Protobuf);
    assert_eq!(config.client_connection.kubeconfig, None);
    assert_eq!(config.leader_election.resource_name, "kube-scheduler");
    assert_eq!(config.leader_election, {
        let mut l = defaults.leader_election.clone();
        l.resource_name = "kube-scheduler".to_string();
        l
    });
}

#[test]
fn a_multi_point_plugin_both_enabled_and_disabled_is_enabled() {
    let e = err(&format!(
        "{HEADER}profiles:\n- plugins:\n    multiPoint:\n      enabled: [{{name: EBSLimits}}]\n      disabled: [{{name: EBSLimits}}]\n"
    ));
    assert_eq!(
        e,
        "profiles[0].plugins.multiPoint.enabled[0]: plugin \"EBSLimits\" is a kube-scheduler plugin that gantry does not implement; disable it or remove it",
        "kube-scheduler would run it"
    );
    let c = parse(&format!(
        "{HEADER}profiles:\n- plugins:\n    multiPoint:\n      enabled: [{{name: ImageLocality, weight: 5}}]\n      disabled: [{{name: ImageLocality}}]\n"
    ))
    .unwrap();
    let weights: Vec<(&str, i64)> = c.profiles[0]
        .score
        .iter()
        .map(|(p, w)| (p.name(), *w))
        .collect();
    assert_eq!(
        weights.last(),
        Some(&("ImageLocality", 5)),
        "the default dropped, the entry appended: {weights:?}"
    );
}

fn plugin_config(entries: &str) -> Result<Config, ConfigError> {
    parse(&format!("{HEADER}profiles:\n- pluginConfig:\n{entries}"))
}

#[test]
fn default_preemption_args_are_validated_as_kube_scheduler_does() {
    let args = |a: &str| plugin_config(&format!("  - name: DefaultPreemption\n    args: {a}\n"));
    for ok in [
        "{minCandidateNodesPercentage: 10, minCandidateNodesAbsolute: 100}",
        "{apiVersion: kubescheduler.config.k8s.io/v1, kind: DefaultPreemptionArgs}",
        "{minCandidateNodesPercentage: 0}",
        "{minCandidateNodesPercentage: 100, minCandidateNodesAbsolute: 0}",
        "null",
    ] {
        assert!(args(ok).is_ok(), "{ok}: {}", args(ok).unwrap_err());
    }
    for (bad, want) in [
        (
            "{minCandidateNodesPercentage: 101}",
            "profiles[0].pluginConfig[0].args.minCandidateNodesPercentage: Invalid value: 101: not in valid range [0, 100]",
        ),
        (
            "{minCandidateNodesPercentage: -5}",
            "profiles[0].pluginConfig[0].args.minCandidateNodesPercentage: Invalid value: -5: not in valid range [0, 100]",
        ),
        (
            "{minCandidateNodesAbsolute: -1}",
            "profiles[0].pluginConfig[0].args.minCandidateNodesAbsolute: Invalid value: -1: not in valid range [0, inf)",
        ),
        (
            "{minCandidateNodesPercentage: 0, minCandidateNodesAbsolute: 0}",
            "profiles[0].pluginConfig[0].args: minCandidateNodesPercentage: Invalid value: 0: cannot be zero at the same time as minCandidateNodesAbsolute, minCandidateNodesAbsolute: Invalid value: 0: cannot be zero at the same time as minCandidateNodesPercentage",
        ),
        (
            "{minCandidateNodes: 5}",
            "profiles[0].pluginConfig[0].args.minCandidateNodes: unknown field `minCandidateNodes`, expected `minCandidateNodesPercentage` or `minCandidateNodesAbsolute`",
        ),
        (
            "{kind: InterPodAffinityArgs}",
            "profiles[0].pluginConfig[0].args.kind: expected DefaultPreemptionArgs, got \"InterPodAffinityArgs\"",
        ),
    ] {
        assert_eq!(args(bad).unwrap_err().to_string(), want, "{bad}");
    }
    // The path names the profile and the entry.
    let e = parse(&format!(
        "{HEADER}profiles:\n- schedulerName: a\n- schedulerName: b\n  pluginConfig:\n  - name: VolumeBinding\n  - name: DefaultPreemption\n    args: {{minCandidateNodesAbsolute: -1}}\n"
    ))
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "profiles[1].pluginConfig[1].args.minCandidateNodesAbsolute: Invalid value: -1: not in valid range [0, inf)"
    );
}

#[test]
fn default_preemption_is_enabled_disabled_or_configured() {
    let enabled = parse(&format!(
        "{HEADER}profiles:\n- plugins:\n    multiPoint:\n      enabled: [{{name: DefaultPreemption}}]\n"
    ))
    .unwrap();
    assert_eq!(
        enabled.profiles[0]
            .post_filter
            .iter()
            .map(|p| p.name())
            .collect::<Vec<_>>(),
        ["DefaultPreemption"]
    );
    let c = parse(&format!(
        "{HEADER}profiles:
- plugins:
    multiPoint:
      disabled: [{{name: DefaultPreemption}}]
    postFilter:
      disabled: [{{name: DefaultPreemption}}]
  pluginConfig:
  - name: DefaultPreemption
    args: {{minCandidateNodesPercentage: 20, minCandidateNodesAbsolute: 50}}
  - name: VolumeBinding
    args: {{bindTimeoutSeconds: 600}}
"
    ))
    .unwrap();
    assert!(c.profiles[0].post_filter.is_empty());
    assert!(names(&c.profiles[0].pre_bind).contains(&"VolumeBinding"));
}

#[test]
fn args_of_plugins_no_profile_enables_are_read_as_kube_scheduler_reads_them() {
    // A kind gantry knows is validated, enabled or not.
    let disabled = "  plugins:\n    multiPoint:\n      disabled: [{name: PodTopologySpread}]\n";
    let e = parse(&format!(
        "{HEADER}profiles:\n- pluginConfig:\n  - name: PodTopologySpread\n    args: {{defaultingType: Sometimes}}\n{disabled}"
    ))
    .unwrap_err();
    assert!(
        e.to_string().starts_with(
            "profiles[0].pluginConfig[0].args.defaultingType: unknown variant `Sometimes`"
        ),
        "{e}"
    );
    parse(&format!(
        "{HEADER}profiles:\n- pluginConfig:\n  - name: PodTopologySpread\n    args: {{defaultingType: List}}\n{disabled}"
    ))
    .unwrap();
    let e = plugin_config("  - name: LoadAware\n    args: {nope: 1}\n").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("profiles[0].pluginConfig[0].args.nope: unknown field `nope`"),
        "a plugin of gantry's own that no profile enables: {e}"
    );
    // Other names pass through unread: out-of-tree plugins, and kube-scheduler's plugins
    // that have no arguments kind (gantry's or not).
    for name in [
        "OutOfTreePlugin",
        "VolumeZone",
        "NodeVolumeLimits",
        "EBSLimits",
        "NodeName",
    ] {
        plugin_config(&format!(
            "  - name: {name}\n    args: {{foo: bar, n: [1, 2]}}\n"
        ))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn a_plugin_configured_twice_is_a_duplicate() {
    for name in ["VolumeBinding", "DefaultPreemption", "OutOfTreePlugin"] {
        assert_eq!(
            plugin_config(&format!(
                "  - name: {name}\n  - name: NodeAffinity\n  - name: {name}\n"
            ))
            .unwrap_err()
            .to_string(),
            format!("profiles[0].pluginConfig[2]: Duplicate value: \"{name}\"")
        );
    }
}

#[test]
fn null_lists_and_sets_are_empty() {
    for text in [
        "extenders: null\n",
        "extenders: []\n",
        "extenders:\n",
        "profiles: null\n",
        "profiles:\n- pluginConfig: null\n  plugins: null\n",
        "profiles:\n- plugins:\n    multiPoint: null\n    score: {enabled: null, disabled: null}\n    filter: {}\n",
    ] {
        let c = parse(&format!("{HEADER}{text}")).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(c.profiles.len(), 1, "{text}");
        assert_eq!(c.profiles[0].score.len(), 8, "the defaults: {text}");
    }
    assert!(
        err(&format!("{HEADER}extenders: {{}}\n")).starts_with("extenders: invalid type: map"),
        "a list"
    );
}

const HAMI: &str = include_str!("testdata/hami_scheduler_config.yaml");

#[test]
fn hamis_published_configuration_is_accepted() {
    let c = parse(HAMI).expect("HAMi's configuration");
    let all = c.extenders.all();
    assert_eq!(all.len(), 1);
    let e = &all[0];
    assert_eq!(e.url_prefix, "https://127.0.0.1:443");
    assert_eq!(e.filter_verb.as_deref(), Some("filter"));
    assert_eq!(e.bind_verb.as_deref(), Some("bind"));
    assert_eq!(e.prioritize_verb, None);
    assert_eq!(e.preempt_verb, None);
    assert!(e.node_cache_capable && e.enable_https && e.tls.insecure && !e.ignorable);
    assert_eq!(e.http_timeout, Duration::from_secs(30));
    assert_eq!(e.managed_resources.len(), 14);
    assert!(e.managed_resources.iter().all(|m| m.ignored_by_scheduler));
    assert_eq!(c.extenders.ignored_resources()[0], "nvidia.com/gpu");

    // NodeResourcesFit leaves the managed resources to the extender: a GPU pod on a node
    // without GPUs passes the Filter plugins and goes to the extender.
    let mut s = crate::scheduler::Scheduler::new(c, None);
    s.upsert_node(
        crate::testing::node("n1").capacity("4", "8Gi").build(),
        Duration::ZERO,
    );
    let gpu = crate::testing::pod("trainer")
        .with_spec(|s| s.scheduler_name = Some("hami-scheduler".to_string()))
        .req("nvidia.com/gpu", "1")
        .build();
    s.upsert_pod(gpu, Duration::ZERO).unwrap();
    match s.schedule_next(Duration::ZERO) {
        Some(crate::scheduler::Attempt::Extending(request)) => match request.ask {
            crate::scheduler::ExtenderAsk::Place {
                exchange, nodes, ..
            } => {
                assert_eq!(exchange.survivors(), [std::sync::Arc::from("n1")]);
                assert!(nodes.is_empty(), "node-cache capable: names only");
            }
            other => panic!("expected a filter round, got {other:?}"),
        },
        other => panic!("expected the extender to be asked, got {other:?}"),
    }
}

/// Schedules a pod requesting one `example.com/widget` on a node that lists none, with one
/// extender managing that resource, `ignoredByScheduler` as given.
fn widget_attempt(ignored_by_scheduler: bool) -> crate::scheduler::Attempt {
    let c = parse(&format!(
        "{HEADER}extenders:
- urlPrefix: http://127.0.0.1:1
  filterVerb: filter
  managedResources:
  - name: example.com/widget
    ignoredByScheduler: {ignored_by_scheduler}
"
    ))
    .expect("configuration");
    let mut s = crate::scheduler::Scheduler::new(c, None);
    s.upsert_node(
        crate::testing::node("n1").capacity("4", "8Gi").build(),
        Duration::ZERO,
    );
    let pod = crate::testing::pod("widget")
        .req("example.com/widget", "1")
        .build();
    s.upsert_pod(pod, Duration::ZERO).unwrap();
    s.schedule_next(Duration::ZERO).expect("an attempt")
}

#[test]
fn ignored_by_scheduler_alone_lets_node_resources_fit_pass() {
    match widget_attempt(true) {
        crate::scheduler::Attempt::Extending(request) => match request.ask {
            crate::scheduler::ExtenderAsk::Place { exchange, .. } => {
                assert_eq!(exchange.survivors(), [std::sync::Arc::from("n1")]);
            }
            other => panic!("expected a filter round, got {other:?}"),
        },
        other => panic!("expected the extender to be asked, got {other:?}"),
    }
    match widget_attempt(false) {
        crate::scheduler::Attempt::Unschedulable { message, .. } => {
            assert!(
                message.contains("1 Insufficient example.com/widget"),
                "{message}"
            );
        }
        other => panic!("expected NodeResourcesFit to reject the pod, got {other:?}"),
    }
}

#[test]
fn extender_defaults_and_call_order() {
    let c = parse(&format!(
        "{HEADER}extenders:\n- urlPrefix: http://a:1/x/\n  filterVerb: f\n  ignorable: true\n\
         - urlPrefix: http://b:2\n  prioritizeVerb: p\n  weight: 3\n  httpTimeout: 0s\n"
    ))
    .unwrap();
    let all = c.extenders.all();
    // The ignorable extenders are called after the others, as kube-scheduler orders them.
    assert_eq!(all[0].url_prefix, "http://b:2");
    assert_eq!(all[1].url_prefix, "http://a:1/x/");
    assert_eq!(all[1].url("f"), "http://a:1/x/f");
    assert_eq!(
        all[0].http_timeout,
        Duration::from_secs(5),
        "0 is the default"
    );
    assert_eq!(all[1].http_timeout, Duration::from_secs(5));
    assert_eq!(all[0].weight, 3);
    assert!(!all[0].node_cache_capable && !all[0].enable_https);
}

#[test]
fn extenders_are_validated_with_kube_schedulers_rules() {
    let ext = |body: &str| err(&format!("{HEADER}extenders:\n{body}"));
    assert_eq!(
        ext("- urlPrefix: http://a\n  prioritizeVerb: p\n"),
        "extenders[0].weight: Invalid value: 0: must have a positive weight applied to it"
    );
    assert_eq!(
        ext("- urlPrefix: http://a\n  prioritizeVerb: p\n  weight: -2\n"),
        "extenders[0].weight: Invalid value: -2: must have a positive weight applied to it"
    );
    assert_eq!(
        ext("- urlPrefix: http://a\n  bindVerb: b\n- urlPrefix: http://b\n  bindVerb: b\n"),
        "extenders: Invalid value: \"found 2 extenders\": only one extender can implement bind"
    );
    assert_eq!(
        ext("- urlPrefix: http://a\n  managedResources:\n  - name: cpu\n"),
        "extenders[0].managedResources[0].name: Invalid value: \"cpu\": is an invalid extended resource name"
    );
    assert_eq!(
        ext(
            "- urlPrefix: http://a\n  managedResources:\n  - name: a.io/x\n- urlPrefix: http://b\n  managedResources:\n  - name: a.io/x\n"
        ),
        "extenders[1].managedResources[0].name: Invalid value: \"a.io/x\": duplicate extender managed resource name"
    );
    assert!(
        ext("- urlPrefix: http://a\n  managedResources:\n  - name: a.io/x y\n")
            .starts_with("extenders[0].managedResources[0].name: Invalid value: \"a.io/x y\": "),
        "a qualified name"
    );
    assert!(ext("- filterVerb: f\n").starts_with("extenders[0].urlPrefix: "));
    assert!(ext("- urlPrefix: ftp://a\n").starts_with("extenders[0].urlPrefix: must be an http"));
    assert!(
        ext("- urlPrefix: http://a\n  httpTimeout: soon\n")
            .starts_with("extenders[0].httpTimeout: ")
    );
    assert!(
        ext("- urlPrefix: http://a\n  tlsConfig:\n    certFile: c.pem\n")
            .starts_with("extenders[0].tlsConfig: a client certificate and its key go together")
    );
    assert!(
        ext("- urlPrefix: http://a\n  filterVerbs: f\n")
            .starts_with("extenders[0]: unknown field `filterVerbs`"),
        "{}",
        ext("- urlPrefix: http://a\n  filterVerbs: f\n")
    );
}
