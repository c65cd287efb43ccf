//! Label sets, stored compactly: a sorted slice looked up by binary search.

use std::collections::BTreeMap;

/// An immutable set of labels (or annotations) sorted by key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Labels(Box<[(Box<str>, Box<str>)]>);

impl Labels {
    /// Fills `values` with the value of each of `keys`, in order; false (and `values` left
    /// partial) when a key is not set. For topology keys, looked up together per node.
    pub fn values_of<'a>(&'a self, keys: &[&str], values: &mut Vec<&'a str>) -> bool {
        values.clear();
        for key in keys {
            match self.get(key) {
                Some(v) => values.push(v),
                None => return false,
            }
        }
        true
    }

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

/// kube-apiserver's wording of the qualified-name rule.
pub const QUALIFIED_NAME_RULE: &str = "must consist of alphanumeric characters, '-', '_' or '.', \
     and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or \
     '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
/// kube-apiserver's wording of the DNS-subdomain rule.
pub const DNS_SUBDOMAIN_RULE: &str = "a lowercase RFC 1123 subdomain must consist of lower case \
     alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character \
     (e.g. 'example.com', regex used for validation is \
     '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// Checks Kubernetes' qualified-name rule (a label key, a resource name): an optional
/// DNS-subdomain prefix and `/`, then 1..=63 alphanumerics, `-`, `_`, `.`, starting and
/// ending alphanumeric. The error is kube-apiserver's first message.
pub fn validate_qualified_name(value: &str) -> Result<(), String> {
    let fail = Err;
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                return fail("prefix part must be non-empty".to_string());
            }
            if prefix.len() > 253 {
                return fail("prefix part must be no more than 253 characters".to_string());
            }
            if !is_dns_subdomain(prefix) {
                return fail(format!("prefix part {DNS_SUBDOMAIN_RULE}"));
            }
            *name
        }
        _ => {
            return fail(format!(
                "a qualified name {QUALIFIED_NAME_RULE} with an optional DNS subdomain prefix \
                 and '/' (e.g. 'example.com/MyName')"
            ));
        }
    };
    if name.is_empty() {
        return fail("name part must be non-empty".to_string());
    }
    if name.len() > 63 {
        return fail("name part must be no more than 63 characters".to_string());
    }
    let bytes = name.as_bytes();
    let ends_ok =
        bytes[0].is_ascii_alphanumeric() && bytes[bytes.len() - 1].is_ascii_alphanumeric();
    let chars_ok = bytes
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !(ends_ok && chars_ok) {
        return fail(format!("name part {QUALIFIED_NAME_RULE}"));
    }
    Ok(())
}

/// Lower-case RFC 1123 labels separated by dots.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.split('.').all(|label| {
        let b = label.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
    })
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
