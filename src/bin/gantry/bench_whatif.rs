//! What-if questions in `gantry bench` (`--questions`): a stream of one-pod questions
//! answered on a thread of their own while the scheduling loop runs, as `gantry run` answers
//! them (the scheduling thread only takes the view), and the latency of a one-pod question
//! and of a `--max` question against the cluster the run leaves.

use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gantry_core::config::Config;
use gantry_core::plugins;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use gantry_adapter::driver::VIEW_REUSE;
use gantry_core::scheduler::{ClusterView, Scheduler, Views};
use gantry_sim::whatif::{self, Question};

/// The pod every question asks about: large enough that a `--max` question counts about
/// one replica per node of the synthetic cluster (32 cpu each).
fn question(max: bool) -> Question {
    Question {
        objects: vec![serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "what-if", "namespace": "bench"},
            "spec": {"containers": [{
                "name": "c",
                "image": "registry.example/app:1",
                "resources": {"requests": {"cpu": "20", "memory": "8Gi"}}
            }]}
        })],
        max,
        ..Question::default()
    }
}

fn config(percentage: u32) -> Result<Config, String> {
    let mut config = Config::default_with(&plugins::registry()).map_err(|e| e.to_string())?;
    config.percentage_of_nodes_to_score = percentage;
    Ok(config)
}

/// Questions answered beside a run.
pub struct Stream {
    views: Option<SyncSender<Arc<ClusterView>>>,
    /// Views taken as `gantry run` takes them (one shared for [`VIEW_REUSE`]).
    shared: Views,
    started: Instant,
    answers: Option<JoinHandle<Vec<Duration>>>,
    interval: Duration,
    last: Instant,
    /// Time the scheduling loop spent taking views.
    pub taking: Duration,
    /// Views taken (questions asked).
    pub asked: usize,
    /// Questions answered so far, counted by the question thread.
    done: Arc<AtomicUsize>,
}

/// What a stream measured.
pub struct StreamResult {
    /// Questions answered.
    pub answered: usize,
    /// Mean time the scheduling loop spent on one question.
    pub view_mean: Duration,
    /// Median and largest answer time (view to answer, on the question thread).
    pub answer_median: Duration,
    /// The largest.
    pub answer_max: Duration,
}

impl Stream {
    /// A thread answering one question per `interval` of the run.
    pub fn start(interval: Duration, percentage: u32) -> Stream {
        let (views, inbox): (SyncSender<Arc<ClusterView>>, Receiver<Arc<ClusterView>>) =
            std::sync::mpsc::sync_channel(1);
        let done = Arc::new(AtomicUsize::new(0));
        let counted = done.clone();
        let answers = std::thread::spawn(move || {
            let q = question(false);
            let mut times = Vec::new();
            for view in inbox {
                let start = Instant::now();
                if whatif::ask(&|| config(percentage), &view, &q).is_ok() {
                    times.push(start.elapsed());
                }
                counted.fetch_add(1, Ordering::Release);
            }
            times
        });
        Stream {
            views: Some(views),
            shared: Views::new(VIEW_REUSE),
            started: Instant::now(),
            answers: Some(answers),
            interval,
            last: Instant::now(),
            taking: Duration::ZERO,
            asked: 0,
            done,
        }
    }

    /// Between two attempts: hands a view over when a question is due (and the last one is
    /// answered: questions do not queue up), as the scheduling thread of `gantry run` does.
    pub fn tick(&mut self, sched: &Scheduler) {
        if self.last.elapsed() < self.interval || self.done.load(Ordering::Acquire) < self.asked {
            return;
        }
        self.last = Instant::now();
        let Some(views) = &self.views else { return };
        let start = Instant::now();
        let view = self.shared.get(sched, self.started.elapsed());
        match views.try_send(view) {
            Ok(()) => {
                self.asked += 1;
                self.taking += start.elapsed();
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {}
        }
    }

    /// Stops the stream and reports.
    pub fn finish(mut self) -> StreamResult {
        self.views = None;
        let mut times = self
            .answers
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        times.sort();
        StreamResult {
            answered: times.len(),
            view_mean: self.taking / u32::try_from(self.asked.max(1)).unwrap_or(u32::MAX),
            answer_median: times.get(times.len() / 2).copied().unwrap_or_default(),
            answer_max: times.last().copied().unwrap_or_default(),
        }
    }
}

/// The time of a one-pod question and of a `--max` question against `sched`'s cluster, and
/// the `--max` answer.
pub fn single_questions(
    sched: &Scheduler,
    percentage: u32,
) -> anyhow::Result<(Duration, Duration, usize)> {
    let view = sched.view(Duration::ZERO);
    let start = Instant::now();
    whatif::ask(&|| config(percentage), &view, &question(false))?;
    let one = start.elapsed();
    let start = Instant::now();
    let answer = whatif::ask(&|| config(percentage), &view, &question(true))?;
    let max = start.elapsed();
    let fits = answer.capacity.first().map_or(0, |c| c.fits);
    Ok((one, max, fits))
}
