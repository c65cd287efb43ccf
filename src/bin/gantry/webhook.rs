//! `gantry webhook`: the canary rollout admission webhook.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use anyhow::Context;
use gantry_core::config::GoDuration;
use gantry_webhook::config::RolloutConfig;
use gantry_webhook::server::Limits;
use gantry_webhook::{self as webhook, Options};

/// The HTTPS port served when `--port` is not given.
const DEFAULT_PORT: u16 = 8443;
/// The address listened on when `--bind-address` is not given: every IPv4 interface.
const DEFAULT_BIND_ADDRESS: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);

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
    #[arg(long, default_value_t = GoDuration(webhook::DEFAULT_TLS_RELOAD_INTERVAL))]
    tls_reload_interval: GoDuration,
    /// The HTTPS port of /mutate, /metrics, /healthz, /livez and /readyz.
    #[arg(long, default_value_t = DEFAULT_PORT)]
    port: u16,
    /// The address to listen on.
    #[arg(long, default_value_t = DEFAULT_BIND_ADDRESS)]
    bind_address: IpAddr,
    /// A kubeconfig file (to watch namespaces); otherwise `KUBECONFIG`, `~/.kube/config` or
    /// the in-cluster service account.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The log filter.
    #[command(flatten)]
    log: crate::LogArgs,
}

/// Serves the webhook until SIGTERM or SIGINT.
pub fn run(args: Args) -> anyhow::Result<()> {
    crate::run::exit_on_panic();
    args.log.init()?;
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
        tls_reload_interval: args.tls_reload_interval.0,
        limits: Limits::for_this_process(),
    };
    runtime.block_on(webhook::run(options))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{assert_shown_defaults, parse};

    #[test]
    fn help_shows_each_default_from_its_definition() {
        let interval = GoDuration(webhook::DEFAULT_TLS_RELOAD_INTERVAL);
        assert_shown_defaults::<Args>(&[
            ("tls_reload_interval", interval.to_string()),
            ("port", DEFAULT_PORT.to_string()),
            ("bind_address", DEFAULT_BIND_ADDRESS.to_string()),
            ("log", crate::DEFAULT_LOG.to_string()),
        ]);
        let args: Args = parse(&[
            "--config",
            "rollout.yaml",
            "--tls-cert-file",
            "tls.crt",
            "--tls-private-key-file",
            "tls.key",
        ]);
        // What --help shows reads back as the definition itself.
        assert_eq!(args.tls_reload_interval, interval);
        assert_eq!(args.port, DEFAULT_PORT);
        assert_eq!(args.bind_address, DEFAULT_BIND_ADDRESS);
    }
}
