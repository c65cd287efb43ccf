//! How good a placement is, beyond how many pods it placed: how many pods went in before the
//! first one found no room, how many nodes hold pods, how evenly cpu and memory are
//! allocated across the nodes, and how far pods of one workload are from spread evenly over
//! zones and hosts. These are the figures that tell scoring every node from scoring a sample
//! (kube-scheduler's adaptive `percentageOfNodesToScore`) apart.

use std::collections::BTreeMap;

use serde::Serialize;

use gantry_core::cache::NodeInfo;

/// The zone label of a node, the domain of the zone skew.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// The figures of a placement, measured on the nodes once the pods are placed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlacementQuality {
    /// Nodes in the cluster.
    pub nodes: usize,
    /// Nodes holding at least one pod.
    pub nodes_used: usize,
    /// Pods on the nodes.
    pub pods: usize,
    /// The share (%) of each node's allocatable cpu its pods request, over the nodes with
    /// allocatable cpu.
    pub cpu: Spread,
    /// The same for memory.
    pub memory: Spread,
    /// How far each group's pods are from even over the zones (nodes labelled
    /// [`ZONE_LABEL`]); `None` when no node has a zone.
    pub zone_skew: Option<Skew>,
    /// How far each group's pods are from even over the nodes (every node its own domain,
    /// as with the `kubernetes.io/hostname` key).
    pub hostname_skew: Skew,
}

/// The mean and the (population) standard deviation of a value over the nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Spread {
    /// Mean.
    pub mean: f64,
    /// Standard deviation: 0 when every node holds the same share.
    pub std_dev: f64,
}

/// Topology skew as PodTopologySpread defines it (pods of a group in the fullest domain
/// minus pods in the emptiest, domains without pods counted), over the groups of pods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Skew {
    /// The largest skew of any group.
    pub max: u64,
    /// The mean skew over the groups.
    pub mean: f64,
    /// Groups of pods measured.
    pub groups: usize,
}

impl PlacementQuality {
    /// Measures `nodes`. Pods are grouped by the value of their label `group_label` (the
    /// workload they belong to); pods without it form one group, so with no label every
    /// pod is in the same group.
    pub fn measure<'a>(
        nodes: impl IntoIterator<Item = &'a NodeInfo>,
        group_label: Option<&str>,
    ) -> Self {
        let nodes: Vec<&NodeInfo> = nodes.into_iter().collect();
        let share = |requested: i64, allocatable: i64| {
            (allocatable > 0).then(|| 100.0 * requested as f64 / allocatable as f64)
        };
        let cpu: Vec<f64> = nodes
            .iter()
            .filter_map(|n| share(n.requested.milli_cpu, n.node.allocatable.milli_cpu))
            .collect();
        let memory: Vec<f64> = nodes
            .iter()
            .filter_map(|n| share(n.requested.memory, n.node.allocatable.memory))
            .collect();
        let group_of = |labels: &gantry_core::model::Labels| -> String {
            group_label
                .and_then(|key| labels.get(key))
                .unwrap_or_default()
                .to_string()
        };
        // Pods of each group per node, and per zone.
        let mut per_node: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        let mut per_zone: BTreeMap<String, BTreeMap<&str, u64>> = BTreeMap::new();
        let zones: Vec<&str> = {
            let mut z: Vec<&str> = nodes
                .iter()
                .filter_map(|n| n.node.labels.get(ZONE_LABEL))
                .collect();
            z.sort_unstable();
            z.dedup();
            z
        };
        for (i, n) in nodes.iter().enumerate() {
            let zone = n.node.labels.get(ZONE_LABEL);
            for p in &n.pods {
                let group = group_of(&p.labels);
                if let Some(zone) = zone {
                    *per_zone
                        .entry(group.clone())
                        .or_default()
                        .entry(zone)
                        .or_default() += 1;
                }
                per_node
                    .entry(group)
                    .or_insert_with(|| vec![0; nodes.len()])[i] += 1;
            }
        }
        let zone_skew = (!zones.is_empty()).then(|| {
            summarize(per_zone.values().map(|by_zone| {
                let counts: Vec<u64> = zones
                    .iter()
                    .map(|z| by_zone.get(z).copied().unwrap_or(0))
                    .collect();
                skew(&counts)
            }))
        });
        PlacementQuality {
            nodes: nodes.len(),
            nodes_used: nodes.iter().filter(|n| !n.pods.is_empty()).count(),
            pods: nodes.iter().map(|n| n.pods.len()).sum(),
            cpu: spread(&cpu),
            memory: spread(&memory),
            zone_skew,
            hostname_skew: summarize(per_node.values().map(|counts| skew(counts))),
        }
    }
}

/// The mean and population standard deviation of `values` (zeros for none).
pub fn spread(values: &[f64]) -> Spread {
    if values.is_empty() {
        return Spread::default();
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    Spread {
        mean,
        std_dev: variance.sqrt(),
    }
}

/// The largest count minus the smallest (0 for no domains).
pub fn skew(counts: &[u64]) -> u64 {
    match (counts.iter().max(), counts.iter().min()) {
        (Some(max), Some(min)) => max - min,
        _ => 0,
    }
}

/// The largest and the mean of the groups' skews.
fn summarize(skews: impl Iterator<Item = u64>) -> Skew {
    let skews: Vec<u64> = skews.collect();
    Skew {
        max: skews.iter().copied().max().unwrap_or(0),
        mean: if skews.is_empty() {
            0.0
        } else {
            skews.iter().sum::<u64>() as f64 / skews.len() as f64
        },
        groups: skews.len(),
    }
}

/// Pods placed and pods that found no room, in the order they were tried, and how many
/// went in before the first that found none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Attempts {
    /// Pods placed.
    pub placed: usize,
    /// Pods that found no room.
    pub failed: usize,
    /// Pods placed before the first that found no room; `None` while every pod found room.
    pub placed_before_first_failure: Option<usize>,
}

impl Attempts {
    /// A pod was placed.
    pub fn placed(&mut self) {
        self.placed += 1;
    }

    /// A pod found no room.
    pub fn failed(&mut self) {
        if self.placed_before_first_failure.is_none() {
            self.placed_before_first_failure = Some(self.placed);
        }
        self.failed += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_core::testing::{node, node_info, pod};

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn spread_is_the_population_mean_and_standard_deviation() {
        let s = spread(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert!(close(s.mean, 5.0) && close(s.std_dev, 2.0), "{s:?}");
        assert_eq!(spread(&[3.0, 3.0]).std_dev, 0.0);
        assert_eq!(spread(&[]), Spread::default());
    }

    #[test]
    fn skew_counts_empty_domains() {
        assert_eq!(skew(&[3, 1, 2]), 2);
        assert_eq!(skew(&[0, 4]), 4);
        assert_eq!(skew(&[5]), 0);
        assert_eq!(skew(&[]), 0);
    }

    #[test]
    fn attempts_remember_the_placements_before_the_first_failure() {
        let mut a = Attempts::default();
        a.placed();
        a.placed();
        assert_eq!(a.placed_before_first_failure, None);
        a.failed();
        a.placed();
        a.failed();
        assert_eq!(
            a,
            Attempts {
                placed: 3,
                failed: 2,
                placed_before_first_failure: Some(2),
            }
        );
    }

    /// Three nodes of 10 cpu and 10Gi over two zones; app `a` has two pods on `n1` and
    /// one on `n3`, app `b` one on `n2`, and one pod has no app.
    #[test]
    fn measures_allocation_and_skew_by_group() {
        let n = |name: &str, zone: &str| {
            node(name)
                .capacity("10", "10Gi")
                .label(ZONE_LABEL, zone)
                .build()
        };
        let p = |name: &str, app: Option<&str>, cpu: &str| {
            let b = pod(name).req("cpu", cpu).req("memory", "1Gi");
            match app {
                Some(app) => b.label("app", app).build(),
                None => b.build(),
            }
        };
        let nodes = [
            node_info(
                n("n1", "z1"),
                &[p("a1", Some("a"), "2"), p("a2", Some("a"), "2")],
            ),
            node_info(n("n2", "z1"), &[p("b1", Some("b"), "1")]),
            node_info(n("n3", "z2"), &[p("a3", Some("a"), "1"), p("x", None, "1")]),
            node_info(n("n4", "z2"), &[]),
        ];
        let q = PlacementQuality::measure(&nodes, Some("app"));
        assert_eq!((q.nodes, q.nodes_used, q.pods), (4, 3, 5));
        // cpu shares 40, 10, 20, 0: mean 17.5, variance (506.25 + 56.25 + 6.25 + 306.25) / 4.
        assert!(close(q.cpu.mean, 17.5), "{:?}", q.cpu);
        assert!(close(q.cpu.std_dev, 218.75f64.sqrt()), "{:?}", q.cpu);
        // memory shares 20, 10, 20, 0.
        assert!(close(q.memory.mean, 12.5), "{:?}", q.memory);
        // Zones: a 2 in z1 and 1 in z2 (skew 1), b 1 and 0 (1), no app 0 and 1 (1).
        let zone = q.zone_skew.expect("nodes have zones");
        assert_eq!((zone.max, zone.groups), (1, 3));
        assert!(close(zone.mean, 1.0));
        // Hosts: a 2,0,1,0 (2), b 0,1,0,0 (1), no app 0,0,1,0 (1).
        assert_eq!((q.hostname_skew.max, q.hostname_skew.groups), (2, 3));
        assert!(close(q.hostname_skew.mean, 4.0 / 3.0));
        // Without a group label every pod is in one group: 2,1,2,0 over hosts, 3 and 2 over zones.
        let one = PlacementQuality::measure(&nodes, None);
        assert_eq!(one.hostname_skew.max, 2);
        assert_eq!(one.zone_skew.map(|s| (s.max, s.groups)), Some((1, 1)));
    }

    #[test]
    fn nodes_without_zones_have_no_zone_skew() {
        let nodes = [node_info(
            node("n1").capacity("4", "4Gi").build(),
            &[pod("p").req("cpu", "1").build()],
        )];
        let q = PlacementQuality::measure(&nodes, None);
        assert_eq!(q.zone_skew, None);
        assert!(close(q.cpu.mean, 25.0) && close(q.cpu.std_dev, 0.0));
    }
}
