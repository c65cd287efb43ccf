//! `cluster-bench`: the parts of the end-to-end benchmarks (`scripts/bench-cluster.sh`, and
//! `scripts/bench-volumes.sh` with scheduler_perf's volume workloads,
//! `scripts/bench-preemption.sh` with its preemption workload) that must be fast and
//! exact: creating thousands of nodes and pods (with their claims and volumes), a null
//! binder, the measured run (watching bindings, sampling the scheduler's memory and CPU,
//! checking placements and volume bindings), clearing a run's objects, the report, and a
//! volume workload's cluster for the simulator, and the replay of scheduler_perf's other
//! workloads (`scripts/bench-scheduler-perf.sh`). A separate binary, so that none of it is in
//! `gantry`.

mod check;
mod clear;
mod gangs;
mod measure;
mod null_binder;
mod null_preemptor;
mod perf_background;
mod perf_config;
mod perf_objects;
mod populate;
mod preemption;
mod procfs;
mod prom;
mod report;
mod scheduler_perf;
mod volume_list;
mod volumes;

use std::path::Path;

use anyhow::Context;
use clap::{Parser, Subcommand};
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// The namespace of the pods `populate` creates and `run` measures, unless `--namespace`
/// says otherwise.
const DEFAULT_NAMESPACE: &str = "default";
/// Requests in flight at once, unless `--concurrency` says otherwise: `populate`'s creates and
/// `clear`'s deletes.
const DEFAULT_CONCURRENCY: usize = 64;

/// Tools of the end-to-end benchmark against a real API server.
#[derive(Debug, Parser)]
#[command(name = "cluster-bench", about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create the synthetic nodes and pending pods.
    Populate(populate::Args),
    /// Start a scheduler and measure it until every pod is bound.
    Run(Box<measure::Args>),
    /// Delete a run's pods (and claims and volumes).
    Clear(clear::Args),
    /// Bind every pending pod round-robin, deciding nothing (the API server's ceiling).
    NullBinder(null_binder::Args),
    /// Make the preemption workload's API writes, deciding nothing (the API server's ceiling).
    NullPreemptor(null_preemptor::Args),
    /// Print the table of a set of runs, the ratios and the targets.
    Report(report::Args),
    /// Print a volume workload's cluster, bound as the PV controller leaves it, as one JSON
    /// List for `gantry simulate`.
    VolumeList(volume_list::Args),
    /// Replay a phase of one of kube-scheduler's scheduler_perf workloads (its
    /// performance-config.yaml and templates).
    SchedulerPerf(scheduler_perf::Args),
    /// Print a free loopback TCP port.
    FreePort,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Report(args) => report::run(args),
        Command::FreePort => free_port(),
        Command::VolumeList(args) => volume_list::run(args),
        command => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("cannot start the async runtime")
            .and_then(|rt| {
                rt.block_on(async move {
                    match command {
                        Command::Populate(args) => populate::run(args).await,
                        Command::Run(args) => measure::run(*args).await,
                        Command::Clear(args) => clear::run(args).await,
                        Command::NullBinder(args) => null_binder::run(args).await,
                        Command::NullPreemptor(args) => null_preemptor::run(args).await,
                        Command::SchedulerPerf(args) => scheduler_perf::run(args).await,
                        Command::Report(_) | Command::FreePort | Command::VolumeList(_) => Ok(()),
                    }
                })
            }),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cluster-bench: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// A client from a kubeconfig file, over HTTP/2 when the API server offers it (as gantry's
/// and kube-scheduler's); no client-side throttling.
async fn client(kubeconfig: &Path) -> anyhow::Result<Client> {
    let file = Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("cannot read {}", kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("cannot use {}", kubeconfig.display()))?;
    gantry_adapter::client::build(config, None, None).context("cannot build the API client")
}

/// Returns at SIGTERM or SIGINT.
async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

/// A loopback port that is free now (the caller binds it right after).
fn free_port() -> anyhow::Result<()> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    println!("{}", listener.local_addr()?.port());
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
