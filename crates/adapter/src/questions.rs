//! Questions a running gantry answers about its own state without changing it: what-if
//! placements (`POST /debug/whatif`) and snapshots (`GET /debug/snapshot`). The scheduling
//! thread only hands over a clone of its state between two cycles ([`Input::View`]); the
//! question is answered off it, on a blocking thread, with plugins of its own.
//!
//! A question is bounded ([`QuestionSettings`]): its size by [`whatif::Limits`], how many run
//! at once, and how long one may run. It stops between two scheduling cycles once its
//! deadline passes, its asker goes away (the request is dropped), or gantry shuts down.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc::Sender;
use std::time::Duration;

use tokio::sync::{Semaphore, TryAcquireError};

use super::driver::{Input, ViewReply, ViewRequest};
use gantry_core::config::Config;
use gantry_sim::whatif::{self, Answer, Limits, Question, WhatIfError};

/// How long the scheduling thread may take to hand its state over (it does so between two
/// cycles; a cycle takes milliseconds).
const VIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// Builds a fresh configuration (its own plugin instances) for each scheduler a question
/// runs, from the configuration `gantry run` was started with.
pub type ConfigSource = Arc<dyn Fn() -> Result<Config, String> + Send + Sync>;

/// What questions may cost (`gantry run --whatif-*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuestionSettings {
    /// The size of one question.
    pub limits: Limits,
    /// Questions answered at once; more are refused (429).
    pub concurrent: usize,
    /// How long one question may run before it is stopped.
    pub timeout: Duration,
}

impl Default for QuestionSettings {
    fn default() -> Self {
        QuestionSettings {
            limits: Limits::default(),
            concurrent: 2,
            timeout: Duration::from_secs(60),
        }
    }
}

/// Why a question got no answer.
#[derive(Debug, thiserror::Error)]
pub enum QuestionError {
    /// The question itself is wrong, or too large (400).
    #[error(transparent)]
    Invalid(#[from] WhatIfError),
    /// Too many questions run already (429).
    #[error("{0}")]
    Busy(String),
    /// The scheduler cannot answer now, or the question was stopped (503).
    #[error("{0}")]
    Unavailable(String),
}

/// Why a running question must stop, shared between the asker and the question.
#[derive(Debug, Default)]
struct Halt(AtomicU8);

impl Halt {
    const GONE: u8 = 1;
    const LATE: u8 = 2;
    const SHUTDOWN: u8 = 3;

    fn set(&self, why: u8) {
        let _ = self
            .0
            .compare_exchange(0, why, Ordering::Relaxed, Ordering::Relaxed);
    }

    fn reason(&self, timeout: Duration, shutting_down: bool) -> Option<String> {
        let why = if shutting_down {
            Halt::SHUTDOWN
        } else {
            self.0.load(Ordering::Relaxed)
        };
        match why {
            Halt::GONE => Some("its asker went away".to_string()),
            Halt::LATE => Some(format!("it ran past its deadline of {timeout:?}")),
            Halt::SHUTDOWN => Some("gantry is shutting down".to_string()),
            _ => None,
        }
    }
}

/// Tells a question its asker went away when the request is dropped before it ends.
struct StopWhenDropped(Arc<Halt>);

impl Drop for StopWhenDropped {
    fn drop(&mut self) {
        self.0.set(Halt::GONE);
    }
}

/// The way to the scheduling thread, for questions.
#[derive(Clone)]
pub struct Questions {
    inputs: Sender<Input>,
    config: ConfigSource,
    settings: QuestionSettings,
    /// One permit per question that may run; held until its blocking work ends.
    running: Arc<Semaphore>,
    /// Set at shutdown: every question stops.
    shutting_down: Arc<std::sync::atomic::AtomicBool>,
}

impl Questions {
    /// Questions sent to the scheduling thread that reads `inputs`, answered with schedulers
    /// built by `config`, within `settings`.
    pub fn new(inputs: Sender<Input>, config: ConfigSource, settings: QuestionSettings) -> Self {
        Questions {
            inputs,
            config,
            running: Arc::new(Semaphore::new(settings.concurrent)),
            settings,
            shutting_down: Arc::default(),
        }
    }

    /// Stops every question under way (between two of its cycles) and refuses new ones.
    pub fn shut_down(&self) {
        self.shutting_down.store(true, Ordering::Relaxed);
        self.running.close();
    }

    /// The scheduler's state now, with its queue when `with_queue`.
    pub async fn view(&self, with_queue: bool) -> Result<ViewReply, QuestionError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let request = ViewRequest { with_queue, reply };
        let stopped = || QuestionError::Unavailable("the scheduler has stopped".to_string());
        self.inputs
            .send(Input::View(request))
            .map_err(|_| stopped())?;
        match tokio::time::timeout(VIEW_TIMEOUT, answer).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(_)) => Err(stopped()),
            Err(_) => Err(QuestionError::Unavailable(format!(
                "the scheduler did not hand over its state within {VIEW_TIMEOUT:?}"
            ))),
        }
    }

    /// Answers `question` against the scheduler's state now, if a place is free for it. It
    /// stops once its deadline passes, once this future is dropped (its asker went away:
    /// the server drops a request's future when its client closes the connection) or at
    /// shutdown.
    pub async fn ask(&self, question: Question) -> Result<Answer, QuestionError> {
        let permit = self
            .running
            .clone()
            .try_acquire_owned()
            .map_err(|e| match e {
                TryAcquireError::Closed => {
                    QuestionError::Unavailable("gantry is shutting down".to_string())
                }
                TryAcquireError::NoPermits => QuestionError::Busy(format!(
                    "{} what-if questions are being answered, the most at once: ask again later",
                    self.settings.concurrent
                )),
            })?;
        let view = self.view(false).await?.view;
        let config = self.config.clone();
        let halt = Arc::new(Halt::default());
        let _stop_when_dropped = StopWhenDropped(halt.clone());
        let (limits, timeout) = (self.settings.limits, self.settings.timeout);
        let shutting_down = self.shutting_down.clone();
        let halted = halt.clone();
        let work = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let halted = || halted.reason(timeout, shutting_down.load(Ordering::Relaxed));
            let answered = whatif::ask_within(&*config, &view, &question, &limits, &halted);
            // Said here: the request waiting for it may be gone.
            if let Err(WhatIfError::Stopped(why)) = &answered {
                tracing::info!(%why, "what-if question stopped");
            }
            answered
        });
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(work, deadline);
        let answered = tokio::select! {
            answered = &mut work => answered,
            () = &mut deadline => {
                halt.set(Halt::LATE);
                (&mut work).await
            }
        };
        match answered {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(WhatIfError::Stopped(why))) => Err(QuestionError::Unavailable(format!(
                "the question was stopped: {why}"
            ))),
            Ok(Err(e)) => Err(QuestionError::Invalid(e)),
            Err(e) => Err(QuestionError::Unavailable(format!(
                "the question failed: {e}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_halt_keeps_its_first_reason_and_shutdown_wins() {
        let halt = Halt::default();
        let timeout = Duration::from_secs(5);
        assert_eq!(halt.reason(timeout, false), None);
        halt.set(Halt::LATE);
        halt.set(Halt::GONE);
        assert_eq!(
            halt.reason(timeout, false).as_deref(),
            Some("it ran past its deadline of 5s")
        );
        assert_eq!(
            halt.reason(timeout, true).as_deref(),
            Some("gantry is shutting down")
        );
    }
}
