//! `process_*`: the agent's own CPU, memory, file descriptors, start time and threads,
//! read from `/proc/self` at each scrape, named as every Go exporter names them so the
//! same dashboards and alerts work.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

use super::described::{MetricDoc, metric_doc};
use crate::sources::self_usage::process_stats;

/// The CPU counter's name and help; the gauges' are in [`GAUGES`].
const CPU: (&str, &str) = ("process_cpu", "Total user and system CPU time spent in seconds.");

/// Each gauge's name, help and unit, in the order they are encoded.
const GAUGES: [(&str, &str, Option<Unit>); 6] = [
    (
        "process_resident_memory",
        "Resident memory size in bytes.",
        Some(Unit::Bytes),
    ),
    (
        "process_virtual_memory",
        "Virtual memory size in bytes.",
        Some(Unit::Bytes),
    ),
    (
        "process_start_time",
        "Start time of the process since unix epoch in seconds.",
        Some(Unit::Seconds),
    ),
    ("process_open_fds", "Number of open file descriptors.", None),
    (
        "process_max_fds",
        "Maximum number of open file descriptors.",
        None,
    ),
    ("process_threads", "Number of OS threads in the process.", None),
];

/// The reference's entries for what the collector encodes.
pub(super) fn process_docs() -> Vec<MetricDoc> {
    let cpu = metric_doc("", CPU.0, CPU.1, Some(&Unit::Seconds), "counter", &[]);
    let gauges = GAUGES
        .iter()
        .map(|(name, help, unit)| metric_doc("", name, help, unit.as_ref(), "gauge", &[]));
    std::iter::once(cpu).chain(gauges).collect()
}

#[derive(Debug)]
pub(super) struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // Without /proc/self (not Linux) there is nothing to say.
        let Some(p) = process_stats() else { return Ok(()) };
        let cpu = ConstCounter::new(p.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(CPU.0, CPU.1, Some(&Unit::Seconds), cpu.metric_type())?)?;
        let values = [
            Some(p.resident_bytes as f64),
            Some(p.virtual_bytes as f64),
            Some(p.start_time_seconds),
            p.open_fds.map(|n| n as f64),
            p.max_fds.map(|n| n as f64),
            Some(p.threads as f64),
        ];
        for ((name, help, unit), value) in GAUGES.iter().zip(values) {
            let Some(value) = value else { continue };
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, unit.as_ref(), gauge.metric_type())?)?;
        }
        Ok(())
    }
}
