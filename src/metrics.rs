//! The daemon's Prometheus metrics (`portdrift_*`), served by [`crate::http`].
//!
//! Text format 0.0.4 ([`encode_text`]) is the default because `promtool check metrics`
//! reads only that; OpenMetrics ([`encode_openmetrics`]) when a scraper asks for it.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;

use crate::finding::Kind;
use crate::scan::ScanReport;

/// `kind` of `portdrift_findings`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

/// `source` of `portdrift_scan_errors_total`: bounded (see [`Metrics::scan_failed`]).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabel {
    pub source: String,
}

/// `result` of `portdrift_repairs_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

/// `version` of `portdrift_build_info`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabel {
    pub version: &'static str,
}

/// Every metric the daemon exports, and the registry they live in.
pub struct Metrics {
    registry: Registry,
    findings: Family<KindLabel, Gauge>,
    scans: Counter,
    scan_errors: Family<SourceLabel, Counter>,
    scan_duration: Histogram,
    last_scan: Gauge<f64, AtomicU64>,
    repairs: Family<ResultLabel, Counter>,
    api_synced: Gauge,
    api_fresh: Gauge,
    kube_report: crate::kube_report::ReportMetrics,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// Sources whose failure a scan reports as an error, besides each source's own name.
pub const SCAN_ERROR_SOURCES: [&str; 2] = ["node", "cluster"];

/// Repair results (registered now so dashboards see zeros before repair exists).
pub const REPAIR_RESULTS: [&str; 3] = ["applied", "skipped", "failed"];

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("portdrift");
        let findings = Family::<KindLabel, Gauge>::default();
        for kind in Kind::ALL {
            findings.get_or_create_owned(&KindLabel { kind: kind.as_str() });
        }
        registry.register("findings", "Findings of the last scan, by kind", findings.clone());
        // No `_total` here: the encoder adds it (and debug builds panic on it).
        let scans = Counter::default();
        registry.register("scans", "Scans completed", scans.clone());
        let scan_errors = Family::<SourceLabel, Counter>::default();
        for source in SCAN_ERROR_SOURCES {
            scan_errors.get_or_create_owned(&SourceLabel {
                source: source.into(),
            });
        }
        registry.register(
            "scan_errors",
            "Scans that could not read a source, by source",
            scan_errors.clone(),
        );
        // 1 ms .. ~65 s.
        let scan_duration = Histogram::new(exponential_buckets(0.001, 4.0, 9));
        registry.register_with_unit(
            "scan_duration",
            "How long a scan took",
            Unit::Seconds,
            scan_duration.clone(),
        );
        let last_scan = Gauge::<f64, AtomicU64>::default();
        registry.register_with_unit(
            "last_scan_timestamp",
            "When the last successful scan finished (Unix time)",
            Unit::Seconds,
            last_scan.clone(),
        );
        let repairs = Family::<ResultLabel, Counter>::default();
        for result in REPAIR_RESULTS {
            repairs.get_or_create_owned(&ResultLabel { result });
        }
        registry.register("repairs", "Repair actions, by result", repairs.clone());
        let build_info = Family::<BuildLabel, ConstGauge>::new_with_constructor(|| ConstGauge::new(1));
        drop(build_info.get_or_create(&BuildLabel {
            version: env!("CARGO_PKG_VERSION"),
        }));
        registry.register("build_info", "portdrift's version (always 1)", build_info);
        let api_synced = Gauge::default();
        registry.register(
            "api_synced",
            "1 when the API watch caches hold a complete list",
            api_synced.clone(),
        );
        let api_fresh = Gauge::default();
        registry.register(
            "api_fresh",
            "1 when the API watches are synced and recently heard from",
            api_fresh.clone(),
        );
        let kube_report = crate::kube_report::ReportMetrics::register(&mut registry);
        Metrics {
            registry,
            findings,
            scans,
            scan_errors,
            scan_duration,
            last_scan,
            repairs,
            api_synced,
            api_fresh,
            kube_report,
        }
    }

    /// Records a completed scan: every kind's gauge is set (0 when none).
    pub fn scan_done(&self, report: &ScanReport, duration: Duration, finished_unix: f64) {
        for kind in Kind::ALL {
            let n = report.findings.iter().filter(|f| f.kind == kind).count();
            self.findings
                .get_or_create(&KindLabel { kind: kind.as_str() })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        self.scans.inc();
        self.scan_duration.observe(duration.as_secs_f64());
        self.last_scan.set(finished_unix);
    }

    /// Counts a scan that could not read `source` (a bounded label).
    pub fn scan_failed(&self, source: &str) {
        self.scan_errors
            .get_or_create(&SourceLabel {
                source: source.into(),
            })
            .inc();
    }

    /// The API view's state.
    pub fn set_api(&self, synced: bool, fresh: bool) {
        self.api_synced.set(i64::from(synced));
        self.api_fresh.set(i64::from(fresh));
    }

    /// The repair counter (nothing increments it yet).
    pub fn repairs(&self) -> &Family<ResultLabel, Counter> {
        &self.repairs
    }

    /// The counters of Events and Node condition patches (see [`crate::kube_report`]).
    pub fn kube_report(&self) -> &crate::kube_report::ReportMetrics {
        &self.kube_report
    }

    /// Prometheus text format 0.0.4 (what `promtool check metrics` reads).
    pub fn encode_text(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)?;
        Ok(out)
    }

    /// OpenMetrics text 1.0.0.
    pub fn encode_openmetrics(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// `Content-Type` of [`Metrics::encode_text`].
pub const TEXT_CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;
/// `Content-Type` of [`Metrics::encode_openmetrics`].
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    fn report(kinds: &[Kind]) -> ScanReport {
        let mut r = ScanReport {
            node: None,
            summary: Default::default(),
            findings: Vec::new(),
            sources: Vec::new(),
        };
        for &kind in kinds {
            r.findings.push(crate::finding::Finding::new(
                kind,
                crate::finding::Severity::Warning,
                "test",
            ));
        }
        r
    }

    #[test]
    fn encoded_metrics_pass_promtool() {
        let m = Metrics::new();
        m.scan_done(
            &report(&[Kind::StaleEndpoint, Kind::StaleEndpoint]),
            Duration::from_millis(12),
            1.7e9,
        );
        m.scan_failed("node");
        m.set_api(true, false);
        let text = m.encode_text().unwrap();
        for needle in [
            "portdrift_findings{kind=\"stale-endpoint\"} 2",
            "portdrift_findings{kind=\"port-range-overlap\"} 0",
            "portdrift_scans_total 1",
            "portdrift_scan_errors_total{source=\"node\"} 1",
            "portdrift_scan_duration_seconds_bucket",
            "portdrift_last_scan_timestamp_seconds ",
            "portdrift_repairs_total{result=\"applied\"} 0",
            "portdrift_build_info{version=\"",
            "portdrift_api_synced 1",
            "portdrift_api_fresh 0",
            "portdrift_events_total{result=\"dropped\"} 0",
            "portdrift_node_condition_patches_total{result=\"failed\"} 0",
        ] {
            assert!(text.contains(needle), "no {needle:?} in:\n{text}");
        }
        if let Some((ok, said)) = crate::promtool::check(&text) {
            assert!(ok, "promtool check metrics failed: {said}\n{text}");
        }
        // A later scan without findings sets the gauge back to 0.
        m.scan_done(&report(&[]), Duration::from_millis(1), 1.7e9);
        let text = m.encode_text().unwrap();
        assert!(
            text.contains("portdrift_findings{kind=\"stale-endpoint\"} 0"),
            "{text}"
        );
        assert!(m.encode_openmetrics().unwrap().ends_with("# EOF\n"));
    }
}
