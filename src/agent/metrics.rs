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

use std::collections::{BTreeMap, HashSet};
use std::hash::Hash;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use crate::agent::watch::{ViewStatus, WatchStatus};
use crate::heart::coverage::Coverage;
use crate::heart::finding::{Finding, Kind, Severity};
use crate::heart::model::{Backend, Family as IpFamily, Protocol};
use crate::heart::observed::KubeProxyHealth;
use crate::heart::observed::SOCKET_FILES;
use crate::heart::outcome::{API_SOURCE, ScanReport, SourceStatus};
use crate::sources::bundle::{
    HEALTHZ_FILE, IP_VS_FILE, IPTABLES_FILES, LOCAL_PORT_RANGE_FILE, MANIFEST_FILE, NET_DEV_FILE,
    PROXY_MODE_FILE, RESERVED_PORTS_FILE,
};

/// `kind` of `portdrift_findings`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

/// `source` of `portdrift_scan_errors_total` and `portdrift_source_up`: bounded by
/// [`bounded_source`].
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

/// `phase` of `portdrift_scan_phase_duration_seconds`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    pub phase: &'static str,
}

/// `kind`, `backend` of `portdrift_findings_by_backend`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindBackendLabel {
    pub kind: &'static str,
    pub backend: &'static str,
}

/// `kind`, `severity` of `portdrift_findings_by_severity`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindSeverityLabel {
    pub kind: &'static str,
    pub severity: &'static str,
}

/// One finding's series in `portdrift_finding`. Fields a finding lacks are `""`
/// (`backend` is `none`, as in `portdrift_findings_by_backend`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct FindingLabel {
    pub kind: &'static str,
    pub severity: &'static str,
    pub protocol: &'static str,
    pub port: String,
    pub service: String,
    pub backend: &'static str,
}

/// `backend`, `family` of `portdrift_nodeport_rules`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BackendFamilyLabel {
    pub backend: &'static str,
    pub family: &'static str,
}

/// `protocol`, `family` of `portdrift_listeners`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProtocolFamilyLabel {
    pub protocol: &'static str,
    pub family: &'static str,
}

/// `mode` of `portdrift_proxy_mode_info`: bounded by [`crate::heart::model::ProxyMode`].
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModeLabel {
    pub mode: &'static str,
}

/// `resource` of the `portdrift_api_watch_*` families.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabel {
    pub resource: &'static str,
}

/// The label set of a series without labels, in a family so that the series can be
/// removed (kube-proxy's health is unknown when its `/healthz` is not read).
type NoLabels = Vec<(&'static str, &'static str)>;

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
    const OTHERS: [&str; 12] = [
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

/// A gauge family whose series describe the last scan only: each update sets the new
/// series and then removes those the update did not set (in that order, so a scrape in
/// between sees one scan's series or both, never a gap).
#[derive(Debug)]
struct LastScan<L: Clone + Hash + Eq, N = i64, A = std::sync::atomic::AtomicI64> {
    family: Family<L, Gauge<N, A>>,
    shown: Mutex<HashSet<L>>,
}

impl<L, N, A> LastScan<L, N, A>
where
    L: Clone + Hash + Eq + EncodeLabelSet + std::fmt::Debug + Send + Sync + 'static,
    Gauge<N, A>: Default + EncodeMetric + std::fmt::Debug + Send + Sync + 'static,
    A: prometheus_client::metrics::gauge::Atomic<N>,
{
    fn new() -> Self {
        LastScan {
            family: Family::default(),
            shown: Mutex::new(HashSet::new()),
        }
    }

    fn register(&self, registry: &mut Registry, name: &str, help: &str, unit: Option<Unit>) {
        match unit {
            Some(unit) => registry.register_with_unit(name, help, unit, self.family.clone()),
            None => registry.register(name, help, self.family.clone()),
        }
    }

    fn replace(&self, values: impl IntoIterator<Item = (L, N)>) {
        let mut shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        let mut now = HashSet::new();
        for (labels, value) in values {
            self.family.get_or_create(&labels).set(value);
            now.insert(labels);
        }
        for old in shown.difference(&now) {
            self.family.remove(old);
        }
        *shown = now;
    }
}

/// Every metric the daemon exports, and the registry they live in.
pub struct Metrics {
    registry: Registry,
    findings: Family<KindLabel, Gauge>,
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

/// 1 ms .. ~65 s: a scan of a small node takes milliseconds, `iptables-nft-save` of a
/// 10,000-Service node half a minute.
fn scan_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 4.0, 9))
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Metrics {
    /// The metrics with the default cap on per-finding series.
    pub fn new() -> Metrics {
        Metrics::with_max_series(DEFAULT_MAX_SERIES)
    }

    /// The metrics with at most `max_series` per-finding series (0: none).
    pub fn with_max_series(max_series: usize) -> Metrics {
        let mut registry = Registry::with_prefix("portdrift");
        let findings = Family::<KindLabel, Gauge>::default();
        for kind in Kind::ALL {
            findings.get_or_create_owned(&KindLabel { kind: kind.as_str() });
        }
        registry.register("findings", "Findings of the last scan, by kind", findings.clone());
        let findings_by_backend = LastScan::new();
        findings_by_backend.register(
            &mut registry,
            "findings_by_backend",
            "Findings of the last scan, by kind and backend (none: not about one backend); only non-zero ones",
            None,
        );
        let findings_by_severity = LastScan::new();
        findings_by_severity.register(
            &mut registry,
            "findings_by_severity",
            "Findings of the last scan, by kind and severity; only non-zero ones",
            None,
        );
        let finding = LastScan::new();
        finding.register(
            &mut registry,
            "finding",
            "Findings of the last scan with these labels (usually 1), most severe first, up to --metrics-max-series",
            None,
        );
        let findings_not_detailed = Gauge::default();
        registry.register(
            "findings_not_detailed",
            "Findings of the last scan left out of portdrift_finding by --metrics-max-series",
            findings_not_detailed.clone(),
        );
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
        let scan_duration = scan_histogram();
        registry.register_with_unit(
            "scan_duration",
            "How long a scan took",
            Unit::Seconds,
            scan_duration.clone(),
        );
        let scan_phase_duration =
            Family::<PhaseLabel, Histogram, fn() -> Histogram>::new_with_constructor(scan_histogram);
        for (phase, _) in ScanTimes::default().phases() {
            scan_phase_duration.get_or_create_owned(&PhaseLabel { phase });
        }
        registry.register_with_unit(
            "scan_phase_duration",
            "How long each phase of a scan took (read-node, build-desired, detect)",
            Unit::Seconds,
            scan_phase_duration.clone(),
        );
        let last_scan = Gauge::<f64, AtomicU64>::default();
        registry.register_with_unit(
            "last_scan_timestamp",
            "When the last successful scan finished (Unix time)",
            Unit::Seconds,
            last_scan.clone(),
        );
        let source_up = LastScan::new();
        source_up.register(
            &mut registry,
            "source_up",
            "1 when the last scan could read the source (or it is absent on this node), 0 when reading it failed",
            None,
        );
        let nodeport_rules = Family::<BackendFamilyLabel, Gauge>::default();
        for backend in [Backend::IptablesNft, Backend::IptablesLegacy, Backend::Nftables] {
            for family in [IpFamily::Ipv4, IpFamily::Ipv6] {
                nodeport_rules.get_or_create_owned(&BackendFamilyLabel {
                    backend: backend.as_str(),
                    family: family.as_str(),
                });
            }
        }
        registry.register(
            "nodeport_rules",
            "NodePort rules the last scan read, by backend and IP family",
            nodeport_rules.clone(),
        );
        let listeners = Family::<ProtocolFamilyLabel, Gauge>::default();
        for (_, protocol, v6) in SOCKET_FILES {
            listeners.get_or_create_owned(&socket_label(protocol, v6));
        }
        registry.register(
            "listeners",
            "Listening sockets the last scan read, by protocol and IP family",
            listeners.clone(),
        );
        let kube_proxy_healthy = LastScan::new();
        kube_proxy_healthy.register(
            &mut registry,
            "kube_proxy_healthy",
            "1 when kube-proxy's /healthz answered 200 at the last scan, 0 when it did not; absent when not read",
            None,
        );
        let kube_proxy_sync_age = LastScan::new();
        kube_proxy_sync_age.register(
            &mut registry,
            "kube_proxy_last_sync_age",
            "How long before its answer kube-proxy last synced its rules, as its /healthz said at the last scan",
            Some(Unit::Seconds),
        );
        let kube_proxy_node_eligible = LastScan::new();
        kube_proxy_node_eligible.register(
            &mut registry,
            "kube_proxy_node_eligible",
            "kube-proxy's nodeEligible at the last scan (0 while the node is being deleted or tainted out)",
            None,
        );
        let coverage_complete = LastScan::new();
        coverage_complete.register(
            &mut registry,
            "coverage_complete",
            "1 when the last scan checked everything on complete inputs, 0 when something could not be checked (the coverage of /findings says what); absent before the first scan",
            None,
        );
        let coverage_not_checked = LastScan::new();
        coverage_not_checked.register(
            &mut registry,
            "coverage_not_checked",
            "How many things the last scan could not check (sentences in the coverage of /findings)",
            None,
        );
        let proxy_mode = LastScan::new();
        proxy_mode.register(
            &mut registry,
            "proxy_mode_info",
            "The Service proxy the last scan judged the node by (iptables, nftables, ipvs, replaced, none); always 1",
            None,
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
        let api_watch_synced = LastScan::new();
        api_watch_synced.register(
            &mut registry,
            "api_watch_synced",
            "1 when the watch's first complete list has been applied, by resource",
            None,
        );
        let api_watch_fresh = LastScan::new();
        api_watch_fresh.register(
            &mut registry,
            "api_watch_fresh",
            "1 when the watch is synced, not failing and recently heard from, by resource",
            None,
        );
        let api_watch_objects = LastScan::new();
        api_watch_objects.register(
            &mut registry,
            "api_watch_objects",
            "Objects in the watch's cache, by resource",
            None,
        );
        let api_watch_last_activity = LastScan::new();
        api_watch_last_activity.register(
            &mut registry,
            "api_watch_last_activity_timestamp",
            "When the API server was last heard from on this watch (Unix time; 0: never), by resource",
            Some(Unit::Seconds),
        );
        let api_watch_errors = Family::<ResourceLabel, Counter>::default();
        registry.register(
            "api_watch_errors",
            "Errors the watch met (it retries), by resource",
            api_watch_errors.clone(),
        );
        let kube_report = crate::agent::kube_report::ReportMetrics::register(&mut registry);
        Metrics {
            registry,
            findings,
            findings_by_backend,
            findings_by_severity,
            finding,
            findings_not_detailed,
            max_series,
            scans,
            scan_errors,
            scan_duration,
            scan_phase_duration,
            last_scan,
            source_up,
            nodeport_rules,
            listeners,
            kube_proxy_healthy,
            kube_proxy_sync_age,
            kube_proxy_node_eligible,
            coverage_complete,
            coverage_not_checked,
            proxy_mode,
            repairs,
            api_synced,
            api_fresh,
            api_watch_synced,
            api_watch_fresh,
            api_watch_objects,
            api_watch_last_activity,
            api_watch_errors,
            kube_report,
        }
    }

    /// Records a completed scan: its findings (every kind's gauge is set, 0 when none),
    /// how long it took, how each source went, what the node holds.
    pub fn scan_done(&self, report: &ScanReport, times: &ScanTimes, finished_unix: f64) {
        self.record_findings(&report.findings);
        self.record_sources(&report.sources);
        self.record_kube_proxy(report.kube_proxy.as_ref());
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

    fn record_findings(&self, findings: &[Finding]) {
        for kind in Kind::ALL {
            let n = findings.iter().filter(|f| f.kind == kind).count();
            self.findings
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
        let (shown, not_shown) = detail_series(findings, self.max_series);
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

    fn record_kube_proxy(&self, health: Option<&KubeProxyHealth>) {
        let one = |v: Option<i64>| v.map(|v| (NoLabels::new(), v));
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

fn socket_label(protocol: Protocol, v6: bool) -> ProtocolFamilyLabel {
    ProtocolFamilyLabel {
        protocol: protocol.as_str(),
        family: if v6 { IpFamily::Ipv6 } else { IpFamily::Ipv4 }.as_str(),
    }
}

/// How often each label set occurs.
fn tally<L: Hash + Eq>(labels: impl Iterator<Item = L>) -> Vec<(L, i64)> {
    let mut counts: std::collections::HashMap<L, i64> = std::collections::HashMap::new();
    for l in labels {
        *counts.entry(l).or_default() += 1;
    }
    counts.into_iter().collect()
}

/// The per-finding series: at most `max` label sets, chosen most severe first, then by
/// port, kind, protocol, service and backend, so the same findings always get the same
/// series; and how many findings were left out.
fn detail_series(findings: &[Finding], max: usize) -> (Vec<(FindingLabel, i64)>, usize) {
    let mut by_label: BTreeMap<(Severity, u16, FindingLabel), i64> = BTreeMap::new();
    for f in findings {
        // A finding without a port (node-wide) sorts after every port.
        let port_order = f.port.unwrap_or(u16::MAX);
        *by_label
            .entry((f.severity, port_order, finding_label(f)))
            .or_default() += 1;
    }
    let mut shown = Vec::new();
    let mut not_shown = 0;
    for ((_, _, label), n) in by_label {
        if shown.len() < max {
            shown.push((label, n));
        } else {
            not_shown += usize::try_from(n).unwrap_or(usize::MAX);
        }
    }
    (shown, not_shown)
}

fn finding_label(f: &Finding) -> FindingLabel {
    FindingLabel {
        kind: f.kind.as_str(),
        severity: f.severity.as_str(),
        protocol: f.protocol.map_or("", Protocol::as_str),
        port: f.port.map(|p| p.to_string()).unwrap_or_default(),
        service: f.service.clone().unwrap_or_default(),
        backend: f.backend.map_or(NO_BACKEND, Backend::as_str),
    }
}

/// `Content-Type` of [`Metrics::encode_text`].
pub const TEXT_CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;
/// `Content-Type` of [`Metrics::encode_openmetrics`].
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests;
