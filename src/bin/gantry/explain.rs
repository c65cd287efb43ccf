//! `gantry explain <namespace>/<pod>`: the pod's latest scheduling attempts, from a running
//! gantry (`--server`) or a decision log file (`--file`), as a table or JSON. Also the
//! decision-log flags `gantry run` and `gantry simulate` share.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use gantry_core::decision::explain::explain;
use gantry_core::decision::file::{self, Rotation};
use gantry_core::decision::{DecisionRecord, store};
use gantry_core::model::quantity::Quantity;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;

/// How long `--server` may take to answer.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Output format.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Output {
    /// A readable explanation per attempt.
    Table,
    /// The decision records, newest first, as a JSON array.
    Json,
}

/// Arguments of `gantry explain`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The pod, as <namespace>/<name>.
    pod: String,
    /// A running gantry's HTTP address (its `--address`), e.g. http://127.0.0.1:10251.
    #[arg(long, conflicts_with = "file", required_unless_present = "file")]
    server: Option<String>,
    /// A decision log file written with `--decision-log` (its rotated files `<file>.1`, ...
    /// are read too).
    #[arg(long)]
    file: Option<PathBuf>,
    /// Output format.
    #[arg(long, short, value_enum, default_value = "table")]
    output: Output,
    /// How many of the latest attempts to show.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    attempts: u32,
}

/// The decision-log flags of `gantry run` and `gantry simulate`.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Decision log (see `gantry explain`)")]
pub struct DecisionLogArgs {
    /// Append every scheduling attempt's decision record to this JSON-lines file.
    #[arg(long)]
    pub decision_log: Option<PathBuf>,
    /// Size at which the decision log is rotated (a quantity: 64Mi, 1Gi, 500000).
    #[arg(long, default_value_t = Size(file::DEFAULT_MAX_SIZE))]
    pub decision_log_max_size: Size,
    /// Rotated decision log files kept (<file>.1 is the newest), besides the current one.
    #[arg(long, default_value_t = file::DEFAULT_MAX_FILES)]
    pub decision_log_max_files: usize,
}

impl DecisionLogArgs {
    /// The file settings, when a file is asked for.
    pub fn rotation(&self) -> Option<Rotation> {
        self.decision_log.as_ref().map(|path| Rotation {
            path: path.clone(),
            max_size: self.decision_log_max_size.0,
            max_files: self.decision_log_max_files,
        })
    }
}

/// The in-memory record count of `gantry run`.
pub const DEFAULT_RECORDS: usize = store::DEFAULT_CAPACITY;

/// A positive size in bytes, read as a quantity (`64Mi`, `1Gi`, `500000`) and written in the
/// largest binary unit that holds it whole: for `--decision-log-max-size`, so that `--help`
/// shows the default from the constant that defines it, in the form a user would write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

impl std::fmt::Display for Size {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut n = self.0;
        let mut unit = "";
        for next in ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"] {
            if n == 0 || !n.is_multiple_of(1024) {
                break;
            }
            n /= 1024;
            unit = next;
        }
        write!(f, "{n}{unit}")
    }
}

impl std::str::FromStr for Size {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        parse_size(s).map(Size)
    }
}

fn parse_size(s: &str) -> Result<u64, String> {
    let q = Quantity::parse(s).map_err(|e| e.to_string())?;
    match u64::try_from(q.value()) {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{s:?} is not a positive size")),
    }
}

/// Splits `namespace/name`.
fn split_pod(pod: &str) -> anyhow::Result<(&str, &str)> {
    match pod.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns, name))
        }
        _ => bail!("expected the pod as <namespace>/<name>, got {pod:?}"),
    }
}

/// Prints the pod's latest attempts.
pub fn run(args: Args) -> anyhow::Result<()> {
    let (namespace, name) = split_pod(&args.pod)?;
    let n = args.attempts as usize;
    let records = match (&args.server, &args.file) {
        (Some(server), _) => from_server(server, namespace, name, n)?,
        (None, Some(path)) => {
            let mut all = file::read_all(path, |r| r.namespace == namespace && r.pod == name)?;
            if all.is_empty() {
                bail!(
                    "no scheduling attempt of pod {namespace}/{name} in the decision log {}",
                    path.display()
                );
            }
            all.reverse();
            all.truncate(n);
            all
        }
        (None, None) => bail!("give --server or --file"),
    };
    match args.output {
        Output::Table => print!("{}", explain(&records)),
        Output::Json => println!("{}", serde_json::to_string_pretty(&records)?),
    }
    Ok(())
}

/// GET `/debug/decisions/<namespace>/<pod>` from a running gantry.
fn from_server(
    server: &str,
    namespace: &str,
    name: &str,
    n: usize,
) -> anyhow::Result<Vec<DecisionRecord>> {
    let base = server.trim_end_matches('/');
    let url = format!("{base}/debug/decisions/{namespace}/{name}?attempts={n}");
    let uri: hyper::Uri = url
        .parse()
        .with_context(|| format!("invalid --server {server:?}"))?;
    if uri.scheme_str() != Some("http") || uri.host().is_none() {
        bail!("invalid --server {server:?}: expected http://<host>:<port>");
    }
    let request = hyper::Request::get(uri)
        .body(Full::new(Bytes::new()))
        .context("cannot build the request")?;
    let (status, body) = crate::server::exchange(HttpConnector::new(), request, TIMEOUT)
        .map_err(|e| anyhow!("cannot reach gantry at {base}: {e}"))?;
    let text = String::from_utf8_lossy(&body);
    if !status.is_success() {
        bail!(
            "gantry at {base} answered {}: {}",
            status.as_u16(),
            text.trim()
        );
    }
    serde_json::from_str(&text)
        .with_context(|| format!("gantry at {base} answered with no decision records"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{assert_shown_defaults, parse};

    #[test]
    fn pods_are_namespace_slash_name() {
        assert_eq!(split_pod("shop/web-1").unwrap(), ("shop", "web-1"));
        for bad in ["web-1", "/web", "shop/", "a/b/c"] {
            let e = split_pod(bad).unwrap_err().to_string();
            assert!(e.contains("<namespace>/<name>"), "{e}");
        }
    }

    #[test]
    fn sizes_are_quantities() {
        assert_eq!(parse_size("64Mi").unwrap(), 64 * 1024 * 1024);
        assert_eq!(parse_size("1000").unwrap(), 1000);
        assert!(parse_size("0").is_err());
        assert!(parse_size("lots").is_err());
    }

    #[test]
    fn a_size_reads_back_what_it_writes() {
        for (n, text) in [
            (file::DEFAULT_MAX_SIZE, "64Mi"),
            (1536, "1536"),
            (3 << 30, "3Gi"),
            (500_000, "500000"),
            (7 << 60, "7Ei"),
        ] {
            assert_eq!(Size(n).to_string(), text);
            assert_eq!(text.parse::<Size>(), Ok(Size(n)));
        }
    }

    #[test]
    fn help_shows_each_default_from_its_definition() {
        let size = Size(file::DEFAULT_MAX_SIZE);
        assert_shown_defaults::<DecisionLogArgs>(&[
            ("decision_log_max_size", size.to_string()),
            (
                "decision_log_max_files",
                file::DEFAULT_MAX_FILES.to_string(),
            ),
        ]);
        let args: DecisionLogArgs = parse(&[]);
        assert_eq!(args.decision_log_max_size, size);
        assert_eq!(args.decision_log_max_files, file::DEFAULT_MAX_FILES);
    }

    #[test]
    fn an_unreachable_server_is_named() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let server = format!("http://127.0.0.1:{port}");
        let e = from_server(&server, "a", "b", 1).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("cannot reach gantry at {server}")),
            "{e}"
        );
        let e = from_server("ftp://x", "a", "b", 1).unwrap_err().to_string();
        assert!(e.contains("invalid --server"), "{e}");
    }
}
