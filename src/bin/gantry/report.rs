//! How `gantry simulate` prints its report, for a cluster snapshot and for a trace alike.

/// Output format.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Output {
    /// Readable tables.
    Table,
    /// JSON: per pod its namespace, name, node (or null) and message.
    Json,
}
