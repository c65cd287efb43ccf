//! `gantry simulate`: schedule a snapshot offline.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use gantry_core::config::Config;
use gantry_core::decision::file::DecisionLog;
use gantry_core::decision::{DecisionRecorder, DecisionStore};
use gantry_core::plugins;
use gantry_sim::{self as sim, ClusterInput};

use crate::report::Output;

/// Arguments of `gantry simulate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Kubernetes YAML files (multi-document or `List`); pods with `spec.nodeName` are running,
    /// the others are scheduled in order. Without files, an embedded example cluster is used.
    files: Vec<PathBuf>,
    /// A KubeSchedulerConfiguration (v1) file; kube-scheduler's defaults without it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Output format.
    #[arg(long, short, value_enum, default_value = "table")]
    output: Output,
    /// The openb GPU trace experiment.
    #[command(flatten)]
    openb: crate::openb::Args,
    /// The decision log: every attempt's record, as `gantry run` writes it.
    #[command(flatten)]
    decision_log: crate::explain::DecisionLogArgs,
}

/// Runs the simulation and prints the report.
pub fn run(args: Args) -> anyhow::Result<()> {
    if args.openb.is_set() {
        if args.decision_log.decision_log.is_some() {
            anyhow::bail!("--decision-log is not available for the openb experiment");
        }
        return crate::openb::run(args.openb, args.output);
    }
    let registry = plugins::registry();
    let config = match &args.config {
        Some(path) => Config::load(path, &registry)?,
        None => Config::default_with(&registry)?,
    };
    if !config.extenders.is_empty() {
        anyhow::bail!(
            "extenders: the simulator calls no scheduler extenders (they are HTTP services); \
             remove `extenders` from the configuration to simulate the rest"
        );
    }
    let mut input = ClusterInput::default();
    if args.files.is_empty() {
        input.add_yaml(sim::EXAMPLE, "<embedded example>")?;
    }
    for file in &args.files {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        input.add_yaml(&text, &file.display().to_string())?;
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(config.parallelism)
        .build()
        .context("cannot start the scheduling threads")?;
    let pool = Arc::new(pool);
    let recorder = match args.decision_log.rotation() {
        Some(rotation) => Some(DecisionRecorder::new(
            // The file is the output: the store needs to hold nothing.
            DecisionStore::shared(1),
            Some(DecisionLog::start(rotation)?),
            true,
        )),
        None => None,
    };
    // Driven from inside the pool, parallel steps need no cross-thread wake-up of the caller.
    let report = pool
        .install(|| sim::simulate_recorded(&input, config, Some(pool.clone()), recorder.as_ref()));
    if let Some(r) = recorder {
        r.close();
    }
    match args.output {
        Output::Table => print!("{}", report.to_table()),
        Output::Json => println!("{}", report.to_json()),
    }
    Ok(())
}
