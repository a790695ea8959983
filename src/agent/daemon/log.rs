//! What the agent logs about its scans: findings as they appear and clear, coverage
//! when it changes, and a periodic summary.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::heart::coverage::Coverage;
use crate::heart::finding::{Finding, FindingId, Severity};
use crate::heart::outcome::{InputState, ScanReport};
use crate::heart::visible::visible;

/// What the log has said so far: the findings and coverage it last logged, and when
/// it last logged the summary.
#[derive(Debug, Default)]
pub(super) struct ScanLog {
    known: BTreeMap<FindingId, Finding>,
    coverage: Option<Coverage>,
    scans: u64,
    last_summary: Option<Instant>,
}

impl ScanLog {
    /// Logs what changed with this scan, and the summary when it is due; `api_fresh`
    /// is asked only then.
    pub(super) fn after_scan(&mut self, report: &ScanReport, api_fresh: impl FnOnce() -> bool) {
        log_coverage(&mut self.coverage, &report.coverage);
        log_changes(&mut self.known, report);
        self.scans += 1;
        if self.last_summary.is_none_or(|t| t.elapsed() >= SUMMARY_EVERY) {
            log_summary(report, api_fresh(), self.scans);
            self.last_summary = Some(Instant::now());
        }
    }
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
            evidence = %visible(&coverage.proxy_mode_evidence),
            "coverage: every check ran on complete inputs"
        );
    } else {
        for sentence in &coverage.not_checked {
            tracing::warn!(proxy_mode = mode, "coverage: not checked: {}", visible(sentence));
        }
    }
    *last = Some(coverage.clone());
}

/// Logs one line per finding that appeared since the last scan (or whose severity
/// changed, as a pending one does when its grace window ends), and one per finding
/// that cleared. A finding that persists is not logged again: the periodic summary
/// counts it.
fn log_changes(known: &mut BTreeMap<FindingId, Finding>, report: &ScanReport) {
    let mut now: BTreeMap<FindingId, Finding> = BTreeMap::new();
    for f in &report.findings {
        now.entry(f.identity()).or_insert_with(|| f.clone());
    }
    for (k, f) in &now {
        match known.get(k) {
            None => log_finding(f, "finding"),
            Some(before) if before.severity != f.severity => log_finding(f, "finding changed severity"),
            Some(before) if before.accepted.is_some() != f.accepted.is_some() => log_finding(
                f,
                if f.accepted.is_some() {
                    "finding accepted"
                } else {
                    "finding no longer accepted"
                },
            ),
            Some(_) => {}
        }
    }
    for (k, f) in known.iter() {
        if !now.contains_key(k) {
            // The target is in the message; the fields are what dashboards filter on.
            tracing::info!(
                id = %f.id(),
                kind = %f.kind,
                port = f.port,
                backend = f.backend.map(|b| b.as_str()),
                service = f.service.as_deref(),
                // The same words repair's audit trail names a finding with.
                "finding cleared: {}",
                visible(&crate::heart::repair::plan::describe_finding(f))
            );
        }
    }
    *known = now;
}

/// One line with everything an engineer greps for: the port, the Service, the backend,
/// the rule and where it is, the process, and the finding's own sentence saying what to do. What
/// came from the node (rule text, process names) is escaped: logs are read on terminals.
fn log_finding(f: &Finding, what: &str) {
    let process = f
        .process
        .as_ref()
        .map(|p| format!("{} (pid {})", visible(&p.name), p.pid));
    let target = f.target.as_deref().map(visible);
    let rule = f.rule.as_deref().map(visible);
    let at = f
        .rule_source
        .as_ref()
        .map(|at| visible(&at.to_string()).into_owned());
    let message = visible(&f.message);
    let accepted = f.accepted.as_ref().map(|a| visible(&a.reason));
    macro_rules! emit {
        ($level:ident) => {
            tracing::$level!(
                id = %f.id(),
                kind = %f.kind,
                severity = %f.severity,
                protocol = f.protocol.map(|p| p.as_str()),
                port = f.port,
                family = f.family.map(|p| p.as_str()),
                backend = f.backend.map(|b| b.as_str()),
                service = f.service.as_deref(),
                target = target.as_deref(),
                rule = rule.as_deref(),
                at = at.as_deref(),
                process = process.as_deref(),
                pending_seconds = f.pending_seconds,
                accepted = accepted.as_deref(),
                "{what}: {message}"
            )
        };
    }
    // An accepted finding is known and chosen: worth a line, not a warning.
    match f.severity {
        Severity::Critical | Severity::Warning if accepted.is_none() => emit!(warn),
        _ => emit!(info),
    }
}

/// How often the one-line summary is logged while the agent runs.
const SUMMARY_EVERY: Duration = Duration::from_secs(600);

/// The periodic one-line state of the node: findings by severity and kind, sources
/// not read whole, and the API view's state.
fn log_summary(report: &ScanReport, fresh: bool, scans: u64) {
    let summary = report.summary;
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
                InputState::Error
                    | InputState::Failed
                    | InputState::TimedOut
                    | InputState::TooLarge
                    | InputState::Partial
            )
        })
        .map(|s| format!("{}:{}", s.source, s.status.as_str()))
        .collect::<Vec<_>>()
        .join(",");
    tracing::info!(
        critical = summary.critical,
        warning = summary.warning,
        info = summary.info,
        accepted = summary.accepted,
        kinds = %kinds,
        sources_not_ok = %troubled,
        coverage_complete = report.coverage.complete,
        proxy_mode = report.coverage.proxy_mode.as_str(),
        api_fresh = fresh,
        scans,
        "summary: {} ({} critical, {} warning, {} info, {} accepted)",
        crate::heart::words::count_of(report.findings.len(), "finding"),
        summary.critical,
        summary.warning,
        summary.info,
        summary.accepted,
    );
}
