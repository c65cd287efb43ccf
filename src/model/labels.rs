//! Label sets, stored compactly: a sorted slice looked up by binary search.

use std::collections::BTreeMap;

/// An immutable set of labels (or annotations) sorted by key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Labels(Box<[(Box<str>, Box<str>)]>);

impl Labels {
    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        // Most label sets are small: a scan that rejects on length first touches far fewer
        // bytes than the comparisons of a binary search.
        if self.0.len() <= 16 {
            return self
                .0
                .iter()
                .find(|(k, _)| k.len() == key.len() && **k == *key)
                .map(|(_, v)| &**v);
        }
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.0[i].1)
    }

    /// True when `key` is set.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Iterates over `(key, value)` in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }

    /// Number of labels.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there are no labels.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<&BTreeMap<String, String>> for Labels {
    fn from(map: &BTreeMap<String, String>) -> Self {
        Labels(
            map.iter()
                .map(|(k, v)| (Box::from(k.as_str()), Box::from(v.as_str())))
                .collect(),
        )
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for Labels {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let map: BTreeMap<String, String> = iter
            .into_iter()
            .map(|(k, v)| (k.as_ref().to_string(), v.as_ref().to_string()))
            .collect();
        Labels::from(&map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup() {
        let l: Labels = [("zone", "a"), ("app", "web")].into_iter().collect();
        assert_eq!(l.get("zone"), Some("a"));
        assert_eq!(l.get("app"), Some("web"));
        assert_eq!(l.get("nope"), None);
        assert_eq!(l.iter().next(), Some(("app", "web")));
    }
}
