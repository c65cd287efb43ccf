//! `gantry what-if FILE...`: where the pods of these files would go, and why, against a
//! running gantry's state (`--server`) or a snapshot file (`--snapshot`); how many more
//! replicas fit (`--max`); how many nodes of a shape must be added (`--nodes`). Nothing is
//! written to the cluster.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use gantry_core::config::{Config, yaml};
use gantry_core::plugins;
use gantry_sim::ClusterInput;
use gantry_sim::whatif::{self, Answer, Question};

use crate::report::Output;
use crate::server::ServerArgs;

/// Arguments of `gantry what-if`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// YAML files of Pods, Deployments, ReplicaSets, StatefulSets, Jobs and PodGroups
    /// (several documents, or `List`s); each controller stands for its pods, `<name>-<i>`.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// The running gantry to ask.
    #[command(flatten)]
    server: ServerArgs,
    /// Ask a snapshot file instead (written by `gantry snapshot`, or any `gantry simulate`
    /// input); its pending pods are left out, as a running gantry's queue is.
    #[arg(long, conflicts_with = "server")]
    snapshot: Option<PathBuf>,
    /// With --snapshot: the KubeSchedulerConfiguration (v1) file; kube-scheduler's defaults
    /// without it.
    #[arg(long, requires = "snapshot")]
    config: Option<PathBuf>,
    /// How many more replicas of each workload fit now, and what stops the next one.
    #[arg(long)]
    max: bool,
    /// With --max: the most replicas counted per workload.
    #[arg(long, requires = "max", default_value_t = whatif::DEFAULT_MAX_LIMIT)]
    limit: usize,
    /// How many nodes of --node-template would have to be added, at most N, for every pod
    /// to fit.
    #[arg(
        long,
        value_name = "N",
        requires = "node_template",
        conflicts_with = "max"
    )]
    nodes: Option<usize>,
    /// The Node (YAML) whose shape --nodes adds.
    #[arg(long, requires = "nodes")]
    node_template: Option<PathBuf>,
    /// Output format.
    #[arg(long, short, value_enum, default_value = "table")]
    output: Output,
}

/// Asks and prints the answer.
pub fn run(args: Args) -> anyhow::Result<()> {
    let mut question = Question {
        max: args.max,
        max_limit: args.max.then_some(args.limit),
        add_nodes: args.nodes,
        ..Question::default()
    };
    for file in &args.files {
        question.objects.extend(read_objects(file)?);
    }
    if let Some(path) = &args.node_template {
        let mut objects = read_objects(path)?;
        if objects.len() != 1 {
            bail!(
                "--node-template {}: expected one Node, found {} documents",
                path.display(),
                objects.len()
            );
        }
        question.node_template = objects.pop();
    }
    let answer = match (&args.snapshot, &args.server.server) {
        (Some(path), _) => from_snapshot(path, args.config.as_deref(), &question)?,
        (None, Some(server)) => {
            let body = serde_json::to_vec(&question).context("the question")?;
            let answer =
                args.server
                    .request(server, hyper::Method::POST, "/debug/whatif", Some(body))?;
            serde_json::from_slice(&answer)
                .with_context(|| format!("gantry at {server} answered with no what-if answer"))?
        }
        (None, None) => bail!("give --server (a running gantry) or --snapshot (a file)"),
    };
    match args.output {
        Output::Table => print!("{}", answer.to_table()),
        Output::Json => println!("{}", serde_json::to_string_pretty(&answer)?),
    }
    Ok(())
}

/// Answers `question` against the snapshot file `path`.
fn from_snapshot(
    path: &Path,
    config: Option<&Path>,
    question: &Question,
) -> anyhow::Result<Answer> {
    let registry = plugins::registry();
    let load = || match config {
        Some(path) => Config::load(path, &registry).map_err(|e| e.to_string()),
        None => Config::default_with(&registry).map_err(|e| e.to_string()),
    };
    let config_now = load().map_err(anyhow::Error::msg)?;
    if !config_now.extenders.is_empty() {
        bail!(
            "extenders: a what-if question calls no scheduler extenders (they are HTTP \
             services); remove `extenders` from the configuration to ask about the rest"
        );
    }
    let input = ClusterInput::from_file(path)?;
    let (view, invalid) = whatif::view_of_snapshot(&input, config_now);
    for problem in invalid {
        // Not eprintln!, which panics when stderr is gone.
        let _ = writeln!(std::io::stderr(), "warning: {}: {problem}", path.display());
    }
    Ok(whatif::ask(&load, &view, question)?)
}

/// The objects of a YAML file (documents; empty ones skipped), as JSON values.
fn read_objects(path: &Path) -> anyhow::Result<Vec<serde_json::Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let text = yaml::strip_bom(&text);
    yaml::check_depth(text, yaml::MAX_DEPTH)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mut objects = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value: serde_yaml::Value = serde::Deserialize::deserialize(doc)
            .with_context(|| format!("{}: document {}", path.display(), i + 1))?;
        if value.is_null() {
            continue;
        }
        objects.push(
            serde_json::to_value(value)
                .with_context(|| format!("{}: document {}", path.display(), i + 1))?,
        );
    }
    Ok(objects)
}
