//! Label selectors and node selectors, compiled once from their API form.

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;

use super::echo::echo;
use super::labels::Labels;

/// A selector that cannot be compiled; `field` is the path of the offending field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct SelectorError {
    /// Path of the field, relative to the object.
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

/// The operator of one requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    /// The label's value is one of the values.
    In,
    /// The label is absent or its value is none of the values.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
    /// The label's value, as an integer, is greater than the one value.
    Gt,
    /// The label's value, as an integer, is less than the one value.
    Lt,
}

impl Operator {
    /// The operator as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
            Operator::Gt => "Gt",
            Operator::Lt => "Lt",
        }
    }
}

impl Requirement {
    /// The requirement as a node selector writes it (`Gt` and `Lt` with their bound as the
    /// one value).
    pub fn to_node_selector_requirement(&self) -> core::NodeSelectorRequirement {
        let values = match self.operator {
            Operator::Gt | Operator::Lt => vec![self.bound.to_string()],
            _ => self.values.clone(),
        };
        core::NodeSelectorRequirement {
            key: self.key.clone(),
            operator: self.operator.as_str().to_string(),
            values: (!values.is_empty()).then_some(values),
        }
    }
}

/// One requirement on a label (or on a field, for node selectors' `matchFields`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    /// The label key.
    pub key: String,
    /// How the values are compared.
    pub operator: Operator,
    /// Values, sorted, for `In` and `NotIn`.
    pub values: Vec<String>,
    /// The bound for `Gt` and `Lt`.
    pub bound: i64,
}

impl Requirement {
    fn compile(
        key: &str,
        operator: &str,
        values: &[String],
        allow_numeric: bool,
        field: &str,
    ) -> Result<Self, SelectorError> {
        let err = |reason: String| SelectorError {
            field: field.to_string(),
            reason,
        };
        let op = match operator {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            "Gt" if allow_numeric => Operator::Gt,
            "Lt" if allow_numeric => Operator::Lt,
            other => return Err(err(format!("unsupported operator {}", echo(other)))),
        };
        let mut bound = 0;
        match op {
            Operator::In | Operator::NotIn if values.is_empty() => {
                return Err(err(format!("values must be non-empty for {operator}")));
            }
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
                return Err(err(format!("values must be empty for {operator}")));
            }
            Operator::Gt | Operator::Lt => {
                if values.len() != 1 {
                    return Err(err(format!("{operator} takes exactly one value")));
                }
                bound = values[0].parse().map_err(|_| {
                    err(format!(
                        "{operator} value {} is not an integer",
                        echo(&values[0])
                    ))
                })?;
            }
            _ => {}
        }
        let mut values = values.to_vec();
        values.sort();
        Ok(Requirement {
            key: key.to_string(),
            operator: op,
            values,
            bound,
        })
    }

    /// True when a label set with `value` for this requirement's key satisfies it.
    pub fn matches_value(&self, value: Option<&str>) -> bool {
        match (self.operator, value) {
            (Operator::In, Some(v)) => match self.values.as_slice() {
                [only] => only == v,
                values => values.binary_search_by(|x| x.as_str().cmp(v)).is_ok(),
            },
            (Operator::In, None) => false,
            (Operator::NotIn, Some(v)) => {
                self.values.binary_search_by(|x| x.as_str().cmp(v)).is_err()
            }
            (Operator::NotIn, None) => true,
            (Operator::Exists, v) => v.is_some(),
            (Operator::DoesNotExist, v) => v.is_none(),
            (Operator::Gt, Some(v)) => v.parse::<i64>().is_ok_and(|n| n > self.bound),
            (Operator::Lt, Some(v)) => v.parse::<i64>().is_ok_and(|n| n < self.bound),
            (Operator::Gt | Operator::Lt, None) => false,
        }
    }

    /// True when `labels` satisfy this requirement.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.matches_value(labels.get(&self.key))
    }
}

/// A compiled `metav1.LabelSelector`. An empty selector matches everything; an absent one
/// (where the API allows `nil`) matches nothing, as in Kubernetes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
    nothing: bool,
}

impl LabelSelector {
    /// A selector that matches nothing (the meaning of a missing selector).
    pub fn nothing() -> Self {
        LabelSelector {
            requirements: Vec::new(),
            nothing: true,
        }
    }

    /// The selector as the API writes it (every requirement a `matchExpressions` entry);
    /// `None` for the selector that matches nothing (an absent one). Read back with
    /// [`LabelSelector::compile`], it is this selector again.
    pub fn to_api(&self) -> Option<meta::LabelSelector> {
        if self.nothing {
            return None;
        }
        let expressions: Vec<meta::LabelSelectorRequirement> = self
            .requirements
            .iter()
            .map(|r| meta::LabelSelectorRequirement {
                key: r.key.clone(),
                operator: r.operator.as_str().to_string(),
                values: (!r.values.is_empty()).then(|| r.values.clone()),
            })
            .collect();
        Some(meta::LabelSelector {
            match_expressions: (!expressions.is_empty()).then_some(expressions),
            match_labels: None,
        })
    }

    /// The labels a selector made by [`LabelSelector::from_map`] requires, as that map (a
    /// ReplicationController's or a Service's `selector`); `None` when it requires anything
    /// but equalities, or matches nothing.
    pub fn to_map(&self) -> Option<std::collections::BTreeMap<String, String>> {
        if self.nothing {
            return None;
        }
        self.requirements
            .iter()
            .map(|r| match (r.operator, r.values.as_slice()) {
                (Operator::In, [value]) => Some((r.key.clone(), value.clone())),
                _ => None,
            })
            .collect()
    }

    /// A selector that matches every label set.
    pub fn everything() -> Self {
        LabelSelector {
            requirements: Vec::new(),
            nothing: false,
        }
    }

    /// A selector requiring exactly these labels (a Service's or ReplicaSet's `selector` map).
    pub fn from_map<'a>(map: impl IntoIterator<Item = (&'a String, &'a String)>) -> Self {
        let requirements = map
            .into_iter()
            .map(|(k, v)| Requirement {
                key: k.clone(),
                operator: Operator::In,
                values: vec![v.clone()],
                bound: 0,
            })
            .collect();
        LabelSelector {
            requirements,
            nothing: false,
        }
    }

    /// Compiles an optional API selector; `None` matches nothing.
    pub fn compile(
        selector: Option<&meta::LabelSelector>,
        field: &str,
    ) -> Result<Self, SelectorError> {
        let Some(sel) = selector else {
            return Ok(LabelSelector::nothing());
        };
        let mut s = LabelSelector::from_map(sel.match_labels.iter().flatten());
        for (i, e) in sel.match_expressions.iter().flatten().enumerate() {
            s.requirements.push(Requirement::compile(
                &e.key,
                &e.operator,
                e.values.as_deref().unwrap_or_default(),
                false,
                &format!("{field}.matchExpressions[{i}]"),
            )?);
        }
        Ok(s)
    }

    /// Adds a requirement that `key` equals `value` (for `matchLabelKeys`).
    pub fn require_equal(&mut self, key: &str, value: &str) {
        self.requirements.push(Requirement {
            key: key.to_string(),
            operator: Operator::In,
            values: vec![value.to_string()],
            bound: 0,
        });
    }

    /// Adds a requirement that `key` is not `value` (for `mismatchLabelKeys`).
    pub fn require_not_equal(&mut self, key: &str, value: &str) {
        self.requirements.push(Requirement {
            key: key.to_string(),
            operator: Operator::NotIn,
            values: vec![value.to_string()],
            bound: 0,
        });
    }

    /// Adds the requirements of `other` (a selector that matches nothing adds none, as in
    /// Kubernetes' `Selector.Add`).
    pub fn extend(&mut self, other: &LabelSelector) {
        if !other.nothing {
            self.requirements.extend(other.requirements.iter().cloned());
        }
    }

    /// True when the selector matches nothing at all.
    pub fn is_nothing(&self) -> bool {
        self.nothing
    }

    /// True when the selector matches every label set.
    pub fn is_everything(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    /// True when `labels` satisfy the selector.
    pub fn matches(&self, labels: &Labels) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels))
    }

    /// The label keys the selector requires with a value from a list (`matchLabels`, `In`),
    /// each with its values and the requirement's position: a matching label set carries
    /// one of them for every such key.
    pub fn required_values(&self) -> impl Iterator<Item = (usize, &str, &[String])> {
        self.requirements
            .iter()
            .enumerate()
            .filter(|(_, r)| r.operator == Operator::In)
            .map(|(i, r)| (i, r.key.as_str(), r.values.as_slice()))
    }

    /// True when `labels` satisfy every requirement but the one at position `skip`: the
    /// check left for a label set already known to satisfy that one (an index found it by
    /// that requirement's label).
    pub fn matches_except(&self, labels: &Labels, skip: usize) -> bool {
        !self.nothing
            && self
                .requirements
                .iter()
                .enumerate()
                .all(|(i, r)| i == skip || r.matches(labels))
    }

    /// True when the selector has no requirement but the one at position `i` (and matches
    /// something): a label set that satisfies that one is matched.
    pub fn only(&self, i: usize) -> bool {
        !self.nothing && self.requirements.len() == 1 && i == 0
    }
}

/// One compiled `NodeSelectorTerm`: label expressions and `metadata.name` field expressions,
/// all of which must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSelectorTerm {
    /// Requirements on node labels.
    pub expressions: Vec<Requirement>,
    /// Requirements on `metadata.name` (the only field Kubernetes supports).
    pub fields: Vec<Requirement>,
}

impl NodeSelectorTerm {
    /// The API's term, written back.
    pub fn to_api(&self) -> core::NodeSelectorTerm {
        let list = |rs: &[Requirement]| {
            (!rs.is_empty()).then(|| {
                rs.iter()
                    .map(Requirement::to_node_selector_requirement)
                    .collect()
            })
        };
        core::NodeSelectorTerm {
            match_expressions: list(&self.expressions),
            match_fields: list(&self.fields),
        }
    }

    /// Compiles one term; `field` is the path of the term for error messages.
    pub fn compile(term: &core::NodeSelectorTerm, field: &str) -> Result<Self, SelectorError> {
        let mut expressions = Vec::new();
        for (i, e) in term.match_expressions.iter().flatten().enumerate() {
            expressions.push(Requirement::compile(
                &e.key,
                &e.operator,
                e.values.as_deref().unwrap_or_default(),
                true,
                &format!("{field}.matchExpressions[{i}]"),
            )?);
        }
        let mut fields = Vec::new();
        for (i, e) in term.match_fields.iter().flatten().enumerate() {
            let path = format!("{field}.matchFields[{i}]");
            if e.key != "metadata.name" {
                return Err(SelectorError {
                    field: path,
                    reason: format!("unsupported field {}: only metadata.name", echo(&e.key)),
                });
            }
            let r = Requirement::compile(
                &e.key,
                &e.operator,
                e.values.as_deref().unwrap_or_default(),
                false,
                &path,
            )?;
            if !matches!(r.operator, Operator::In | Operator::NotIn) {
                return Err(SelectorError {
                    field: path,
                    reason: "matchFields supports only In and NotIn".to_string(),
                });
            }
            fields.push(r);
        }
        Ok(NodeSelectorTerm {
            expressions,
            fields,
        })
    }

    /// True when the node with `name` and `labels` satisfies the term. A term with no
    /// requirements matches no node, as in Kubernetes.
    pub fn matches(&self, name: &str, labels: &Labels) -> bool {
        if self.expressions.is_empty() && self.fields.is_empty() {
            return false;
        }
        self.expressions.iter().all(|r| r.matches(labels))
            && self.fields.iter().all(|r| r.matches_value(Some(name)))
    }
}

/// A compiled `NodeSelector`: the node must satisfy at least one term.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeSelector {
    /// The terms, any of which suffices.
    pub terms: Vec<NodeSelectorTerm>,
}

impl NodeSelector {
    /// Compiles an API node selector; `field` is its path for error messages.
    pub fn compile(sel: &core::NodeSelector, field: &str) -> Result<Self, SelectorError> {
        let terms = sel
            .node_selector_terms
            .iter()
            .enumerate()
            .map(|(i, t)| NodeSelectorTerm::compile(t, &format!("{field}.nodeSelectorTerms[{i}]")))
            .collect::<Result<_, _>>()?;
        Ok(NodeSelector { terms })
    }

    /// True when the node satisfies any term.
    pub fn matches(&self, name: &str, labels: &Labels) -> bool {
        self.terms.iter().any(|t| t.matches(name, labels))
    }

    /// The API's node selector, written back.
    pub fn to_api(&self) -> core::NodeSelector {
        core::NodeSelector {
            node_selector_terms: self.terms.iter().map(NodeSelectorTerm::to_api).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs.iter().copied().collect()
    }

    fn req(key: &str, op: &str, values: &[&str]) -> Requirement {
        let values: Vec<String> = values.iter().map(|s| s.to_string()).collect();
        Requirement::compile(key, op, &values, true, "x").unwrap()
    }

    #[test]
    fn operators() {
        let l = labels(&[("zone", "a"), ("gen", "5")]);
        assert!(req("zone", "In", &["a", "b"]).matches(&l));
        assert!(!req("zone", "NotIn", &["a"]).matches(&l));
        assert!(req("other", "NotIn", &["a"]).matches(&l));
        assert!(req("zone", "Exists", &[]).matches(&l));
        assert!(req("other", "DoesNotExist", &[]).matches(&l));
        assert!(req("gen", "Gt", &["4"]).matches(&l));
        assert!(!req("gen", "Gt", &["5"]).matches(&l));
        assert!(req("gen", "Lt", &["6"]).matches(&l));
        assert!(
            !req("zone", "Lt", &["6"]).matches(&l),
            "non-numeric never matches"
        );
    }

    #[test]
    fn rejects_malformed() {
        let e = Requirement::compile("k", "Near", &[], true, "spec.x").unwrap_err();
        assert_eq!(e.to_string(), "spec.x: unsupported operator \"Near\"");
        assert!(Requirement::compile("k", "In", &[], true, "x").is_err());
        assert!(Requirement::compile("k", "Gt", &["a".into()], true, "x").is_err());
        assert!(Requirement::compile("k", "Gt", &["1".into()], false, "x").is_err());
    }

    #[test]
    fn nil_and_empty_selectors() {
        let l = labels(&[("a", "b")]);
        assert!(!LabelSelector::compile(None, "x").unwrap().matches(&l));
        let empty = meta::LabelSelector::default();
        assert!(
            LabelSelector::compile(Some(&empty), "x")
                .unwrap()
                .matches(&l)
        );
    }

    #[test]
    fn node_selector_terms() {
        let term = NodeSelectorTerm {
            expressions: vec![],
            fields: vec![req("metadata.name", "In", &["n1"])],
        };
        assert!(term.matches("n1", &Labels::default()));
        assert!(!term.matches("n2", &Labels::default()));
        let empty = NodeSelectorTerm {
            expressions: vec![],
            fields: vec![],
        };
        assert!(!empty.matches("n1", &Labels::default()));
    }
}
