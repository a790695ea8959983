//! `portdrift run`: the node agent. Watches the API (a [`ClusterView`]), scans this node
//! every interval on a blocking thread (never two scans at once), keeps the metrics and
//! the last report for [`crate::http`], logs each finding when it appears and when it
//! clears, and stops on SIGTERM or SIGINT.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::watch as signal_watch;

use crate::desired::watch::{self, ClusterView, WatchOptions};
use crate::detect::{DetectConfig, Grace};
use crate::finding::Finding;
use crate::http::{ServerConfig, Shared};
use crate::kube_report::{KubeReporter, ReportConfig};
use crate::observed::live::{LiveConfig, LiveNode};
use crate::scan::{ScanReport, SourceState, SourceStatus, run_scan};
use crate::snapshot::read_input;

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub node: String,
    pub listen: SocketAddr,
    pub interval: Duration,
    /// Zero: no grace window.
    pub grace: Duration,
    pub kubeconfig: Option<PathBuf>,
    pub live: LiveConfig,
    pub nodeport_range: RangeInclusive<u16>,
    /// Write Kubernetes Events for new findings.
    pub events: bool,
    /// Keep the `NodePortDrift` Node condition.
    pub node_condition: bool,
}

/// How long a scan still running at shutdown may delay the exit.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Runs the agent until SIGTERM or SIGINT. An error means it could not start.
pub fn run(config: AgentConfig) -> anyhow::Result<()> {
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

    let listener = crate::http::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let kube = watch::kube_config(config.kubeconfig.as_deref())
        .await
        .context("no API server configured")?;
    let api = kube.cluster_url.to_string();
    let shared = Arc::new(Shared::new(config.interval));
    let reporter = match ReportConfig::for_flags(&config.node, config.events, config.node_condition) {
        Some(report) => {
            let client =
                watch::kube_client(kube.clone()).context("cannot build a client to report findings")?;
            Some(KubeReporter::start(
                client,
                report,
                shared.metrics.kube_report().clone(),
            ))
        }
        None => None,
    };
    let view = ClusterView::start(kube, Some(&config.node), WatchOptions::default())
        .context("cannot watch the API server")?;
    tracing::info!(
        node = %config.node,
        listen = %listener.local_addr().unwrap_or(config.listen),
        api = %api,
        interval = ?config.interval,
        "portdrift agent started"
    );

    let server = tokio::spawn(crate::http::serve(
        listener,
        shared.clone(),
        ServerConfig::default(),
        stopped(stop_rx.clone()),
    ));

    scan_loop(&config, &view, &shared, reporter, stop_rx).await;
    let _ = server.await;
    tracing::info!("portdrift agent stopped");
    Ok(())
}

/// Completes once a stop is requested.
async fn stopped(mut rx: signal_watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

/// A finding's identity across scans (its message and evidence may change wording).
type Key = crate::finding::Identity;

fn key(f: &Finding) -> Key {
    f.identity()
}

async fn scan_loop(
    config: &AgentConfig,
    view: &ClusterView,
    shared: &Arc<Shared>,
    mut reporter: Option<KubeReporter>,
    stop: signal_watch::Receiver<bool>,
) {
    let mut live = Some(LiveNode::new(config.live.clone()));
    let mut known: BTreeMap<Key, Finding> = BTreeMap::new();
    let mut wait = Duration::ZERO;
    let mut waiting_logged = false;
    let stop_fut = stopped(stop);
    tokio::pin!(stop_fut);
    loop {
        tokio::select! {
            () = &mut stop_fut => return,
            () = tokio::time::sleep(wait) => {}
        }
        shared.set_api(view.synced(), view.fresh());
        if !view.synced() {
            if !waiting_logged {
                tracing::info!("waiting for the API watch caches to sync before the first scan");
                waiting_logged = true;
            }
            wait = Duration::from_millis(250);
            continue;
        }
        wait = config.interval;

        let Some(node) = live.take() else { return };
        let scan = scan_once(config, view, node);
        let joined = tokio::select! {
            () = &mut stop_fut => return,
            joined = scan => joined,
        };
        let (node, outcome) = match joined {
            Ok(pair) => pair,
            Err(e) => {
                tracing::error!(error = %e, "the scan thread failed");
                shared.metrics.scan_failed("node");
                live = Some(LiveNode::new(config.live.clone()));
                continue;
            }
        };
        live = Some(node);
        match outcome {
            Ok((report, took)) => {
                record(shared, &report, took);
                log_changes(&mut known, &report);
                if let Some(reporter) = &mut reporter {
                    reporter.after_scan(&report.findings);
                }
            }
            Err((source, error)) => {
                shared.metrics.scan_failed(source);
                tracing::warn!(source, %error, "scan failed");
            }
        }
        shared.set_api(view.synced(), view.fresh());
    }
}

type ScanOutcome = Result<(ScanReport, Duration), (&'static str, String)>;

/// One scan on a blocking thread. The live node is moved in and handed back.
async fn scan_once(
    config: &AgentConfig,
    view: &ClusterView,
    mut node: LiveNode,
) -> Result<(LiveNode, ScanOutcome), tokio::task::JoinError> {
    let view = view.clone();
    let name = config.node.clone();
    let grace = config.grace;
    let range = config.nodeport_range.clone();
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let outcome = (|| {
            // Staleness is judged before the read: a view that goes stale during the
            // scan is caught by the next one.
            let stale = !view.fresh();
            let desired = view.desired_state().map_err(|e| ("cluster", e.to_string()))?;
            let mut input = read_input(&mut node, Some(&name)).map_err(|e| ("node", e.to_string()))?;
            let mut status = SourceStatus::new("cluster (API server)", SourceState::Ok);
            status.describe_cluster_state(&desired);
            if stale {
                status
                    .notes
                    .push("the API watch is not current: findings are marked on_stale_cluster_state".into());
            }
            input.sources.push(status);
            input.desired = Some(desired);
            let detect = DetectConfig {
                grace: (!grace.is_zero()).then(|| Grace {
                    now: jiff::Timestamp::now(),
                    window: grace,
                }),
                cluster_state_stale: stale,
                nodeport_range: range,
            };
            Ok((run_scan(input, &detect), started.elapsed()))
        })();
        (node, outcome)
    })
    .await
}

fn record(shared: &Shared, report: &ScanReport, took: Duration) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    shared.metrics.scan_done(report, took, now);
    for s in &report.sources {
        if matches!(
            s.status,
            SourceState::Error | SourceState::Failed | SourceState::TimedOut | SourceState::TooLarge
        ) {
            shared.metrics.scan_failed(&s.source);
        }
    }
    shared.set_report(report);
    tracing::debug!(findings = report.findings.len(), took = ?took, "scan done");
}

/// Logs one line per finding that appeared since the last scan, and one per finding
/// that cleared.
fn log_changes(known: &mut BTreeMap<Key, Finding>, report: &ScanReport) {
    let mut now: BTreeMap<Key, Finding> = BTreeMap::new();
    for f in &report.findings {
        now.entry(key(f)).or_insert_with(|| f.clone());
    }
    for (k, f) in &now {
        if !known.contains_key(k) {
            tracing::warn!(
                kind = %f.kind,
                severity = %f.severity,
                port = f.port,
                service = f.service.as_deref(),
                target = f.target.as_deref(),
                backend = ?f.backend,
                "finding: {}",
                f.message
            );
        }
    }
    for (k, f) in known.iter() {
        if !now.contains_key(k) {
            tracing::info!(
                kind = %f.kind,
                port = f.port,
                service = f.service.as_deref(),
                target = f.target.as_deref(),
                backend = ?f.backend,
                "finding cleared"
            );
        }
    }
    *known = now;
}
