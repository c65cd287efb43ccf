//! `gantry snapshot`: a running gantry's state (nodes, placed and queued pods, PodGroups)
//! written in the simulator's input format, for `gantry simulate` and `gantry what-if
//! --snapshot` to replay offline, or to attach to a bug report.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::{Context, bail};

use crate::server::ServerArgs;

/// Arguments of `gantry snapshot`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The running gantry to read.
    #[command(flatten)]
    server: ServerArgs,
    /// Where to write the snapshot (YAML); standard output without it.
    #[arg(long, short = 'f')]
    file: Option<PathBuf>,
}

/// Reads the snapshot and writes it.
pub fn run(args: Args) -> anyhow::Result<()> {
    let Some(server) = &args.server.server else {
        bail!("give --server: the running gantry to read");
    };
    let yaml = args
        .server
        .request(server, hyper::Method::GET, "/debug/snapshot", None)?;
    match &args.file {
        Some(path) => std::fs::write(path, &yaml)
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => std::io::stdout()
            .write_all(&yaml)
            .context("cannot write the snapshot")?,
    }
    Ok(())
}
