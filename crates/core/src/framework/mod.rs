//! The plugin framework: extension points, statuses, per-cycle state, and profiles.

pub mod by_domain;
pub mod cycle_state;
pub mod events;
pub mod nominated;
pub mod observer;
pub mod plugin;
pub mod registry;
pub mod resource_claims;
pub mod runners;
pub mod status;
pub mod waiting;

pub use by_domain::{DomainScores, DomainVerdict};
pub use cycle_state::CycleState;
pub use events::{
    ClusterChange, ClusterEvent, EventHint, HintFn, NODE_CHANGES, NODE_CHANGES_AND_POD_DELETES,
    POD_AND_NODE_CHANGES, QueueingHint, may_help,
};
pub use nominated::NominatedPods;
pub use observer::{Observer, Point, Unobserved};
pub use plugin::*;
pub use registry::{
    ARGS_API_VERSION, ArgsError, ArgsResolver, DefaultPlace, Factory, PluginArgs, PluginSpec,
    Registry, decode_args, resolved_args,
};
pub use runners::SkippedFilters;
pub use status::{Code, Status};
pub use waiting::{MAX_PERMIT_WAIT, Verdict, WaitingPod, WaitingPods};
