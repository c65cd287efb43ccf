//! DefaultPreemption: kube-scheduler's PostFilter plugin that, when no node fits a pod, looks
//! for lower-priority pods whose eviction would make room for it.
//!
//! gantry does not preempt yet: the plugin itself comes with issue 20. Until then this module
//! holds its name and its arguments, so that a configuration written for kube-scheduler
//! (`kube-scheduler --write-config-to` gives the arguments) is read and checked as
//! kube-scheduler checks it. It is not registered: a profile that enables DefaultPreemption is
//! refused (it is among the configuration's `UNSUPPORTED_KUBE_PLUGINS`), one that disables it
//! or only gives its arguments is accepted.

mod args;

pub use args::DefaultPreemptionArgs;

/// The name used in configuration files.
pub const NAME: &str = "DefaultPreemption";
