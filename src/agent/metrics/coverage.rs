//! `portdrift_coverage_*` and `portdrift_proxy_mode_info`: whether the last scan could
//! check everything, and the Service proxy it judged the node by.

use super::count;
use super::described::Described;
use super::labels::{ModeLabel, NoLabels};
use super::last_scan::LastScanGauge;
use crate::heart::coverage::Coverage;

pub(super) struct CoverageMetrics {
    complete: LastScanGauge<NoLabels>,
    not_checked: LastScanGauge<NoLabels>,
    proxy_mode: LastScanGauge<ModeLabel>,
}

impl CoverageMetrics {
    pub(super) fn register(registry: &mut Described<'_>) -> CoverageMetrics {
        let complete = LastScanGauge::register(
            registry,
            "coverage_complete",
            "1 when the last scan checked everything on complete inputs, 0 when something could not be checked (the coverage of /findings says what); absent before the first scan",
            None,
        );
        let not_checked = LastScanGauge::register(
            registry,
            "coverage_not_checked",
            "How many things the last scan could not check (sentences in the coverage of /findings)",
            None,
        );
        let proxy_mode = LastScanGauge::register(
            registry,
            "proxy_mode_info",
            "The Service proxy the last scan judged the node by (iptables, nftables, ipvs, replaced, none); always 1",
            None,
        );
        CoverageMetrics {
            complete,
            not_checked,
            proxy_mode,
        }
    }

    pub(super) fn record(&self, coverage: &Coverage) {
        self.complete
            .replace([(NoLabels::new(), i64::from(coverage.complete))]);
        self.not_checked
            .replace([(NoLabels::new(), count(coverage.not_checked.len()))]);
        self.proxy_mode.replace([(
            ModeLabel {
                mode: coverage.proxy_mode.as_str(),
            },
            1,
        )]);
    }
}
