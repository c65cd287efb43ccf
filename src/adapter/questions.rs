//! Questions a running gantry answers about its own state without changing it: what-if
//! placements (`POST /debug/whatif`) and snapshots (`GET /debug/snapshot`). The scheduling
//! thread only hands over a clone of its state between two cycles ([`Input::View`]); the
//! question is answered off it, on a blocking thread, with plugins of its own.

use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::Duration;

use super::driver::{Input, ViewReply, ViewRequest};
use crate::config::Config;
use crate::whatif::{self, Answer, Question, WhatIfError};

/// How long the scheduling thread may take to hand its state over (it does so between two
/// cycles; a cycle takes milliseconds).
const VIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// Builds a fresh configuration (its own plugin instances) for each scheduler a question
/// runs, from the configuration `gantry run` was started with.
pub type ConfigSource = Arc<dyn Fn() -> Result<Config, String> + Send + Sync>;

/// Why a question got no answer.
#[derive(Debug, thiserror::Error)]
pub enum QuestionError {
    /// The question itself is wrong (400).
    #[error(transparent)]
    Invalid(#[from] WhatIfError),
    /// The scheduler cannot answer now (503).
    #[error("{0}")]
    Unavailable(String),
}

/// The way to the scheduling thread, for questions.
#[derive(Clone)]
pub struct Questions {
    inputs: Sender<Input>,
    config: ConfigSource,
}

impl Questions {
    /// Questions sent to the scheduling thread that reads `inputs`, answered with schedulers
    /// built by `config`.
    pub fn new(inputs: Sender<Input>, config: ConfigSource) -> Self {
        Questions { inputs, config }
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

    /// Answers `question` against the scheduler's state now.
    pub async fn ask(&self, question: Question) -> Result<Answer, QuestionError> {
        let view = self.view(false).await?.view;
        let config = self.config.clone();
        tokio::task::spawn_blocking(move || whatif::ask(&*config, &view, &question))
            .await
            .map_err(|e| QuestionError::Unavailable(format!("the question failed: {e}")))?
            .map_err(QuestionError::Invalid)
    }
}
