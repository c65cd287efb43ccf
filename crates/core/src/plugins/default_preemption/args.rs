//! `DefaultPreemptionArgs`.

use serde::Deserialize;

use crate::framework::{ArgsError, PluginArgs};

/// kube-scheduler's default `minCandidateNodesPercentage`.
const DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE: i32 = 10;
/// kube-scheduler's default `minCandidateNodesAbsolute`.
const DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE: i32 = 100;

/// DefaultPreemption's arguments: how many nodes a preemption attempt tries at least.
/// kube-scheduler dry-runs preemption on max(nodes × percentage / 100, absolute) candidate
/// nodes (all of them in a smaller cluster), and keeps the best.
#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct DefaultPreemptionArgs {
    /// The fewest candidates, as a percentage of the nodes: 0 to 100 (default 10).
    pub min_candidate_nodes_percentage: i32,
    /// The fewest candidates, as a number of nodes: at least 0 (default 100).
    pub min_candidate_nodes_absolute: i32,
}

impl Default for DefaultPreemptionArgs {
    fn default() -> Self {
        DefaultPreemptionArgs {
            min_candidate_nodes_percentage: DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE,
            min_candidate_nodes_absolute: DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE,
        }
    }
}

impl PluginArgs for DefaultPreemptionArgs {
    const KIND: &'static str = "DefaultPreemptionArgs";

    /// kube-scheduler's checks, in its order; the first failure is reported. Both numbers at
    /// 0 would leave no candidate: kube-scheduler reports that on each field, and so does the
    /// one error here, on the arguments.
    fn validate(&self) -> Result<(), ArgsError> {
        let percentage = self.min_candidate_nodes_percentage;
        let absolute = self.min_candidate_nodes_absolute;
        if !(0..=100).contains(&percentage) {
            return Err(ArgsError::new(
                "minCandidateNodesPercentage",
                format!("Invalid value: {percentage}: not in valid range [0, 100]"),
            ));
        }
        if absolute < 0 {
            return Err(ArgsError::new(
                "minCandidateNodesAbsolute",
                format!("Invalid value: {absolute}: not in valid range [0, inf)"),
            ));
        }
        if percentage == 0 && absolute == 0 {
            return Err(ArgsError::new(
                "",
                "minCandidateNodesPercentage: Invalid value: 0: cannot be zero at the same time \
                 as minCandidateNodesAbsolute, minCandidateNodesAbsolute: Invalid value: 0: \
                 cannot be zero at the same time as minCandidateNodesPercentage",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::decode_args;
    use serde_json::json;

    fn decode(args: serde_json::Value) -> Result<DefaultPreemptionArgs, ArgsError> {
        decode_args(Some(&args))
    }

    #[test]
    fn defaults_are_kube_schedulers() {
        let args: DefaultPreemptionArgs = decode_args(None).unwrap();
        assert_eq!(
            (
                args.min_candidate_nodes_percentage,
                args.min_candidate_nodes_absolute
            ),
            (10, 100)
        );
        let written = decode(json!({
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "DefaultPreemptionArgs",
            "minCandidateNodesAbsolute": 100,
            "minCandidateNodesPercentage": 10,
        }))
        .unwrap();
        assert_eq!(written, args);
        let one = decode(json!({"minCandidateNodesPercentage": 0})).unwrap();
        assert_eq!(one.min_candidate_nodes_absolute, 100);
    }

    #[test]
    fn arguments_are_validated_as_kube_scheduler_does() {
        for (args, field, reason) in [
            (
                json!({"minCandidateNodesPercentage": 101}),
                "minCandidateNodesPercentage",
                "Invalid value: 101: not in valid range [0, 100]",
            ),
            (
                json!({"minCandidateNodesPercentage": -1}),
                "minCandidateNodesPercentage",
                "Invalid value: -1: not in valid range [0, 100]",
            ),
            (
                json!({"minCandidateNodesAbsolute": -1}),
                "minCandidateNodesAbsolute",
                "Invalid value: -1: not in valid range [0, inf)",
            ),
        ] {
            assert_eq!(decode(args).unwrap_err(), ArgsError::new(field, reason));
        }
        let both =
            decode(json!({"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0}))
                .unwrap_err();
        assert_eq!(both.field, "");
        assert!(
            both.reason.contains(
                "minCandidateNodesPercentage: Invalid value: 0: cannot be zero at the same time as minCandidateNodesAbsolute"
            ) && both.reason.contains(
                "minCandidateNodesAbsolute: Invalid value: 0: cannot be zero at the same time as minCandidateNodesPercentage"
            ),
            "{both}"
        );
        assert!(
            decode(json!({"minCandidateNodesPercentage": 100, "minCandidateNodesAbsolute": 0}))
                .is_ok()
        );
        assert!(
            decode(json!({"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 1}))
                .is_ok()
        );
    }

    #[test]
    fn unknown_fields_and_other_kinds_are_refused() {
        let typo = decode(json!({"minCandidateNodes": 5})).unwrap_err();
        assert!(
            typo.reason.starts_with("unknown field `minCandidateNodes`"),
            "{typo}"
        );
        let kind = decode(json!({"kind": "VolumeBindingArgs"})).unwrap_err();
        assert_eq!(kind.field, "kind");
        let large = decode(json!({"minCandidateNodesAbsolute": 3_000_000_000u64})).unwrap_err();
        assert_eq!(
            large.field, "minCandidateNodesAbsolute",
            "an int32, as in kube-scheduler"
        );
    }
}
