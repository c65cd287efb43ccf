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
    assert_eq!(c.percentage_of_nodes_to_score, 0);
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
            "NodeUnschedulable",
            "NodeName",
            "TaintToleration",
            "NodeAffinity",
            "NodePorts",
            "NodeResourcesFit",
            "PodTopologySpread",
            "InterPodAffinity"
        ]
    );
    let weights: Vec<(&str, i64)> = p.score.iter().map(|(p, w)| (p.name(), *w)).collect();
    assert_eq!(
        weights,
        [
            ("TaintToleration", 3),
            ("NodeAffinity", 2),
            ("NodeResourcesFit", 1),
            ("PodTopologySpread", 2),
            ("InterPodAffinity", 2),
            ("NodeResourcesBalancedAllocation", 1),
            ("ImageLocality", 1)
        ]
    );
    assert_eq!(names(&p.bind), ["DefaultBinder"]);
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
            ("PodTopologySpread", 2),
            ("InterPodAffinity", 2)
        ],
        "an explicit entry overrides the multiPoint one and comes first"
    );
    assert_eq!(c.profile("default-scheduler").unwrap().score.len(), 7);
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
            "{HEADER}profiles:\n- plugins:\n    filter:\n      enabled:\n      - name: VolumeBinding\n"
        )),
        "profiles[0].plugins.filter.enabled[0].name: plugin \"VolumeBinding\" is a kube-scheduler plugin that gantry does not implement; disable it or remove it"
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
            "{HEADER}profiles:\n- pluginConfig:\n  - name: Nope\n"
        )),
        "profiles[0].pluginConfig[0].name: unknown plugin \"Nope\""
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

#[test]
fn an_unknown_field_without_a_name_is_named_config() {
    // Found by fuzz_config_parse_mutated: the error named the field "" (its path is empty).
    let e = err("\"\": null\n");
    assert!(e.starts_with("config: unknown field ``"), "{e}");
}
