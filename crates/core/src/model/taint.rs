//! Node taints and pod tolerations.

use std::fmt;

use k8s_openapi::api::core::v1 as core;

use super::echo::echo;
/// What a taint does to pods that do not tolerate it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaintEffect {
    /// New pods that do not tolerate it are not scheduled.
    NoSchedule,
    /// The scheduler avoids the node for pods that do not tolerate it.
    PreferNoSchedule,
    /// Running pods that do not tolerate it are evicted; new ones are not scheduled.
    NoExecute,
}

impl TaintEffect {
    /// Parses the API's spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "NoSchedule" => Some(TaintEffect::NoSchedule),
            "PreferNoSchedule" => Some(TaintEffect::PreferNoSchedule),
            "NoExecute" => Some(TaintEffect::NoExecute),
            _ => None,
        }
    }

    /// The API's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}

/// A taint on a node.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Taint {
    /// Taint key.
    pub key: String,
    /// Taint value, possibly empty.
    pub value: String,
    /// Its effect.
    pub effect: TaintEffect,
}

impl fmt::Display for Taint {
    /// Formats as kube-scheduler does in its messages: `{key: value}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{{}: {}}}", self.key, self.value)
    }
}

impl Taint {
    /// Converts an API taint; an unknown effect is an error naming `field`.
    pub fn from_api(t: &core::Taint, field: &str) -> Result<Self, String> {
        let effect = TaintEffect::parse(&t.effect)
            .ok_or_else(|| format!("{field}.effect: unknown taint effect {}", echo(&t.effect)))?;
        Ok(Taint {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
            effect,
        })
    }
}

/// How a toleration compares values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TolerationOperator {
    /// Key and value must be equal.
    Equal,
    /// The key must be equal (or empty, matching every key); the value is ignored.
    Exists,
}

/// A pod's toleration of taints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toleration {
    /// Key to match; empty matches every key (only with `Exists`).
    pub key: String,
    /// How to compare.
    pub operator: TolerationOperator,
    /// Value to match with `Equal`.
    pub value: String,
    /// Effect to match; `None` matches every effect.
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    /// Converts an API toleration; `field` names it in errors.
    pub fn from_api(t: &core::Toleration, field: &str) -> Result<Self, String> {
        let operator = match t.operator.as_deref() {
            None | Some("") | Some("Equal") => TolerationOperator::Equal,
            Some("Exists") => TolerationOperator::Exists,
            Some(other) => {
                return Err(format!(
                    "{field}.operator: unknown operator {}",
                    echo(other)
                ));
            }
        };
        let effect = match t.effect.as_deref() {
            None | Some("") => None,
            Some(e) => Some(
                TaintEffect::parse(e)
                    .ok_or_else(|| format!("{field}.effect: unknown taint effect {}", echo(e)))?,
            ),
        };
        Ok(Toleration {
            key: t.key.clone().unwrap_or_default(),
            operator,
            value: t.value.clone().unwrap_or_default(),
            effect,
        })
    }

    /// True when this toleration tolerates `taint`.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        match self.operator {
            TolerationOperator::Equal => self.value == taint.value,
            TolerationOperator::Exists => true,
        }
    }
}

/// The first taint among `taints` that passes `filter` and that no toleration tolerates.
pub fn find_untolerated<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
    filter: impl Fn(&Taint) -> bool,
) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| filter(t))
        .find(|t| !tolerations.iter().any(|tol| tol.tolerates(t)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: &str, effect: TaintEffect) -> Taint {
        Taint {
            key: key.into(),
            value: value.into(),
            effect,
        }
    }

    fn tol(
        key: &str,
        op: TolerationOperator,
        value: &str,
        effect: Option<TaintEffect>,
    ) -> Toleration {
        Toleration {
            key: key.into(),
            operator: op,
            value: value.into(),
            effect,
        }
    }

    #[test]
    fn matching_rules() {
        let t = taint("dedicated", "gpu", TaintEffect::NoSchedule);
        assert!(tol("dedicated", TolerationOperator::Equal, "gpu", None).tolerates(&t));
        assert!(!tol("dedicated", TolerationOperator::Equal, "cpu", None).tolerates(&t));
        assert!(tol("dedicated", TolerationOperator::Exists, "", None).tolerates(&t));
        assert!(tol("", TolerationOperator::Exists, "", None).tolerates(&t));
        assert!(
            !tol(
                "dedicated",
                TolerationOperator::Exists,
                "",
                Some(TaintEffect::NoExecute)
            )
            .tolerates(&t)
        );
        assert_eq!(t.to_string(), "{dedicated: gpu}");
    }
}
