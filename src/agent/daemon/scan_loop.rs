//! The scan loop: when to scan (every interval, and soon after the API or the kernel
//! announces a change), and what to do with each scan's result.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch as signal_watch;

use super::log::ScanLog;
use super::scan::{FileAcceptances, NodeReader, ScanOutcome, ScanStats, record, scan_once};
use super::{AgentConfig, stopped};
use crate::agent::acceptances::{AcceptanceFile, AcceptanceMemory, RELOAD_EVERY};
use crate::agent::desired_view::DesiredView;
use crate::agent::http::Shared;
use crate::agent::kube_report::KubeReporter;
use crate::heart::outcome::ScanReport;
use crate::sources::rule_changes::{ChangeJournal, RuleChanges};
use crate::sources::self_usage::cpu_time;

/// Quiet time after a change before the scan it triggers: kube-proxy applies a change
/// within about a second (its default minimum sync period), and a burst of EndpointSlice
/// updates during a rollout is coalesced into one scan.
pub(super) const SETTLE: Duration = Duration::from_secs(2);
/// Quiet time after the kernel announces a rule change: the change is already applied
/// (kube-proxy writes a whole sync in one transaction), so the scan follows within a
/// second; a burst of commits in this window is still one scan.
pub(super) const RULE_SETTLE: Duration = Duration::from_millis(250);
/// A stream of changes that never goes quiet still gets a scan this long after its first.
pub(super) const MAX_DEFER: Duration = Duration::from_secs(10);
/// Change-driven scans start at least this long after the previous scan ended, so a
/// node whose rules churn constantly is not rescanned constantly.
pub(super) const MIN_GAP: Duration = Duration::from_secs(5);
/// Under churn, the gap is also at least this many times the CPU time the last scan
/// cost (the agent's, its tools' included), so change-driven scanning takes at most
/// about 1/(1 + COST_RATIO) of a core (under 5%) however costly a scan is, up to
/// `--interval`; it shrinks again as scans get cheaper or the node goes quiet. CPU
/// time, not the scan's length: that counts waiting as cost, and one scan's readers
/// run side by side.
pub(super) const COST_RATIO: u32 = 20;
/// How soon to look again while the API watch caches have not synced.
const SYNC_POLL: Duration = Duration::from_millis(250);

/// Why a scan ran (for the debug log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Trigger {
    Interval,
    Change,
}

/// Changes seen since the last scan began, not yet scanned for.
#[derive(Debug, Default)]
pub(super) struct PendingChange {
    first: Option<Instant>,
    /// The end of the latest change's quiet time.
    settled: Option<Instant>,
}

impl PendingChange {
    /// A change at `now` that wants `settle` of quiet before its scan.
    pub(super) fn note(&mut self, now: Instant, settle: Duration) {
        self.first.get_or_insert(now);
        self.settled = self.settled.max(Some(now + settle));
    }

    /// When the scan for these changes is due: after each change's quiet time, but no
    /// later than `MAX_DEFER` after the first, and never within `gap` of the end of the
    /// last scan, whatever triggered it.
    pub(super) fn due(&self, last_scan: Option<LastScan>) -> Option<Instant> {
        let (first, settled) = (self.first?, self.settled?);
        let due = settled.min(first + MAX_DEFER);
        Some(match last_scan {
            Some(last) => due.max(last.end + last.gap),
            None => due,
        })
    }
}

/// When the last scan ended, and the gap the next change-driven scan keeps from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LastScan {
    pub(super) end: Instant,
    pub(super) gap: Duration,
}

impl LastScan {
    /// After a scan that cost `cost` of CPU time, with the agent's `interval`.
    pub(super) fn new(end: Instant, cost: Duration, interval: Duration) -> LastScan {
        LastScan {
            end,
            gap: (cost * COST_RATIO).clamp(MIN_GAP, interval.max(MIN_GAP)),
        }
    }
}

/// When to scan: at the interval after the last scan, or sooner for the changes
/// announced since the last scan began, within their quiet time and the gap the last
/// scan keeps.
#[derive(Debug)]
pub(super) struct Scheduler {
    interval: Duration,
    pending: PendingChange,
    next_tick: Instant,
    last_scan: Option<LastScan>,
}

impl Scheduler {
    /// The first scan is due at `now`.
    pub(super) fn new(interval: Duration, now: Instant) -> Scheduler {
        Scheduler {
            interval,
            pending: PendingChange::default(),
            next_tick: now,
            last_scan: None,
        }
    }

    /// When the next scan is due, and why.
    pub(super) fn due(&self) -> (Instant, Trigger) {
        match self.pending.due(self.last_scan) {
            Some(change) if change < self.next_tick => (change, Trigger::Change),
            _ => (self.next_tick, Trigger::Interval),
        }
    }

    pub(super) fn on_change(&mut self, change: Change, now: Instant) {
        match change {
            Change::Api => self.on_api_change(now),
            Change::Rules => self.on_rule_change(now),
            Change::Acceptances => self.on_acceptances_change(now),
        }
    }

    pub(super) fn on_api_change(&mut self, now: Instant) {
        self.pending.note(now, SETTLE);
    }

    pub(super) fn on_rule_change(&mut self, now: Instant) {
        self.pending.note(now, RULE_SETTLE);
    }

    /// An edited acceptances file is applied by a scan soon after, not at the interval.
    pub(super) fn on_acceptances_change(&mut self, now: Instant) {
        self.pending.note(now, RULE_SETTLE);
    }

    /// No scan yet: the API watch caches have not synced.
    pub(super) fn not_synced(&mut self, now: Instant) {
        self.next_tick = now + SYNC_POLL;
    }

    /// A scan begins: the changes announced so far are in it.
    pub(super) fn scan_begins(&mut self) {
        self.pending = PendingChange::default();
    }

    /// A scan ended at `now`, having cost `cost` of CPU time.
    pub(super) fn after_scan(&mut self, now: Instant, cost: Duration) {
        self.last_scan = Some(LastScan::new(now, cost, self.interval));
        self.next_tick = now + self.interval;
    }
}

/// What announced a change worth a scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
    Api,
    Rules,
    Acceptances,
}

/// Whatever announces changes: the desired state's view, the kernel's nf_tables
/// notifications (when they can be followed), the acceptances file (with `--accept`).
struct Announcements {
    api: signal_watch::Receiver<u64>,
    /// The listener: it stops when this is dropped.
    rules: Option<RuleChanges>,
    /// Wakes the loop for each notification.
    rule_wake: Option<signal_watch::Receiver<u64>>,
    /// Tells each read whether any came since the last read began.
    rule_counter: Option<signal_watch::Receiver<u64>>,
    accept_file: Option<AcceptanceFile>,
    accept_reload: tokio::time::Interval,
}

impl Announcements {
    fn new(config: &AgentConfig, view: &DesiredView) -> Announcements {
        let rules = match RuleChanges::subscribe() {
            Ok(sub) => Some(sub),
            Err(error) => {
                tracing::warn!(%error, "cannot follow nf_tables changes; every scan reads every rule dump, and rule changes wait for the next interval");
                None
            }
        };
        let mut accept_reload = tokio::time::interval(RELOAD_EVERY);
        accept_reload.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Announcements {
            api: view.changes(),
            rule_wake: rules.as_ref().map(RuleChanges::receiver),
            rule_counter: rules.as_ref().map(RuleChanges::receiver),
            rules,
            accept_file: config.acceptances.clone().map(AcceptanceFile::open),
            accept_reload,
        }
    }

    /// The journal of the kernel's notifications, for the node reader.
    fn journal(&self) -> Option<ChangeJournal> {
        self.rules.as_ref().map(RuleChanges::journal)
    }

    /// The next change announced. Cancel-safe: the loop drops it when a scan is due.
    async fn next(&mut self) -> Change {
        loop {
            tokio::select! {
                Ok(()) = self.api.changed() => return Change::Api,
                () = changed(self.rule_wake.as_mut()) => return Change::Rules,
                _ = self.accept_reload.tick(), if self.accept_file.is_some() => {
                    if self.accept_file.as_mut().is_some_and(AcceptanceFile::reload) {
                        return Change::Acceptances;
                    }
                }
            }
        }
    }

    /// What is announced from now on triggers the next scan, not the one beginning.
    fn mark_seen(&mut self) {
        self.api.mark_unchanged();
        if let Some(wake) = self.rule_wake.as_mut() {
            wake.mark_unchanged();
        }
    }

    /// Whether the kernel is announcing changes and has announced none since the last
    /// read began. Marks the announcements seen, so that any arriving from now on
    /// (during the read) make the following scan read again.
    fn nf_tables_unchanged(&mut self) -> bool {
        let Some(rules) = self.rule_counter.as_mut() else {
            return false;
        };
        let unchanged = matches!(rules.has_changed(), Ok(false));
        rules.mark_unchanged();
        unchanged
    }

    /// The acceptances file's entries now, and the file as a source.
    fn acceptances(&self) -> FileAcceptances {
        self.accept_file
            .as_ref()
            .map_or_else(Default::default, |f| (f.current(), Some(f.status())))
    }
}

/// What a scan cost: the CPU time the agent (its tools' included) spent meanwhile.
struct CostMeter {
    started: Instant,
    cpu_before: Option<Duration>,
}

impl CostMeter {
    fn start() -> CostMeter {
        CostMeter {
            started: Instant::now(),
            cpu_before: cpu_time(),
        }
    }

    fn cost(&self) -> Duration {
        // Without /proc/self/stat, the scan's length stands in for its CPU time.
        self.cpu_before.zip(cpu_time()).map_or_else(
            || self.started.elapsed(),
            |(before, after)| after.saturating_sub(before),
        )
    }
}

/// Where each scan's result goes: the acceptances' memory, the metrics and the served
/// report, the log and the Kubernetes reporter.
struct Results {
    accept_memory: AcceptanceMemory,
    log: ScanLog,
    reporter: Option<KubeReporter>,
}

impl Results {
    fn new(reporter: Option<KubeReporter>) -> Results {
        Results {
            accept_memory: AcceptanceMemory::default(),
            log: ScanLog::default(),
            reporter,
        }
    }

    fn after_scan(&mut self, shared: &Shared, view: &DesiredView, outcome: ScanOutcome) {
        match outcome {
            Ok((report, stats)) => self.after_report(shared, view, report, stats),
            Err(error) => {
                let source = error.metric_label();
                shared.metrics.scan_failed(source);
                tracing::warn!(source, %error, "scan failed");
            }
        }
    }

    fn after_report(
        &mut self,
        shared: &Shared,
        view: &DesiredView,
        mut report: ScanReport,
        stats: ScanStats,
    ) {
        self.accept_memory.after_scan(&mut report, jiff::Timestamp::now());
        if let (Some(reporter), Some(repair)) = (&mut self.reporter, &stats.repair) {
            reporter.after_repair(repair);
        }
        record(shared, &report, stats);
        self.log.after_scan(&report, || view.fresh());
        if let Some(reporter) = &mut self.reporter {
            reporter.after_scan(&report.findings);
        }
    }
}

pub(super) async fn scan_loop(
    config: &AgentConfig,
    view: &DesiredView,
    shared: &Arc<Shared>,
    reporter: Option<KubeReporter>,
    stop: signal_watch::Receiver<bool>,
) {
    let mut announcements = Announcements::new(config, view);
    let mut scheduler = Scheduler::new(config.interval, Instant::now());
    let mut results = Results::new(reporter);
    let mut node = NodeReader::new(config, announcements.journal());
    let mut waiting_logged = false;
    let stop = stopped(stop);
    tokio::pin!(stop);
    loop {
        let (due, trigger) = scheduler.due();
        tokio::select! {
            () = &mut stop => return,
            () = tokio::time::sleep_until(due.into()) => {}
            change = announcements.next() => {
                scheduler.on_change(change, Instant::now());
                continue;
            }
        }
        shared.set_api(view.synced(), view.fresh());
        if !view.synced() {
            if !waiting_logged {
                tracing::info!("waiting for the API watch caches to sync before the first scan");
                waiting_logged = true;
            }
            scheduler.not_synced(Instant::now());
            continue;
        }
        // What changed before this point is in this scan; what changes from here on
        // triggers the next.
        scheduler.scan_begins();
        announcements.mark_seen();
        let plan = node.plan_read(announcements.nf_tables_unchanged());
        tracing::debug!(
            ?trigger,
            reuse_nf_tables = plan.reuse_nf_tables,
            whole = plan.whole,
            "scanning"
        );
        let meter = CostMeter::start();
        let scan = scan_once(config, view, node, announcements.acceptances());
        let joined = tokio::select! {
            () = &mut stop => return,
            joined = scan => joined,
        };
        scheduler.after_scan(Instant::now(), meter.cost());
        let (scanned, outcome) = match joined {
            Ok(pair) => pair,
            Err(e) => {
                tracing::error!(error = %e, "the scan thread failed");
                shared.metrics.scan_failed("node");
                node = NodeReader::new(config, announcements.journal());
                continue;
            }
        };
        node = scanned;
        results.after_scan(shared, view, outcome);
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
