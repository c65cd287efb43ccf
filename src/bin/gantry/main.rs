//! The `gantry` command: a Kubernetes scheduler, its simulator, and tools around them.

mod bench;
mod bench_whatif;
mod explain;
mod feature_gates;
mod kube_flags;
mod openb;
mod quality;
mod report;
mod run;
mod server;
mod simulate;
mod snapshot;
mod webhook;
mod what_if;
mod write_config;

use std::io::{IsTerminal, Write};

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

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
    Run(Box<run::Args>),
    /// Measure scheduling decisions per second on synthetic clusters (no API server).
    Bench(bench::Args),
    /// Serve the canary admission webhook that routes a share of new pods to gantry.
    Webhook(webhook::Args),
    /// Show a pod's latest scheduling attempts: where it went and why, or why it is pending.
    Explain(explain::Args),
    /// Where pods would go, and why, or how many more replicas fit, against a running
    /// gantry's state or a snapshot, without touching the cluster.
    WhatIf(Box<what_if::Args>),
    /// Write a running gantry's state (nodes, placed and queued pods, PodGroups) in the
    /// simulator's input format, to replay offline.
    Snapshot(snapshot::Args),
}

/// Opens /dev/null on each standard descriptor (0, 1, 2) that is closed. A process started
/// with `2>&-` would otherwise hand descriptor 2 to the first file or socket it opens, and
/// every log line would go there (into a connection to the API server, say).
fn reopen_closed_standard_descriptors() {
    use std::os::fd::{BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};
    for fd in 0..=2 {
        // SAFETY: the descriptor is only asked about (fcntl F_GETFD), never used.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        if rustix::io::fcntl_getfd(borrowed) != Err(rustix::io::Errno::BADF) {
            continue;
        }
        let Ok(null) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
        else {
            return;
        };
        // The lowest free descriptor: `fd` itself, kept open for the process's life.
        let raw = null.into_raw_fd();
        if raw != fd {
            // SAFETY: `raw` was just opened here and is owned by nothing else.
            drop(unsafe { OwnedFd::from_raw_fd(raw) });
        }
    }
}

/// Counts the memory each thread holds, so that what-if questions keep to their budget.
#[global_allocator]
static ALLOCATOR: gantry_core::memory::CountingAllocator = gantry_core::memory::CountingAllocator;

fn main() -> std::process::ExitCode {
    reopen_closed_standard_descriptors();
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let sub = matches
        .subcommand()
        .map(|(_, m)| m.clone())
        .unwrap_or_default();
    let result = match cli.command {
        Command::Simulate(args) => simulate::run(args),
        Command::Bench(args) if !args.fill.is_empty() => quality::run(&args),
        Command::Bench(args) => bench::run(args),
        Command::Run(args) => run::run(*args, &sub),
        Command::Webhook(args) => webhook::run(args),
        Command::Explain(args) => explain::run(args),
        Command::WhatIf(args) => what_if::run(*args),
        Command::Snapshot(args) => snapshot::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // Not eprintln!, which panics when stderr is gone (a closed pipe): the exit
            // status says the same.
            let _ = writeln!(std::io::stderr(), "error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The log filter of `run` and `webhook` when neither `--log` nor `GANTRY_LOG` gives one.
const DEFAULT_LOG: &str = "info";

/// The log flags of the long-running subcommands (`run`, `webhook`), defined once for both.
#[derive(Debug, clap::Args)]
struct LogArgs {
    /// Log filter (tracing-subscriber's `EnvFilter` syntax, e.g. `info` or `gantry=debug`).
    #[arg(long, env = "GANTRY_LOG", default_value = DEFAULT_LOG)]
    log: String,
    /// kube-scheduler's (klog's) verbosity, used when --log is left at its default: 0 to 2
    /// log at `info`, 3 and 4 add gantry's `debug`, 5 gantry's `trace`, 6 and 7 `debug` for
    /// everything (the API client's requests included), 8 and more `trace`.
    #[arg(short = 'v', long = "v", value_name = "LEVEL")]
    verbosity: Option<u8>,
}

/// The tracing filter for klog's verbosity `level` (see [`LogArgs`]).
fn verbosity_filter(level: u8) -> &'static str {
    match level {
        0..=2 => "info",
        3..=4 => "info,gantry=debug",
        5 => "info,gantry=trace",
        6..=7 => "debug",
        _ => "trace",
    }
}

impl LogArgs {
    /// The filter: --log (or `GANTRY_LOG`) if it says other than the default, else the one
    /// -v gives, else the default.
    fn filter(&self) -> &str {
        match self.verbosity {
            Some(level) if self.log == DEFAULT_LOG => verbosity_filter(level),
            _ => &self.log,
        }
    }

    /// Logs to stderr through the filter, in colour on a terminal. A write that fails (a
    /// closed stderr) loses the line and nothing else.
    fn init(&self) -> anyhow::Result<()> {
        let filter = self.filter();
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

    #[test]
    fn klog_verbosity_maps_onto_the_filter_unless_a_filter_is_given() {
        let log: super::LogArgs = parse(&["-v", "4"]);
        assert_eq!(log.filter(), "info,gantry=debug");
        let log: super::LogArgs = parse(&["--v=2"]);
        assert_eq!(log.filter(), "info");
        let log: super::LogArgs = parse(&["--v=9", "--log", "warn"]);
        assert_eq!(log.filter(), "warn");
        let log: super::LogArgs = parse(&[]);
        assert_eq!(log.filter(), super::DEFAULT_LOG);
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
