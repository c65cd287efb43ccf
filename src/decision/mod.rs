//! The decision log: one [`DecisionRecord`] per scheduling attempt (pod, profile, attempt,
//! result, node, the rejections per plugin and reason, the best nodes' scores, the nodes
//! evaluated, the time taken, and for unschedulable pods the single changes that would let
//! them fit), kept in a bounded [`DecisionStore`], optionally appended to a rotated JSON-lines
//! file ([`file`]), and explained by `gantry explain` ([`explain`]).

pub mod explain;
pub mod file;
pub mod record;
pub mod store;
pub mod suggest;

pub use record::{DecisionRecord, Outcome, Rejection, TopNode};
pub use store::{DecisionStore, SharedStore};
pub use suggest::{Shortfall, Suggestion};

/// Serde for the shared node names of records (`Arc<str>` as a JSON string), without serde's
/// `rc` feature.
pub(crate) mod arc_str {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes the string.
    pub fn serialize<S: Serializer>(s: &Arc<str>, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(s)
    }

    /// Reads a string.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<str>, D::Error> {
        String::deserialize(d).map(Arc::from)
    }

    /// The same for an optional name.
    pub mod option {
        use std::sync::Arc;

        use serde::{Deserialize, Deserializer, Serializer};

        /// Writes the string, or null.
        pub fn serialize<S: Serializer>(
            s: &Option<Arc<str>>,
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            match s {
                Some(s) => serializer.serialize_some(&**s),
                None => serializer.serialize_none(),
            }
        }

        /// Reads a string or null.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Arc<str>>, D::Error> {
            Option::<String>::deserialize(d).map(|s| s.map(Arc::from))
        }
    }
}

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
