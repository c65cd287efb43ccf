//! Utilization-to-score shapes: the piecewise-linear functions kube-scheduler scores with in
//! NodeResourcesFit's RequestedToCapacityRatio strategy and in VolumeBinding's storage
//! capacity scoring, with their arguments' checks.

use serde::Deserialize;

use crate::framework::{ArgsError, MAX_NODE_SCORE};

/// Highest score a point of a shape may give (kube-scheduler's `MaxCustomPriorityScore`);
/// shape scores are scaled to [`MAX_NODE_SCORE`].
pub const MAX_SHAPE_SCORE: i32 = 10;
/// Highest utilization (percent) a shape point may name.
pub const MAX_SHAPE_UTILIZATION: i32 = 100;

/// A point of a shape: at `utilization` percent the score is `score` (0..=10).
#[derive(Debug, Clone, Copy, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct UtilizationShapePoint {
    /// Utilization in percent, 0..=100.
    pub utilization: i32,
    /// Score at that utilization, 0..=10.
    pub score: i32,
}

/// kube-scheduler's checks of a shape: at least one point, utilization strictly increasing
/// and within 0..=100, score within 0..=10.
pub fn check_shape(shape: &[UtilizationShapePoint], field: &str) -> Result<(), ArgsError> {
    if shape.is_empty() {
        return Err(ArgsError::new(
            field,
            "Required value: at least one point must be specified",
        ));
    }
    for (i, pair) in shape.windows(2).enumerate() {
        if pair[0].utilization >= pair[1].utilization {
            return Err(ArgsError::new(
                format!("{field}[{}].utilization", i + 1),
                format!(
                    "Invalid value: {}: values must be sorted in increasing order",
                    pair[1].utilization
                ),
            ));
        }
    }
    for (i, p) in shape.iter().enumerate() {
        if !(0..=MAX_SHAPE_UTILIZATION).contains(&p.utilization) {
            return Err(ArgsError::new(
                format!("{field}[{i}].utilization"),
                format!(
                    "Invalid value: {}: not in valid range [0, {MAX_SHAPE_UTILIZATION}]",
                    p.utilization
                ),
            ));
        }
        if !(0..=MAX_SHAPE_SCORE).contains(&p.score) {
            return Err(ArgsError::new(
                format!("{field}[{i}].score"),
                format!(
                    "Invalid value: {}: not in valid range [0, {MAX_SHAPE_SCORE}]",
                    p.score
                ),
            ));
        }
    }
    Ok(())
}

/// The piecewise-linear function through `shape` at `p`, flat beyond the first and last
/// points, with kube-scheduler's integer interpolation (truncating towards zero).
pub fn broken_linear(shape: &[(i64, i64)], p: i64) -> i64 {
    for (i, &(u, s)) in shape.iter().enumerate() {
        if p <= u {
            if i == 0 {
                return s;
            }
            let (u0, s0) = shape[i - 1];
            return s0 + (s - s0) * (p - u0) / (u - u0);
        }
    }
    shape.last().map_or(0, |&(_, s)| s)
}

/// `shape` with its scores scaled to [`MAX_NODE_SCORE`], for [`broken_linear`].
pub fn scaled_to_node_scores(shape: &[UtilizationShapePoint]) -> Vec<(i64, i64)> {
    let scale = MAX_NODE_SCORE / i64::from(MAX_SHAPE_SCORE);
    shape
        .iter()
        .map(|p| (i64::from(p.utilization), i64::from(p.score) * scale))
        .collect()
}
