//! The plugin framework: extension points, statuses, per-cycle state, and profiles.

pub mod cycle_state;
pub mod plugin;
pub mod profile;
pub mod registry;
pub mod status;

pub use cycle_state::CycleState;
pub use plugin::*;
pub use profile::Profile;
pub use registry::{ArgsError, Factory, PluginArgs, Registry, decode_args};
pub use status::{Code, Status};
