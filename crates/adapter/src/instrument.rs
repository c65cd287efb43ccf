//! Timing of plugins and extension points, for kube-scheduler's
//! `scheduler_framework_extension_point_duration_seconds` and
//! `scheduler_plugin_execution_duration_seconds`, and the count of their runs,
//! `scheduler_plugin_evaluation_total`.
//!
//! The core reads no clock, so the adapter wraps each plugin of a profile in a [`Timed`]
//! plugin that measures its calls and delegates everything else. Like kube-scheduler, it
//! times every extension point of every cycle, but individual plugin calls only in one cycle
//! out of ten (Filter and Score run once per node, and timing them all would cost more than
//! the plugins themselves). Runs at PreFilter, Filter, PreScore and Score are counted in
//! every cycle, as kube-scheduler counts them: each call (each node examined, at Filter and
//! Score), a PreFilter or PreScore that skips itself not counted. The cycle knows some
//! verdicts and scores without calling the plugin (a plugin that accepts every node, a
//! score the same on every node, answers kept from an earlier pod of the same requests):
//! those count as runs too, as the cycle tells them ([`FilterPlugin::filtered`],
//! [`ScorePlugin::scored`]), but have no duration, since nothing ran.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;

use super::batch_histogram::BatchHistogram;
use super::metrics::Metrics;
use gantry_core::cache::{NodeInfo, Snapshot};
use gantry_core::framework::{
    Code, CycleState, DomainScores, DomainVerdict, FilterPlugin, NodeBlock, NodeScore,
    NominatedPods, PermitPlugin, Plugin, PostFilterInput, PostFilterPlugin, PostFilterResult,
    PreFilterPlugin, PreFilterResult, PreScorePlugin, PreemptionCandidate, Profile, ReservePlugin,
    ScorePlugin, Status, WaitingPods,
};
use gantry_core::model::PodInfo;

/// One cycle in this many has its plugin calls timed (kube-scheduler's 10%).
const PLUGIN_SAMPLE_EVERY: u64 = 10;

/// The extension points gantry times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Point {
    PreFilter,
    Filter,
    PostFilter,
    PreScore,
    Score,
    Reserve,
    Permit,
}

impl Point {
    /// The extension point labels a wrapper at this point times plugin calls under: its
    /// own, and the one of the second call it times (Score's normalization, Reserve's
    /// Unreserve), or its own again.
    fn timed_labels(self) -> [&'static str; 2] {
        match self {
            Point::Score => ["Score", "ScoreExtensionNormalize"],
            Point::Reserve => ["Reserve", "Unreserve"],
            p => [p.label(), p.label()],
        }
    }

    /// Whether kube-scheduler counts a plugin's runs at this point.
    fn evaluated(self) -> bool {
        matches!(
            self,
            Point::PreFilter | Point::Filter | Point::PreScore | Point::Score
        )
    }

    fn label(self) -> &'static str {
        match self {
            Point::PreFilter => "PreFilter",
            Point::Filter => "Filter",
            Point::PostFilter => "PostFilter",
            Point::PreScore => "PreScore",
            Point::Score => "Score",
            Point::Reserve => "Reserve",
            Point::Permit => "Permit",
        }
    }
}

/// State shared by all the wrappers of all profiles. Cycles run one at a time, on the
/// scheduling thread; only Filter and Score calls fan out to the thread pool.
pub struct Instrumentation {
    metrics: Arc<Metrics>,
    /// Whether this cycle's plugin calls are timed.
    sampled: AtomicBool,
    cycles: AtomicU64,
    /// The start of this cycle's Score phase, in nanoseconds since `epoch` (0 before it).
    score_start: AtomicU64,
    epoch: Instant,
    /// Score plugins whose PreScore skipped them this cycle.
    skipped_scores: Mutex<Vec<&'static str>>,
}

impl Instrumentation {
    /// Instrumentation recording into `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Instrumentation {
            metrics,
            sampled: AtomicBool::new(false),
            cycles: AtomicU64::new(0),
            score_start: AtomicU64::new(0),
            epoch: Instant::now(),
            skipped_scores: Mutex::new(Vec::new()),
        })
    }

    /// Called before each scheduling cycle: resets per-cycle state and decides whether the
    /// cycle's plugin calls are timed.
    pub fn begin_cycle(&self) {
        let n = self.cycles.fetch_add(1, Ordering::Relaxed);
        self.sampled
            .store(n.is_multiple_of(PLUGIN_SAMPLE_EVERY), Ordering::Relaxed);
        self.score_start.store(0, Ordering::Relaxed);
        lock(&self.skipped_scores).clear();
    }

    fn sampled(&self) -> bool {
        self.sampled.load(Ordering::Relaxed)
    }

    /// `profile` with every plugin at a timed extension point wrapped.
    pub fn instrument(self: &Arc<Self>, profile: &Profile) -> Profile {
        let name: Arc<str> = Arc::from(profile.scheduler_name.as_str());
        let evaluations = |plugin: &Arc<dyn Plugin>, point: Point| {
            point.evaluated().then(|| {
                self.metrics
                    .evaluations(plugin.name(), point.label(), &name)
            })
        };
        let wrap = |plugins: &[Arc<dyn Plugin>], point: Point, has: fn(&dyn Plugin) -> bool| {
            let positions: Vec<usize> = (0..plugins.len()).filter(|&i| has(&*plugins[i])).collect();
            let sequence = Arc::new(Sequence::default());
            plugins
                .iter()
                .enumerate()
                .map(|(i, p)| -> Arc<dyn Plugin> {
                    let evaluated = has(&**p).then(|| evaluations(p, point)).flatten();
                    Arc::new(Timed {
                        inner: p.clone(),
                        evaluations: evaluated,
                        point,
                        profile: name.clone(),
                        instr: self.clone(),
                        first: positions.first() == Some(&i),
                        last: positions.last() == Some(&i),
                        sequence: sequence.clone(),
                        later_scores: Vec::new(),
                        successes: point.timed_labels().map(|l| (l, OnceLock::new())),
                    })
                })
                .collect::<Vec<_>>()
        };
        let score_names: Vec<&'static str> = profile
            .score
            .iter()
            .filter(|(p, _)| p.as_score().is_some())
            .map(|(p, _)| p.name())
            .collect();
        let sequence = Arc::new(Sequence::default());
        let score = profile
            .score
            .iter()
            .map(|(p, w)| -> (Arc<dyn Plugin>, i64) {
                let later = score_names
                    .iter()
                    .skip_while(|n| **n != p.name())
                    .skip(1)
                    .copied()
                    .collect();
                let evaluated = p.as_score().and_then(|_| evaluations(p, Point::Score));
                let timed = Timed {
                    inner: p.clone(),
                    evaluations: evaluated,
                    point: Point::Score,
                    profile: name.clone(),
                    instr: self.clone(),
                    first: false,
                    last: false,
                    sequence: sequence.clone(),
                    later_scores: later,
                    successes: Point::Score.timed_labels().map(|l| (l, OnceLock::new())),
                };
                (Arc::new(timed), *w)
            })
            .collect();
        Profile {
            pre_filter: wrap(&profile.pre_filter, Point::PreFilter, |p| {
                p.as_pre_filter().is_some()
            }),
            filter: wrap(&profile.filter, Point::Filter, |p| p.as_filter().is_some()),
            post_filter: wrap(&profile.post_filter, Point::PostFilter, |p| {
                p.as_post_filter().is_some()
            }),
            pre_score: wrap(&profile.pre_score, Point::PreScore, |p| {
                p.as_pre_score().is_some()
            }),
            score,
            reserve: wrap(&profile.reserve, Point::Reserve, |p| {
                p.as_reserve().is_some()
            }),
            permit: wrap(&profile.permit, Point::Permit, |p| p.as_permit().is_some()),
            ..profile.clone()
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// When the plugins of one sequential extension point started running this cycle.
#[derive(Default)]
struct Sequence {
    start: Mutex<Option<Instant>>,
}

/// A plugin with its calls at one extension point timed.
struct Timed {
    inner: Arc<dyn Plugin>,
    /// Its runs at its point, where kube-scheduler counts them.
    evaluations: Option<Counter>,
    point: Point,
    profile: Arc<str>,
    instr: Arc<Instrumentation>,
    /// First plugin of its extension point: starts the point's clock.
    first: bool,
    /// Last plugin of its extension point: stops the clock.
    last: bool,
    sequence: Arc<Sequence>,
    /// For Score: the score plugins after this one.
    later_scores: Vec<&'static str>,
    /// The series of successful calls, by extension point label, looked up at the first
    /// call: Filter and Score are timed for every node of a sampled cycle, and most calls
    /// succeed.
    successes: [(&'static str, OnceLock<BatchHistogram>); 2],
}

impl Timed {
    /// Counts `runs` runs of the plugin at its extension point.
    fn evaluated(&self, runs: u64) {
        if let Some(counter) = &self.evaluations {
            counter.inc_by(runs);
        }
    }

    /// Records one timed call of the plugin at `point`.
    fn observe(&self, point: &'static str, code: Code, elapsed: Duration) {
        self.observe_calls(point, code, elapsed, 1);
    }

    /// Records `calls` calls of the plugin at `point` that took `each`.
    fn observe_calls(&self, point: &'static str, code: Code, each: Duration, calls: u64) {
        // No call, no series: a series appears with its first observation, as in
        // kube-scheduler.
        if calls == 0 {
            return;
        }
        let success = (code == Code::Success)
            .then(|| self.successes.iter().find(|(l, _)| *l == point))
            .flatten();
        match success {
            Some((_, series)) => series
                .get_or_init(|| {
                    self.instr
                        .metrics
                        .plugin_series(self.inner.name(), point, Code::Success)
                })
                .observe_many(each.as_secs_f64(), calls),
            None => self
                .instr
                .metrics
                .plugin_calls(self.inner.name(), point, code, each, calls),
        }
    }

    /// Runs one call of a plugin at a sequential extension point (all but Filter and Score),
    /// which ends the point when `ends` says so or when this is its last plugin.
    fn sequential<T>(
        &self,
        call: impl FnOnce() -> T,
        code: impl Fn(&T) -> Code,
        ends: fn(Code) -> bool,
    ) -> T {
        let start = Instant::now();
        if self.first {
            *lock(&self.sequence.start) = Some(start);
        }
        let out = call();
        let end = Instant::now();
        let c = code(&out);
        if self.instr.sampled() {
            self.observe(self.point.label(), c, end - start);
        }
        if (ends(c) || self.last)
            && let Some(began) = lock(&self.sequence.start).take()
        {
            let point_code = if c == Code::Skip { Code::Success } else { c };
            self.instr.metrics.extension_point(
                self.point.label(),
                point_code,
                &self.profile,
                end - began,
            );
        }
        out
    }

    fn timed_if_sampled<T>(
        &self,
        point: &'static str,
        call: impl FnOnce() -> T,
        code: impl Fn(&T) -> Code,
    ) -> T {
        if !self.instr.sampled() {
            return call();
        }
        let start = Instant::now();
        let out = call();
        let elapsed = start.elapsed();
        self.observe(point, code(&out), elapsed);
        out
    }
}

fn missing(point: &str) -> Status {
    Status::error(format!("instrumented plugin has no {point} implementation"))
}

impl Plugin for Timed {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn events(&self) -> &'static [gantry_core::framework::EventHint] {
        self.inner.events()
    }
    fn cache_state(&self) -> &'static [gantry_core::cache::Tracked] {
        self.inner.cache_state()
    }
    fn as_queue_sort(&self) -> Option<&dyn gantry_core::framework::QueueSortPlugin> {
        self.inner.as_queue_sort()
    }
    fn as_pre_enqueue(&self) -> Option<&dyn gantry_core::framework::PreEnqueuePlugin> {
        self.inner.as_pre_enqueue()
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        match self.point {
            Point::PreFilter => self.inner.as_pre_filter().map(|_| self as _),
            _ => self.inner.as_pre_filter(),
        }
    }
    fn as_pre_filter_extensions(&self) -> Option<&dyn gantry_core::framework::PreFilterExtensions> {
        self.inner.as_pre_filter_extensions()
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        match self.point {
            Point::Filter => self.inner.as_filter().map(|_| self as _),
            _ => self.inner.as_filter(),
        }
    }
    fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        match self.point {
            Point::PostFilter => self.inner.as_post_filter().map(|_| self as _),
            _ => self.inner.as_post_filter(),
        }
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        match self.point {
            Point::PreScore => self.inner.as_pre_score().map(|_| self as _),
            _ => self.inner.as_pre_score(),
        }
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        match self.point {
            Point::Score => self.inner.as_score().map(|_| self as _),
            _ => self.inner.as_score(),
        }
    }
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        match self.point {
            Point::Reserve => self.inner.as_reserve().map(|_| self as _),
            _ => self.inner.as_reserve(),
        }
    }
    fn as_permit(&self) -> Option<&dyn PermitPlugin> {
        match self.point {
            Point::Permit => self.inner.as_permit().map(|_| self as _),
            _ => self.inner.as_permit(),
        }
    }
    fn as_pre_bind(&self) -> Option<&dyn gantry_core::framework::PreBindPlugin> {
        self.inner.as_pre_bind()
    }
    fn as_bind(&self) -> Option<&dyn gantry_core::framework::BindPlugin> {
        self.inner.as_bind()
    }
    fn as_post_bind(&self) -> Option<&dyn gantry_core::framework::PostBindPlugin> {
        self.inner.as_post_bind()
    }
}

impl PreFilterPlugin for Timed {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let Some(inner) = self.inner.as_pre_filter() else {
            return (PreFilterResult::default(), missing("PreFilter"));
        };
        let out = self.sequential(
            || inner.pre_filter(state, pod, snapshot),
            |(_, s)| s.code(),
            |c| !matches!(c, Code::Success | Code::Skip),
        );
        if out.1.code() != Code::Skip {
            self.evaluated(1);
        }
        out
    }
}

impl FilterPlugin for Timed {
    /// A call for one node, outside the cycle's pass over the nodes (which counts its runs
    /// through [`FilterPlugin::filtered`]): the second pass of a node with nominated pods,
    /// preemption's dry runs.
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(inner) = self.inner.as_filter() else {
            return missing("Filter");
        };
        self.evaluated(1);
        self.timed_if_sampled("Filter", || inner.filter(state, pod, node), |s| s.code())
    }

    /// The plugin's own block method. In a sampled cycle the block is timed as a whole, and
    /// each node it examined counts as one call with its own code and the block's mean
    /// duration: the count and the sum are kube-scheduler's, who times every call; reading
    /// the clock around every node cost a tenth of the scheduling thread.
    fn filter_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        block: NodeBlock<'_>,
        statuses: &mut [Status],
    ) -> usize {
        let Some(inner) = self.inner.as_filter() else {
            statuses.fill(missing("Filter"));
            return statuses.len();
        };
        if !self.instr.sampled() {
            return inner.filter_nodes(state, pod, block, statuses);
        }
        let examined: Vec<usize> = (0..statuses.len())
            .filter(|&i| statuses[i].is_success())
            .collect();
        let start = Instant::now();
        let rejected = inner.filter_nodes(state, pod, block, statuses);
        let each = mean(start.elapsed(), examined.len());
        // Most nodes pass: those are counted at once, the others one by one.
        let mut passed = 0;
        for i in examined {
            match statuses[i].code() {
                Code::Success => passed += 1,
                code => self.observe("Filter", code, each),
            }
        }
        self.observe_calls("Filter", Code::Success, each, passed);
        rejected
    }

    fn passes_all(&self, state: &CycleState, pod: &PodInfo, snapshot: &Snapshot) -> bool {
        self.inner
            .as_filter()
            .is_some_and(|f| f.passes_all(state, pod, snapshot))
    }

    fn passes_outright(&self, node: &NodeInfo) -> bool {
        self.inner
            .as_filter()
            .is_some_and(|f| f.passes_outright(node))
    }

    fn verdict_by_requests(&self, state: &CycleState, pod: &PodInfo) -> bool {
        self.inner
            .as_filter()
            .is_some_and(|f| f.verdict_by_requests(state, pod))
    }

    fn verdict_by_domain(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> Option<Vec<DomainVerdict>> {
        self.inner
            .as_filter()
            .and_then(|f| f.verdict_by_domain(state, pod, snapshot))
    }

    fn filtered(&self, nodes: usize) {
        self.evaluated(nodes as u64);
    }
}

impl PostFilterPlugin for Timed {
    fn post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        input: &PostFilterInput<'_>,
    ) -> (PostFilterResult, Status) {
        let Some(inner) = self.inner.as_post_filter() else {
            return (PostFilterResult::default(), missing("PostFilter"));
        };
        // kube-scheduler counts every run of its PostFilter, whatever it finds.
        if self.inner.name() == gantry_core::plugins::default_preemption::NAME {
            self.instr.metrics.preemption_attempt();
        }
        self.sequential(
            || inner.post_filter(state, pod, input),
            |(_, s)| s.code(),
            |c| c == Code::Success,
        )
    }

    fn choose(
        &self,
        pod: &PodInfo,
        candidates: Vec<PreemptionCandidate>,
        nominated: &NominatedPods,
    ) -> (PostFilterResult, Status) {
        // The PostFilter run it completes was timed already.
        match self.inner.as_post_filter() {
            Some(inner) => inner.choose(pod, candidates, nominated),
            None => (PostFilterResult::default(), missing("PostFilter")),
        }
    }
}

impl PreScorePlugin for Timed {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        feasible: &[&NodeInfo],
    ) -> Status {
        let Some(inner) = self.inner.as_pre_score() else {
            return missing("PreScore");
        };
        let status = self.sequential(
            || inner.pre_score(state, pod, snapshot, feasible),
            Status::code,
            |c| !matches!(c, Code::Success | Code::Skip),
        );
        if status.code() == Code::Skip {
            lock(&self.instr.skipped_scores).push(self.inner.name());
        } else {
            self.evaluated(1);
        }
        status
    }

    fn reads_feasible(&self, pod: &PodInfo, snapshot: &Snapshot) -> bool {
        self.inner
            .as_pre_score()
            .is_none_or(|p| p.reads_feasible(pod, snapshot))
    }
}

impl Timed {
    /// Records the Score extension point's duration, from its start, with `code`.
    fn end_score(&self, code: Code) {
        let began = self.instr.score_start.swap(0, Ordering::Relaxed);
        if began != 0 {
            let elapsed = nanos_since(self.instr.epoch).saturating_sub(began);
            self.instr.metrics.extension_point(
                Point::Score.label(),
                code,
                &self.profile,
                Duration::from_nanos(elapsed),
            );
        }
    }

    /// Notes when the cycle's scoring began, for the Score extension point's duration.
    fn mark_score_start(&self) {
        if self.instr.score_start.load(Ordering::Relaxed) == 0 {
            let now = nanos_since(self.instr.epoch);
            let _ = self.instr.score_start.compare_exchange(
                0,
                now,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }
}

impl ScorePlugin for Timed {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(inner) = self.inner.as_score() else {
            return Err(missing("Score"));
        };
        self.mark_score_start();
        self.timed_if_sampled(
            "Score",
            || inner.score(state, pod, node),
            |r| r.as_ref().map_or_else(Status::code, |_| Code::Success),
        )
    }

    /// The plugin's own block method, timed in a sampled cycle like
    /// [`Timed::filter_nodes`]: one call per node with the block's mean duration (a failed
    /// block counts as one failed call).
    fn score_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        block: NodeBlock<'_>,
        scores: &mut [i64],
    ) -> Result<(), Status> {
        let Some(inner) = self.inner.as_score() else {
            return Err(missing("Score"));
        };
        self.mark_score_start();
        if !self.instr.sampled() {
            return inner.score_nodes(state, pod, block, scores);
        }
        let start = Instant::now();
        let result = inner.score_nodes(state, pod, block, scores);
        match &result {
            Ok(()) => {
                let each = mean(start.elapsed(), block.len());
                self.observe_calls("Score", Code::Success, each, block.len() as u64);
            }
            Err(status) => self.observe("Score", status.code(), start.elapsed()),
        }
        result
    }

    fn normalize(&self, state: &CycleState, pod: &PodInfo, scores: &mut [NodeScore]) -> Status {
        let Some(inner) = self.inner.as_score() else {
            return missing("Score");
        };
        let status = self.timed_if_sampled(
            "ScoreExtensionNormalize",
            || inner.normalize(state, pod, scores),
            Status::code,
        );
        if !status.is_success() {
            self.end_score(status.code());
        }
        status
    }

    fn uniform_score(&self, state: &CycleState, pod: &PodInfo, snapshot: &Snapshot) -> Option<i64> {
        self.mark_score_start();
        self.inner
            .as_score()
            .and_then(|s| s.uniform_score(state, pod, snapshot))
    }

    fn normalizes(&self) -> bool {
        self.inner.as_score().is_none_or(|s| s.normalizes())
    }

    fn score_by_requests(&self, state: &CycleState, pod: &PodInfo) -> bool {
        self.inner
            .as_score()
            .is_some_and(|s| s.score_by_requests(state, pod))
    }

    fn score_by_domain<'s>(
        &self,
        state: &'s CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> Option<DomainScores<'s>> {
        self.inner
            .as_score()
            .and_then(|s| s.score_by_domain(state, pod, snapshot))
    }

    /// Counts the runs, and ends the Score extension point after the last plugin that
    /// scored.
    fn scored(&self, nodes: usize) {
        self.mark_score_start();
        self.evaluated(nodes as u64);
        let last = {
            let skipped = lock(&self.instr.skipped_scores);
            self.later_scores.iter().all(|n| skipped.contains(n))
        };
        if last {
            self.end_score(Code::Success);
        }
    }

    /// The plugin's own answer: the order among equal totals is a decision, which timing
    /// must not change.
    fn fixed_tie_order(&self) -> bool {
        self.inner.as_score().is_some_and(|s| s.fixed_tie_order())
    }
}

impl ReservePlugin for Timed {
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(inner) = self.inner.as_reserve() else {
            return missing("Reserve");
        };
        self.sequential(
            || inner.reserve(state, pod, node),
            Status::code,
            |c| c != Code::Success,
        )
    }

    fn unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) {
        if let Some(inner) = self.inner.as_reserve() {
            self.timed_if_sampled(
                "Unreserve",
                || inner.unreserve(state, pod, node),
                |_| Code::Success,
            );
        }
    }
}

impl PermitPlugin for Timed {
    fn permit(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        node: &str,
        waiting: &mut WaitingPods,
    ) -> (Status, Duration) {
        let Some(inner) = self.inner.as_permit() else {
            return (missing("Permit"), Duration::ZERO);
        };
        self.sequential(
            || inner.permit(state, pod, node, waiting),
            |(s, _)| s.code(),
            |c| c != Code::Success && c != Code::Wait,
        )
    }

    fn unreserved(&self, pod: &PodInfo, waiting: &mut WaitingPods) {
        if let Some(inner) = self.inner.as_permit() {
            inner.unreserved(pod, waiting);
        }
    }

    fn pod_group_gone(&self, namespace: &str, name: &str, waiting: &mut WaitingPods) {
        if let Some(inner) = self.inner.as_permit() {
            inner.pod_group_gone(namespace, name, waiting);
        }
    }
}

/// `total` shared evenly by `calls` calls.
fn mean(total: Duration, calls: usize) -> Duration {
    total / u32::try_from(calls.max(1)).unwrap_or(u32::MAX)
}

/// Nanoseconds from `epoch` to now, at least 1 (0 means "not started").
fn nanos_since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_nanos())
        .unwrap_or(u64::MAX)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_core::config::Config;
    use gantry_core::plugins;
    use gantry_core::scheduler::{Attempt, Scheduler};
    use gantry_core::testing::{node, pod};
    use std::collections::BTreeSet;

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
    fn the_wrappers_answer_the_decision_hints_as_their_plugins_do() {
        let instr = Instrumentation::new(Arc::new(Metrics::new()));
        let config = Config::parse(
            "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- plugins:
    multiPoint:
      enabled: [{name: GpuShare, weight: 10}]
  pluginConfig:
  - name: GpuShare
    args: {scoringStrategy: BestFit}
",
            &plugins::registry(),
        )
        .expect("config");
        let plain = &config.profiles[0];
        let timed = instr.instrument(plain);
        let pod = pod("p").req("nvidia.com/gpu", "1").build();
        let snapshot = Snapshot::default();
        let mut packing = 0;
        for ((p, _), (t, _)) in plain.score.iter().zip(&timed.score) {
            let (p, t) = (p.as_score().unwrap(), t.as_score().unwrap());
            assert_eq!(t.fixed_tie_order(), p.fixed_tie_order());
            packing += usize::from(p.fixed_tie_order());
        }
        assert_eq!(packing, 1, "GpuShare packs");
        for (p, t) in plain.pre_score.iter().zip(&timed.pre_score) {
            let (p, t) = (p.as_pre_score().unwrap(), t.as_pre_score().unwrap());
            assert_eq!(
                t.reads_feasible(&pod, &snapshot),
                p.reads_feasible(&pod, &snapshot)
            );
        }
    }

    #[test]
    fn the_wrappers_answer_the_cycles_shortcuts_as_their_plugins_do() {
        let instr = Instrumentation::new(Arc::new(Metrics::new()));
        let config = Config::default_with(&plugins::registry()).expect("defaults");
        let plain = &config.profiles[0];
        let timed = instr.instrument(plain);
        let mut cache = gantry_core::cache::Cache::new();
        for (name, cpu, memory) in [("n0", "2", "4Gi"), ("n1", "4", "8Gi")] {
            cache.upsert_node(
                node(name)
                    .capacity(cpu, memory)
                    .label("kubernetes.io/hostname", name)
                    .label("topology.kubernetes.io/zone", name)
                    .build(),
            );
        }
        cache
            .add_bound_pod(pod("web-0").label("app", "web").on("n0").build())
            .expect("bound");
        let mut snapshot = Snapshot::default();
        cache.update_snapshot(&mut snapshot);
        // A pod with requests only, and one spread over zones and kept apart by host from
        // its like, whose verdicts and scores come by domain.
        let plain_pod = pod("p").req("cpu", "1").build();
        let spread_pod = pod("q")
            .req("cpu", "1")
            .label("app", "web")
            .spec_yaml(
                r#"
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        labelSelector: {matchLabels: {app: web}}
        topologyKey: kubernetes.io/hostname
topologySpreadConstraints:
- maxSkew: 1
  topologyKey: topology.kubernetes.io/zone
  whenUnsatisfiable: DoNotSchedule
  labelSelector: {matchLabels: {app: web}}
"#,
            )
            .build();
        let mut shortcuts = 0;
        let mut by_domain = 0;
        for pod in [plain_pod, spread_pod] {
            let (found, domains) = shortcuts_agree(plain, &timed, &snapshot, &pod);
            shortcuts += found;
            by_domain += domains;
        }
        // TaintToleration and NodeUnschedulable accept both nodes, NodeResourcesFit's
        // verdict and score depend on the requests, TaintToleration scores alike,
        // PodTopologySpread's verdicts and InterPodAffinity's scores come by domain: the
        // comparison met the shortcuts it is about.
        assert!(shortcuts >= 10, "{shortcuts}");
        assert_eq!(by_domain, 2);
    }

    /// Asks the plain and the timed plugins of a profile the cycle's shortcuts for `pod`,
    /// asserting that they answer alike; returns how many shortcuts were met, and of them
    /// how many by domain.
    fn shortcuts_agree(
        plain: &Profile,
        timed: &Profile,
        snapshot: &Snapshot,
        pod: &PodInfo,
    ) -> (usize, usize) {
        // The hints are asked after PreFilter and PreScore, of the plain plugins: the
        // wrappers share them, and their state.
        let mut state = CycleState::new();
        for p in plain.pre_filter.iter().filter_map(|p| p.as_pre_filter()) {
            p.pre_filter(&mut state, pod, snapshot);
        }
        let nodes: Vec<&NodeInfo> = snapshot.nodes().iter().map(|n| &**n).collect();
        for p in plain.pre_score.iter().filter_map(|p| p.as_pre_score()) {
            p.pre_score(&mut state, pod, snapshot, &nodes);
        }
        let (mut shortcuts, mut by_domain) = (0, 0);
        for (p, t) in plain.filter.iter().zip(&timed.filter) {
            let (Some(p), Some(t)) = (p.as_filter(), t.as_filter()) else {
                panic!("a filter plugin lost its Filter");
            };
            let passes_all = p.passes_all(&state, pod, snapshot);
            let by_requests = p.verdict_by_requests(&state, pod);
            assert_eq!(t.passes_all(&state, pod, snapshot), passes_all);
            assert_eq!(t.verdict_by_requests(&state, pod), by_requests);
            for n in &nodes {
                assert_eq!(t.passes_outright(n), p.passes_outright(n));
            }
            let codes = |f: &dyn FilterPlugin| {
                f.verdict_by_domain(&state, pod, snapshot).map(|checks| {
                    (0..nodes.len())
                        .map(|i| checks.iter().map(|c| c.code(i)).collect::<Vec<_>>())
                        .collect::<Vec<_>>()
                })
            };
            let domains = codes(p);
            assert_eq!(codes(t), domains);
            shortcuts += usize::from(passes_all) + usize::from(by_requests);
            by_domain += usize::from(domains.is_some());
        }
        for ((p, _), (t, _)) in plain.score.iter().zip(&timed.score) {
            let (Some(p), Some(t)) = (p.as_score(), t.as_score()) else {
                panic!("a score plugin lost its Score");
            };
            let uniform = p.uniform_score(&state, pod, snapshot);
            let by_requests = p.score_by_requests(&state, pod);
            assert_eq!(t.uniform_score(&state, pod, snapshot), uniform);
            assert_eq!(t.score_by_requests(&state, pod), by_requests);
            assert_eq!(t.normalizes(), p.normalizes());
            let raws = |s: &dyn ScorePlugin| {
                s.score_by_domain(&state, pod, snapshot)
                    .map(|d| (0..nodes.len()).map(|i| d.at(i)).collect::<Vec<_>>())
            };
            let domains = raws(p);
            assert_eq!(raws(t), domains);
            shortcuts += usize::from(uniform.is_some()) + usize::from(by_requests);
            shortcuts += usize::from(!p.normalizes());
            by_domain += usize::from(domains.is_some());
        }
        (shortcuts + by_domain, by_domain)
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

    /// The names of the methods declared at the top level of the item that starts at
    /// `header` in `source` (a trait or an impl block), read off the source text.
    fn methods_of(source: &str, header: &str) -> BTreeSet<String> {
        let start = source
            .find(header)
            .unwrap_or_else(|| panic!("{header:?} not found"));
        let mut depth = 0usize;
        let mut names = BTreeSet::new();
        for line in source[start..].lines() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            if depth == 1
                && let Some(rest) = code.strip_prefix("fn ")
            {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                names.insert(name);
            }
            let opened = code.matches('{').count();
            let closed = code.matches('}').count();
            depth = (depth + opened).saturating_sub(closed);
            if depth == 0 && closed > 0 {
                break;
            }
        }
        names
    }

    #[test]
    fn the_timed_wrapper_forwards_every_method_of_the_traits_it_implements() {
        let traits = include_str!("../../core/src/framework/plugin.rs");
        let wrapper = include_str!("instrument.rs");
        for name in [
            "Plugin",
            "PreFilterPlugin",
            "FilterPlugin",
            "PostFilterPlugin",
            "PreScorePlugin",
            "ScorePlugin",
            "ReservePlugin",
            "PermitPlugin",
        ] {
            let declared = methods_of(traits, &format!("pub trait {name}:"));
            let forwarded = methods_of(wrapper, &format!("impl {name} for Timed {{"));
            let missing: Vec<&String> = declared.difference(&forwarded).collect();
            assert!(
                missing.is_empty(),
                "Timed does not forward {name}::{missing:?}: a plugin's answer there would be \
                 lost in `gantry run` and kept in `gantry simulate`"
            );
        }
    }
}
