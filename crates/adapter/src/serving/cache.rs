//! A small cache of answers that expire: what the API server said about a token
//! (TokenReview) or a request (SubjectAccessReview), kept for a while so that a scraper
//! polling every few seconds costs the API server one review per TTL, as kube-scheduler's
//! delegating authenticator and authorizer do.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The most entries kept; past it the expired ones go, and if none has expired, all of
/// them (a burst of distinct clients costs reviews again, never unbounded memory).
pub const MAX_ENTRIES: usize = 4096;

/// Answers by key, each valid until its own deadline.
#[derive(Debug)]
pub struct TtlCache<K, V> {
    entries: Mutex<HashMap<K, (V, Instant)>>,
}

impl<K: Hash + Eq, V: Clone> TtlCache<K, V> {
    /// An empty cache.
    pub fn new() -> Self {
        TtlCache {
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The answer for `key` if it is still valid at `now`.
    pub fn get(&self, key: &K, now: Instant) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries
            .get(key)
            .filter(|(_, until)| now < *until)
            .map(|(value, _)| value.clone())
    }

    /// Keeps `value` for `key` for `ttl` from `now`; a zero TTL keeps nothing.
    pub fn put(&self, key: K, value: V, ttl: Duration, now: Instant) {
        if ttl.is_zero() {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.len() >= MAX_ENTRIES {
            entries.retain(|_, (_, until)| now < *until);
            if entries.len() >= MAX_ENTRIES {
                entries.clear();
            }
        }
        entries.insert(key, (value, now + ttl));
    }
}

impl<K: Hash + Eq, V: Clone> Default for TtlCache<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_lasts_its_ttl() {
        let cache = TtlCache::new();
        let t0 = Instant::now();
        cache.put("a", true, Duration::from_secs(10), t0);
        assert_eq!(cache.get(&"a", t0 + Duration::from_secs(9)), Some(true));
        assert_eq!(cache.get(&"a", t0 + Duration::from_secs(10)), None);
        cache.put("b", false, Duration::ZERO, t0);
        assert_eq!(cache.get(&"b", t0), None);
    }

    #[test]
    fn the_cache_stays_bounded() {
        let cache = TtlCache::new();
        let t0 = Instant::now();
        for i in 0..MAX_ENTRIES * 3 {
            cache.put(i, i, Duration::from_secs(1), t0);
        }
        let len = cache.entries.lock().unwrap().len();
        assert!(len <= MAX_ENTRIES, "{len}");
        assert_eq!(
            cache.get(&(MAX_ENTRIES * 3 - 1), t0),
            Some(MAX_ENTRIES * 3 - 1)
        );
    }
}
