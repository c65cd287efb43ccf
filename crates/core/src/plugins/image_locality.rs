//! ImageLocality: prefers nodes that already hold the pod's container images, weighing each
//! image by its size and by how widely it has spread (to avoid piling pods onto the few nodes
//! that happen to hold a big image).

use std::sync::Arc;

use crate::cache::{NodeInfo, Snapshot, Tracked};
use crate::framework::{
    ArgsError, CycleState, DefaultPlace, MAX_NODE_SCORE, Plugin, PluginSpec, PreScorePlugin,
    ScorePlugin, Status,
};
use crate::model::PodInfo;

/// The name used in configuration files.
pub const NAME: &str = "ImageLocality";

const MB: i64 = 1024 * 1024;
/// Image bytes below which a node scores 0 (kube-scheduler's `minThreshold`).
pub const MIN_THRESHOLD: i64 = 23 * MB;
/// Image bytes per container above which a node scores 100 (`maxContainerThreshold`).
pub const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

/// Error when Score runs without this plugin's PreScore state.
pub const ERR_MISSING_STATE: &str = "reading \"PreScoreImageLocality\" from cycleState: not found";

/// One container image of the pod that some node holds.
#[derive(Debug, Clone, PartialEq)]
pub struct WantedImage {
    /// The normalized image name.
    pub name: String,
    /// Share of all nodes that hold the image, in `(0, 1]`.
    pub spread: f64,
}

/// What Score needs, computed at PreScore from the snapshot (kube-scheduler reads the
/// snapshot in Score itself; here Score only sees the node).
#[derive(Debug, Clone, PartialEq)]
pub struct ImageLocalityState {
    /// One entry per container whose image is present on at least one node, in container
    /// order (an image used by two containers counts twice, as in kube-scheduler).
    pub images: Vec<WantedImage>,
    /// The score ceiling: `MAX_CONTAINER_THRESHOLD` times the number of containers.
    pub max_threshold: i64,
}

/// Scores nodes by the (spread-scaled) size of the pod's images they already hold.
#[derive(Debug, Default, Clone, Copy)]
pub struct ImageLocality;

impl Plugin for ImageLocality {
    fn name(&self) -> &'static str {
        NAME
    }

    fn cache_state(&self) -> &'static [Tracked] {
        &[Tracked::ImageSpread]
    }

    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }

    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl PreScorePlugin for ImageLocality {
    /// Looks up on how many of all the cluster's nodes each image is present; images no node
    /// holds cannot add to any score and are left out.
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        _: &[&NodeInfo],
    ) -> Status {
        let total = snapshot.len();
        let images: Vec<WantedImage> = pod
            .images
            .iter()
            .filter_map(|name| {
                let holders = snapshot.nodes_with_image(name);
                (holders > 0 && total > 0).then(|| WantedImage {
                    name: name.clone(),
                    spread: holders as f64 / total as f64,
                })
            })
            .collect();
        if images.is_empty() {
            // No node has any of the pod's images: every node would score 0.
            return Status::skip();
        }
        let containers = i64::try_from(pod.num_containers).unwrap_or(i64::MAX);
        state.insert(ImageLocalityState {
            images,
            max_threshold: MAX_CONTAINER_THRESHOLD.saturating_mul(containers),
        });
        Status::success()
    }

    fn reads_feasible(&self, _pod: &PodInfo, _snapshot: &Snapshot) -> bool {
        false
    }
}

impl ScorePlugin for ImageLocality {
    fn normalizes(&self) -> bool {
        false
    }

    /// Already on the 0..=100 scale: kube-scheduler's ImageLocality has no normalization.
    fn score(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let s = state
            .get::<ImageLocalityState>()
            .ok_or_else(|| Status::error(ERR_MISSING_STATE))?;
        let mut sum = 0i64;
        for wanted in &s.images {
            let size = node
                .node
                .images
                .iter()
                .find(|img| img.names.contains(&wanted.name))
                .map(|img| img.size);
            if let Some(size) = size {
                sum = sum.saturating_add((size as f64 * wanted.spread) as i64);
            }
        }
        Ok(calculate_priority(sum, s.max_threshold))
    }
}

/// Maps the summed image bytes into `0..=MAX_NODE_SCORE`, linearly between `MIN_THRESHOLD`
/// and `max_threshold`, clamped at both ends.
fn calculate_priority(sum: i64, max_threshold: i64) -> i64 {
    let clamped = if sum < MIN_THRESHOLD {
        MIN_THRESHOLD
    } else if sum > max_threshold {
        max_threshold
    } else {
        sum
    };
    MAX_NODE_SCORE * (clamped - MIN_THRESHOLD) / (max_threshold - MIN_THRESHOLD)
}

/// The plugin for the registry, with its place in kube-scheduler's default profile.
pub const SPEC: PluginSpec = PluginSpec {
    name: NAME,
    factory,
    default: Some(DefaultPlace {
        order: 120,
        weight: Some(1),
    }),
    args: None,
};

/// Builds the plugin; it takes no arguments, and ignores any given (as kube-scheduler does
/// for plugins without an arguments type).
pub fn factory(_args: Option<&serde_json::Value>) -> Result<Arc<dyn Plugin>, ArgsError> {
    Ok(Arc::new(ImageLocality))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Cache;
    use crate::framework::Code;
    use crate::model::NodeModel;
    use crate::testing::{PodBuilder, node, pod};

    fn snapshot(nodes: Vec<NodeModel>) -> Snapshot {
        let mut cache = Cache::new();
        for n in nodes {
            cache.upsert_node(n);
        }
        let mut snap = Snapshot::default();
        cache.update_snapshot(&mut snap);
        snap
    }

    /// A pod whose containers use `images` (one container each).
    fn pod_with(images: &[&str]) -> PodBuilder {
        pod("p").with_spec(|s| {
            s.containers = images
                .iter()
                .enumerate()
                .map(|(i, img)| k8s_openapi::api::core::v1::Container {
                    name: format!("c{i}"),
                    image: Some(img.to_string()),
                    ..Default::default()
                })
                .collect()
        })
    }

    /// The score of every node of the snapshot, in snapshot order, by node name.
    fn scores(p: PodBuilder, snap: &Snapshot) -> Vec<(String, i64)> {
        let p = p.build();
        let mut state = CycleState::new();
        let refs: Vec<&NodeInfo> = snap.nodes().iter().map(|n| &**n).collect();
        let status = ImageLocality.pre_score(&mut state, &p, snap, &refs);
        if status.is_skip() {
            // Skipped: the framework leaves the plugin out, which is a 0 on every node.
            return snap
                .nodes()
                .iter()
                .map(|n| (n.name().to_string(), 0))
                .collect();
        }
        assert!(status.is_success());
        snap.nodes()
            .iter()
            .map(|n| {
                (
                    n.name().to_string(),
                    ImageLocality.score(&state, &p, n).unwrap(),
                )
            })
            .collect()
    }

    fn cluster() -> Snapshot {
        snapshot(vec![
            node("n1")
                .image("gcr.io/40:latest", 40 * MB)
                .image("gcr.io/300:latest", 300 * MB)
                .image("gcr.io/4000:latest", 4000 * MB)
                .build(),
            node("n2")
                .image("gcr.io/250:latest", 250 * MB)
                .image("gcr.io/10:latest", 10 * MB)
                .build(),
        ])
    }

    fn by_name(v: &[(String, i64)], name: &str) -> i64 {
        v.iter().find(|(n, _)| n == name).map(|(_, s)| *s).unwrap()
    }

    #[test]
    fn larger_image_wins_scaled_by_spread_and_container_count() {
        let s = scores(pod_with(&["gcr.io/40", "gcr.io/250"]), &cluster());
        // n1: 40M * 1/2 = 20M < 23M -> 0.
        assert_eq!(by_name(&s, "n1"), 0);
        // n2: 100 * (250M/2 - 23M) / (2 * 1000M - 23M) = 5.
        assert_eq!(by_name(&s, "n2"), 5);
    }

    #[test]
    fn images_on_one_node_add_up() {
        let s = scores(pod_with(&["gcr.io/40", "gcr.io/300"]), &cluster());
        // 100 * ((40M + 300M)/2 - 23M) / (2000M - 23M) = 7.
        assert_eq!(by_name(&s, "n1"), 7);
        assert_eq!(by_name(&s, "n2"), 0);
    }

    #[test]
    fn clamped_at_the_maximum() {
        let s = scores(pod_with(&["gcr.io/4000", "gcr.io/10"]), &cluster());
        // 4000M/2 = 2000M = the ceiling for two containers.
        assert_eq!(by_name(&s, "n1"), 100);
        assert_eq!(by_name(&s, "n2"), 0, "10M/2 is below the floor");
    }

    #[test]
    fn spread_counts_every_node_of_the_cluster() {
        let mut nodes = vec![
            node("n1").image("gcr.io/4000:latest", 4000 * MB).build(),
            node("n2").image("gcr.io/10:latest", 10 * MB).build(),
        ];
        nodes.push(node("bare").build());
        let s = scores(pod_with(&["gcr.io/4000", "gcr.io/10"]), &snapshot(nodes));
        // 100 * (4000M/3 - 23M) / (2000M - 23M) = 66 (4000M/3 is truncated to whole bytes).
        assert_eq!(by_name(&s, "n1"), 66);
        assert_eq!(by_name(&s, "bare"), 0);
    }

    #[test]
    fn threshold_edges() {
        assert_eq!(calculate_priority(0, MAX_CONTAINER_THRESHOLD), 0);
        assert_eq!(
            calculate_priority(MIN_THRESHOLD, MAX_CONTAINER_THRESHOLD),
            0
        );
        assert_eq!(
            calculate_priority(MIN_THRESHOLD + 9_770 * 1024, MAX_CONTAINER_THRESHOLD),
            0,
            "just under 1% of the range"
        );
        // One percent of (1000M - 23M) above the floor.
        let one_percent = MIN_THRESHOLD + (MAX_CONTAINER_THRESHOLD - MIN_THRESHOLD) / 100 + 1;
        assert_eq!(calculate_priority(one_percent, MAX_CONTAINER_THRESHOLD), 1);
        assert_eq!(
            calculate_priority(MAX_CONTAINER_THRESHOLD - 1, MAX_CONTAINER_THRESHOLD),
            99
        );
        assert_eq!(
            calculate_priority(MAX_CONTAINER_THRESHOLD, MAX_CONTAINER_THRESHOLD),
            100
        );
        assert_eq!(calculate_priority(i64::MAX, MAX_CONTAINER_THRESHOLD), 100);
    }

    #[test]
    fn containers_without_images_still_raise_the_ceiling() {
        let snap = snapshot(vec![
            node("n1").image("app:v1", 1000 * MB).build(),
            node("n2").build(),
        ]);
        let one = pod_with(&["app:v1"]);
        // 1000M/2 = 500M: 100 * (500M - 23M) / (1000M - 23M) = 48.
        assert_eq!(by_name(&scores(one, &snap), "n1"), 48);
        let with_imageless = pod_with(&["app:v1"]).with_spec(|s| {
            s.init_containers = Some(vec![k8s_openapi::api::core::v1::Container {
                name: "init".into(),
                ..Default::default()
            }])
        });
        // Two containers: 100 * (500M - 23M) / (2000M - 23M) = 24.
        assert_eq!(by_name(&scores(with_imageless, &snap), "n1"), 24);
    }

    #[test]
    fn untagged_pod_images_match_latest_and_repeated_images_count_twice() {
        let snap = snapshot(vec![
            node("n1").image("web:latest", 600 * MB).build(),
            node("n2").build(),
        ]);
        // web -> web:latest; each container adds 600M/2 = 300M: 600M of a 2000M ceiling.
        // 100 * (600M - 23M) / (2000M - 23M) = 29.
        assert_eq!(by_name(&scores(pod_with(&["web", "web"]), &snap), "n1"), 29);
        assert_eq!(by_name(&scores(pod_with(&["web:v2"]), &snap), "n1"), 0);
    }

    #[test]
    fn image_known_by_a_second_name() {
        let mut n1 = node("n1").api();
        n1.status.as_mut().unwrap().images =
            Some(vec![k8s_openapi::api::core::v1::ContainerImage {
                names: Some(vec!["repo/app@sha256:abc".into(), "repo/app:v1".into()]),
                size_bytes: Some(1000 * MB),
            }]);
        let snap = snapshot(vec![NodeModel::from_api(&n1).unwrap(), node("n2").build()]);
        assert_eq!(
            by_name(&scores(pod_with(&["repo/app:v1"]), &snap), "n1"),
            48
        );
    }

    #[test]
    fn score_without_pre_score_is_an_error() {
        let n = NodeInfo::new(Arc::new(node("n").build()));
        let s = ImageLocality
            .score(&CycleState::new(), &pod("p").build(), &n)
            .unwrap_err();
        assert_eq!(s.code(), Code::Error);
        assert_eq!(s.message(), ERR_MISSING_STATE);
    }

    #[test]
    fn factory_builds_the_named_plugin() {
        let p = factory(None).unwrap();
        assert_eq!(p.name(), "ImageLocality");
        assert!(p.as_score().is_some() && p.as_pre_score().is_some());
    }
}
