//! `gantry webhook`: the canary rollout admission webhook.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use gantry::config::parse_go_duration;
use gantry::webhook::config::RolloutConfig;
use gantry::webhook::server::Limits;
use gantry::webhook::{self, Options};

/// Arguments of `gantry webhook`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The RolloutConfiguration (gantry.io/v1alpha1) file: share, schedulerName,
    /// excludedNamespaces.
    #[arg(long)]
    config: PathBuf,
    /// The serving certificate (PEM; the leaf first, then intermediates).
    #[arg(long)]
    tls_cert_file: PathBuf,
    /// The serving certificate's private key (PEM).
    #[arg(long)]
    tls_private_key_file: PathBuf,
    /// How often the certificate and key files are checked for a change (then reloaded).
    #[arg(long, default_value = "10s", value_parser = parse_go_duration)]
    tls_reload_interval: Duration,
    /// The HTTPS port of /mutate, /metrics, /healthz, /livez and /readyz.
    #[arg(long, default_value_t = 8443)]
    port: u16,
    /// The address to listen on.
    #[arg(long, default_value = "0.0.0.0")]
    bind_address: IpAddr,
    /// A kubeconfig file (to watch namespaces); otherwise `KUBECONFIG`, `~/.kube/config` or
    /// the in-cluster service account.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Log filter (tracing-subscriber's `EnvFilter` syntax, e.g. `info` or `gantry=debug`).
    #[arg(long, env = "GANTRY_LOG", default_value = "info")]
    log: String,
}

/// Serves the webhook until SIGTERM or SIGINT.
pub fn run(args: Args) -> anyhow::Result<()> {
    crate::run::exit_on_panic();
    crate::init_logging(&args.log)?;
    let config = RolloutConfig::load(&args.config)
        .with_context(|| format!("invalid configuration {}", args.config.display()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("gantry-webhook")
        .build()
        .context("cannot start the async runtime")?;
    let options = Options {
        config,
        kubeconfig: args.kubeconfig,
        address: SocketAddr::new(args.bind_address, args.port),
        tls_cert: args.tls_cert_file,
        tls_key: args.tls_private_key_file,
        tls_reload_interval: args.tls_reload_interval,
        limits: Limits::for_this_process(),
    };
    runtime.block_on(webhook::run(options))?;
    Ok(())
}
