//! The scan loop: when to scan (every interval, and soon after the API or the kernel
//! announces a change), and what to do with each scan's result.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch as signal_watch;

use super::log::{SUMMARY_EVERY, log_changes, log_coverage, log_summary};
use super::scan::{NodeReader, record, scan_once};
use super::{AgentConfig, stopped};
use crate::agent::acceptances::{AcceptanceFile, AcceptanceMemory, RELOAD_EVERY};
use crate::agent::desired_view::DesiredView;
use crate::agent::http::Shared;
use crate::agent::kube_report::KubeReporter;
use crate::heart::coverage::Coverage;
use crate::heart::finding::{Finding, FindingId};
use crate::sources::bundle::NF_TABLES_DUMPS;
use crate::sources::rule_changes::RuleChanges;
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
/// Even without any announced change the nf_tables dumps are read again this often, and
/// whole: the notifications are trusted, not blindly. Not more often: a large node's full read is
/// costly enough to be most of the idle agent's cost.
const FULL_READ_EVERY: Duration = Duration::from_secs(1800);

/// Why a scan ran (for the debug log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trigger {
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

/// Whether the kernel is announcing changes and has announced none since the last read
/// began. Marks the announcements seen, so that any arriving from now on (during the
/// read) make the following scan read again.
fn nf_tables_unchanged(rules: Option<&mut signal_watch::Receiver<u64>>) -> bool {
    let Some(rules) = rules else { return false };
    let unchanged = matches!(rules.has_changed(), Ok(false));
    rules.mark_unchanged();
    unchanged
}

pub(super) async fn scan_loop(
    config: &AgentConfig,
    view: &DesiredView,
    shared: &Arc<Shared>,
    mut reporter: Option<KubeReporter>,
    stop: signal_watch::Receiver<bool>,
) {
    let mut known: BTreeMap<FindingId, Finding> = BTreeMap::new();
    let mut last_coverage: Option<Coverage> = None;
    let mut api_changes = view.changes();
    let rule_changes = match RuleChanges::subscribe() {
        Ok(sub) => Some(sub),
        Err(error) => {
            tracing::warn!(%error, "cannot follow nf_tables changes; every scan reads every rule dump, and rule changes wait for the next interval");
            None
        }
    };
    let journal = rule_changes.as_ref().map(RuleChanges::journal);
    let mut reader = Some(NodeReader::new(config, journal.clone()));
    let mut rule_counter = rule_changes.as_ref().map(RuleChanges::receiver);
    let mut rule_wake = rule_changes.as_ref().map(RuleChanges::receiver);
    let mut pending = PendingChange::default();
    let mut next_tick = Instant::now();
    let mut last_scan: Option<LastScan> = None;
    let mut waiting_logged = false;
    let mut last_summary: Option<Instant> = None;
    let mut scans: u64 = 0;
    let mut accept_file = config.acceptances.clone().map(AcceptanceFile::open);
    let mut accept_memory = AcceptanceMemory::default();
    let mut accept_reload = tokio::time::interval(RELOAD_EVERY);
    accept_reload.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let stop_fut = stopped(stop);
    tokio::pin!(stop_fut);
    loop {
        let due = pending
            .due(last_scan)
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
            _ = accept_reload.tick(), if accept_file.is_some() => {
                // An edited file is applied by a scan soon after, not at the interval.
                if accept_file.as_mut().is_some_and(AcceptanceFile::reload) {
                    pending.note(Instant::now(), RULE_SETTLE);
                }
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
        let whole_due = node
            .last_whole_read
            .is_none_or(|t| t.elapsed() >= FULL_READ_EVERY);
        let reuse = nf_tables_unchanged(rule_counter.as_mut()) && !whole_due;
        node.cache.allow_reuse(if reuse { &NF_TABLES_DUMPS } else { &[] });
        if whole_due {
            node.live.read_whole_next();
            node.last_whole_read = Some(Instant::now());
        }
        tracing::debug!(?trigger, reuse_nf_tables = reuse, whole = whole_due, "scanning");
        let started = Instant::now();
        let cpu_before = cpu_time();
        let accepted = accept_file
            .as_ref()
            .map_or_else(Default::default, |f| (f.current(), Some(f.status())));
        let scan = scan_once(config, view, node, accepted);
        let joined = tokio::select! {
            () = &mut stop_fut => return,
            joined = scan => joined,
        };
        // Without /proc/self/stat, the scan's length stands in for its CPU time.
        let cost = cpu_before.zip(cpu_time()).map_or_else(
            || started.elapsed(),
            |(before, after)| after.saturating_sub(before),
        );
        last_scan = Some(LastScan::new(Instant::now(), cost, config.interval));
        next_tick = Instant::now() + config.interval;
        let (node, outcome) = match joined {
            Ok(pair) => pair,
            Err(e) => {
                tracing::error!(error = %e, "the scan thread failed");
                shared.metrics.scan_failed("node");
                reader = Some(NodeReader::new(config, journal.clone()));
                continue;
            }
        };
        reader = Some(node);
        match outcome {
            Ok((mut report, stats)) => {
                accept_memory.after_scan(&mut report, jiff::Timestamp::now());
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
