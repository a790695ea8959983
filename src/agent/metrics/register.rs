//! Every metric created and registered under its name and help, each subsystem's by its
//! own part, in the order the exposition lists them.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use super::REPAIR_RESULTS;
use super::api::ApiMetrics;
use super::coverage::CoverageMetrics;
use super::described::Described;
use super::findings::FindingMetrics;
use super::kube_proxy::KubeProxyMetrics;
use super::labels::{BuildLabel, ResultLabel};
use super::scans::ScanMetrics;
use super::series::at_zero;
use super::sources::SourceMetrics;
use super::{Metrics, process};
use crate::agent::kube_report::ReportMetrics;

impl Metrics {
    /// The metrics with at most `max_series` per-finding series (0: none).
    pub fn with_max_series(max_series: usize) -> Metrics {
        // The agent's own metrics under portdrift_; process_* as Go exporters name them.
        let mut root = Registry::default();
        root.register_collector(Box::new(process::ProcessCollector));
        let mut docs = process::process_docs();
        let mut registry = Described::new(root.sub_registry_with_prefix("portdrift"), "portdrift", &mut docs);
        let findings = FindingMetrics::register(&mut registry, max_series);
        let scans = ScanMetrics::register(&mut registry);
        let sources = SourceMetrics::register(&mut registry);
        let kube_proxy = KubeProxyMetrics::register(&mut registry);
        let coverage = CoverageMetrics::register(&mut registry);
        let repairs = register_repairs(&mut registry);
        register_build_info(&mut registry);
        let api = ApiMetrics::register(&mut registry);
        let kube_report = ReportMetrics::register(&mut registry);
        docs.sort_by(|a, b| a.name.cmp(&b.name));
        Metrics {
            registry: root,
            docs,
            findings,
            scans,
            sources,
            kube_proxy,
            coverage,
            repairs,
            api,
            kube_report,
        }
    }
}

/// Registered with every result at zero so dashboards see zeros before a repair runs.
fn register_repairs(registry: &mut Described<'_>) -> Family<ResultLabel, Counter> {
    let repairs = at_zero(
        Family::default(),
        REPAIR_RESULTS.map(|result| ResultLabel { result }),
    );
    registry.add("repairs", "Repair actions, by result", None, repairs.clone());
    repairs
}

fn register_build_info(registry: &mut Described<'_>) {
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
        build_info,
    );
}
