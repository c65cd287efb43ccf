//! `VolumeBindingArgs`.

use std::time::Duration;

use serde::Deserialize;

use crate::framework::{ArgsError, PluginArgs};
use crate::plugins::shape::{
    MAX_SHAPE_SCORE, MAX_SHAPE_UTILIZATION, UtilizationShapePoint, check_shape,
};

/// kube-scheduler's default `bindTimeoutSeconds`.
pub const DEFAULT_BIND_TIMEOUT_SECONDS: i64 = 600;

/// kube-scheduler 1.37's default shape (its `StorageCapacityScoring` gate is on by
/// default): the emptier the storage, the better.
pub const DEFAULT_SHAPE: [UtilizationShapePoint; 2] = [
    UtilizationShapePoint {
        utilization: 0,
        score: MAX_SHAPE_SCORE,
    },
    UtilizationShapePoint {
        utilization: MAX_SHAPE_UTILIZATION,
        score: 0,
    },
];

/// VolumeBinding's arguments.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct VolumeBindingArgs {
    /// How long PreBind waits for the PV controller to bind the pod's claims.
    pub bind_timeout_seconds: i64,
    /// The score of a node by the utilization of the storage the pod's claims would use
    /// there ([`DEFAULT_SHAPE`] when unset or empty, as kube-scheduler defaults it).
    pub shape: Option<Vec<UtilizationShapePoint>>,
}

impl Default for VolumeBindingArgs {
    fn default() -> Self {
        VolumeBindingArgs {
            bind_timeout_seconds: DEFAULT_BIND_TIMEOUT_SECONDS,
            shape: Some(DEFAULT_SHAPE.to_vec()),
        }
    }
}

impl VolumeBindingArgs {
    /// The bind timeout.
    pub fn bind_timeout(&self) -> Duration {
        Duration::from_secs(u64::try_from(self.bind_timeout_seconds).unwrap_or(0))
    }

    /// The shape nodes are scored by.
    pub fn effective_shape(&self) -> &[UtilizationShapePoint] {
        match &self.shape {
            Some(points) if !points.is_empty() => points,
            _ => &DEFAULT_SHAPE,
        }
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
        check_shape(self.effective_shape(), "shape")
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
        assert_eq!(args.effective_shape(), DEFAULT_SHAPE);
        let packing: VolumeBindingArgs = decode_args(Some(&serde_json::json!({
            "shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]
        })))
        .unwrap();
        assert_eq!(packing.effective_shape()[1].score, 10);
        let empty: VolumeBindingArgs =
            decode_args(Some(&serde_json::json!({"shape": []}))).unwrap();
        assert_eq!(empty.effective_shape(), DEFAULT_SHAPE);
        let unsorted = decode_args::<VolumeBindingArgs>(Some(&serde_json::json!({
            "shape": [{"utilization": 50, "score": 1}, {"utilization": 50, "score": 2}]
        })))
        .unwrap_err();
        assert_eq!(unsorted.field, "shape[1].utilization");
        let too_high = decode_args::<VolumeBindingArgs>(Some(&serde_json::json!({
            "shape": [{"utilization": 0, "score": 11}]
        })))
        .unwrap_err();
        assert_eq!(too_high.field, "shape[0].score");
    }
}
