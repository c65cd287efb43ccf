//! `VolumeBindingArgs`.

use std::time::Duration;

use serde::Deserialize;

use crate::framework::{ArgsError, PluginArgs};

/// kube-scheduler's default `bindTimeoutSeconds`.
pub const DEFAULT_BIND_TIMEOUT_SECONDS: i64 = 600;

/// One point of the utilization-to-score shape (only read with kube-scheduler's
/// `StorageCapacityScoring` feature, which gantry does not have).
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct UtilizationShapePoint {
    /// Utilization, 0..=100.
    pub utilization: i32,
    /// Score, 0..=10.
    pub score: i32,
}

/// VolumeBinding's arguments.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct VolumeBindingArgs {
    /// How long PreBind waits for the PV controller to bind the pod's claims.
    pub bind_timeout_seconds: i64,
    /// Scoring by storage utilization: kube-scheduler refuses it unless its
    /// `StorageCapacityScoring` feature gate is on (off by default), and so does gantry.
    pub shape: Option<Vec<UtilizationShapePoint>>,
}

impl Default for VolumeBindingArgs {
    fn default() -> Self {
        VolumeBindingArgs {
            bind_timeout_seconds: DEFAULT_BIND_TIMEOUT_SECONDS,
            shape: None,
        }
    }
}

impl VolumeBindingArgs {
    /// The bind timeout.
    pub fn bind_timeout(&self) -> Duration {
        Duration::from_secs(u64::try_from(self.bind_timeout_seconds).unwrap_or(0))
    }
}

impl PluginArgs for VolumeBindingArgs {
    const KIND: &'static str = "VolumeBindingArgs";

    fn validate(&self) -> Result<(), ArgsError> {
        if self.bind_timeout_seconds < 0 {
            return Err(ArgsError::new(
                "bindTimeoutSeconds",
                "invalid BindTimeoutSeconds, should not be a negative value",
            ));
        }
        if self.shape.is_some() {
            return Err(ArgsError::new(
                "shape",
                "unexpected field `shape`, remove it or turn on the feature gate StorageCapacityScoring",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::decode_args;

    #[test]
    fn arguments_are_validated_as_kube_scheduler_does() {
        let args: VolumeBindingArgs = decode_args(None).unwrap();
        assert_eq!(args.bind_timeout(), Duration::from_secs(600));
        let zero: VolumeBindingArgs =
            decode_args(Some(&serde_json::json!({"bindTimeoutSeconds": 0}))).unwrap();
        assert_eq!(zero.bind_timeout(), Duration::ZERO);
        let negative =
            decode_args::<VolumeBindingArgs>(Some(&serde_json::json!({"bindTimeoutSeconds": -1})))
                .unwrap_err();
        assert_eq!(negative.field, "bindTimeoutSeconds");
        let shape = decode_args::<VolumeBindingArgs>(Some(&serde_json::json!({
            "shape": [{"utilization": 0, "score": 10}]
        })))
        .unwrap_err();
        assert_eq!(shape.field, "shape");
    }
}
