//! `portdrift_kube_proxy_*`: what kube-proxy's `/healthz` and `/proxyMode` said at the
//! last scan, and whether it answered at all.

use std::sync::atomic::AtomicU64;

use prometheus_client::registry::Unit;

use super::described::Described;
use super::labels::{NoLabels, SourceLabel};
use super::last_scan::LastScanGauge;
use crate::heart::input::Input;
use crate::heart::observed::{KubeProxyAnswered, KubeProxyHealth};

pub(super) struct KubeProxyMetrics {
    healthy: LastScanGauge<NoLabels>,
    reachable: LastScanGauge<SourceLabel>,
    sync_age: LastScanGauge<NoLabels, f64, AtomicU64>,
    node_eligible: LastScanGauge<NoLabels>,
}

/// The one series of a family without labels, or none.
fn one<N>(value: Option<N>) -> Option<(NoLabels, N)> {
    value.map(|v| (NoLabels::new(), v))
}

impl KubeProxyMetrics {
    pub(super) fn register(registry: &mut Described<'_>) -> KubeProxyMetrics {
        let healthy = LastScanGauge::register(
            registry,
            "kube_proxy_healthy",
            "1 when kube-proxy's /healthz answered 200 at the last scan, 0 when it answered otherwise; absent when it gave no answer (see portdrift_kube_proxy_reachable) or was not asked",
            None,
        );
        let reachable = LastScanGauge::register(
            registry,
            "kube_proxy_reachable",
            "1 when kube-proxy gave an HTTP answer of any status at the last scan, 0 when nothing answered (refused, timed out, not HTTP); by source as the report names it: kube-proxy-healthz.json (its /healthz, --kube-proxy-healthz), kube-proxy-mode.txt (its /proxyMode, --kube-proxy-metrics); absent when it is not asked (off)",
            None,
        );
        let sync_age = LastScanGauge::register(
            registry,
            "kube_proxy_last_sync_age",
            "How long before its answer kube-proxy last synced its rules, as its /healthz said at the last scan",
            Some(Unit::Seconds),
        );
        let node_eligible = LastScanGauge::register(
            registry,
            "kube_proxy_node_eligible",
            "kube-proxy's nodeEligible at the last scan (0 while the node is being deleted or tainted out)",
            None,
        );
        KubeProxyMetrics {
            healthy,
            reachable,
            sync_age,
            node_eligible,
        }
    }

    /// What the last scan heard from kube-proxy; a series it did not hear is removed.
    pub(super) fn record(&self, health: Option<&KubeProxyHealth>, answered: KubeProxyAnswered) {
        self.reachable.replace(
            // Named as the report's sources table and portdrift_source_up name them.
            [
                (Input::KubeProxyHealthz, answered.healthz),
                (Input::KubeProxyMode, answered.proxy_mode),
            ]
            .into_iter()
            .filter_map(|(source, answered)| {
                Some((
                    SourceLabel {
                        source: source.name().into(),
                    },
                    i64::from(answered?),
                ))
            }),
        );
        self.healthy.replace(one(health.map(|h| i64::from(h.healthy))));
        self.node_eligible
            .replace(one(health.and_then(|h| h.node_eligible).map(i64::from)));
        self.sync_age.replace(one(health
            .and_then(|h| h.since_last_update)
            .map(|age| age.as_secs_f64())));
    }
}
