//! The key of the cache's per-pod maps.

use std::borrow::Borrow;
use std::sync::Arc;

use crate::model::PodKey;

/// A pod's `namespace/name` (neither may hold a `/`), shared: the cache's per-pod maps are
/// persistent, and the first change after a clone copies the keys of one path, which then
/// only counts references.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct PodName(Arc<str>);

impl PodName {
    /// The key of the pod `namespace/name`.
    pub(super) fn new(namespace: &str, name: &str) -> Self {
        PodName(lookup(namespace, name).into())
    }

    /// The namespace and the name.
    pub(super) fn parts(&self) -> (&str, &str) {
        self.0.split_once('/').unwrap_or(("", &self.0))
    }
}

impl Borrow<str> for PodName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// What a per-pod map is looked up by, for the pod `namespace/name`.
pub(super) fn lookup(namespace: &str, name: &str) -> String {
    PodKey::new(namespace, name).text()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_gives_its_parts_back_and_is_found_by_its_text() {
        let key = PodName::new("shop", "web-0");
        assert_eq!(key.parts(), ("shop", "web-0"));
        let mut map: imbl::HashMap<PodName, u8> = imbl::HashMap::new();
        map.insert(key, 1);
        assert_eq!(map.get(lookup("shop", "web-0").as_str()), Some(&1));
        assert_eq!(map.get(lookup("shop", "web-1").as_str()), None);
    }
}
