//! How each watcher stands, for `/readyz`: a watcher that lists (its first list, or a relist
//! after its watch was lost) holds the scheduler back, and one whose lists fail, or that
//! has listed for too long, is a failed readiness check named after it, with the reason,
//! instead of a silent stall.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use gantry_core::model::echo::bound_message;

/// A list running longer than this fails the readiness check even before it fails itself
/// (a list gives up after a minute; a relist of a healthy server takes well under a second).
pub const LIST_GRACE: Duration = Duration::from_secs(10);

/// Where a watcher stands.
#[derive(Debug, Clone)]
enum Standing {
    /// Listing since `since`; `failure` is why the last list failed, if one did.
    Listing {
        since: Instant,
        failure: Option<String>,
    },
    /// Listed, and watching.
    Watching,
}

/// The standing of every watcher, by name; shared by the watchers, which write it, and the
/// readiness endpoint, which reads it.
#[derive(Debug, Default)]
pub struct Watchers {
    standing: Mutex<BTreeMap<&'static str, Standing>>,
}

/// A watcher that holds readiness back, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lagging {
    /// The watcher's name (`pods`, `podgroups`, ...).
    pub watcher: &'static str,
    /// Why: the last list's error, or how long it has listed.
    pub reason: String,
}

impl Watchers {
    /// `name` starts a list (keeping the time and failure of a list it retries).
    pub fn listing(&self, name: &'static str) {
        let mut standing = self.lock();
        if !matches!(standing.get(name), Some(Standing::Listing { .. })) {
            standing.insert(
                name,
                Standing::Listing {
                    since: Instant::now(),
                    failure: None,
                },
            );
        }
    }

    /// `name`'s list failed with `error`; it will list again.
    pub fn list_failed(&self, name: &'static str, error: &str) {
        let mut standing = self.lock();
        let since = match standing.get(name) {
            Some(Standing::Listing { since, .. }) => *since,
            _ => Instant::now(),
        };
        standing.insert(
            name,
            Standing::Listing {
                since,
                failure: Some(bound_message(error)),
            },
        );
    }

    /// `name` has listed and watches.
    pub fn watching(&self, name: &'static str) {
        self.lock().insert(name, Standing::Watching);
    }

    /// The watchers that hold readiness back at `now`: those whose last list failed, and
    /// those listing for longer than [`LIST_GRACE`], by name.
    pub fn lagging(&self, now: Instant) -> Vec<Lagging> {
        self.lock()
            .iter()
            .filter_map(|(watcher, standing)| {
                let Standing::Listing { since, failure } = standing else {
                    return None;
                };
                let listed_for = now.saturating_duration_since(*since);
                let reason = match failure {
                    Some(error) => format!(
                        "not synced for {}s: the list failed: {error}",
                        listed_for.as_secs()
                    ),
                    None if listed_for > LIST_GRACE => {
                        format!("not synced: listing for {}s", listed_for.as_secs())
                    }
                    None => return None,
                };
                Some(Lagging { watcher, reason })
            })
            .collect()
    }

    /// The names of every watcher that has reported, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.lock().keys().copied().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, Standing>> {
        self.standing.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_list_lags_with_its_error_until_a_list_works() {
        let w = Watchers::default();
        w.listing("pods");
        w.listing("podgroups");
        assert!(w.lagging(Instant::now()).is_empty(), "a list just started");
        w.list_failed("podgroups", "HTTP 403: forbidden");
        w.listing("podgroups");
        let lagging = w.lagging(Instant::now());
        assert_eq!(lagging.len(), 1);
        assert_eq!(lagging[0].watcher, "podgroups");
        assert!(
            lagging[0]
                .reason
                .ends_with("the list failed: HTTP 403: forbidden"),
            "{:?}",
            lagging[0]
        );
        w.watching("podgroups");
        assert!(w.lagging(Instant::now()).is_empty());
        assert_eq!(w.names(), ["podgroups", "pods"]);
    }

    #[test]
    fn a_list_that_runs_too_long_lags() {
        let w = Watchers::default();
        w.listing("nodes");
        let later = Instant::now() + LIST_GRACE + Duration::from_secs(2);
        let lagging = w.lagging(later);
        assert_eq!(lagging.len(), 1);
        assert!(
            lagging[0].reason.starts_with("not synced: listing for 1"),
            "{lagging:?}"
        );
        w.watching("nodes");
        w.listing("nodes");
        assert!(w.lagging(Instant::now()).is_empty(), "a fresh relist");
    }
}
