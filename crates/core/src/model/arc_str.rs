//! Serde for the shared node names of records (`Arc<str>` as a JSON string), without serde's
//! `rc` feature.

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
