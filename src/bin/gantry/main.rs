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

/// The log filter of `run` and `webhook` when neither `--log` nor `GANTRY_LOG` gives one.
const DEFAULT_LOG: &str = "info";

/// The log flag of the long-running subcommands (`run`, `webhook`), defined once for both.
#[derive(Debug, clap::Args)]
struct LogArgs {
    /// Log filter (tracing-subscriber's `EnvFilter` syntax, e.g. `info` or `gantry=debug`).
    #[arg(long, env = "GANTRY_LOG", default_value = DEFAULT_LOG)]
    log: String,
}

impl LogArgs {
    /// Logs to stderr through the filter, in colour on a terminal.
    fn init(&self) -> anyhow::Result<()> {
        let filter = &self.log;
        let env_filter = tracing_subscriber::EnvFilter::try_new(filter)
            .with_context(|| format!("invalid log filter {filter:?}"))?;
        tracing_subscriber::fmt()
            .with_env_filter(env_filter)
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .init();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn command_line_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }

    /// The flags `A` as a command of their own.
    pub(crate) fn command<A: clap::Args>() -> clap::Command {
        A::augment_args(clap::Command::new("gantry-test"))
    }

    /// Asserts that `--help` of the flags `A` shows a default for exactly the flags of
    /// `expected` (by id), each the one given: so that a default written apart from the
    /// definition it should come from, or a new flag's default left unchecked, fails.
    pub(crate) fn assert_shown_defaults<A: clap::Args>(expected: &[(&str, String)]) {
        let command = command::<A>();
        let help = command.clone().render_long_help().to_string();
        let mut shown: Vec<(String, String)> = command
            .get_arguments()
            .filter(|a| !a.get_default_values().is_empty())
            .map(|a| {
                assert!(
                    !a.is_hide_default_value_set(),
                    "{}: default hidden",
                    a.get_id()
                );
                let values: Vec<String> = a
                    .get_default_values()
                    .iter()
                    .map(|v| v.to_string_lossy().into_owned())
                    .collect();
                (a.get_id().to_string(), values.join(","))
            })
            .collect();
        let mut expected: Vec<(String, String)> = expected
            .iter()
            .map(|(id, value)| (id.to_string(), value.clone()))
            .collect();
        shown.sort();
        expected.sort();
        assert_eq!(shown, expected);
        for (id, value) in &shown {
            assert!(
                help.contains(&format!("[default: {value}]")),
                "{id}: {help}"
            );
        }
    }

    /// The flags `A` read from `argv`: a flag left out takes the default `--help` shows.
    pub(crate) fn parse<A: clap::Args + clap::FromArgMatches>(argv: &[&str]) -> A {
        let matches = command::<A>()
            .try_get_matches_from(std::iter::once("gantry-test").chain(argv.iter().copied()))
            .expect("valid arguments");
        A::from_arg_matches(&matches).expect("arguments of their type")
    }
}
