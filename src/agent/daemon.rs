//! `portdrift run`: the node agent. Watches the API (a [`ClusterView`]), scans this node
//! every interval on a blocking thread (never two scans at once), keeps the metrics and
//! the last report for [`crate::agent::http`], logs each finding when it appears and when it
//! clears, and stops on SIGTERM or SIGINT.

mod log;
mod scan;
mod scan_loop;

use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch as signal_watch;
use tokio::task::JoinHandle;

use crate::agent::desired_view::{ClusterFile, DesiredView};
use crate::agent::http::{Endpoints, ServerConfig, Shared};
use crate::agent::kube_report::{KubeReporter, ReportConfig};
use crate::agent::metrics::Metrics;
use crate::agent::repair::RepairConfig;
use crate::agent::watch::{ClusterView, WatchOptions};
use crate::sources::kube_client;
use crate::sources::live::LiveConfig;
use scan_loop::scan_loop;

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub node: String,
    pub listen: SocketAddr,
    /// Where `/findings` is served besides the other endpoints (None: nowhere); see
    /// [`crate::agent::http`].
    pub findings_listen: Option<SocketAddr>,
    pub interval: Duration,
    /// Zero: no grace window.
    pub grace: Duration,
    pub api: kube_client::KubeTarget,
    pub live: LiveConfig,
    pub nodeport_range: RangeInclusive<u16>,
    /// At most this many per-finding metric series (0: none).
    pub metrics_max_series: usize,
    /// Write Kubernetes Events for new findings.
    pub events: bool,
    /// Keep the `NodePortDrift` Node condition.
    pub node_condition: bool,
    /// Repair every cycle (`--repair`).
    pub repair: Option<RepairConfig>,
    /// The first list waits a random delay up to this (`--startup-jitter`).
    pub startup_jitter: Duration,
    /// The acceptances file (`--accept`), read again when it changes.
    pub acceptances: Option<std::path::PathBuf>,
    /// The desired state from this file (`--cluster-state`) instead of the API server.
    pub cluster_state: Option<std::path::PathBuf>,
}

/// How long a scan still running at shutdown may delay the exit.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Runs the agent until SIGTERM or SIGINT. An error means it could not start.
pub fn run(config: AgentConfig) -> anyhow::Result<()> {
    // Not `sources::block_on`'s one thread: the agent serves HTTP, follows the API and
    // the kernel, and scans at once, and its shutdown bounds the wait for a scan.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("portdrift")
        .build()
        .context("cannot start the Tokio runtime")?;
    let result = runtime.block_on(run_async(config));
    // A scan in flight on a blocking thread is not waited for beyond this.
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
    result
}

async fn run_async(config: AgentConfig) -> anyhow::Result<()> {
    let stop = stop_on_signal()?;
    let listeners = Listeners::bind(&config).await?;
    let shared = Arc::new(Shared::with_metrics(
        config.interval,
        Metrics::with_max_series(config.metrics_max_series),
    ));
    let (view, reporter, api) = desired_view(&config, &shared).await?;
    serve_view(&shared, &config, &view);
    tracing::info!(
        node = %config.node,
        listen = %listeners.main.local_addr().unwrap_or(config.listen),
        findings_listen = %listeners.findings_at(),
        api = %api,
        interval = ?config.interval,
        "portdrift agent started"
    );
    let servers = listeners.serve(&shared, &stop);
    scan_loop(&config, &view, &shared, reporter, stop).await;
    for server in servers {
        let _ = server.await;
    }
    tracing::info!("portdrift agent stopped");
    Ok(())
}

/// A channel that turns true on SIGTERM or SIGINT.
fn stop_on_signal() -> anyhow::Result<signal_watch::Receiver<bool>> {
    let (stop_tx, stop_rx) = signal_watch::channel(false);
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot handle SIGTERM")?;
    tokio::spawn(async move {
        tokio::select! {
            _ = terminate.recv() => tracing::info!("SIGTERM: stopping"),
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: stopping"),
        }
        let _ = stop_tx.send(true);
    });
    Ok(stop_rx)
}

/// The agent's listeners: `--listen`'s, and `--findings-listen`'s when it is another.
struct Listeners {
    main: TcpListener,
    findings: Option<TcpListener>,
    /// `--findings-listen` is `--listen`: the main listener serves everything.
    shared_address: bool,
}

impl Listeners {
    async fn bind(config: &AgentConfig) -> anyhow::Result<Listeners> {
        // One address for both (a fixed port): one listener serves everything there.
        let shared_address = config.findings_listen == Some(config.listen) && config.listen.port() != 0;
        let main = crate::agent::http::bind(config.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.listen))?;
        let findings = match config.findings_listen.filter(|_| !shared_address) {
            Some(addr) => Some(
                crate::agent::http::bind(addr)
                    .await
                    .with_context(|| format!("cannot listen on {addr} (--findings-listen)"))?,
            ),
            None => None,
        };
        Ok(Listeners {
            main,
            findings,
            shared_address,
        })
    }

    /// Where `/findings` is served, for the start-up log.
    fn findings_at(&self) -> String {
        match (&self.findings, self.shared_address) {
            (Some(l), _) => l.local_addr().map_or_else(|e| e.to_string(), |a| a.to_string()),
            (None, true) => "the same listener".to_string(),
            (None, false) => "off".to_string(),
        }
    }

    /// A server on each listener until `stop`, the main one first.
    fn serve(self, shared: &Arc<Shared>, stop: &signal_watch::Receiver<bool>) -> Vec<JoinHandle<()>> {
        let main_endpoints = if self.shared_address {
            Endpoints::All
        } else {
            Endpoints::Public
        };
        std::iter::once((self.main, main_endpoints))
            .chain(self.findings.map(|listener| (listener, Endpoints::All)))
            .map(|(listener, endpoints)| {
                tokio::spawn(crate::agent::http::serve(
                    listener,
                    endpoints,
                    shared.clone(),
                    ServerConfig::default(),
                    stopped(stop.clone()),
                ))
            })
            .collect()
    }
}

/// Where the desired state comes from: the file of `--cluster-state`, or the API
/// watches (and with them the reporter); and what the start-up log calls it.
async fn desired_view(
    config: &AgentConfig,
    shared: &Arc<Shared>,
) -> anyhow::Result<(DesiredView, Option<KubeReporter>, String)> {
    match &config.cluster_state {
        Some(path) => {
            let file = ClusterFile::start(path, Some(&config.node))?;
            Ok((
                DesiredView::File(file),
                None,
                format!("none (the cluster state from {})", path.display()),
            ))
        }
        None => {
            let (view, reporter, api) = watch_api(config, shared).await?;
            Ok((DesiredView::Api(view), reporter, api))
        }
    }
}

/// What the HTTP server answers from the view: the API's state, and `/explain`.
fn serve_view(shared: &Shared, config: &AgentConfig, view: &DesiredView) {
    let probed = view.clone();
    shared.probe_api(move || (probed.synced(), probed.fresh()));
    // `/explain` judges findings as a scan does, without the grace window: the path is
    // what the kernel does now.
    shared.serve_explanations(crate::agent::explain::live_explainer(
        config.node.clone(),
        config.live.clone(),
        view.clone(),
        crate::heart::detect::DetectConfig {
            grace: None,
            cluster_state_stale: false,
            acceptances: None,
            nodeport_range: config.nodeport_range.clone(),
        },
    ));
}

/// Starts the API watches (after the start-up jitter) and, with --events or
/// --node-condition, the reporter; returns them and the API server's address.
async fn watch_api(
    config: &AgentConfig,
    shared: &Arc<Shared>,
) -> anyhow::Result<(ClusterView, Option<KubeReporter>, String)> {
    let kube = config.api.config().await.context("no API server configured")?;
    let api = kube.cluster_url.to_string();
    let reporter = match ReportConfig::for_flags(&config.node, config.events, config.node_condition) {
        Some(report) => {
            let client =
                kube_client::kube_client(kube.clone()).context("cannot build a client to report findings")?;
            Some(KubeReporter::start(
                client,
                report,
                shared.metrics.kube_report().clone(),
            ))
        }
        None => None,
    };
    let start_delay = startup_delay(config.startup_jitter);
    if !start_delay.is_zero() {
        tracing::info!(delay = ?start_delay, jitter = ?config.startup_jitter, "first API list after a random delay (--startup-jitter)");
    }
    let options = WatchOptions {
        start_delay,
        ..WatchOptions::default()
    };
    let view =
        ClusterView::start(kube, Some(&config.node), options).context("cannot watch the API server")?;
    Ok((view, reporter, api))
}

/// A delay drawn uniformly from `[0, jitter)` (zero for zero), so that agents started
/// together (a DaemonSet created, nodes booted at once) spread their first lists.
fn startup_delay(jitter: Duration) -> Duration {
    jitter.mul_f64(fastrand::f64())
}

/// Completes once a stop is requested.
async fn stopped(mut rx: signal_watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

#[cfg(test)]
mod tests;
