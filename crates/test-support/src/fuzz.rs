//! Strategies shared by the `fuzz_` properties (proptest): JSON values of any shape, strings
//! that look like what Kubernetes inputs hold (quantities, durations, shares, names), and
//! random mutations of a valid document, so that the properties reach past the first check
//! of each reader.
//!
//! The properties run with proptest's 256 cases in the normal test command and with as many
//! as `PROPTEST_CASES` says under `scripts/fuzz.sh`.

use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Map, Number, Value};

/// Strings of the shapes Kubernetes inputs hold, and arbitrary ones.
pub fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => any::<String>(),
        2 => "[a-z0-9]([-a-z0-9.]{0,14}[a-z0-9])?",
        2 => quantity_like(),
        1 => "[0-9]{1,5}(\\.[0-9]{1,3})?(ns|us|ms|s|m|h)([0-9]{1,3}(s|m))?",
        1 => "[0-9]{1,3}(\\.[0-9]{1,3})?%",
        1 => "[a-z]{1,6}(\\.[a-z]{1,6})?/[a-z-]{1,12}",
        1 => Just(String::new()),
    ]
}

/// Strings that look like quantities, within and beyond what the API accepts.
pub fn quantity_like() -> impl Strategy<Value = String> {
    "[+-]?[0-9]{0,24}(\\.[0-9]{0,24})?([eE][+-]?[0-9]{1,3}|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?"
}

/// Numbers: small, boundary, huge, negative, fractional.
fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        (-3i64..=110).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        prop_oneof![
            Just(i64::MIN),
            Just(i64::MAX),
            Just(i64::from(i32::MAX) + 1),
            Just(0)
        ]
        .prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
    ]
}

/// A JSON value of any shape, a few levels deep.
pub fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(text(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// One change to a document.
#[derive(Debug, Clone)]
pub enum Mutation {
    /// The value at the chosen place becomes this one.
    Replace(Value),
    /// The chosen place is removed from its object or array.
    Remove,
    /// This field is added to the chosen object (or this element to the chosen array).
    Insert(String, Value),
    /// An element of the chosen array is repeated.
    Repeat,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => any_json().prop_map(Mutation::Replace),
        2 => Just(Mutation::Remove),
        2 => (text(), any_json()).prop_map(|(k, v)| Mutation::Insert(k, v)),
        1 => Just(Mutation::Repeat),
    ]
}

/// The JSON pointers of every value in `value`, itself first.
fn pointers(value: &Value) -> Vec<String> {
    fn walk(value: &Value, at: String, out: &mut Vec<String>) {
        out.push(at.clone());
        match value {
            Value::Object(map) => {
                for (k, v) in map {
                    let key = k.replace('~', "~0").replace('/', "~1");
                    walk(v, format!("{at}/{key}"), out);
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    walk(v, format!("{at}/{i}"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, String::new(), &mut out);
    out
}

/// Applies `mutation` at the place `at` picks among the values of `doc`.
pub fn apply(doc: &mut Value, at: Index, mutation: &Mutation) {
    let places = pointers(doc);
    let place = at.get(&places).clone();
    apply_at(doc, &place, mutation);
}

/// Applies `mutation` at the JSON pointer `place` of `doc`.
fn apply_at(doc: &mut Value, place: &str, mutation: &Mutation) {
    match mutation {
        Mutation::Replace(v) => {
            if let Some(target) = doc.pointer_mut(place) {
                *target = v.clone();
            }
        }
        Mutation::Remove => {
            let Some((parent, last)) = place.rsplit_once('/') else {
                return;
            };
            let key = last.replace("~1", "/").replace("~0", "~");
            match doc.pointer_mut(parent) {
                Some(Value::Object(map)) => {
                    map.remove(&key);
                }
                Some(Value::Array(items)) => {
                    if let Ok(i) = key.parse::<usize>()
                        && i < items.len()
                    {
                        items.remove(i);
                    }
                }
                _ => {}
            }
        }
        Mutation::Insert(k, v) => match doc.pointer_mut(place) {
            Some(Value::Object(map)) => {
                map.insert(k.clone(), v.clone());
            }
            Some(Value::Array(items)) => items.push(v.clone()),
            _ => {}
        },
        Mutation::Repeat => {
            if let Some(Value::Array(items)) = doc.pointer_mut(place)
                && let Some(first) = items.first().cloned()
            {
                items.push(first);
            }
        }
    }
}

/// One of `seeds`, changed by one to four random mutations.
pub fn mutated(seeds: Vec<Value>) -> impl Strategy<Value = Value> {
    (
        any::<Index>(),
        prop::collection::vec((any::<Index>(), mutation()), 1..5),
    )
        .prop_map(move |(seed, mutations)| {
            let mut doc = seed.get(&seeds).clone();
            for (at, m) in &mutations {
                apply(&mut doc, *at, m);
            }
            doc
        })
}

/// The YAML documents of the scenario files (`tests/scenarios/*.yaml`): valid configurations
/// and clusters to start mutations from.
pub fn scenarios() -> Vec<Value> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/scenarios");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("the scenario directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).expect("a scenario file");
            serde_yaml::from_str(&text).expect("a scenario is YAML")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn mutations_apply_where_they_point() {
        let places = pointers(&json!({"a": [1, {"b/c": 2}]}));
        assert_eq!(places, ["", "/a", "/a/0", "/a/1", "/a/1/b~1c"]);
        let mut doc = json!({"a": [1, {"b/c": 2}]});
        apply_at(&mut doc, "/a/1/b~1c", &Mutation::Remove);
        assert_eq!(doc, json!({"a": [1, {}]}));
        apply_at(&mut doc, "/a", &Mutation::Repeat);
        assert_eq!(doc, json!({"a": [1, {}, 1]}));
        apply_at(&mut doc, "/a/1", &Mutation::Insert("k".into(), json!(true)));
        assert_eq!(doc, json!({"a": [1, {"k": true}, 1]}));
        apply_at(&mut doc, "/a/0", &Mutation::Replace(json!("x")));
        assert_eq!(doc, json!({"a": ["x", {"k": true}, 1]}));
        apply_at(&mut doc, "", &Mutation::Remove);
        assert_eq!(doc, json!({"a": ["x", {"k": true}, 1]}), "the root stays");
        assert!(!scenarios().is_empty());
    }
}
