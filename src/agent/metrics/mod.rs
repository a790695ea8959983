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

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::agent::watch::{ViewStatus, WatchStatus};
use crate::heart::coverage::Coverage;
use crate::heart::finding::{Finding, Kind};
use crate::heart::model::{Backend, Family as IpFamily};
use crate::heart::observed::SOCKET_FILES;
use crate::heart::observed::{KubeProxyAnswered, KubeProxyHealth};
use crate::heart::outcome::{ACCEPTANCES_SOURCE, API_SOURCE, ScanReport, SourceStatus};

pub mod described;
pub mod labels;
mod last_scan;
mod process;
mod register;
mod series;

use crate::sources::bundle::{
    HEALTHZ_FILE, IP_VS_FILE, IPTABLES_FILES, LOCAL_PORT_RANGE_FILE, MANIFEST_FILE, NET_DEV_FILE,
    PROXY_MODE_FILE, RESERVED_PORTS_FILE,
};
pub use labels::{
    BackendFamilyLabel, BuildLabel, FindingLabel, KindBackendLabel, KindLabel, KindSeverityLabel, ModeLabel,
    PhaseLabel, ProtocolFamilyLabel, ResourceLabel, ResultLabel, SourceLabel,
};
use labels::{NoLabels, socket_label};
use last_scan::LastScan;
use series::{detail_series, tally};

/// Sources whose failure a scan reports as an error, besides each source's own name.
pub const SCAN_ERROR_SOURCES: [&str; 2] = ["node", "cluster"];

/// Repair results (registered now so dashboards see zeros before repair exists).
pub const REPAIR_RESULTS: [&str; 3] = ["applied", "skipped", "failed"];

/// The label of a finding or rule without a backend.
pub const NO_BACKEND: &str = "none";

/// The default of `--metrics-max-series`: enough for every finding of a badly drifted
/// node, few enough that a thousand nodes stay cheap for Prometheus.
pub const DEFAULT_MAX_SERIES: usize = 200;

/// The source label a report's source name is exported under: its own name when it is
/// one the scan knows (a fixed set), `other` for anything else, so no label value can
/// grow without bound.
pub fn bounded_source(name: &str) -> &'static str {
    const OTHERS: [&str; 13] = [
        "nft.json",
        "nft.txt",
        "socket owners",
        LOCAL_PORT_RANGE_FILE,
        RESERVED_PORTS_FILE,
        HEALTHZ_FILE,
        PROXY_MODE_FILE,
        NET_DEV_FILE,
        IP_VS_FILE,
        "cluster.json",
        API_SOURCE,
        ACCEPTANCES_SOURCE,
        MANIFEST_FILE,
    ];
    IPTABLES_FILES
        .iter()
        .map(|(n, _, _)| *n)
        .chain(SOCKET_FILES.iter().map(|(n, _, _)| *n))
        .chain(OTHERS)
        .chain(SCAN_ERROR_SOURCES)
        .find(|known| *known == name)
        .unwrap_or("other")
}

/// How long each phase of one scan took, as the agent timed them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanTimes {
    /// The whole scan.
    pub total: Duration,
    /// Reading the node: netfilter dumps, sockets, their owners, sysctls, kube-proxy.
    pub read_node: Duration,
    /// Building the desired state from the API view.
    pub build_desired: Duration,
    /// The detector.
    pub detect: Duration,
}

impl ScanTimes {
    /// Each phase with its `phase` label.
    fn phases(&self) -> [(&'static str, Duration); 3] {
        [
            ("read-node", self.read_node),
            ("build-desired", self.build_desired),
            ("detect", self.detect),
        ]
    }
}

/// Every metric the daemon exports, and the registry they live in.
pub struct Metrics {
    registry: Registry,
    /// What is registered, for the reference.
    docs: Vec<described::MetricDoc>,
    findings: Family<KindLabel, Gauge>,
    findings_accepted: Family<KindLabel, Gauge>,
    findings_by_backend: LastScan<KindBackendLabel>,
    findings_by_severity: LastScan<KindSeverityLabel>,
    finding: LastScan<FindingLabel>,
    findings_not_detailed: Gauge,
    max_series: usize,
    scans: Counter,
    scan_errors: Family<SourceLabel, Counter>,
    scan_duration: Histogram,
    scan_phase_duration: Family<PhaseLabel, Histogram, fn() -> Histogram>,
    last_scan: Gauge<f64, AtomicU64>,
    source_up: LastScan<SourceLabel>,
    nodeport_rules: Family<BackendFamilyLabel, Gauge>,
    listeners: Family<ProtocolFamilyLabel, Gauge>,
    kube_proxy_healthy: LastScan<NoLabels>,
    kube_proxy_reachable: LastScan<SourceLabel>,
    kube_proxy_sync_age: LastScan<NoLabels, f64, AtomicU64>,
    kube_proxy_node_eligible: LastScan<NoLabels>,
    coverage_complete: LastScan<NoLabels>,
    coverage_not_checked: LastScan<NoLabels>,
    proxy_mode: LastScan<ModeLabel>,
    repairs: Family<ResultLabel, Counter>,
    api_synced: Gauge,
    api_fresh: Gauge,
    api_watch_synced: LastScan<ResourceLabel>,
    api_watch_fresh: LastScan<ResourceLabel>,
    api_watch_objects: LastScan<ResourceLabel>,
    api_watch_last_activity: LastScan<ResourceLabel, f64, AtomicU64>,
    api_watch_errors: Family<ResourceLabel, Counter>,
    kube_report: crate::agent::kube_report::ReportMetrics,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("max_series", &self.max_series)
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
        self.record_findings(&report.findings);
        self.record_sources(&report.sources);
        self.record_kube_proxy(report.kube_proxy.as_ref(), report.kube_proxy_answered);
        self.record_coverage(&report.coverage);
        self.scans.inc();
        self.scan_duration.observe(times.total.as_secs_f64());
        for (phase, took) in times.phases() {
            self.scan_phase_duration
                .get_or_create(&PhaseLabel { phase })
                .observe(took.as_secs_f64());
        }
        self.last_scan.set(finished_unix);
    }

    /// Accepted findings are in `portdrift_findings_accepted` only: what alerts read
    /// counts what the Node condition and Events count.
    fn record_findings(&self, all: &[Finding]) {
        let (accepted, findings): (Vec<&Finding>, Vec<&Finding>) =
            all.iter().partition(|f| f.accepted.is_some());
        for kind in Kind::ALL {
            let n = findings.iter().filter(|f| f.kind == kind).count();
            self.findings
                .get_or_create(&KindLabel { kind: kind.as_str() })
                .set(count(n));
            let n = accepted.iter().filter(|f| f.kind == kind).count();
            self.findings_accepted
                .get_or_create(&KindLabel { kind: kind.as_str() })
                .set(count(n));
        }
        self.findings_by_backend
            .replace(tally(findings.iter().map(|f| KindBackendLabel {
                kind: f.kind.as_str(),
                backend: f.backend.map_or(NO_BACKEND, Backend::as_str),
            })));
        self.findings_by_severity
            .replace(tally(findings.iter().map(|f| KindSeverityLabel {
                kind: f.kind.as_str(),
                severity: f.severity.as_str(),
            })));
        let (shown, not_shown) = detail_series(findings.into_iter(), self.max_series);
        self.finding.replace(shown);
        self.findings_not_detailed.set(count(not_shown));
    }

    /// Sets each source's up/down, counts the failed ones, and the rules and listeners
    /// they held.
    fn record_sources(&self, sources: &[SourceStatus]) {
        // A name can appear more than once (nft.json holds an IPv4 and an IPv6 table):
        // it is up only when every part of it is.
        let mut up: BTreeMap<&'static str, bool> = BTreeMap::new();
        for s in sources {
            let source = bounded_source(&s.source);
            *up.entry(source).or_insert(true) &= !s.status.is_failure();
            if s.status.is_failure() {
                self.scan_failed(source);
            }
        }
        self.source_up.replace(up.into_iter().map(|(source, up)| {
            (
                SourceLabel {
                    source: source.into(),
                },
                i64::from(up),
            )
        }));

        let mut rules: BTreeMap<(&'static str, &'static str), usize> = BTreeMap::new();
        let mut listeners: BTreeMap<(&'static str, &'static str), usize> = BTreeMap::new();
        for s in sources {
            if let (Some(backend), Some(family)) = (s.backend, s.family) {
                *rules.entry((backend.as_str(), family.as_str())).or_default() += s.items.unwrap_or(0);
            }
            if let Some((_, protocol, v6)) = SOCKET_FILES.iter().find(|(name, _, _)| *name == s.source) {
                let label = socket_label(*protocol, *v6);
                *listeners.entry((label.protocol, label.family)).or_default() += s.items.unwrap_or(0);
            }
        }
        for backend in [Backend::IptablesNft, Backend::IptablesLegacy, Backend::Nftables] {
            for family in [IpFamily::Ipv4, IpFamily::Ipv6] {
                let key = (backend.as_str(), family.as_str());
                self.nodeport_rules
                    .get_or_create(&BackendFamilyLabel {
                        backend: key.0,
                        family: key.1,
                    })
                    .set(count(rules.get(&key).copied().unwrap_or(0)));
            }
        }
        for (_, protocol, v6) in SOCKET_FILES {
            let label = socket_label(protocol, v6);
            let n = listeners
                .get(&(label.protocol, label.family))
                .copied()
                .unwrap_or(0);
            self.listeners.get_or_create(&label).set(count(n));
        }
    }

    fn record_kube_proxy(&self, health: Option<&KubeProxyHealth>, answered: KubeProxyAnswered) {
        let one = |v: Option<i64>| v.map(|v| (NoLabels::new(), v));
        self.kube_proxy_reachable.replace(
            // Named as the report's sources table and portdrift_source_up name them.
            [
                (HEALTHZ_FILE, answered.healthz),
                (PROXY_MODE_FILE, answered.proxy_mode),
            ]
            .into_iter()
            .filter_map(|(source, answered)| {
                Some((
                    SourceLabel {
                        source: source.into(),
                    },
                    i64::from(answered?),
                ))
            }),
        );
        self.kube_proxy_healthy
            .replace(one(health.map(|h| i64::from(h.healthy))));
        self.kube_proxy_node_eligible
            .replace(one(health.and_then(|h| h.node_eligible).map(i64::from)));
        self.kube_proxy_sync_age.replace(
            health
                .and_then(|h| h.since_last_update)
                .map(|age| (NoLabels::new(), age.as_secs_f64())),
        );
    }

    fn record_coverage(&self, coverage: &Coverage) {
        self.coverage_complete
            .replace([(NoLabels::new(), i64::from(coverage.complete))]);
        self.coverage_not_checked
            .replace([(NoLabels::new(), count(coverage.not_checked.len()))]);
        self.proxy_mode.replace([(
            ModeLabel {
                mode: coverage.proxy_mode.as_str(),
            },
            1,
        )]);
    }

    /// Counts a scan that could not read `source` (bounded by [`bounded_source`]).
    pub fn scan_failed(&self, source: &str) {
        self.scan_errors
            .get_or_create(&SourceLabel {
                source: bounded_source(source).into(),
            })
            .inc();
    }

    /// The API view's state.
    pub fn set_api(&self, synced: bool, fresh: bool) {
        self.api_synced.set(i64::from(synced));
        self.api_fresh.set(i64::from(fresh));
    }

    /// Each API watch's state, as [`crate::agent::watch::ClusterView::status`] gave
    /// it at `now_unix`.
    pub fn set_api_watches(&self, status: &ViewStatus, now_unix: f64) {
        let watches: Vec<(&'static str, &WatchStatus)> = [
            ("services", Some(&status.services)),
            ("endpointslices", Some(&status.endpoint_slices)),
            ("node", status.node.as_ref()),
        ]
        .into_iter()
        .filter_map(|(resource, w)| w.map(|w| (resource, w)))
        .collect();
        let each = |value: fn(&WatchStatus) -> i64| {
            watches
                .iter()
                .map(move |(resource, w)| (ResourceLabel { resource }, value(w)))
        };
        self.api_watch_synced.replace(each(|w| i64::from(w.synced)));
        self.api_watch_fresh.replace(each(|w| i64::from(w.fresh)));
        self.api_watch_objects.replace(each(|w| count(w.objects)));
        self.api_watch_last_activity
            .replace(watches.iter().map(|(resource, w)| {
                let heard = w
                    .since_last_activity
                    .map_or(0.0, |ago| (now_unix - ago.as_secs_f64()).max(0.0));
                (ResourceLabel { resource }, heard)
            }));
        for (resource, w) in &watches {
            let counter = self.api_watch_errors.get_or_create(&ResourceLabel { resource });
            // The view counts its errors; the counter follows it.
            counter.inc_by(w.errors.saturating_sub(counter.get()));
        }
    }

    /// The repair counter (nothing increments it yet).
    pub fn repairs(&self) -> &Family<ResultLabel, Counter> {
        &self.repairs
    }

    /// The counters of Events and Node condition patches (see [`crate::agent::kube_report`]).
    pub fn kube_report(&self) -> &crate::agent::kube_report::ReportMetrics {
        &self.kube_report
    }

    /// Prometheus text format 0.0.4 (what `promtool check metrics` reads).
    /// Every metric registered, by name, as the reference lists them.
    pub fn docs(&self) -> &[described::MetricDoc] {
        &self.docs
    }

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
