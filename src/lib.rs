//! gantry: a Kubernetes scheduler.
//!
//! The scheduling core (model, cache, queue, framework, plugins, cycle) is synchronous and
//! pure; the simulator and the Kubernetes adapter drive it.

#![warn(missing_docs)]

pub mod adapter;
pub mod cache;
pub mod config;
pub mod cycle;
pub mod decision;
pub mod extender;
pub mod framework;
#[cfg(test)]
mod fuzz;
pub mod memory;
pub mod model;
pub mod plugins;
pub mod queue;
pub mod scheduler;
mod signals;
pub mod sim;
pub mod suggest;
pub mod synthetic;
pub mod testing;
pub mod webhook;
pub mod whatif;

/// The library's own tests count memory as the `gantry` binary does.
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: memory::CountingAllocator = memory::CountingAllocator;
