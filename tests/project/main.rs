//! The repository's own rules: the docs quote the code exactly and their links resolve, and
//! the source files import each other without cycles.

mod docs;
mod layers;
