//! Synthetic clusters for benchmarks and demos: uniform nodes over three zones, and pending
//! pods with mixed requests, optionally grouped in deployments with spreading and
//! anti-affinity. Deterministic for a given seed.

use k8s_openapi::api::core::v1 as core;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::testing::{node, pod};

/// Zones the synthetic nodes are spread over.
pub const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

/// Which pods to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Pods with requests only.
    Plain,
    /// Pods of 100 deployments, each with preferred pod anti-affinity on the hostname and a
    /// zone topology spread constraint.
    Constrained,
}

/// `count` nodes with 32 cpu, 128Gi memory and 110 pods, Ready, round-robin over [`ZONES`].
pub fn nodes(count: usize) -> Vec<core::Node> {
    (0..count).map(node_object).collect()
}

/// The node number `i` of [`nodes`] (`node-00042`): a caller that converts each node at
/// once never holds them all as API objects.
pub fn node_object(i: usize) -> core::Node {
    let name = format!("node-{i:05}");
    let mut n = node(&name)
        .capacity("32", "128Gi")
        .label("kubernetes.io/hostname", &name)
        .label("topology.kubernetes.io/region", "region-1")
        .label("topology.kubernetes.io/zone", ZONES[i % ZONES.len()])
        .api();
    let status = n.status.get_or_insert_with(Default::default);
    status.capacity = status.allocatable.clone();
    status.conditions = Some(vec![core::NodeCondition {
        type_: "Ready".to_string(),
        status: "True".to_string(),
        ..Default::default()
    }]);
    n
}

/// The seed both benchmarks draw their pods with, so that `gantry bench` and a cluster
/// populated by `cluster-bench populate` hold the same pods.
pub const DEFAULT_SEED: u64 = 42;

/// `count` pending pods for `scheduler_name`, requesting 100m..2 cpu and 128Mi..2Gi memory,
/// named `pod-00000` on.
pub fn pods(count: usize, workload: Workload, scheduler_name: &str, seed: u64) -> Vec<core::Pod> {
    pod_stream("pod", workload, scheduler_name, seed)
        .take(count)
        .collect()
}

/// The pods [`pods`] makes, named `{prefix}-00000` on, made one at a time as they are taken,
/// without end: a caller that converts each pod at once never holds them all as API
/// objects (half a million running pods for a benchmark, say), and a caller that fills a
/// cluster takes pods until their requests reach what it wants.
pub fn pod_stream<'a>(
    prefix: &'a str,
    workload: Workload,
    scheduler_name: &'a str,
    seed: u64,
) -> impl Iterator<Item = core::Pod> + 'a {
    let mut rng = StdRng::seed_from_u64(seed);
    (0usize..).map(move |i| {
        let cpu = rng.random_range(1..=20) * 100;
        let mem = rng.random_range(1..=16) * 128;
        let mut b = pod(&format!("{prefix}-{i:05}"))
            .req("cpu", &format!("{cpu}m"))
            .req("memory", &format!("{mem}Mi"));
        if workload == Workload::Constrained {
            let app = format!("deploy-{:03}", i % 100);
            b = b.label("app", &app).spec_yaml(&format!(
                r#"
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        labelSelector: {{matchLabels: {{app: {app}}}}}
        topologyKey: kubernetes.io/hostname
topologySpreadConstraints:
- maxSkew: 1
  topologyKey: topology.kubernetes.io/zone
  whenUnsatisfiable: DoNotSchedule
  labelSelector: {{matchLabels: {{app: {app}}}}}
"#
            ));
        }
        let mut p = b.api();
        if let Some(spec) = p.spec.as_mut() {
            spec.scheduler_name = Some(scheduler_name.to_string());
            spec.containers[0].image = Some("registry.example/app:1".to_string());
        }
        p
    })
}
