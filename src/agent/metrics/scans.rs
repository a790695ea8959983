//! `portdrift_scan*` and `portdrift_last_scan_timestamp_seconds`: how many scans ran,
//! which sources they could not read, and how long they and their phases took.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Unit;

use super::SCAN_ERROR_SOURCES;
use super::described::Described;
use super::labels::{PhaseLabel, SourceLabel};
use super::series::at_zero;

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

/// 1 ms .. ~65 s: from a small node's scan to the dump of a large node's rules.
fn scan_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 4.0, 9))
}

pub(super) struct ScanMetrics {
    scans: Counter,
    errors: Family<SourceLabel, Counter>,
    duration: Histogram,
    phase_duration: Family<PhaseLabel, Histogram, fn() -> Histogram>,
    last_scan: Gauge<f64, AtomicU64>,
}

impl ScanMetrics {
    pub(super) fn register(registry: &mut Described<'_>) -> ScanMetrics {
        // No `_total` here: the encoder adds it (and debug builds panic on it).
        let scans = Counter::default();
        registry.add("scans", "Scans completed", None, scans.clone());
        let errors = at_zero(
            Family::default(),
            SCAN_ERROR_SOURCES.map(|source| SourceLabel {
                source: source.into(),
            }),
        );
        registry.add(
            "scan_errors",
            "Scans that could not read a source, by source",
            None,
            errors.clone(),
        );
        let duration = scan_histogram();
        registry.add(
            "scan_duration",
            "How long a scan took",
            Some(Unit::Seconds),
            duration.clone(),
        );
        let phase_duration = at_zero(
            Family::new_with_constructor(scan_histogram as fn() -> Histogram),
            ScanTimes::default()
                .phases()
                .map(|(phase, _)| PhaseLabel { phase }),
        );
        registry.add(
            "scan_phase_duration",
            "How long each phase of a scan took (read-node, build-desired, detect)",
            Some(Unit::Seconds),
            phase_duration.clone(),
        );
        let last_scan = Gauge::<f64, AtomicU64>::default();
        registry.add(
            "last_scan_timestamp",
            "When the last successful scan finished (Unix time)",
            Some(Unit::Seconds),
            last_scan.clone(),
        );
        ScanMetrics {
            scans,
            errors,
            duration,
            phase_duration,
            last_scan,
        }
    }

    /// A completed scan: how long it and each phase took, and when it finished.
    pub(super) fn record(&self, times: &ScanTimes, finished_unix: f64) {
        self.scans.inc();
        self.duration.observe(times.total.as_secs_f64());
        for (phase, took) in times.phases() {
            self.phase_duration
                .get_or_create(&PhaseLabel { phase })
                .observe(took.as_secs_f64());
        }
        self.last_scan.set(finished_unix);
    }

    /// A scan that could not read `source`, a label of a bounded set.
    pub(super) fn failed(&self, source: &'static str) {
        self.errors
            .get_or_create(&SourceLabel {
                source: source.into(),
            })
            .inc();
    }
}
