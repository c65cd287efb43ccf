//! Node load: how busy a node really is, as a metrics source measured it, and the pods placed
//! on it since, which no measurement reflects yet.
//!
//! Requests say what pods asked for; real nodes run at a fraction of that. A metrics source
//! outside the core (the adapter's Prometheus or annotation source, or the simulator's input)
//! measures each node's utilisation and hands the core a [`LoadSample`] stamped with the time
//! of the measurement on the scheduler's own clock (the `now` its driver passes in). The core
//! keeps the latest sample per node together with the pods placed there since (they take a
//! while to show in measurements), so that load-aware plugins can add an estimate of those
//! pods instead of trusting a node that merely looked idle a moment ago.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::echo::{bound_message, echo, echo_name};
use super::{Labels, PodInfo};

/// Node annotation with the share of the node's cpu in use, a fraction `0..=1`.
pub const CPU_UTILIZATION_ANNOTATION: &str = "gantry.io/cpu-utilization";
/// Node annotation with the share of the node's memory in use, a fraction `0..=1`.
pub const MEMORY_UTILIZATION_ANNOTATION: &str = "gantry.io/memory-utilization";
/// Node annotation with the time of the measurement, RFC 3339.
pub const METRICS_TIMESTAMP_ANNOTATION: &str = "gantry.io/metrics-timestamp";

/// A node's measured utilisation at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadSample {
    /// Share of the node's cpu in use, `0..=1`.
    pub cpu: f64,
    /// Share of the node's memory in use, `0..=1`.
    pub memory: f64,
    /// When it was measured, on the scheduler's clock.
    pub taken_at: Duration,
    /// Pods placed before this moment show in the sample; pods placed since do not yet (a
    /// rate over a window, a scrape interval and container start-up all delay them).
    pub reflects_placements_before: Duration,
    /// Age beyond which the sample is stale; `None` for a sample that never goes stale (a
    /// simulation, whose input describes the simulated moment).
    pub max_age: Option<Duration>,
}

impl LoadSample {
    /// True while the sample is no older than its `max_age` at `now`.
    pub fn is_fresh(&self, now: Duration) -> bool {
        self.max_age
            .is_none_or(|max| now.saturating_sub(self.taken_at) <= max)
    }
}

/// A pod placed on a node after the node's latest sample could reflect it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecentPlacement {
    /// The pod.
    pub pod: Arc<PodInfo>,
    /// When the scheduler placed it, on its clock.
    pub placed_at: Duration,
}

/// What the core knows of a node's real load: the latest sample and the placements since.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeLoad {
    /// The latest sample.
    pub sample: LoadSample,
    /// Pods placed by this scheduler that the sample does not reflect yet.
    pub recent: Vec<RecentPlacement>,
}

impl NodeLoad {
    /// Load known only from `sample`.
    pub fn new(sample: LoadSample) -> Self {
        NodeLoad {
            sample,
            recent: Vec::new(),
        }
    }

    /// Takes a newer sample; one measured before the held sample is ignored (false). The
    /// placements the new sample reflects stop counting as recent.
    pub fn update(&mut self, sample: LoadSample) -> bool {
        if sample.taken_at < self.sample.taken_at {
            return false;
        }
        self.sample = sample;
        let cutoff = sample.reflects_placements_before;
        self.recent.retain(|r| r.placed_at >= cutoff);
        true
    }

    /// Notes a pod just placed on the node.
    pub fn note_placement(&mut self, pod: Arc<PodInfo>, placed_at: Duration) {
        self.forget(&pod.namespace, &pod.name);
        self.recent.push(RecentPlacement { pod, placed_at });
    }

    /// Forgets the recent placement of `namespace/name` (the pod left, or its binding
    /// failed); false when it was not recent.
    pub fn forget(&mut self, namespace: &str, name: &str) -> bool {
        let before = self.recent.len();
        self.recent
            .retain(|r| r.pod.namespace != namespace || r.pod.name != name);
        self.recent.len() != before
    }

    /// True when `namespace/name` is among the recent placements.
    pub fn is_recent(&self, namespace: &str, name: &str) -> bool {
        self.recent
            .iter()
            .any(|r| r.pod.namespace == namespace && r.pod.name == name)
    }
}

/// Load read from a node's annotations, as an external agent writes them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AnnotatedLoad {
    /// `gantry.io/cpu-utilization`.
    pub cpu: f64,
    /// `gantry.io/memory-utilization`.
    pub memory: f64,
    /// `gantry.io/metrics-timestamp`, when present.
    pub timestamp: Option<SystemTime>,
}

/// Reads the load annotations of a node: `None` when it has neither utilisation annotation;
/// an error, naming the annotation, when only one is set or a value is malformed (not a
/// fraction `0..=1`, or a timestamp that is not RFC 3339).
pub fn load_from_annotations(annotations: &Labels) -> Result<Option<AnnotatedLoad>, String> {
    let cpu = annotations.get(CPU_UTILIZATION_ANNOTATION);
    let memory = annotations.get(MEMORY_UTILIZATION_ANNOTATION);
    let (cpu, memory) = match (cpu, memory) {
        (None, None) => return Ok(None),
        (Some(c), Some(m)) => (
            fraction(CPU_UTILIZATION_ANNOTATION, c)?,
            fraction(MEMORY_UTILIZATION_ANNOTATION, m)?,
        ),
        (Some(_), None) => {
            return Err(format!(
                "annotation {MEMORY_UTILIZATION_ANNOTATION}: must be set with {CPU_UTILIZATION_ANNOTATION}"
            ));
        }
        (None, Some(_)) => {
            return Err(format!(
                "annotation {CPU_UTILIZATION_ANNOTATION}: must be set with {MEMORY_UTILIZATION_ANNOTATION}"
            ));
        }
    };
    let timestamp = annotations
        .get(METRICS_TIMESTAMP_ANNOTATION)
        .map(|t| {
            t.trim()
                .parse::<jiff::Timestamp>()
                .map(SystemTime::from)
                .map_err(|e| {
                    format!(
                        "annotation {METRICS_TIMESTAMP_ANNOTATION}: {} is not an RFC 3339 time: {}",
                        echo(t),
                        bound_message(&e.to_string())
                    )
                })
        })
        .transpose()?;
    Ok(Some(AnnotatedLoad {
        cpu,
        memory,
        timestamp,
    }))
}

fn fraction(annotation: &str, value: &str) -> Result<f64, String> {
    let f: f64 = value
        .trim()
        .parse()
        .map_err(|_| format!("annotation {annotation}: {} is not a number", echo(value)))?;
    if !(0.0..=1.0).contains(&f) {
        return Err(format!(
            "annotation {annotation}: must be a fraction between 0 and 1, got {}",
            echo_name(value)
        ));
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;

    fn sample(taken_at: u64, reflects: u64, max_age: Option<u64>) -> LoadSample {
        LoadSample {
            cpu: 0.5,
            memory: 0.25,
            taken_at: Duration::from_secs(taken_at),
            reflects_placements_before: Duration::from_secs(reflects),
            max_age: max_age.map(Duration::from_secs),
        }
    }

    #[test]
    fn a_sample_is_fresh_up_to_its_max_age_inclusive() {
        let s = sample(100, 100, Some(30));
        assert!(s.is_fresh(Duration::from_secs(100)));
        assert!(s.is_fresh(Duration::from_secs(130)));
        assert!(!s.is_fresh(Duration::from_secs(131)));
        // A clock behind the sample (skew) counts as age zero.
        assert!(s.is_fresh(Duration::from_secs(50)));
        let forever = sample(0, 0, None);
        assert!(forever.is_fresh(Duration::from_secs(1_000_000)));
    }

    #[test]
    fn a_newer_sample_drops_the_placements_it_reflects() {
        let mut load = NodeLoad::new(sample(10, 10, None));
        load.note_placement(pod("a").build(), Duration::from_secs(12));
        load.note_placement(pod("b").build(), Duration::from_secs(15));
        // Placed at 12 and 15; a sample reflecting placements before 15 keeps only b.
        assert!(load.update(sample(20, 15, None)));
        assert!(!load.is_recent("default", "a"));
        assert!(load.is_recent("default", "b"));
        // An older sample arriving late changes nothing.
        assert!(!load.update(sample(19, 19, None)));
        assert!(load.is_recent("default", "b"));
        assert_eq!(load.sample.taken_at, Duration::from_secs(20));
    }

    #[test]
    fn placements_are_noted_once_and_forgotten() {
        let mut load = NodeLoad::new(sample(0, 0, None));
        let a = pod("a").build();
        load.note_placement(a.clone(), Duration::from_secs(1));
        load.note_placement(a, Duration::from_secs(2));
        assert_eq!(load.recent.len(), 1);
        assert_eq!(load.recent[0].placed_at, Duration::from_secs(2));
        assert!(load.forget("default", "a"));
        assert!(!load.forget("default", "a"));
        assert!(load.recent.is_empty());
    }

    fn annotations(pairs: &[(&str, &str)]) -> Labels {
        pairs.iter().copied().collect()
    }

    #[test]
    fn annotations_give_fractions_and_the_time() {
        let a = annotations(&[
            (CPU_UTILIZATION_ANNOTATION, "0.42"),
            (MEMORY_UTILIZATION_ANNOTATION, "1"),
            (METRICS_TIMESTAMP_ANNOTATION, "2024-05-01T10:00:00Z"),
        ]);
        let load = load_from_annotations(&a).unwrap().unwrap();
        assert_eq!((load.cpu, load.memory), (0.42, 1.0));
        let expected = SystemTime::UNIX_EPOCH + Duration::from_secs(1_714_557_600);
        assert_eq!(load.timestamp, Some(expected));
        let offset = annotations(&[
            (CPU_UTILIZATION_ANNOTATION, "0"),
            (MEMORY_UTILIZATION_ANNOTATION, "0.5"),
            (METRICS_TIMESTAMP_ANNOTATION, "2024-05-01T12:00:00+02:00"),
        ]);
        let load = load_from_annotations(&offset).unwrap().unwrap();
        assert_eq!(load.timestamp, Some(expected));
        assert_eq!(load_from_annotations(&Labels::default()), Ok(None));
    }

    #[test]
    fn malformed_annotations_are_named() {
        let cases = [
            (
                vec![(CPU_UTILIZATION_ANNOTATION, "0.5")],
                "annotation gantry.io/memory-utilization: must be set with gantry.io/cpu-utilization",
            ),
            (
                vec![(MEMORY_UTILIZATION_ANNOTATION, "0.5")],
                "annotation gantry.io/cpu-utilization: must be set with gantry.io/memory-utilization",
            ),
            (
                vec![
                    (CPU_UTILIZATION_ANNOTATION, "high"),
                    (MEMORY_UTILIZATION_ANNOTATION, "0.5"),
                ],
                "annotation gantry.io/cpu-utilization: \"high\" is not a number",
            ),
            (
                vec![
                    (CPU_UTILIZATION_ANNOTATION, "0.5"),
                    (MEMORY_UTILIZATION_ANNOTATION, "1.01"),
                ],
                "annotation gantry.io/memory-utilization: must be a fraction between 0 and 1, got 1.01",
            ),
            (
                vec![
                    (CPU_UTILIZATION_ANNOTATION, "-0.1"),
                    (MEMORY_UTILIZATION_ANNOTATION, "0.5"),
                ],
                "annotation gantry.io/cpu-utilization: must be a fraction between 0 and 1, got -0.1",
            ),
            (
                vec![
                    (CPU_UTILIZATION_ANNOTATION, "NaN"),
                    (MEMORY_UTILIZATION_ANNOTATION, "0.5"),
                ],
                "annotation gantry.io/cpu-utilization: must be a fraction between 0 and 1, got NaN",
            ),
        ];
        for (pairs, expected) in cases {
            assert_eq!(
                load_from_annotations(&annotations(&pairs)),
                Err(expected.to_string())
            );
        }
        let bad_time = annotations(&[
            (CPU_UTILIZATION_ANNOTATION, "0.5"),
            (MEMORY_UTILIZATION_ANNOTATION, "0.5"),
            (METRICS_TIMESTAMP_ANNOTATION, "yesterday"),
        ]);
        let err = load_from_annotations(&bad_time).unwrap_err();
        assert!(
            err.starts_with(
                "annotation gantry.io/metrics-timestamp: \"yesterday\" is not an RFC 3339 time"
            ),
            "{err}"
        );
    }
}
