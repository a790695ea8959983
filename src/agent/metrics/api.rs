//! `portdrift_api_*`: the API view's state, and each API watch's.

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Unit;

use super::count;
use super::described::Described;
use super::labels::ResourceLabel;
use super::last_scan::LastScanGauge;
use crate::agent::watch::{ViewStatus, WatchStatus};

pub(super) struct ApiMetrics {
    synced: Gauge,
    fresh: Gauge,
    watch_synced: LastScanGauge<ResourceLabel>,
    watch_fresh: LastScanGauge<ResourceLabel>,
    watch_objects: LastScanGauge<ResourceLabel>,
    watch_last_activity: LastScanGauge<ResourceLabel, f64, AtomicU64>,
    watch_errors: Family<ResourceLabel, Counter>,
}

impl ApiMetrics {
    pub(super) fn register(registry: &mut Described<'_>) -> ApiMetrics {
        let synced = Gauge::default();
        registry.add(
            "api_synced",
            "1 when the API watch caches hold a complete list",
            None,
            synced.clone(),
        );
        let fresh = Gauge::default();
        registry.add(
            "api_fresh",
            "1 when the API watches are synced and recently heard from",
            None,
            fresh.clone(),
        );
        let watch_synced = LastScanGauge::register(
            registry,
            "api_watch_synced",
            "1 when the watch's first complete list has been applied, by resource",
            None,
        );
        let watch_fresh = LastScanGauge::register(
            registry,
            "api_watch_fresh",
            "1 when the watch is synced, not failing and recently heard from, by resource",
            None,
        );
        let watch_objects = LastScanGauge::register(
            registry,
            "api_watch_objects",
            "Objects in the watch's cache, by resource",
            None,
        );
        let watch_last_activity = LastScanGauge::register(
            registry,
            "api_watch_last_activity_timestamp",
            "When the API server was last heard from on this watch (Unix time; 0: never), by resource",
            Some(Unit::Seconds),
        );
        let watch_errors = Family::default();
        registry.add(
            "api_watch_errors",
            "Errors the watch met (it retries), by resource",
            None,
            watch_errors.clone(),
        );
        ApiMetrics {
            synced,
            fresh,
            watch_synced,
            watch_fresh,
            watch_objects,
            watch_last_activity,
            watch_errors,
        }
    }

    pub(super) fn set_view(&self, synced: bool, fresh: bool) {
        self.synced.set(i64::from(synced));
        self.fresh.set(i64::from(fresh));
    }

    pub(super) fn set_watches(&self, status: &ViewStatus, now_unix: f64) {
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
        self.watch_synced.replace(each(|w| i64::from(w.synced)));
        self.watch_fresh.replace(each(|w| i64::from(w.fresh)));
        self.watch_objects.replace(each(|w| count(w.objects)));
        self.watch_last_activity
            .replace(watches.iter().map(|(resource, w)| {
                let heard = w
                    .since_last_activity
                    .map_or(0.0, |ago| (now_unix - ago.as_secs_f64()).max(0.0));
                (ResourceLabel { resource }, heard)
            }));
        for (resource, w) in &watches {
            let counter = self.watch_errors.get_or_create(&ResourceLabel { resource });
            // The view counts its errors; the counter follows it.
            counter.inc_by(w.errors.saturating_sub(counter.get()));
        }
    }
}
