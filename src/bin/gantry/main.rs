//! The `gantry` command: a Kubernetes scheduler, its simulator, and tools around them.

mod bench;
mod explain;
mod openb;
mod report;
mod run;
mod simulate;
mod webhook;

use std::io::IsTerminal;

use anyhow::Context;
use clap::{Parser, Subcommand};

/// gantry: a Kubernetes scheduler written in Rust.
#[derive(Debug, Parser)]
#[command(name = "gantry", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Schedule a cluster snapshot offline through the scheduling core and report the result.
    Simulate(simulate::Args),
    /// Schedule the pods of a real cluster: watch its API server, bind, record events.
    Run(run::Args),
    /// Measure scheduling decisions per second on synthetic clusters (no API server).
    Bench(bench::Args),
    /// Serve the canary admission webhook that routes a share of new pods to gantry.
    Webhook(webhook::Args),
    /// Show a pod's latest scheduling attempts: where it went and why, or why it is pending.
    Explain(explain::Args),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate(args) => simulate::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Run(args) => run::run(args),
        Command::Webhook(args) => webhook::run(args),
        Command::Explain(args) => explain::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Logs to stderr through `filter` (tracing-subscriber's `EnvFilter` syntax), in colour on a
/// terminal: the long-running subcommands (`run`, `webhook`).
fn init_logging(filter: &str) -> anyhow::Result<()> {
    let env_filter = tracing_subscriber::EnvFilter::try_new(filter)
        .with_context(|| format!("invalid log filter {filter:?}"))?;
    tracing_subscriber::fmt()
        .with_env_filter(env_filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn command_line_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
