//! `--feature-gates`: kube-scheduler's list of `Name=true|false` pairs (or, as 1.37 writes
//! them, `kube:Name=true|false`), read against the feature gates kube-scheduler knows, with
//! their defaults ([`GATES`], generated from the Kubernetes module by
//! `scripts/feature-gates.sh`). An unknown gate is an error, as in kube-scheduler; so is a
//! gate locked to its default set otherwise. gantry schedules as kube-scheduler does with
//! every gate at its default: a gate kube-scheduler's code reads, set away from its default,
//! is refused by name rather than silently ignored. Gates only other components read (the
//! kubelet's, the API server's) change nothing in a scheduler and are accepted.

/// One known gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gate {
    /// The gate's name.
    pub name: &'static str,
    /// Its default.
    pub default: bool,
    /// Whether it is locked to its default (GA or deprecated for good).
    pub locked: bool,
    /// Whether it changes what kube-scheduler does.
    pub scheduler: bool,
}

const fn gate(name: &'static str, default: bool, locked: bool, scheduler: bool) -> Gate {
    Gate {
        name,
        default,
        locked,
        scheduler,
    }
}

include!("feature_gate_table.rs");

/// The component whose gates kube-scheduler's `--feature-gates` sets, named or implied.
const COMPONENT: &str = "kube";

/// Reads `--feature-gates`; the error names the first pair that cannot be had.
pub fn parse(text: &str) -> Result<(), String> {
    let mut prefixed: Option<bool> = None;
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("missing bool value for {pair}"))?;
        let (component, name) = match key.trim().split_once(':') {
            Some((component, name)) => (Some(component.trim()), name.trim()),
            None => (None, key.trim()),
        };
        if let Some(c) = component.filter(|c| *c != COMPONENT) {
            return Err(format!("component not registered: {c}"));
        }
        if *prefixed.get_or_insert(component.is_some()) != component.is_some() {
            return Err(format!(
                "set {COMPONENT} feature gates with default empty prefix or {COMPONENT}: \
                 prefix consistently, do not mix use"
            ));
        }
        check(name, value.trim())?;
    }
    Ok(())
}

/// Checks one gate set to `value`.
fn check(name: &str, value: &str) -> Result<(), String> {
    let value = crate::kube_flags::go_bool(value)
        .map_err(|_| format!("invalid value of {name}={value}, err: not a boolean"))?;
    let gate = GATES
        .binary_search_by(|g| g.name.cmp(name))
        .map(|i| GATES[i])
        .map_err(|_| format!("unrecognized feature gate: {name}"))?;
    if value == gate.default {
        return Ok(());
    }
    if gate.locked {
        return Err(format!(
            "cannot set feature gate {name} to {value}, feature is locked to {}",
            gate.default
        ));
    }
    if gate.scheduler {
        return Err(format!(
            "feature gate {name}={value} is not supported: gantry schedules as kube-scheduler \
             does with {name}={}",
            gate.default
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gates_are_sorted_and_unique() {
        assert!(GATES.windows(2).all(|w| w[0].name < w[1].name));
    }

    #[test]
    fn known_gates_pass_others_fail_by_name() {
        assert_eq!(parse(""), Ok(()));
        assert_eq!(parse("SchedulerAsyncPreemption=true,NodeSwap=true"), Ok(()));
        assert_eq!(
            parse("CPUManagerPolicyAlphaOptions=true"),
            Ok(()),
            "the kubelet's"
        );
        assert_eq!(
            parse("NoSuchGate=true"),
            Err("unrecognized feature gate: NoSuchGate".to_string())
        );
        assert!(parse("KubeletPSI=false").unwrap_err().contains("locked"));
        assert!(
            parse("PodLevelResources")
                .unwrap_err()
                .contains("missing bool value")
        );
        assert!(
            parse("PodLevelResources=maybe")
                .unwrap_err()
                .contains("PodLevelResources=maybe")
        );
    }

    #[test]
    fn a_scheduler_gate_away_from_its_default_is_refused_by_name() {
        let e = parse("PodLevelResources=false").unwrap_err();
        assert!(
            e.starts_with("feature gate PodLevelResources=false is not supported"),
            "{e}"
        );
        assert!(parse("AllAlpha=true").unwrap_err().contains("AllAlpha"));
    }

    #[test]
    fn the_kube_component_may_be_named_but_consistently() {
        assert_eq!(parse("kube:SchedulerAsyncPreemption=true"), Ok(()));
        assert_eq!(
            parse("wardle:FeatureA=true"),
            Err("component not registered: wardle".to_string())
        );
        assert!(
            parse("SchedulerAsyncPreemption=true,kube:NodeSwap=true")
                .unwrap_err()
                .contains("do not mix use")
        );
    }
}
