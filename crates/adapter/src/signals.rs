//! The termination signals the long-running subcommands (`run`, `webhook`) stop on.

/// SIGTERM and SIGINT, registered once and awaited as often as needed.
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    /// Registers the handlers; needs a Tokio runtime.
    pub fn new() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Returns when either signal arrives, logging which.
    pub async fn wait(&mut self) {
        tokio::select! {
            _ = self.term.recv() => tracing::info!("SIGTERM received"),
            _ = self.int.recv() => tracing::info!("SIGINT received"),
        }
    }
}
