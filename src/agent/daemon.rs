//! `portdrift run`: the node agent. Watches the API (a [`ClusterView`]), scans this node
//! every interval on a blocking thread (never two scans at once), keeps the metrics and
//! the last report for [`crate::agent::http`], logs each finding when it appears and when it
//! clears, and stops on SIGTERM or SIGINT.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::watch as signal_watch;

use crate::agent::http::{ServerConfig, Shared};
use crate::agent::kube_report::{KubeReporter, ReportConfig};
use crate::agent::metrics::{Metrics, ResultLabel, ScanTimes};
use crate::agent::repair::{ApiState, CycleInput, CycleOutcome, RepairConfig, Repairer};
use crate::agent::watch::{self, ClusterView, WatchOptions};
use crate::heart::coverage::Coverage;
use crate::heart::desired::DesiredState;
use crate::heart::detect::{DetectConfig, Grace};
use crate::heart::finding::{Finding, Severity};
use crate::heart::outcome::{API_SOURCE, ScanReport, SourceState, SourceStatus, run_scan_keeping_inputs};
use crate::scan::input::{RuleCache, read_input_cached};
use crate::sources::bundle::NF_TABLES_DUMPS;
use crate::sources::kube_client;
use crate::sources::live::{LiveConfig, LiveNode};
use crate::sources::rule_changes::RuleChanges;

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
    /// At most this many per-finding metric series (0: none).
    pub metrics_max_series: usize,
    /// Write Kubernetes Events for new findings.
    pub events: bool,
    /// Keep the `NodePortDrift` Node condition.
    pub node_condition: bool,
    /// Repair every cycle (`--repair`).
    pub repair: Option<RepairConfig>,
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

    let listener = crate::agent::http::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let kube = kube_client::kube_config(config.kubeconfig.as_deref())
        .await
        .context("no API server configured")?;
    let api = kube.cluster_url.to_string();
    let shared = Arc::new(Shared::with_metrics(
        config.interval,
        Metrics::with_max_series(config.metrics_max_series),
    ));
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
    let view = ClusterView::start(kube, Some(&config.node), WatchOptions::default())
        .context("cannot watch the API server")?;
    let probed = view.clone();
    shared.probe_api(move || (probed.synced(), probed.fresh()));
    tracing::info!(
        node = %config.node,
        listen = %listener.local_addr().unwrap_or(config.listen),
        api = %api,
        interval = ?config.interval,
        "portdrift agent started"
    );

    let server = tokio::spawn(crate::agent::http::serve(
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
type Key = crate::heart::finding::Identity;

fn key(f: &Finding) -> Key {
    f.identity()
}

/// Quiet time after a change before the scan it triggers: kube-proxy applies a change
/// within about a second (its default minimum sync period), and a burst of EndpointSlice
/// updates during a rollout is coalesced into one scan.
const SETTLE: Duration = Duration::from_secs(2);
/// Quiet time after the kernel announces a rule change: the change is already applied
/// (kube-proxy writes a whole sync in one transaction), so the scan follows within a
/// second; a burst of commits in this window is still one scan.
const RULE_SETTLE: Duration = Duration::from_millis(250);
/// A stream of changes that never goes quiet still gets a scan this long after its first.
const MAX_DEFER: Duration = Duration::from_secs(10);
/// Change-driven scans start at least this long after the previous scan ended, so a
/// node whose rules churn constantly is not rescanned constantly.
const MIN_GAP: Duration = Duration::from_secs(5);
/// Even without any announced change the nf_tables dumps are read again this often: the
/// notifications are trusted, not blindly. Not more often: on a 10,000-Service node one
/// full read costs seconds of CPU (about 2.5 over netlink, twenty and more when a
/// family falls back to `iptables-nft-save`), which every ten minutes would be most of
/// the idle agent's cost.
const FULL_READ_EVERY: Duration = Duration::from_secs(1800);

/// Why a scan ran (for the debug log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trigger {
    Interval,
    Change,
}

/// Changes seen since the last scan began, not yet scanned for.
#[derive(Debug, Default)]
struct PendingChange {
    first: Option<Instant>,
    /// The end of the latest change's quiet time.
    settled: Option<Instant>,
}

impl PendingChange {
    /// A change at `now` that wants `settle` of quiet before its scan.
    fn note(&mut self, now: Instant, settle: Duration) {
        self.first.get_or_insert(now);
        self.settled = self.settled.max(Some(now + settle));
    }

    /// When the scan for these changes is due: after each change's quiet time, but no
    /// later than `MAX_DEFER` after the first, and never within `MIN_GAP` of the last
    /// scan.
    fn due(&self, last_scan_end: Option<Instant>) -> Option<Instant> {
        let (first, settled) = (self.first?, self.settled?);
        let due = settled.min(first + MAX_DEFER);
        Some(match last_scan_end {
            Some(end) => due.max(end + MIN_GAP),
            None => due,
        })
    }
}

/// What the scan thread reads the node with, moved in and handed back each scan.
struct NodeReader {
    live: LiveNode,
    cache: RuleCache,
    /// The last desired state and the API view's change count it was built at: while
    /// nothing that can move this node's NodePorts has changed, it is still the truth,
    /// and building it again would cost a large node tens of milliseconds and MiB.
    desired: Option<(u64, DesiredState)>,
    /// With `--repair`: its history of findings lives as long as the agent.
    repairer: Option<Repairer>,
    /// When the nf_tables dumps were last read rather than reused.
    last_full_read: Option<Instant>,
}

impl NodeReader {
    fn new(config: &AgentConfig) -> NodeReader {
        NodeReader {
            live: LiveNode::new(config.live.clone()).keeping_constant_maps(),
            cache: RuleCache::keeping(&NF_TABLES_DUMPS),
            desired: None,
            repairer: config.repair.clone().map(Repairer::new),
            last_full_read: None,
        }
    }
}

/// Whether the next scan may reuse the last read of the nf_tables dumps: the kernel is
/// announcing changes, has announced none since that read began, and it is recent.
/// Marks the announcements seen, so that any arriving from now on (during the read)
/// make the following scan read again.
fn nf_tables_unchanged(rules: Option<&mut signal_watch::Receiver<u64>>, reader: &NodeReader) -> bool {
    let Some(rules) = rules else { return false };
    let unchanged = matches!(rules.has_changed(), Ok(false));
    rules.mark_unchanged();
    unchanged
        && reader
            .last_full_read
            .is_some_and(|t| t.elapsed() < FULL_READ_EVERY)
}

async fn scan_loop(
    config: &AgentConfig,
    view: &ClusterView,
    shared: &Arc<Shared>,
    mut reporter: Option<KubeReporter>,
    stop: signal_watch::Receiver<bool>,
) {
    let mut reader = Some(NodeReader::new(config));
    let mut known: BTreeMap<Key, Finding> = BTreeMap::new();
    let mut last_coverage: Option<Coverage> = None;
    let mut api_changes = view.changes();
    let rule_changes = match RuleChanges::subscribe() {
        Ok(sub) => Some(sub),
        Err(error) => {
            tracing::warn!(%error, "cannot follow nf_tables changes; every scan reads every rule dump, and rule changes wait for the next interval");
            None
        }
    };
    let mut rule_counter = rule_changes.as_ref().map(RuleChanges::receiver);
    let mut rule_wake = rule_changes.as_ref().map(RuleChanges::receiver);
    let mut pending = PendingChange::default();
    let mut next_tick = Instant::now();
    let mut last_scan_end: Option<Instant> = None;
    let mut waiting_logged = false;
    let mut last_summary: Option<Instant> = None;
    let mut scans: u64 = 0;
    let stop_fut = stopped(stop);
    tokio::pin!(stop_fut);
    loop {
        let due = pending
            .due(last_scan_end)
            .map_or(next_tick, |change| change.min(next_tick));
        let trigger = tokio::select! {
            () = &mut stop_fut => return,
            () = tokio::time::sleep_until(due.into()) => {
                if pending.first.is_some_and(|_| due < next_tick) { Trigger::Change } else { Trigger::Interval }
            }
            Ok(()) = api_changes.changed() => {
                pending.note(Instant::now(), SETTLE);
                continue;
            }
            () = changed(rule_wake.as_mut()) => {
                pending.note(Instant::now(), RULE_SETTLE);
                continue;
            }
        };
        shared.set_api(view.synced(), view.fresh());
        if !view.synced() {
            if !waiting_logged {
                tracing::info!("waiting for the API watch caches to sync before the first scan");
                waiting_logged = true;
            }
            next_tick = Instant::now() + Duration::from_millis(250);
            continue;
        }
        // What changed before this point is in this scan; what changes from here on
        // triggers the next.
        pending = PendingChange::default();
        api_changes.mark_unchanged();
        if let Some(wake) = rule_wake.as_mut() {
            wake.mark_unchanged();
        }

        let Some(mut node) = reader.take() else { return };
        let reuse = nf_tables_unchanged(rule_counter.as_mut(), &node);
        node.cache.allow_reuse(if reuse { &NF_TABLES_DUMPS } else { &[] });
        if !reuse {
            node.last_full_read = Some(Instant::now());
        }
        tracing::debug!(?trigger, reuse_nf_tables = reuse, "scanning");
        let scan = scan_once(config, view, node);
        let joined = tokio::select! {
            () = &mut stop_fut => return,
            joined = scan => joined,
        };
        last_scan_end = Some(Instant::now());
        next_tick = Instant::now() + config.interval;
        let (node, outcome) = match joined {
            Ok(pair) => pair,
            Err(e) => {
                tracing::error!(error = %e, "the scan thread failed");
                shared.metrics.scan_failed("node");
                reader = Some(NodeReader::new(config));
                continue;
            }
        };
        reader = Some(node);
        match outcome {
            Ok((report, stats)) => {
                if let (Some(reporter), Some(repair)) = (&mut reporter, &stats.repair) {
                    reporter.after_repair(repair);
                }
                record(shared, &report, stats);
                log_coverage(&mut last_coverage, &report.coverage);
                log_changes(&mut known, &report);
                scans += 1;
                if last_summary.is_none_or(|t| t.elapsed() >= SUMMARY_EVERY) {
                    log_summary(&report, view.fresh(), scans);
                    last_summary = Some(Instant::now());
                }
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

/// Completes when `rx` sees a change; never when there is no receiver or its sender
/// is gone (listening stopped: nothing more will come).
async fn changed(rx: Option<&mut signal_watch::Receiver<u64>>) {
    if let Some(rx) = rx
        && rx.changed().await.is_ok()
    {
        return;
    }
    std::future::pending().await
}

/// What a scan measured besides its report: how long its phases took, and the API
/// watches' state when it finished.
#[derive(Debug)]
struct ScanStats {
    times: ScanTimes,
    api: watch::ViewStatus,
    /// What the repair cycle after the scan did (with `--repair`).
    repair: Option<CycleOutcome>,
}

type ScanOutcome = Result<(ScanReport, ScanStats), (&'static str, String)>;

/// One scan on a blocking thread. The node reader is moved in and handed back.
async fn scan_once(
    config: &AgentConfig,
    view: &ClusterView,
    mut node: NodeReader,
) -> Result<(NodeReader, ScanOutcome), tokio::task::JoinError> {
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
            // The count first: a change during the build makes the next scan build again.
            let changes = *view.changes().borrow();
            let desired = match node.desired.take() {
                Some((built_at, desired)) if built_at == changes => desired,
                _ => view.desired_state().map_err(|e| ("cluster", e.to_string()))?,
            };
            let desired_built = Instant::now();
            let NodeReader { live, cache, .. } = &mut node;
            let mut input =
                read_input_cached(live, Some(&name), cache).map_err(|e| ("node", e.to_string()))?;
            let node_read = Instant::now();
            let mut status = SourceStatus::new(API_SOURCE, SourceState::Ok);
            status.describe_cluster_state(&desired);
            if stale {
                status
                    .notes
                    .push("the API watch is not current: findings are marked on_stale_cluster_state".into());
            }
            input.sources.push(status);
            // Repair needs the desired state after the scan, which consumes it.
            let desired_for_repair = node.repairer.is_some().then(|| desired.clone());
            input.desired = Some(desired);
            let detect = DetectConfig {
                grace: (!grace.is_zero()).then(|| Grace {
                    now: jiff::Timestamp::now(),
                    window: grace,
                }),
                cluster_state_stale: stale,
                nodeport_range: range,
            };
            let (report, rules, desired) = run_scan_keeping_inputs(input, &detect);
            node.cache.keep(rules);
            node.desired = desired.map(|d| (changes, d));
            let times = ScanTimes {
                total: started.elapsed(),
                build_desired: desired_built - started,
                read_node: node_read - desired_built,
                detect: node_read.elapsed(),
            };
            let repair = node.repairer.as_mut().map(|repairer| {
                let input = CycleInput {
                    report: &report,
                    desired: desired_for_repair.as_ref(),
                    // Judged now, after the scan: repair acts on the present, and a
                    // view that went stale during the scan blocks it.
                    api: ApiState {
                        synced: view.synced(),
                        fresh: view.fresh() && !stale,
                    },
                    kube_proxy: report.kube_proxy.as_ref(),
                };
                repairer.cycle(&input, Instant::now())
            });
            let api = view.status();
            Ok((report, ScanStats { times, api, repair }))
        })();
        (node, outcome)
    })
    .await
}

fn record(shared: &Shared, report: &ScanReport, stats: ScanStats) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    // Counts each failed source as a scan error too.
    shared.metrics.scan_done(report, &stats.times, now);
    shared.metrics.set_api_watches(&stats.api, now);
    if let Some(outcome) = &stats.repair {
        // Each action was logged before and after by the repair module itself.
        for action in &outcome.actions {
            shared
                .metrics
                .repairs()
                .get_or_create(&ResultLabel {
                    result: action.result.metric_result(),
                })
                .inc();
        }
        if let Some(why) = &outcome.blocked {
            tracing::debug!(%why, "repair: not this cycle");
        }
    }
    shared.set_report(report);
    tracing::debug!(findings = report.findings.len(), took = ?stats.times.total, "scan done");
}

/// Logs what the scans could and could not check, once each time it changes: a node
/// whose check is incomplete is not a quiet, healthy one.
fn log_coverage(last: &mut Option<Coverage>, coverage: &Coverage) {
    if last.as_ref() == Some(coverage) {
        return;
    }
    let mode = coverage.proxy_mode.as_str();
    if coverage.complete {
        tracing::info!(
            proxy_mode = mode,
            evidence = %coverage.proxy_mode_evidence,
            "coverage: every check ran on complete inputs"
        );
    } else {
        for sentence in &coverage.not_checked {
            tracing::warn!(proxy_mode = mode, "coverage: not checked: {sentence}");
        }
    }
    *last = Some(coverage.clone());
}

/// Logs one line per finding that appeared since the last scan (or whose severity
/// changed, as a pending one does when its grace window ends), and one per finding
/// that cleared. A finding that persists is not logged again: the periodic summary
/// counts it.
fn log_changes(known: &mut BTreeMap<Key, Finding>, report: &ScanReport) {
    let mut now: BTreeMap<Key, Finding> = BTreeMap::new();
    for f in &report.findings {
        now.entry(key(f)).or_insert_with(|| f.clone());
    }
    for (k, f) in &now {
        match known.get(k) {
            None => log_finding(f, "finding"),
            Some(before) if before.severity != f.severity => log_finding(f, "finding changed severity"),
            Some(_) => {}
        }
    }
    for (k, f) in known.iter() {
        if !now.contains_key(k) {
            // The target is in the message; the fields are what dashboards filter on.
            tracing::info!(
                kind = %f.kind,
                port = f.port,
                backend = f.backend.map(|b| b.as_str()),
                service = f.service.as_deref(),
                // The same words repair's audit trail names a finding with.
                "finding cleared: {}",
                crate::heart::repair::plan::describe_finding(f)
            );
        }
    }
    *known = now;
}

/// One line with everything an engineer greps for: the port, the Service, the backend,
/// the rule and the process, and the finding's own sentence saying what to do.
fn log_finding(f: &Finding, what: &str) {
    let process = f.process.as_ref().map(|p| format!("{} (pid {})", p.name, p.pid));
    macro_rules! emit {
        ($level:ident) => {
            tracing::$level!(
                kind = %f.kind,
                severity = %f.severity,
                protocol = f.protocol.map(|p| p.as_str()),
                port = f.port,
                family = f.family.map(|p| p.as_str()),
                backend = f.backend.map(|b| b.as_str()),
                service = f.service.as_deref(),
                target = f.target.as_deref(),
                rule = f.rule.as_deref(),
                process = process.as_deref(),
                pending_seconds = f.pending_seconds,
                "{what}: {}",
                f.message
            )
        };
    }
    match f.severity {
        Severity::Critical | Severity::Warning => emit!(warn),
        Severity::Info => emit!(info),
    }
}

/// How often the one-line summary is logged while the agent runs.
const SUMMARY_EVERY: Duration = Duration::from_secs(600);

/// The periodic one-line state of the node: findings by severity and kind, sources
/// not read whole, and the API view's state.
fn log_summary(report: &ScanReport, fresh: bool, scans: u64) {
    let count = |s: Severity| report.findings.iter().filter(|f| f.severity == s).count();
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for f in &report.findings {
        *kinds.entry(f.kind.as_str()).or_default() += 1;
    }
    let kinds = kinds
        .iter()
        .map(|(k, n)| format!("{k}={n}"))
        .collect::<Vec<_>>()
        .join(",");
    let troubled = report
        .sources
        .iter()
        .filter(|s| {
            matches!(
                s.status,
                SourceState::Error
                    | SourceState::Failed
                    | SourceState::TimedOut
                    | SourceState::TooLarge
                    | SourceState::Partial
            )
        })
        .map(|s| format!("{}:{}", s.source, s.status.as_str()))
        .collect::<Vec<_>>()
        .join(",");
    tracing::info!(
        critical = count(Severity::Critical),
        warning = count(Severity::Warning),
        info = count(Severity::Info),
        kinds = %kinds,
        sources_not_ok = %troubled,
        coverage_complete = report.coverage.complete,
        proxy_mode = report.coverage.proxy_mode.as_str(),
        api_fresh = fresh,
        scans,
        "summary: {} findings ({} critical, {} warning, {} info)",
        report.findings.len(),
        count(Severity::Critical),
        count(Severity::Warning),
        count(Severity::Info),
    );
}

#[cfg(test)]
mod tests;
