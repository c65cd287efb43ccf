//! The decision log: one [`DecisionRecord`] per scheduling attempt (pod, profile, attempt,
//! result, node, the rejections per plugin and reason, the best nodes' scores, the nodes
//! evaluated, the time taken, and for unschedulable pods the single changes that would let
//! them fit), kept in a bounded [`DecisionStore`], optionally appended to a rotated JSON-lines
//! file ([`file`]), and explained by `gantry explain` ([`explain`]).

pub mod explain;
pub mod file;
pub mod record;
pub mod store;

pub use crate::suggest::{Shortfall, Suggestion};
pub use record::{DecisionRecord, Outcome, Rejection, TopNode};
pub use store::{DecisionStore, SharedStore};

/// Records attempts the way every front end does: into the in-memory store, and to the log
/// file when there is one. The scheduling thread of `gantry run` and `gantry bench` share
/// this code, so the benchmark measures what the adapter pays.
pub struct DecisionRecorder {
    store: SharedStore,
    log: Option<file::DecisionLog>,
    wait_for_file: bool,
}

impl DecisionRecorder {
    /// Records into `store` and, if given, `log`; with `wait_for_file`, a full file queue
    /// makes the caller wait (offline runs) instead of dropping the record from the file.
    pub fn new(store: SharedStore, log: Option<file::DecisionLog>, wait_for_file: bool) -> Self {
        DecisionRecorder {
            store,
            log,
            wait_for_file,
        }
    }

    /// The store the records go to.
    pub fn store(&self) -> &SharedStore {
        &self.store
    }

    /// Records `attempt`, made at `timestamp_ms` and lasting `took` (moving its scores and
    /// suggestions into the record, see [`DecisionRecord::from_attempt`]); false when the
    /// record could not be queued for the file (it is in the store all the same).
    pub fn record(
        &self,
        attempt: &mut crate::scheduler::Attempt,
        timestamp_ms: u64,
        took: std::time::Duration,
    ) -> bool {
        let record = std::sync::Arc::new(DecisionRecord::from_attempt(attempt, timestamp_ms, took));
        let queued = match &self.log {
            Some(log) if self.wait_for_file => log.send(record.clone()),
            Some(log) => log.try_send(record.clone()),
            None => true,
        };
        store::push_shared(&self.store, record);
        queued
    }

    /// Writes what the file queue holds and stops its writer.
    pub fn close(self) {
        if let Some(log) = self.log {
            log.close();
        }
    }
}
