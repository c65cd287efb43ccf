//! Pods with resource claims, which gantry does not allocate yet (issue 52): such a pod is
//! never bound, whatever the profile, since only an allocation of its claims would give it
//! the devices it asks for. The DynamicResources plugin refuses it at PreFilter; the
//! scheduling cycle refuses it the same way under a profile without that plugin.

use super::{Profile, Status};
use crate::model::PodInfo;

/// kube-scheduler's name of the plugin that allocates claims.
pub const PLUGIN: &str = "DynamicResources";

/// Start of the reason a pod with claims stays pending; the claims follow, then
/// [`ERR_REASON_SUFFIX`].
pub const ERR_REASON_PREFIX: &str = "pod has resource claims [";

/// End of the reason a pod with claims stays pending.
pub const ERR_REASON_SUFFIX: &str = "], which gantry does not allocate yet";

/// Whether `profile` runs the plugin that refuses such pods at PreFilter.
pub fn refused_by(profile: &Profile) -> bool {
    profile.pre_filter.iter().any(|p| p.name() == PLUGIN)
}

/// Why `pod` cannot be bound, if it has resource claims: unresolvable on every node.
pub fn refusal(pod: &PodInfo) -> Option<Status> {
    if pod.resource_claims.is_empty() {
        return None;
    }
    let names: Vec<&str> = pod
        .resource_claims
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    let claims = names.join(" ");
    let reason = format!("{ERR_REASON_PREFIX}{claims}{ERR_REASON_SUFFIX}");
    Some(Status::unresolvable(reason).with_plugin(PLUGIN))
}
