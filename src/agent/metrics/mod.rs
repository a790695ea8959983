//! The daemon's Prometheus metrics (`portdrift_*`), served by [`crate::agent::http`].
//!
//! Text format 0.0.4 ([`encode_text`]) is the default because `promtool check metrics`
//! reads only that; OpenMetrics ([`encode_openmetrics`]) when a scraper asks for it.
//!
//! Every label is bounded: kinds, severities, backends, families, protocols, phases and
//! watched resources are fixed sets; source names are the report's fixed set (anything
//! else is `other`); the per-finding series (`portdrift_finding`) are capped by
//! `--metrics-max-series`, the rest counted in `portdrift_findings_not_detailed`.
//! Series that describe the last scan are replaced as a whole after each scan, so a
//! finding that cleared leaves no series behind.
//!
//! [`encode_text`]: Metrics::encode_text
//! [`encode_openmetrics`]: Metrics::encode_openmetrics

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::agent::kube_report::ReportMetrics;
use crate::agent::watch::ViewStatus;
use crate::heart::outcome::ScanReport;

mod api;
mod coverage;
pub mod described;
mod findings;
mod kube_proxy;
pub mod labels;
mod last_scan;
mod process;
mod register;
mod scans;
mod series;
mod sources;

use api::ApiMetrics;
use coverage::CoverageMetrics;
use findings::FindingMetrics;
use kube_proxy::KubeProxyMetrics;
pub use labels::{
    BackendFamilyLabel, BuildLabel, FindingLabel, KindBackendLabel, KindLabel, KindSeverityLabel, ModeLabel,
    PhaseLabel, ProtocolFamilyLabel, ResourceLabel, ResultLabel, SourceLabel,
};
use scans::ScanMetrics;
pub use scans::ScanTimes;
use sources::SourceMetrics;

/// Sources whose failure a scan reports as an error, besides each source's own name.
pub const SCAN_ERROR_SOURCES: [&str; 2] = ["node", "cluster"];

/// Repair results, each registered at zero so dashboards see them before a repair runs.
pub const REPAIR_RESULTS: [&str; 3] = ["applied", "skipped", "failed"];

/// The label of a finding or rule without a backend.
pub const NO_BACKEND: &str = "none";

/// The default of `--metrics-max-series`: enough for every finding of a badly drifted
/// node, few enough that a thousand nodes stay cheap for Prometheus.
pub const DEFAULT_MAX_SERIES: usize = 200;

/// The source label of a scan that failed as a whole: one of [`SCAN_ERROR_SOURCES`],
/// `other` for anything else, so no label value can grow without bound.
fn scan_error_source(name: &str) -> &'static str {
    SCAN_ERROR_SOURCES
        .into_iter()
        .find(|known| *known == name)
        .unwrap_or("other")
}

/// Every metric the daemon exports, each subsystem's in a part of its own, and the
/// registry they live in.
pub struct Metrics {
    registry: Registry,
    /// What is registered, for the reference.
    docs: Vec<described::MetricDoc>,
    findings: FindingMetrics,
    scans: ScanMetrics,
    sources: SourceMetrics,
    kube_proxy: KubeProxyMetrics,
    coverage: CoverageMetrics,
    repairs: Family<ResultLabel, Counter>,
    api: ApiMetrics,
    kube_report: ReportMetrics,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("max_series", &self.findings.max_series())
            .finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Metrics {
    /// The metrics with the default cap on per-finding series.
    pub fn new() -> Metrics {
        Metrics::with_max_series(DEFAULT_MAX_SERIES)
    }

    /// Records a completed scan: its findings (every kind's gauge is set, 0 when none),
    /// how long it took, how each source went, what the node holds.
    pub fn scan_done(&self, report: &ScanReport, times: &ScanTimes, finished_unix: f64) {
        self.findings.record(&report.findings);
        // Each part of a source that failed is a scan error too.
        for failed in report.sources.iter().filter(|s| s.status.is_failure()) {
            self.scans.failed(failed.source.name());
        }
        self.sources.record(&report.sources);
        self.kube_proxy
            .record(report.kube_proxy.as_ref(), report.kube_proxy_answered);
        self.coverage.record(&report.coverage);
        self.scans.record(times, finished_unix);
    }

    /// Counts a scan that could not read `source`, one of [`SCAN_ERROR_SOURCES`].
    pub fn scan_failed(&self, source: &str) {
        self.scans.failed(scan_error_source(source));
    }

    /// The API view's state.
    pub fn set_api(&self, synced: bool, fresh: bool) {
        self.api.set_view(synced, fresh);
    }

    /// Each API watch's state, as [`crate::agent::watch::ClusterView::status`] gave
    /// it at `now_unix`.
    pub fn set_api_watches(&self, status: &ViewStatus, now_unix: f64) {
        self.api.set_watches(status, now_unix);
    }

    /// The repair counter, by result.
    pub fn repairs(&self) -> &Family<ResultLabel, Counter> {
        &self.repairs
    }

    /// The counters of Events and Node condition patches (see [`crate::agent::kube_report`]).
    pub fn kube_report(&self) -> &ReportMetrics {
        &self.kube_report
    }

    /// Every metric registered, by name, as the reference lists them.
    pub fn docs(&self) -> &[described::MetricDoc] {
        &self.docs
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
mod tests;
