//! gantry's scheduling core: the model, the cache, the queue, the framework and its plugins,
//! the scheduling cycle, the scheduler's state machine and its decision records.
//!
//! Synchronous and pure: this crate depends on no async runtime, HTTP stack, Kubernetes
//! client or clock. The time is passed in, and the front ends (the simulator, the
//! Kubernetes adapter) drive it.

#![warn(missing_docs)]

pub mod cache;
pub mod config;
pub mod cycle;
pub mod decision;
pub mod extender;
pub mod framework;
pub mod kinds;
pub mod memory;
pub mod model;
pub mod plugins;
pub mod queue;
pub mod scheduler;
pub mod suggest;
pub mod synthetic;
pub mod testing;

/// The crate's own tests count memory as the `gantry` binary does.
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: memory::CountingAllocator = memory::CountingAllocator;
