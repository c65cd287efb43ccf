//! `gantry simulate --openb-nodes ... --openb-pods ...`: the FGD paper's experiment on the
//! openb GPU trace, through the scheduling core, one run per policy and seed.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use gantry_core::plugins;
use gantry_core::plugins::gpu_share::Policy;
use gantry_sim::openb::{self, PolicySpec, PolicySummary, Report, Trace};
use rayon::prelude::*;

use crate::report::Output;

/// The openb flags of `gantry simulate`.
#[derive(Debug, Clone, clap::Args)]
#[group(id = "openb")]
pub struct Args {
    /// openb node list (CSV: sn,cpu_milli,memory_mib,gpu,model); runs the FGD paper's
    /// experiment instead of a YAML simulation.
    #[arg(long, requires = "openb_pods")]
    pub openb_nodes: Option<PathBuf>,
    /// openb pod list (CSV: name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...]).
    #[arg(long, requires = "openb_nodes")]
    pub openb_pods: Option<PathBuf>,
    /// GPU placement policy, repeatable: Gantry (gantry's own, the default), FGD, BestFit,
    /// GpuPacking, Spread (case-insensitive). Without it, the default policy runs.
    #[arg(long = "policy", value_name = "NAME")]
    pub policies: Vec<String>,
    /// Seeds: one (`42`), a range (`42..51`, inclusive) or a list (`42,43`); the figures are
    /// means over the seeds.
    #[arg(long, default_value = "42")]
    pub seeds: String,
    /// Writes the allocation-against-arrival curves as an SVG plot, one line per policy.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Runs experiments on this many threads at once (each experiment runs on one).
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
    /// Where fragmentation-aware policies take the typical workload from: `trace` (FGD's
    /// setting: the pod list's most frequent shapes, given in the configuration) or
    /// `learned` (learned online from the arriving pods, as in a live cluster).
    #[arg(long, value_enum, default_value = "trace")]
    pub typical_workload: TypicalSource,
    /// Groups the pods asking for more than one GPU into gangs of this many (2 or more):
    /// consecutive such pods form a PodGroup placed all or nothing by Coscheduling.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(2..))]
    pub gang_size: Option<u32>,
    /// Writes the trace in HAMi's terms: every GPU node registered as HAMi's device plugin
    /// registers it, every share asked as HAMi's `nvidia.com/gpumem-percentage` and
    /// `nvidia.com/gpucores` (both `gpu_milli / 10`).
    #[arg(long)]
    pub hami: bool,
    /// percentageOfNodesToScore of every run: 100 (every node, the paper's setting) or 0
    /// (kube-scheduler's adaptive share, 41% of the 1,213 nodes of openb's cluster), or any
    /// share between.
    #[arg(long, default_value_t = openb::EXPERIMENT_PERCENTAGE,
          value_parser = clap::value_parser!(u32).range(0..=100))]
    pub percentage: u32,
}

/// Where the typical workload comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TypicalSource {
    /// The trace's pod list.
    Trace,
    /// Learned online from the pods the scheduler sees.
    Learned,
}

impl Args {
    /// True when the openb experiment was asked for.
    pub fn is_set(&self) -> bool {
        self.openb_nodes.is_some()
    }
}

/// Parses `42`, `42..51` (inclusive) or `42,43,50`.
fn parse_seeds(text: &str) -> anyhow::Result<Vec<u64>> {
    if let Some((a, b)) = text.split_once("..") {
        let a: u64 = a.trim().parse().context("--seeds: bad range start")?;
        let b: u64 = b
            .trim()
            .trim_start_matches('=')
            .parse()
            .context("--seeds: bad range end")?;
        if b < a {
            bail!("--seeds: empty range {text}");
        }
        return Ok((a..=b).collect());
    }
    text.split(',')
        .map(|s| {
            s.trim()
                .parse()
                .with_context(|| format!("--seeds: bad seed {s:?}"))
        })
        .collect()
}

fn parse_policy(name: &str) -> anyhow::Result<Policy> {
    let wanted = name.to_ascii_lowercase().replace(['-', '_'], "");
    Policy::ALL
        .iter()
        .find(|(n, _)| {
            n.to_ascii_lowercase() == wanted || (wanted == "packing" && *n == "GpuPacking")
        })
        .map(|(_, p)| *p)
        .with_context(|| {
            let names: Vec<&str> = Policy::ALL.iter().map(|(n, _)| *n).collect();
            format!("unknown policy {name:?}; known: {}", names.join(", "))
        })
}

/// Runs the experiment and prints the report.
pub fn run(args: Args, output: Output) -> anyhow::Result<()> {
    let (Some(nodes_path), Some(pods_path)) = (&args.openb_nodes, &args.openb_pods) else {
        bail!("--openb-nodes and --openb-pods go together");
    };
    let seeds = parse_seeds(&args.seeds)?;
    let nodes = openb::load_nodes(nodes_path)?;
    let pods = openb::load_pods(pods_path)?;
    let terms = if args.hami {
        openb::Terms::Hami
    } else {
        openb::Terms::Gantry
    };
    let trace = Trace::in_terms(&nodes, &pods, terms)?;
    let policies: Vec<Policy> = if args.policies.is_empty() {
        vec![Policy::default()]
    } else {
        args.policies
            .iter()
            .flat_map(|p| p.split(','))
            .map(parse_policy)
            .collect::<anyhow::Result<_>>()?
    };
    let specs: Vec<PolicySpec> = policies
        .iter()
        .map(|p| match args.typical_workload {
            TypicalSource::Trace => PolicySpec::published(*p, &trace),
            TypicalSource::Learned => PolicySpec::default_args(*p),
        })
        .collect();
    let registry = plugins::registry();
    let jobs: Vec<(usize, u64)> = (0..specs.len())
        .flat_map(|i| seeds.iter().map(move |s| (i, *s)))
        .collect();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(args.jobs.max(1))
        .build()
        .context("cannot start threads")?;
    let trace = Arc::new(trace);
    let results: Vec<anyhow::Result<(usize, openb::RunResult)>> = pool.install(|| {
        jobs.par_iter()
            .map(|&(i, seed)| {
                let r = openb::run(
                    &trace,
                    &specs[i].args,
                    seed,
                    args.gang_size,
                    args.percentage,
                    &registry,
                )?;
                Ok((i, r))
            })
            .collect()
    });
    let mut by_policy: Vec<Vec<openb::RunResult>> = vec![Vec::new(); specs.len()];
    for r in results {
        let (i, run) = r?;
        by_policy[i].push(run);
    }
    let report = Report {
        nodes: nodes_path.display().to_string(),
        pods: pods_path.display().to_string(),
        cluster_nodes: trace.nodes.len(),
        cluster_gpus: trace.capacity_milli as f64 / 1000.0,
        seeds,
        policies: specs
            .iter()
            .zip(by_policy)
            .map(|(s, runs)| PolicySummary::new(&s.label, runs))
            .collect(),
        gang_size: args.gang_size,
        percentage: args.percentage,
    };
    if let Some(path) = &args.plot {
        std::fs::write(path, report.to_svg())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    match output {
        Output::Table => print!("{}", report.to_table()),
        Output::Json => println!("{}", report.to_json()),
    }
    Ok(())
}
