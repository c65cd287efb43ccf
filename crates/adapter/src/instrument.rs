//! Timing of plugins and extension points, for kube-scheduler's
//! `scheduler_framework_extension_point_duration_seconds` and
//! `scheduler_plugin_execution_duration_seconds`, and the count of their runs,
//! `scheduler_plugin_evaluation_total`.
//!
//! The core reads no clock: its runners tell each profile's [`Observer`] what the plugins
//! do, and the one here reads the clock for them and records it. Nothing wraps a plugin, so
//! every method of every plugin trait reaches the plugin itself in `gantry run` as in
//! `gantry simulate`. Like kube-scheduler, it times every extension point of every cycle,
//! but individual plugin calls only in one cycle out of ten (Filter and Score run once per
//! node, and timing them all would cost more than the plugins themselves). Runs at
//! PreFilter, Filter, PreScore and Score are counted in every cycle, as kube-scheduler
//! counts them: each call (each node examined, at Filter and Score), a PreFilter or
//! PreScore that skips itself not counted. The cycle knows some verdicts and scores without
//! calling the plugin (a plugin that accepts every node, a score the same on every node,
//! answers kept from an earlier pod of the same requests): those count as runs too, as the
//! runners tell them, but have no duration, since nothing ran.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;

use super::batch_histogram::BatchHistogram;
use super::metrics::Metrics;
use gantry_core::framework::{Code, Observer, Plugin, Point, Profile};

/// One cycle in this many has its plugin calls timed (kube-scheduler's 10%).
const PLUGIN_SAMPLE_EVERY: u64 = 10;

/// State shared by the observers of all profiles. Cycles run one at a time, on the
/// scheduling thread; only Filter and Score calls fan out to the thread pool.
pub struct Instrumentation {
    metrics: Arc<Metrics>,
    /// Whether this cycle's plugin calls are timed.
    sampled: AtomicBool,
    cycles: AtomicU64,
    /// The observers' clock starts here.
    epoch: Instant,
}

impl Instrumentation {
    /// Instrumentation recording into `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Instrumentation {
            metrics,
            sampled: AtomicBool::new(false),
            cycles: AtomicU64::new(0),
            epoch: Instant::now(),
        })
    }

    /// Called before each scheduling cycle: decides whether the cycle's plugin calls are
    /// timed.
    pub fn begin_cycle(&self) {
        let n = self.cycles.fetch_add(1, Ordering::Relaxed);
        self.sampled
            .store(n.is_multiple_of(PLUGIN_SAMPLE_EVERY), Ordering::Relaxed);
    }

    /// `profile`, its plugins untouched, observed by this instrumentation.
    pub fn instrument(self: &Arc<Self>, profile: &Profile) -> Profile {
        let name: Arc<str> = Arc::from(profile.scheduler_name.as_str());
        let points = plugins_by_point(profile);
        let evaluations = points
            .iter()
            .filter(|(_, point)| counts_runs(*point))
            .map(|&(plugin, point)| {
                let counter = self.metrics.evaluations(plugin, point.label(), &name);
                (plugin, point, counter)
            })
            .collect();
        let successes = points
            .iter()
            .flat_map(|&(plugin, point)| {
                let second = match point {
                    Point::Score => Some(Point::Normalize),
                    Point::Reserve => Some(Point::Unreserve),
                    _ => None,
                };
                std::iter::once(point)
                    .chain(second)
                    .map(move |p| (plugin, p))
            })
            .map(|(plugin, point)| (plugin, point, OnceLock::new()))
            .collect();
        Profile {
            observer: Arc::new(ProfileObserver {
                instr: self.clone(),
                profile: name,
                evaluations,
                successes,
            }),
            ..profile.clone()
        }
    }
}

/// Each plugin of `profile` at each extension point it implements, of those timed.
fn plugins_by_point(profile: &Profile) -> Vec<(&'static str, Point)> {
    let mut out = Vec::new();
    let mut add = |plugins: &[Arc<dyn Plugin>], point: Point, has: fn(&dyn Plugin) -> bool| {
        out.extend(
            plugins
                .iter()
                .filter(|p| has(&***p))
                .map(|p| (p.name(), point)),
        );
    };
    add(&profile.pre_filter, Point::PreFilter, |p| {
        p.as_pre_filter().is_some()
    });
    add(&profile.filter, Point::Filter, |p| p.as_filter().is_some());
    add(&profile.post_filter, Point::PostFilter, |p| {
        p.as_post_filter().is_some()
    });
    add(&profile.pre_score, Point::PreScore, |p| {
        p.as_pre_score().is_some()
    });
    let scores: Vec<Arc<dyn Plugin>> = profile.score.iter().map(|(p, _)| p.clone()).collect();
    add(&scores, Point::Score, |p| p.as_score().is_some());
    add(&profile.reserve, Point::Reserve, |p| {
        p.as_reserve().is_some()
    });
    add(&profile.permit, Point::Permit, |p| p.as_permit().is_some());
    out
}

/// Whether kube-scheduler counts a plugin's runs at `point`.
fn counts_runs(point: Point) -> bool {
    matches!(
        point,
        Point::PreFilter | Point::Filter | Point::PreScore | Point::Score
    )
}

/// What one profile's runners tell, recorded in kube-scheduler's metrics.
struct ProfileObserver {
    instr: Arc<Instrumentation>,
    profile: Arc<str>,
    /// Each plugin's runs, at the points where kube-scheduler counts them.
    evaluations: Vec<(&'static str, Point, Counter)>,
    /// The series of each plugin's successful calls at each point, looked up at the first:
    /// Filter and Score are timed for every node of a sampled cycle, and most calls
    /// succeed.
    successes: Vec<(&'static str, Point, OnceLock<BatchHistogram>)>,
}

impl std::fmt::Debug for ProfileObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProfileObserver")
            .field("profile", &self.profile)
            .finish_non_exhaustive()
    }
}

impl Observer for ProfileObserver {
    fn sampled(&self) -> bool {
        self.instr.sampled.load(Ordering::Relaxed)
    }

    fn now(&self) -> Duration {
        self.instr.epoch.elapsed()
    }

    fn plugin_calls(
        &self,
        plugin: &'static str,
        point: Point,
        code: Code,
        each: Duration,
        calls: u64,
    ) {
        // No call, no series: a series appears with its first observation, as in
        // kube-scheduler.
        if calls == 0 {
            return;
        }
        let metrics = &self.instr.metrics;
        let success = (code == Code::Success)
            .then(|| {
                self.successes
                    .iter()
                    .find(|(p, at, _)| *p == plugin && *at == point)
            })
            .flatten();
        match success {
            Some((_, _, series)) => series
                .get_or_init(|| metrics.plugin_series(plugin, point.label(), Code::Success))
                .observe_many(each.as_secs_f64(), calls),
            None => metrics.plugin_calls(plugin, point.label(), code, each, calls),
        }
    }

    fn runs(&self, plugin: &'static str, point: Point, runs: u64) {
        // kube-scheduler counts every run of its PostFilter, whatever it finds.
        if point == Point::PostFilter && plugin == gantry_core::plugins::default_preemption::NAME {
            for _ in 0..runs {
                self.instr.metrics.preemption_attempt();
            }
        }
        if let Some((_, _, counter)) = self
            .evaluations
            .iter()
            .find(|(p, at, _)| *p == plugin && *at == point)
        {
            counter.inc_by(runs);
        }
    }

    fn extension_point(&self, point: Point, code: Code, elapsed: Duration) {
        self.instr
            .metrics
            .extension_point(point.label(), code, &self.profile, elapsed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_core::config::Config;
    use gantry_core::plugins;
    use gantry_core::scheduler::{Attempt, Scheduler};
    use gantry_core::testing::{node, pod};

    #[test]
    fn a_plugin_that_examines_no_node_gets_no_series() {
        let metrics = Arc::new(Metrics::new());
        let instr = Instrumentation::new(metrics.clone());
        let mut s = Scheduler::new(instrumented(&instr), None);
        s.upsert_node(node("n0").capacity("1", "4Gi").build(), Duration::ZERO);
        s.upsert_pod(pod("p").req("cpu", "2").build(), Duration::ZERO)
            .unwrap();
        instr.begin_cycle();
        assert!(matches!(
            s.schedule_next(Duration::ZERO),
            Some(Attempt::Unschedulable { .. })
        ));
        let text = metrics.text();
        let counts: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("scheduler_plugin_execution_duration_seconds_count"))
            .collect();
        assert!(
            counts
                .iter()
                .any(|l| l.contains("NodeResourcesFit") && l.ends_with(" 1")),
            "{text}"
        );
        // The filters after NodeResourcesFit saw the node already rejected: no call, and
        // so no series (not one with a count of zero).
        assert!(counts.iter().all(|l| !l.ends_with(" 0")), "{text}");
    }

    #[test]
    fn every_run_of_default_preemption_counts_as_a_preemption_attempt() {
        let metrics = Arc::new(Metrics::new());
        let instr = Instrumentation::new(metrics.clone());
        let config = Config::parse(
            "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- plugins:
    multiPoint:
      enabled: [{name: DefaultPreemption}]
",
            &plugins::registry(),
        )
        .expect("config");
        let mut config = config;
        config.profiles = config
            .profiles
            .iter()
            .map(|p| instr.instrument(p))
            .collect();
        let mut s = Scheduler::new(config, None);
        s.upsert_node(node("n0").capacity("1", "4Gi").build(), Duration::ZERO);
        s.upsert_pod(pod("low").req("cpu", "1").on("n0").build(), Duration::ZERO)
            .unwrap();
        // One that can preempt, one too big for any node: both runs count.
        s.upsert_pod(
            pod("high").req("cpu", "1").priority(10).build(),
            Duration::ZERO,
        )
        .unwrap();
        s.upsert_pod(
            pod("huge").req("cpu", "2").priority(10).build(),
            Duration::ZERO,
        )
        .unwrap();
        for _ in 0..2 {
            instr.begin_cycle();
            assert!(matches!(
                s.schedule_next(Duration::ZERO),
                Some(Attempt::Unschedulable { .. })
            ));
        }
        let text = metrics.text();
        assert!(
            text.contains("scheduler_preemption_attempts_total 2"),
            "{text}"
        );
    }

    /// The count line of the plugin duration histogram for these labels.
    fn plugin_calls(text: &str, plugin: &str, point: &str, status: &str) -> Option<u64> {
        let labels =
            format!("{{plugin=\"{plugin}\",extension_point=\"{point}\",status=\"{status}\"}}");
        text.lines()
            .filter(|l| l.starts_with("scheduler_plugin_execution_duration_seconds_count"))
            .find(|l| l.contains(&labels))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }

    /// The default configuration with every profile instrumented by `instr`.
    fn instrumented(instr: &Arc<Instrumentation>) -> Config {
        let mut config = Config::default_with(&plugins::registry()).expect("defaults");
        config.profiles = config
            .profiles
            .iter()
            .map(|p| instr.instrument(p))
            .collect();
        config
    }

    /// A scheduler of `instr`'s profiles with nodes of 1, 2 and 4 cpus.
    fn three_nodes(instr: &Arc<Instrumentation>) -> Scheduler {
        let mut s = Scheduler::new(instrumented(instr), None);
        for (i, cpu) in ["1", "2", "4"].iter().enumerate() {
            s.upsert_node(
                node(&format!("n{i}")).capacity(cpu, "4Gi").build(),
                Duration::ZERO,
            );
        }
        s
    }

    #[test]
    fn a_sampled_cycle_counts_one_call_per_node_with_its_own_code() {
        let metrics = Arc::new(Metrics::new());
        let instr = Instrumentation::new(metrics.clone());
        let mut s = three_nodes(&instr);
        s.upsert_pod(pod("p").req("cpu", "1500m").build(), Duration::ZERO)
            .unwrap();
        instr.begin_cycle(); // the first cycle is sampled
        assert!(matches!(
            s.schedule_next(Duration::ZERO),
            Some(Attempt::Scheduled(..))
        ));
        let text = metrics.text();
        let calls = |plugin, point, status| plugin_calls(&text, plugin, point, status);
        assert_eq!(calls("NodeResourcesFit", "Filter", "Success"), Some(2));
        // n0's whole allocatable is short of the request.
        assert_eq!(
            calls("NodeResourcesFit", "Filter", "UnschedulableAndUnresolvable"),
            Some(1)
        );
        // The two feasible nodes, then the same two again for the decision log's
        // per-plugin columns of the best nodes.
        assert_eq!(calls("NodeResourcesFit", "Score", "Success"), Some(4));
        // No node is tainted: the cycle knows TaintToleration accepts every node and gives
        // each the same score, and does not call it. Nothing ran, so nothing is timed; the
        // runs are counted all the same (see the next test).
        assert_eq!(calls("TaintToleration", "Filter", "Success"), None);
        assert_eq!(calls("TaintToleration", "Score", "Success"), None);
    }

    #[test]
    fn every_cycle_counts_each_plugin_run_sampled_or_not() {
        let metrics = Arc::new(Metrics::new());
        let instr = Instrumentation::new(metrics.clone());
        let mut s = three_nodes(&instr);
        let evaluations = |plugin: &str, point: &str| {
            let series = format!(
                "scheduler_plugin_evaluation_total{{plugin=\"{plugin}\",extension_point=\"{point}\",profile=\"default-scheduler\"}}"
            );
            let text = metrics.text();
            text.lines()
                .find_map(|l| l.strip_prefix(series.as_str())?.strip_prefix(' '))
                .and_then(|v| v.parse::<f64>().ok())
        };
        // The series exist before any run, as kube-scheduler's do.
        assert_eq!(evaluations("NodeResourcesFit", "Filter"), Some(0.0));
        for i in 0..2 {
            s.upsert_pod(
                pod(&format!("p{i}")).req("cpu", "500m").build(),
                Duration::ZERO,
            )
            .unwrap();
            instr.begin_cycle(); // the first sampled, the second not
            match s.schedule_next(Duration::ZERO) {
                Some(Attempt::Scheduled(task, _)) => {
                    s.binding_succeeded(&task, Duration::ZERO).unwrap();
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(evaluations("NodeResourcesFit", "PreFilter"), Some(2.0));
        // Every node examined, in both cycles: the second pod asks what the first asked,
        // and the cycle kept NodeResourcesFit's answers on the nodes that did not change.
        assert_eq!(evaluations("NodeResourcesFit", "Filter"), Some(6.0));
        assert_eq!(evaluations("NodeResourcesFit", "Score"), Some(6.0));
        // The cycle never calls TaintToleration with no node tainted, and counts its runs
        // as kube-scheduler, who calls it, would.
        assert_eq!(evaluations("TaintToleration", "Filter"), Some(6.0));
        assert_eq!(evaluations("TaintToleration", "Score"), Some(6.0));
        assert_eq!(evaluations("NodeUnschedulable", "Filter"), Some(6.0));
    }

    #[test]
    fn a_filter_plugin_counts_the_nodes_no_earlier_plugin_rejected() {
        let metrics = Arc::new(Metrics::new());
        let instr = Instrumentation::new(metrics.clone());
        let mut s = Scheduler::new(instrumented(&instr), None);
        let nodes = [
            node("cordoned").capacity("4", "8Gi").unschedulable(),
            node("tainted")
                .capacity("4", "8Gi")
                .taint("dedicated", "gpu", "NoSchedule"),
            node("small").capacity("1", "8Gi"),
            node("a").capacity("4", "8Gi"),
            node("b").capacity("4", "8Gi"),
        ];
        for n in nodes {
            s.upsert_node(n.build(), Duration::ZERO);
        }
        s.upsert_pod(pod("p").req("cpu", "2").build(), Duration::ZERO)
            .unwrap();
        instr.begin_cycle();
        assert!(matches!(
            s.schedule_next(Duration::ZERO),
            Some(Attempt::Scheduled(..))
        ));
        let text = metrics.text();
        let evaluations = |plugin: &str, point: &str| {
            let series = format!(
                "scheduler_plugin_evaluation_total{{plugin=\"{plugin}\",extension_point=\"{point}\",profile=\"default-scheduler\"}}"
            );
            text.lines()
                .find_map(|l| l.strip_prefix(series.as_str())?.strip_prefix(' '))
                .and_then(|v| v.parse::<f64>().ok())
        };
        // In the default order: NodeName and NodeUnschedulable see every node,
        // TaintToleration all but the cordoned one, NodeResourcesFit the three untainted.
        // The filters after it skipped themselves at PreFilter (the pod has no volume, no
        // affinity, no spread): they count no run.
        assert_eq!(
            evaluations("NodeUnschedulable", "Filter"),
            Some(5.0),
            "{text}"
        );
        assert_eq!(evaluations("NodeName", "Filter"), Some(5.0), "{text}");
        assert_eq!(
            evaluations("TaintToleration", "Filter"),
            Some(4.0),
            "{text}"
        );
        assert_eq!(
            evaluations("NodeResourcesFit", "Filter"),
            Some(3.0),
            "{text}"
        );
        assert_eq!(
            evaluations("VolumeRestrictions", "Filter"),
            Some(0.0),
            "{text}"
        );
        assert_eq!(
            evaluations("NodeResourcesFit", "Score"),
            Some(2.0),
            "{text}"
        );
        assert_eq!(evaluations("TaintToleration", "Score"), Some(2.0), "{text}");
    }

    #[test]
    fn instrumented_profiles_schedule_alike_and_record_durations() {
        let metrics = Arc::new(Metrics::new());
        let instr = Instrumentation::new(metrics.clone());
        let plain = Config::default_with(&plugins::registry()).expect("defaults");
        let mut timed = Scheduler::new(instrumented(&instr), None);
        let mut reference = Scheduler::new(plain, None);
        for s in [&mut timed, &mut reference] {
            for (i, cpu) in ["1", "2", "4"].iter().enumerate() {
                s.upsert_node(
                    node(&format!("n{i}")).capacity(cpu, "4Gi").build(),
                    Duration::ZERO,
                );
            }
            for i in 0..16 {
                s.upsert_pod(
                    pod(&format!("p{i}")).req("cpu", "500m").build(),
                    Duration::ZERO,
                )
                .unwrap();
            }
        }
        let mut placements = Vec::new();
        for s in [&mut timed, &mut reference] {
            let mut placed = Vec::new();
            loop {
                instr.begin_cycle();
                match s.schedule_next(Duration::ZERO) {
                    Some(Attempt::Scheduled(task, _)) => {
                        placed.push(task.plan.node.to_string());
                        s.binding_succeeded(&task, Duration::ZERO).unwrap();
                    }
                    Some(_) => placed.push("-".to_string()),
                    None => break,
                }
            }
            placements.push(placed);
        }
        assert_eq!(placements[0], placements[1]);
        assert!(
            placements[0].contains(&"-".to_string()),
            "some pods do not fit"
        );
        let text = metrics.text();
        for expected in [
            "extension_point=\"PreFilter\",status=\"Success\",profile=\"default-scheduler\"",
            "extension_point=\"PreScore\",status=\"Success\",profile=\"default-scheduler\"",
            "extension_point=\"Score\",status=\"Success\",profile=\"default-scheduler\"",
            "plugin=\"NodeResourcesFit\",extension_point=\"Filter\"",
            "plugin=\"NodeResourcesFit\",extension_point=\"Score\"",
            "plugin=\"TaintToleration\",extension_point=\"ScoreExtensionNormalize\"",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in\n{text}");
        }
    }

    #[test]
    fn an_instrumented_profile_runs_the_very_plugins_it_was_given() {
        // Timing is the runners' (the profile's observer), not a wrapper's: every method
        // of every plugin trait, each hint and shortcut the cycle asks for among them,
        // reaches the plugin itself. A wrapper put back in their place fails here.
        let instr = Instrumentation::new(Arc::new(Metrics::new()));
        let config = Config::default_with(&plugins::registry()).expect("defaults");
        let plain = &config.profiles[0];
        let observed = instr.instrument(plain);
        let same = |a: &[Arc<dyn Plugin>], b: &[Arc<dyn Plugin>]| {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| Arc::ptr_eq(a, b))
        };
        assert!(Arc::ptr_eq(&plain.queue_sort, &observed.queue_sort));
        for (a, b) in [
            (&plain.pre_enqueue, &observed.pre_enqueue),
            (&plain.pre_filter, &observed.pre_filter),
            (&plain.filter, &observed.filter),
            (&plain.post_filter, &observed.post_filter),
            (&plain.pre_score, &observed.pre_score),
            (&plain.reserve, &observed.reserve),
            (&plain.permit, &observed.permit),
            (&plain.pre_bind, &observed.pre_bind),
            (&plain.bind, &observed.bind),
            (&plain.post_bind, &observed.post_bind),
        ] {
            assert!(same(a, b));
        }
        assert_eq!(plain.score.len(), observed.score.len());
        for ((a, wa), (b, wb)) in plain.score.iter().zip(&observed.score) {
            assert!(Arc::ptr_eq(a, b) && wa == wb);
        }
        assert!(format!("{:?}", observed.observer).contains("ProfileObserver"));
    }
}
