//! Every metric created and registered under its name and help.

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use super::described::Described;
use super::labels::{
    BackendFamilyLabel, BuildLabel, KindLabel, PhaseLabel, ProtocolFamilyLabel, ResourceLabel, ResultLabel,
    SourceLabel, socket_label,
};
use super::last_scan::LastScan;
use super::{Metrics, REPAIR_RESULTS, SCAN_ERROR_SOURCES, ScanTimes};
use crate::heart::finding::Kind;
use crate::heart::model::{Backend, Family as IpFamily};
use crate::heart::observed::SOCKET_FILES;

/// 1 ms .. ~65 s: from a small node's scan to the dump of a large node's rules.
fn scan_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 4.0, 9))
}

impl Metrics {
    /// The metrics with at most `max_series` per-finding series (0: none).
    pub fn with_max_series(max_series: usize) -> Metrics {
        // The agent's own metrics under portdrift_; process_* as Go exporters name them.
        let mut root = Registry::default();
        root.register_collector(Box::new(super::process::ProcessCollector));
        let mut docs = super::process::process_docs();
        let mut registry = Described::new(root.sub_registry_with_prefix("portdrift"), "portdrift", &mut docs);
        let findings = Family::<KindLabel, Gauge>::default();
        for kind in Kind::ALL {
            findings.get_or_create_owned(&KindLabel { kind: kind.as_str() });
        }
        registry.add(
            "findings",
            "Findings of the last scan, by kind",
            None,
            &["kind"],
            findings.clone(),
        );
        let findings_accepted = Family::<KindLabel, Gauge>::default();
        for kind in Kind::ALL {
            findings_accepted.get_or_create_owned(&KindLabel { kind: kind.as_str() });
        }
        registry.add(
            "findings_accepted",
            "Findings of the last scan accepted as exceptions (an acceptances file, a Service's portdrift.io/accept), by kind; in no other findings series",
            None,
            &["kind"],
            findings_accepted.clone(),
        );
        let findings_by_backend = LastScan::new();
        findings_by_backend.register(
            &mut registry,
            "findings_by_backend",
            "Findings of the last scan, by kind and backend (none: not about one backend); only non-zero ones",
            None, &["kind", "backend"],
        );
        let findings_by_severity = LastScan::new();
        findings_by_severity.register(
            &mut registry,
            "findings_by_severity",
            "Findings of the last scan, by kind and severity; only non-zero ones",
            None,
            &["kind", "severity"],
        );
        let finding = LastScan::new();
        finding.register(
            &mut registry,
            "finding",
            "Findings of the last scan with these labels (usually 1), most severe first, up to --metrics-max-series",
            None, &["kind", "severity", "protocol", "port", "service", "backend"],
        );
        let findings_not_detailed = Gauge::default();
        registry.add(
            "findings_not_detailed",
            "Findings of the last scan left out of portdrift_finding by --metrics-max-series",
            None,
            &[],
            findings_not_detailed.clone(),
        );
        // No `_total` here: the encoder adds it (and debug builds panic on it).
        let scans = Counter::default();
        registry.add("scans", "Scans completed", None, &[], scans.clone());
        let scan_errors = Family::<SourceLabel, Counter>::default();
        for source in SCAN_ERROR_SOURCES {
            scan_errors.get_or_create_owned(&SourceLabel {
                source: source.into(),
            });
        }
        registry.add(
            "scan_errors",
            "Scans that could not read a source, by source",
            None,
            &["source"],
            scan_errors.clone(),
        );
        let scan_duration = scan_histogram();
        registry.add(
            "scan_duration",
            "How long a scan took",
            Some(Unit::Seconds),
            &[],
            scan_duration.clone(),
        );
        let scan_phase_duration =
            Family::<PhaseLabel, Histogram, fn() -> Histogram>::new_with_constructor(scan_histogram);
        for (phase, _) in ScanTimes::default().phases() {
            scan_phase_duration.get_or_create_owned(&PhaseLabel { phase });
        }
        registry.add(
            "scan_phase_duration",
            "How long each phase of a scan took (read-node, build-desired, detect)",
            Some(Unit::Seconds),
            &["phase"],
            scan_phase_duration.clone(),
        );
        let last_scan = Gauge::<f64, AtomicU64>::default();
        registry.add(
            "last_scan_timestamp",
            "When the last successful scan finished (Unix time)",
            Some(Unit::Seconds),
            &[],
            last_scan.clone(),
        );
        let source_up = LastScan::new();
        source_up.register(
            &mut registry,
            "source_up",
            "1 when the last scan could read the source (or it is absent on this node), 0 when reading it failed",
            None, &["source"],
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
        registry.add(
            "nodeport_rules",
            "NodePort rules the last scan read, by backend and IP family",
            None,
            &["backend", "family"],
            nodeport_rules.clone(),
        );
        let listeners = Family::<ProtocolFamilyLabel, Gauge>::default();
        for (_, protocol, v6) in SOCKET_FILES {
            listeners.get_or_create_owned(&socket_label(protocol, v6));
        }
        registry.add(
            "listeners",
            "Listening sockets the last scan read, by protocol and IP family",
            None,
            &["protocol", "family"],
            listeners.clone(),
        );
        let kube_proxy_healthy = LastScan::new();
        kube_proxy_healthy.register(
            &mut registry,
            "kube_proxy_healthy",
            "1 when kube-proxy's /healthz answered 200 at the last scan, 0 when it answered otherwise; absent when it gave no answer (see portdrift_kube_proxy_reachable) or was not asked",
            None, &[],
        );
        let kube_proxy_reachable = LastScan::new();
        kube_proxy_reachable.register(
            &mut registry,
            "kube_proxy_reachable",
            "1 when kube-proxy gave an HTTP answer of any status at the last scan, 0 when nothing answered (refused, timed out, not HTTP); by source as the report names it: kube-proxy-healthz.json (its /healthz, --kube-proxy-healthz), kube-proxy-mode.txt (its /proxyMode, --kube-proxy-metrics); absent when it is not asked (off)",
            None, &["source"],
        );
        let kube_proxy_sync_age = LastScan::new();
        kube_proxy_sync_age.register(
            &mut registry,
            "kube_proxy_last_sync_age",
            "How long before its answer kube-proxy last synced its rules, as its /healthz said at the last scan",
            Some(Unit::Seconds), &[],
        );
        let kube_proxy_node_eligible = LastScan::new();
        kube_proxy_node_eligible.register(
            &mut registry,
            "kube_proxy_node_eligible",
            "kube-proxy's nodeEligible at the last scan (0 while the node is being deleted or tainted out)",
            None,
            &[],
        );
        let coverage_complete = LastScan::new();
        coverage_complete.register(
            &mut registry,
            "coverage_complete",
            "1 when the last scan checked everything on complete inputs, 0 when something could not be checked (the coverage of /findings says what); absent before the first scan",
            None, &[],
        );
        let coverage_not_checked = LastScan::new();
        coverage_not_checked.register(
            &mut registry,
            "coverage_not_checked",
            "How many things the last scan could not check (sentences in the coverage of /findings)",
            None,
            &[],
        );
        let proxy_mode = LastScan::new();
        proxy_mode.register(
            &mut registry,
            "proxy_mode_info",
            "The Service proxy the last scan judged the node by (iptables, nftables, ipvs, replaced, none); always 1",
            None, &["mode"],
        );
        let repairs = Family::<ResultLabel, Counter>::default();
        for result in REPAIR_RESULTS {
            repairs.get_or_create_owned(&ResultLabel { result });
        }
        registry.add(
            "repairs",
            "Repair actions, by result",
            None,
            &["result"],
            repairs.clone(),
        );
        let build_info = Family::<BuildLabel, ConstGauge>::new_with_constructor(|| ConstGauge::new(1));
        drop(build_info.get_or_create(&BuildLabel {
            version: env!("CARGO_PKG_VERSION"),
            revision: crate::REVISION,
            rustc_version: crate::RUSTC_VERSION,
        }));
        registry.add(
            "build_info",
            "portdrift's version, the git revision and the compiler it was built from (always 1)",
            None,
            &["version", "revision", "rustc_version"],
            build_info,
        );
        let api_synced = Gauge::default();
        registry.add(
            "api_synced",
            "1 when the API watch caches hold a complete list",
            None,
            &[],
            api_synced.clone(),
        );
        let api_fresh = Gauge::default();
        registry.add(
            "api_fresh",
            "1 when the API watches are synced and recently heard from",
            None,
            &[],
            api_fresh.clone(),
        );
        let api_watch_synced = LastScan::new();
        api_watch_synced.register(
            &mut registry,
            "api_watch_synced",
            "1 when the watch's first complete list has been applied, by resource",
            None,
            &["resource"],
        );
        let api_watch_fresh = LastScan::new();
        api_watch_fresh.register(
            &mut registry,
            "api_watch_fresh",
            "1 when the watch is synced, not failing and recently heard from, by resource",
            None,
            &["resource"],
        );
        let api_watch_objects = LastScan::new();
        api_watch_objects.register(
            &mut registry,
            "api_watch_objects",
            "Objects in the watch's cache, by resource",
            None,
            &["resource"],
        );
        let api_watch_last_activity = LastScan::new();
        api_watch_last_activity.register(
            &mut registry,
            "api_watch_last_activity_timestamp",
            "When the API server was last heard from on this watch (Unix time; 0: never), by resource",
            Some(Unit::Seconds),
            &["resource"],
        );
        let api_watch_errors = Family::<ResourceLabel, Counter>::default();
        registry.add(
            "api_watch_errors",
            "Errors the watch met (it retries), by resource",
            None,
            &["resource"],
            api_watch_errors.clone(),
        );
        let kube_report = crate::agent::kube_report::ReportMetrics::register(&mut registry);
        docs.sort_by(|a, b| a.name.cmp(&b.name));
        Metrics {
            registry: root,
            findings,
            findings_accepted,
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
            kube_proxy_reachable,
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
            docs,
        }
    }
}
