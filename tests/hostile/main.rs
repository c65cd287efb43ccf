//! Invalid and hostile input, without a control plane: the built binary refuses a bad
//! configuration before it contacts anything, and the webhook's HTTPS server stands up to
//! broken and idle clients.

use gantry_test_support as support;

mod config;
mod webhook;
