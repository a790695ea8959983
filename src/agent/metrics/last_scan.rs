//! Gauge families that describe the last scan only.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::Mutex;

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Unit;

use super::described::Described;
use super::labels::LabelNames;

/// A gauge family whose series describe the last scan only: each update sets the new
/// series and then removes those the update did not set (in that order, so a scrape in
/// between sees one scan's series or both, never a gap).
#[derive(Debug)]
pub(super) struct LastScanGauge<L: Clone + Hash + Eq, N = i64, A = std::sync::atomic::AtomicI64> {
    family: Family<L, Gauge<N, A>>,
    shown: Mutex<HashSet<L>>,
}

impl<L, N, A> LastScanGauge<L, N, A>
where
    L: Clone + Hash + Eq + EncodeLabelSet + LabelNames + std::fmt::Debug + Send + Sync + 'static,
    Gauge<N, A>: Default + EncodeMetric + std::fmt::Debug + Send + Sync + 'static,
    A: prometheus_client::metrics::gauge::Atomic<N>,
{
    /// A family without series, registered as `name`.
    pub(super) fn register(registry: &mut Described<'_>, name: &str, help: &str, unit: Option<Unit>) -> Self {
        let family = Family::default();
        registry.add(name, help, unit, family.clone());
        LastScanGauge {
            family,
            shown: Mutex::new(HashSet::new()),
        }
    }

    pub(super) fn replace(&self, values: impl IntoIterator<Item = (L, N)>) {
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
