//! What the tests of several crates share: the strategies of the `fuzz_` properties.

pub mod fuzz;
