//! What a front end measures of the plugins as the runners call them: kube-scheduler's
//! framework metrics (each extension point's duration, plugins' call durations in the
//! cycles it samples, their runs). The runners tell it; nothing wraps the plugins, so every
//! method of every plugin trait reaches the plugin itself, timed or not. The core reads no
//! clock: it asks the observer for the time, and a front end that measures nothing (the
//! simulator) has [`Unobserved`], whose clock stands still.

use std::fmt::Debug;
use std::time::Duration;

use super::status::Code;

/// The extension points the runners report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Point {
    /// PreFilter.
    PreFilter,
    /// Filter.
    Filter,
    /// PostFilter.
    PostFilter,
    /// PreScore.
    PreScore,
    /// Score.
    Score,
    /// Score's NormalizeScore (`ScoreExtensionNormalize`).
    Normalize,
    /// Reserve.
    Reserve,
    /// Reserve's Unreserve.
    Unreserve,
    /// Permit.
    Permit,
}

impl Point {
    /// kube-scheduler's label for the point (`extension_point`).
    pub fn label(self) -> &'static str {
        match self {
            Point::PreFilter => "PreFilter",
            Point::Filter => "Filter",
            Point::PostFilter => "PostFilter",
            Point::PreScore => "PreScore",
            Point::Score => "Score",
            Point::Normalize => "ScoreExtensionNormalize",
            Point::Reserve => "Reserve",
            Point::Unreserve => "Unreserve",
            Point::Permit => "Permit",
        }
    }
}

/// Told by the runners what the plugins of one profile do. Every method has a default that
/// measures nothing.
pub trait Observer: Send + Sync + Debug {
    /// Whether this cycle's plugin calls are timed (kube-scheduler times one cycle in ten:
    /// Filter and Score run once per node, and timing every call would cost more than the
    /// plugins). When not, the runners ask for no time around plugin calls.
    fn sampled(&self) -> bool {
        false
    }

    /// The time on the observer's clock, from an epoch of its own.
    fn now(&self) -> Duration {
        Duration::ZERO
    }

    /// `calls` calls of `plugin` at `point` that ended with `code`, each taking `each` (a
    /// block of calls timed as a whole shares its time evenly).
    fn plugin_calls(
        &self,
        _plugin: &'static str,
        _point: Point,
        _code: Code,
        _each: Duration,
        _calls: u64,
    ) {
    }

    /// `runs` runs of `plugin` at `point`, timed or not, as kube-scheduler counts them: each
    /// node examined at Filter and Score (whether the cycle called the plugin or knew its
    /// answer without the call), each call at the other points but one that skipped itself.
    fn runs(&self, _plugin: &'static str, _point: Point, _runs: u64) {}

    /// `point` ran, taking `elapsed`, and its outcome was `code`.
    fn extension_point(&self, _point: Point, _code: Code, _elapsed: Duration) {}
}

/// Measures nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct Unobserved;

impl Observer for Unobserved {}

/// Times one call when the cycle is sampled, and tells the observer.
pub fn timed_call<T>(
    observer: &dyn Observer,
    plugin: &'static str,
    point: Point,
    call: impl FnOnce() -> T,
    code: impl Fn(&T) -> Code,
) -> T {
    if !observer.sampled() {
        return call();
    }
    let start = observer.now();
    let out = call();
    let elapsed = observer.now().saturating_sub(start);
    observer.plugin_calls(plugin, point, code(&out), elapsed, 1);
    out
}

/// An extension point's run: started when made, reported when [`PointRun::end`] is called
/// after at least one plugin ran.
pub struct PointRun<'o> {
    observer: &'o dyn Observer,
    point: Point,
    start: Duration,
    ran: bool,
}

impl<'o> PointRun<'o> {
    /// A run of `point` starting now.
    pub fn start(observer: &'o dyn Observer, point: Point) -> Self {
        PointRun {
            observer,
            point,
            start: observer.now(),
            ran: false,
        }
    }

    /// Notes that a plugin ran (called through another way than [`PointRun::call`]).
    pub fn ran(&mut self) {
        self.ran = true;
    }

    /// Runs one plugin's call, timed when the cycle is sampled.
    pub fn call<T>(
        &mut self,
        plugin: &'static str,
        call: impl FnOnce() -> T,
        code: impl Fn(&T) -> Code,
    ) -> T {
        self.ran = true;
        timed_call(self.observer, plugin, self.point, call, code)
    }

    /// Reports the run, ended with `code` (a Skip is a success), if a plugin ran.
    pub fn end(self, code: Code) {
        if self.ran {
            let code = if code == Code::Skip {
                Code::Success
            } else {
                code
            };
            let elapsed = self.observer.now().saturating_sub(self.start);
            self.observer.extension_point(self.point, code, elapsed);
        }
    }
}
