//! `portdrift_findings*` and `portdrift_finding`: the last scan's findings by kind, broken
//! down by backend and severity, and one series per finding up to `--metrics-max-series`.

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::described::Described;
use super::labels::{FindingLabel, KindBackendLabel, KindLabel, KindSeverityLabel};
use super::last_scan::LastScanGauge;
use super::series::{at_zero, detail_series, tally};
use super::{NO_BACKEND, count};
use crate::heart::finding::{Finding, Kind};
use crate::heart::model::Backend;

pub(super) struct FindingMetrics {
    by_kind: Family<KindLabel, Gauge>,
    accepted: Family<KindLabel, Gauge>,
    by_backend: LastScanGauge<KindBackendLabel>,
    by_severity: LastScanGauge<KindSeverityLabel>,
    detailed: LastScanGauge<FindingLabel>,
    not_detailed: Gauge,
    max_series: usize,
}

/// A gauge for every kind, at zero.
fn per_kind() -> Family<KindLabel, Gauge> {
    at_zero(
        Family::default(),
        Kind::ALL.map(|kind| KindLabel { kind: kind.as_str() }),
    )
}

impl FindingMetrics {
    /// With at most `max_series` per-finding series (0: none).
    pub(super) fn register(registry: &mut Described<'_>, max_series: usize) -> FindingMetrics {
        let by_kind = per_kind();
        registry.add(
            "findings",
            "Findings of the last scan, by kind",
            None,
            by_kind.clone(),
        );
        let accepted = per_kind();
        registry.add(
            "findings_accepted",
            "Findings of the last scan accepted as exceptions (an acceptances file, a Service's portdrift.io/accept), by kind; in no other findings series",
            None,
            accepted.clone(),
        );
        let by_backend = LastScanGauge::register(
            registry,
            "findings_by_backend",
            "Findings of the last scan, by kind and backend (none: not about one backend); only non-zero ones",
            None,
        );
        let by_severity = LastScanGauge::register(
            registry,
            "findings_by_severity",
            "Findings of the last scan, by kind and severity; only non-zero ones",
            None,
        );
        let detailed = LastScanGauge::register(
            registry,
            "finding",
            "Findings of the last scan with these labels (usually 1), most severe first, up to --metrics-max-series",
            None,
        );
        let not_detailed = Gauge::default();
        registry.add(
            "findings_not_detailed",
            "Findings of the last scan left out of portdrift_finding by --metrics-max-series",
            None,
            not_detailed.clone(),
        );
        FindingMetrics {
            by_kind,
            accepted,
            by_backend,
            by_severity,
            detailed,
            not_detailed,
            max_series,
        }
    }

    pub(super) fn max_series(&self) -> usize {
        self.max_series
    }

    /// Every kind's gauge is set, 0 when none. Accepted findings are in
    /// `portdrift_findings_accepted` only: what alerts read counts what the Node
    /// condition and Events count.
    pub(super) fn record(&self, all: &[Finding]) {
        let (accepted, findings): (Vec<&Finding>, Vec<&Finding>) =
            all.iter().partition(|f| f.accepted.is_some());
        for kind in Kind::ALL {
            let label = KindLabel { kind: kind.as_str() };
            let n = findings.iter().filter(|f| f.kind == kind).count();
            self.by_kind.get_or_create(&label).set(count(n));
            let n = accepted.iter().filter(|f| f.kind == kind).count();
            self.accepted.get_or_create(&label).set(count(n));
        }
        self.by_backend
            .replace(tally(findings.iter().map(|f| KindBackendLabel {
                kind: f.kind.as_str(),
                backend: f.backend.map_or(NO_BACKEND, Backend::as_str),
            })));
        self.by_severity
            .replace(tally(findings.iter().map(|f| KindSeverityLabel {
                kind: f.kind.as_str(),
                severity: f.severity.as_str(),
            })));
        let (shown, not_shown) = detail_series(findings.into_iter(), self.max_series);
        self.detailed.replace(shown);
        self.not_detailed.set(count(not_shown));
    }
}
